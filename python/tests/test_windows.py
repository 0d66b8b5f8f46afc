"""Comm.allgather_map, bcast_map and scatter_map: data both ways, per-rank
sizes, ranks with nothing, read-only access, argument errors."""
import pytest

import vmmipc
from conftest import NODE, NXT, PREV, RANK, SIZE, WORLD, all_true, pattern, read, write


def test_allgather_data_both_ways(comm):
    n = 4096
    with vmmipc.alloc(n) as buf:
        write(buf.ptr, pattern(RANK, n))
        with comm.allgather_map(buf) as win:
            win.barrier()
            ok = True
            for r in range(SIZE):
                p, size = win.query(r)
                if r in NODE:
                    ok &= size >= n and read(p, n) == pattern(r, n)
                else:
                    ok &= (p, size) == (0, 0)        # windows map the node's ranks only
            assert all_true(ok)
            # Write into the next rank's buffer through its mapping; it reads it.
            p, _ = win.query(NXT)
            write(p + 100, bytes([0xA0 + RANK]) * 10)
            win.barrier()
            WORLD.Barrier()
            assert all_true(read(buf.ptr + 100, 10) == bytes([0xA0 + PREV]) * 10)
            assert win.query(RANK)[0] == buf.ptr
            assert (win.rank, win.size, win.comm) == (RANK, SIZE, comm)


def test_per_rank_sizes_and_ranks_with_nothing(comm):
    # Odd ranks give nothing; even ranks give (rank + 1) MiB.
    buf = vmmipc.alloc((RANK + 1) << 20) if RANK % 2 == 0 else None
    if buf:
        write(buf.ptr, pattern(RANK, 256))
    with comm.allgather_map(buf) as win:
        ok = True
        for r in range(SIZE):
            p, size = win.query(r)
            if r % 2 or r not in NODE:
                ok &= (p, size) == (0, 0)
                m = win.mapping(r)
                ok &= m.nbytes == 0 and m.shape == (0,) and m.__cuda_array_interface__["shape"] == (0,)
                del m                   # a live view would refuse the close
            else:
                ok &= size == (r + 1) << 20 and read(p, 256) == pattern(r, 256)
                ok &= win.mapping(r).nbytes == size
        assert all_true(ok)
    if buf:
        buf.close()


def test_query_errors(comm):
    with comm.allgather_map(None) as win:
        with pytest.raises(ValueError):
            win.query(SIZE)
        with pytest.raises(ValueError):
            win.query(-1)
        with pytest.raises(TypeError):
            win.query("0")
        with pytest.raises(ValueError):
            win.mapping(SIZE)
    with pytest.raises(vmmipc.Error) as e:
        win.query(0)
    assert e.value.code == vmmipc.Result.INVALID_ARG
    win.close()   # twice: harmless


def test_buffer_busy_while_exposed(comm):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    with pytest.raises(vmmipc.Error):
        buf.close()              # an open window exposes it
    assert not buf.closed
    win.close()
    buf.close()


def test_read_only_access(comm):
    with vmmipc.alloc(1 << 20) as buf:
        write(buf.ptr, pattern(RANK, 64))
        with comm.allgather_map(buf, access="r") as win:
            m = win.mapping(NXT)
            own = win.mapping(RANK)
            ok = m.readonly == (NXT != RANK) and not own.readonly
            ok &= m.__cuda_array_interface__["data"][1] == (NXT != RANK)
            ok &= read(m.ptr, 64) == pattern(NXT, 64)
            assert all_true(ok)
            if NXT != RANK:
                with pytest.raises(BufferError):
                    m.__dlpack__()                  # the classic capsule cannot say read-only
                cap = m.__dlpack__(max_version=(1, 0))
                from conftest import capsule_tensor
                assert capsule_tensor(cap).flags & 1   # DLPACK_FLAG_BITMASK_READ_ONLY
                del cap
            del m, own                  # live views would refuse the close
            win.barrier()


def test_bcast_map(comm):
    root = SIZE - 1
    buf = vmmipc.alloc(1 << 20) if RANK == root else None
    if buf:
        write(buf.ptr, pattern(root, 512))
    WORLD.Barrier()
    m = comm.bcast_map(buf, root)
    if RANK == root or root not in NODE:
        assert m is None                # the root, and the ranks off its node, get nothing
    else:
        assert isinstance(m, vmmipc.Buffer) and m.size == 1 << 20
        assert read(m.ptr, 512) == pattern(root, 512)
        v = m.mapping()
        assert v.nbytes == m.size
        with pytest.raises(vmmipc.Error) as e:
            m.close()                   # a view of it lives
        assert e.value.code == vmmipc.Result.BUSY and not m.closed
        del v
        m.close()
    WORLD.Barrier()
    if buf:
        buf.close()


def test_scatter_map_with_empty_entries(comm):
    root = 0
    bufs = None
    if RANK == root:
        # Entry r for rank r; odd ranks get nothing.
        bufs = [vmmipc.alloc(1 << 20) if r % 2 == 0 else None for r in range(SIZE)]
        for r, b in enumerate(bufs):
            if b:
                write(b.ptr, pattern(r, 128))
    WORLD.Barrier()
    m = comm.scatter_map(bufs, root, access="r")
    if RANK == root or RANK % 2 or root not in NODE:
        ok = m is None
    else:
        ok = m.readonly and read(m.ptr, 128) == pattern(RANK, 128)
        m.close()
    assert all_true(ok)
    if bufs:
        for b in bufs:
            if b:
                b.close()


def test_scatter_map_bad_entries_at_root(comm):
    # The root refuses its bad list; the peers fail with it, naming the root.
    if RANK == 0:
        with pytest.raises(TypeError):
            comm.scatter_map([b"x"] * SIZE, 0)
        with pytest.raises(ValueError):
            comm.scatter_map([None] * (SIZE + 1), 0)
    else:
        for _ in range(2):
            with pytest.raises(vmmipc.Error) as e:
                comm.scatter_map(None, 0)
            assert e.value.code == vmmipc.Result.INVALID_ARG


def test_window_keeps_comm_and_buffer_alive():
    import sys
    c = vmmipc.Comm(WORLD)
    buf = vmmipc.alloc(1 << 20)
    rc_c, rc_b = sys.getrefcount(c), sys.getrefcount(buf)
    win = c.allgather_map(buf)
    assert sys.getrefcount(c) == rc_c + 1 and sys.getrefcount(buf) == rc_b + 1
    del c, buf
    assert win.query(RANK)[1] == 1 << 20
    comm = win.comm
    win.close()
    comm.close()
