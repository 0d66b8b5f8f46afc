#!/usr/bin/env python3
"""Builds docs/performance.md from the committed benchmark results.

usage: gen_performance.py [RESULTS_DIR ...] [--out FILE] [--check]

RESULTS_DIR: directories written by run-gpu.sh (bw.json, setup.json,
setup_scale_*.json, setup_probes_*.json, torch.json, sync.json, torch_barrier.json, plots/*.png,
and gpu-check.sh's machine.txt); default: every directory under
benchmarks/results/. Runs are ordered newest first by the date in
machine.txt (else nvidia-smi.log, else the directory name). Each section is
built from the newest run that has its file and names that run; every goal
comes with its measured ratio and its run; older runs follow as history.
Nothing is transcribed by hand: a cell holds data or its row is left out
with the reason. Standard library only (goals from summarize.py); the same
inputs give the same bytes.

--out FILE: where to write (default docs/performance.md).
--check: build the page and compare it with FILE instead of writing it;
print the difference and exit 1 when they differ (for CI).
"""
import argparse
import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import summarize as S  # noqa: E402

GiB, MiB, KiB = S.GiB, S.MiB, S.KiB


# ---- reading a run ------------------------------------------------------------

def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Run:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path.rstrip(os.sep))
        self.rel = os.path.relpath(self.path, ROOT).replace(os.sep, "/")
        names = sorted(n for n in os.listdir(self.path) if n.endswith(".json"))
        loaded = [(n, d) for n, d in S.load([os.path.join(self.path, n) for n in names]) if isinstance(d, dict)]
        self.files = S.pick(loaded)
        self.json_names = [os.path.basename(p) for p, _ in loaded]
        machine = read_text(os.path.join(self.path, "machine.txt"))
        smi = read_text(os.path.join(self.path, "nvidia-smi.log"))
        self.smi_txt = smi
        m = re.search(r"^date: (\S+)", machine, re.M) or re.search(r"^date: (\S+)", smi, re.M)
        d = re.match(r"\d{4}-\d{2}-\d{2}", self.name)
        self.date = m.group(1) if m else (d.group(0) if d else "unknown")
        self.machine_txt = machine
        m = re.search(r"^per-rank visible: (\d)", smi, re.M)
        self.visible = m.group(1) == "1" if m else False
        pdir = os.path.join(self.path, "plots")
        self.plots = sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []

    def any(self):
        f = self.files
        return any(f[k] for k in ("bw", "setup", "torch", "sync", "tbar")) or bool(f["scale"])

    def devices(self):
        for key in ("bw", "setup", "sync"):
            d = self.files[key]
            if d and d.get("devices"):
                return d["devices"]
        return []

    def gpus(self):
        """"2x NVIDIA H200", from the devices the ranks used."""
        seen = {}
        for dev in self.devices():
            seen.setdefault(dev.get("uuid"), dev.get("name", "?"))
        names = sorted(set(seen.values()))
        if not names:
            return "unknown GPUs"
        return ", ".join(f"{sum(1 for v in seen.values() if v == n)}x {n}" for n in names)

    def driver(self):
        m = re.search(r"^[^,\n]+, (\d+\.\d+(?:\.\d+)?), \d+ MiB", self.machine_txt, re.M)
        # run-gpu.sh's own query (name, driver_version, clocks, power) when gpu-check.sh's file is absent
        m = m or re.search(r"^[^,\n]+, (\d+\.\d+(?:\.\d+)?), \d+ MHz", self.smi_txt, re.M)
        return m.group(1) if m else None

    def cuda(self):
        for key in ("bw", "setup", "sync"):
            v = ((self.files[key] or {}).get("driver") or {}).get("version")
            if v:
                return f"{v // 1000}.{v % 1000 // 10}"
        return None

    def standin(self):
        return any(S.standin(self.files[k]) for k in ("bw", "setup", "sync")) or \
            any(S.standin(d) for d in self.files["scale"])

    def day(self):
        return self.date[:10]

    def label(self):
        """The run as a goal or a section names it: directory, date, machine."""
        tag = ", CPU stand-in" if self.standin() else ""
        return f"`{self.name}` ({self.day()}, {self.gpus()}{tag})"


# ---- Markdown ------------------------------------------------------------------

def cell(x):
    return str(x).replace("|", "\\|").replace("\n", " ")


class Page:
    def __init__(self, out_dir):
        self.lines = []
        self.out_dir = out_dir

    def add(self, *lines):
        self.lines.extend(lines)

    def para(self, text):
        self.lines.extend([text, ""])

    def table(self, head, rows):
        self.lines.append("| " + " | ".join(cell(h) for h in head) + " |")
        self.lines.append("| " + " | ".join("---" for _ in head) + " |")
        for r in rows:
            self.lines.append("| " + " | ".join(cell(c) for c in r) + " |")
        self.lines.append("")

    def link(self, path):
        return os.path.relpath(path, self.out_dir).replace(os.sep, "/")

    def text(self):
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def build_table(page, head, keys, cols, what="row"):
    """A table whose every cell is data: cols are functions of a key that
    return the text or None. A column that is None for every key is left out,
    and so is a row with any None left; both are listed with the reason
    (each column's why(key)). cols: [(header, fn, why)]."""
    keep = [c for c in cols if any(c[1](k) is not None for k in keys)]
    dropped = [c for c in cols if c not in keep]
    rows, left = [], []
    for k in keys:
        cells = [c[1](k) for c in keep]
        if any(x is None for x in cells):
            miss = [c for c, x in zip(keep, cells) if x is None]
            left.append(f"{head(k)}: " + "; ".join(f"{c[0]}: {c[2](k)}" for c in miss))
        else:
            rows.append([head(k)] + cells)
    if rows:
        page.table([what] + [c[0] for c in keep], rows)
    notes = []
    for c in dropped:
        reasons = sorted({c[2](k) for k in keys})
        notes.append(f"no {c[0]} column: {'; '.join(reasons)}")
    for text in left:
        notes.append(f"row left out: {text}")
    if notes:
        page.para("Not in the table above: " + "; ".join(notes) + ".")
    return bool(rows)


def plots(page, runs, key, names, caption):
    """Inline the named plots from the newest run with `key` that has them;
    says which run they come from when it is not the table's."""
    base = newest(runs, key)
    for run in [r for r in runs if r.files[key]]:
        have = [n for n in names if n in run.plots]
        if not have:
            continue
        if run is not base:
            page.para(f"{caption} are those of run {run.label()}, the newest with plots ({base.name} has none).")
        for n in have:
            page.add(f"![{n[:-4]}]({page.link(os.path.join(run.path, 'plots', n))})")
        page.add("")
        return
    page.para(f"No plots: no run with this data has {caption.lower()} (plot.py needs matplotlib).")


def newest(runs, key):
    for r in runs:
        if r.files[key]:
            return r
    return None


def ms(x, digits=3):
    return None if x is None else f"{x * 1e3:.{digits}f}"


def ratio(a, b, digits=2):
    return None if a is None or not b else f"{a / b:.{digits}f}"


def stats_of(setup, coll, method, size, chunks, field="wall"):
    r = S.row(setup, coll, method, size, chunks)
    return r["stats"][field] if r else None


def why_row(setup, coll, method, size, chunks):
    return S.skipped_why(setup, coll, method, size, chunks) or "not measured in this run"


# ---- sections ------------------------------------------------------------------

def section_runs(page, runs):
    page.add("## Runs", "")
    page.para("Newest first. Every figure below names the run it comes from; a section is built from the newest "
              "run that has its data.")
    rows = []
    for r in runs:
        f = r.files
        what = []
        for key, name in (("bw", "bw"), ("setup", "setup"), ("torch", "torch"), ("sync", "sync"),
                          ("tbar", "torch_barrier")):
            if f[key]:
                what.append(name)
        if f["scale"]:
            what.append(f"setup scale x{len(f['scale'])}")
        setup = f["setup"] or f["bw"] or f["sync"]
        where = S.placement(setup) if setup else "-"
        vis = "each rank sees only its GPU" if r.visible else "all GPUs visible"
        tag = " (CPU stand-in)" if r.standin() else ""
        rows.append([f"[{r.name}]({page.link(r.path)}/)", r.date, r.gpus() + tag, f"{where}; {vis}",
                     ", ".join(what) or "none"])
    page.table(["Run", "Date", "GPUs", "Ranks", "Results"], rows)


def section_goals(page, runs):
    page.add("## Goals", "")
    page.para("Each goal is a ratio of two figures measured in the same run (`benchmarks/summarize.py` computes "
              "them from the JSON). The row shows the newest run that gave the goal a verdict; n/a says why no run "
              "did (a file or row missing, or a run on a placement the goal is not about); info rows are "
              "comparisons without a target.")
    per_run = [(r, S.goal_rows(r.files)) for r in runs]
    # One order for all runs: a goal only an older run has goes right after
    # the goal that precedes it there.
    order = []
    for _, rows in per_run:
        prev = None
        for g in rows:
            if g["id"] not in order:
                order.insert(order.index(prev) + 1 if prev is not None else 0, g["id"])
            prev = g["id"]
    out = []
    for gid in order:
        chosen, newer = None, []
        for r, rows in per_run:
            g = next((x for x in rows if x["id"] == gid), None)
            if g is None:
                continue
            if g["verdict"] != "n/a":
                chosen = (r, g)
                break
            newer.append((r, g))
        if chosen is None:
            chosen = newer[0]
            newer = []
        r, g = chosen
        measured = g["measured"]
        if newer:
            measured += "; newer runs: " + "; ".join(f"`{nr.name}`: {ng['measured']}" for nr, ng in newer)
        out.append([g["goal"], measured, g["target"], g["verdict"], r.label()])
    page.table(["Goal", "Measured", "Target", "Verdict", "Run"], out)


def section_machine(page, runs):
    page.add("## Machine", "")
    r = runs[0]
    rows = [["GPUs", r.gpus()]]
    bw = newest(runs, "bw")
    line = ((bw.files["bw"] or {}).get("line_rate") or {}) if bw else {}
    if line.get("gbps"):
        rows.append(["NVLink (run " + bw.name + ")", f"NVLink {line.get('nvlink_gen')}, {line.get('links')} links, "
                     f"{line['gbps']:.0f} GB/s per direction ({line.get('source', '')})"])
    if r.driver() or r.cuda():
        rows.append(["Driver / CUDA", f"{r.driver() or 'unknown'} / {r.cuda() or 'unknown'}"])
    m = re.search(r"^mpirun \(([^)]+)\) (\S+)", r.machine_txt, re.M)
    if m:
        rows.append(["MPI", f"{m.group(1)} {m.group(2)}"])
    nccl = next(((x.files["bw"] or {}).get("nccl_version") for x in runs if (x.files["bw"] or {}).get("nccl_version")),
                None)
    if nccl:
        rows.append(["NCCL", f"{nccl} (`NCCL_NVLS_ENABLE=0`)"])
    t = newest(runs, "torch")
    if t:
        rows.append(["PyTorch", f"{t.files['torch'].get('torch_version')} (`TORCH_SYMM_MEM_DISABLE_MULTICAST=1`)"])
    page.para(f"Of the newest run, {r.label()}; rows without data are left out.")
    page.table(["", ""], rows)


BW_SIZES = (64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB)


def bw_series(bw):
    out = {}
    for s in bw.get("series", []):
        if "skipped" in s or "error" in s or not s.get("points"):
            out[s["name"]] = s.get("skipped") or s.get("error") or "no points"
        else:
            out[s["name"]] = {p["size"]: p["gbps"] for p in s["points"]}
    return out


def section_bw(page, runs):
    page.add("## Bandwidth (`vmmipc_bw`)", "")
    run = newest(runs, "bw")
    if not run:
        page.para("Not measured yet: no results directory has a bw.json.")
        return
    bw = run.files["bw"]
    ser = bw_series(bw)
    line = (bw.get("line_rate") or {}).get("gbps")
    cfg = bw.get("config") or {}
    iters = "OSU-style iterations (100, warm-up 10, up to 1 MiB; 20, warm-up 2, above)" if cfg.get("iters") is None \
        else f"{cfg['iters']} iterations"
    page.para(f"From run {run.label()}: {S.placement(bw)}, {iters}; GB = 10^9 bytes; \"both\" figures sum the two "
              f"directions; host staging: {bw.get('host_staging', 'unknown')}.")

    def g(name, size):
        v = ser.get(name)
        return f"{v[size]:.2f}" if isinstance(v, dict) and size in v else None

    def why(name):
        v = ser.get(name)
        return "not in this run" if v is None else ("no point at this size" if isinstance(v, dict) else
                                                    f"skipped: {v}")

    def rat(a, b, size, digits=3):
        va, vb = ser.get(a), ser.get(b)
        if isinstance(va, dict) and isinstance(vb, dict) and size in va and vb.get(size):
            return f"{va[size] / vb[size]:.{digits}f}"
        return None

    def best(direction, size):
        vals = [ser[n][size] for n in (f"vmmipc.ce.read.{direction}", f"vmmipc.ce.write.{direction}")
                if isinstance(ser.get(n), dict) and size in ser[n]]
        return max(vals) if vals else None

    sizes = sorted({s for v in ser.values() if isinstance(v, dict) for s in v if s in BW_SIZES})
    for direction, title in (("uni", "One direction"), ("bidir", "Both directions at once (sum)")):
        page.add(f"### {title}, GB/s", "")
        rate = line * (2 if direction == "bidir" else 1) if line else None
        cols = []
        for op in ("read", "write"):
            v, r = f"vmmipc.ce.{op}.{direction}", f"raw_vmm.ce.{op}.{direction}"
            cols += [(f"vmmipc CE {op}", lambda s, v=v: g(v, s), lambda s, v=v: why(v)),
                     (f"raw VMM CE {op}", lambda s, r=r: g(r, s), lambda s, r=r: why(r)),
                     (f"{op} / raw", lambda s, v=v, r=r: rat(v, r, s), lambda s, v=v, r=r: why(v) + " or " + why(r))]
        if rate:
            cols.append((f"best CE, % of {rate:.0f} GB/s",
                         lambda s: None if best(direction, s) is None else f"{100 * best(direction, s) / rate:.1f}",
                         lambda s: "no vmmipc CE figure"))
        build_table(page, lambda s: S.size_str(s), sizes, cols, "Size")
        cols = [("vmmipc CE best", lambda s: None if best(direction, s) is None else f"{best(direction, s):.2f}",
                 lambda s: "no vmmipc CE figure")]
        for name, label in ((f"vmmipc.sm.read.{direction}", "vmmipc SM read"),
                            (f"vmmipc.sm.write.{direction}", "vmmipc SM write"),
                            (f"legacy_ipc.ce.read.{direction}", "legacy IPC CE read"),
                            (f"legacy_ipc.ce.write.{direction}", "legacy IPC CE write"),
                            (f"nccl.sendrecv.{direction}", "NCCL send/recv"),
                            (f"host_staged.sendrecv.{direction}", "host-staged MPI")):
            cols.append((label, lambda s, n=name: g(n, s), lambda s, n=name: why(n)))
        n = f"nccl.sendrecv.{direction}"
        cols.append(("CE best / NCCL",
                     lambda s, n=n: None if best(direction, s) is None or not isinstance(ser.get(n), dict)
                     or not ser[n].get(s) else f"{best(direction, s) / ser[n][s]:.2f}",
                     lambda s, n=n: why(n)))
        build_table(page, lambda s: S.size_str(s), sizes, cols, "Size")

    page.add("### Line rate", "")
    lr = bw.get("line_rate") or {}
    if lr.get("gbps"):
        rows = [["Line rate per direction", f"{lr['gbps']:.0f} GB/s: {lr.get('links')} links x "
                 f"{lr.get('per_link_gbps')} GB/s (NVLink {lr.get('nvlink_gen')}; nvidia-smi shows "
                 f"{lr.get('smi_link_gbps')} GB/s per link, the signalling rate)"]]
        b = best("uni", GiB)
        if b is not None:
            rows.append(["Best CE figure at 1 GiB, one direction", f"{b:.2f} GB/s = {100 * b / lr['gbps']:.1f}%"])
        page.table(["", ""], rows)
    else:
        page.para(f"No line rate in this run: {lr.get('skipped') or lr.get('source') or 'not detected'}.")

    mats = bw.get("matrices", [])
    for m in mats:
        if "skipped" in m or not m.get("gbps"):
            page.para(f"Peer matrix {m.get('name')}: skipped: {m.get('skipped', 'no data')}.")
            continue
        page.add(f"### Peer matrix `{m['name']}` at {S.size_str(m['size'])}, GB/s (row = source rank, column = "
                 f"destination rank)", "")
        n = len(m["gbps"])
        page.table([""] + [f"rank {j}" for j in range(n)],
                   [[f"rank {i}"] + ["-" if v is None else f"{v:.1f}" for v in row] for i, row in
                    enumerate(m["gbps"])])
    if not mats:
        page.para("No peer matrix in this run.")
    names = [f"bw_{op}_{d}.png" for op in ("read", "write") for d in ("uni", "bidir")]
    names += sorted(n for r in runs for n in r.plots if n.startswith("bw_matrix_"))
    plots(page, runs, "bw", sorted(set(names), key=names.index), "The bandwidth plots")


def cache_text(r):
    k = (r or {}).get("cache") or {}
    h, m = k.get("hits", 0), k.get("misses", 0)
    return None if h + m == 0 else f"{100 * h / (h + m):.0f}%"


def section_setup(page, runs):
    page.add("## Mapping latency (`vmmipc_setup`)", "")
    run = newest(runs, "setup")
    if not run:
        page.para("Not measured yet: no results directory has a setup.json.")
        return
    setup, torch = run.files["setup"], run.files["torch"]
    cfg = setup.get("config") or {}
    modes = S.has_modes(setup)
    res = setup.get("results", [])
    page.para(f"From run {run.label()}: {S.placement(setup)}; root {setup.get('root', 0)} for bcast_map and "
              f"scatter_map. Times in ms: the median over the repetitions after the first call (each repetition "
              f"the maximum over ranks), the first call separately. Repetitions: {cfg.get('reps')}, "
              f"{cfg.get('reps_large')} from 1 GiB" + (f", at most about {cfg['budget_s']:g} s per combination "
                                                       f"(at least 3)" if cfg.get("budget_s") else "") + ".")
    if modes:
        page.para("*First mapping* (`vmmipc`): fresh buffers before every repetition (made untimed), so neither "
                  "the export cache nor the mapping cache can help; that comm's mapping cache is "
                  + ("off" if cfg.get("first_map_cache_entries") == 0 else "on") + ". *Mapped again* "
                  "(`vmmipc_again`): the same buffers every repetition, default config; hits = imports served by "
                  "the mapping cache (`vmmipc_comm_stats`). Neither includes the comm's first window, measured "
                  "on its own below.")
    else:
        page.para("This run predates the first-mapping / mapped-again split: its `vmmipc` rows mapped the same "
                  "buffer every repetition with a library that had no caches, so every repetition paid a full "
                  "first mapping.")
    if setup.get("incomplete"):
        page.para(f"Incomplete run: {setup['incomplete']}.")

    sizes = sorted({r["size"] for r in res if r.get("coll") == "allgather_map"})
    chunkset = sorted({r["chunks"] for r in res if r.get("coll") == "allgather_map"})
    again_any = any(r.get("method") == "vmmipc_again" for r in res)

    def med(method, size, chunks, coll="allgather_map", field="wall"):
        st = stats_of(setup, coll, method, size, chunks, field)
        return st["median"] if st else None

    def first_call(size, chunks, coll="allgather_map"):
        r = S.row(setup, coll, "vmmipc", size, chunks)
        return r["first"]["wall"] if r else None

    def band(size, chunks, coll="allgather_map"):
        st = stats_of(setup, coll, "vmmipc", size, chunks)
        return None if not st else f"{st['median'] * 1e3:.3f} [{st['p10'] * 1e3:.3f}, {st['p90'] * 1e3:.3f}]"

    def torch_med(size, field):
        return S.result(torch, "rendezvous", "torch_symm_mem", size, 1, field) if torch else None

    def torch_why(size):
        if not torch:
            return "no torch.json in this run"
        return S.skipped_why(torch, "rendezvous", "torch_symm_mem", size, 1) or "not measured at this size"

    first_label = "vmmipc first mapping" if modes else "vmmipc"
    if modes and setup.get("comm_first_window"):
        page.add("### The comm's first window and one agreement", "")
        w = setup["comm_first_window"]
        rows = [[f"the comm's first allgather_map ({S.size_str(w.get('size', 0))} x 1; makes the signal pool), "
                 f"once", ms(w.get("wall")), ms(w.get("export")), ms(w.get("transfer")), ms(w.get("import")),
                 ms(w.get("map")), ms(w.get("access")), ms(w.get("agree"))]]
        nul = S.row(setup, "allgather_desc", "vmmipc", 0, 0)
        if nul:
            st = nul["stats"]
            rows.append([f"allgather_desc(NULL): one exchange and one agreement, median of {nul['reps']}",
                         ms(st["wall"]["median"]), ms(st["export"]["median"]), ms(st["transfer"]["median"]),
                         ms(st["import"]["median"]), ms(st["map"]["median"]), ms(st["access"]["median"]),
                         ms(st["agree"]["median"])])
        page.table(["What", "Wall", "Export", "Transfer", "Import", "Map", "Access", "Agree"], rows)

    page.add(f"### allgather_map, 1 chunk, {S.placement(setup)}", "")
    cols = [(f"{first_label}: first call", lambda s: ms(first_call(s, 1)), lambda s: why_row(setup, "allgather_map",
                                                                                          "vmmipc", s, 1)),
            (f"{first_label}: median [p10, p90]", lambda s: band(s, 1),
             lambda s: why_row(setup, "allgather_map", "vmmipc", s, 1))]
    if again_any:
        cols += [("mapped again: median", lambda s: ms(med("vmmipc_again", s, 1)),
                  lambda s: why_row(setup, "allgather_map", "vmmipc_again", s, 1)),
                 ("mapped again: hits", lambda s: cache_text(S.row(setup, "allgather_map", "vmmipc_again", s, 1)),
                  lambda s: "the library counted no mapping-cache hits or misses")]
    cols += [("floor", lambda s: ms(med("floor", s, 1)), lambda s: why_row(setup, "allgather_map", "floor", s, 1)),
             ("x floor", lambda s: ratio(med("vmmipc", s, 1), med("floor", s, 1)),
              lambda s: why_row(setup, "allgather_map", "floor", s, 1)),
             ("legacy IPC", lambda s: ms(med("legacy_ipc", s, 1)),
              lambda s: why_row(setup, "allgather_map", "legacy_ipc", s, 1)),
             ("x legacy IPC", lambda s: ratio(med("vmmipc", s, 1), med("legacy_ipc", s, 1)),
              lambda s: why_row(setup, "allgather_map", "legacy_ipc", s, 1)),
             ("PyTorch rendezvous", lambda s: ms(torch_med(s, "rendezvous")), torch_why),
             ("PyTorch empty + rendezvous", lambda s: ms(torch_med(s, "wall")), torch_why)]
    build_table(page, S.size_str, [s for s in sizes if S.row(setup, "allgather_map", "vmmipc", s, 1)
                                   or S.row(setup, "allgather_map", "floor", s, 1)], cols, "Size")

    many = [c for c in chunkset if c > 1]
    if many:
        page.add(f"### allgather_map, {' and '.join(str(c) for c in many)} chunks", "")
        keys = [(s, c) for c in many for s in sizes if S.row(setup, "allgather_map", "vmmipc", s, c)
                or S.row(setup, "allgather_map", "floor", s, c)]
        cols = [(f"{first_label}: first call", lambda k: ms(first_call(*k)),
                 lambda k: why_row(setup, "allgather_map", "vmmipc", *k)),
                (f"{first_label}: median [p10, p90]", lambda k: band(*k),
                 lambda k: why_row(setup, "allgather_map", "vmmipc", *k))]
        if again_any:
            cols += [("mapped again: median", lambda k: ms(med("vmmipc_again", *k)),
                      lambda k: why_row(setup, "allgather_map", "vmmipc_again", *k)),
                     ("mapped again: hits", lambda k: cache_text(S.row(setup, "allgather_map", "vmmipc_again", *k)),
                      lambda k: "the library counted no mapping-cache hits or misses")]
        cols += [("floor", lambda k: ms(med("floor", *k)), lambda k: why_row(setup, "allgather_map", "floor", *k)),
                 ("x floor", lambda k: ratio(med("vmmipc", *k), med("floor", *k)),
                  lambda k: why_row(setup, "allgather_map", "floor", *k)),
                 ("vmmipc ms per chunk", lambda k: None if med("vmmipc", *k) is None else
                  f"{med('vmmipc', *k) / k[1] * 1e3:.4f}", lambda k: why_row(setup, "allgather_map", "vmmipc", *k)),
                 ("floor ms per chunk", lambda k: None if med("floor", *k) is None else
                  f"{med('floor', *k) / k[1] * 1e3:.4f}", lambda k: why_row(setup, "allgather_map", "floor", *k))]
        build_table(page, lambda k: f"{S.size_str(k[0])} x {k[1]}", keys, cols, "Size x chunks")

    # Phases at 1 GiB (or the largest size measured).
    size = GiB if GiB in sizes else (sizes[-1] if sizes else None)
    if size:
        page.add(f"### Where the time goes: allgather_map at {S.size_str(size)}, medians (ms)", "")
        page.para("From `vmmipc_comm_last_timing` for the library (maximum over ranks); the anchors fill the same "
                  "fields: the floor's export is `cuMemExportToShareableHandle`, its transfer `sendmsg`, its map "
                  "includes `cuMemAddressReserve`; legacy IPC's export is `cuIpcGetMemHandle`, its transfer "
                  "`MPI_Allgather` and its import `cuIpcOpenMemHandle`. Each phase is its own maximum over ranks, "
                  "so the phases may add up to more than the wall time (one rank agrees while another still sets "
                  "access).")
        keys = [(c, m) for c in chunkset for m in ("vmmipc", "vmmipc_again", "floor", "legacy_ipc")
                if S.row(setup, "allgather_map", m, size, c)]
        fields = ("export", "transfer", "import", "map", "access", "agree", "wall")
        cols = [(f.capitalize(), lambda k, f=f: ms(med(k[1], size, k[0], field=f)), lambda k: "no data")
                for f in fields]
        build_table(page, lambda k: f"{k[0]} chunk{'s' if k[0] > 1 else ''}, {k[1]}", keys, cols, "Chunks, method")

    rooted = [c for c in ("bcast_map", "scatter_map") if any(r.get("coll") == c for r in res)]
    if rooted:
        page.add(f"### bcast_map and scatter_map (root {setup.get('root', 0)}), medians (ms)", "")
        pick_sizes = [s for s in (2 * MiB, GiB) if s in sizes] or sizes[-1:]
        keys = [(c, s, ch) for c in rooted for s in pick_sizes for ch in chunkset
                if S.row(setup, c, "vmmipc", s, ch) or S.row(setup, c, "floor", s, ch)]
        cols = [(first_label, lambda k: ms(med("vmmipc", k[1], k[2], k[0])),
                 lambda k: why_row(setup, k[0], "vmmipc", k[1], k[2]))]
        if again_any:
            cols.append(("mapped again", lambda k: ms(med("vmmipc_again", k[1], k[2], k[0])),
                         lambda k: why_row(setup, k[0], "vmmipc_again", k[1], k[2])))
        cols += [("floor", lambda k: ms(med("floor", k[1], k[2], k[0])),
                  lambda k: why_row(setup, k[0], "floor", k[1], k[2])),
                 ("x floor", lambda k: ratio(med("vmmipc", k[1], k[2], k[0]), med("floor", k[1], k[2], k[0])),
                  lambda k: why_row(setup, k[0], "floor", k[1], k[2]))]
        build_table(page, lambda k: f"{k[0]}, {S.size_str(k[1])} x {k[2]}", keys, cols, "Collective, size x chunks")
        page.para("In bcast_map and scatter_map the non-roots' agree phase includes waiting for the root's export.")
    if not again_any:
        page.para("Mapped again (cache hits): not measured yet: run " + run.name + " has no `vmmipc_again` rows "
                  "(they come with the export and mapping caches).")
    names = ["setup_allgather_map.png", "setup_allgather_phases.png", "setup_allgather_phases_again.png",
             "setup_bcast_map.png", "setup_scatter_map.png"]
    plots(page, runs, "setup", names, "The mapping-latency plots")


def section_start(page, runs, key, title, files, writer):
    """The section's heading and its newest run, or None after saying that
    no results directory has its files."""
    page.add(f"## {title}", "")
    run = newest(runs, key)
    if not run:
        page.para(f"Not measured yet: no results directory has {files} ({writer} writes them).")
    return run


def section_scale(page, runs):
    run = section_start(page, runs, "scale", "Many ranks: cost per mapping (`vmmipc_setup`, scale step)",
                        "setup_scale_*.json", "run-gpu.sh's scale step, allgather_map with 2 to 32 ranks on one GPU "
                        "and on two,")
    if not run:
        return
    page.para(f"From run {run.label()}. allgather_map with N ranks, each exporting the chunked buffer below; a "
              f"mapping is one peer chunk mapped by one rank, and the mappings on the busiest GPU are ranks there x "
              f"(ranks - 1) x chunks. Per mapping = median / those mappings. 2 MiB x 1 chunk is measured next to "
              f"legacy IPC in the same launch.")
    for gpus, name in ((1, "one GPU"), (2, "two GPUs")):
        ds = [d for d in run.files["scale"] if S.scale_gpus_wanted(d) == gpus]
        page.add(f"### {name[0].upper() + name[1:]}", "")
        measured = [d for d in ds if "skipped" not in d]
        skipped = [d for d in ds if "skipped" in d]
        if not measured:
            page.para("Not measured: " + ("; ".join(f"{d.get('ranks')} ranks: {d['skipped']}" for d in skipped)
                                          if skipped else "no launch in this run") + ".")
            continue
        pt = None
        for d in measured:
            pm = S.per_mapping(d, "vmmipc") or S.per_mapping(d, "floor")
            if pm:
                pt = (pm[1]["size"], pm[1]["chunks"])
                break

        def pm(d, method):
            x = S.per_mapping(d, method)
            return x[0] if x else None

        def why(d, method):
            return S.skipped_why(d, "allgather_map", method, *pt) or "not measured" if pt else "not measured"

        cols = [("CPUs", lambda d: str(d.get("cpus")) if d.get("cpus") else None, lambda d: "not recorded"),
                ("mappings on the busiest GPU", lambda d: None if not pt else
                 str((d.get("ranks_per_gpu") or d["ranks"]) * (d["ranks"] - 1) * pt[1]), lambda d: "no chunked row")]
        for method, label in (("vmmipc", "first mapping"), ("vmmipc_again", "mapped again"), ("floor", "floor")):
            cols += [(f"{label}: median", lambda d, m=method: ms(S.result(d, "allgather_map", m, *pt)) if pt else None,
                      lambda d, m=method: why(d, m)),
                     (f"{label}: per mapping", lambda d, m=method: ms(pm(d, m), 4), lambda d, m=method: why(d, m))]
        cols += [("2 MiB x 1: first mapping", lambda d: ms(S.result(d, "allgather_map", "vmmipc", 2 * MiB, 1)),
                  lambda d: S.skipped_why(d, "allgather_map", "vmmipc", 2 * MiB, 1) or "not measured"),
                 ("2 MiB x 1: legacy IPC", lambda d: ms(S.result(d, "allgather_map", "legacy_ipc", 2 * MiB, 1)),
                  lambda d: S.skipped_why(d, "allgather_map", "legacy_ipc", 2 * MiB, 1) or "not measured")]
        if pt:
            page.para(f"Buffer per rank: {S.size_str(pt[0])} x {pt[1]} chunks; times in ms.")
        build_table(page, lambda d: str(d["ranks"]), measured, cols, "Ranks")
        if skipped:
            page.para("Not measured: " + "; ".join(f"{d.get('ranks')} ranks: {d['skipped']}" for d in skipped) + ".")
    plots(page, runs, "scale", ["setup_scale.png"], "The scale plots")


def section_probes(page, runs):
    run = section_start(page, runs, "probes", "Design probes: one access call for all peers, a thread per peer",
                        "setup_probes_*.json", "run-gpu.sh's probe step")
    if not run:
        return
    page.para(f"From run {run.label()}. Issue 11 asked to measure two ways of importing before the library "
              f"adopts either: `floor_joint` maps every peer's chunks back to back in one reserved range and sets "
              f"access once over all of it; `floor_threads` gives every peer a thread that receives, imports, maps "
              f"and sets access. Both are the floor (raw driver calls, no library) changed in that one respect, so "
              f"x floor says what the idea is worth. `legacy_ipc_fresh` opens a new `cuMemAlloc` buffer every "
              f"repetition, `legacy_ipc` the same one again. allgather_map; times in ms (median).")
    keys = [(d, pt) for d in run.files["probes"] if "skipped" not in d
            for pt in sorted({(r["size"], r["chunks"]) for r in d.get("results", [])
                              if r.get("coll") == "allgather_map"})]

    def med(k, method):
        return S.result(k[0], "allgather_map", method, *k[1])

    def why(k, method):
        return S.skipped_why(k[0], "allgather_map", method, *k[1]) or "not measured"

    cols = []
    for method in ("vmmipc", "floor", "floor_joint", "floor_threads"):
        cols.append((method, lambda k, m=method: ms(med(k, m)), lambda k, m=method: why(k, m)))
        if method.startswith("floor_"):
            cols.append((f"{method} x floor", lambda k, m=method: ratio(med(k, m), med(k, "floor")),
                         lambda k, m=method: why(k, m)))
    head = lambda k: f"{S.placement(k[0])}, {S.size_str(k[1][0])} x {k[1][1]}"  # noqa: E731
    build_table(page, head, keys, cols, "Placement")
    page.para("Legacy IPC has one chunk only; the same launches, first mapping of a 2 MiB buffer:")
    cols = [("vmmipc", lambda k: ms(med(k, "vmmipc")), lambda k: why(k, "vmmipc"))]
    for method in ("legacy_ipc", "legacy_ipc_fresh"):
        cols.append((method, lambda k, m=method: ms(med(k, m)), lambda k, m=method: why(k, m)))
        cols.append((f"vmmipc / {method}", lambda k, m=method: ratio(med(k, "vmmipc"), med(k, m)),
                     lambda k, m=method: why(k, m)))
    build_table(page, head, [k for k in keys if k[1][1] == 1], cols, "Placement")


def section_sync(page, runs):
    page.add("## Window synchronisation (`vmmipc_sync`)", "")
    run = newest(runs, "sync")
    if not run:
        page.para("Not measured yet: no results directory has a sync.json (run-gpu.sh runs `vmmipc_sync` first; "
                  "its goals, from issue 13, appear in the goals table once a run has it).")
        return
    sync, tbar = run.files["sync"], run.files["tbar"]
    nccl = sync.get("nccl_version") or f"skipped: {sync.get('nccl_skipped', 'unknown')}"
    warn = f" {sync['warning']}." if sync.get("warning") else ""
    page.para(f"From run {run.label()}: {sync.get('placement', S.placement(sync))}; NCCL {nccl}.{warn} "
              f"Latency per operation in us (one way = half a round trip); `queued`: the batch held behind a gate "
              f"until all is enqueued (GPU time), `issued`: the plain loop, `host`: host clock.")
    entries = [("vmmipc_sync", e) for e in sync.get("latency", [])]
    if tbar:
        entries += [("torch_barrier", e) for e in tbar.get("latency", [])]
    keep = [(src, e) for src, e in entries if "stats" in e and "skipped" not in e and "error" not in e]
    gone = [(src, e) for src, e in entries if (src, e) not in keep]
    page.add("### Latency", "")
    if keep:
        page.table(["Entry", "Mode", "What", "Median (us)", "p10", "p90", "Batches x iterations", "Timer"],
                   [[e["name"], e["mode"], e["what"].replace("_", " "), f"{e['stats']['median'] * 1e6:.2f}",
                     f"{e['stats']['p10'] * 1e6:.2f}", f"{e['stats']['p90'] * 1e6:.2f}",
                     f"{e['reps']} x {e['iters']}", e["timer"]] for _, e in keep])
    if gone:
        page.para("Not measured: " + "; ".join(f"{e['name']} ({e['mode']}): "
                                               f"{e.get('skipped') or e.get('error') or 'no samples'}"
                                               for _, e in gone) + ".")
    page.add("### Put + signal bandwidth, GB/s", "")
    bws = {(s["name"], s["mode"]): s for s in sync.get("bandwidth", [])}
    pts = {k: {p["size"]: p["gbps"] for p in s.get("points", [])} for k, s in bws.items()
           if "skipped" not in s and "error" not in s and s.get("points")}
    sizes = sorted({sz for v in pts.values() for sz in v})
    cols = []
    for mode in ("queued", "issued"):
        for name, label in (("vmmipc.put_signal", "vmmipc put + signal"), ("nccl.sendrecv", "NCCL send/recv")):
            k = (name, mode)
            cols.append((f"{label} [{mode}]", lambda s, k=k: f"{pts[k][s]:.3f}" if k in pts and s in pts[k] else None,
                         lambda s, k=k: (bws[k].get("skipped") or bws[k].get("error") or "no point")
                         if k in bws else "not run"))
        a, b = ("vmmipc.put_signal", mode), ("nccl.sendrecv", mode)
        cols.append((f"vmmipc / NCCL [{mode}]", lambda s, a=a, b=b: f"{pts[a][s] / pts[b][s]:.2f}"
                     if a in pts and b in pts and s in pts[a] and pts[b].get(s) else None,
                     lambda s, b=b: "no NCCL figure"))
    if sizes:
        build_table(page, S.size_str, sizes, cols, "Size")
    else:
        page.para("No bandwidth point was measured in this run.")
    plots(page, runs, "sync", ["sync_latency.png", "sync_bandwidth.png"], "The synchronisation plots")


def section_visible(page, runs):
    page.add("## GPUs hidden from each other", "")
    vis = [r for r in runs if r.visible]
    if not vis:
        page.para("Not measured yet: no run with `run-gpu.sh --per-rank-visible` (each rank sees only its own GPU "
                  "through `CUDA_VISIBLE_DEVICES`; its nvidia-smi.log says `per-rank visible: 1`).")
        return
    r = vis[0]
    page.para(f"From run {r.label()}, made with `run-gpu.sh --per-rank-visible`.")
    rows = []
    for op in ("read", "write"):
        v = S.series(r.files["bw"], f"vmmipc.ce.{op}.uni")
        if v and GiB in v:
            rows.append([f"vmmipc CE {op} at 1 GiB, one direction", f"{v[GiB]:.2f} GB/s"])
    setup = r.files["setup"]
    lib = S.result(setup, "allgather_map", "vmmipc", GiB, 1)
    if lib is not None:
        rows.append(["allgather_map 1 GiB x 1 chunk, median", f"{lib * 1e3:.3f} ms"])
    ipc = S.result(setup, "allgather_map", "legacy_ipc", 2 * MiB, 1)
    why = S.skipped_why(setup, "allgather_map", "legacy_ipc", 2 * MiB, 1)
    if ipc is not None or why:
        rows.append(["legacy IPC anchor, 2 MiB", f"{ipc * 1e3:.3f} ms" if ipc is not None else f"skipped: {why}"])
    if rows:
        page.table(["Check", "Result"], rows)
    else:
        page.para("That run has neither bw.json nor setup.json.")


def section_method(page):
    page.add("## How the figures were taken", "")
    page.add("* Bandwidth: CUDA events around `iters` back-to-back copies on one stream per rank after a barrier; "
             "the slowest copying rank's time; host staging with `MPI_Wtime`. A 64 KiB copy each way is checked "
             "byte for byte before timing.",
             "* Mapping latency: wall time from a barrier to the call's return on each rank, the maximum over ranks "
             "per repetition; phases from `vmmipc_comm_last_timing` (the anchors fill the same fields). The mapping "
             "is checked through marker bytes after the first call of every combination.",
             "* Window synchronisation: batches of iterations between two CUDA events on the rank's stream (the "
             "host round trip on the host clock); a batch's time is the slowest rank's.",
             "* Every speed claim is a ratio against an anchor measured in the same run. The test suites assert no "
             "timing: CI runs the programs on the CPU stand-in only to check that they run and write well-formed "
             "JSON.",
             "")
    page.para("See `benchmarks/README.md` for the programs, their options and every column.")


def section_history(page, runs):
    page.add("## History", "")
    if len(runs) < 2:
        page.para("No older run.")
        return
    page.para("The goals as each older run measured them.")
    for r in runs[1:]:
        page.add(f"### {r.name}", "")
        page.para(f"{r.label()}, {r.date}.")
        rows = S.goal_rows(r.files)
        if rows:
            page.table(["Goal", "Measured", "Target", "Verdict"],
                       [[g["goal"], g["measured"], g["target"], g["verdict"]] for g in rows])
        else:
            page.para("No goal: the run has no benchmark JSON.")


def generate(dirs, out):
    runs = [Run(d) for d in dirs]
    runs = [r for r in runs if r.any()]
    runs.sort(key=lambda r: (r.date, r.name), reverse=True)
    page = Page(os.path.dirname(os.path.abspath(out)))
    page.add("# Performance", "")
    page.add("<!-- Generated by benchmarks/gen_performance.py from benchmarks/results/; do not edit by hand: "
             "add a results directory and run the script (benchmarks/README.md, \"The performance page\"). -->", "")
    page.para("What vmmipc costs and what it delivers, measured by the programs in `benchmarks/` (see "
              "`benchmarks/README.md` for how they run and what every column means), each next to anchors that do "
              "the same job without vmmipc.")
    if not runs:
        page.para("Not measured yet: no results directory with benchmark JSON.")
        return page.text()
    section_runs(page, runs)
    section_goals(page, runs)
    section_machine(page, runs)
    section_bw(page, runs)
    section_setup(page, runs)
    section_scale(page, runs)
    section_probes(page, runs)
    section_sync(page, runs)
    section_visible(page, runs)
    section_method(page)
    section_history(page, runs)
    return page.text()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", metavar="RESULTS_DIR")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "performance.md"))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args()
    dirs = a.dirs
    if not dirs:
        base = os.path.join(HERE, "results")
        dirs = sorted(os.path.join(base, n) for n in os.listdir(base) if os.path.isdir(os.path.join(base, n)))
    for d in dirs:
        if not os.path.isdir(d):
            print(f"gen_performance.py: {d} is not a directory", file=sys.stderr)
            return 2
    text = generate(dirs, a.out)
    if a.check:
        have = read_text(a.out)
        if have == text:
            print(f"gen_performance.py: {a.out} matches the results ({len(dirs)} directories)")
            return 0
        sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                                   a.out + " (committed)", a.out + " (generated)"))
        print(f"gen_performance.py: {a.out} differs from what the results give; regenerate it with "
              f"python3 benchmarks/gen_performance.py", file=sys.stderr)
        return 1
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"gen_performance.py: wrote {a.out} from {len(dirs)} directories")
    return 0


if __name__ == "__main__":
    sys.exit(main())
