"""Every collective entry point joins the collective before it raises: a
bad argument on one rank only raises TypeError or ValueError there, and its
peers fail at once with vmmipc.Error INVALID_ARG naming that rank, instead
of waiting out the timeout; the comm stays usable."""
import time

import pytest

import vmmipc
from conftest import RANK, SIZE, TIMEOUT_MS, WORLD, all_true

BAD = 0      # the rank with the bad argument


def fails_as_one(call_bad, call_good, exc):
    """BAD raises exc; every other rank gets INVALID_ARG naming BAD, well within the timeout."""
    t0 = time.monotonic()
    ok = True
    if RANK == BAD:
        with pytest.raises(exc):
            call_bad()
    else:
        with pytest.raises(vmmipc.Error) as e:
            call_good()
        ok = (e.value.code, e.value.rank) == (vmmipc.Result.INVALID_ARG, BAD)
    took = time.monotonic() - t0
    return ok and took < TIMEOUT_MS / 2000


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
@pytest.mark.parametrize("bad_root", [-1, SIZE, "0"])
def test_rooted_collectives_with_a_bad_root_on_one_rank(comm, bad_root):
    exc = TypeError if isinstance(bad_root, str) else ValueError
    buf = vmmipc.alloc(1 << 20) if RANK == 0 else None
    ok = fails_as_one(lambda: comm.bcast_map(None, bad_root), lambda: comm.bcast_map(buf, 0), exc)
    ok &= fails_as_one(lambda: comm.scatter_map(None, bad_root),
                       lambda: comm.scatter_map([buf] * SIZE if RANK == 0 else None, 0), exc)
    ok &= not comm.stats()["broken"]
    m = comm.bcast_map(buf, 0)                  # still usable
    if m is not None:
        m.close()
    assert all_true(ok)
    if buf:
        buf.close()


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_bad_arguments_on_one_rank(comm):
    buf = vmmipc.alloc(1 << 20)
    ok = fails_as_one(lambda: comm.allgather_map(buf, access="x"), lambda: comm.allgather_map(buf), ValueError)
    ok &= fails_as_one(lambda: comm.allgather_map(buf, access=1), lambda: comm.allgather_map(buf), TypeError)
    ok &= fails_as_one(lambda: comm.bcast_map(b"no buffer", 0), lambda: comm.bcast_map(None, 0), TypeError)
    ok &= fails_as_one(lambda: comm.heap(reserve=-1), lambda: comm.heap(), ValueError)
    ok &= fails_as_one(lambda: comm.heap(grow="1M"), lambda: comm.heap(), TypeError)
    with comm.heap() as heap:
        ok &= fails_as_one(lambda: heap.alloc(-1), lambda: heap.alloc(4096), ValueError)
        ok &= fails_as_one(lambda: heap.alloc(None), lambda: heap.alloc(4096), TypeError)
        with heap.alloc(4096):                  # still usable
            pass
    ok &= not comm.stats()["broken"]
    assert all_true(ok)
    buf.close()


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_comm_with_a_bad_timeout_on_one_rank():
    ok = fails_as_one(lambda: vmmipc.Comm(WORLD, timeout_ms=-5),
                      lambda: vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS), ValueError)
    ok &= fails_as_one(lambda: vmmipc.Comm(WORLD, timeout_ms="5"),
                       lambda: vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS), TypeError)
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c:   # and a good one right after
        assert c.size == SIZE
    assert all_true(ok)


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_a_call_python_cannot_parse_on_one_rank(comm):
    # A misspelled keyword or a missing argument on one rank: before, it
    # raised TypeError without joining, and its peers waited out the timeout.
    buf = vmmipc.alloc(1 << 20)
    ok = fails_as_one(lambda: comm.allgather_map(buf, acces="r"), lambda: comm.allgather_map(buf), TypeError)
    ok &= fails_as_one(lambda: comm.bcast_map(None, root=0, acces="r"), lambda: comm.bcast_map(None, 0), TypeError)
    ok &= fails_as_one(lambda: comm.scatter_map(None), lambda: comm.scatter_map(None, 0), TypeError)
    ok &= fails_as_one(lambda: comm.heap(grows=1), lambda: comm.heap(), TypeError)
    with comm.heap() as heap:
        ok &= fails_as_one(lambda: heap.alloc(), lambda: heap.alloc(4096), TypeError)
    ok &= not comm.stats()["broken"]
    buf.close()
    assert all_true(ok)
