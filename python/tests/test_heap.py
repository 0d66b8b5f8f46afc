"""vmmipc.Heap (Comm.heap): windows carved from the symmetric heap. Needs
the heap implementation (vmmipc_heap_*)."""
import gc
import warnings

import pytest

import vmmipc
from conftest import NODE, NXT, PREV, RANK, SIZE, TIMEOUT_MS, WORLD, all_true, pattern, read, write


def test_heap_windows_data_and_sizes(comm):
    with comm.heap(reserve=64 << 20, grow=4 << 20) as heap:
        # Sizes differ per rank; the last rank allocates nothing.
        n = 0 if RANK == SIZE - 1 else (RANK + 1) * 4096
        with heap.alloc(n) as win:
            if n:
                write(win.query(RANK)[0], pattern(RANK, n))
            win.barrier()
            ok = True
            for r in range(SIZE):
                p, size = win.query(r)
                want = 0 if r == SIZE - 1 or r not in NODE else (r + 1) * 4096
                ok &= size == want and (want == 0 or read(p, want) == pattern(r, want))
            assert all_true(ok)
            # Write into the next rank's slice through a typed view; it reads it.
            if win.query(NXT)[1]:
                m = win.mapping(NXT, dtype="uint32", shape=4)
                write(m.ptr, bytes([RANK + 1]) * 16)
                del m                   # a live view would refuse the close
            win.barrier()
            WORLD.Barrier()
            if n:  # our slice was written by the previous rank
                assert read(win.query(RANK)[0], 16) == bytes([PREV + 1]) * 16
        st = heap.stats()
        assert st["live_windows"] == 0 and st["in_use"] == 0 and st["high_water"] >= n
        assert set(st) >= {"reserved", "mapped", "in_use", "high_water", "live_windows", "growth_steps", "grow_s"}


def test_heap_offsets_are_symmetric(comm):
    with comm.heap() as heap:
        a = heap.alloc(8192)
        b = heap.alloc(8192)
        ok = True
        for r in NODE:
            ok &= b.query(r)[0] - a.query(r)[0] == b.query(RANK)[0] - a.query(RANK)[0]
        assert all_true(ok)
        b.close()
        a.close()


def test_heap_close_busy_and_lifetimes(comm):
    import sys
    heap = comm.heap()
    base = sys.getrefcount(heap)
    win = heap.alloc(4096)
    assert sys.getrefcount(heap) == base + 1     # the window keeps the heap alive
    with pytest.raises(vmmipc.Error) as e:
        heap.close()                             # refused on every rank while a heap window is open
    assert e.value.code == vmmipc.Result.BUSY
    m = win.mapping(RANK)
    with pytest.raises(vmmipc.Error) as e:
        win.close()                              # refused on every rank while a view lives
    assert e.value.code == vmmipc.Result.BUSY and not win.closed
    del m
    win.close()
    assert sys.getrefcount(heap) == base
    heap.close()
    heap.close()


def test_heap_bad_input(comm):
    with pytest.raises(ValueError):
        comm.heap(reserve=-1)
    with pytest.raises(TypeError):
        comm.heap(grow="1M")
    with comm.heap() as heap:
        with pytest.raises(ValueError):
            heap.alloc(-1)
        with pytest.raises(TypeError):
            heap.alloc(None)
        heap.close()
        with pytest.raises(vmmipc.Error):
            heap.alloc(10)
    heap.close()


def test_heap_garbage_collected_is_released_not_aborted():
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    heap = c.heap()
    win = heap.alloc(4096)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del heap, win                          # the window first (it holds the heap), then the heap
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) and "Heap" in str(x.message) for x in w)
    assert any(issubclass(x.category, ResourceWarning) and "Window" in str(x.message) for x in w)
    st = c.stats()
    assert not st["broken"] and st["released"] == 2
    # Collectives after every rank released both free them in step: the
    # window at the first, the heap once its window is gone.
    for _ in range(3):
        with c.allgather_map(None):
            pass
        if c.stats()["released"] == 0:
            break
    st = c.stats()
    assert not st["broken"] and st["released"] == 0 and st["released_freed"] == 2
    c.close()                                  # nothing open: the close succeeds everywhere
    WORLD.Barrier()


def test_heap_torch_kernel_writes_peer_slice(comm):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    n = 4096
    with comm.heap() as heap, heap.alloc(n * 4) as win:
        stream = torch.cuda.current_stream()
        torch.from_dlpack(win.mapping(NXT, dtype=torch.float32)).fill_(float(RANK))  # a kernel, into the peer
        win.barrier(stream=stream)
        mine = torch.from_dlpack(win.mapping(RANK, dtype=torch.float32))
        ok = bool(torch.all(mine == float(PREV)).item())
        win.barrier(stream=stream)
        torch.cuda.synchronize()
        del mine
        assert all_true(ok)
