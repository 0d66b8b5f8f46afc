#!/usr/bin/env python3
"""Turns vmmipc benchmark JSON into PNG plots.

usage: plot.py FILE.json [FILE.json ...] [--out DIR]

Files are recognised by their "benchmark" key: vmmipc_bw (bandwidth vs size
per operation and direction, with the anchors and the line rate; one heat map
per peer matrix), vmmipc_setup (setup latency vs size per collective, one
colour per chunk count: first mapping solid, mapped again dash-dotted, the
raw-driver floor dashed; and the phase split of each mode; the scale files
of run-gpu.sh, "tag": "scale", make one plot of the cost per mapping vs the
number of ranks, on one GPU and on two),
torch_symm_mem (the PyTorch rendezvous anchor, drawn on the allgather plot),
vmmipc_sync (a latency bar chart of signal/wait, put + signal and the barrier
next to NCCL, the host round trip and, from torch_barrier files, PyTorch's
barriers; and put + signal bandwidth vs size next to NCCL).
Needs matplotlib; without it, says so and exits 0.
"""
import argparse
import json
import math
import os
import sys


def load(paths):
    out = {}
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"plot.py: skipping {p}: {e}", file=sys.stderr)
            continue
        out.setdefault(d.get("benchmark", "?"), []).append((p, d))
    return out


def size_label(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 12:
        step = math.ceil(len(ticks) / 12)
        ticks = ticks[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], rotation=45, ha="right", fontsize=7)
    ax.set_xlabel("message / buffer size")


def plot_bw(plt, path, d, out):
    series = {s["name"]: s for s in d.get("series", [])}
    line = (d.get("line_rate") or {}).get("gbps")
    tag = os.path.splitext(os.path.basename(path))[0]
    made = []
    styles = {
        "vmmipc.ce": dict(color="C0", lw=2.2, label="vmmipc, copy engine"),
        "vmmipc.sm": dict(color="C1", lw=2.2, label="vmmipc, SM kernel"),
        "raw_vmm.ce": dict(color="C2", ls="--", label="raw driver VMM, copy engine"),
        "legacy_ipc.ce": dict(color="C4", ls="--", label="legacy cuIpc, copy engine"),
        "nccl": dict(color="C3", ls="-.", label="NCCL send/recv"),
        "host_staged": dict(color="C7", ls=":", label="host-staged MPI"),
    }
    for op in ("read", "write"):
        for direction in ("uni", "bidir"):
            fig, ax = plt.subplots(figsize=(8, 5))
            sizes = []
            for key, st in styles.items():
                if key in ("nccl", "host_staged"):
                    name = f"{key}.sendrecv.{direction}"
                else:
                    name = f"{key}.{op}.{direction}"
                s = series.get(name)
                if not s or "skipped" in s or "error" in s or not s.get("points"):
                    continue
                xs = [p["size"] for p in s["points"]]
                ys = [p["gbps"] for p in s["points"]]
                sizes += xs
                ax.plot(xs, ys, marker=".", **st)
            if not sizes:
                plt.close(fig)
                continue
            if line:
                rate = line * (2 if direction == "bidir" else 1)
                ax.axhline(rate, color="k", lw=1, label=f"NVLink line rate ({rate:.0f} GB/s)")
                ax.axhline(0.87 * rate, color="k", lw=0.6, ls=":", label="87% of line rate")
            size_axis(ax, sizes)
            ax.set_ylabel("GB/s" + (" (both directions summed)" if direction == "bidir" else ""))
            ax.set_title(f"vmmipc_bw: {op} peer buffer, {'both directions' if direction == 'bidir' else 'one direction'}"
                         f" ({d.get('ranks')} ranks, {d['devices'][0]['name']})", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            f = os.path.join(out, f"{tag}_{op}_{direction}.png")
            fig.savefig(f, dpi=120)
            plt.close(fig)
            made.append(f)
    for m in d.get("matrices", []):
        if "skipped" in m or not m.get("gbps"):
            continue
        n = len(m["gbps"])
        vals = [[float("nan") if v is None else v for v in row] for row in m["gbps"]]
        fig, ax = plt.subplots(figsize=(1.2 * n + 3, 1.0 * n + 2))
        im = ax.imshow(vals, cmap="viridis")
        for i in range(n):
            for j in range(n):
                ax.text(j, i, "-" if i == j else f"{vals[i][j]:.1f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel("destination rank")
        ax.set_ylabel("source rank")
        ax.set_title(f"{m['name']} at {size_label(m['size'])}, GB/s", fontsize=9)
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        f = os.path.join(out, f"{tag}_matrix_{m['name'].replace('.', '_')}.png")
        fig.savefig(f, dpi=120)
        plt.close(fig)
        made.append(f)
    return made


def measured(results, **match):
    for r in results:
        if all(r.get(k) == v for k, v in match.items()) and "skipped" not in r and "stats" in r:
            yield r


MAP_COLLS = ("allgather_map", "bcast_map", "scatter_map")


def plot_setup(plt, path, d, torch_runs, out):
    results = [r for r in d.get("results", []) if r.get("coll") in MAP_COLLS]
    tag = os.path.splitext(os.path.basename(path))[0]
    made = []
    modes = "first" in (d.get("config") or {})  # older files: "vmmipc" was the only mode
    first_label = "vmmipc, first mapping" if modes else "vmmipc"
    chunk_counts = sorted({r["chunks"] for r in results})
    colls = [c for c in MAP_COLLS if any(r["coll"] == c for r in results)]
    for coll in colls:
        fig, ax = plt.subplots(figsize=(8, 5))
        sizes = []
        for i, ch in enumerate(chunk_counts):
            color = f"C{i}"
            for method, ls, label in (("vmmipc", "-", first_label), ("vmmipc_again", "-.", "vmmipc, mapped again"),
                                      ("floor", "--", "floor (raw driver)")):
                rs = sorted(measured(results, coll=coll, method=method, chunks=ch), key=lambda r: r["size"])
                if not rs:
                    continue
                xs = [r["size"] for r in rs]
                med = [r["stats"]["wall"]["median"] * 1e3 for r in rs]
                sizes += xs
                ax.plot(xs, med, ls=ls, color=color, marker=".", label=f"{label}, {ch} chunk{'s' if ch > 1 else ''}")
                if method == "vmmipc":
                    lo = [r["stats"]["wall"]["p10"] * 1e3 for r in rs]
                    hi = [r["stats"]["wall"]["p90"] * 1e3 for r in rs]
                    ax.fill_between(xs, lo, hi, color=color, alpha=0.15)
                    first = [r["first"]["wall"] * 1e3 for r in rs]
                    ax.plot(xs, first, ls="none", marker="x", color=color, alpha=0.6)
        rs = sorted(measured(results, coll=coll, method="legacy_ipc"), key=lambda r: r["size"])
        if rs:
            ax.plot([r["size"] for r in rs], [r["stats"]["wall"]["median"] * 1e3 for r in rs], ls=":", color="C7",
                    marker=".", label="legacy cuIpc (1 chunk)")
        if coll == "allgather_map":
            for _, t in torch_runs:
                rs = sorted(measured(t.get("results", []), coll="rendezvous"), key=lambda r: r["size"])
                if rs:
                    ax.plot([r["size"] for r in rs], [r["stats"]["wall"]["median"] * 1e3 for r in rs], ls="-.",
                            color="k", marker=".", label="PyTorch symm_mem empty + rendezvous")
                    ax.plot([r["size"] for r in rs], [r["stats"]["rendezvous"]["median"] * 1e3 for r in rs],
                            ls=":", color="k", label="PyTorch symm_mem rendezvous only")
        if not sizes:
            plt.close(fig)
            continue
        size_axis(ax, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("ms: median (band p10-p90, x first call)")
        where = d.get("placement") or f"{d.get('ranks')} ranks"
        ax.set_title(f"vmmipc_setup: {coll}, {where}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        f = os.path.join(out, f"{tag}_{coll}.png")
        fig.savefig(f, dpi=120)
        plt.close(fig)
        made.append(f)
    # Phase split of vmmipc allgather_map, one plot per mode.
    phases = ("export", "transfer", "import", "map", "access", "agree")
    for method, suffix, what in (("vmmipc", "", first_label), ("vmmipc_again", "_again", "vmmipc, mapped again")):
        rs = sorted(measured(results, coll="allgather_map", method=method), key=lambda r: (r["chunks"], r["size"]))
        if not rs:
            continue
        fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(rs) + 2), 5))
        walls = [r["stats"]["wall"]["median"] for r in rs]
        bottom = [0.0] * len(rs)
        for i, ph in enumerate(phases + ("other",)):
            if ph == "other":  # reserve, bookkeeping, waiting for the slowest rank
                vals = [max(0.0, 100 - b) for b in bottom]
            else:
                vals = [100 * r["stats"][ph]["median"] / w if w else 0 for r, w in zip(rs, walls)]
            ax.bar(range(len(rs)), vals, bottom=bottom, color=f"C{i}" if ph != "other" else "0.85", label=ph)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x, w in enumerate(walls):
            ax.text(x, min(max(bottom[x], 100), 104) + 1, f"{w * 1e3:.3g}", ha="center", fontsize=6, rotation=90)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([f"{size_label(r['size'])}\n{r['chunks']}ch" for r in rs], fontsize=6, rotation=90)
        ax.set_ylim(0, 125)
        ax.set_ylabel("% of the median wall time (ms on top)")
        ax.set_title(f"vmmipc_setup: allgather_map ({what}), median of each phase (max over ranks)", fontsize=9)
        ax.legend(fontsize=7, ncol=4, loc="upper left")
        fig.tight_layout()
        f = os.path.join(out, f"{tag}_allgather_phases{suffix}.png")
        fig.savefig(f, dpi=120)
        plt.close(fig)
        made.append(f)
    return made


def plot_scale(plt, runs, out):
    """Cost per mapping of allgather_map (the chunked point) vs ranks: mappings
    on the busiest GPU = ranks there x (ranks - 1) x chunks."""
    lines = {}
    for _, d in runs:
        if "skipped" in d or not d.get("ranks"):
            continue
        gpus = d.get("gpus_wanted") or d.get("gpus") or 1
        n, per = d["ranks"], d.get("ranks_per_gpu") or d["ranks"]
        for method in ("vmmipc", "vmmipc_again", "floor"):
            rs = [r for r in measured(d.get("results", []), coll="allgather_map", method=method) if r["chunks"] > 1]
            if not rs or n < 2:
                continue
            r = max(rs, key=lambda r: (r["chunks"], r["size"]))
            lines.setdefault((gpus, method), []).append((n, r["stats"]["wall"]["median"] * 1e3 /
                                                         (per * (n - 1) * r["chunks"])))
    if not lines:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"vmmipc": ("-", "vmmipc, first mapping"), "vmmipc_again": ("-.", "vmmipc, mapped again"),
              "floor": ("--", "floor (raw driver)")}
    for (gpus, method), pts in sorted(lines.items()):
        pts.sort()
        ls, label = styles[method]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, marker="o", color="C0" if gpus == 1 else "C1",
                label=f"{label}, {'one GPU' if gpus == 1 else 'two GPUs'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ranks = sorted({p[0] for pts in lines.values() for p in pts})
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(x) for x in ranks])
    ax.set_xlabel("ranks")
    ax.set_ylabel("ms per mapping (median / (ranks on the GPU x (ranks - 1) x chunks))")
    ax.set_title("vmmipc_setup: allgather_map cost per mapping vs ranks", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    f = os.path.join(out, "setup_scale.png")
    fig.savefig(f, dpi=120)
    plt.close(fig)
    return [f]


SYNC_COLORS = {"vmmipc": "C0", "nccl": "C3", "host": "C7", "torch": "C2"}


def plot_sync(plt, path, d, tbar_runs, out):
    tag = os.path.splitext(os.path.basename(path))[0]
    made = []
    warn = " [CPU stand-in: meaningless]" if d.get("standin") else ""
    where = d.get("placement", f"{d.get('ranks')} ranks")
    entries = [e for e in d.get("latency", []) if "stats" in e and "skipped" not in e and "error" not in e]
    for _, t in tbar_runs:
        entries += [e for e in t.get("latency", []) if "stats" in e and "skipped" not in e and "error" not in e]
    if entries:
        order = {"queued": 0, "issued": 1, "host": 2}
        entries.sort(key=lambda e: (order.get(e["mode"], 3), e.get("method") != "vmmipc", e["name"]))
        labels = [f"{e['name']} ({e['mode']}, {e['what'].replace('_', ' ')})" for e in entries]
        med = [e["stats"]["median"] * 1e6 for e in entries]
        lo = [max(0.0, m - e["stats"]["p10"] * 1e6) for m, e in zip(med, entries)]
        hi = [max(0.0, e["stats"]["p90"] * 1e6 - m) for m, e in zip(med, entries)]
        colors = [SYNC_COLORS.get(e.get("method", "torch"), "C4") for e in entries]
        fig, ax = plt.subplots(figsize=(9, 0.38 * len(entries) + 1.8))
        ys = list(range(len(entries)))[::-1]
        ax.barh(ys, med, xerr=[lo, hi], color=colors, alpha=0.85, capsize=3)
        for y, m, h in zip(ys, med, hi):
            ax.text(m + h, y, f"  {m:.3g}", va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        if max(med) / max(min(med), 1e-9) > 50:
            ax.set_xscale("log")
        ax.set_xlabel("us per operation: median, bars p10-p90 (one way = half a round trip)")
        ax.set_title(f"vmmipc_sync: latency, {where}{warn}", fontsize=9)
        ax.grid(True, axis="x", which="both", alpha=0.3)
        fig.tight_layout()
        f = os.path.join(out, f"{tag}_latency.png")
        fig.savefig(f, dpi=120)
        plt.close(fig)
        made.append(f)
    series = [s for s in d.get("bandwidth", []) if s.get("points") and "skipped" not in s and "error" not in s]
    if series:
        fig, ax = plt.subplots(figsize=(8, 5))
        sizes = []
        for s in series:
            xs = [p["size"] for p in s["points"]]
            ys = [p["gbps"] for p in s["points"]]
            sizes += xs
            color = SYNC_COLORS.get(s.get("method"), "C4")
            style = "-" if s.get("mode") == "queued" else "--"
            label = {"vmmipc.put_signal": "vmmipc copy + signal", "nccl.sendrecv": "NCCL send/recv"}.get(s["name"],
                                                                                                     s["name"])
            ax.plot(xs, ys, ls=style, color=color, marker="o" if s.get("mode") == "queued" else "x",
                    label=f"{label} ({s.get('mode')})")
            st = [p.get("gbps_stats") for p in s["points"]]
            if all(st):
                ax.fill_between(xs, [x["p10"] for x in st], [x["p90"] for x in st], color=color, alpha=0.12)
        size_axis(ax, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("GB/s (median; band p10-p90)")
        ax.set_title(f"vmmipc_sync: put + signal bandwidth vs NCCL, {where}{warn}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        f = os.path.join(out, f"{tag}_bandwidth.png")
        fig.savefig(f, dpi=120)
        plt.close(fig)
        made.append(f)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="JSON from vmmipc_bw, vmmipc_setup, vmmipc_sync, "
                    "anchors/torch_symm_mem.py or anchors/torch_barrier.py")
    ap.add_argument("--out", default=".", help="directory for the PNG files (default: .)")
    a = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; no plots made (pip install matplotlib)")
        return 0
    data = load(a.files)
    os.makedirs(a.out, exist_ok=True)
    made = []
    for path, d in data.get("vmmipc_bw", []):
        made += plot_bw(plt, path, d, a.out)
    setups = data.get("vmmipc_setup", [])
    for path, d in setups:
        if d.get("tag") != "scale" and "skipped" not in d:
            made += plot_setup(plt, path, d, data.get("torch_symm_mem", []), a.out)
    made += plot_scale(plt, [(p, d) for p, d in setups if d.get("tag") == "scale"], a.out)
    for path, d in data.get("vmmipc_sync", []):
        made += plot_sync(plt, path, d, data.get("torch_barrier", []), a.out)
    for f in made:
        print(f"plot.py: wrote {f}")
    if not made:
        print("plot.py: nothing to plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
