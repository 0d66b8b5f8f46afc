#!/usr/bin/env python3
"""GPU check for vmmipc_buf_wrap on memory a real allocator made: PyTorch's
caching allocator with expandable segments (cuMemCreate + cuMemMap under the
hood), and with the default cudaMalloc backend. For each, wraps a tensor's
range, and when that works exports it, imports the descriptor in this
process (an alias of the same pages) and compares the bytes through the
driver vmmipc loaded. Prints one line per case; exit 0 unless a wrap that
succeeded gives wrong data. Usage (on a GPU machine):

    VMMIPC_LIB=build/src/libvmmipc.so python3 scripts/gpu/wrap_torch.py expandable
    VMMIPC_LIB=build/src/libvmmipc.so python3 scripts/gpu/wrap_torch.py cudamalloc

The allocator is chosen before CUDA starts, so each backend is its own run.
"""
import ctypes
import os
import sys

backend = sys.argv[1] if len(sys.argv) > 1 else "expandable"
if backend == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import torch  # noqa: E402  (after the allocator setting)

lib = ctypes.CDLL(os.environ.get("VMMIPC_LIB", "build/src/libvmmipc.so"))
lib.vmmipc_last_error.restype = ctypes.c_char_p
lib.vmmipc_strerror.restype = ctypes.c_char_p


def fn(name, restype, *args):
    p = ctypes.c_void_p()
    rc = lib.vmmipc_driver_proc(name.encode(), 0, ctypes.byref(p))
    if rc:
        raise RuntimeError(f"vmmipc_driver_proc({name}): {lib.vmmipc_last_error().decode()}")
    return ctypes.CFUNCTYPE(restype, *args)(p.value)


torch.cuda.set_device(0)
# 80 MiB: four of the 20 MiB mappings an expandable segment grows by (seen
# on H200 with torch 2.11), so that the range ends at a mapping boundary.
x = torch.arange(80 << 20, dtype=torch.uint8, device="cuda").remainder_(251)
torch.cuda.synchronize()
ptr, size = x.data_ptr(), x.numel()
buf = ctypes.c_void_p()
rc = lib.vmmipc_buf_wrap(ctypes.c_void_p(ptr), ctypes.c_size_t(size), ctypes.byref(buf))
print(f"{backend}: torch {torch.__version__}, tensor at 0x{ptr:x}, {size} bytes: vmmipc_buf_wrap -> "
      f"{lib.vmmipc_strerror(rc).decode()}{': ' + lib.vmmipc_last_error().decode() if rc else ''}")
if rc:
    sys.exit(0)
chunks, imported = ctypes.c_int(), ctypes.c_int()
lib.vmmipc_buf_info(buf, ctypes.byref(chunks), ctypes.byref(imported))
desc, alias = ctypes.c_void_p(), ctypes.c_void_p()
rc = lib.vmmipc_export(buf, ctypes.byref(desc)) or lib.vmmipc_import(desc, None, ctypes.byref(alias))
if rc:
    print(f"{backend}: export/import of the wrapped range failed: {lib.vmmipc_last_error().decode()}")
    sys.exit(1)
aptr, asize = ctypes.c_void_p(), ctypes.c_size_t()
lib.vmmipc_buf_ptr(alias, ctypes.byref(aptr), ctypes.byref(asize))
dtoh = fn("cuMemcpyDtoH", ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t)
host = (ctypes.c_ubyte * size)()
crc = dtoh(host, aptr.value, size)
same = crc == 0 and bytes(host) == x.cpu().numpy().tobytes()
print(f"{backend}: {chunks.value} chunk(s); exported and imported as an alias at 0x{aptr.value:x}: "
      f"{'every byte equal' if same else 'DATA MISMATCH (copy rc %d)' % crc}")
lib.vmmipc_buf_free(alias)
lib.vmmipc_desc_free(desc)
rc = lib.vmmipc_buf_free(buf)
x.add_(1)  # the application's memory is still its own after the wrapper is freed
torch.cuda.synchronize()
print(f"{backend}: wrapper freed ({lib.vmmipc_strerror(rc).decode()}); the tensor still works")
sys.exit(0 if same else 1)
