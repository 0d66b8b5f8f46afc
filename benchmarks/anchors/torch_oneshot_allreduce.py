#!/usr/bin/env python3
"""Anchor for vmmipc_device_bench's allreduce rows: PyTorch's
symm_mem one_shot_all_reduce and NCCL's all_reduce through torch, 8 B to
64 KiB of float32, microseconds per call from CUDA events around a batch.
Prints one JSON line per row, in vmmipc_device_bench's shape.

Needs one GPU per rank (PyTorch symmetric memory and NCCL refuse ranks that
share one). Run with torchrun --nproc-per-node 2, or under mpirun
(OMPI_COMM_WORLD_* are mapped). Multicast stays off.
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_barrier import mpi_env  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=200, help="calls per timed batch (default 200)")
    a = ap.parse_args()
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mpi_env()
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group(backend="nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    group = dist.group.WORLD.group_name
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        e0.record()
        for _ in range(a.iters):
            fn()
        e1.record()
        e1.synchronize()
        return 1e3 * e0.elapsed_time(e1) / a.iters

    for count in (2, 16, 128, 1024, 8192, 16384):  # 8 B to 64 KiB
        t = symm_mem.empty(count, dtype=torch.float32, device="cuda")
        symm_mem.rendezvous(t, group)
        t.fill_(rank + 1)
        rows = {"torch_one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group),
                "torch_nccl": lambda: dist.all_reduce(t)}
        for path, fn in rows.items():
            us = timed(fn)
            if rank == 0:
                print(json.dumps({"bench": "device", "row": "allreduce", "path": path, "bytes": 4 * count,
                                  "iterations": a.iters, "us": round(us, 3)}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
