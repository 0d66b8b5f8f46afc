"""Garbage collection never runs collective work and never aborts a comm: a
Window collected open is released, and freed in step by the first
collective call on its comm after every rank released it; until then the
other ranks keep using it. Different timing on different ranks, and a
window whose last reference dies in another thread while the main thread
is inside a call on the same comm."""
import ctypes
import gc
import threading
import time
import warnings

import pytest
from mpi4py import MPI

import vmmipc
from conftest import NODE, RANK, SIZE, TIMEOUT_MS, WORLD, all_true, consume, pattern, read, write
from support import CAI


def drop(held):
    """Drops the references in held (a dict), as a program's last use does; the warnings it gave."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        held.clear()
        gc.collect()
    return [x for x in w if issubclass(x.category, ResourceWarning)]


def timed_collective(comm):
    """The next collective: it must not wait for a timeout, and the comm stays sound."""
    t0 = time.monotonic()
    with comm.allgather_map(None):
        pass
    took = time.monotonic() - t0
    return took < TIMEOUT_MS / 2000 and not comm.stats()["broken"]


@pytest.mark.parametrize("order", ["rank0_first", "last_first"])
def test_collected_at_different_times_on_different_ranks(comm, order):
    buf = vmmipc.alloc(1 << 20)
    write(buf.ptr, pattern(RANK, 256))
    held = {"win": comm.allgather_map(buf)}
    held["win"].barrier()
    # Rank `who(k)` drops its window before collective k; the others keep
    # using theirs meanwhile (and read the peers' bytes through it).
    who = (lambda k: k) if order == "rank0_first" else (lambda k: SIZE - 1 - k)
    ok = True
    for k in range(SIZE):
        if RANK == who(k):
            warned = drop(held)
            ok &= any("Window" in str(x.message) for x in warned)
            ok &= comm.stats()["released_freed"] == 0
        elif held:
            for r in NODE:
                ok &= read(held["win"].query(r)[0], 256) == pattern(r, 256)
        ok &= timed_collective(comm)
    # Every rank released it before the last collective above: freed in step.
    st = comm.stats()
    ok &= st["released_freed"] == 1 and st["released"] == 0 and st["collected_waiting"] == 0
    ok &= st["open_windows"] == 0 and not st["broken"]
    assert all_true(ok)
    buf.close()                       # nothing exposes it any more


def test_collected_on_one_rank_only(comm):
    buf = vmmipc.alloc(1 << 20)
    write(buf.ptr, pattern(RANK, 256))
    held = {"win": comm.allgather_map(buf)}
    held["win"].barrier()
    if RANK == 0:
        drop(held)
    ok = True
    for _ in range(3):                # the peers' next collectives: at once, the comm sound
        ok &= timed_collective(comm)
    if RANK != 0:                     # they still read every node rank's bytes, rank 0's included
        for r in NODE:
            ok &= read(held["win"].query(r)[0], 256) == pattern(r, 256)
    ok &= comm.stats()["released_freed"] == 0     # not freed anywhere: not every rank let it go
    assert all_true(ok)
    drop(held)
    ok = timed_collective(comm) and comm.stats()["released_freed"] == 1
    assert all_true(ok)
    buf.close()


def test_last_reference_dies_in_a_deleter_thread_during_a_call(comm):
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("the test's helper thread sends MPI messages: needs MPI_THREAD_MULTIPLE")
    win = comm.allgather_map(None)
    # A consumer's tensor is the last reference: its deleter drops the view,
    # the view the window.
    mt = consume(win.mapping(RANK).__dlpack__(max_version=(1, 0)))
    del win
    result = {}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        if RANK == 0:
            def deleter_thread():
                while not comm._busy:     # until the main thread is inside allgather_map
                    time.sleep(0)
                mt.deleter(ctypes.pointer(mt))
                result["done"] = True
                for r in range(1, SIZE):  # only now may the peers enter the call
                    WORLD.send(True, dest=r, tag=31)
            t = threading.Thread(target=deleter_thread)
            t.start()
            other = comm.allgather_map(None)
            t.join(60)
            ok = result.get("done", False) and not t.is_alive()
        else:
            WORLD.recv(source=0, tag=31)
            mt.deleter(ctypes.pointer(mt))
            other = comm.allgather_map(None)
            ok = True
    ok &= any(issubclass(x.category, ResourceWarning) and "Window" in str(x.message) for x in w)
    ok &= not comm.stats()["broken"]
    other.close()                     # its call frees the released one in step first
    st = comm.stats()
    ok &= st["released_freed"] == 1 and st["open_windows"] == 0 and not st["broken"]
    assert all_true(ok)


def test_a_collected_buffer_waits_for_the_work_it_handed_out():
    # A Buffer collected while device work it handed out still runs is freed
    # once that work is done (at a later collective call), as close() would
    # wait for it; before, it was unmapped at once, under the work.
    from support import Stream, mapped
    side = Stream()                                       # non-blocking: not ordered after the legacy stream
    with vmmipc.Comm(MPI.COMM_SELF, timeout_ms=TIMEOUT_MS) as own, own.allgather_map(None) as win:
        buf = vmmipc.alloc(1 << 21)
        ptr = buf.ptr                         # handed out: work on it may follow on any stream
        win.wait(0, 1, stream=0)              # the legacy stream waits for this rank's own signal
        del buf                               # collected here (its last reference)
        with own.allgather_map(None):         # a later collective looks: the work is queued still
            pass
        kept = mapped(ptr)
        win.signal(0, 1, stream=side.handle)  # lets the legacy stream go
        vmmipc.synchronize()
        with own.allgather_map(None):         # the next one frees it
            pass
        gone = not mapped(ptr)
    assert side.destroy() == 0
    assert all_true(kept and gone), (kept, gone)


@pytest.mark.parametrize("what", ["comm", "heap"])
def test_finalizers_a_close_runs_find_it_closed(what):
    # A collected window's wrapped buffer is freed, and its object dropped,
    # after the collective that freed the window: here the close. Before, the
    # close ran that finalizer while the comm or heap still held its freed
    # handle (stats() read freed memory; a second close freed it again).
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    heap = c.heap() if what == "heap" else None
    target = c if heap is None else heap
    raw = vmmipc.alloc(1 << 21)    # whole granules: wrap() needs them
    seen = []

    def look():
        try:
            target.stats()
            seen.append("open")
        except vmmipc.Error as e:
            seen.append(e.code)

    buf = vmmipc.wrap(CAI(raw.ptr, raw.size, at_del=look))
    held = {"win": c.allgather_map(buf)}
    del buf
    drop(held)                      # released; the buffer waits for the window's free
    target.close()
    if heap is not None:
        c.close()
    raw.close()
    assert all_true(seen == [vmmipc.Result.INVALID_ARG] and target.closed), seen


def test_a_cycle_through_a_wrapped_object_is_collected(comm):
    # The object holds its Buffer, a window exposing it, and a view of the
    # Buffer: each refers back to the object through the Buffer. The
    # collector must see every one of those references; before, the window
    # and the view hid theirs, so nothing was ever collected, and the window
    # stayed open (the comm's close refused) for good.
    import weakref
    raw = vmmipc.alloc(1 << 21)    # whole granules: wrap() needs them
    obj = CAI(raw.ptr, raw.size)
    obj.buf = vmmipc.wrap(obj)
    obj.win = comm.allgather_map(obj.buf)
    view = {"obj": CAI(raw.ptr, raw.size)}
    view["obj"].buf = vmmipc.wrap(view["obj"])
    view["obj"].view = view["obj"].buf.mapping()
    gone = [weakref.ref(obj), weakref.ref(view["obj"])]
    del obj
    drop(view)
    collected = [g() is None for g in gone]
    with comm.allgather_map(None):   # frees the released window in step
        pass
    left = comm.stats()["open_windows"]
    raw.close()
    assert all_true(collected == [True, True] and left == 0), (collected, left)
