"""Window synchronisation: signal, wait, barrier, wait_host, threads."""
import threading

import pytest

import vmmipc
from conftest import NXT, PREV, RANK, SIZE, WORLD, all_true, pattern, read, write


class TorchStream:
    cuda_stream = 0        # as torch.cuda.Stream exposes its handle


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0)      # (version, handle)


@pytest.fixture
def win(comm):
    buf = vmmipc.alloc(1 << 20)
    w = comm.allgather_map(buf)
    yield w
    w.close()
    buf.close()


def test_signal_then_wait_host_carries_data(win):
    # Each rank writes into the next one's buffer, then signals it.
    write(win.query(NXT)[0], pattern(RANK, 256))
    win.signal(NXT, 7, stream=0)
    vmmipc.synchronize()
    win.wait_host(PREV, 7, timeout_ms=20000)
    assert all_true(read(win.query(RANK)[0], 256) == pattern(PREV, 256))
    win.barrier()


def test_stream_wait_and_barrier_forms(win):
    win.signal(NXT, 3, stream=TorchStream())
    win.wait(PREV, 3, stream=ProtocolStream())
    win.barrier(TorchStream())
    win.barrier(stream=None)
    vmmipc.synchronize()
    win.wait_host(PREV, 3)               # already there: returns at once


def test_sync_bad_input(win):
    with pytest.raises(ValueError):
        win.signal(SIZE, 1)
    with pytest.raises(ValueError):
        win.signal(0, -1)
    with pytest.raises(TypeError):
        win.wait(0, 1, stream="default")
    with pytest.raises(TypeError):
        win.barrier(stream=1.0)
    with pytest.raises(ValueError):
        win.wait_host(0, 1, timeout_ms=0)


def test_wait_host_timeout_names_the_rank(win):
    with pytest.raises(vmmipc.Error) as e:
        win.wait_host(PREV, 1 << 40, timeout_ms=50)   # nobody signals that value
    win.barrier()
    assert all_true((e.value.code, e.value.rank) == (vmmipc.Result.TIMEOUT, PREV)), (e.value.code, e.value.rank)


def test_wait_host_in_a_thread_releases_the_gil(win):
    # A thread blocks in wait_host while the main thread keeps running Python
    # code; the peer signals only after the main thread's work is done.
    result = {}
    started = threading.Event()

    def waiter():
        started.set()
        try:
            win.wait_host(PREV, 11, timeout_ms=60000)
            result["ok"] = True
        except vmmipc.Error as e:  # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    work = sum(i * i for i in range(200000))    # needs the GIL
    still_waiting = t.is_alive() and not result
    WORLD.Barrier()          # every rank's waiter is in place; now signal
    win.signal(NXT, 11)
    vmmipc.synchronize()
    t.join(60)
    assert all_true(work > 0 and result.get("ok") and not t.is_alive())
    assert still_waiting or SIZE == 1


def test_a_stream_wait_blocked_in_its_enqueue_releases_the_gil(win):
    # The enqueue itself can block: on a GPU behind a full stream queue, on
    # the synchronous stand-in (python_sync_standin: VMMIPC_STANDIN_ASYNC=off)
    # always. The peer's signal that ends it comes only after this rank's
    # main thread, which needs the GIL, has seen the waiter inside the call.
    # Two streams: a signal queued behind the wait on its own stream would
    # never run on a GPU.
    from support import Stream
    result, waits, signals = {}, Stream(), Stream()

    def waiter():
        try:
            win.wait(PREV, 31, stream=waits.handle)
            result["ok"] = True
        except vmmipc.Error as e:  # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    while not win._busy and t.is_alive():   # inside the call, or already done
        pass
    WORLD.Barrier()
    win.signal(NXT, 31, stream=signals.handle)
    vmmipc.synchronize()
    t.join(60)
    destroyed = (waits.destroy(), signals.destroy())
    assert all_true(result.get("ok") and not t.is_alive() and destroyed == (0, 0)), (result, destroyed)


def test_close_refused_while_waiting(win):
    started = threading.Event()
    done = {}

    def waiter():
        started.set()
        win.wait_host(PREV, 21, timeout_ms=60000)
        done["ok"] = True

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    while not win._busy and t.is_alive():   # until the waiter is inside wait_host
        pass                                # the interpreter hands the GIL over
    with pytest.raises(vmmipc.Error) as e:
        win.close()                       # a call on it is in progress
    assert e.value.code == vmmipc.Result.BUSY
    WORLD.Barrier()
    win.signal(NXT, 21)
    vmmipc.synchronize()
    t.join(60)
    assert all_true(done.get("ok"))
