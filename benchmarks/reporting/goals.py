"""The goals of docs/performance.md, each a ratio of two figures measured in
the same run, recomputed from the medians (not copied from the programs'
verdicts). A row: id, goal, measured, target, verdict (PASS, FAIL, n/a with
the reason in measured, or info for a comparison without a target)."""
from . import issue30
from .data import GiB, KiB, MiB, has_modes, lat, lat_median, median, missing, per_mapping, placement, row, \
    series, series_entry, size_str, standin, gpus_of, gpus_wanted, entry, why

STANDIN = " [CPU stand-in: meaningless]"
PAIR = "2 ranks on 2 GPUs"


def goal(gid, text, measured, target, verdict):
    return {"id": gid, "goal": text, "measured": measured, "target": target, "verdict": verdict}


def verdict(ok, tag=""):
    return ("PASS" if ok else "FAIL") + (" (stand-in)" if tag else "")


def bw_missing(bw, *names):
    if not bw:
        return ": no vmmipc_bw file"
    out = []
    for n in names:
        s = series_entry(bw, n)
        if s is None or "skipped" in s or "error" in s:
            out.append(why(s, n))
        elif GiB not in {p["size"] for p in s.get("points", [])}:
            out.append(f"{n} has no 1 GiB point")
    return ": " + "; ".join(out) if out else ""


def bw_rows(bw):
    rows = []
    for op in ("read", "write"):  # the copy engine within 1% of raw driver copies
        v, r = series(bw, f"vmmipc.ce.{op}.uni"), series(bw, f"raw_vmm.ce.{op}.uni")
        text, gid = f"CE {op}, 1 GiB, one direction: vmmipc / raw driver VMM", f"bw.ce_{op}_vs_raw"
        if v and r and GiB in v and GiB in r:
            q = v[GiB] / r[GiB]
            rows.append(goal(gid, text, f"{v[GiB]:.1f} / {r[GiB]:.1f} GB/s = {q:.4f}", ">= 0.99", verdict(q >= 0.99)))
        else:
            rows.append(goal(gid, text, "-" + bw_missing(bw, f"vmmipc.ce.{op}.uni", f"raw_vmm.ce.{op}.uni"),
                             ">= 0.99", "n/a"))
    line = ((bw or {}).get("line_rate") or {}).get("gbps")
    best = max((s[GiB] for s in (series(bw, f"vmmipc.ce.{op}.uni") for op in ("read", "write")) if s and GiB in s),
               default=None)
    text, target = "CE best of read/write, 1 GiB, one direction, vs line rate", ">= 392 GB/s and >= 87%"
    if best is not None and not line:  # one shared GPU: a local copy says nothing about the link
        rows.append(goal("bw.line_rate", text, f"{best:.1f} GB/s (no line rate: the ranks' copies crossed no NVLink)",
                         target, "n/a"))
    elif best is not None:
        rows.append(goal("bw.line_rate", text, f"{best:.1f} GB/s = {100 * best / line:.1f}% of {line:.0f}", target,
                         verdict(best >= 392 and best >= 0.87 * line)))
    else:
        rows.append(goal("bw.line_rate", "CE, 1 GiB, one direction, vs line rate",
                         "-" + bw_missing(bw, "vmmipc.ce.read.uni", "vmmipc.ce.write.uni"), target, "n/a"))
    for d in ("uni", "bidir"):  # at least NCCL send/recv at every size from 64 KiB
        n, r, w = series(bw, f"nccl.sendrecv.{d}"), series(bw, f"vmmipc.ce.read.{d}"), series(bw, f"vmmipc.ce.write.{d}")
        text, gid, target = f"vmmipc CE >= NCCL send/recv, every size >= 64 KiB ({d})", f"bw.vs_nccl_{d}", \
            "ratio >= 1 everywhere"
        if not n or not (r or w):
            rows.append(goal(gid, text, "-" + bw_missing(bw, f"nccl.sendrecv.{d}", f"vmmipc.ce.read.{d}"), target,
                             "n/a"))
            continue
        qs = [(max((r or {}).get(s, 0), (w or {}).get(s, 0)) / n[s] if n[s] else float("inf"), s)
              for s in sorted(n) if s >= 64 * KiB]
        if not qs:
            rows.append(goal(gid, text, "no sizes >= 64 KiB", target, "n/a"))
            continue
        low, below = min(qs), [s for q, s in qs if q < 1]
        rows.append(goal(gid, text, f"worst {low[0]:.3f} at {low[1]} B" +
                         (f"; below at {len(below)} sizes" if below else ""), target, verdict(not below)))
    return rows


def setup_rows(setup, torch):
    rows = []
    lib, flo = median(setup, "allgather_map", "vmmipc", GiB, 1), median(setup, "allgather_map", "floor", GiB, 1)
    text = f"allgather_map {(setup or {}).get('ranks')} ranks x 1 GiB x 1 chunk, warm median, vs floor"
    if lib is not None and flo:
        rows.append(goal("setup.1g_vs_floor", text, f"{lib * 1e3:.3f} / {flo * 1e3:.3f} ms = {lib / flo:.2f}x",
                         "<= 1.2x", verdict(lib / flo <= 1.2)))
    else:
        rows.append(goal("setup.1g_vs_floor", text, "-: " + missing(setup, "vmmipc" if lib is None else "floor",
                                                                    GiB, 1), "<= 1.2x", "n/a"))
    tr = median(torch, "rendezvous", "torch_symm_mem", GiB, 1, "rendezvous")
    text = "allgather_map 1 GiB x 1 chunk vs PyTorch symm_mem.rendezvous (allocation not counted)"
    if lib is not None and tr:
        tw = median(torch, "rendezvous", "torch_symm_mem", GiB, 1)
        rows.append(goal("setup.1g_vs_torch", text, f"{lib * 1e3:.3f} vs {tr * 1e3:.3f} ms (empty + rendezvous "
                         f"{tw * 1e3:.3f} ms)", "less", verdict(lib < tr)))
    else:
        w = missing(setup, "vmmipc", GiB, 1) if lib is None else "no torch_symm_mem file" if not torch else \
            "PyTorch " + missing(torch, "torch_symm_mem", GiB, 1, "rendezvous")
        rows.append(goal("setup.1g_vs_torch", text, f"-: {w}", "less", "n/a"))
    sizes = sorted({r["size"] for r in (setup or {}).get("results", []) if r.get("chunks") == 256})
    for size in sizes:  # per-chunk cost at 256 chunks within 1.2x the floor's
        l256, f256 = median(setup, "allgather_map", "vmmipc", size, 256), median(setup, "allgather_map", "floor",
                                                                                 size, 256)
        if l256 is None or not f256:
            continue
        m = f"{l256 / 256 * 1e3:.4f} / {f256 / 256 * 1e3:.4f} ms per chunk = {l256 / f256:.2f}x"
        l1, f1 = median(setup, "allgather_map", "vmmipc", size, 1), median(setup, "allgather_map", "floor", size, 1)
        if l1 is not None and f1 is not None and f256 > f1:
            m += f"; marginal {(l256 - l1) / 255 * 1e3:.4f} / {(f256 - f1) / 255 * 1e3:.4f} ms"
        rows.append(goal(f"setup.per_chunk_256.{size}", f"allgather_map per chunk at 256 chunks, {size >> 20} MiB",
                         m, "<= 1.2x", verdict(l256 / f256 <= 1.2)))
    if not sizes:
        rows.append(goal("setup.per_chunk_256", "allgather_map per chunk at 256 chunks", "-: " +
                         ("no vmmipc_setup file" if not setup else "no 256-chunk rows in this run"), "<= 1.2x", "n/a"))
    return rows


def issue11_rows(setup, scale):
    """Issue 11's goals; the pair goals get a verdict only from 2 ranks on 2 GPUs."""
    tag = STANDIN if standin(setup) else ""
    pair = bool(setup) and placement(setup) == PAIR
    old = "" if has_modes(setup) else " (run predates the first/again split: the same buffer every repetition, " \
                                      "library without caches)"

    def ratio_row(gid, text, subj, anch, target, missing_why, note=""):
        t = f"<= {target:.2f}x"
        if subj is None or not anch:
            return goal(gid, text, f"-: {missing_why}", t, "n/a")
        m = f"{subj * 1e3:.3f} / {anch * 1e3:.3f} ms = {subj / anch:.3f}x{note}{tag}"
        if not pair:
            return goal(gid, text, f"{m} (this run: {placement(setup)}; the goal is about {PAIR})", t, "n/a")
        return goal(gid, text, m + old, t, verdict(subj / anch <= target, tag))

    pre = "setup (issue 11): 2 ranks, "
    rows = []
    lib, ipc = median(setup, "allgather_map", "vmmipc", 2 * MiB, 1), median(setup, "allgather_map", "legacy_ipc",
                                                                            2 * MiB, 1)
    rows.append(ratio_row("i11.first_2m_vs_ipc", pre + "2 MiB x 1 chunk, first mapping vs legacy IPC", lib, ipc, 1.0,
                          missing(setup, "vmmipc" if lib is None else "legacy_ipc", 2 * MiB, 1)))
    again = [r for r in (setup or {}).get("results", []) if r.get("coll") in ("allgather_map", "bcast_map", "scatter_map")
             and r.get("method") == "vmmipc_again" and row(setup, r["coll"], "vmmipc_again", r["size"], r["chunks"])]
    agree = row(setup, "allgather_desc", "vmmipc", 0, 0)
    text = pre + "mapped again (cache hit), worst collective x size x chunks, vs 0.1 ms + one agreement"
    if not setup or not again or not agree:
        w = "no vmmipc_setup file" if not setup else "no vmmipc_again rows" if not again else \
            "no allgather_desc(NULL) row (the agreement alone)"
        rows.append(goal("i11.again", text, f"-: {w}" + ("" if not setup or has_modes(setup) else
                                                        " (the run predates the mapping cache rows)"), "<= 1.00x", "n/a"))
    else:
        worst = max(again, key=lambda r: r["stats"]["wall"]["median"])
        a, k = agree["stats"]["agree"]["median"], worst.get("cache") or {}
        n = k.get("hits", 0) + k.get("misses", 0)
        hits = f"; cache hits {k.get('hits', 0)} of {n} imports" if n else "; the library counted no cache hits or misses"
        rows.append(ratio_row("i11.again", text, worst["stats"]["wall"]["median"], 1e-4 + a, 1.0, "",
                              f" (worst: {worst['coll']} {size_str(worst['size'])} x {worst['chunks']}; agreement {a * 1e3:.3f} ms{hits})"))
    for gid, chunks, target in (("i11.first_1g256_vs_floor", 256, 0.5), ("i11.first_1g1_vs_floor", 1, 1.0)):
        lib, flo = median(setup, "allgather_map", "vmmipc", GiB, chunks), median(setup, "allgather_map", "floor",
                                                                                 GiB, chunks)
        rows.append(ratio_row(gid, pre + f"1 GiB x {chunks} chunk{'s' if chunks > 1 else ''}, first mapping vs the "
                              "floor", lib, flo, target, missing(setup, "vmmipc" if lib is None else "floor", GiB,
                                                                 chunks)))
    # 8 ranks on one GPU: from the main sweep or a scale launch.
    text = "setup (issue 11): one GPU, 8 ranks, 2 MiB x 1 chunk, first mapping vs legacy IPC"
    cands = [d for d in ([setup] if setup else []) + list(scale or [])
             if "skipped" not in d and d.get("ranks") == 8 and gpus_of(d) == 1]
    for d in cands:
        lib, ipc = median(d, "allgather_map", "vmmipc", 2 * MiB, 1), median(d, "allgather_map", "legacy_ipc", 2 * MiB, 1)
        if lib is not None and ipc:
            t = STANDIN if standin(d) else ""
            rows.append(goal("i11.one_gpu_8", text, f"{lib * 1e3:.3f} / {ipc * 1e3:.3f} ms = {lib / ipc:.3f}x{t}",
                             "<= 1.00x", verdict(lib / ipc <= 1.0, t)))
            break
    else:
        w = "no run with 8 ranks on one GPU (run-gpu.sh's scale step makes one)"
        if cands:
            e = entry(cands[0], "allgather_map", "legacy_ipc", 2 * MiB, 1) or \
                entry(cands[0], "allgather_map", "vmmipc", 2 * MiB, 1) or {}
            w = e.get("skipped") or e.get("error") or "no 2 MiB x 1 chunk rows"
        rows.append(goal("i11.one_gpu_8", text, f"-: {w}", "<= 1.00x", "n/a"))
    for gpus, name in ((1, "one GPU"), (2, "two GPUs")):
        runs = [d for d in scale or [] if gpus_wanted(d) == gpus]
        text = f"scale: allgather_map per mapping vs ranks, {name} (first mapping / mapped again / floor)"
        if not runs:
            rows.append(goal(f"scale.{gpus}", text, "-: no scale launch in this run", "(info)", "n/a"))
            continue
        parts = []
        for d in runs:
            if "skipped" in d:
                parts.append(f"{d.get('ranks')} ranks: skipped ({d['skipped']})")
                continue
            cells = [per_mapping(d, m) for m in ("vmmipc", "vmmipc_again", "floor")]
            parts.append(f"{d.get('ranks')} ranks: " + " / ".join(f"{c[0] * 1e3:.4f}" if c else "-" for c in cells)
                         + " ms")
        rows.append(goal(f"scale.{gpus}", text, "; ".join(parts) + (STANDIN if any(map(standin, runs)) else ""),
                         "(info)", "info"))
    return rows


SYNC_GOALS = (  # id, text, subject, anchor, anchor in the host mode, target
    ("barrier_vs_host", "stream barrier vs cuStreamSynchronize + MPI_Barrier", "vmmipc.barrier", "host.sync_barrier",
     True, 5.0),
    ("put_signal_vs_host", "8-byte put + signal (one way) vs cuStreamSynchronize + MPI_Barrier", "vmmipc.put_signal",
     "host.sync_barrier", True, 5.0),
    ("barrier_vs_nccl", "stream barrier vs NCCL send/recv of 8 bytes (one way)", "vmmipc.barrier", "nccl.sendrecv",
     False, 3.0),
    ("put_signal_vs_nccl", "8-byte put + signal vs NCCL send/recv of 8 bytes (both one way)", "vmmipc.put_signal",
     "nccl.sendrecv", False, 3.0))


def us_ratio(a, b):
    return f"{a * 1e6:.2f} / {b * 1e6:.2f} us = {a / b:.2f}x"


def sync_rows(sync, tbar):
    tag = STANDIN if sync.get("standin") else ""
    nccl = sync.get("nccl_version") or f"skipped: {sync.get('nccl_skipped', '?')}"
    rows = [goal("sync:window synchronisation (vmmipc_sync): the run", "window synchronisation (vmmipc_sync): the run",
                 f"{sync.get('placement', '?')}; NCCL {nccl}{tag}", "-", "info")]
    given = {(g.get("id"), g.get("mode")): g.get("verdict") for g in sync.get("goals", [])}

    def add(text, measured, target, v):
        rows.append(goal("sync:" + text, text, measured, target, v))

    for mode in ("queued", "issued"):
        for gid, text, subj, anch, host, target in SYNC_GOALS:
            amode = "host" if host else mode
            se, ae = lat(sync, subj, mode), lat(sync, anch, amode)
            sm, am = lat_median(se), lat_median(ae)
            text = f"{text} [{mode}{', primary' if mode == 'queued' else ''}]"
            if sm is None or am is None or sm <= 0:
                add(text, why(se, f"{subj} ({mode})") if sm is None else why(ae, f"{anch} ({amode})"),
                    f">= {target:g}x", "n/a")
                continue
            v = verdict(am / sm >= target)
            note = f" (vmmipc_sync said {given[(gid, mode)]})" if given.get((gid, mode)) not in (None, v) else ""
            add(text, us_ratio(am, sm) + tag + note, f">= {target:g}x", v + (" (stand-in)" if tag else ""))
    for mode in ("queued", "issued") if tbar else ():  # PyTorch's barriers and signals: comparisons
        mb = lat_median(lat(sync, "vmmipc.barrier", mode))
        tm = lat_median(lat(tbar, "torch.symm_mem.barrier", mode))
        if mb and tm:
            add(f"stream barrier vs PyTorch torch.symm_mem.barrier [{mode}]", us_ratio(tm, mb), "(anchor)", "info")
        if mode == "queued" or not lat_median(lat(sync, "vmmipc.barrier", "queued")):
            for tname in ("torch.barrier.gloo", "torch.barrier.nccl"):
                tm = lat_median(lat(tbar, tname, "host"))
                if mb and tm:
                    add(f"stream barrier [{mode}] vs PyTorch {tname}", us_ratio(tm, mb), "(anchor)", "info")
        ms_, ts = lat_median(lat(sync, "vmmipc.signal_wait", mode)), lat_median(lat(tbar, "torch.symm_mem.signal", mode))
        if ms_ and ts:
            add(f"signal + wait (one way) vs PyTorch put_signal/wait_signal [{mode}]", us_ratio(ts, ms_), "(anchor)",
                "info")
    for mode in ("queued", "issued"):  # put + signal bandwidth against NCCL, size by size
        pts = {s["name"]: {p["size"]: p["gbps"] for p in s.get("points", [])} for s in sync.get("bandwidth", [])
               if s.get("mode") == mode and "skipped" not in s and "error" not in s}
        v, n = pts.get("vmmipc.put_signal"), pts.get("nccl.sendrecv")
        qs = sorted((v[k] / n[k], k) for k in v if n.get(k)) if v and n else []
        if qs:
            add(f"put + signal bandwidth vs NCCL send/recv, {min(v)} B .. {max(v)} B [{mode}]",
                f"{qs[0][0]:.2f}x at {qs[0][1]} B .. {qs[-1][0]:.2f}x at {qs[-1][1]} B", "(anchor)", "info")
    return rows


def goal_rows(run):
    """Every goal row of one run (data.pick's roles)."""
    if not (run.get("bw") or run.get("setup") or run.get("torch") or run.get("scale")):
        rows = sync_rows(run["sync"], run.get("tbar")) if run.get("sync") else []
    else:
        rows = bw_rows(run.get("bw")) + setup_rows(run.get("setup"), run.get("torch"))
        rows += issue11_rows(run.get("setup"), run.get("scale"))
        rows += sync_rows(run["sync"], run.get("tbar")) if run.get("sync") else []
    return rows + issue30.rows(run)


def table(rows):
    out = ["| Goal | Measured | Target | Verdict |", "| --- | --- | --- | --- |"]
    return "\n".join(out + [f"| {g['goal']} | {g['measured']} | {g['target']} | {g['verdict']} |" for g in rows])
