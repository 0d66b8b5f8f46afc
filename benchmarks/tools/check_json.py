#!/usr/bin/env python3
"""Checks the shape of a vmmipc_bw, vmmipc_setup or vmmipc_sync JSON file
(and its CSV), or of the torch_barrier anchor's JSON.

Used by the ctest smoke tests on the CPU stand-in: the file must parse, every
series or result must be either measured or skipped with a reason, and none
may carry an error (a failed data check). No timing is asserted.

usage: check_json.py FILE.json [--csv FILE.csv] [--require NAME,...]
                     [--expect-skipped NAME:MODE:TEXT]

--require (vmmipc_sync, torch_barrier): latency entries that must have been
measured in at least one mode; (vmmipc_setup): methods that must have been
measured (vmmipc, vmmipc_again, floor, legacy_ipc). --expect-incomplete
(vmmipc_setup): the run must say that --time-limit cut it short. --expect-skipped: that latency entry must be
skipped with TEXT in its reason (a test of a skip path).
"""
import argparse
import csv
import json
import sys


def fail(msg):
    print(f"check_json: {msg}", file=sys.stderr)
    sys.exit(1)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def skipped_ok(entry, what):
    why = entry.get("skipped")
    if not isinstance(why, str) or not why:
        fail(f"{what}: 'skipped' must be a non-empty reason")


def check_bw(d):
    series = d.get("series")
    if not series:
        fail("no series")
    measured = set()
    for s in series:
        name = s.get("name", "?")
        if "error" in s:
            fail(f"{name}: {s['error']}")
        if "skipped" in s:
            skipped_ok(s, name)
            continue
        pts = s.get("points")
        if not pts:
            fail(f"{name}: no points")
        sizes = [p.get("size") for p in pts]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            fail(f"{name}: sizes are not increasing: {sizes}")
        for p in pts:
            for key in ("size", "iters", "seconds", "gbps", "mbps"):
                if not positive(p.get(key)):
                    fail(f"{name}: point {p} has no positive {key}")
        measured.add(name)
    for need in ("vmmipc.ce.read.uni", "vmmipc.ce.write.uni"):
        if need in {s.get("name") for s in series} and need not in measured:
            fail(f"{need} was not measured")
    for m in d.get("matrices", []):
        if "skipped" in m:
            skipped_ok(m, m.get("name", "matrix"))
            continue
        rows = m.get("gbps")
        n = d.get("ranks")
        if not rows or len(rows) != n or any(len(r) != n for r in rows):
            fail(f"matrix {m.get('name')}: not {n} x {n}")
        for i, r in enumerate(rows):
            for j, v in enumerate(r):
                if (i == j) != (v is None) or (v is not None and not positive(v)):
                    fail(f"matrix {m.get('name')}: bad entry [{i}][{j}] = {v}")
    return len(measured)


def check_setup_goals(d):
    """Issue 11's goals: ratio = subject / anchor, PASS when ratio <= target."""
    for g in d.get("goals", []):
        what = f"goal {g.get('id')}"
        v, ratio, target = g.get("verdict"), g.get("ratio"), g.get("target")
        if v not in ("PASS", "FAIL", "n/a"):
            fail(f"{what}: verdict {v!r}")
        if g.get("compare") != "<=" or not positive(target):
            fail(f"{what}: no target or comparison")
        if v == "n/a":
            if not g.get("reason"):
                fail(f"{what}: n/a without a reason")
            continue
        if not positive(ratio) or not positive(g.get("subject_s")) or not positive(g.get("anchor_s")):
            fail(f"{what}: {v} without a measured ratio")
        if abs(ratio - g["subject_s"] / g["anchor_s"]) > 1e-6 * ratio:
            fail(f"{what}: ratio {ratio} is not subject_s / anchor_s")
        if (ratio <= target) != (v == "PASS"):
            fail(f"{what}: verdict {v} does not follow from ratio {ratio} and target {target}")


def check_setup(d, require=(), incomplete=False):
    if incomplete:  # a run stopped by --time-limit: it must say so, and still be whole
        if not isinstance(d.get("incomplete"), str) or "time-limit" not in d["incomplete"]:
            fail("expected an 'incomplete' reason from --time-limit")
        for g in d.get("goals", []):
            if g.get("verdict") != "n/a" or not g.get("reason"):
                fail(f"goal {g.get('id')}: nothing was measured, so it must be n/a with a reason")
        return sum(1 for r in d.get("results", []) if "stats" in r)
    if "skipped" in d:  # a launch run-gpu.sh could not make (one GPU, deadline): the reason
        skipped_ok(d, "vmmipc_setup")
        return 0
    results = d.get("results")
    if not results:
        fail("no results")
    for key in ("gpus", "ranks_per_gpu"):
        if not positive(d.get(key)):
            fail(f"no positive {key}")
    if not isinstance(d.get("placement"), str):
        fail("no placement")
    measured = 0
    for r in results:
        what = f"{r.get('coll')}/{r.get('method')}/{r.get('size')}x{r.get('chunks')}"
        for key in ("coll", "method", "size", "chunks", "chunk_size"):
            if key not in r:
                fail(f"{what}: no {key}")
        if "error" in r:
            fail(f"{what}: {r['error']}")
        if "skipped" in r:
            skipped_ok(r, what)
            continue
        if not positive(r.get("reps")):
            fail(f"{what}: no reps")
        if not positive(r["first"].get("wall")) or not positive(r["stats"]["wall"].get("median")):
            fail(f"{what}: no wall time")
        if len(r.get("wall_samples", [])) != r["reps"]:
            fail(f"{what}: {len(r.get('wall_samples', []))} samples for {r['reps']} reps")
        if r["method"].startswith("vmmipc") and r["coll"] != "allgather_desc":
            k = r.get("cache")
            if not isinstance(k, dict) or any(not isinstance(k.get(x), int) or k[x] < 0
                                              for x in ("first_hits", "first_misses", "hits", "misses")):
                fail(f"{what}: no cache counters")
            # Issue 21: a hit travels without fds (2+ ranks on a node).
            elif r["method"] == "vmmipc_again" and k["hits"] > 0 and k.get("fds_not_sent", 0) <= 0:
                fail(f"{what}: {k['hits']} cache hits, but no fd was left out (fds_not_sent 0)")
        measured += 1
    colls = {r["coll"] for r in results if r["method"] == "vmmipc" and "skipped" not in r}
    if not colls - {"allgather_desc"}:
        fail("no vmmipc collective was measured")
    cfg = d.get("config", {})
    mapped = {r["method"] for r in results if "stats" in r and r["coll"] != "allgather_desc"}
    for mode, method in (("first", "vmmipc"), ("again", "vmmipc_again")):
        if cfg.get(mode) and method not in mapped:
            fail(f"--modes has {mode} but no {method} row was measured")
    if cfg.get("first") or cfg.get("again"):
        if not any(r["coll"] == "allgather_desc" and "stats" in r for r in results):
            fail("no allgather_desc(NULL) row (the agreement alone)")
        w = d.get("comm_first_window") or {}
        if not positive(w.get("wall")):
            fail("no comm_first_window wall time")
    for need in require:
        if need not in mapped:
            fail(f"method {need} was not measured")
    if not d.get("goals"):
        fail("no goals")
    check_setup_goals(d)
    return measured


def check_latency_entry(e, what):
    """A vmmipc_sync or torch_barrier latency entry: measured or skipped with a reason."""
    for key in ("name", "mode", "what", "timer"):
        if not isinstance(e.get(key), str) or not e[key]:
            fail(f"{what}: no {key}")
    if e["timer"] not in ("cuda_events", "host_clock"):
        fail(f"{what}: unknown timer {e['timer']!r}")
    if "error" in e:
        fail(f"{what}: {e['error']}")
    if "skipped" in e:
        skipped_ok(e, what)
        return False
    for key in ("iters", "reps"):
        if not positive(e.get(key)):
            fail(f"{what}: no positive {key}")
    st = e.get("stats") or {}
    for key in ("median", "p10", "p90", "min", "max"):
        if not positive(st.get(key)):
            fail(f"{what}: stats has no positive {key}")
    if not st["min"] <= st["p10"] <= st["median"] <= st["p90"] <= st["max"]:
        fail(f"{what}: stats out of order: {st}")
    samples = e.get("samples", [])
    if len(samples) != e["reps"] or not all(positive(x) for x in samples):
        fail(f"{what}: {len(samples)} samples for {e['reps']} reps, or a sample that is not positive")
    return True


def check_required(d, names):
    measured = {e["name"] for e in d.get("latency", []) if "stats" in e and "skipped" not in e}
    for need in names:
        if need not in measured:
            why = [e.get("skipped") or e.get("error") for e in d.get("latency", []) if e.get("name") == need]
            fail(f"{need} was measured in no mode" + (f": {why[0]}" if why and why[0] else " (not run)"))


def check_sync(d):
    for key in ("ranks", "gpus"):
        if not positive(d.get(key)):
            fail(f"no positive {key}")
    if not isinstance(d.get("placement"), str):
        fail("no placement")
    if d.get("standin") and not d.get("warning"):
        fail("a stand-in run must say that its numbers are meaningless ('warning')")
    if "error" in d:
        fail(d["error"])
    lat = d.get("latency")
    if not lat:
        fail("no latency entries")
    measured = set()
    for e in lat:
        what = f"latency {e.get('name')}/{e.get('mode')}"
        if check_latency_entry(e, what):
            measured.add(e["name"])
    npts = 0
    for s in d.get("bandwidth", []):
        what = f"bandwidth {s.get('name')}/{s.get('mode')}"
        if "error" in s:
            fail(f"{what}: {s['error']}")
        if "skipped" in s:
            skipped_ok(s, what)
            continue
        pts = s.get("points")
        if not pts:
            fail(f"{what}: no points")
        sizes = [p.get("size") for p in pts]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            fail(f"{what}: sizes are not increasing: {sizes}")
        for p in pts:
            for key in ("size", "iters", "reps", "seconds", "gbps"):
                if not positive(p.get(key)):
                    fail(f"{what}: point {p.get('size')} has no positive {key}")
        npts += len(pts)
    goals = d.get("goals")
    if not goals:
        fail("no goals")
    for g in goals:
        what = f"goal {g.get('id')}/{g.get('mode')}"
        v, ratio, target = g.get("verdict"), g.get("ratio"), g.get("target")
        if v not in ("PASS", "FAIL", "n/a"):
            fail(f"{what}: verdict {v!r}")
        if not positive(target):
            fail(f"{what}: no target")
        if v == "n/a":
            if not g.get("reason"):
                fail(f"{what}: n/a without a reason")
            continue
        # The verdict must follow from the ratio of the two medians.
        if not positive(ratio) or not positive(g.get("subject_s")) or not positive(g.get("anchor_s")):
            fail(f"{what}: {v} without a measured ratio")
        if abs(ratio - g["anchor_s"] / g["subject_s"]) > 1e-6 * ratio:
            fail(f"{what}: ratio {ratio} is not anchor_s / subject_s")
        if (ratio >= target) != (v == "PASS"):
            fail(f"{what}: verdict {v} does not follow from ratio {ratio} and target {target}")
    return len(measured) + npts


def check_torch_barrier(d):
    lat = d.get("latency")
    if lat is None:
        fail("no latency list")
    if "skipped" in d:
        skipped_ok(d, "torch_barrier")
        return 0
    n = 0
    for e in lat:
        n += check_latency_entry(e, f"latency {e.get('name')}/{e.get('mode')}")
    return n


def check_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        fail(f"{path}: no data rows")
    width = len(rows[0])
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            fail(f"{path}:{i}: {len(row)} fields, header has {width}")
    return len(rows) - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--csv")
    ap.add_argument("--require", default="", help="latency entries that must be measured (vmmipc_sync)")
    ap.add_argument("--expect-skipped", action="append", default=[], metavar="NAME:MODE:TEXT")
    ap.add_argument("--expect-incomplete", action="store_true", help="vmmipc_setup stopped by --time-limit")
    a = ap.parse_args()
    try:
        with open(a.json) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{a.json}: {e}")
    kind = d.get("benchmark")
    if kind == "vmmipc_bw":
        n = check_bw(d)
    elif kind == "vmmipc_setup":
        n = check_setup(d, [x for x in a.require.split(",") if x], a.expect_incomplete)
    elif kind == "vmmipc_sync":
        n = check_sync(d)
    elif kind == "torch_barrier":
        n = check_torch_barrier(d)
    else:
        fail(f"{a.json}: unknown benchmark {kind!r}")
    if a.require and kind != "vmmipc_setup":
        check_required(d, [x for x in a.require.split(",") if x])
    for spec in a.expect_skipped:
        name, mode, text = (spec.split(":", 2) + ["", ""])[:3]
        hits = [e for e in d.get("latency", []) if e.get("name") == name and e.get("mode") == mode]
        if not hits or text not in hits[0].get("skipped", ""):
            fail(f"{name} ({mode}) should be skipped with '{text}': {hits[0] if hits else 'not run'}")
    rows = check_csv(a.csv) if a.csv else 0
    print(f"check_json: {a.json}: {kind}, {n} measured entries" + (f", {rows} CSV rows" if a.csv else ""))


if __name__ == "__main__":
    main()
