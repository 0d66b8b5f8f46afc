#!/usr/bin/env python3
"""Python overhead of the vmmipc module over the C calls, in the same run.

For each call the Python method is timed in a Python loop and the same
library call in a C loop inside the extension (vmmipc._vmmipc._c_loop):

    query        Window.query(rank)          vs vmmipc_win_query
    mapping      Window.mapping(rank)        vs vmmipc_win_query (what mapping calls)
    dlpack       mapping + __dlpack__()      vs vmmipc_win_query
    signal       Window.signal(rank, v)      vs vmmipc_win_signal (stream 0)
    heap_alloc   Heap.alloc(n) + close()     vs vmmipc_heap_alloc + vmmipc_win_free (collective)

The goal (issue 24) is at most 10 us per call over C. With --torch, and a
PyTorch whose torch.distributed._symmetric_memory works here, the heap
workload (allocate, map every peer, free) is also timed through
symm_mem.empty + rendezvous.

    mpiexec -n 2 python3 benchmarks/python/overhead.py [--iters N] [--json out.json] [--torch]
"""
import argparse
import json
import os
import sys
import time

from mpi4py import MPI

import vmmipc
from vmmipc import _vmmipc

GOAL_US = 10.0


def per_call_us(seconds, iters):
    return seconds / iters * 1e6


def time_py(fn, iters):
    t0 = time.perf_counter()
    for i in range(iters):
        fn(i)
    return time.perf_counter() - t0


def worst(world, v):
    """The slowest rank's value: a call is as slow as its slowest rank."""
    return world.allreduce(v, op=MPI.MAX)


def torch_heap(world, nbytes, iters):
    """symm_mem.empty + rendezvous + every peer's buffer, per iteration; None if unavailable."""
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    os.environ.setdefault("RANK", str(world.Get_rank()))
    os.environ.setdefault("WORLD_SIZE", str(world.Get_size()))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29544")
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    group = dist.group.WORLD.group_name
    times = []
    for _ in range(iters + 1):
        world.Barrier()
        t0 = time.perf_counter()
        t = symm_mem.empty(nbytes, dtype=torch.uint8, device="cuda")
        h = symm_mem.rendezvous(t, group)
        for r in range(world.Get_size()):
            h.get_buffer(r, (nbytes,), torch.uint8)
        times.append(time.perf_counter() - t0)
        del h, t
    dist.barrier()
    return sum(times[1:]) / iters * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20000, help="calls per local measurement")
    ap.add_argument("--heap-iters", type=int, default=200, help="heap allocations (collective)")
    ap.add_argument("--heap-bytes", type=int, default=1 << 16)
    ap.add_argument("--json", help="write the results here (rank 0)")
    ap.add_argument("--torch", action="store_true", help="also time PyTorch symm_mem for the heap workload")
    a = ap.parse_args()

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    vmmipc.set_device(node.Get_rank() % vmmipc.device_count())
    rows = []
    with vmmipc.Comm(world) as comm:
        rank, size = comm.rank, comm.size
        peer = (rank + 1) % size
        buf = vmmipc.alloc(1 << 21)
        with comm.allgather_map(buf) as win:
            c_query = _vmmipc._c_loop("query", win, peer, a.iters)
            rows.append(("query", time_py(lambda i: win.query(peer), a.iters), c_query))
            rows.append(("mapping", time_py(lambda i: win.mapping(peer), a.iters), c_query))
            rows.append(("dlpack", time_py(lambda i: win.mapping(peer).__dlpack__(), a.iters), c_query))
            c_sig = _vmmipc._c_loop("signal", win, peer, a.iters)
            base = a.iters + 1
            rows.append(("signal", time_py(lambda i: win.signal(peer, base + i), a.iters), c_sig))
            vmmipc.synchronize()
            win.barrier()
            vmmipc.synchronize()
            results = [(n, per_call_us(py, a.iters), per_call_us(c, a.iters)) for n, py, c in rows]
            world.Barrier()
        heap_py = heap_c = heap_torch = None
        try:
            heap = comm.heap()
        except vmmipc.Error as e:
            if rank == 0:
                print(f"heap: not measured ({e})")
            heap = None
        if heap is not None:
            with heap:
                n = a.heap_bytes

                def py_alloc(i):
                    heap.alloc(n).close()

                py_alloc(0)   # the first allocation grows the heap
                world.Barrier()
                heap_c = per_call_us(_vmmipc._c_loop("heap_alloc", heap, n, a.heap_iters), a.heap_iters)
                world.Barrier()
                heap_py = per_call_us(time_py(py_alloc, a.heap_iters), a.heap_iters)
                results.append(("heap_alloc", heap_py, heap_c))

                def py_workload(i):
                    with heap.alloc(n) as w:
                        for r in range(size):
                            w.mapping(r).__dlpack__()

                world.Barrier()
                heap_work = per_call_us(time_py(py_workload, a.heap_iters), a.heap_iters)
        buf.close()
    if a.torch and heap_py is not None:
        heap_torch = torch_heap(world, a.heap_bytes, min(a.heap_iters, 100))
    results = [(n, worst(world, py), worst(world, c)) for n, py, c in results]
    if rank == 0:
        print(f"vmmipc {vmmipc.version}, {size} ranks, Python {sys.version.split()[0]}: microseconds per call "
              f"(slowest rank)")
        print(f"{'call':<12}{'python':>10}{'C':>10}{'overhead':>10}  goal <= {GOAL_US:g} us")
        out = []
        for name, py, c in results:
            over = py - c
            print(f"{name:<12}{py:>10.3f}{c:>10.3f}{over:>10.3f}  {'met' if over <= GOAL_US else 'MISSED'}")
            out.append({"call": name, "python_us": py, "c_us": c, "overhead_us": over, "goal_met": over <= GOAL_US})
        extra = {}
        if heap_py is not None:
            extra["heap_workload_us"] = heap_work
            print(f"heap workload (alloc + __dlpack__ of every peer + close): {heap_work:.1f} us")
        if heap_torch is not None:
            extra["torch_symm_mem_us"] = heap_torch
            print(f"torch symm_mem.empty + rendezvous + get_buffer of every peer: {heap_torch:.1f} us")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"ranks": size, "iters": a.iters, "version": vmmipc.version, "results": out, **extra}, f,
                          indent=1)
    node.Free()


if __name__ == "__main__":
    main()
