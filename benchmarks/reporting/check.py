"""The JSON schema check of the smoke tests (CPU stand-in): the file parses,
every series or result is measured or skipped with a reason, none carries an
error (a failed data check), verdicts follow from their ratios. No timing is
asserted."""
import csv
import json

from . import data as D


class Bad(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Bad(msg)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def measured_or_skipped(e, what):
    """True when measured; a skip needs its reason, an error fails."""
    need("error" not in e, f"{what}: {e.get('error')}")
    if "skipped" in e:
        need(isinstance(e["skipped"], str) and e["skipped"], f"{what}: 'skipped' must be a non-empty reason")
        return False
    return True


def points(pts, what, keys):
    need(pts, f"{what}: no points")
    sizes = [p.get("size") for p in pts]
    need(sizes == sorted(sizes) and len(set(sizes)) == len(sizes), f"{what}: sizes are not increasing: {sizes}")
    for p in pts:
        for k in keys:
            need(positive(p.get(k)), f"{what}: point {p.get('size')} has no positive {k}")


def goals(d, what, subject_over_anchor):
    """vmmipc_setup: ratio = subject / anchor, PASS when <= target;
    vmmipc_sync: ratio = anchor / subject, PASS when >= target."""
    need(d.get("goals"), "no goals")
    for g in d["goals"]:
        w = f"goal {g.get('id')}" + ("" if subject_over_anchor else f"/{g.get('mode')}")
        v, r, t = g.get("verdict"), g.get("ratio"), g.get("target")
        need(v in ("PASS", "FAIL", "n/a"), f"{w}: verdict {v!r}")
        need(positive(t) and (not subject_over_anchor or g.get("compare") == "<="), f"{w}: no target or comparison")
        if v == "n/a":
            need(g.get("reason"), f"{w}: n/a without a reason")
            continue
        need(positive(r) and positive(g.get("subject_s")) and positive(g.get("anchor_s")),
             f"{w}: {v} without a measured ratio")
        want = g["subject_s"] / g["anchor_s"] if subject_over_anchor else g["anchor_s"] / g["subject_s"]
        need(abs(r - want) <= 1e-6 * r, f"{w}: ratio {r} does not follow from subject_s and anchor_s")
        need(((r <= t) if subject_over_anchor else (r >= t)) == (v == "PASS"),
             f"{w}: verdict {v} does not follow from ratio {r} and target {t}")


def check_bw(d, require):
    need(d.get("series"), "no series")
    measured = {s.get("name") for s in d["series"] if measured_or_skipped(s, s.get("name", "?"))}
    for s in d["series"]:
        if s.get("name") in measured:
            points(s.get("points"), s["name"], ("size", "iters", "seconds", "gbps", "mbps"))
    names = {s.get("name") for s in d["series"]}
    for n in ("vmmipc.ce.read.uni", "vmmipc.ce.write.uni"):
        need(n not in names or n in measured, f"{n} was not measured")
    n = d.get("ranks")
    for m in d.get("matrices", []):
        if not measured_or_skipped(m, m.get("name", "matrix")):
            continue
        rows = m.get("gbps")
        need(rows and len(rows) == n and all(len(r) == n for r in rows), f"matrix {m.get('name')}: not {n} x {n}")
        for i, r in enumerate(rows):
            for j, v in enumerate(r):
                need((i == j) == (v is None) and (v is None or positive(v)),
                     f"matrix {m.get('name')}: bad entry [{i}][{j}] = {v}")
    return len(measured)


def check_setup(d, require, incomplete):
    if incomplete:  # a run stopped by --time-limit: it says so, and is still whole
        need("time-limit" in str(d.get("incomplete", "")), "expected an 'incomplete' reason from --time-limit")
        for g in d.get("goals", []):
            need(g.get("verdict") == "n/a" and g.get("reason"),
                 f"goal {g.get('id')}: nothing was measured, so it must be n/a with a reason")
        return sum(1 for r in d.get("results", []) if "stats" in r)
    if "skipped" in d:  # a launch run-gpu.sh could not make (one GPU, deadline)
        measured_or_skipped(d, "vmmipc_setup")
        return 0
    res = d.get("results")
    need(res, "no results")
    need(positive(d.get("gpus")) and positive(d.get("ranks_per_gpu")), "no positive gpus or ranks_per_gpu")
    need(isinstance(d.get("placement"), str), "no placement")
    n = 0
    for r in res:
        w = f"{r.get('coll')}/{r.get('method')}/{r.get('size')}x{r.get('chunks')}"
        for k in ("coll", "method", "size", "chunks", "chunk_size"):
            need(k in r, f"{w}: no {k}")
        if not measured_or_skipped(r, w):
            continue
        need(positive(r.get("reps")), f"{w}: no reps")
        need(positive(r["first"].get("wall")) and positive(r["stats"]["wall"].get("median")), f"{w}: no wall time")
        need(len(r.get("wall_samples", [])) == r["reps"], f"{w}: {len(r.get('wall_samples', []))} samples for "
             f"{r['reps']} reps")
        if r["method"].startswith("vmmipc") and r["coll"] != "allgather_desc":
            k = r.get("cache")
            need(isinstance(k, dict) and all(isinstance(k.get(x), int) and k[x] >= 0
                                             for x in ("first_hits", "first_misses", "hits", "misses")),
                 f"{w}: no cache counters")
            # Issue 21: a hit travels without fds (2+ ranks on a node).
            if isinstance(k, dict) and r["method"] == "vmmipc_again" and (k.get("hits") or 0) > 0:
                need(k.get("fds_not_sent", 0) > 0, f"{w}: {k['hits']} cache hits, but no fd was left out (fds_not_sent 0)")
        n += 1
    need({r["coll"] for r in res if r["method"] == "vmmipc" and "skipped" not in r} - {"allgather_desc"},
         "no vmmipc collective was measured")
    cfg = d.get("config", {})
    mapped = {r["method"] for r in res if "stats" in r and r["coll"] != "allgather_desc"}
    for mode, method in (("first", "vmmipc"), ("again", "vmmipc_again")):
        need(not cfg.get(mode) or method in mapped, f"--modes has {mode} but no {method} row was measured")
    if cfg.get("first") or cfg.get("again"):
        need(any(r["coll"] == "allgather_desc" and "stats" in r for r in res),
             "no allgather_desc(NULL) row (the agreement alone)")
        need(positive((d.get("comm_first_window") or {}).get("wall")), "no comm_first_window wall time")
    for m in require:
        need(m in mapped, f"method {m} was not measured")
    goals(d, "setup", True)
    return n


def latency_entry(e, what):
    for k in ("name", "mode", "what", "timer"):
        need(isinstance(e.get(k), str) and e[k], f"{what}: no {k}")
    need(e["timer"] in ("cuda_events", "host_clock"), f"{what}: unknown timer {e['timer']!r}")
    if not measured_or_skipped(e, what):
        return False
    need(positive(e.get("iters")) and positive(e.get("reps")), f"{what}: no positive iters or reps")
    st = e.get("stats") or {}
    for k in ("median", "p10", "p90", "min", "max"):
        need(positive(st.get(k)), f"{what}: stats has no positive {k}")
    need(st["min"] <= st["p10"] <= st["median"] <= st["p90"] <= st["max"], f"{what}: stats out of order: {st}")
    s = e.get("samples", [])
    need(len(s) == e["reps"] and all(map(positive, s)),
         f"{what}: {len(s)} samples for {e['reps']} reps, or a sample that is not positive")
    return True


def latencies(d):
    return {e["name"] for e in d["latency"] if latency_entry(e, f"latency {e.get('name')}/{e.get('mode')}")}


def check_sync(d, require):
    need(positive(d.get("ranks")) and positive(d.get("gpus")), "no positive ranks or gpus")
    need(isinstance(d.get("placement"), str), "no placement")
    need(not d.get("standin") or d.get("warning"), "a stand-in run must say that its numbers are meaningless "
         "('warning')")
    need("error" not in d, d.get("error"))
    need(d.get("latency"), "no latency entries")
    n = len(latencies(d))
    for s in d.get("bandwidth", []):
        w = f"bandwidth {s.get('name')}/{s.get('mode')}"
        if measured_or_skipped(s, w):
            points(s.get("points"), w, ("size", "iters", "reps", "seconds", "gbps"))
            n += len(s["points"])
    goals(d, "sync", False)
    return n


def check_tbar(d, require):
    need(d.get("latency") is not None, "no latency list")
    if "skipped" in d:
        measured_or_skipped(d, "torch_barrier")
        return 0
    return len(latencies(d))


def check_devbench(d, require):
    """vmmipc_device_bench, vmmipc_floor_bench, nvshmem_bench (common/devbench.cuh): every row measured or
    skipped with its reason; a MISMATCH fails, except in the floors, where it is a finding about a variant."""
    if "skipped" in d:  # a launch that could not run (wave4.sh writes why: NVSHMEM refused, not built)
        measured_or_skipped(d, d.get("benchmark"))
        return 0
    need(positive(d.get("ranks")) and isinstance(d.get("gpus"), int), "no positive ranks or gpus")
    need(d.get("mps") in (True, False, None), f"mps must be true, false or null, not {d.get('mps')!r}")
    need(isinstance(d.get("rows"), list) and d["rows"], "no rows")
    n = 0
    for r in d["rows"]:
        w = f"row {r.get('name')}/{r.get('path')}" + (f"/{r['bytes']} B" if "bytes" in r else "")
        need(isinstance(r.get("name"), str) and r["name"] and isinstance(r.get("path"), str), f"{w}: no name or path")
        if not measured_or_skipped(r, w):
            continue
        st = r.get("stats") or {}
        for k in ("median", "p10", "p90", "min", "max"):
            need(positive(st.get(k)), f"{w}: stats has no positive {k}")
        need(st["min"] <= st["p10"] <= st["median"] <= st["p90"] <= st["max"], f"{w}: stats out of order: {st}")
        s = r.get("samples", [])
        need(len(s) == r.get("reps") and all(map(positive, s)), f"{w}: {len(s)} samples for {r.get('reps')} reps")
        need(r.get("data") in ("ok", "MISMATCH", "unchecked"), f"{w}: data {r.get('data')!r}")
        need(r["data"] != "MISMATCH" or d["benchmark"] == "vmmipc_floor_bench",
             f"{w}: the data check failed ({r.get('mismatches')} mismatches)")
        n += 1
    names = {r["name"] for r in d["rows"] if "skipped" not in r}
    for name in require:
        need(name in names, f"{name} was not measured")
    return n


def check_heap(d, require):
    need(positive(d.get("ranks")), "no positive ranks")
    if "skipped" in d:  # a launch that left no JSON (wave4.sh writes why)
        measured_or_skipped(d, "vmmipc_heap")
        return 0
    rows = {r.get("row"): r for r in d.get("rows", [])}
    for name in ("mpi_floor (allgather 8B+allreduce 4B)", "heap_alloc + win_free 2 MiB") + tuple(require):
        need(name in rows and (positive(rows[name].get("median")) or rows[name].get("skipped")),
             f"no {name!r} row, measured or skipped")
    for k, v in (d.get("mixed_workload") or {}).items():
        need(k == "windows" or v.get("skipped") or v.get("data_ok") is True, f"mixed workload {k}: data check failed")
    return sum(1 for r in d.get("rows", []) if positive(r.get("median")))


def check_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    need(len(rows) >= 2, f"{path}: no data rows")
    for i, r in enumerate(rows[1:], start=2):
        need(len(r) == len(rows[0]), f"{path}:{i}: {len(r)} fields, header has {len(rows[0])}")
    return len(rows) - 1


def run(path, csv_path=None, require=(), expect_skipped=(), incomplete=False):
    """Checks one file; returns the line to print, raises Bad."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise Bad(f"{path}: {e}")
    kind = d.get("benchmark")
    if kind == "vmmipc_setup":
        n = check_setup(d, require, incomplete)
    else:
        fn = {"vmmipc_bw": check_bw, "vmmipc_sync": check_sync, "torch_barrier": check_tbar,
              "vmmipc_device_bench": check_devbench, "vmmipc_floor_bench": check_devbench,
              "nvshmem_bench": check_devbench, "vmmipc_heap": check_heap}.get(kind)
        need(fn, f"{path}: unknown benchmark {kind!r}")
        n = fn(d, require)
        if kind in D.LISTS:
            require = ()  # checked by name above
        have = {e["name"] for e in d.get("latency", []) if D.ok(e) and "stats" in e}
        for name in require:  # latency entries measured in at least one mode
            w = [e.get("skipped") or e.get("error") for e in d.get("latency", []) if e.get("name") == name]
            need(name in have, f"{name} was measured in no mode" + (f": {w[0]}" if w and w[0] else " (not run)"))
    for spec in expect_skipped:
        name, mode, text = (spec.split(":", 2) + ["", ""])[:3]
        e = D.lat(d, name, mode)
        need(e and text in e.get("skipped", ""), f"{name} ({mode}) should be skipped with '{text}': {e or 'not run'}")
    rows = check_csv(csv_path) if csv_path else 0
    return f"{path}: {kind}, {n} measured entries" + (f", {rows} CSV rows" if csv_path else "")
