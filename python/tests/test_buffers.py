"""vmmipc.alloc, vmmipc.wrap and vmmipc.Buffer."""
import ctypes

import pytest

import vmmipc
from conftest import RANK, read, write, pattern
from support import CAI


def test_alloc_and_data():
    with vmmipc.alloc(5000) as b:
        assert b.size >= 5000 and b.ptr != 0 and not b.readonly
        write(b.ptr, pattern(RANK, 5000))
        assert read(b.ptr, 5000) == pattern(RANK, 5000)
    assert b.closed and b.size == 0
    b.close()


def test_alloc_zero():
    b = vmmipc.alloc(0)
    assert b.size == 0
    b.close()


def test_alloc_bad_input():
    with pytest.raises(ValueError):
        vmmipc.alloc(-1)
    with pytest.raises(TypeError):
        vmmipc.alloc(1.5)
    with pytest.raises(TypeError):
        vmmipc.alloc("1")
    with pytest.raises((ValueError, vmmipc.Error)):
        vmmipc.alloc(1 << 70)


def test_closed_buffer():
    b = vmmipc.alloc(100)
    b.close()
    with pytest.raises(vmmipc.Error):
        b.ptr
    with pytest.raises(vmmipc.Error):
        b.mapping()


def test_wrap_pointer():
    with vmmipc.alloc(1 << 21) as b:
        write(b.ptr, pattern(RANK, 64))
        w = vmmipc.wrap(b.ptr, b.size)
        assert (w.ptr, w.size) == (b.ptr, b.size)
        assert read(w.ptr, 64) == pattern(RANK, 64)
        w.close()
        w.close()


def test_wrap_cuda_array_interface():
    with vmmipc.alloc(1 << 21) as b:
        obj = CAI(b.ptr, b.size)
        w = vmmipc.wrap(obj)
        assert (w.ptr, w.size) == (b.ptr, b.size)
        w.close()
        with pytest.raises(ValueError):
            vmmipc.wrap(CAI(b.ptr, b.size, strides=(8,)))   # not contiguous
        with pytest.raises(ValueError):
            vmmipc.wrap(obj, b.size + 1)                     # more than the object


def test_wrap_keeps_the_producers_read_only_flag():
    # A producer that says read-only (the CUDA Array Interface's data[1], a
    # versioned DLPack capsule's flag) gets a read-only Buffer, and so are
    # its views. wrap() used to drop the flag: the views were writable.
    with vmmipc.alloc(1 << 21) as b:
        got = []
        for obj in (CAI(b.ptr, b.size, readonly=True), CAI(b.ptr, b.size)):
            w = vmmipc.wrap(obj)
            m = w.mapping()
            got.append((w.readonly, m.readonly, m.__cuda_array_interface__["data"][1]))
            w2 = vmmipc.wrap(w.mapping(dtype="float32"))   # its versioned capsule says so
            got.append(w2.readonly)
            w2.close()
            del m
            w.close()
    assert got == [(True, True, True), True, (False, False, False), False]


def test_a_wrapped_object_that_holds_its_buffer_is_collected():
    # An array object that keeps the Buffer wrapping it makes a cycle, since
    # the Buffer keeps the object alive. The collector must see the Buffer's
    # reference, else neither (nor the Buffer's registration) is ever freed.
    import gc
    import weakref
    with vmmipc.alloc(1 << 21) as b:
        obj = CAI(b.ptr, b.size)
        obj.shared = vmmipc.wrap(obj)
        gone = weakref.ref(obj)
        del obj
        gc.collect()
        assert gone() is None


def test_a_read_only_buffers_own_view_through_a_window_is_read_only(comm):
    # Before, the window's view of this rank's own buffer was writable,
    # though the producer said read-only. (Peers map with the access they
    # ask for.)
    with vmmipc.alloc(1 << 21) as b:
        ro = vmmipc.wrap(CAI(b.ptr, b.size, readonly=True))
        with comm.allgather_map(ro, access="r") as win:
            m = win.mapping(RANK)
            got = (m.readonly, m.__cuda_array_interface__["data"][1])
            del m
        ro.close()
    assert got == (True, True)


def test_wrap_dlpack_producer():
    with vmmipc.alloc(1 << 21) as b:
        view = b.mapping(dtype="float32")
        w = vmmipc.wrap(view)          # consumes a capsule from view.__dlpack__
        assert (w.ptr, w.size) == (b.ptr, b.size)
        del view
        assert b.views == 1             # the consumed capsule holds the view
        w.close()                       # releases the capsule's tensor
        assert b.views == 0


def test_wrap_keeps_the_dlpack_producers_device():
    # A producer on another device than the current one: the Buffer's views
    # name the producer's device, not the current one (a consumer would
    # otherwise label one device's memory as another's).
    if vmmipc.device_count() < 2:
        pytest.skip("needs two devices")
    here = vmmipc.current_device()
    other = (here + 1) % vmmipc.device_count()
    vmmipc.set_device(other)
    try:
        b = vmmipc.alloc(1 << 21)
        view = b.mapping(dtype="float32")
    finally:
        vmmipc.set_device(here)
    w = vmmipc.wrap(view)
    del view
    m = w.mapping()
    got = m.__dlpack_device__()
    del m
    w.close()
    vmmipc.set_device(other)
    b.close()
    vmmipc.set_device(here)
    assert got == (2, other)


def test_wrap_bad_input():
    with pytest.raises(TypeError):
        vmmipc.wrap(12345)             # a pointer needs nbytes
    with pytest.raises(TypeError):
        vmmipc.wrap(object())
    with pytest.raises(ValueError):
        vmmipc.wrap(0x1000, -1)
    host = ctypes.create_string_buffer(1 << 22)
    with pytest.raises(vmmipc.Error) as e:  # not VMM memory
        vmmipc.wrap(ctypes.addressof(host), 1 << 21)
    assert e.value.code in (vmmipc.Result.UNSUPPORTED, vmmipc.Result.INVALID_ARG, vmmipc.Result.CUDA)


def test_wrap_keeps_object_alive():
    import sys
    with vmmipc.alloc(1 << 21) as b:
        obj = CAI(b.ptr, b.size)
        before = sys.getrefcount(obj)
        w = vmmipc.wrap(obj)
        assert sys.getrefcount(obj) == before + 1
        w.close()
        assert sys.getrefcount(obj) == before
