#!/usr/bin/env python3
"""Checks benchmark JSON against the goals in docs/performance.md.

usage: summarize.py FILE.json [FILE.json ...]   (vmmipc_bw, vmmipc_setup,
torch_symm_mem, vmmipc_sync and torch_barrier files, told apart by their
"benchmark" key; vmmipc_setup files with "tag": "scale" are the scale
launches of run-gpu.sh, setup_scale_*.json)

Prints a Markdown table: goal, measured, target, verdict (PASS, FAIL or
"n/a" when the file or series it needs is missing or skipped, or the run is
not on the placement the goal is about; "info" for a comparison that is not
a goal). The goals of issues 11 and 13 are recomputed here from the medians,
not copied from the programs' verdicts. Standard library only:
gen_performance.py imports it.
"""
import json
import sys

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


def load(paths):
    """[(path, data)] of the files that parse."""
    out = []
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"summarize.py: skipping {p}: {e}", file=sys.stderr)
            continue
        out.append((p, d))
    return out


def pick(loaded):
    """One run's files by role: bw, setup (the main sweep), torch, sync, tbar,
    scale (the scale launches, sorted by GPUs wanted and ranks), probes (issue
    11's design probes, likewise)."""
    run = {"bw": None, "setup": None, "torch": None, "sync": None, "tbar": None, "scale": [], "probes": []}
    key = {"vmmipc_bw": "bw", "torch_symm_mem": "torch", "vmmipc_sync": "sync", "torch_barrier": "tbar"}
    for _, d in loaded:
        kind = d.get("benchmark")
        if kind == "vmmipc_setup":
            if d.get("tag") in ("scale", "probes"):
                run[d["tag"]].append(d)
            elif run["setup"] is None:
                run["setup"] = d
        elif kind in key and run[key[kind]] is None:
            run[key[kind]] = d
    for k in ("scale", "probes"):
        run[k].sort(key=lambda d: (scale_gpus_wanted(d), d.get("ranks") or 0))
    return run


def gpus_of(d):
    """Distinct devices among the ranks (older files have no "gpus")."""
    if d.get("gpus"):
        return d["gpus"]
    return len({dev.get("uuid") for dev in d.get("devices", [])}) or None


def placement(d):
    g, n = gpus_of(d), d.get("ranks")
    return f"{n} ranks on {g} GPU{'' if g == 1 else 's'}"


def scale_gpus_wanted(d):
    """A scale launch is for one GPU or for two (run-gpu.sh's gpus_wanted)."""
    return d.get("gpus_wanted") or gpus_of(d) or 0


def standin(d):
    return bool(((d or {}).get("driver") or {}).get("standin")) or bool((d or {}).get("standin"))


def series(bw, name):
    for s in (bw or {}).get("series", []):
        if s.get("name") == name and "skipped" not in s and "error" not in s:
            return {p["size"]: p["gbps"] for p in s.get("points", [])}
    return None


def result(setup, coll, method, size, chunks, field="wall"):
    r = row(setup, coll, method, size, chunks)
    return r["stats"][field]["median"] if r else None


def row(setup, coll, method, size, chunks):
    """The measured result, or None."""
    for r in (setup or {}).get("results", []):
        if (r.get("coll"), r.get("method"), r.get("size"), r.get("chunks")) == (coll, method, size, chunks) \
                and "stats" in r and "error" not in r:
            return r
    return None


def skipped_why(setup, coll, method, size, chunks):
    for r in (setup or {}).get("results", []):
        if (r.get("coll"), r.get("method"), r.get("size"), r.get("chunks")) == (coll, method, size, chunks):
            return r.get("skipped") or r.get("error")
    return None


def setup_missing(setup, method, size, chunks, coll="allgather_map"):
    if not setup:
        return "no vmmipc_setup file"
    why = skipped_why(setup, coll, method, size, chunks)
    return f"{method} {size_str(size)} x {chunks}: " + (why if why else "not in this run")


def has_modes(setup):
    """Files from before the first-mapping / mapped-again split have neither
    mode in their config: their "vmmipc" rows mapped the same buffer every
    repetition, with a library that had no caches."""
    return "first" in ((setup or {}).get("config") or {})


def size_str(n):
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def verdict(ok):
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


# ---- vmmipc_sync (issue 13) ----------------------------------------------------

SYNC_GOALS = (  # id, text, subject, anchor, anchor in the host mode, target
    ("barrier_vs_host", "stream barrier vs cuStreamSynchronize + MPI_Barrier", "vmmipc.barrier",
     "host.sync_barrier", True, 5.0),
    ("put_signal_vs_host", "8-byte put + signal (one way) vs cuStreamSynchronize + MPI_Barrier", "vmmipc.put_signal",
     "host.sync_barrier", True, 5.0),
    ("barrier_vs_nccl", "stream barrier vs NCCL send/recv of 8 bytes (one way)", "vmmipc.barrier", "nccl.sendrecv",
     False, 3.0),
    ("put_signal_vs_nccl", "8-byte put + signal vs NCCL send/recv of 8 bytes (both one way)", "vmmipc.put_signal",
     "nccl.sendrecv", False, 3.0),
)


def lat_entry(d, name, mode):
    for e in (d or {}).get("latency", []):
        if e.get("name") == name and e.get("mode") == mode:
            return e
    return None


def lat_median(e):
    if e and "skipped" not in e and "error" not in e and "stats" in e:
        return e["stats"]["median"]
    return None


def why_missing(e, name, mode):
    if not e:
        return f"{name} ({mode}) not run"
    return f"{name} ({mode}): " + (e.get("skipped") or e.get("error") or "no samples")


def sync_rows(sync, tbar):
    return [goal("sync:" + g, g, m, t, v) for g, m, t, v in _sync_rows(sync, tbar)]


def _sync_rows(sync, tbar):
    tag = " [CPU stand-in: meaningless]" if sync.get("standin") else ""
    nccl = sync.get("nccl_version") or f"skipped: {sync.get('nccl_skipped', '?')}"
    rows = [("window synchronisation (vmmipc_sync): the run", f"{sync.get('placement', '?')}; NCCL {nccl}{tag}", "-",
             "info")]
    given = {(g.get("id"), g.get("mode")): g.get("verdict") for g in sync.get("goals", [])}
    for mode in ("queued", "issued"):
        for gid, text, subj, anch, host, target in SYNC_GOALS:
            amode = "host" if host else mode
            se, ae = lat_entry(sync, subj, mode), lat_entry(sync, anch, amode)
            sm, am = lat_median(se), lat_median(ae)
            goal = f"{text} [{mode}{', primary' if mode == 'queued' else ''}]"
            if sm is None or am is None or sm <= 0:
                miss = why_missing(se, subj, mode) if sm is None else why_missing(ae, anch, amode)
                rows.append((goal, miss, f">= {target:g}x", "n/a"))
                continue
            ratio = am / sm
            v = verdict(ratio >= target)
            note = ""
            if given.get((gid, mode)) not in (None, v):
                note = f" (vmmipc_sync said {given[(gid, mode)]})"
            rows.append((goal, f"{am * 1e6:.2f} / {sm * 1e6:.2f} us = {ratio:.2f}x{tag}{note}", f">= {target:g}x",
                         v + (" (stand-in)" if tag else "")))
    # Comparisons that are not goals: PyTorch's barriers and signals.
    if tbar:
        for mode in ("queued", "issued"):
            mb = lat_median(lat_entry(sync, "vmmipc.barrier", mode))
            for tname in ("torch.symm_mem.barrier",):
                tm = lat_median(lat_entry(tbar, tname, mode))
                if mb and tm:
                    rows.append((f"stream barrier vs PyTorch {tname} [{mode}]",
                                 f"{tm * 1e6:.2f} / {mb * 1e6:.2f} us = {tm / mb:.2f}x", "(anchor)", "info"))
            # The host barriers once, against the primary mode where it ran.
            first = mode == "queued" or not lat_median(lat_entry(sync, "vmmipc.barrier", "queued"))
            for tname in ("torch.barrier.gloo", "torch.barrier.nccl"):
                tm = lat_median(lat_entry(tbar, tname, "host"))
                if mb and tm and first:
                    rows.append((f"stream barrier [{mode}] vs PyTorch {tname}",
                                 f"{tm * 1e6:.2f} / {mb * 1e6:.2f} us = {tm / mb:.2f}x", "(anchor)", "info"))
            ms = lat_median(lat_entry(sync, "vmmipc.signal_wait", mode))
            ts = lat_median(lat_entry(tbar, "torch.symm_mem.signal", mode))
            if ms and ts:
                rows.append((f"signal + wait (one way) vs PyTorch put_signal/wait_signal [{mode}]",
                             f"{ts * 1e6:.2f} / {ms * 1e6:.2f} us = {ts / ms:.2f}x", "(anchor)", "info"))
    # Put + signal bandwidth against NCCL, size by size.
    for mode in ("queued", "issued"):
        v = n = None
        for s in sync.get("bandwidth", []):
            if s.get("mode") != mode or "skipped" in s or "error" in s:
                continue
            pts = {p["size"]: p["gbps"] for p in s.get("points", [])}
            if s.get("name") == "vmmipc.put_signal":
                v = pts
            elif s.get("name") == "nccl.sendrecv":
                n = pts
        if not v or not n:
            continue
        ratios = sorted((v[k] / n[k], k) for k in v if k in n and n[k])
        if ratios:
            lo, hi = ratios[0], ratios[-1]
            rows.append((f"put + signal bandwidth vs NCCL send/recv, {min(v)} B .. {max(v)} B [{mode}]",
                         f"{lo[0]:.2f}x at {lo[1]} B .. {hi[0]:.2f}x at {hi[1]} B", "(anchor)", "info"))
    return rows


def goal(gid, text, measured, target, verdict):
    return {"id": gid, "goal": text, "measured": measured, "target": target, "verdict": verdict}


# ---- vmmipc_setup (issue 11) ----------------------------------------------------

ISSUE11_PAIR = "2 ranks on 2 GPUs"


def issue11_rows(setup, scale):
    """The goals of issue 11, each a ratio of medians from one file. The pair
    goals get a verdict only from 2 ranks on 2 GPUs; elsewhere the ratio is
    shown and the verdict is n/a."""
    rows = []
    tag = " [CPU stand-in: meaningless]" if standin(setup) else ""
    where = placement(setup) if setup else None
    pair = where == ISSUE11_PAIR
    old = "" if has_modes(setup) else " (run predates the first/again split: the same buffer every repetition, " \
                                      "library without caches)"

    def ratio_row(gid, text, subj, anch, target, why_missing, placed=pair, about=ISSUE11_PAIR, note="", src=setup):
        if subj is None or not anch:
            return goal(gid, text, f"-: {why_missing}", f"<= {target:.2f}x", "n/a")
        r = subj / anch
        m = f"{subj * 1e3:.3f} / {anch * 1e3:.3f} ms = {r:.3f}x{note}{tag}"
        if not placed:
            return goal(gid, text, f"{m} (this run: {placement(src)}; the goal is about {about})",
                        f"<= {target:.2f}x", "n/a")
        return goal(gid, text, m + (old if src is setup else ""), f"<= {target:.2f}x",
                    verdict(r <= target) + (" (stand-in)" if tag else ""))

    def missing(method, size, chunks):
        return setup_missing(setup, method, size, chunks)

    if not setup:
        miss = "no vmmipc_setup file"
        for gid, text, target in (("i11.first_2m_vs_ipc", "2 MiB x 1 chunk, first mapping vs legacy IPC", 1.0),
                                  ("i11.again", "mapped again (cache hit) vs 0.1 ms + one agreement", 1.0),
                                  ("i11.first_1g256_vs_floor", "1 GiB x 256 chunks, first mapping vs floor", 0.5),
                                  ("i11.first_1g1_vs_floor", "1 GiB x 1 chunk, first mapping vs floor", 1.0)):
            rows.append(goal(gid, f"setup (issue 11): {text}", f"-: {miss}", f"<= {target:.2f}x", "n/a"))
    else:
        lib, ipc = result(setup, "allgather_map", "vmmipc", 2 * MiB, 1), result(setup, "allgather_map",
                                                                               "legacy_ipc", 2 * MiB, 1)
        rows.append(ratio_row("i11.first_2m_vs_ipc", "setup (issue 11): 2 ranks, 2 MiB x 1 chunk, first mapping "
                              "vs legacy IPC", lib, ipc, 1.0,
                              missing("vmmipc", 2 * MiB, 1) if lib is None else missing("legacy_ipc", 2 * MiB, 1)))
        again = [r for r in setup.get("results", []) if r.get("coll") in ("allgather_map", "bcast_map", "scatter_map")
                 and r.get("method") == "vmmipc_again" and "stats" in r and "error" not in r]
        agree = row(setup, "allgather_desc", "vmmipc", 0, 0)
        text = ("setup (issues 11, 21): 2 ranks, mapped again (cache hit), worst collective x size x chunks, vs "
                "0.1 ms + one agreement")
        if not again or not agree:
            why = "no vmmipc_again rows" if not again else "no allgather_desc(NULL) row (the agreement alone)"
            if not has_modes(setup):
                why += " (the run predates the mapping cache rows)"
            rows.append(goal("i11.again", text, f"-: {why}", "<= 1.00x", "n/a"))
        else:
            worst = max(again, key=lambda r: r["stats"]["wall"]["median"])
            a = agree["stats"]["agree"]["median"]
            k = worst.get("cache") or {}
            hits = f"; cache hits {k.get('hits', 0)} of {k.get('hits', 0) + k.get('misses', 0)} imports" \
                if k.get("hits", 0) + k.get("misses", 0) else "; the library counted no cache hits or misses"
            rows.append(ratio_row("i11.again", text, worst["stats"]["wall"]["median"], 1e-4 + a, 1.0, "",
                                  note=f" (worst: {worst['coll']} {size_str(worst['size'])} x {worst['chunks']}; agreement "
                                  f"{a * 1e3:.3f} ms{hits})"))
        for gid, chunks, target in (("i11.first_1g256_vs_floor", 256, 0.5), ("i11.first_1g1_vs_floor", 1, 1.0)):
            lib, flo = result(setup, "allgather_map", "vmmipc", GiB, chunks), result(setup, "allgather_map", "floor",
                                                                                  GiB, chunks)
            rows.append(ratio_row(gid, f"setup (issue 11): 2 ranks, 1 GiB x {chunks} chunk{'s' if chunks > 1 else ''}"
                                  f", first mapping vs the floor", lib, flo, target,
                                  missing("vmmipc", GiB, chunks) if lib is None else missing("floor", GiB, chunks)))

    # 8 ranks on one GPU: from whichever file has them (the main sweep or a scale launch).
    text = "setup (issue 11): one GPU, 8 ranks, 2 MiB x 1 chunk, first mapping vs legacy IPC"
    cands = [d for d in ([setup] if setup else []) + list(scale or [])
             if "skipped" not in d and d.get("ranks") == 8 and gpus_of(d) == 1]
    done = None
    for d in cands:
        lib, ipc = result(d, "allgather_map", "vmmipc", 2 * MiB, 1), result(d, "allgather_map", "legacy_ipc",
                                                                           2 * MiB, 1)
        if lib is not None and ipc:
            t = " [CPU stand-in: meaningless]" if standin(d) else ""
            r = lib / ipc
            done = goal("i11.one_gpu_8", text, f"{lib * 1e3:.3f} / {ipc * 1e3:.3f} ms = {r:.3f}x{t}", "<= 1.00x",
                        verdict(r <= 1.0) + (" (stand-in)" if t else ""))
            break
    if not done:
        if cands:
            d = cands[0]
            why = skipped_why(d, "allgather_map", "legacy_ipc", 2 * MiB, 1) or \
                skipped_why(d, "allgather_map", "vmmipc", 2 * MiB, 1) or "no 2 MiB x 1 chunk rows"
        else:
            why = "no run with 8 ranks on one GPU (run-gpu.sh's scale step makes one)"
        done = goal("i11.one_gpu_8", text, f"-: {why}", "<= 1.00x", "n/a")
    rows.append(done)
    rows += scale_rows(scale)
    return rows


def per_mapping(d, method):
    """{ranks: seconds per mapping} of the x16-chunk allgather_map row of a
    scale file: mappings on the busiest GPU = ranks there x (ranks - 1) x chunks."""
    ranks = d.get("ranks") or 0
    per = d.get("ranks_per_gpu") or ranks
    rs = [r for r in d.get("results", []) if r.get("coll") == "allgather_map" and r.get("method") == method
          and r.get("chunks", 0) > 1 and "stats" in r and "error" not in r]
    if not rs or ranks < 2:
        return None
    r = max(rs, key=lambda r: (r["chunks"], r["size"]))
    return r["stats"]["wall"]["median"] / (per * (ranks - 1) * r["chunks"]), r


def scale_rows(scale):
    rows = []
    for gpus, name in ((1, "one GPU"), (2, "two GPUs")):
        runs = [d for d in scale or [] if scale_gpus_wanted(d) == gpus]
        text = f"scale: allgather_map per mapping vs ranks, {name} (first mapping / mapped again / floor)"
        if not runs:
            rows.append(goal(f"scale.{gpus}", text, "-: no scale launch in this run", "(info)", "n/a"))
            continue
        parts = []
        for d in runs:
            n = d.get("ranks")
            if "skipped" in d:
                parts.append(f"{n} ranks: skipped ({d['skipped']})")
                continue
            cells = []
            for method in ("vmmipc", "vmmipc_again", "floor"):
                pm = per_mapping(d, method)
                cells.append(f"{pm[0] * 1e3:.4f}" if pm else "-")
            parts.append(f"{n} ranks: {' / '.join(cells)} ms")
        tag = " [CPU stand-in: meaningless]" if any(standin(d) for d in runs) else ""
        rows.append(goal(f"scale.{gpus}", text, "; ".join(parts) + tag, "(info)", "info"))
    return rows


def bw_missing(bw, *names):
    """": why", for a bandwidth goal without its figures."""
    if not bw:
        return ": no vmmipc_bw file"
    why = []
    for name in names:
        s = next((x for x in bw.get("series", []) if x.get("name") == name), None)
        if s is None:
            why.append(f"{name} not run")
        elif "skipped" in s or "error" in s:
            why.append(f"{name}: {s.get('skipped') or s.get('error')}")
        elif GiB not in {p["size"] for p in s.get("points", [])}:
            why.append(f"{name} has no 1 GiB point")
    return ": " + "; ".join(why) if why else ""


def goal_rows(run):
    """Every goal row of one run (see pick)."""
    bw, setup, torch = run.get("bw"), run.get("setup"), run.get("torch")
    sync, tbar = run.get("sync"), run.get("tbar")
    rows = []
    if not (bw or setup or torch or run.get("scale")):
        return sync_rows(sync, tbar) if sync else []

    # 1. Copy engine within 1% of raw driver copies (1 GiB, one direction).
    for op in ("read", "write"):
        v, r = series(bw, f"vmmipc.ce.{op}.uni"), series(bw, f"raw_vmm.ce.{op}.uni")
        text = f"CE {op}, 1 GiB, one direction: vmmipc / raw driver VMM"
        if v and r and GiB in v and GiB in r:
            ratio = v[GiB] / r[GiB]
            rows.append(goal(f"bw.ce_{op}_vs_raw", text, f"{v[GiB]:.1f} / {r[GiB]:.1f} GB/s = {ratio:.4f}",
                             ">= 0.99", verdict(ratio >= 0.99)))
        else:
            rows.append(goal(f"bw.ce_{op}_vs_raw", text, "-" + bw_missing(bw, f"vmmipc.ce.{op}.uni",
                                                                       f"raw_vmm.ce.{op}.uni"), ">= 0.99", "n/a"))

    # 2. >= 87% of line rate, >= 392 GB/s (1 GiB, one direction).
    line = ((bw or {}).get("line_rate") or {}).get("gbps")
    best = None
    for op in ("read", "write"):
        v = series(bw, f"vmmipc.ce.{op}.uni")
        if v and GiB in v:
            best = max(best or 0, v[GiB])
    if best is not None and not line:
        # No NVLink between the ranks (one shared GPU, or no line rate known):
        # a local copy says nothing about the link.
        rows.append(goal("bw.line_rate", "CE best of read/write, 1 GiB, one direction, vs line rate",
                         f"{best:.1f} GB/s (no line rate: the ranks' copies crossed no NVLink)",
                         ">= 392 GB/s and >= 87%", "n/a"))
    elif best is not None:
        ok = best >= 392 and best >= 0.87 * line
        rows.append(goal("bw.line_rate", "CE best of read/write, 1 GiB, one direction, vs line rate",
                         f"{best:.1f} GB/s = {100 * best / line:.1f}% of {line:.0f}", ">= 392 GB/s and >= 87%",
                         verdict(ok)))
    else:
        rows.append(goal("bw.line_rate", "CE, 1 GiB, one direction, vs line rate",
                         "-" + bw_missing(bw, "vmmipc.ce.read.uni", "vmmipc.ce.write.uni"), ">= 392 GB/s and >= 87%",
                         "n/a"))

    # 3. >= NCCL send/recv at every size from 64 KiB (best of CE read/write).
    for direction in ("uni", "bidir"):
        n = series(bw, f"nccl.sendrecv.{direction}")
        r, w = series(bw, f"vmmipc.ce.read.{direction}"), series(bw, f"vmmipc.ce.write.{direction}")
        text = f"vmmipc CE >= NCCL send/recv, every size >= 64 KiB ({direction})"
        gid = f"bw.vs_nccl_{direction}"
        if not n or not (r or w):
            rows.append(goal(gid, text, "-" + bw_missing(bw, f"nccl.sendrecv.{direction}",
                                                         f"vmmipc.ce.read.{direction}"), "ratio >= 1 everywhere",
                             "n/a"))
            continue
        worst, worst_size, below = None, None, []
        for size in sorted(n):
            if size < 64 * KiB:
                continue
            mine = max((r or {}).get(size, 0), (w or {}).get(size, 0))
            ratio = mine / n[size] if n[size] else float("inf")
            if worst is None or ratio < worst:
                worst, worst_size = ratio, size
            if ratio < 1:
                below.append(size)
        if worst is None:
            rows.append(goal(gid, text, "no sizes >= 64 KiB", "ratio >= 1 everywhere", "n/a"))
            continue
        m = f"worst {worst:.3f} at {worst_size} B" + (f"; below at {len(below)} sizes" if below else "")
        rows.append(goal(gid, text, m, "ratio >= 1 everywhere", verdict(not below)))

    # 4. allgather_map 2 ranks x 1 GiB x 1 chunk (warm) <= 1.2x floor, < torch rendezvous.
    ranks = (setup or {}).get("ranks")
    lib = result(setup, "allgather_map", "vmmipc", GiB, 1)
    flo = result(setup, "allgather_map", "floor", GiB, 1)
    text = f"allgather_map {ranks} ranks x 1 GiB x 1 chunk, warm median, vs floor"
    if lib is not None and flo:
        rows.append(goal("setup.1g_vs_floor", text, f"{lib * 1e3:.3f} / {flo * 1e3:.3f} ms = {lib / flo:.2f}x",
                         "<= 1.2x", verdict(lib / flo <= 1.2)))
    else:
        rows.append(goal("setup.1g_vs_floor", text, "-: " + (setup_missing(setup, "vmmipc", GiB, 1) if lib is None
                                                              else setup_missing(setup, "floor", GiB, 1)),
                         "<= 1.2x", "n/a"))
    tr = result(torch, "rendezvous", "torch_symm_mem", GiB, 1, "rendezvous")
    tw = result(torch, "rendezvous", "torch_symm_mem", GiB, 1)
    text = "allgather_map 1 GiB x 1 chunk vs PyTorch symm_mem.rendezvous (allocation not counted)"
    if lib is not None and tr:
        rows.append(goal("setup.1g_vs_torch", text,
                         f"{lib * 1e3:.3f} vs {tr * 1e3:.3f} ms (empty + rendezvous {tw * 1e3:.3f} ms)", "less",
                         verdict(lib < tr)))
    else:
        why = setup_missing(setup, "vmmipc", GiB, 1) if lib is None else \
            "no torch_symm_mem file" if not torch else \
            f"PyTorch 1 GiB: {skipped_why(torch, 'rendezvous', 'torch_symm_mem', GiB, 1) or 'not in this run'}"
        rows.append(goal("setup.1g_vs_torch", text, f"-: {why}", "less", "n/a"))

    # 5. Per-chunk cost at 256 chunks <= 1.2x the floor's per chunk.
    sizes = sorted({r["size"] for r in (setup or {}).get("results", []) if r.get("chunks") == 256})
    for size in sizes:
        l256, f256 = result(setup, "allgather_map", "vmmipc", size, 256), result(setup, "allgather_map", "floor", size, 256)
        if l256 is None or not f256:
            continue
        text = f"allgather_map per chunk at 256 chunks, {size >> 20} MiB"
        m = f"{l256 / 256 * 1e3:.4f} / {f256 / 256 * 1e3:.4f} ms per chunk = {l256 / f256:.2f}x"
        l1, f1 = result(setup, "allgather_map", "vmmipc", size, 1), result(setup, "allgather_map", "floor", size, 1)
        if l1 is not None and f1 is not None and f256 > f1:
            m += f"; marginal {(l256 - l1) / 255 * 1e3:.4f} / {(f256 - f1) / 255 * 1e3:.4f} ms"
        rows.append(goal(f"setup.per_chunk_256.{size}", text, m, "<= 1.2x", verdict(l256 / f256 <= 1.2)))
    if not sizes:
        rows.append(goal("setup.per_chunk_256", "allgather_map per chunk at 256 chunks",
                         "-: " + ("no vmmipc_setup file" if not setup else "no 256-chunk rows in this run"), "<= 1.2x",
                         "n/a"))

    rows += issue11_rows(setup, run.get("scale"))
    if sync:
        rows += sync_rows(sync, tbar)
    return rows


def print_rows(rows, out=sys.stdout):
    print("| Goal | Measured | Target | Verdict |", file=out)
    print("| --- | --- | --- | --- |", file=out)
    for g in rows:
        print(f"| {g['goal']} | {g['measured']} | {g['target']} | {g['verdict']} |", file=out)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    print_rows(goal_rows(pick(load(argv[1:]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
