"""vmmipc: share CUDA VMM allocations between the MPI ranks of a node.

Peers' memory is mapped into this process and handed to array libraries
without a copy, through DLPack and the CUDA Array Interface::

    from mpi4py import MPI
    import torch, vmmipc

    vmmipc.set_device(local_rank)
    with vmmipc.Comm(MPI.COMM_WORLD) as comm:
        buf = vmmipc.alloc(1 << 20)
        with comm.allgather_map(buf) as win:
            peer = torch.from_dlpack(win.mapping((comm.rank + 1) % comm.size, dtype=torch.float32))
            win.barrier()
            del peer          # a live view refuses its window's close()

Collective calls (Comm(), allgather_map, bcast_map, scatter_map, heap,
Heap.alloc, every close() of a Comm, Window or Heap) are made by every rank
in the same order, as in MPI. They release the GIL while they wait.
The garbage collector never runs collective work: a Window or Heap it
collects open is freed in step by a later collective call on its comm.
Objects left open at exit are released locally (their comms are aborted)
before mpi4py finalizes MPI. docs/python.md has the details.
"""
import atexit as _atexit

from mpi4py import MPI as _MPI  # noqa: F401  (initialises MPI; its C API is imported by _vmmipc)

from ._vmmipc import (  # noqa: F401
    Buffer,
    Comm,
    Error,
    Heap,
    Mapping,
    Result,
    Window,
    alloc,
    copy_from_device,
    copy_to_device,
    current_device,
    device_count,
    kDLCUDA,
    set_device,
    synchronize,
    version,
    wrap,
)
from . import _vmmipc

__version__ = version
__all__ = [
    "Buffer", "Comm", "Error", "Heap", "Mapping", "Result", "Window", "alloc", "copy_from_device",
    "copy_to_device", "current_device", "device_count", "kDLCUDA", "set_device", "synchronize", "version", "wrap",
]

# Runs before mpi4py's MPI_Finalize (a Py_AtExit hook, or an atexit hook
# registered before this one): collectives cannot run at exit, so anything
# still open is released locally.
_atexit.register(_vmmipc._release_all)
