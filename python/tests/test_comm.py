"""vmmipc.Comm: creation from mpi4py, context manager, close, errors, abort."""
import os

import pytest
from mpi4py import MPI

import vmmipc
from conftest import RANK, SIZE, TIMEOUT_MS, WORLD, all_true


def test_rank_size_and_context_manager():
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c:
        assert (c.rank, c.size) == (RANK, SIZE)
        assert not c.closed
    assert c.closed
    c.close()   # twice: harmless
    assert c.closed


def test_subcommunicator():
    sub = WORLD.Split(RANK % 2, RANK)
    with vmmipc.Comm(sub) as c:
        assert (c.rank, c.size) == (sub.Get_rank(), sub.Get_size())
    sub.Free()


def test_bad_arguments():
    with pytest.raises(TypeError):
        vmmipc.Comm(0)            # never handle integers
    with pytest.raises(TypeError):
        vmmipc.Comm(MPI.COMM_WORLD.py2f())
    with pytest.raises(ValueError):
        vmmipc.Comm(MPI.COMM_NULL)
    with pytest.raises(ValueError):
        vmmipc.Comm(WORLD, timeout_ms=-5)
    with pytest.raises(TypeError):
        vmmipc.Comm(WORLD, timeout_ms="1")
    if SIZE > 1:
        local = WORLD.Split(RANK % 2, RANK)
        inter = local.Create_intercomm(0, WORLD, 1 - RANK % 2, 7)   # evens and odds
        with pytest.raises(ValueError):
            vmmipc.Comm(inter)
        inter.Free()
        local.Free()


def test_closed_comm_raises(comm):
    comm.close()
    with pytest.raises(vmmipc.Error) as e:
        comm.allgather_map(None)
    assert e.value.code == vmmipc.Result.INVALID_ARG
    with pytest.raises(vmmipc.Error):
        comm.bcast_map(None, 0)
    with pytest.raises(vmmipc.Error):
        comm.stats()


def test_close_refused_while_window_open(comm):
    win = comm.allgather_map(None)
    with pytest.raises(vmmipc.Error) as e:
        comm.close()              # refused on every rank; the comm stays usable
    assert e.value.code in (vmmipc.Result.INVALID_ARG, vmmipc.Result.BUSY)
    assert not comm.closed
    assert comm.stats()["open_windows"] == 1
    win.close()
    assert comm.stats()["open_windows"] == 0


def test_collective_error_names_the_rank(comm):
    # bufs None at the root is refused by the root; every rank gets the error,
    # and Error.rank names the root (vmmipc_last_error_info).
    root = SIZE - 1
    with pytest.raises(vmmipc.Error) as e:
        comm.scatter_map(None, root)
    assert all_true((e.value.code, e.value.rank) == (vmmipc.Result.INVALID_ARG, root)), (e.value.code, e.value.rank)
    assert "scatter_map" in str(e.value)


def test_rank_arguments(comm):
    with pytest.raises(ValueError):
        comm.bcast_map(None, SIZE)
    with pytest.raises(ValueError):
        comm.bcast_map(None, -1)
    with pytest.raises(TypeError):
        comm.bcast_map(None, "0")
    with pytest.raises(TypeError):
        comm.allgather_map(b"not a buffer")
    with pytest.raises(ValueError):
        comm.allgather_map(None, access="write")
    with pytest.raises(TypeError):
        comm.allgather_map(None, access=1)


def test_abort_fails_later_calls(comm):
    WORLD.Barrier()
    comm.abort()                  # local; the node's peers are told
    with pytest.raises(vmmipc.Error) as e:
        comm.allgather_map(None)
    assert e.value.code in (vmmipc.Result.ABORTED, vmmipc.Result.PEER)
    comm.close()                  # frees locally once aborted
    assert comm.closed
    assert all_true(True)


def test_bad_argument_on_one_rank_fails_the_peers_at_once(comm):
    # Rank 0 passes a bad buffer: it raises TypeError, and still joins the
    # call so that the others fail naming it instead of waiting out the timeout.
    got = None
    if RANK == 0:
        with pytest.raises(TypeError):
            comm.allgather_map("not a buffer")
    else:
        buf = vmmipc.alloc(1 << 20)
        try:
            comm.allgather_map(buf).close()
        except vmmipc.Error as e:
            got = (e.code, e.rank)
        buf.close()
    with comm.allgather_map(None) as win:     # the comm is still usable
        assert win.query(RANK) == (0, 0)
    assert all_true(RANK == 0 or got == (vmmipc.Result.INVALID_ARG, 0)), got


def test_stats_report_the_host_sync_paths(comm):
    # Decided with the comm's first window: by VMMIPC_SYNC, by support, or
    # under auto by the trial, whose figures the picks follow (kernels where
    # at least 5% faster).
    win = comm.allgather_map(None)
    st = comm.stats()
    win.close()
    assert st["sync_path"] in ("memops", "kernel")
    assert st["sync_barrier_path"] in ("memops", "kernel")
    mode = os.environ.get("VMMIPC_SYNC", "auto") or "auto"
    if mode != "auto":
        assert st["sync_decided_by"] == "setting" and st["sync_path"] == mode
    elif st["sync_decided_by"] == "trial":
        (sm, sk), (bm, bk) = st["trial_signal_ns"], st["trial_barrier_ns"]
        assert sm > 0 and sk > 0
        assert (st["sync_path"] == "kernel") == (sk * 100 <= sm * 95)
        if bm and bk:
            assert (st["sync_barrier_path"] == "kernel") == (bk * 100 <= bm * 95)
    else:
        assert st["sync_decided_by"] == "support"
