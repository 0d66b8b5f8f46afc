"""Helpers the tests share that need no pytest (churn.py runs without it):
driver copies, data patterns, and ctypes mirrors of the DLPack ABI for
decoding capsules as a consumer does."""
import ctypes
import os

import vmmipc


def write(ptr, data):
    """Host bytes to device memory, through the driver vmmipc loaded."""
    vmmipc.copy_to_device(ptr, bytes(data))


def read(ptr, n):
    """Device memory to host bytes, through the driver vmmipc loaded."""
    return vmmipc.copy_from_device(ptr, n)


def driver_fn(name, *argtypes):
    """An entry point of the driver vmmipc loads (cuGetProcAddress, CUDA 12
    ABI), for streams of a consumer's own."""
    lib = ctypes.CDLL(os.environ.get("VMMIPC_CUDA_DRIVER") or "libcuda.so.1")
    get = lib.cuGetProcAddress_v2
    get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]
    fn, status = ctypes.c_void_p(), ctypes.c_int()
    assert get(name.encode(), ctypes.byref(fn), 12000, 0, ctypes.byref(status)) == 0 and fn.value, name
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(fn.value)


class Stream:
    """A non-blocking stream of the driver vmmipc loaded, made and destroyed
    as a consumer library (CuPy, numba) does; .handle is what __dlpack__
    and the window calls take."""
    def __init__(self):
        create = driver_fn("cuStreamCreate", ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint)
        self._s = ctypes.c_void_p()
        assert create(ctypes.byref(self._s), 1) == 0     # CU_STREAM_NON_BLOCKING
        self.handle = self._s.value

    def destroy(self):
        return driver_fn("cuStreamDestroy", ctypes.c_void_p)(self._s)


def mapped(ptr):
    """Whether device address ptr lies in a live mapping, as the driver sees it."""
    attr = driver_fn("cuPointerGetAttribute", ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64)
    size = ctypes.c_size_t()
    return attr(ctypes.byref(size), 18, ptr) == 0       # CU_POINTER_ATTRIBUTE_MAPPING_SIZE


def pattern(rank, n):
    """n bytes that tell rank apart (rank + 1, then a ramp)."""
    return bytes(((rank + 1) * 37 + i) % 251 for i in range(n))


class CAI:
    """An array library's object exposing the CUDA Array Interface over n
    bytes at ptr; at_del, if given, runs in its finalizer."""

    def __init__(self, ptr, n, strides=None, readonly=False, at_del=None):
        self.__cuda_array_interface__ = {"shape": (n // 4,), "typestr": "<f4", "data": (ptr, readonly),
                                         "version": 3, "strides": strides}
        self.at_del = at_del

    def __del__(self):
        if self.at_del:
            self.at_del()


# ctypes mirrors of the DLPack ABI, for decoding capsules in the tests.
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name(cap):
    return _api.PyCapsule_GetName(cap).decode()


def capsule_tensor(cap):
    """The managed tensor of an unused capsule (classic or versioned)."""
    name = capsule_name(cap)
    ptr = _api.PyCapsule_GetPointer(cap, name.encode())
    kind = DLManagedTensorVersioned if name == "dltensor_versioned" else DLManagedTensor
    return ctypes.cast(ptr, ctypes.POINTER(kind)).contents


def consume(cap):
    """What a consumer does: rename the capsule and own the tensor (its deleter is ours to call)."""
    name = capsule_name(cap)
    m = capsule_tensor(cap)
    assert _api.PyCapsule_SetName(cap, ("used_" + name).encode()) == 0
    return m
