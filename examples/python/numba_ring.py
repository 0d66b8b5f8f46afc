"""The ring of torch_ring.py with a numba.cuda kernel: each rank writes its
neighbour's slice of a heap window with its own kernel, signals the
neighbour on the same stream, waits for its own slice to be written, and
checks every element on the host.

    mpiexec -n 4 python3 examples/python/numba_ring.py [--rounds N]
    (PYTHONPATH=<build>/python, or the install's site-packages)

Skips (exit 0, with a message) where numba or a CUDA device is missing.
"""
import argparse
import sys

from mpi4py import MPI

try:
    import numpy as np
    if not hasattr(np, "row_stack"):  # numba-cuda's typing still looks it up; newer NumPy removed it
        np.row_stack = np.vstack
    from numba import cuda
    why = None if cuda.is_available() else "numba sees no CUDA device"
except ImportError as e:
    why = f"numba is not installed ({e})"
if why:
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("numba_ring.py: skipped: " + why)
    sys.exit(0)

import vmmipc  # noqa: E402


@cuda.jit
def fill(out, k, rank):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = i * k + rank


ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--rounds", type=int, default=50)
ap.add_argument("--elems", type=int, default=1 << 18, help="float32 elements per rank")
a = ap.parse_args()

world = MPI.COMM_WORLD
node = world.Split_type(MPI.COMM_TYPE_SHARED)      # the ring runs among one node's ranks
dev = node.Get_rank() % len(cuda.gpus)
cuda.select_device(dev)
vmmipc.set_device(dev)                             # the same primary context

bad = 0
with vmmipc.Comm(node) as comm, comm.heap() as heap:
    rank, size = comm.rank, comm.size
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    stream = cuda.default_stream()                 # the legacy default stream
    h = stream.handle                              # ctypes c_void_p, or cuda.bindings' CUstream
    handle = int(h.value or 0) if hasattr(h, "value") else int(h)
    ramp = np.arange(a.elems, dtype=np.float32)
    with heap.alloc(a.elems * 4) as win:
        peer_view, mine_view = win.mapping(nxt, dtype="float32"), win.mapping(rank, dtype="float32")
        peer = cuda.as_cuda_array(peer_view)       # numba holds the views (CUDA Array Interface)
        mine = cuda.as_cuda_array(mine_view)
        threads = 256
        blocks = (a.elems + threads - 1) // threads
        for k in range(1, a.rounds + 1):
            fill[blocks, threads, stream](peer, k, rank)   # into the neighbour's memory
            win.signal(nxt, k, stream=handle)              # after the kernel, on its stream
            win.wait(prev, k, stream=handle)               # until prev's kernel wrote our slice
            got = mine.copy_to_host(stream=stream)
            stream.synchronize()
            bad += int(np.count_nonzero(got != ramp * k + prev))
            win.barrier(stream=handle)                     # everyone read before anyone writes again
        del peer, mine, peer_view, mine_view               # the views go before the window closes
    total = world.allreduce(bad, op=MPI.SUM)
    if world.Get_rank() == 0:
        print(f"numba_ring.py: {world.Get_size()} ranks, {a.rounds} rounds of {a.elems} floats: "
              f"{'ok' if total == 0 else f'{total} wrong elements'}")
node.Free()
sys.exit(0 if total == 0 else 1)
