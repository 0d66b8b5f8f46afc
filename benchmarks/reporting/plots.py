"""PNG plots of benchmark JSON (matplotlib): bandwidth vs size per operation
and direction, with the anchors and the line rate, and a heat map per peer
matrix; setup latency vs size per collective (first mapping solid, mapped
again dash-dotted, the floor dashed, PyTorch's rendezvous on allgather) and
the phase split; the scale launches' cost per mapping vs ranks; the sync
latency bars and put + signal bandwidth."""
import math
import os

from .data import size_str, ok

PHASES = ("export", "transfer", "import", "map", "access", "agree")


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    ticks = ticks[::math.ceil(len(ticks) / 12)] if len(ticks) > 12 else ticks
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_str(t) for t in ticks], rotation=45, ha="right", fontsize=7)
    ax.set_xlabel("message / buffer size")


def save(plt, fig, ax, title, path, made, legend=True):
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    made.append(path)


def measured(results, **match):
    return [r for r in results if all(r.get(k) == v for k, v in match.items()) and ok(r) and "stats" in r]


BW_STYLES = {"vmmipc.ce": dict(color="C0", lw=2.2, label="vmmipc, copy engine"),
             "vmmipc.sm": dict(color="C1", lw=2.2, label="vmmipc, SM kernel"),
             "raw_vmm.ce": dict(color="C2", ls="--", label="raw driver VMM, copy engine"),
             "legacy_ipc.ce": dict(color="C4", ls="--", label="legacy cuIpc, copy engine"),
             "nccl": dict(color="C3", ls="-.", label="NCCL send/recv"),
             "host_staged": dict(color="C7", ls=":", label="host-staged MPI")}


def bw(plt, tag, d, out, made):
    series = {s["name"]: s for s in d.get("series", [])}
    line = (d.get("line_rate") or {}).get("gbps")
    for op in ("read", "write"):
        for direction in ("uni", "bidir"):
            fig, ax = plt.subplots(figsize=(8, 5))
            sizes = []
            for key, style in BW_STYLES.items():
                s = series.get(f"{key}.sendrecv.{direction}" if key in ("nccl", "host_staged")
                               else f"{key}.{op}.{direction}")
                if ok(s) and s.get("points"):
                    sizes += [p["size"] for p in s["points"]]
                    ax.plot([p["size"] for p in s["points"]], [p["gbps"] for p in s["points"]], marker=".", **style)
            if not sizes:
                plt.close(fig)
                continue
            if line:
                rate = line * (2 if direction == "bidir" else 1)
                ax.axhline(rate, color="k", lw=1, label=f"NVLink line rate ({rate:.0f} GB/s)")
                ax.axhline(0.87 * rate, color="k", lw=0.6, ls=":", label="87% of line rate")
            size_axis(ax, sizes)
            ax.set_ylabel("GB/s" + (" (both directions summed)" if direction == "bidir" else ""))
            both = "both directions" if direction == "bidir" else "one direction"
            save(plt, fig, ax, f"vmmipc_bw: {op} peer buffer, {both} ({d.get('ranks')} ranks, "
                 f"{d['devices'][0]['name']})", os.path.join(out, f"{tag}_{op}_{direction}.png"), made)
    for m in d.get("matrices", []):
        if not ok(m) or not m.get("gbps"):
            continue
        n = len(m["gbps"])
        vals = [[float("nan") if v is None else v for v in r] for r in m["gbps"]]
        fig, ax = plt.subplots(figsize=(1.2 * n + 3, 1.0 * n + 2))
        fig.colorbar(ax.imshow(vals, cmap="viridis"), ax=ax)
        for i in range(n):
            for j in range(n):
                ax.text(j, i, "-" if i == j else f"{vals[i][j]:.1f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel("destination rank")
        ax.set_ylabel("source rank")
        save(plt, fig, ax, f"{m['name']} at {size_str(m['size'])}, GB/s",
             os.path.join(out, f"{tag}_matrix_{m['name'].replace('.', '_')}.png"), made, False)


def setup(plt, tag, d, torches, out, made):
    res = [r for r in d.get("results", []) if r.get("coll") in ("allgather_map", "bcast_map", "scatter_map")]
    first = "vmmipc, first mapping" if "first" in (d.get("config") or {}) else "vmmipc"
    chunks = sorted({r["chunks"] for r in res})
    for coll in sorted({r["coll"] for r in res}):
        fig, ax = plt.subplots(figsize=(8, 5))
        sizes = []
        for i, ch in enumerate(chunks):
            for method, ls, label in (("vmmipc", "-", first), ("vmmipc_again", "-.", "vmmipc, mapped again"),
                                      ("floor", "--", "floor (raw driver)")):
                rs = sorted(measured(res, coll=coll, method=method, chunks=ch), key=lambda r: r["size"])
                if not rs:
                    continue
                xs = [r["size"] for r in rs]
                sizes += xs
                ax.plot(xs, [r["stats"]["wall"]["median"] * 1e3 for r in rs], ls=ls, color=f"C{i}", marker=".",
                        label=f"{label}, {ch} chunk{'s' if ch > 1 else ''}")
                if method == "vmmipc":
                    ax.fill_between(xs, [r["stats"]["wall"]["p10"] * 1e3 for r in rs],
                                    [r["stats"]["wall"]["p90"] * 1e3 for r in rs], color=f"C{i}", alpha=0.15)
                    ax.plot(xs, [r["first"]["wall"] * 1e3 for r in rs], ls="none", marker="x", color=f"C{i}", alpha=0.6)
        anchors = [("legacy_ipc", measured(res, coll=coll, method="legacy_ipc"), "wall", ":", "C7",
                    "legacy cuIpc (1 chunk)")]
        if coll == "allgather_map":
            for t in torches:
                rs = measured(t.get("results", []), coll="rendezvous")
                anchors += [("t", rs, "wall", "-.", "k", "PyTorch symm_mem empty + rendezvous"),
                            ("t", rs, "rendezvous", ":", "k", "PyTorch symm_mem rendezvous only")]
        for _, rs, field, ls, color, label in anchors:
            rs = sorted(rs, key=lambda r: r["size"])
            if rs:
                ax.plot([r["size"] for r in rs], [r["stats"][field]["median"] * 1e3 for r in rs], ls=ls, color=color,
                        marker=".", label=label)
        if not sizes:
            plt.close(fig)
            continue
        size_axis(ax, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("ms: median (band p10-p90, x first call)")
        save(plt, fig, ax, f"vmmipc_setup: {coll}, {d.get('placement') or str(d.get('ranks')) + ' ranks'}",
             os.path.join(out, f"{tag}_{coll}.png"), made)
    for method, suffix, what in (("vmmipc", "", first), ("vmmipc_again", "_again", "vmmipc, mapped again")):
        rs = sorted(measured(res, coll="allgather_map", method=method), key=lambda r: (r["chunks"], r["size"]))
        if not rs:
            continue
        fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(rs) + 2), 5))
        walls, bottom = [r["stats"]["wall"]["median"] for r in rs], [0.0] * len(rs)
        for i, ph in enumerate(PHASES + ("other",)):  # other: reserve, bookkeeping, the slowest rank
            vals = [max(0.0, 100 - b) for b in bottom] if ph == "other" else \
                [100 * r["stats"][ph]["median"] / w if w else 0 for r, w in zip(rs, walls)]
            ax.bar(range(len(rs)), vals, bottom=bottom, color=f"C{i}" if ph != "other" else "0.85", label=ph)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x, w in enumerate(walls):
            ax.text(x, min(max(bottom[x], 100), 104) + 1, f"{w * 1e3:.3g}", ha="center", fontsize=6, rotation=90)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([f"{size_str(r['size'])}\n{r['chunks']}ch" for r in rs], fontsize=6, rotation=90)
        ax.set_ylim(0, 125)
        ax.set_ylabel("% of the median wall time (ms on top)")
        ax.legend(fontsize=7, ncol=4, loc="upper left")
        save(plt, fig, ax, f"vmmipc_setup: allgather_map ({what}), median of each phase (max over ranks)",
             os.path.join(out, f"{tag}_allgather_phases{suffix}.png"), made, False)


def scale(plt, files, out, made):
    from .data import per_mapping, gpus_wanted
    lines = {}
    for d in files:
        for method in ("vmmipc", "vmmipc_again", "floor"):
            pm = None if "skipped" in d else per_mapping(d, method)
            if pm:
                lines.setdefault((gpus_wanted(d) or 1, method), []).append((d["ranks"], pm[0] * 1e3))
    if not lines:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"vmmipc": ("-", "vmmipc, first mapping"), "vmmipc_again": ("-.", "vmmipc, mapped again"),
              "floor": ("--", "floor (raw driver)")}
    for (gpus, method), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([x for x, _ in pts], [y for _, y in pts], ls=styles[method][0], marker="o",
                color="C0" if gpus == 1 else "C1", label=f"{styles[method][1]}, {'one GPU' if gpus == 1 else 'two GPUs'}")
    ranks = sorted({x for pts in lines.values() for x, _ in pts})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(x) for x in ranks])
    ax.set_xlabel("ranks")
    ax.set_ylabel("ms per mapping (median / (ranks on the GPU x (ranks - 1) x chunks))")
    save(plt, fig, ax, "vmmipc_setup: allgather_map cost per mapping vs ranks", os.path.join(out, "setup_scale.png"),
         made)


COLORS = {"vmmipc": "C0", "nccl": "C3", "host": "C7", "torch": "C2"}


def sync(plt, tag, d, tbars, out, made):
    warn = " [CPU stand-in: meaningless]" if d.get("standin") else ""
    where = d.get("placement", f"{d.get('ranks')} ranks")
    es = [e for t in [d] + tbars for e in t.get("latency", []) if ok(e) and "stats" in e]
    if es:
        order = {"queued": 0, "issued": 1, "host": 2}
        es.sort(key=lambda e: (order.get(e["mode"], 3), e.get("method") != "vmmipc", e["name"]))
        med = [e["stats"]["median"] * 1e6 for e in es]
        lo = [max(0.0, m - e["stats"]["p10"] * 1e6) for m, e in zip(med, es)]
        hi = [max(0.0, e["stats"]["p90"] * 1e6 - m) for m, e in zip(med, es)]
        fig, ax = plt.subplots(figsize=(9, 0.38 * len(es) + 1.8))
        ys = list(range(len(es)))[::-1]
        ax.barh(ys, med, xerr=[lo, hi], color=[COLORS.get(e.get("method", "torch"), "C4") for e in es], alpha=0.85,
                capsize=3)
        for y, m, h in zip(ys, med, hi):
            ax.text(m + h, y, f"  {m:.3g}", va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels([f"{e['name']} ({e['mode']}, {e['what'].replace('_', ' ')})" for e in es], fontsize=7)
        if max(med) / max(min(med), 1e-9) > 50:
            ax.set_xscale("log")
        ax.set_xlabel("us per operation: median, bars p10-p90 (one way = half a round trip)")
        save(plt, fig, ax, f"vmmipc_sync: latency, {where}{warn}", os.path.join(out, f"{tag}_latency.png"), made, False)
    series = [s for s in d.get("bandwidth", []) if s.get("points") and ok(s)]
    if series:
        fig, ax = plt.subplots(figsize=(8, 5))
        for s in series:
            xs, color, queued = [p["size"] for p in s["points"]], COLORS.get(s.get("method"), "C4"), s.get("mode") == "queued"
            label = {"vmmipc.put_signal": "vmmipc copy + signal", "nccl.sendrecv": "NCCL send/recv"}.get(s["name"], s["name"])
            ax.plot(xs, [p["gbps"] for p in s["points"]], ls="-" if queued else "--", color=color,
                    marker="o" if queued else "x", label=f"{label} ({s.get('mode')})")
            st = [p.get("gbps_stats") for p in s["points"]]
            if all(st):
                ax.fill_between(xs, [x["p10"] for x in st], [x["p90"] for x in st], color=color, alpha=0.12)
        size_axis(ax, [p["size"] for s in series for p in s["points"]])
        ax.set_yscale("log")
        ax.set_ylabel("GB/s (median; band p10-p90)")
        save(plt, fig, ax, f"vmmipc_sync: put + signal bandwidth vs NCCL, {where}{warn}",
             os.path.join(out, f"{tag}_bandwidth.png"), made)


def draw(plt, loaded, out):
    """Every plot the files give; returns the paths written."""
    by, made = {}, []
    for path, d in loaded:
        by.setdefault(d.get("benchmark"), []).append((os.path.splitext(os.path.basename(path))[0], d))
    for tag, d in by.get("vmmipc_bw", []):
        bw(plt, tag, d, out, made)
    setups = by.get("vmmipc_setup", [])
    for tag, d in setups:
        if d.get("tag") != "scale" and "skipped" not in d:
            setup(plt, tag, d, [t for _, t in by.get("torch_symm_mem", [])], out, made)
    scale(plt, [d for _, d in setups if d.get("tag") == "scale"], out, made)
    for tag, d in by.get("vmmipc_sync", []):
        sync(plt, tag, d, [t for _, t in by.get("torch_barrier", [])], out, made)
    return made
