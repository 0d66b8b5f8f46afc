"""Reading benchmark JSON and results directories: the one place that knows
the files' shapes (vmmipc_bw, vmmipc_setup, vmmipc_sync, torch_symm_mem,
torch_barrier, and issue 30's vmmipc_device_bench, vmmipc_floor_bench,
nvshmem_bench and vmmipc_heap, told apart by their "benchmark" key)."""
import json
import os
import re
import sys

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
ROLES = {"vmmipc_bw": "bw", "torch_symm_mem": "torch", "vmmipc_sync": "sync", "torch_barrier": "tbar"}
# Issue 30's programs: one file per launch (ranks, MPS on or off, host path), so a list per role.
LISTS = {"vmmipc_device_bench": "device", "vmmipc_floor_bench": "floor", "nvshmem_bench": "nvshmem",
         "vmmipc_heap": "heap"}


def load(paths):
    """[(path, data)] of the files that parse; a results directory stands
    for its *.json files."""
    files = []
    for p in paths:
        files += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".json")) if os.path.isdir(p) else [p]
    out = []
    for p in files:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"report: skipping {p}: {e}", file=sys.stderr)
            continue
        if isinstance(d, dict):
            out.append((p, d))
    return out


def pick(loaded):
    """One run's files by role: bw, setup (the main sweep), torch, sync, tbar;
    scale and probes (run-gpu.sh's extra vmmipc_setup launches) sorted by the
    GPUs they wanted, then ranks."""
    run = {"bw": None, "setup": None, "torch": None, "sync": None, "tbar": None, "scale": [], "probes": []}
    run.update({k: [] for k in LISTS.values()})
    for _, d in loaded:
        kind = d.get("benchmark")
        if kind in LISTS:
            run[LISTS[kind]].append(d)
        elif kind == "vmmipc_setup" and d.get("tag") in ("scale", "probes"):
            run[d["tag"]].append(d)
        elif kind == "vmmipc_setup" and run["setup"] is None:
            run["setup"] = d
        elif kind in ROLES and run[ROLES[kind]] is None:
            run[ROLES[kind]] = d
    for k in ("scale", "probes"):
        run[k].sort(key=lambda d: (gpus_wanted(d), d.get("ranks") or 0))
    for k in LISTS.values():  # a fixed order whatever the file names: ranks, MPS on first, then the path
        run[k].sort(key=lambda d: (d.get("ranks") or 0, d.get("mps") is not True, str(d.get("vmmipc_sync"))))
    return run


def issue30(files):
    """Whether a run has issue 30's files."""
    return any(files.get(k) for k in LISTS.values())


def gpus_of(d):
    """Distinct devices among the ranks (older files have no "gpus")."""
    return d.get("gpus") or len({x.get("uuid") for x in d.get("devices", [])}) or None


def gpus_wanted(d):
    return d.get("gpus_wanted") or gpus_of(d) or 0


def placement(d):
    g = gpus_of(d)
    return f"{d.get('ranks')} ranks on {g} GPU{'' if g == 1 else 's'}"


def standin(d):
    return bool(((d or {}).get("driver") or {}).get("standin") or (d or {}).get("standin"))


def size_str(n):
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def ok(e):
    """Measured: neither skipped nor failed."""
    return e is not None and "skipped" not in e and "error" not in e


def why(e, what):
    return f"{what} not run" if e is None else f"{what}: " + (e.get("skipped") or e.get("error") or "no data")


def series(bw, name):
    """{size: GB/s} of a measured vmmipc_bw series, else None."""
    s = next((s for s in (bw or {}).get("series", []) if s.get("name") == name), None)
    return {p["size"]: p["gbps"] for p in s.get("points", [])} if ok(s) else None


def series_entry(bw, name):
    return next((s for s in (bw or {}).get("series", []) if s.get("name") == name), None)


def entry(setup, coll, method, size, chunks):
    """The vmmipc_setup result (measured or not), or None."""
    for r in (setup or {}).get("results", []):
        if (r.get("coll"), r.get("method"), r.get("size"), r.get("chunks")) == (coll, method, size, chunks):
            return r
    return None


def row(setup, coll, method, size, chunks):
    """The measured result, or None."""
    r = entry(setup, coll, method, size, chunks)
    return r if ok(r) and "stats" in r else None


def median(setup, coll, method, size, chunks, field="wall"):
    r = row(setup, coll, method, size, chunks)
    return r["stats"][field]["median"] if r else None


def missing(setup, method, size, chunks, coll="allgather_map"):
    """Why a setup row has no figure."""
    if not setup:
        return "no vmmipc_setup file"
    r = entry(setup, coll, method, size, chunks)
    return f"{method} {size_str(size)} x {chunks}: " + ((r or {}).get("skipped") or (r or {}).get("error")
                                                        or "not in this run")


def has_modes(setup):
    """Files from before the first-mapping / mapped-again split have neither
    mode in their config (every repetition a full first mapping)."""
    return "first" in ((setup or {}).get("config") or {})


def lat(d, name, mode):
    return next((e for e in (d or {}).get("latency", []) if e.get("name") == name and e.get("mode") == mode), None)


def lat_median(e):
    return e["stats"]["median"] if ok(e) and "stats" in e else None


def per_mapping(d, method):
    """(seconds per mapping, row) of a scale file's chunked allgather_map row:
    mappings on the busiest GPU = ranks there x (ranks - 1) x chunks."""
    ranks = d.get("ranks") or 0
    rs = [r for r in d.get("results", []) if r.get("coll") == "allgather_map" and r.get("method") == method
          and r.get("chunks", 0) > 1 and ok(r) and "stats" in r]
    if not rs or ranks < 2:
        return None
    r = max(rs, key=lambda r: (r["chunks"], r["size"]))
    return r["stats"]["wall"]["median"] / ((d.get("ranks_per_gpu") or ranks) * (ranks - 1) * r["chunks"]), r


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Run:
    """A results directory of run-gpu.sh (and gpu-check.sh's machine.txt)."""

    def __init__(self, path, root):
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path.rstrip(os.sep))
        self.files = pick(load([self.path]))
        self.machine = read_text(os.path.join(self.path, "machine.txt"))
        self.smi = read_text(os.path.join(self.path, "nvidia-smi.log"))
        m = re.search(r"^date: (\S+)", self.machine, re.M) or re.search(r"^date: (\S+)", self.smi, re.M)
        d = re.match(r"\d{4}-\d{2}-\d{2}", self.name)
        self.date = m.group(1) if m else (d.group(0) if d else "unknown")
        m = re.search(r"^per-rank visible: (\d)", self.smi, re.M)
        self.visible = bool(m and m.group(1) == "1")
        pdir = os.path.join(self.path, "plots")
        self.plots = sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []

    def any(self):
        return any(self.files[k] for k in ROLES.values()) or bool(self.files["setup"] or self.files["scale"]) \
            or issue30(self.files)

    def main(self):
        return self.files["bw"] or self.files["setup"] or self.files["sync"] or \
            next((d for d in self.files["device"] if "skipped" not in d), None)

    def singles(self):
        """The files of one role each, then issue 30's lists, in that order."""
        return [self.files[k] for k in ("bw", "setup", "sync")] + [d for k in LISTS.values() for d in self.files[k]]

    def gpus(self):
        """"2x NVIDIA H200", from the devices the ranks used."""
        seen = {}
        for f in self.singles():
            for dev in (f or {}).get("devices", []):
                seen.setdefault(dev.get("uuid"), dev.get("name", "?"))
            if seen:
                break
        names = sorted(set(seen.values()))
        return ", ".join(f"{list(seen.values()).count(n)}x {n}" for n in names) or "unknown GPUs"

    def model(self):
        """"NVIDIA H200": the device names without their count (figures of one model do not stand for another's)."""
        return ", ".join(sorted({d.get("name", "?") for f in self.singles() for d in (f or {}).get("devices", [])})) \
            or "unknown GPUs"

    def driver(self):
        m = re.search(r"^[^,\n]+, (\d+\.\d+(?:\.\d+)?), \d+ M(?:iB|Hz)", self.machine + "\n" + self.smi, re.M)
        return m.group(1) if m else None

    def cuda(self):
        for f in self.singles():
            v = ((f or {}).get("driver") or {}).get("version")
            if v:
                return f"{v // 1000}.{v % 1000 // 10}"
        return None

    def standin(self):
        return any(standin(self.files[k]) for k in ("bw", "setup", "sync")) or any(map(standin, self.files["scale"]))

    def label(self):
        tag = ", CPU stand-in" if self.standin() else ""
        return f"`{self.name}` ({self.date[:10]}, {self.gpus()}{tag})"


def runs(dirs, root):
    """The runs with benchmark JSON, newest first (date, then name)."""
    rs = [r for r in (Run(d, root) for d in dirs) if r.any()]
    return sorted(rs, key=lambda r: (r.date, r.name), reverse=True)
