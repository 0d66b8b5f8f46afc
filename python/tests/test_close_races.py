"""Calls from another thread while close() (or a map) is inside the library.

close() releases the GIL while the library frees the handle, and takes it
back only after: a call from another thread meanwhile must be refused
(BUSY), never made on a handle that may be freed. Rank 0 closes on the main
thread; a helper thread waits until that close is inside the library, makes
its calls, and only then lets the other ranks join the close, so rank 0's
close is still blocked in the library while the helper calls.
"""
import threading
import time

import pytest
from mpi4py import MPI

import vmmipc
from conftest import RANK, SIZE, TIMEOUT_MS, WORLD, all_true

TAG = 33


def needs_threads():
    if SIZE < 2 or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs two ranks and MPI_THREAD_MULTIPLE (the helper thread sends)")


def race(busy, blocking, calls):
    """Rank 0 runs blocking() while a helper makes each of calls once
    busy() is true; the other ranks run blocking() after the helper.
    Returns {name: "ran" or (code, message)} on rank 0, {} elsewhere."""
    got = {}
    if RANK == 0:
        def helper():
            while not busy():           # until blocking() is inside the library
                time.sleep(0)           # hands the GIL over; not a wait for time
            for name, call in calls:
                try:
                    call()
                    got[name] = "ran"
                except vmmipc.Error as e:
                    got[name] = (e.code, str(e))
            for r in range(1, SIZE):    # only now may the peers join
                WORLD.send(True, dest=r, tag=TAG)
        t = threading.Thread(target=helper)
        t.start()
        blocking()
        t.join(60)
        assert not t.is_alive()
    else:
        WORLD.recv(source=0, tag=TAG)
        blocking()
    return got


def refused(got, what):
    return all(v != "ran" and v[0] == vmmipc.Result.BUSY and
               f"close() of the {what} is in progress on another thread" in v[1] for v in got.values())


def test_window_calls_during_its_close_are_refused():
    needs_threads()
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c, vmmipc.alloc(1 << 21) as buf:
        win = c.allgather_map(buf)
        got = race(lambda: win._busy, win.close,
                   [("query", lambda: win.query(0)), ("mapping", lambda: win.mapping(0)),
                    ("signal", lambda: win.signal(0, 1)), ("barrier", lambda: win.barrier()),
                    ("wait_host", lambda: win.wait_host(0, 0, timeout_ms=100))])
        assert all_true(win.closed and refused(got, "window")), got


def test_heap_calls_during_its_close_are_refused():
    needs_threads()
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c:
        heap = c.heap()
        got = race(lambda: c._busy, heap.close, [("stats", heap.stats), ("trim", heap.trim)])
        assert all_true(heap.closed and refused(got, "heap")), got


def test_comm_calls_during_its_close_are_refused():
    # abort() among them: the comm may be freed before close() takes the GIL back
    needs_threads()
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    got = race(lambda: c._busy, c.close,
               [("stats", c.stats), ("allgather_map", lambda: c.allgather_map(None)), ("abort", c.abort)])
    assert all_true(c.closed and refused(got, "comm")), got


def test_closing_a_buffer_that_a_map_uses_is_refused():
    needs_threads()
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c, vmmipc.alloc(1 << 21) as buf:
        made = []
        got = race(lambda: c._busy, lambda: made.append(c.allgather_map(buf)), [("close", buf.close)])
        ok = not buf.closed and all(v != "ran" and v[0] == vmmipc.Result.BUSY and "uses the buffer" in v[1]
                                    for v in got.values())
        made[0].close()
    assert all_true(ok and buf.closed), got


def test_a_scatter_holds_its_own_list_of_buffers():
    # The root's bufs list is another thread's to change while the scatter
    # runs without the GIL: the call keeps a copy. Before, a list cleared
    # meanwhile was read again after the call (a crash), and a changed entry
    # left one buffer counted busy for good.
    needs_threads()
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c:
        mine = [vmmipc.alloc(1 << 21) for _ in range(SIZE)] if RANK == 0 else None
        bufs = list(mine) if RANK == 0 else None
        got = []
        race(lambda: c._busy, lambda: got.append(c.scatter_map(bufs, 0)), [("clear", lambda: bufs.clear())])
        if got[0] is not None:
            got[0].close()
        closed = True
        for b in mine or []:
            b.close()                          # none is left counted busy
            closed &= b.closed
    assert all_true(closed)


def close_begins_inside(close, busy, call):
    """Rank 0 makes call(start), whose argument runs start(): that begins
    close() on a thread of its own and returns once busy() says the close
    is inside the library. The other ranks close only after the call.
    Returns {"call": "ran" or (code, message)} on rank 0, {} elsewhere."""
    got = {}
    if RANK == 0:
        closer = threading.Thread(target=close)

        def start():
            closer.start()
            while not busy():           # until the close is inside the library
                time.sleep(0)           # hands the GIL over; not a wait for time

        made = None
        try:
            made = call(start)
            got["call"] = "ran"
        except vmmipc.Error as e:
            got["call"] = (e.code, str(e))
        for r in range(1, SIZE):
            WORLD.send(True, dest=r, tag=TAG)
        closer.join(60)
        assert not closer.is_alive()
        del made                        # a view wrongly made: dropped once the close is over
    else:
        WORLD.recv(source=0, tag=TAG)
        close()
    return got


class ClosingStream:
    """A stream whose handle (the legacy default stream) is read by Python code."""

    def __init__(self, start):
        self.start = start

    def __cuda_stream__(self):
        self.start()
        return (0, 0)


@pytest.mark.parametrize("call", ["mapping", "signal", "wait", "barrier"])
def test_a_call_whose_argument_lets_a_close_begin_is_refused(call):
    # A shape generator or a stream object runs Python code while the call
    # converts it, and another thread's close() may begin meanwhile. Before,
    # the call went on with a window inside vmmipc_win_free: the mapping gave
    # a view of memory the close then unmapped (reading it: SIGSEGV), and
    # signal, wait and barrier were made on a handle being freed.
    needs_threads()
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c, vmmipc.alloc(1 << 21) as buf:
        win = c.allgather_map(buf)

        def shape(start):
            start()
            yield 1 << 21

        calls = {"mapping": lambda s: win.mapping(0, shape=shape(s)),
                 "signal": lambda s: win.signal(0, 1, stream=ClosingStream(s)),
                 "wait": lambda s: win.wait(0, 0, stream=ClosingStream(s)),
                 "barrier": lambda s: win.barrier(stream=ClosingStream(s))}
        got = close_begins_inside(win.close, lambda: win._busy, calls[call])
        assert all_true(win.closed and win.views == 0 and refused(got, "window")), got


def test_a_scatter_whose_buffers_let_a_close_begin_is_refused():
    # The root's bufs may be a generator; the comm's close() may begin on
    # another thread while it runs.
    needs_threads()
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)

    def bufs(start):
        start()
        yield from [None] * SIZE

    got = close_begins_inside(c.close, lambda: c._busy, lambda s: c.scatter_map(bufs(s), 0))
    assert all_true(c.closed and refused(got, "comm")), got


def test_a_call_while_close_waits_for_collected_work_is_refused():
    # Comm.close() first waits, letting the GIL go, for the device work of
    # windows the garbage collector took. A call from another thread
    # meanwhile, a second close among them, must be refused. Before, the
    # comm was marked busy only after that wait: both closes went on to
    # destroy it. One rank (COMM_SELF); the legacy stream is held by a wait
    # on another comm's window until this rank signals it.
    import gc
    import warnings
    from support import Stream
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE (the close runs on a thread)")
    side = Stream()
    hold = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=TIMEOUT_MS)
    gate = hold.allgather_map(None)
    own = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=TIMEOUT_MS)
    win = own.allgather_map(None)
    win.query(0)                        # handed out: its work is what runs on the legacy stream
    gate.wait(0, 1, stream=0)           # the legacy stream waits for this rank's own signal
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del win
        gc.collect()
    closed = []
    closer = threading.Thread(target=lambda: closed.append(own.close()))
    closer.start()
    while closer.is_alive() and not own._busy:
        time.sleep(0)                   # hands the GIL over; not a wait for time
    # Before: the close showed nothing while it waited, and ended after the
    # comm's timeout with that work still queued.
    assert own._busy, "close() waited for the collected window's work without marking the comm busy"
    got = {}
    for name, call in [("stats", own.stats), ("close", own.close)]:
        try:
            call()
            got[name] = "ran"
        except vmmipc.Error as e:
            got[name] = (e.code, str(e))
    gate.signal(0, 1, stream=side.handle)   # lets the legacy stream go: the close goes on
    closer.join(60)
    assert not closer.is_alive()
    gate.close()
    hold.close()
    assert side.destroy() == 0
    assert own.closed and closed == [None], closed
    assert refused(got, "comm"), got
