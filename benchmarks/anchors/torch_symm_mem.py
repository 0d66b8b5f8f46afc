#!/usr/bin/env python3
"""Anchor for vmmipc_setup: PyTorch symmetric memory.

Times symm_mem.empty (empty_strided_p2p on older torch) and
symm_mem.rendezvous of a fresh buffer per repetition, for the sizes that
vmmipc_setup uses, and prints (or writes) JSON in vmmipc_setup's shape:
results with coll "rendezvous", method "torch_symm_mem", fields wall
(empty + rendezvous), alloc and rendezvous; each repetition is the maximum
over ranks; "first" is the first call at that size, the stats cover the rest.

Run with torchrun (or python3 -m torch.distributed.run --standalone
--nproc-per-node 2) or with mpirun (the OMPI_COMM_WORLD_* variables are
mapped). Multicast is kept off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NCCL_NVLS_ENABLE=0 are set before torch is imported.
"""
import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time


def parse_size(s):
    s = s.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def mpi_env():
    """Lets mpirun stand in for torchrun."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" not in os.environ:
        return
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ["LOCAL_RANK"] = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ["RANK"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")


def stats(v):
    if not v:
        return None
    s = sorted(v)

    def pct(p):
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median": pct(0.5), "p10": pct(0.1), "p90": pct(0.9), "min": s[0], "max": s[-1],
            "mean": statistics.fmean(s)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-size", default="2M")
    ap.add_argument("--max-size", default="4G")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--reps-large", type=int, default=0, help="reps for sizes >= 1 GiB (default --reps)")
    ap.add_argument("--json", help="write here instead of stdout")
    a = ap.parse_args()

    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mpi_env()
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as e:
        print(json.dumps({"benchmark": "torch_symm_mem", "skipped": f"torch not importable: {e}"}))
        return 0

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    ndev = torch.cuda.device_count()
    if ndev == 0:
        print(json.dumps({"benchmark": "torch_symm_mem", "skipped": "no CUDA device"}))
        return 0
    device = torch.device("cuda", local % ndev)
    torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=120)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl", rank=rank, world_size=world, timeout=timeout)
    sync = dist.new_group(backend="gloo", timeout=timeout)  # barriers and max-over-ranks stay on the CPU
    group = dist.group.WORLD
    group_name = group.group_name
    backend = None
    try:
        if hasattr(symm_mem, "set_backend"):
            symm_mem.set_backend("CUDA")
        if hasattr(symm_mem, "get_backend"):
            backend = symm_mem.get_backend(device)
    except Exception as e:  # older torch: one backend only
        backend = f"default ({e.__class__.__name__})"
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        try:
            symm_mem.enable_symm_mem_for_group(group_name)
        except Exception:
            pass

    def empty(n):
        if hasattr(symm_mem, "empty"):
            return symm_mem.empty(n, dtype=torch.uint8, device=device)
        return symm_mem.empty_strided_p2p((n,), (1,), torch.uint8, device, group_name)

    def rendezvous(t):
        try:
            return symm_mem.rendezvous(t, group)
        except TypeError:
            return symm_mem.rendezvous(t, group_name)

    def max_over_ranks(vals):
        t = torch.tensor(vals, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sync)
        return t.tolist()

    lo, hi = parse_size(a.min_size), parse_size(a.max_size)
    reps_large = a.reps_large or a.reps
    results = []
    size = lo
    while size <= hi:
        reps = reps_large if size >= (1 << 30) else a.reps
        samples = []
        first = None
        error = None
        for i in range(reps + 1):
            dist.barrier(group=sync)
            try:
                t0 = time.perf_counter()
                buf = empty(size)
                torch.cuda.synchronize(device)
                t1 = time.perf_counter()
                hdl = rendezvous(buf)
                torch.cuda.synchronize(device)
                t2 = time.perf_counter()
                del hdl, buf
            except Exception as e:  # e.g. out of memory: stop at this size
                error = f"{e.__class__.__name__}: {e}"
                t0 = t1 = t2 = float("nan")
            gc.collect()
            failed = max_over_ranks([1.0 if error else 0.0])[0] > 0
            if failed:
                error = error or "failed on another rank"
                break
            wall, alloc, rdv = max_over_ranks([t2 - t0, t1 - t0, t2 - t1])
            dist.barrier(group=sync)
            rec = {"wall": wall, "alloc": alloc, "rendezvous": rdv}
            if i == 0:
                first = rec
            else:
                samples.append(rec)
        if error:
            results.append({"coll": "rendezvous", "method": "torch_symm_mem", "size": size, "chunks": 1,
                            "chunk_size": size, "skipped": error})
            break
        results.append({
            "coll": "rendezvous", "method": "torch_symm_mem", "size": size, "chunks": 1, "chunk_size": size,
            "reps": reps, "first": first,
            "stats": {k: stats([s[k] for s in samples]) for k in ("wall", "alloc", "rendezvous")},
            "wall_samples": [s["wall"] for s in samples],
        })
        if rank == 0:
            print(f"[torch_symm_mem] {size >> 20} MiB: median {results[-1]['stats']['wall']['median'] * 1e3:.3f} ms",
                  file=sys.stderr)
        size *= 2

    if rank == 0:
        out = {
            "benchmark": "torch_symm_mem", "ranks": world, "torch_version": torch.__version__,
            "symm_mem_backend": backend, "device": torch.cuda.get_device_name(device),
            "env": {k: os.environ.get(k) for k in ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "NCCL_NVLS_ENABLE")},
            "units": {"times": "seconds; each repetition is the maximum over ranks"},
            "results": results,
        }
        text = json.dumps(out, indent=2)
        if a.json:
            with open(a.json, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
