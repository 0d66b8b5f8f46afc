"""Issue 30: device sync on one shared GPU against NVSHMEM, from one run's
files (data.pick's lists "device", "floor", "nvshmem", "heap"). Every goal is
a ratio of two medians measured in the same run, recomputed here; the tables
put each vmmipc row next to its anchor and the raw floors.

Which launches count: those that ran under MPS ("mps": true); where a run
never said (older files, "mps": null), those; a launch without MPS ("mps":
false) only feeds the no-MPS rows. The host rows take the faster of the
paths measured (what `auto` is to pick) and show both. Launches with a
setting changed from its default (config "barrier_shape" other than flat,
"dev_scope_setting" other than auto: VMMIPC_SYNC_BARRIER, VMMIPC_DEV_SCOPE)
are variants: they feed only rows of their own, next to the defaults."""
from .data import KiB, size_str

SIZES = [8 << i for i in range(14)]  # 8 B .. 64 KiB, as the programs sweep them
TARGETS = {  # the goals: id -> (compare, target)
    "signal": ("<=", 1.0), "barrier": (">=", 2.0), "host_barrier": ("<=", 0.5), "host_signal": ("<=", 0.5),
    "allreduce": (">=", 1.5), "graph": ("<=", 5e-6)}
HEAP_TARGET = {2: 0.25, 8: 0.4}
WORKLOAD = {2: ("window_calls", 0.05), 8: ("total", 0.05)}


def goal(gid, text, measured, target, verdict):
    return {"id": gid, "goal": text, "measured": measured, "target": target, "verdict": verdict}


def us(x, digits=2):
    return "-" if x is None else f"{x * 1e6:.{digits}f}"


def measured(r):
    return r is not None and "skipped" not in r and isinstance((r.get("stats") or {}).get("median"), (int, float))


def med(r):
    return r["stats"]["median"] if measured(r) else None


def variant(d):
    """The settings a launch changed from their defaults, as words; None for none."""
    cfg = d.get("config") or {}
    shape, scope = cfg.get("barrier_shape"), cfg.get("dev_scope_setting")
    parts = ([f"VMMIPC_SYNC_BARRIER={shape}"] if shape not in (None, "flat") else []) + \
        ([f"VMMIPC_DEV_SCOPE={scope}"] if scope not in (None, "auto") else [])
    return ", ".join(parts) or None


class Launches:
    """The launches of one kind at one rank count, MPS on (or not said), with
    the default settings (or the variant named)."""

    def __init__(self, files, ranks, mps=True, variant_of=None):
        same = [d for d in files if d.get("ranks") == ranks and variant(d) == variant_of]
        if mps:
            self.files = [d for d in same if d.get("mps") is True] or [d for d in same if d.get("mps") is None]
        else:
            self.files = [d for d in same if d.get("mps") is False]
        self.skips = [d["skipped"] for d in self.files if "skipped" in d]
        self.files = [d for d in self.files if "skipped" not in d]

    def rows(self, name, path=None, size=None):
        return [r for d in self.files for r in d.get("rows", []) if r.get("name") == name and
                (path is None or r.get("path") == path) and (size is None or r.get("bytes") == size)]

    def row(self, name, path=None, size=None):
        rs = self.rows(name, path, size)
        return next((r for r in rs if measured(r)), rs[0] if rs else None)

    def why(self, what, name, path=None, size=None):
        """Why there is no figure for a row."""
        if self.skips:
            return f"{what}: {self.skips[0]}"
        if not self.files:
            return f"{what}: not run at this rank count"
        r = self.row(name, path, size)
        return f"{what}: " + ((r or {}).get("skipped") or f"no {name} row")


def ranks_of(files):
    return sorted({d.get("ranks") for d in files if isinstance(d.get("ranks"), int)})


def mps_note(launch):
    d = next(iter(launch.files), None)
    if not d:
        return ""
    pct = d.get("mps_active_thread_percentage")
    state = {True: "MPS", None: "MPS not stated", False: "no MPS"}[d.get("mps")]
    return f"{d.get('ranks')} ranks on {d.get('gpus', '?')} GPU, {state}" + (f", {pct}% threads each" if pct else "")


def ratio_goal(gid, text, subj, anch, cmp, target, why, note="", subject_over_anchor=True):
    t = f"{cmp} {target:g}x"
    if subj is None or anch is None or subj <= 0 or anch <= 0:
        return goal(gid, text, f"-: {why}", t, "n/a")
    q = subj / anch if subject_over_anchor else anch / subj
    ok = q <= target if cmp == "<=" else q >= target
    m = f"vmmipc {us(subj)} / anchor {us(anch)} us" if subject_over_anchor else \
        f"anchor {us(anch)} / vmmipc {us(subj)} us"
    return goal(gid, text, f"{m} = {q:.2f}x{note}", t, "PASS" if ok else "FAIL")


def host_best(dev, name):
    """(best median, {path: median}) of a host row over the paths measured."""
    got = {r.get("path"): med(r) for r in dev.rows(name) if measured(r)}
    return (min(got.values()) if got else None), got


# The rows a variant launch is shown with, next to the default's.
VARIANT_ROWS = (("dev_signal_wait", None), ("dev_put_signal_wait", None), ("dev_barrier", None),
                ("host_barrier", "memops"), ("host_signal_wait", "memops"))


def scope_note(dev):
    """The device API's scope in the launches, as the benchmark recorded it."""
    scopes = sorted({(d.get("config") or {}).get("dev_scope") for d in dev.files} - {None})
    return f" (scope {', '.join(scopes)})" if scopes else ""


def heap_row(heaps, name):
    for d in heaps:
        r = next((r for r in d.get("rows", []) if r.get("row") == name), None)
        if r and "median" in r:
            return r["median"]
    return None


def rows(run):
    """Issue 30's goal rows of one run (none when it has no such files)."""
    devs, nvs, floors, heaps = run.get("device") or [], run.get("nvshmem") or [], run.get("floor") or [], \
        run.get("heap") or []
    if not (devs or nvs or floors or heaps):
        return []
    out = []
    for n in ranks_of(devs + nvs + heaps):
        dev, nv, fl = Launches(devs, n), Launches(nvs, n), Launches(floors, n)
        hp = Launches(heaps, n).files
        where = mps_note(dev) or mps_note(nv)
        pre = f"issue 30, {n} ranks on one GPU: "

        s, a = med(dev.row("dev_signal_wait")), med(nv.row("nvshmem.signal_op"))
        def floor_list(*keys):  # "name median" of each floor measured, flag only
            return [f"{k} {us(med(fl.row('floor.' + k, size=0)))}" for k in keys
                    if med(fl.row("floor." + k, size=0)) is not None]
        # The ordered floors, then (labelled) what each side's ordering costs alone and the plain store.
        floor = floor_list("gpu.release_acquire", "sys.release_acquire")
        unordered = floor_list("gpu.release_only", "gpu.acquire_only", "volatile.none")
        if unordered:
            floor.append("unordered: " + ", ".join(unordered))
        out.append(ratio_goal(f"i30.signal.{n}", pre + "dev_signal -> dev_wait one way vs NVSHMEM signal_op + "
                              "signal_wait_until (an unordered volatile store)", s, a, *TARGETS["signal"],
                              dev.why("vmmipc", "dev_signal_wait") if s is None else nv.why("NVSHMEM", "nvshmem.signal_op"),
                              (f"; floors one way (us): " + ", ".join(floor) if floor else "") + f" ({where})"))
        # NVSHMEM's signal_op is a volatile store with no ordering (its floor's payload check fails): the fair
        # anchor for "data visible after the wait" is put-with-signal; ours is set against both.
        s, a = med(dev.row("dev_signal_wait")), med(nv.row("nvshmem.put_signal"))
        if s is not None and a is not None:
            out.append(goal(f"i30.signal_fair.{n}", pre + "dev_signal -> dev_wait one way vs nvshmem_putmem_signal "
                            "of 8 B, the fair anchor (data visible after the wait; signal_op is unordered)",
                            f"{us(s)} / {us(a)} us = {s / a:.2f}x" + scope_note(dev), "(fair anchor)", "info"))
        s, a = med(dev.row("dev_put_signal_wait")), med(nv.row("nvshmem.put_signal"))
        if s is not None and a is not None:
            out.append(goal(f"i30.put_signal.{n}", pre + "8-byte store + dev_signal -> dev_wait vs "
                            "nvshmem_putmem_signal of 8 B (one way, payload checked)",
                            f"{us(s)} / {us(a)} us = {s / a:.2f}x", "(anchor)", "info"))

        s, a = med(dev.row("dev_barrier")), med(nv.row("nvshmem.barrier_all_block"))
        out.append(ratio_goal(f"i30.barrier.{n}", pre + "dev_barrier vs nvshmemx_barrier_all_block (speed-up)", s, a,
                              *TARGETS["barrier"], dev.why("vmmipc", "dev_barrier") if s is None else
                              nv.why("NVSHMEM", "nvshmem.barrier_all_block"), "", subject_over_anchor=False))

        a = med(nv.row("nvshmem.barrier_all_on_stream"))
        for key, name, text in (("host_barrier", "host_barrier", "vmmipc_win_barrier"),
                                ("host_signal", "host_signal_wait", "vmmipc_win_signal + win_wait one way")):
            best, paths = host_best(dev, name)
            note = " (" + ", ".join(f"{p} {us(v)}" for p, v in sorted(paths.items())) + " us)" if paths else ""
            out.append(ratio_goal(f"i30.{key}.{n}", pre + f"{text}, faster path, vs nvshmemx_barrier_all_on_stream",
                                  best, a, *TARGETS[key], dev.why("vmmipc", name) if best is None else
                                  nv.why("NVSHMEM", "nvshmem.barrier_all_on_stream"), note))
            # What auto picked (its launch's path is "auto/<path>"), against the faster path forced.
            picked = {p: v for p, v in paths.items() if p and p.startswith("auto/")}
            forced = {p: v for p, v in paths.items() if p and not p.startswith("auto/")}
            if picked and forced:
                (ap, av), (fp, fv) = next(iter(picked.items())), min(forced.items(), key=lambda kv: kv[1])
                out.append(goal(f"i30.auto_{key}.{n}", pre + f"{text}: the path auto picks vs the faster one forced",
                                f"{ap} {us(av)} / {fp} {us(fv)} us = {av / fv:.2f}x", "(auto's pick)",
                                "info"))

        h, a, fl_mpi = heap_row(hp, "heap_alloc + win_free 2 MiB"), med(nv.row("nvshmem.malloc_free_2m")), \
            heap_row(hp, "mpi_floor (allgather 8B+allreduce 4B)")
        note = f"; MPI floor {us(fl_mpi)} us, heap = {h / fl_mpi:.1f}x the floor" if h and fl_mpi else ""
        text = pre + "heap_alloc + win_free of 2 MiB vs nvshmem_malloc + nvshmem_free"
        if n in HEAP_TARGET:
            out.append(ratio_goal(f"i30.heap.{n}", text, h, a, "<=", HEAP_TARGET[n],
                                  "no vmmipc_heap file at this rank count" if h is None else
                                  nv.why("NVSHMEM", "nvshmem.malloc_free_2m"), note))
        elif h is not None and a is not None:
            out.append(goal(f"i30.heap.{n}", text, f"{us(h)} / {us(a)} us = {h / a:.2f}x{note}", "(no target here)",
                            "info"))
        if n in WORKLOAD:
            field, target = WORKLOAD[n]
            mw = max((d["mixed_workload"] for d in hp if d.get("mixed_workload")),  # the longest workload
                     key=lambda m: m.get("windows") or 0, default={})
            hv, lv = (mw.get("heap") or {}).get(field), (mw.get("legacy_ipc") or {}).get(field)
            text = pre + f"heap workload ({mw.get('windows', '?')} windows), {field.replace('_', ' ')}, heap / legacy IPC"
            if hv and lv:
                out.append(goal(f"i30.workload.{n}", text, f"{hv * 1e3:.1f} / {lv * 1e3:.1f} ms = {hv / lv:.3f}x",
                                f"<= {target:g}x", "PASS" if hv / lv <= target else "FAIL"))
            else:
                out.append(goal(f"i30.workload.{n}", text, "-: no mixed workload with legacy IPC at this rank count",
                                f"<= {target:g}x", "n/a"))

        qs, missing = [], []
        for size in SIZES:
            v, a = med(dev.row("allreduce", "vmmipc_oneshot", size)), med(nv.row("nvshmem.sum_reduce_on_stream",
                                                                                   size=size))
            if v and a:
                qs.append((a / v, size, v, a))
            else:
                missing.append(size_str(size))
        text = pre + "one-shot all-reduce vs nvshmemx_float_sum_reduce_on_stream, every size 8 B..64 KiB (speed-up)"
        if qs:
            lo = min(qs)
            m = f"worst {lo[0]:.2f}x at {size_str(lo[1])} ({us(lo[2])} vs {us(lo[3])} us), best {max(qs)[0]:.2f}x"
            if missing:
                out.append(goal(f"i30.allreduce.{n}", text, m + "; missing: " + ", ".join(missing), ">= 1.5x", "n/a"))
            else:
                out.append(goal(f"i30.allreduce.{n}", text, m, ">= 1.5x", "PASS" if lo[0] >= 1.5 else "FAIL"))
        else:
            out.append(goal(f"i30.allreduce.{n}", text, "-: " + (dev.why("vmmipc", "allreduce", "vmmipc_oneshot")
                                                               if not dev.row("allreduce", "vmmipc_oneshot") else
                                                               nv.why("NVSHMEM", "nvshmem.sum_reduce_on_stream")),
                            ">= 1.5x", "n/a"))
        g = [(med(dev.row("allreduce_graph", size=z)), z) for z in SIZES if z <= 16 * KiB]
        have = [(v, z) for v, z in g if v is not None]
        text = pre + "one-shot all-reduce in a CUDA graph, per replay, 8 B..16 KiB"
        if len(have) == len(g):
            worst = max(have)
            m = f"worst {us(worst[0])} us at {size_str(worst[1])}"
            out.append(goal(f"i30.graph.{n}", text, m, "<= 5 us" if n == 2 else "(info)",
                            ("PASS" if worst[0] <= TARGETS["graph"][1] else "FAIL") if n == 2 else "info"))
        elif n == 2:
            out.append(goal(f"i30.graph.{n}", text, "-: " + dev.why("vmmipc", "allreduce_graph"), "<= 5 us", "n/a"))

    for n in ranks_of(devs):
        base = Launches(devs, n)
        for v in sorted({variant(d) for d in devs if d.get("ranks") == n and variant(d)}):
            alt = Launches(devs, n, variant_of=v)
            cells = []
            for name, path in VARIANT_ROWS:
                x, y = med(alt.row(name, path)), med(base.row(name, path))
                if x is not None:
                    cells.append(f"{name}{' (' + path + ')' if path else ''} {us(x)} us" +
                                 (f" (default {us(y)})" if y is not None else ""))
            if cells:
                out.append(goal(f"i30.variant.{n}.{v}", f"issue 30, {n} ranks on one GPU, {v}: the same rows",
                                "; ".join(cells), "(variant)", "info"))

    checked = [(d, r) for d in devs + nvs for r in d.get("rows", []) if r.get("data") in ("ok", "MISMATCH")]
    bad = [f"{d.get('benchmark')} {d.get('ranks')} ranks: {r['name']}" + (f" {size_str(r['bytes'])}" if r.get("bytes")
                                                                           else "") for d, r in checked
           if r["data"] == "MISMATCH"]
    if checked:
        out.append(goal("i30.data", "issue 30: every checked vmmipc and NVSHMEM row gave the right data",
                        f"{len(checked) - len(bad)} of {len(checked)} ok" + ("; MISMATCH: " + "; ".join(bad) if bad
                                                                             else ""), "all ok",
                        "FAIL" if bad else "PASS"))
    wrong = sorted({r["name"] for d in floors for r in d.get("rows", []) if r.get("data") == "MISMATCH"})
    right = sorted({r["name"] for d in floors for r in d.get("rows", []) if r.get("data") == "ok"} - set(wrong))
    if wrong or right:
        out.append(goal("i30.floor_data", "issue 30: floors whose payload check failed (fast but not ordered)",
                        ", ".join(wrong) or "none", "(finding)", "info"))
    for n in ranks_of(devs):
        off = Launches(devs, n, mps=False)
        s, b = med(off.row("dev_signal_wait")), med(off.row("dev_barrier"))
        if s is not None or b is not None:
            out.append(goal(f"i30.no_mps.{n}", f"issue 30, {n} ranks on one GPU without MPS: dev_signal one way / "
                            "dev_barrier", f"{us(s)} / {us(b)} us (kernels time-slice)", "(info)", "info"))
    return out


# ---- tables: (title, head, rows, note); a cell is a string or None ---------------------------------------------

def tables(run):
    devs, nvs, floors = run.get("device") or [], run.get("nvshmem") or [], run.get("floor") or []
    out = []
    for n in ranks_of(floors):
        for mps in (True, False):
            fl = Launches(floors, n, mps)
            if not fl.files:
                continue
            names = []
            for d in fl.files:
                for r in d.get("rows", []):
                    if r["name"] not in names:
                        names.append(r["name"])
            body = []
            for name in names:
                flag, pay = fl.row(name, size=0), fl.row(name, size=8)
                any_r = pay or flag
                body.append([name, (any_r or {}).get("path"), us(med(flag), 3) if med(flag) else None,
                             us(2 * med(flag), 3) if med(flag) else None, us(med(pay), 3) if med(pay) else None,
                             (pay or {}).get("data") if pay and measured(pay) else (pay or flag or {}).get("skipped"),
                             (any_r or {}).get("note")])
            out.append((f"Floors, {mps_note(fl)}", ["Variant", "Path", "One way, flag only (us)",
                                                     "Round trip, flag only (us)", "One way, 8 B payload (us)",
                                                     "Payload check", "Operations"], body,
                        "Ranks 0 and 1 ping-pong on fd-shared VMM memory; one way = round trip / 2; median of batches."))
    for n in ranks_of(devs + nvs):
        dev, nv = Launches(devs, n), Launches(nvs, n)
        if not (dev.files or nv.files):
            continue
        pairs = (("dev_signal_wait", None, "nvshmem.signal_op", "signal -> wait, one way"),
                 ("dev_put_signal_wait", None, "nvshmem.put_signal", "8-byte put + signal -> wait, one way"),
                 ("dev_barrier", None, "nvshmem.barrier_all_block", "in-kernel barrier"),
                 ("host_barrier", "memops", "nvshmem.barrier_all_on_stream", "host barrier on a stream (memops)"),
                 ("host_barrier", "kernel", "nvshmem.barrier_all_on_stream", "host barrier on a stream (kernel)"),
                 ("host_signal_wait", "memops", "nvshmem.barrier_all_on_stream", "host signal + wait (memops)"),
                 ("host_signal_wait", "kernel", "nvshmem.barrier_all_on_stream", "host signal + wait (kernel)"))
        body = []
        for name, path, anchor, what in pairs:
            v, a = med(dev.row(name, path)), med(nv.row(anchor))
            if v is None and a is None:
                continue
            body.append([what, f"`{name}`", us(v) if v else None, f"`{anchor}`", us(a) if a else None,
                         f"{v / a:.2f}" if v and a else None])
        h = heap_row(Launches(run.get("heap") or [], n).files, "heap_alloc + win_free 2 MiB")
        a = med(nv.row("nvshmem.malloc_free_2m"))
        if h or a:
            body.append(["alloc + free 2 MiB (host clock)", "`heap_alloc + win_free`", us(h, 1) if h else None,
                         "`nvshmem.malloc_free_2m`", us(a, 1) if a else None, f"{h / a:.2f}" if h and a else None])
        out.append((f"vmmipc against NVSHMEM, {mps_note(dev) or mps_note(nv)}",
                    ["What", "vmmipc", "us", "NVSHMEM", "us", "vmmipc / NVSHMEM"], body,
                    "Medians; " + ("NVSHMEM: " + nv.skips[0] if nv.skips else "both from the same run") + "."))
        body = []
        plain = any(dev.row("allreduce", "vmmipc_oneshot_plain", z) for z in SIZES)
        for size in SIZES:
            v, g = med(dev.row("allreduce", "vmmipc_oneshot", size)), med(dev.row("allreduce_graph", size=size))
            a = med(nv.row("nvshmem.sum_reduce_on_stream", size=size))
            p = med(dev.row("allreduce", "vmmipc_oneshot_plain", size))
            if v or g or a:
                body.append([size_str(size), us(v) if v else None] + ([us(p) if p else None] if plain else []) +
                            [us(g) if g else None, us(a) if a else None, f"{a / v:.2f}" if a and v else None])
        if body:
            e = med(dev.row("empty_kernel"))
            floor = (f" An empty kernel back to back: {us(e)} us (the floor of any one-kernel all-reduce launched "
                     "plainly; a programmatic dependent launch overlaps the next launch with the running kernel)."
                     if e else "")
            how = (" One-shot: launched as the example does, with programmatic dependent launch (PDL); plain "
                   "launch: the same kernel without it, in the same run." if plain else "")
            out.append((f"All-reduce, {n} ranks, us per call",
                        ["Size", "one-shot"] + (["one-shot, plain launch"] if plain else []) +
                        ["one-shot in a CUDA graph", "NVSHMEM sum_reduce_on_stream", "NVSHMEM / one-shot"],
                        body, "The one-shot all-reduce of examples/allreduce_oneshot.cuh; data checked every batch." +
                        how + floor))
        vs = sorted({variant(d) for d in devs if d.get("ranks") == n and variant(d)})
        if vs:
            alts = [Launches(devs, n, variant_of=v) for v in vs]
            body = []
            for name, path in VARIANT_ROWS:
                cells = [med(x.row(name, path)) for x in [dev] + alts]
                if any(c is not None for c in cells[1:]):
                    body.append([f"`{name}`" + (f" ({path})" if path else "")] + [us(c) if c else None for c in cells])
            if body:
                out.append((f"Settings, {n} ranks, us", ["Row", "defaults"] + vs, body,
                            "The same rows with one setting changed, from the same run (variant launches)."))
    return out


def markdown(tbls):
    lines = []
    for title, head, body, note in tbls:
        lines += ["", f"### {title}", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        lines += ["| " + " | ".join("-" if c is None else str(c).replace("|", "\\|") for c in r) + " |" for r in body]
        lines += ["", note]
    return "\n".join(lines)
