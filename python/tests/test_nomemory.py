"""Python out of memory at each allocation of a call that makes an object
(CPython's _testcapi.set_nomemory, where the interpreter has it): the call
raises MemoryError, and nothing the library made stays open. One rank
(COMM_SELF), so that a failure before a collective leaves no peer waiting."""
import warnings

import pytest
from mpi4py import MPI

import vmmipc
from conftest import TIMEOUT_MS

capi = pytest.importorskip("_testcapi")


def attempt(call, k):
    """call() with the interpreter's k-th next allocation failing: (result, MemoryError or None)."""
    capi.set_nomemory(k, k + 1)
    try:
        return call(), None
    except MemoryError as e:
        return None, e
    finally:
        capi.remove_mem_hooks()


@pytest.mark.parametrize("what", ["allgather_map", "heap_alloc"])
def test_no_memory_for_the_new_window_leaves_no_window_open(what):
    # The library's window is made before its Python object. Before, an
    # object that could not be allocated left the window open for good: the
    # comm then refused its close.
    c = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=TIMEOUT_MS)
    buf = vmmipc.alloc(1 << 20)
    heap = c.heap() if what == "heap_alloc" else None
    call = (lambda: c.allgather_map(buf)) if heap is None else (lambda: heap.alloc(4096))
    failures, out = 0, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)   # a window made, then dropped
        for k in range(10000):
            out, err = attempt(call, k)
            if err is None:
                break
            failures += 1
    out.close()
    with c.allgather_map(None):       # a collective: frees in step what was released
        pass
    left = c.stats()["open_windows"]
    assert failures > 0 and left == 0, (failures, left)
    if heap is not None:
        heap.close()
    buf.close()
    c.close()
