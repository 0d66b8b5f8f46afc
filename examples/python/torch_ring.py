"""A ring through the symmetric heap with torch: each rank writes its
neighbour's slice of a heap window with torch kernels, signals the
neighbour on the same stream, waits for its own slice to be written, and
checks every element. Many rounds, each with other values.

    mpiexec -n 4 python3 examples/python/torch_ring.py [--rounds N]
    (PYTHONPATH=<build>/python, or the install's site-packages)

Skips (exit 0, with a message) where torch or a CUDA device is missing.
"""
import argparse
import sys

from mpi4py import MPI

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("torch_ring.py: skipped: " + ("torch is not installed" if torch is None else "torch sees no CUDA device"))
    sys.exit(0)

import vmmipc  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--rounds", type=int, default=100)
ap.add_argument("--elems", type=int, default=1 << 20, help="float32 elements per rank")
a = ap.parse_args()

world = MPI.COMM_WORLD
node = world.Split_type(MPI.COMM_TYPE_SHARED)      # the ring runs among one node's ranks
dev = node.Get_rank() % torch.cuda.device_count()
torch.cuda.set_device(dev)
vmmipc.set_device(dev)                             # the same primary context

bad = 0
with vmmipc.Comm(node) as comm, comm.heap() as heap:
    rank, size = comm.rank, comm.size
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    stream = torch.cuda.current_stream()
    ramp = torch.arange(a.elems, device="cuda", dtype=torch.float32)
    with heap.alloc(a.elems * 4) as win:
        peer = torch.from_dlpack(win.mapping(nxt, dtype=torch.float32))    # the neighbour's slice, mapped here
        mine = torch.from_dlpack(win.mapping(rank, dtype=torch.float32))   # our own slice
        for k in range(1, a.rounds + 1):
            peer.copy_(ramp * k + rank)              # kernels on `stream`, into the neighbour's memory
            win.signal(nxt, k, stream=stream)        # after them on the same stream: the neighbour may read
            win.wait(prev, k, stream=stream)         # until prev's writes into our slice are visible
            bad += int((mine != ramp * k + prev).sum().item())
            win.barrier(stream=stream)               # everyone read before anyone writes round k + 1
        del peer, mine                               # the views go before the window closes
    del ramp
    total = world.allreduce(bad, op=MPI.SUM)
    if world.Get_rank() == 0:
        print(f"torch_ring.py: {world.Get_size()} ranks, {a.rounds} rounds of {a.elems} floats: "
              f"{'ok' if total == 0 else f'{total} wrong elements'}")
node.Free()
sys.exit(0 if total == 0 else 1)
