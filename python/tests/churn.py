"""Views, windows, heaps and comms created and dropped in random orders at
random times on different ranks, with every view read back every round.

    mpiexec -n 4 python3 python/tests/churn.py [--rounds 200] [--seed S]

What every rank does in the same order (a generator seeded alike on every
rank): make windows (allgather_map, heap.alloc), close them collectively,
make and close heaps and comms, retire comms. What each rank does on its
own (a generator seeded per rank): make views of any window (Mapping
objects, DLPack capsules unconsumed and consumed, CUDA Array Interface
holders, host memoryviews on the stand-in), drop them (a consumed capsule's
deleter sometimes in another thread, racing the next collective call), and
drop windows and heaps, leaving them to the garbage collector.

Each window's bytes are unique (its serial number and the rank), written
once, and every live view is read back every round. Counted:
  aliased   reads that found another window's bytes
  unmapped  reads that failed (on the stand-in a read of unmapped memory
            would crash the process: the test must not crash)
  aborts    comms found broken or aborted, calls failing with ABORTED or
            PEER, collectives that waited out half the timeout
  wrong     close() outcomes other than the expected one (BUSY exactly
            when some rank holds a view of the window)
The last line is `churn: seed=S rounds=R ranks=N aliased=A unmapped=U
aborts=G wrong=W ...`; the exit status is 0 only when all four are 0.
"""
import argparse
import ctypes
import gc
import os
import random
import shlex
import sys
import threading
import time
import warnings

from mpi4py import MPI

import vmmipc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import capsule_tensor, consume, read, write  # noqa: E402

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
_node = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
vmmipc.set_device(_node.Get_rank() % vmmipc.device_count())
_node.Free()
STANDIN = "standin" in os.environ.get("VMMIPC_CUDA_DRIVER", "")
TIMEOUT_MS = 30000
N = 64                                       # bytes of each rank's slice that are checked


def stamp(serial, rank):
    """The N bytes that only window `serial`, rank `rank` holds."""
    return bytes(((serial * 131 + rank * 17 + i * 7) ^ (serial >> 3)) % 256 for i in range(N))


class Held:
    """One window as this rank holds it."""

    def __init__(self, serial, comm_id, win, buf):
        self.serial, self.comm_id, self.win, self.buf = serial, comm_id, win, buf


class Run:
    def __init__(self, seed, rounds):
        self.seed, self.rounds = seed, rounds
        self.shared = random.Random(seed)                  # alike on every rank
        self.local = random.Random(seed * 7919 + RANK + 1)  # this rank's own
        self.counts = dict(aliased=0, unmapped=0, aborts=0, wrong=0)
        self.stats = dict(windows=0, closes=0, refused=0, dropped=0, views=0, comms=0, heaps=0, thread_deleters=0)
        self.comms = {}        # comm id -> vmmipc.Comm (live: collectives go on)
        self.heaps = {}        # comm id -> vmmipc.Heap (live: allocations go on)
        self.held = {}         # serial -> Held (windows this rank still holds)
        self.views = []        # (kind, obj, serial, rank)
        self.threads = []      # (thread, serial): deleters running in other threads
        self.next_serial = 0
        self.next_comm = 0
        self.racing = set()    # windows with a deleter running in another thread, on some rank

    # ---- helpers ----------------------------------------------------------
    def fail(self, what, detail):
        self.counts[what] += 1
        if self.counts[what] <= 5:
            print(f"churn: rank {RANK}: {what}: {detail}", file=sys.stderr, flush=True)

    def collective(self, fn):
        """Runs a collective call: it must end well within the timeout, never with ABORTED or PEER."""
        t0 = time.monotonic()
        try:
            return fn()
        except vmmipc.Error as e:
            if e.code in (vmmipc.Result.ABORTED, vmmipc.Result.PEER, vmmipc.Result.TIMEOUT):
                self.fail("aborts", f"{e.code.name}: {e}")
            raise
        finally:
            if time.monotonic() - t0 > TIMEOUT_MS / 2000:
                self.fail("aborts", f"a collective took {time.monotonic() - t0:.1f} s")

    def new_comm(self):
        cid = self.next_comm
        self.next_comm += 1
        self.comms[cid] = self.collective(lambda: vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS))
        self.stats["comms"] += 1

    # ---- what each rank does on its own ----------------------------------
    def make_view(self):
        if not self.held:
            return
        h = self.held[self.local.choice(sorted(self.held))]
        r = self.local.randrange(SIZE)
        if h.win.query(r)[1] < N:
            return
        m = h.win.mapping(r)
        kind = self.local.choice(["mapping", "capsule", "consumed", "cai"] + (["memoryview"] if STANDIN else []))
        if kind == "mapping":
            obj = m
        elif kind == "capsule":
            obj = m.__dlpack__(max_version=(1, 0)) if self.local.random() < 0.5 else m.__dlpack__()
        elif kind == "consumed":
            obj = consume(m.__dlpack__(max_version=(1, 0)))
        elif kind == "cai":
            obj = {"cai": m.__cuda_array_interface__, "owner": m}
        else:
            obj = memoryview(m)
        self.views.append((kind, obj, h.serial, r))
        self.stats["views"] += 1

    def drop_view(self):
        if not self.views:
            return
        kind, obj, serial, _ = self.views.pop(self.local.randrange(len(self.views)))
        if kind == "consumed":
            if self.local.random() < 0.5:           # the consumer frees it in another thread,
                t = threading.Thread(target=obj.deleter, args=(ctypes.pointer(obj),))
                t.start()                           # racing what the main thread does next
                self.threads.append((t, serial))
                self.stats["thread_deleters"] += 1
            else:
                obj.deleter(ctypes.pointer(obj))
        elif kind == "memoryview":
            obj.release()

    def drop_window(self):
        """Left to the garbage collector: released, freed in step once every rank dropped it."""
        if not self.held:
            return
        serial = self.local.choice(sorted(self.held))
        h = self.held.pop(serial)
        h.win = h.buf = None
        self.stats["dropped"] += 1

    def local_step(self):
        for _ in range(self.local.randrange(4)):
            self.local.choice([self.make_view, self.make_view, self.drop_view, self.drop_view,
                               self.drop_window])()
        if self.local.random() < 0.3:
            gc.collect()

    def read_views(self):
        for kind, obj, serial, r in self.views:
            try:
                if kind == "mapping":
                    got = read(obj.ptr, N)
                elif kind == "capsule":
                    got = read(capsule_tensor(obj).dl_tensor.data, N)
                elif kind == "consumed":
                    got = read(obj.dl_tensor.data, N)
                elif kind == "cai":
                    got = read(obj["cai"]["data"][0], N)
                else:
                    got = obj[:N].tobytes()       # a host read: unmapped memory would crash here
            except vmmipc.Error as e:
                self.fail("unmapped", f"view of window {serial}, rank {r} ({kind}): {e}")
                continue
            if got != stamp(serial, r):
                self.fail("aliased", f"view of window {serial}, rank {r} ({kind}) reads other bytes")

    # ---- what every rank does alike ----------------------------------------
    def gather_state(self):
        """Which windows every rank holds, how many views of each, and which
        have a deleter running in another thread (plain MPI)."""
        mine = {s: 0 for s in self.held}
        for _, _, serial, _ in self.views:
            mine[serial] = mine.get(serial, 0) + 1
        racing = sorted({s for t, s in self.threads if t.is_alive()})
        everyone = WORLD.allgather((sorted(self.held), mine, racing))
        held_by_all = set.intersection(*(set(h) for h, _, _ in everyone))
        views, self.racing = {}, set()
        for _, v, r in everyone:
            self.racing.update(r)
            for s, n in v.items():
                views[s] = views.get(s, 0) + n
        return held_by_all, views

    def shared_step(self):
        held_by_all, views = self.gather_state()
        live = sorted(self.comms)
        op = self.shared.choices(["window", "close", "heap", "comm"], weights=[5, 4, 1, 1])[0]
        if not live:
            op = "comm"
        if op == "window":
            cid = self.shared.choice(live)
            self.make_window(cid)
        elif op == "close":
            ours = [s for s in sorted(held_by_all) if self.held[s].comm_id in self.comms]
            if ours:
                self.close_window(self.shared.choice(ours), views)
        elif op == "heap":
            cid = self.shared.choice(live)
            if cid in self.heaps:
                heap = self.heaps.pop(cid)
                if self.shared.random() < 0.5:
                    # Closed collectively: BUSY exactly while its windows are open somewhere.
                    try:
                        self.collective(heap.close)
                    except vmmipc.Error as e:
                        if e.code != vmmipc.Result.BUSY:
                            self.fail("wrong", f"heap close: {e}")
                # else dropped: released, destroyed once every rank let it and its windows go
            else:
                self.heaps[cid] = self.collective(lambda: self.comms[cid].heap(reserve=64 << 20, grow=2 << 20))
                self.stats["heaps"] += 1
        else:
            if not live or (len(live) < 2 and self.shared.random() < 0.7):
                self.new_comm()
            else:
                cid = self.shared.choice(live)
                comm = self.comms.pop(cid)
                self.heaps.pop(cid, None)
                if self.shared.random() < 0.6:
                    # Closed collectively: it frees what every rank released; BUSY while
                    # something of it is still held somewhere.
                    gc.collect()
                    try:
                        self.collective(comm.close)
                    except vmmipc.Error as e:
                        if e.code != vmmipc.Result.BUSY:
                            self.fail("wrong", f"comm close: {e}")
                # else retired: no more collectives on it; dropped, kept to exit

    def make_window(self, cid):
        comm = self.comms[cid]
        serial = self.next_serial
        self.next_serial += 1
        heap = self.heaps.get(cid)
        if heap is not None and self.shared.random() < 0.6:
            size = self.local.choice([0, N, 4096, 70000])
            win = self.collective(lambda: heap.alloc(size))
            buf = None
        else:
            buf = None if self.local.random() < 0.15 else vmmipc.alloc(self.local.choice([4096, 1 << 20]))
            win = self.collective(lambda: comm.allgather_map(buf))
        p, n = win.query(RANK)
        if n >= N:
            write(p, stamp(serial, RANK))
        win.barrier()                                 # every rank's stamp is there
        self.held[serial] = Held(serial, cid, win, buf)
        self.stats["windows"] += 1

    def close_window(self, serial, views):
        h = self.held[serial]
        expect_busy = views.get(serial, 0) > 0
        try:
            self.collective(h.win.close)
            got_busy = False
        except vmmipc.Error as e:
            got_busy = e.code == vmmipc.Result.BUSY
            if not got_busy:
                self.fail("wrong", f"close of window {serial}: {e}")
                return
        # A deleter still running elsewhere may or may not have unpinned in time: either is right.
        if got_busy != expect_busy and not (serial in self.racing and not expect_busy):
            self.fail("wrong", f"close of window {serial}: {'BUSY' if got_busy else 'freed'}, "
                               f"with {views.get(serial, 0)} views on the ranks")
        if not got_busy:
            if h.buf is not None:
                h.buf.close()
            del self.held[serial]
            self.stats["closes"] += 1
        else:
            self.stats["refused"] += 1

    def check_comms(self):
        for cid, comm in self.comms.items():
            st = comm.stats()
            if st["broken"]:
                self.fail("aborts", f"comm {cid} is broken")

    def run(self):
        self.new_comm()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)   # the collector's warnings are expected here
            for _ in range(self.rounds):
                self.local_step()
                self.shared_step()
                self.read_views()
                self.check_comms()
                for t, _ in self.threads:
                    t.join(60)
                self.threads.clear()
            # The end: every view and window dropped, then every live comm closed.
            while self.views:
                self.drop_view()
            for t, _ in self.threads:
                t.join(60)
            self.held.clear()
            self.heaps.clear()
            gc.collect()
            for cid in sorted(self.comms):
                try:
                    self.collective(self.comms[cid].close)
                except vmmipc.Error as e:
                    self.fail("wrong", f"final close of comm {cid}: {e}")
            self.comms.clear()
            gc.collect()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None, help="default: a random seed, printed")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    seed = WORLD.bcast(seed, root=0)
    if RANK == 0:
        layout = os.environ.get("VMMIPC_TEST_LAYOUT")   # virtual nodes (mpi_tests/harness/vnode.sh)
        # The environment ctest gave the ranks (the stand-in driver, the module's path), so that the line
        # replays the same run; the launcher's own flags (--oversubscribe) are not seen from here, and
        # vnode.sh sets each rank's VMMIPC_NODE_ID from the layout.
        own = {"VMMIPC_TEST_LAYOUT", "VMMIPC_TEST_RANKS_PER_NODE", "VMMIPC_NODE_ID"}
        env = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in sorted(os.environ)
                       if k == "PYTHONPATH" or (k.startswith("VMMIPC_") and k not in own))
        how = f"VMMIPC_TEST_LAYOUT={layout} mpiexec -n {SIZE} mpi_tests/harness/vnode.sh" if layout else f"mpiexec -n {SIZE}"
        how = f"{env} {how}" if env else how
        print(f"churn: seed={seed} (replay: {how} python3 {sys.argv[0]} --rounds {a.rounds} --seed {seed})",
              flush=True)
    run = Run(seed, a.rounds)
    t0 = time.monotonic()
    run.run()
    counts = {k: WORLD.allreduce(v, op=MPI.SUM) for k, v in run.counts.items()}
    stats = {k: WORLD.allreduce(v, op=MPI.SUM) for k, v in run.stats.items()}
    if RANK == 0:
        print(f"churn: seed={seed} rounds={a.rounds} ranks={SIZE} aliased={counts['aliased']} "
              f"unmapped={counts['unmapped']} aborts={counts['aborts']} wrong={counts['wrong']} "
              + " ".join(f"{k}={v}" for k, v in stats.items()) + f" seconds={time.monotonic() - t0:.1f}",
              flush=True)
    return 0 if not any(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
