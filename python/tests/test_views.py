"""Mapping views: DLPack capsules (classic and versioned) decoded with
ctypes, the CUDA Array Interface, dtypes and shapes, protocol arguments."""
import ctypes
import gc
import sys

import pytest

import vmmipc
from conftest import (NXT, RANK, STANDIN, all_true, capsule_name, capsule_tensor, consume, pattern, read,
                      write)


@pytest.fixture
def win(comm):
    buf = vmmipc.alloc(1 << 20)
    write(buf.ptr, pattern(RANK, 4096))
    w = comm.allgather_map(buf)
    w.barrier()
    yield w
    w.close()
    buf.close()


def shape_of(t):
    return tuple(t.shape[i] for i in range(t.ndim))


def strides_of(t):
    return tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None


def test_classic_capsule(win):
    m = win.mapping(NXT)
    assert m.__dlpack_device__() == (vmmipc.kDLCUDA, vmmipc.current_device())
    cap = m.__dlpack__()
    assert capsule_name(cap) == "dltensor"
    t = capsule_tensor(cap).dl_tensor
    p, n = win.query(NXT)
    ok = t.data == p and t.byte_offset == 0 and (t.device.device_type, t.device.device_id) == m.__dlpack_device__()
    ok &= (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (1, 8, 1)   # kDLUInt, 8 bits
    ok &= shape_of(t) == (n,) and strides_of(t) == (1,)
    ok &= read(t.data, 4096) == pattern(NXT, 4096)
    assert all_true(ok)


def test_versioned_capsule_and_typed_shape(win):
    m = win.mapping(NXT, dtype="float32", shape=(4, 16))
    assert m.shape == (4, 16) and m.dtype == "float32"
    cap = m.__dlpack__(max_version=(1, 2), stream=None, dl_device=m.__dlpack_device__(), copy=False)
    assert capsule_name(cap) == "dltensor_versioned"
    mt = capsule_tensor(cap)
    t = mt.dl_tensor
    ok = (mt.version.major, mt.flags) == (1, 0)
    ok &= (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)  # kDLFloat
    ok &= shape_of(t) == (4, 16) and strides_of(t) == (16, 1) and t.data == win.query(NXT)[0]
    assert all_true(ok)
    # An old consumer's max_version (0, x) gets the classic capsule.
    assert capsule_name(m.__dlpack__(max_version=(0, 8))) == "dltensor"


def test_capsule_keeps_view_until_deleter(win):
    m = win.mapping(RANK)
    base = sys.getrefcount(m)
    cap = m.__dlpack__()
    assert sys.getrefcount(m) == base + 1
    del cap                                  # unused capsule: its destructor calls the deleter
    gc.collect()
    assert sys.getrefcount(m) == base
    cap = m.__dlpack__(max_version=(1, 0))
    mt = consume(cap)                        # a consumer took it: the capsule no longer frees it
    del cap
    assert sys.getrefcount(m) == base + 1
    mt.deleter(ctypes.pointer(mt))           # the consumer is done
    assert sys.getrefcount(m) == base


def test_cuda_array_interface(win):
    m = win.mapping(NXT, dtype="int64", shape=8)
    cai = m.__cuda_array_interface__
    assert cai == {"shape": (8,), "typestr": "<i8", "data": (win.query(NXT)[0], False), "version": 3,
                   "strides": None, "stream": None}
    b = win.mapping(NXT, dtype="bfloat16")
    with pytest.raises(TypeError):
        b.__cuda_array_interface__           # no typestr for bfloat16; DLPack has it
    cap = b.__dlpack__()
    assert capsule_tensor(cap).dl_tensor.dtype.code == 4   # kDLBfloat


def test_dtype_names(win):
    class TorchLike:
        def __str__(self):
            return "torch.float16"

    class NumpyLike:
        name = "complex64"

    assert win.mapping(RANK, dtype=TorchLike()).dtype == "float16"
    assert win.mapping(RANK, dtype=NumpyLike()).dtype == "complex64"
    assert win.mapping(RANK, dtype="bool").__cuda_array_interface__["typestr"] == "|b1"
    with pytest.raises(TypeError):
        win.mapping(RANK, dtype="float8")


def test_shape_errors(win):
    n = win.query(RANK)[1]
    with pytest.raises(ValueError):
        win.mapping(RANK, shape=n + 1)
    with pytest.raises(ValueError):
        win.mapping(RANK, dtype="float64", shape=(n // 8, 2))
    with pytest.raises(ValueError):
        win.mapping(RANK, shape=(-1,))
    with pytest.raises(TypeError):
        win.mapping(RANK, shape="12")
    assert win.mapping(RANK, shape=()).shape == ()


def test_protocol_arguments(win):
    m = win.mapping(RANK)
    with pytest.raises(BufferError):
        m.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        m.__dlpack__(dl_device=(1, 0))         # kDLCPU
    with pytest.raises(TypeError):
        m.__dlpack__(stream="s")
    with pytest.raises(TypeError):
        m.__dlpack__(max_version=1)


def test_buffer_mapping():
    with vmmipc.alloc(1 << 20) as b:
        m = b.mapping(dtype="uint32")
        assert m.shape == ((1 << 20) // 4,) and m.owner is b
        cap = m.__dlpack__()
        assert capsule_tensor(cap).dl_tensor.data == b.ptr
        del m
        with pytest.raises(vmmipc.Error) as e:
            b.close()                   # the capsule holds the view, which holds the memory
        assert e.value.code == vmmipc.Result.BUSY and "1 view" in str(e.value)
        del cap


@pytest.mark.skipif(not STANDIN, reason="device memory is host-addressable only on the stand-in")
def test_host_access_on_standin(win):
    # On the stand-in a mapping is host memory: ctypes reads the NXT's bytes
    # at the capsule's data pointer and writes into our own memory.
    cap = win.mapping(NXT).__dlpack__()     # the tensor lives as long as the capsule
    t = capsule_tensor(cap).dl_tensor
    assert all_true(ctypes.string_at(t.data, 64) == pattern(NXT, 64))
    own = win.mapping(RANK).__cuda_array_interface__["data"][0]
    ctypes.memmove(own, b"\x5a" * 8, 8)
    assert read(own, 8) == b"\x5a" * 8
