#!/usr/bin/env python3
"""Anchor for vmmipc_sync: PyTorch's barriers and signals.

Measures, in the shape of vmmipc_sync's "latency" entries (seconds per
operation; each batch is the slowest rank's; stats over the batches):

  torch.barrier.gloo        torch.distributed.barrier on a gloo group (host clock)
  torch.barrier.nccl        torch.distributed.barrier on an NCCL group, then
                            torch.cuda.synchronize (host clock); skipped when
                            ranks share a GPU (NCCL refuses that)
  torch.symm_mem.barrier    SymmetricMemory.barrier on its signal pad (a kernel
                            on the current stream), CUDA events
  torch.symm_mem.signal     put_signal / wait_signal ping-pong between ranks 0
                            and 1, half the round trip, CUDA events

The stream entries run in two modes, as vmmipc_sync's do: "issued" times the
plain loop; "queued" holds the stream with torch.cuda._sleep until the whole
batch is enqueued (the sleep is lengthened until it outlasts the enqueueing),
so the events time the GPU alone.

Run with torchrun (python3 -m torch.distributed.run --standalone
--nproc-per-node 2) or under mpirun (OMPI_COMM_WORLD_* are mapped). Ranks
use GPU local_rank % device count, so two ranks may share one GPU. NVLink
multicast stays off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NCCL_NVLS_ENABLE=0 are set before torch is imported.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time


def mpi_env():
    """Lets mpirun stand in for torchrun."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" not in os.environ:
        return
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ["LOCAL_RANK"] = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ["RANK"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")


def stats(v):
    s = sorted(v)

    def pct(p):
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median": pct(0.5), "p10": pct(0.1), "p90": pct(0.9), "min": s[0], "max": s[-1],
            "mean": statistics.fmean(s)}


def write(out, path):
    text = json.dumps(out, indent=2)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=100, help="operations per timed batch (default 100)")
    ap.add_argument("--reps", type=int, default=30, help="timed batches (default 30)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed operations first (default 10)")
    ap.add_argument("--modes", default="queued,issued", help="queued,issued (default both)")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="about this many seconds per entry at most: fewer batches (at least 3) when one is slow "
                         "(default 2; 0: no cap)")
    ap.add_argument("--json", help="write here instead of stdout")
    a = ap.parse_args()
    modes = [m for m in ("queued", "issued") if m in a.modes.split(",")]

    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mpi_env()
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        write({"benchmark": "torch_barrier", "skipped": f"torch not importable: {e}", "latency": []}, a.json)
        return 0
    try:
        import torch.distributed._symmetric_memory as symm_mem
        symm_why = None
    except ImportError as e:
        symm_mem, symm_why = None, f"torch.distributed._symmetric_memory not importable: {e}"

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    ndev = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if ndev == 0 or world < 2:
        if rank == 0:
            why = "no CUDA device" if ndev == 0 else "needs at least 2 ranks"
            write({"benchmark": "torch_barrier", "skipped": why, "latency": []}, a.json)
        return 0
    device = torch.device("cuda", local % ndev)
    torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=60)
    # The default group's NCCL part is created lazily, only if a CUDA
    # collective runs on it (none does): two ranks may share a GPU.
    dist.init_process_group(backend="cpu:gloo,cuda:nccl", rank=rank, world_size=world, timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)  # control and max-over-ranks stay on the CPU

    def max_over_ranks(vals):
        t = torch.tensor(vals, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.tolist()

    def agree(error):
        """Every rank learns whether any failed; returns the lowest failing rank's reason."""
        got = [None] * world
        dist.all_gather_object(got, error, group=gloo)
        for r, e in enumerate(got):
            if e:
                return e if r == 0 else f"rank {r}: {e}"
        return None

    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:
        uuid = f"index {device.index}"
    uuids = [None] * world
    dist.all_gather_object(uuids, uuid, group=gloo)
    gpus = len(set(uuids))
    placement = (f"{world} ranks on 1 GPU (all on device {device.index})" if gpus == 1
                 else f"{world} ranks on {gpus} GPUs")
    ongpus = f"{gpus} GPU" + ("" if gpus == 1 else "s")

    def fit(reps, wall):
        """Batches that fit the budget, judged by the first one's wall time."""
        if a.budget <= 0 or wall <= 0:
            return reps
        return max(min(reps, 3), min(reps, int(a.budget / wall)))

    results = []

    def entry(name, mode, what, timer, desc):
        e = {"name": name, "method": "torch", "mode": mode, "what": what, "timer": timer, "description": desc}
        results.append(e)
        return e

    def finish(e, samples, error=None, note=None):
        error = agree(error)
        if error:
            e["skipped"] = error
            return
        e.update({"iters": a.iters, "reps": len(samples), "warmup": a.warmup, "stats": stats(samples),
                  "samples": samples})
        if note:
            e["note"] = note
        if rank == 0:
            print(f"[torch_barrier] {e['name']} ({e['mode']}): median {e['stats']['median'] * 1e6:.2f} us",
                  file=sys.stderr)

    # --- host barriers -------------------------------------------------------
    def host_barrier(name, group, desc, after=None, **kw):
        e = entry(name, "host", "per_barrier", "host_clock", desc)
        samples, error = [], None
        try:
            reps, r = a.reps, -1
            while r < reps:
                n = a.warmup if r < 0 else a.iters
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(n):
                    dist.barrier(group=group, **kw)
                    if after:
                        after()
                wall = time.perf_counter() - t0
                s, wall = max_over_ranks([wall / max(n, 1), wall])
                if r == 0:
                    reps = fit(reps, wall)
                if r >= 0:
                    samples.append(s)
                r += 1
        except Exception as ex:
            error = f"{ex.__class__.__name__}: {ex}"
        finish(e, samples, error)

    host_barrier("torch.barrier.gloo", gloo, "torch.distributed.barrier on a gloo group; host clock, per barrier")
    desc = ("torch.distributed.barrier on an NCCL group, then torch.cuda.synchronize; host clock, per barrier")
    if gpus < world:
        e = entry("torch.barrier.nccl", "host", "per_barrier", "host_clock", desc)
        e["skipped"] = (f"ranks share a GPU ({world} ranks on {ongpus}): NCCL refuses two ranks on one device")
    else:
        try:
            nccl = dist.new_group(backend="nccl", timeout=timeout)
            why = None
        except Exception as ex:
            nccl, why = None, f"{ex.__class__.__name__}: {ex}"
        why = agree(why)
        if why:
            entry("torch.barrier.nccl", "host", "per_barrier", "host_clock", desc)["skipped"] = why
        else:
            host_barrier("torch.barrier.nccl", nccl, desc, after=lambda: torch.cuda.synchronize(device),
                         device_ids=[device.index])

    # --- symmetric memory: barrier and signals on the stream -------------------
    def rendezvous(t, group):
        try:
            return symm_mem.rendezvous(t, group)
        except TypeError:  # older torch: the group's name
            return symm_mem.rendezvous(t, group.group_name)

    # The gloo group keeps NCCL out of it (two ranks may share a GPU).
    hdl, why = None, symm_why
    backend = None
    if not why:
        try:
            if hasattr(symm_mem, "set_backend"):
                symm_mem.set_backend("CUDA")
            if hasattr(symm_mem, "get_backend"):
                backend = symm_mem.get_backend(device)
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                try:
                    symm_mem.enable_symm_mem_for_group(gloo.group_name)
                except Exception:
                    pass
            if hasattr(symm_mem, "empty"):
                buf = symm_mem.empty(4096, dtype=torch.uint8, device=device)
            else:
                buf = symm_mem.empty_strided_p2p((4096,), (1,), torch.uint8, device, gloo.group_name)
            hdl = rendezvous(buf, gloo)
            for m in ("barrier", "put_signal", "wait_signal"):
                if not hasattr(hdl, m):
                    raise AttributeError(f"the symmetric memory handle has no {m}()")
        except Exception as ex:
            why = f"symmetric memory set-up: {ex.__class__.__name__}: {ex}"
    why = agree(why)
    if why and symm_mem is not None and gpus == world:
        # Some torch versions want the group that has the CUDA backend (the
        # default one, as anchors/torch_symm_mem.py uses); one GPU per rank
        # here, so NCCL may come up if it asks for it.
        first, why = why, None
        try:
            buf = symm_mem.empty(4096, dtype=torch.uint8, device=device)
            hdl = rendezvous(buf, dist.group.WORLD)
        except Exception as ex:
            why = f"{first}; with the default group: {ex.__class__.__name__}: {ex}"
        why = agree(why)

    stream = torch.cuda.current_stream(device)
    ev0 = torch.cuda.Event(enable_timing=True)
    ev1 = torch.cuda.Event(enable_timing=True)
    peer = 1 - rank if rank < 2 else None
    BARRIER_CH, SIGNAL_CH = 0, 1  # separate signal-pad slots

    def op_barrier(n):
        for _ in range(n):
            hdl.barrier(channel=BARRIER_CH)

    def op_signal(n):
        if peer is None:
            return
        for _ in range(n):
            if rank == 0:
                hdl.put_signal(peer, channel=SIGNAL_CH)
                hdl.wait_signal(peer, channel=SIGNAL_CH)
            else:
                hdl.wait_signal(peer, channel=SIGNAL_CH)
                hdl.put_signal(peer, channel=SIGNAL_CH)

    # torch.cuda._sleep spins for a number of GPU cycles: how many a second.
    cycles_per_s = None
    if not why and "queued" in modes:
        try:
            torch.cuda._sleep(1000)
            torch.cuda.synchronize(device)
            ev0.record(stream)
            torch.cuda._sleep(20_000_000)
            ev1.record(stream)
            ev1.synchronize()
            cycles_per_s = 20_000_000 / (ev0.elapsed_time(ev1) * 1e-3)
        except Exception:
            cycles_per_s = None
    if not why and max_over_ranks([0.0 if cycles_per_s else 1.0])[0] > 0:
        cycles_per_s = None  # every rank skips the queued mode, or none does

    def batch(op, n, queued, hold_s):
        """One batch; returns (this rank's seconds, whether the hold outlasted the enqueueing)."""
        held = True
        gate = torch.cuda.Event()
        if queued:
            torch.cuda._sleep(int(hold_s * cycles_per_s))
            gate.record(stream)
        op(1)  # both ranks' streams run together from here
        ev0.record(stream)
        op(n)
        ev1.record(stream)
        if queued:
            held = not gate.query()  # still sleeping now that everything is enqueued
        ev1.synchronize()
        return ev0.elapsed_time(ev1) * 1e-3, held

    def stream_entry(name, op, what, per_iter, desc, active):
        for mode in modes:
            e = entry(name, mode, what, "cuda_events", desc)
            if why:
                e["skipped"] = why
                continue
            if mode == "queued" and not cycles_per_s:
                e["skipped"] = "torch.cuda._sleep is not available to hold the stream"
                continue
            samples, error, note = [], None, None
            hold, give_up = 0.005, False  # seconds; lengthened while the enqueueing outlasts it
            try:
                if active:
                    op(a.warmup)
                    torch.cuda.synchronize(device)
                reps, r = a.reps, 0
                while r < reps:
                    while True:
                        dist.barrier(group=gloo)
                        t0 = time.perf_counter()
                        s, held = batch(op, a.iters, mode == "queued", hold) if active else (0.0, True)
                        s, short, wall = max_over_ranks([s, 0.0 if held else 1.0, time.perf_counter() - t0])
                        if mode != "queued" or not short or give_up:
                            break
                        if hold >= 1.0:  # never held long enough: stop trying, say so below
                            give_up, hold = True, 0.005
                            break
                        hold *= 4  # the same batch again, held longer (all ranks agree: max over ranks)
                    if short:
                        note = "some batches were enqueued more slowly than the stream was held: they include enqueue time"
                    if r == 0:
                        reps = fit(reps, wall)
                    samples.append(s / a.iters / per_iter)
                    r += 1
                if mode == "queued" and not note:
                    note = f"stream held {hold * 1e3:.0f} ms (torch.cuda._sleep) before each batch"
            except Exception as ex:
                error = f"{ex.__class__.__name__}: {ex}"
            finish(e, samples, error, note)

    stream_entry("torch.symm_mem.barrier", op_barrier, "per_barrier", 1,
                 "SymmetricMemory.barrier (torch.distributed._symmetric_memory, signal pad, a kernel on the "
                 "current stream) on every rank, repeated; per barrier (slowest rank)", True)
    stream_entry("torch.symm_mem.signal", op_signal, "one_way", 2,
                 "rank 0: put_signal then wait_signal; rank 1: wait_signal then put_signal (SymmetricMemory, "
                 "signal pad); half the round trip", rank < 2)
    torch.cuda.synchronize(device)
    dist.barrier(group=gloo)

    if rank == 0:
        write({
            "benchmark": "torch_barrier", "ranks": world, "gpus": gpus, "placement": placement,
            "torch_version": torch.__version__, "device": torch.cuda.get_device_name(device),
            "symm_mem_backend": None if backend is None else str(backend),
            "env": {k: os.environ.get(k) for k in ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "NCCL_NVLS_ENABLE")},
            "units": {"times": "seconds per operation (ping-pong: half the round trip); each batch is the slowest "
                               "rank's; stats over the batches"},
            "modes": {"queued": "stream held by torch.cuda._sleep until the batch is enqueued; CUDA events",
                      "issued": "the plain loop; CUDA events", "host": "host clock"},
            "config": {"iters": a.iters, "reps": a.reps, "warmup": a.warmup},
            "latency": results,
        }, a.json)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
