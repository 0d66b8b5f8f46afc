#!/usr/bin/env python3
"""Checks benchmark JSON against the goals in docs/performance.md.

usage: summarize.py FILE.json [FILE.json ...]   (vmmipc_bw, vmmipc_setup and
torch_symm_mem files, told apart by their "benchmark" key)

Prints a Markdown table: goal, measured, target, verdict (PASS, FAIL or
"n/a" when the file or series it needs is missing or skipped).
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


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    d = load(argv[1:])
    bw, setup, torch = d.get("vmmipc_bw"), d.get("vmmipc_setup"), d.get("torch_symm_mem")
    rows = []

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

    print("| Goal | Measured | Target | Verdict |")
    print("| --- | --- | --- | --- |")
    for g, m, t, v in rows:
        print(f"| {g} | {m} | {t} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
