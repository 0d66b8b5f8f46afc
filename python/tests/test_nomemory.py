"""Python out of memory at each allocation of a call that makes an object
(CPython's _testcapi.set_nomemory, where the interpreter has it): the call
raises MemoryError, and nothing the library made stays open. Most tests use
one rank (COMM_SELF), so that a failure before a collective leaves no peer
waiting; the last checks that a failure on one rank of a collective call
still joins it, so its peers fail at once."""
import warnings

import pytest
from mpi4py import MPI

import vmmipc
from conftest import RANK, SIZE, TIMEOUT_MS, WORLD

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


def test_no_memory_for_a_new_comm_on_one_rank_fails_its_peers_at_once():
    # Rank 0 cannot allocate the Comm object. Before, it returned without
    # joining vmmipc_comm_create: its peers paired this call with its next
    # one (one rank failed, the others did not). Now it joins (asking for no
    # handle, which every rank refuses), and each attempt fails on every
    # rank alike. Every rank takes the default timeout, as the ranks
    # must agree on it, and a timeout_ms keyword would make the interpreter
    # allocate a dict before Comm() runs.
    if SIZE < 2:
        pytest.skip("needs a peer")
    failures, codes, c = 0, [], None
    for k in range(100):
        if RANK == 0:
            c, err = attempt(lambda: vmmipc.Comm(WORLD), k)
        else:
            try:
                c, err = vmmipc.Comm(WORLD), None
            except vmmipc.Error as e:
                c, err = None, e
                codes.append(e.code)
        if err is None:
            break
        failures += 1
    counts = WORLD.allgather(failures)
    ok = c is not None and vmmipc.Result.TIMEOUT not in codes
    if c is not None:
        c.close()
    assert counts[0] > 0 and len(set(counts)) == 1 and ok, (counts, codes)
