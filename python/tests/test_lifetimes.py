"""Lifetimes: views outliving close, garbage collection of open objects,
double close, and interpreter exit with objects left open."""
import gc
import os
import subprocess
import sys
import time
import warnings

import pytest

import vmmipc
from conftest import NXT, RANK, SIZE, STANDIN, TIMEOUT_MS, WORLD, all_true


def test_close_refused_while_a_view_lives(comm):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    m = win.mapping(NXT, dtype="float32")
    assert win.views == 1
    with pytest.raises(vmmipc.Error) as e:
        win.close()                      # refused on every rank: the view keeps its memory
    assert e.value.code == vmmipc.Result.BUSY and "1 view(s)" in str(e.value)
    assert not win.closed and m.__dlpack_device__()[0] == vmmipc.kDLCUDA
    del m
    assert win.views == 0
    win.close()
    win.close()
    buf.close()


def test_view_keeps_window_alive(comm):
    buf = vmmipc.alloc(1 << 20)
    win = comm.allgather_map(buf)
    m = win.mapping(RANK)
    del win
    gc.collect()
    assert m.owner.query(RANK)[0] == buf.ptr   # still open: the view holds it
    assert m.__dlpack_device__()[0] == vmmipc.kDLCUDA
    w = m.owner
    del m
    w.close()
    buf.close()


def test_capsule_outlives_view_and_window(comm):
    win = comm.allgather_map(None)
    cap = win.mapping(RANK).__dlpack__()
    del win                              # the capsule holds the view, which holds the window
    gc.collect()
    assert comm.stats()["open_windows"] == 1
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del cap
        gc.collect()                     # now the window is garbage: released, never aborted
    assert any(issubclass(x.category, ResourceWarning) and "Window" in str(x.message) for x in w)
    st = comm.stats()
    assert not st["broken"] and st["open_windows"] == 1 and st["released"] + st["collected_waiting"] == 1
    # The fixture's close frees it in step (every rank released it) and destroys the comm.


def test_garbage_collected_window_is_released_not_aborted():
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    buf = vmmipc.alloc(1 << 20)
    win = c.allgather_map(buf)
    win.barrier()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del win
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) and "Window" in str(x.message) for x in w)
    # Nothing was aborted: the comm is sound, and the next collective frees
    # the window in step on every rank (every rank released it).
    assert not c.stats()["broken"]
    with c.allgather_map(None) as other:
        assert other.query(RANK) == (0, 0)
    st = c.stats()
    assert not st["broken"] and st["open_windows"] == 0 and st["released_freed"] == 1
    buf.close()                          # no window exposes it any more
    c.close()
    assert c.closed


def test_garbage_collected_comm_warns_and_is_kept():
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del c
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) and "Comm" in str(x.message) for x in w)
    # Not aborted: a comm made next works on every rank.
    with vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS) as c2, c2.allgather_map(None):
        pass
    WORLD.Barrier()


CHILD = r"""
import gc, sys
from mpi4py import MPI
import vmmipc
vmmipc.set_device(0)
comm = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=5000)
buf = vmmipc.alloc(1 << 20)
win = comm.allgather_map(buf)
view = win.mapping(0)
cap = view.__dlpack__()
import threading
started = threading.Event()
def blocked():
    started.set()
    try:
        win.wait_host(0, 1, timeout_ms=60000)   # nobody signals: blocked at exit
    except vmmipc.Error:
        pass
threading.Thread(target=blocked, daemon=True).start()
started.wait()
print("child: leaving with a comm, a window, a view, a capsule and a blocked thread", flush=True)
"""


CHILD_FINALIZED = r"""
from mpi4py import MPI
import vmmipc
vmmipc.set_device(0)
comm = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=5000)
win = comm.allgather_map(vmmipc.alloc(1 << 21))
heap = comm.heap()
MPI.Finalize()                      # by hand, with the window, heap and comm open
for what, call in (("trim", heap.trim), ("close", win.close)):
    try:
        call()
    except vmmipc.Error as e:
        print("child:", what, "after MPI_Finalize:", e.code.name, flush=True)
"""


def singleton_env():
    # A singleton, not a rank of this job: no launcher variables, except the
    # run-as-root permission that Open MPI's singleton start needs as root.
    # Its daemon launches nothing elsewhere: the "isolated" launcher, since
    # where no ssh exists the default one refuses to start under mpiexec.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_")) or k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    env["OMPI_MCA_plm"] = "isolated"
    return env


def require_singleton():
    """Skips (on every rank alike) where this machine cannot start a singleton
    MPI process at all: then the exit paths cannot be exercised here."""
    why = None
    if RANK == 0:
        p = subprocess.run([sys.executable, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"],
                           env=singleton_env(), capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            why = "a singleton MPI process cannot start here: " + (p.stderr.strip().splitlines() or ["?"])[-1][:200]
    why = WORLD.bcast(why, root=0)
    if why:
        pytest.skip(why)


def run_child(tmp_path, text, *flags, **env_extra):
    """Runs text as a singleton MPI process (not part of this job); (ok, detail) on rank 0."""
    script = tmp_path / "child.py"
    script.write_text(text)
    env = singleton_env()
    env.update(env_extra)
    p = subprocess.run([sys.executable, *flags, str(script)], env=env, capture_output=True, text=True, timeout=120)
    return p, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


def test_close_after_mpi_finalize_is_refused(tmp_path):
    require_singleton()
    ok, detail = True, None
    if RANK == 0:
        p, detail = run_child(tmp_path, CHILD_FINALIZED, "-W", "always::ResourceWarning")
        ok = (p.returncode == 0 and "close after MPI_Finalize: MPI" in p.stdout and
              "trim after MPI_Finalize: MPI" in p.stdout)
    assert all_true(ok), detail


def test_interpreter_exit_with_open_objects(tmp_path):
    require_singleton()
    # A singleton MPI process (not part of this job) leaves everything open:
    # the exit handler releases it before mpi4py finalizes MPI, with warnings.
    if RANK == 0:
        p, detail = run_child(tmp_path, CHILD, "-W", "always::ResourceWarning")
        ok = p.returncode == 0 and "still open at exit" in p.stderr and "child: leaving" in p.stdout
    else:
        ok, detail = True, None
    assert all_true(ok), detail


CHILD_HUNG = r"""
import atexit, ctypes, sys, time
T0 = time.monotonic()
# Where an exit's time goes, for the parent's message (atexit runs these
# last first): after mpi4py's MPI_Finalize, and after vmmipc's handler.
atexit.register(lambda: print("child: MPI finalized at %%.1f s" %% (time.monotonic() - T0), flush=True))
sys.path.insert(0, %r)
from mpi4py import MPI
atexit.register(lambda: print("child: vmmipc's exit handler done at %%.1f s" %% (time.monotonic() - T0), flush=True))
import vmmipc
from support import driver_fn
vmmipc.set_device(0)
comm = vmmipc.Comm(MPI.COMM_SELF, timeout_ms=2000)
buf = vmmipc.alloc(1 << 21)
win = comm.allgather_map(buf)
vmmipc.copy_to_device(buf.ptr, bytes(8))
win.signal(0, 1)                                 # the window hands out work: the legacy stream
wait = driver_fn("cuStreamWaitValue64", ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint)
assert wait(None, buf.ptr, 0xC0FFEE, 1) == 0     # CU_STREAM_WAIT_VALUE_EQ: nobody ever writes it
print("child: leaving with work that never ends", flush=True)
""" % os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(STANDIN and os.environ.get("VMMIPC_STANDIN_ASYNC") == "off",
                    reason="the stand-in runs stream work in the call: the child's wait would block there")
def test_interpreter_exit_frees_nothing_under_work_that_never_ends(tmp_path):
    require_singleton()
    # An unmap waits for the device work queued before it, without a bound.
    # The exit handler freed a window whose handed-out work never ends, and
    # hung in that unmap (the stand-in gives up after VMMIPC_STANDIN_WAIT_MS,
    # a GPU never). Now it waits half the comm's timeout (1 s here), then
    # frees nothing and says so; the process exit releases it.
    if RANK == 0:
        t0 = time.monotonic()
        p, detail = run_child(tmp_path, CHILD_HUNG, "-W", "always::ResourceWarning", VMMIPC_STANDIN_WAIT_MS="60000")
        took = time.monotonic() - t0
        ok = (p.returncode == 0 and "child: leaving" in p.stdout and took < 45 and
              "did not finish within half the comm's timeout: nothing is freed" in p.stderr and
              "left to the process exit" in p.stderr)
        detail = (round(took, 1),) + detail
    else:
        ok, detail = True, None
    assert all_true(ok), detail


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_no_fd_left_behind():
    # A comm's life (mapping, exported views, a failing call) leaves no fd
    # open once it is closed (its mapping cache goes with it).
    def cycle():
        comm = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
        buf = vmmipc.alloc(1 << 21)
        with comm.allgather_map(buf) as win:
            caps = [win.mapping(r).__dlpack__(max_version=(1, 0)) for r in range(SIZE)]
            del caps
            win.barrier()
        m = comm.bcast_map(buf if RANK == 0 else None, 0)
        if m is not None:
            m.close()
        with pytest.raises(TypeError):
            comm.allgather_map(0)          # joins the call, which fails everywhere
        buf.close()
        comm.close()

    cycle()                                 # first use: whatever the driver keeps
    gc.collect()
    before = open_fds()
    for _ in range(3):
        cycle()
    gc.collect()
    after = open_fds()
    assert all_true(after <= before), (before, after)
