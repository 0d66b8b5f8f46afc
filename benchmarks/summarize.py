#!/usr/bin/env python3
"""Checks benchmark JSON against the goals in docs/performance.md.

usage: summarize.py FILE.json [FILE.json ...]   (vmmipc_bw, vmmipc_setup,
torch_symm_mem, vmmipc_sync and torch_barrier files, told apart by their
"benchmark" key)

Prints a Markdown table: goal, measured, target, verdict (PASS, FAIL or
"n/a" when the file or series it needs is missing or skipped; "info" for a
comparison that is not a goal). The window synchronisation goals (issue 13)
are recomputed here from vmmipc_sync's medians, not copied from its verdicts.
"""
import json
import sys

GiB = 1 << 30
KiB = 1 << 10


def load(paths):
    out = {}
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"summarize.py: skipping {p}: {e}", file=sys.stderr)
            continue
        out[d.get("benchmark")] = d
    return out


def series(bw, name):
    for s in (bw or {}).get("series", []):
        if s.get("name") == name and "skipped" not in s and "error" not in s:
            return {p["size"]: p["gbps"] for p in s.get("points", [])}
    return None


def result(setup, coll, method, size, chunks, field="wall"):
    for r in (setup or {}).get("results", []):
        if (r.get("coll"), r.get("method"), r.get("size"), r.get("chunks")) == (coll, method, size, chunks) \
                and "stats" in r:
            return r["stats"][field]["median"]
    return None


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


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    d = load(argv[1:])
    bw, setup, torch = d.get("vmmipc_bw"), d.get("vmmipc_setup"), d.get("torch_symm_mem")
    sync, tbar = d.get("vmmipc_sync"), d.get("torch_barrier")
    rows = []
    if not (bw or setup or torch):
        print_rows(sync_rows(sync, tbar) if sync else [])
        return 0

    # 1. Copy engine within 1% of raw driver copies (1 GiB, one direction).
    for op in ("read", "write"):
        v, r = series(bw, f"vmmipc.ce.{op}.uni"), series(bw, f"raw_vmm.ce.{op}.uni")
        if v and r and GiB in v and GiB in r:
            ratio = v[GiB] / r[GiB]
            rows.append((f"CE {op}, 1 GiB, one direction: vmmipc / raw driver VMM",
                         f"{v[GiB]:.1f} / {r[GiB]:.1f} GB/s = {ratio:.4f}", ">= 0.99", verdict(ratio >= 0.99)))
        else:
            rows.append((f"CE {op}, 1 GiB, one direction: vmmipc / raw driver VMM", "-", ">= 0.99", "n/a"))

    # 2. >= 87% of line rate, >= 392 GB/s (1 GiB, one direction).
    line = ((bw or {}).get("line_rate") or {}).get("gbps")
    best = None
    for op in ("read", "write"):
        v = series(bw, f"vmmipc.ce.{op}.uni")
        if v and GiB in v:
            best = max(best or 0, v[GiB])
    if best is not None:
        ok = best >= 392 and (line is None or best >= 0.87 * line)
        frac = f" = {100 * best / line:.1f}% of {line:.0f}" if line else " (line rate unknown)"
        rows.append(("CE best of read/write, 1 GiB, one direction, vs line rate", f"{best:.1f} GB/s{frac}",
                     ">= 392 GB/s and >= 87%", verdict(ok)))
    else:
        rows.append(("CE, 1 GiB, one direction, vs line rate", "-", ">= 392 GB/s and >= 87%", "n/a"))

    # 3. >= NCCL send/recv at every size from 64 KiB (best of CE read/write).
    for direction in ("uni", "bidir"):
        n = series(bw, f"nccl.sendrecv.{direction}")
        r, w = series(bw, f"vmmipc.ce.read.{direction}"), series(bw, f"vmmipc.ce.write.{direction}")
        goal = f"vmmipc CE >= NCCL send/recv, every size >= 64 KiB ({direction})"
        if not n or not (r or w):
            rows.append((goal, "-", "ratio >= 1 everywhere", "n/a"))
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
            rows.append((goal, "no sizes >= 64 KiB", "ratio >= 1 everywhere", "n/a"))
            continue
        text = f"worst {worst:.3f} at {worst_size} B" + (f"; below at {len(below)} sizes" if below else "")
        rows.append((goal, text, "ratio >= 1 everywhere", verdict(not below)))

    # 4. allgather_map 2 ranks x 1 GiB x 1 chunk (warm) <= 1.2x floor, < torch rendezvous.
    ranks = (setup or {}).get("ranks")
    lib = result(setup, "allgather_map", "vmmipc", GiB, 1)
    flo = result(setup, "allgather_map", "floor", GiB, 1)
    goal = f"allgather_map {ranks} ranks x 1 GiB x 1 chunk, warm median, vs floor"
    if lib is not None and flo:
        rows.append((goal, f"{lib * 1e3:.3f} / {flo * 1e3:.3f} ms = {lib / flo:.2f}x", "<= 1.2x",
                     verdict(lib / flo <= 1.2)))
    else:
        rows.append((goal, "-", "<= 1.2x", "n/a"))
    tr = result(torch, "rendezvous", "torch_symm_mem", GiB, 1, "rendezvous")
    tw = result(torch, "rendezvous", "torch_symm_mem", GiB, 1)
    goal = "allgather_map 1 GiB x 1 chunk vs PyTorch symm_mem.rendezvous (allocation not counted)"
    if lib is not None and tr:
        rows.append((goal, f"{lib * 1e3:.3f} vs {tr * 1e3:.3f} ms (empty + rendezvous {tw * 1e3:.3f} ms)", "less",
                     verdict(lib < tr)))
    else:
        rows.append((goal, "-", "less", "n/a"))

    # 5. Per-chunk cost at 256 chunks <= 1.2x the floor's per chunk.
    sizes = sorted({r["size"] for r in (setup or {}).get("results", []) if r.get("chunks") == 256})
    for size in sizes:
        l256, f256 = result(setup, "allgather_map", "vmmipc", size, 256), result(setup, "allgather_map", "floor", size, 256)
        if l256 is None or not f256:
            continue
        goal = f"allgather_map per chunk at 256 chunks, {size >> 20} MiB"
        text = f"{l256 / 256 * 1e3:.4f} / {f256 / 256 * 1e3:.4f} ms per chunk = {l256 / f256:.2f}x"
        l1, f1 = result(setup, "allgather_map", "vmmipc", size, 1), result(setup, "allgather_map", "floor", size, 1)
        if l1 is not None and f1 is not None and f256 > f1:
            text += f"; marginal {(l256 - l1) / 255 * 1e3:.4f} / {(f256 - f1) / 255 * 1e3:.4f} ms"
        rows.append((goal, text, "<= 1.2x", verdict(l256 / f256 <= 1.2)))
    if not sizes:
        rows.append(("allgather_map per chunk at 256 chunks", "-", "<= 1.2x", "n/a"))

    if sync:
        rows += sync_rows(sync, tbar)
    print_rows(rows)
    return 0


def print_rows(rows):
    print("| Goal | Measured | Target | Verdict |")
    print("| --- | --- | --- | --- |")
    for g, m, t, v in rows:
        print(f"| {g} | {m} | {t} | {v} |")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
