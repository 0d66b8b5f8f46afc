"""Module-level names: version, Result, Error, set_device, device_count."""
import ctypes

import pytest

import vmmipc
from conftest import STANDIN, WORLD


def test_version():
    assert vmmipc.version == vmmipc.__version__
    parts = vmmipc.version.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)


def test_result_numbers():
    R = vmmipc.Result
    assert issubclass(R, int)
    assert (R.SUCCESS, R.INVALID_ARG, R.INVALID_DESC, R.UNSUPPORTED, R.CUDA, R.MPI, R.SYSTEM) == (0, 1, 2, 3, 4, 5, 6)
    assert (R.PEER, R.TIMEOUT, R.NOT_EXPORTABLE, R.NO_MEMORY, R.BUSY, R.RESOURCE, R.ABORTED) == tuple(range(7, 14))
    assert R(11) is R.BUSY


def test_error_is_exception_with_code_and_rank():
    assert issubclass(vmmipc.Error, Exception)
    with pytest.raises(vmmipc.Error) as e:
        vmmipc.set_device(1 << 20)   # no such device
    assert isinstance(e.value.code, vmmipc.Result)
    assert e.value.code == vmmipc.Result.INVALID_ARG
    assert e.value.rank is None      # a local call blames no rank
    assert str(e.value)              # the library's message


def test_set_device_bad_input():
    with pytest.raises(ValueError):
        vmmipc.set_device(-1)
    with pytest.raises(TypeError):
        vmmipc.set_device("0")
    with pytest.raises(TypeError):
        vmmipc.set_device(True)


def test_device_count_and_current():
    n = vmmipc.device_count()
    assert n >= 1
    assert vmmipc.current_device() in range(n)


def test_docstrings():
    for obj in (vmmipc, vmmipc.Comm, vmmipc.Buffer, vmmipc.Window, vmmipc.Heap, vmmipc.Mapping, vmmipc.Error,
                vmmipc.Result, vmmipc.alloc, vmmipc.wrap, vmmipc.set_device, vmmipc.Comm.allgather_map,
                vmmipc.Window.mapping, vmmipc.Window.wait_host, vmmipc.Heap.alloc, vmmipc.Mapping.__dlpack__):
        assert obj.__doc__ and len(obj.__doc__) > 20, obj


def test_not_constructible():
    for cls in (vmmipc.Buffer, vmmipc.Window, vmmipc.Heap, vmmipc.Mapping):
        with pytest.raises(TypeError):
            cls()


def test_copy_helpers_bad_input():
    with pytest.raises(TypeError):
        vmmipc.copy_from_device("x", 1)
    with pytest.raises(ValueError):
        vmmipc.copy_from_device(0, -1)
    WORLD.Barrier()


@pytest.mark.skipif(not STANDIN, reason="reads device memory through a host pointer: stand-in only")
def test_copy_to_device_is_done_when_it_returns():
    # cuMemcpyHtoD from pageable memory may return before the data lands;
    # copy_to_device promises more. On the stand-in with late stream work
    # (VMMIPC_STANDIN_ASYNC=late) the bytes would still be missing here.
    buf = vmmipc.alloc(1 << 20)
    data = bytes(range(256)) * 4
    vmmipc.copy_to_device(buf.ptr, data)
    assert ctypes.string_at(buf.ptr, len(data)) == data
    buf.close()
    WORLD.Barrier()


def test_stubs_match_the_module():
    # Every function, constant, class and member in the type stubs exists at run time.
    import ast
    import pathlib
    tree = ast.parse((pathlib.Path(vmmipc.__file__).parent / "__init__.pyi").read_text())

    def declared(node):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return [node.name]
        if isinstance(node, ast.AnnAssign):
            return [node.target.id]
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets]
        return []

    for node in tree.body:
        if isinstance(node, ast.Assign):
            continue                                  # type aliases of the stubs
        for name in declared(node):
            if name.startswith("_"):
                continue                              # the stubs' own protocols
            assert hasattr(vmmipc, name), name
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    for member in declared(item):
                        assert hasattr(getattr(vmmipc, name), member), (name, member)
