"""Every rank shares a buffer; every rank maps those of its node.

Each rank fills its own buffer with its rank number, reads every node
peer's buffer through torch.from_dlpack (or as bytes through driver copies
when torch is not installed), writes into the next node peer's buffer
through the view, synchronises with win.barrier, and checks what the
previous node peer wrote into its own buffer. Nodes may have any number of
ranks, in any placement (a rank alone on its node is its own neighbour).

    build/vmmipc-mpirun 2 build/python/vmmipc-python examples/python/allgather.py
    (installed: <prefix>/bin/...; on a machine without a GPU,
    VMMIPC_CUDA_DRIVER=build/mpi_tests/standin/libvmmipc_standin.so)
"""
import sys

from mpi4py import MPI

import vmmipc

try:
    import torch
    if not torch.cuda.is_available():
        torch = None
except ImportError:
    torch = None

N = 1 << 20                      # float32 elements per rank (4 MiB)
world = MPI.COMM_WORLD
node = world.Split_type(MPI.COMM_TYPE_SHARED)
local = node.Get_rank()
vmmipc.set_device(local % vmmipc.device_count())
if torch is not None:
    torch.cuda.set_device(local % torch.cuda.device_count())   # the same primary context

with vmmipc.Comm(world) as comm:
    rank, size = comm.rank, comm.size
    buf = vmmipc.alloc(N * 4)
    if torch is not None:
        stream = torch.cuda.current_stream()
        mine = torch.from_dlpack(buf.mapping(dtype=torch.float32, shape=N))
        mine.fill_(float(rank))                        # a torch kernel on our own memory
    else:
        stream = 0
        vmmipc.copy_to_device(buf.ptr, bytes([rank]) * (N * 4))

    with comm.allgather_map(buf) as win:
        # This node's ranks: those whose buffer is mapped here (every rank
        # gave one; a rank on another node maps as (0, 0)).
        peers = [r for r in range(size) if win.query(r)[1] > 0]
        i = peers.index(rank)
        nxt, prev = peers[(i + 1) % len(peers)], peers[i - 1]
        win.barrier(stream=stream)                     # every rank's fill is done and visible
        ok = True
        for r in peers:
            if torch is not None:
                peer = torch.from_dlpack(win.mapping(r, dtype=torch.float32))
                ok &= bool(torch.all(peer == float(r)).item())
            else:
                p, n = win.query(r)
                ok &= vmmipc.copy_from_device(p, n) == bytes([r]) * n
        win.barrier(stream=stream)                     # every rank has read before anyone writes
        # Change the next rank's data through its mapping.
        if torch is not None:
            torch.from_dlpack(win.mapping(nxt, dtype=torch.float32))[:16] = 100.0 + rank
        else:
            vmmipc.copy_to_device(win.query(nxt)[0], bytes([100 + rank]) * 64)
        win.barrier(stream=stream)                     # the writes are done and visible
        if torch is not None:
            ok &= bool(torch.all(mine[:16] == 100.0 + prev).item())
            ok &= bool(torch.all(mine[16:] == float(rank)).item())
            torch.cuda.synchronize()
            del mine, peer
        else:
            ok &= vmmipc.copy_from_device(buf.ptr, 64) == bytes([100 + prev]) * 64
        win.barrier(stream=stream)                     # nobody still reads before the close
        if torch is not None:
            torch.cuda.synchronize()
    buf.close()
    all_ok = world.allreduce(ok, op=MPI.LAND)
    if rank == 0:
        print(f"allgather.py: {size} ranks, {'torch' if torch is not None else 'bytes'}: "
              f"{'ok' if all_ok else 'MISMATCH'}")
    node.Free()
sys.exit(0 if all_ok else 1)
