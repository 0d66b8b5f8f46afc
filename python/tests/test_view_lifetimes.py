"""Views keep their memory: while a Mapping, an unconsumed DLPack capsule, a
consumed capsule's tensor (until its deleter), or a CUDA Array Interface
consumer holding the Mapping lives on any rank, the window's close() is
refused on every rank (BUSY), so no view ever reads unmapped memory, and a
heap slice is never handed to another window while a view of it lives."""
import ctypes
import gc
import threading

import pytest

import vmmipc
from conftest import (NODE, NXT, PREV, RANK, SIZE, STANDIN, WORLD, all_true, capsule_tensor, consume, pattern, read,
                      write)
from support import Stream

HOLDER = SIZE - 1        # the one rank that holds a view in the one-rank tests


def fill(win, seed):
    p, n = win.query(RANK)
    if n:
        write(p, pattern(seed * 16 + RANK, min(n, 4096)))
    win.barrier()
    vmmipc.synchronize()  # the barrier is stream work: the host reads the peers' bytes only after it


def refused_everywhere(win, holder_views):
    """close() on every rank: BUSY everywhere, the window still open; the holder's message counts its views."""
    with pytest.raises(vmmipc.Error) as e:
        win.close()
    ok = e.value.code == vmmipc.Result.BUSY and not win.closed
    if RANK == HOLDER:
        ok &= f"{holder_views} view(s)" in str(e.value)
    else:
        ok &= e.value.rank == HOLDER        # the library names the rank whose pins refused it
    return ok


@pytest.mark.parametrize("kind", ["mapping", "classic", "versioned", "consumed", "cai"])
def test_a_view_on_one_rank_refuses_close_everywhere(comm, kind):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    fill(win, 1)
    held = None
    if RANK == HOLDER:
        m = win.mapping(NXT)
        if kind == "mapping":
            held = m
        elif kind in ("classic", "versioned"):
            held = m.__dlpack__(max_version=(1, 0)) if kind == "versioned" else m.__dlpack__()
        elif kind == "consumed":
            cap = m.__dlpack__(max_version=(1, 0))
            held = consume(cap)             # a consumer owns the tensor now; its deleter releases the view
            del cap
        else:
            class Consumer:                 # what numba or CuPy keep: the object with the interface
                def __init__(self, obj):
                    self.cai = obj.__cuda_array_interface__
                    self.owner = obj
            held = Consumer(m)
        del m
    ok = refused_everywhere(win, 1)
    ok &= win.query(RANK)[0] == buf.ptr     # still open and usable on every rank
    if RANK == HOLDER:
        ok &= win.views == 1
        if kind == "consumed":
            held.deleter(ctypes.pointer(held))
        held = None
        gc.collect()
        ok &= win.views == 0
    assert all_true(ok)
    win.close()                             # no view anywhere now
    buf.close()


def test_views_on_every_rank_and_reading_through_them(comm):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    fill(win, 2)
    views = [win.mapping(r) for r in range(SIZE)]
    caps = [v.__dlpack__() for v in views]
    assert win.views == SIZE
    ok = refused_everywhere(win, SIZE) if RANK == HOLDER else True
    if RANK != HOLDER:
        with pytest.raises(vmmipc.Error) as e:
            win.close()
        ok &= e.value.code == vmmipc.Result.BUSY
    for r, cap in enumerate(caps):          # still the node peers' bytes; nothing off the node
        data = capsule_tensor(cap).dl_tensor.data
        ok &= read(data, 256) == pattern(2 * 16 + r, 256) if r in NODE else not data
    del views, caps, cap
    assert all_true(ok)
    win.close()
    buf.close()


def test_a_heap_slice_is_not_reused_while_a_view_lives(comm):
    with comm.heap(reserve=64 << 20, grow=4 << 20) as heap:
        a = heap.alloc(8192)
        fill(a, 3)
        view = a.mapping(NXT) if RANK == HOLDER else None
        ok = refused_everywhere(a, 1)
        b = heap.alloc(8192)                # a's slice is still taken: b gets another
        ok &= b.query(RANK)[0] != a.query(RANK)[0]
        fill(b, 4)
        if view is not None:                # the old view still reads a's bytes, never b's
            ok &= read(view.ptr, 256) == pattern(3 * 16 + NXT, 256)
        del view
        a.close()
        b.close()
        assert all_true(ok)


def test_deleter_in_another_thread_unpins(comm):
    # A consumer's deleter may run in any thread: the pin goes with it.
    win = comm.allgather_map(None)
    m = win.mapping(RANK)
    mt = consume(m.__dlpack__(max_version=(1, 0)))
    del m
    t = threading.Thread(target=lambda: mt.deleter(ctypes.pointer(mt)))
    t.start()
    t.join(60)
    assert all_true(not t.is_alive() and win.views == 0)
    win.close()


def test_a_deleter_on_another_devices_thread_leaves_the_close_working(comm):
    # The deleter records the consumer's stream again. On a thread with
    # another device current, that record fails (its event is of the wrong
    # context); before, the event stayed, and every later close failed
    # re-recording it (CUDA here, BUSY on the peers; the window stayed open).
    if vmmipc.device_count() < 2:
        pytest.skip("needs two devices")
    other = (vmmipc.current_device() + 1) % vmmipc.device_count()
    side = Stream()                             # the consumer's stream, on this rank's device
    win = comm.allgather_map(None)
    m = win.mapping(RANK)
    mt = consume(m.__dlpack__(stream=side.handle, max_version=(1, 0)))
    del m

    def deleter():
        vmmipc.set_device(other)
        mt.deleter(ctypes.pointer(mt))

    t = threading.Thread(target=deleter)
    t.start()
    t.join(60)
    try:
        win.close()
        err = None
    except vmmipc.Error as e:
        err = e
    assert side.destroy() == 0
    assert all_true(not t.is_alive() and err is None and win.closed), err


def test_dlpack_stream_argument(comm):
    with comm.allgather_map(None) as win:
        m = win.mapping(RANK)
        for s in (None, -1, 0, 1, 2):           # DLPack's numbers: legacy, none, legacy, legacy, per-thread
            m.__dlpack__(stream=s)
        with pytest.raises(ValueError):
            m.__dlpack__(stream=-2)
        with pytest.raises(TypeError):
            m.__dlpack__(stream=True)
        del m


def test_a_consumer_stream_destroyed_after_its_capsule_does_not_fail_close():
    # CuPy and numba destroy a stream with its object, often right after the
    # tensor made on it. The consumer's stream is recorded when it lets the
    # view go; before, it was recorded at close, on the destroyed handle:
    # close() failed (the stand-in: CUDA_ERROR_INVALID_HANDLE) and the
    # buffer stayed open for good.
    stream = Stream()
    buf = vmmipc.alloc(1 << 21)
    m = buf.mapping()
    cap = m.__dlpack__(stream=stream.handle)
    del cap, m                                  # let go unconsumed: the deleter runs
    assert stream.destroy() == 0
    try:
        buf.close()
        err = None
    except vmmipc.Error as e:
        err = str(e)
    assert all_true(buf.closed), err


def test_a_refused_dlpack_call_registers_no_stream():
    # A __dlpack__ call that fails its checks leaves nothing for close().
    buf = vmmipc.alloc(1 << 21)
    m = buf.mapping()
    with pytest.raises(BufferError):
        m.__dlpack__(stream=0x1234000, copy=True)   # never a copy; the stream is no real one
    del m
    buf.close()
    assert all_true(buf.closed)


@pytest.mark.skipif(not STANDIN, reason="device memory is host-visible only on the stand-in")
def test_memoryview_and_numpy_on_standin(comm):
    np = pytest.importorskip("numpy")
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf, access="r")
    fill(win, 5)
    mv = memoryview(win.mapping(NXT, dtype="uint8", shape=(16, 16)))
    ok = mv.shape == (16, 16) and mv.format == "B" and mv.readonly == (NXT != RANK)
    ok &= mv.tobytes() == pattern(5 * 16 + NXT, 256)
    arr = np.frombuffer(memoryview(win.mapping(NXT, dtype="float32")), dtype=np.float32)
    ok &= arr.tobytes()[:256] == pattern(5 * 16 + NXT, 256)
    own = np.asarray(memoryview(win.mapping(RANK, dtype="uint32")))
    own[2048:2052] = 0xA5A5A5A5                  # our own memory is writable (past what the peers read)
    ok &= read(buf.ptr + 8192, 16) == b"\xa5" * 16
    with pytest.raises(vmmipc.Error) as e:
        win.close()                              # the exports hold their views
    ok &= e.value.code == vmmipc.Result.BUSY
    del mv, arr, own
    gc.collect()
    assert all_true(ok)
    win.close()
    buf.close()


@pytest.mark.skipif(STANDIN, reason="on the stand-in device memory is host-visible")
def test_memoryview_refused_on_device_memory(comm):
    with vmmipc.alloc(1 << 20) as buf:
        with comm.allgather_map(buf) as win:
            m = win.mapping(RANK)
            with pytest.raises(BufferError) as e:
                memoryview(m)
            assert "copy_from_device" in str(e.value)
            del m


def test_torch_tensor_keeps_its_window(comm):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    t = torch.from_dlpack(win.mapping(NXT, dtype=torch.float32))
    t.fill_(float(RANK))                        # a kernel into the NXT's memory
    win.barrier(stream=torch.cuda.current_stream())
    ok = refused_everywhere(win, 1) if RANK == HOLDER else True
    if RANK != HOLDER:
        with pytest.raises(vmmipc.Error):
            win.close()
    mine = torch.from_dlpack(buf.mapping(dtype=torch.float32))
    ok &= bool(torch.all(mine == float(PREV)).item())
    del t, mine                                 # the deleters release the views
    gc.collect()
    assert all_true(ok)
    win.close()                                 # waits for the torch stream's work, then frees
    buf.close()


def test_exporting_on_one_stream_again_and_again_tracks_it_once():
    # A view exported on the same consumer stream every iteration: close()
    # tracks that stream once, however many capsules came and went (each
    # deleter recorded it again); before, every export added an entry and a
    # CUDA event, kept until close.
    stream = Stream()
    buf = vmmipc.alloc(1 << 21)
    m = buf.mapping()
    for _ in range(50):
        cap = m.__dlpack__(stream=stream.handle)
        del cap                               # the consumer lets go: its deleter records the stream
    tracked = buf._tracked                    # the stream, and the legacy one once close looked
    del m
    buf.close()
    assert stream.destroy() == 0
    assert all_true(tracked == 1 and buf.closed), tracked


def test_a_buffer_mapping_whose_shape_closes_the_buffer_is_refused():
    # Parsing the shape runs Python code, which may close the buffer. Before,
    # the view was made anyway: a live Mapping of freed memory, counted on a
    # closed buffer.
    buf = vmmipc.alloc(1 << 21)

    def shape():
        buf.close()
        yield 1 << 21

    with pytest.raises(vmmipc.Error) as e:
        buf.mapping(shape=shape())
    assert buf.closed and buf.views == 0
    assert e.value.code == vmmipc.Result.INVALID_ARG and "the buffer is closed" in str(e.value), str(e.value)


def test_a_window_mapping_is_on_the_windows_device():
    # The peers' memory is mapped for the device current when the window was
    # made. Before, mapping() named the device current at the call: a DLPack
    # consumer then made a tensor on a device without access to the memory.
    if vmmipc.device_count() < 2:
        pytest.skip("needs two devices")
    vmmipc.set_device(0)
    with vmmipc.Comm(WORLD) as c, vmmipc.alloc(1 << 21) as buf:
        win = c.allgather_map(buf)
        vmmipc.set_device(1)
        try:
            m = win.mapping(NXT)
            got = (m.device, m.__dlpack_device__())
            del m
        finally:
            vmmipc.set_device(0)
        win.close()
    assert got == (0, (2, 0)), got
