#!/usr/bin/env python3
"""Issue 30's report from a results folder shaped as scripts/gpu/wave4.sh
leaves it: files in the JSON shapes of common/devbench.cuh and of
vmmipc_setup --heap-json, with chosen medians, so that each goal's ratio
and verdict can be asserted. Run by ctest (bench.report_issue30)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from reporting import check, data, goals, issue30  # noqa: E402

US = 1e-6
SIZES = [8 << i for i in range(14)]


def row(name, median_us, path="device", size=None, reps=5, data_="unchecked", mismatches=0):
    r = {"name": name, "what": "test", "path": path, "iters": 100, "reps": reps,
         "stats": {k: median_us * US for k in ("median", "p10", "p90", "min", "max")},
         "samples": [median_us * US] * reps, "data": data_, "mismatches": mismatches}
    if size is not None:
        r["bytes"] = size
    return r


def devfile(bench, ranks, rows, mps=True, sync=None, config=None):
    return {"benchmark": bench, "argv": [bench], "ranks": ranks, "gpus": 1,
            "devices": [{"rank": i, "name": "Test GPU", "uuid": "GPU-0"} for i in range(ranks)],
            "driver": {"version": 13000}, "mps": mps, "mps_active_thread_percentage": str(100 // ranks) if mps else None,
            "vmmipc_sync": sync, "config": config or {}, "unit": "seconds per operation", "rows": rows}


def heapfile(ranks, both_us, floor_us, calls=(10e-3, 400e-3), total=(30e-3, 600e-3), windows=1000):
    return {"bench": "vmmipc_setup --heap", "benchmark": "vmmipc_heap", "ranks": ranks, "gpus": 1, "mps": True,
            "rows": [{"row": "mpi_floor (allgather 8B+allreduce 4B)", "median": floor_us * US, "reps": 50},
                     {"row": "heap_alloc 2 MiB", "median": both_us * 0.7 * US, "reps": 50},
                     {"row": "heap_alloc + win_free 2 MiB", "median": both_us * US, "reps": 50}],
            "mixed_workload": {"windows": windows,
                               "heap": {"total": total[0], "window_calls": calls[0], "data_ok": True},
                               "legacy_ipc": {"total": total[1], "window_calls": calls[1], "data_ok": True}}}


def run_files(signal_us=0.25, bad_allreduce=False):
    dev2 = [row("dev_barrier", 1.0), row("dev_signal_wait", signal_us, size=0),
            row("dev_put_signal_wait", 0.35, size=8, data_="ok"),
            row("host_barrier", 2.0, "memops"), row("host_signal_wait", 2.2, "memops", 0)]
    dev2 += [row("allreduce", 3.0, "vmmipc_oneshot", z, data_="MISMATCH" if bad_allreduce and z == 64 else "ok",
                 mismatches=3 if bad_allreduce and z == 64 else 0) for z in SIZES]
    dev2 += [row("allreduce_graph", 4.0 if z <= 16384 else 6.0, "vmmipc_oneshot", z, data_="ok") for z in SIZES]
    nv2 = [row("nvshmem.malloc_2m", 20, "host", 2 << 20), row("nvshmem.malloc_free_2m", 27.8, "host", 2 << 20),
           row("nvshmem.barrier_all_block", 2.52), row("nvshmem.signal_op", 0.30, size=0),
           row("nvshmem.put_signal", 0.40, size=8, data_="ok"), row("nvshmem.barrier_all_on_stream", 4.59, "stream")]
    nv2 += [row("nvshmem.sum_reduce_on_stream", 10.0, "stream", z, data_="ok") for z in SIZES]
    floor2 = [row("floor.sys.release_acquire", 0.77, "kernel", 0), row("floor.sys.release_acquire", 0.80, "kernel", 8,
                                                                        data_="ok"),
              row("floor.gpu.release_acquire", 0.50, "kernel", 0),
              row("floor.volatile.none", 0.28, "kernel", 8, data_="MISMATCH", mismatches=4)]
    return {
        "device_np2_memops.json": devfile("vmmipc_device_bench", 2, dev2, sync="memops",
                                          config={"barrier_shape": "flat", "dev_scope_setting": "auto",
                                                  "dev_scope": "gpu"}),
        # Variants (wave4.sh): a barrier shape, and system scope; they must not feed the goals. Named so that they
        # sort before the defaults.
        "device_np2_a_gather.json": devfile("vmmipc_device_bench", 2, [row("host_barrier", 1.0, "memops")],
                                            sync="memops", config={"barrier_shape": "gather"}),
        "device_np2_a_sys.json": devfile("vmmipc_device_bench", 2, [row("dev_signal_wait", 9.0, size=0),
                                                                    row("dev_barrier", 9.0)],
                                         sync="memops", config={"dev_scope_setting": "sys", "dev_scope": "sys"}),
        "device_np2_kernel.json": devfile("vmmipc_device_bench", 2, [row("host_barrier", 3.0, "kernel"),
                                                                     row("host_signal_wait", 3.5, "kernel", 0)],
                                          sync="kernel"),
        "device_np8_memops.json": devfile("vmmipc_device_bench", 8, [row("dev_barrier", 1.2)], sync="memops"),
        "device_nomps_np2_memops.json": devfile("vmmipc_device_bench", 2, [row("dev_barrier", 4400.0),
                                                                           row("dev_signal_wait", 2200.0, size=0)],
                                                mps=False, sync="memops"),
        "nvshmem_np2.json": devfile("nvshmem_bench", 2, nv2),
        "nvshmem_np8.json": {"benchmark": "nvshmem_bench", "ranks": 8, "mps": True,
                             "skipped": "nvshmem exited 1: NVSHMEM refused: several PEs per GPU"},
        "floor_np2.json": devfile("vmmipc_floor_bench", 2, floor2),
        "heap_np2.json": heapfile(2, 5.0, 2.6, calls=(50e-3, 60e-3), windows=20),  # the short launch of the 2 MiB rows
        "heap_workload_np2.json": heapfile(2, 5.0, 2.6),
        "heap_np8.json": heapfile(8, 12.0, 8.5),
    }


def write(folder, files):
    for name, d in files.items():
        with open(os.path.join(folder, name), "w") as f:
            json.dump(d, f)


def by_id(rows):
    return {g["id"]: g for g in rows}


class Issue30(unittest.TestCase):
    def goals_of(self, files):
        with tempfile.TemporaryDirectory() as t:
            write(t, files)
            return by_id(goals.goal_rows(data.pick(data.load([t]))))

    def test_verdicts_follow_the_medians(self):
        g = self.goals_of(run_files())
        self.assertEqual(g["i30.signal.2"]["verdict"], "PASS")
        self.assertIn("0.83x", g["i30.signal.2"]["measured"])           # 0.25 / 0.30
        self.assertIn("gpu.release_acquire 0.50", g["i30.signal.2"]["measured"])
        self.assertEqual(g["i30.barrier.2"]["verdict"], "PASS")
        self.assertIn("2.52x", g["i30.barrier.2"]["measured"])          # 2.52 / 1.0
        # The faster path (memops 2.0 us) against 4.59 us; both paths shown.
        self.assertEqual(g["i30.host_barrier.2"]["verdict"], "PASS")
        self.assertIn("0.44x", g["i30.host_barrier.2"]["measured"])
        self.assertIn("kernel 3.00", g["i30.host_barrier.2"]["measured"])
        self.assertEqual(g["i30.host_signal.2"]["verdict"], "PASS")     # 2.2 / 4.59 = 0.48
        self.assertEqual(g["i30.heap.2"]["verdict"], "PASS")            # 5 / 27.8 = 0.18
        self.assertIn("1.9x the floor", g["i30.heap.2"]["measured"])
        self.assertEqual(g["i30.allreduce.2"]["verdict"], "PASS")       # 10 / 3 at every size
        self.assertIn("3.33x", g["i30.allreduce.2"]["measured"])
        self.assertEqual(g["i30.graph.2"]["verdict"], "PASS")           # 4 us up to 16 KiB; 64 KiB not in the goal
        self.assertEqual(g["i30.workload.2"]["verdict"], "PASS")        # 10 / 400 ms = 0.025, of the longest workload
        self.assertIn("1000 windows", g["i30.workload.2"]["goal"])
        self.assertEqual(g["i30.workload.8"]["verdict"], "PASS")        # 30 / 600 ms = 0.05
        self.assertEqual(g["i30.put_signal.2"]["verdict"], "info")
        # The fair anchor: dev_signal (0.25) against put_signal (0.40), with the scope the run had.
        self.assertIn("0.62x", g["i30.signal_fair.2"]["measured"])
        self.assertIn("scope gpu", g["i30.signal_fair.2"]["measured"])
        # Variants: their own rows, next to the defaults; never the goals' (host_barrier stays 2.0, signal 0.25).
        self.assertIn("host_barrier (memops) 1.00 us (default 2.00)",
                      g["i30.variant.2.VMMIPC_SYNC_BARRIER=gather"]["measured"])
        self.assertIn("dev_signal_wait 9.00 us (default 0.25)", g["i30.variant.2.VMMIPC_DEV_SCOPE=sys"]["measured"])
        self.assertEqual(g["i30.data"]["verdict"], "PASS")
        self.assertIn("volatile.none", g["i30.floor_data"]["measured"])
        self.assertIn("2200.00", g["i30.no_mps.2"]["measured"])

    def test_misses_and_refusals(self):
        g = self.goals_of(run_files(signal_us=0.5, bad_allreduce=True))
        self.assertEqual(g["i30.signal.2"]["verdict"], "FAIL")          # 0.5 / 0.30 = 1.67
        self.assertEqual(g["i30.data"]["verdict"], "FAIL")
        self.assertIn("allreduce 64 B", g["i30.data"]["measured"])
        # 8 ranks: NVSHMEM refused; its reason is the verdict's reason.
        self.assertEqual(g["i30.barrier.8"]["verdict"], "n/a")
        self.assertIn("several PEs per GPU", g["i30.barrier.8"]["measured"])
        self.assertEqual(g["i30.heap.8"]["verdict"], "n/a")

    def test_without_mps_files_do_not_count(self):
        files = run_files()
        for name in ("device_np2_memops.json", "device_np2_kernel.json"):
            files[name]["mps"] = False
        g = self.goals_of(files)
        self.assertEqual(g["i30.signal.2"]["verdict"], "n/a")
        self.assertEqual(g["i30.barrier.2"]["verdict"], "n/a")

    def test_check_accepts_floor_findings_and_rejects_bad_data(self):
        files = run_files(bad_allreduce=True)
        with tempfile.TemporaryDirectory() as t:
            write(t, files)
            check.run(os.path.join(t, "floor_np2.json"))
            check.run(os.path.join(t, "nvshmem_np2.json"), require=["nvshmem.signal_op"])
            check.run(os.path.join(t, "nvshmem_np8.json"))
            check.run(os.path.join(t, "heap_np2.json"))
            with self.assertRaises(check.Bad):
                check.run(os.path.join(t, "device_np2_memops.json"))

    def test_tables_and_pages(self):
        with tempfile.TemporaryDirectory() as t:
            run = os.path.join(t, "2026-12-03-h200x1-mps")
            os.makedirs(run)
            write(run, run_files())
            tbls = issue30.tables(data.pick(data.load([run])))
            titles = [x[0] for x in tbls]
            self.assertTrue(any(x.startswith("Floors, 2 ranks") for x in titles), titles)
            self.assertTrue(any(x.startswith("vmmipc against NVSHMEM, 2 ranks") for x in titles), titles)
            self.assertIn("All-reduce, 2 ranks, us per call", titles)
            self.assertIn("Settings, 2 ranks, us", titles)
            report = os.path.join(os.path.dirname(HERE), "report.py")
            out, tables = os.path.join(t, "perf.md"), os.path.join(t, "tables.md")
            for extra in ([], ["--check"]):  # the same inputs give the same bytes
                subprocess.run([sys.executable, report, "page", run, "--out", out, "--tables", tables] + extra,
                               check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                users = f.read()
            self.assertIn("## Device sync on one shared GPU", users)
            self.assertIn("dev_signal -> dev_wait", users)  # a headline row; the tables are on the full page
            with open(tables) as f:
                self.assertIn("dev_signal_wait", f.read())
            summary = subprocess.run([sys.executable, report, "summary", run], check=True, capture_output=True,
                                     text=True).stdout
            self.assertIn("dev_barrier vs nvshmemx_barrier_all_block", summary)
            self.assertIn("### Floors, 2 ranks", summary)
            self.assertEqual(summary.count("| floor.sys.release_acquire |"), 1)  # flag-only and payload: one line


if __name__ == "__main__":
    unittest.main()
