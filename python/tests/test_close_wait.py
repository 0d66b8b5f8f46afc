"""Window.close() never waits without a bound: it waits, at most the comm's
timeout, for the device work the window handed out (events recorded after
its signals, waits and barriers, on the consumer streams given to
__dlpack__, and on the legacy default stream). A wait that fails on one
rank still joins the collective: that rank raises TIMEOUT (or CUDA), its
peers get BUSY naming it, and the window stays open everywhere."""
import time

import pytest

import vmmipc
from conftest import NXT, PREV, RANK, SIZE, TIMEOUT_MS, all_true
from vmmipc import _vmmipc


class TorchStream:
    cuda_stream = 2        # the per-thread default stream, as a handle


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
@pytest.mark.parametrize("how, code", [(1, vmmipc.Result.TIMEOUT), (2, vmmipc.Result.CUDA)])
def test_a_failed_wait_on_one_rank_refuses_the_close_everywhere(comm, how, code):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    win.barrier()
    if RANK == 0:
        _vmmipc._test_fail_next_close_wait(how)
    t0 = time.monotonic()
    with pytest.raises(vmmipc.Error) as e:
        win.close()
    took = time.monotonic() - t0
    if RANK == 0:
        ok = e.value.code == code and "stays open" in str(e.value)
    else:
        ok = (e.value.code, e.value.rank) == (vmmipc.Result.BUSY, 0)
    ok &= took < TIMEOUT_MS / 2000 and not win.closed and not comm.stats()["broken"]
    win.barrier()                            # still open and usable everywhere
    assert all_true(ok), (e.value.code, e.value.rank, str(e.value))
    win.close()
    buf.close()


def test_close_after_work_on_several_streams(comm):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    for stream in (0, TorchStream(), 2):
        win.signal(NXT, 1, stream=stream)
    win.wait(PREV, 1, stream=TorchStream())
    win.barrier(stream=2)
    m = win.mapping(RANK)
    m.__dlpack__(stream=2)                   # a consumer on the per-thread default stream
    m.__dlpack__(stream=-1)                  # a consumer that gives none
    del m
    win.close()                              # every event done: freed at once
    assert all_true(win.closed)
    buf.close()
