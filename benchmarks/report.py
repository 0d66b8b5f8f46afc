#!/usr/bin/env python3
"""Reports vmmipc benchmark results (the JSON of vmmipc_bw, vmmipc_setup,
vmmipc_sync and the PyTorch anchors; a results directory stands for its
*.json). Standard library only, but for `plot` (matplotlib).

  report.py summary FILE.json|DIR ...   the goals of one run as a Markdown table (and issue 30's
                                        tables where the run has its files)
  report.py check FILE.json [--csv FILE.csv] [--require NAME,...]
        [--expect-skipped NAME:MODE:TEXT] [--expect-incomplete]
                                        the schema check of the smoke tests
  report.py plot FILE.json|DIR ... [--out DIR]
                                        PNG plots (says so and exits 0 without matplotlib)
  report.py page [RESULTS_DIR ...] [--out FILE] [--tables FILE] [--check]
        docs/performance.md (short) and docs/dev/performance-tables.md (every
        figure) from benchmarks/results/*; --check compares instead of writing
        (CI), printing the difference.
"""
import argparse
import difflib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from reporting import check, data, goals, issue30, page, plots  # noqa: E402


def cmd_summary(a):
    run = data.pick(data.load(a.files))
    print(goals.table(goals.goal_rows(run)))
    if data.issue30(run):  # issue 30's tables: each vmmipc row next to its anchor and the floors
        print(issue30.markdown(issue30.tables(run)))
    return 0


def cmd_check(a):
    try:
        print("check:", check.run(a.json, a.csv, [x for x in a.require.split(",") if x], a.expect_skipped,
                                  a.expect_incomplete))
    except check.Bad as e:
        print(f"check: {a.json}: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_plot(a):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is not installed; no plots made (pip install matplotlib)")
        return 0
    os.makedirs(a.out, exist_ok=True)
    made = plots.draw(plt, data.load(a.files), a.out)
    print("\n".join(f"plot: wrote {f}" for f in made) or "plot: nothing to plot")
    return 0


def cmd_page(a):
    dirs = a.dirs
    if not dirs:
        base = os.path.join(HERE, "results")
        dirs = sorted(os.path.join(base, n) for n in os.listdir(base) if os.path.isdir(os.path.join(base, n)))
    bad = [d for d in dirs if not os.path.isdir(d)]
    if bad:
        print(f"page: {bad[0]} is not a directory", file=sys.stderr)
        return 2
    runs = data.runs(dirs, ROOT)
    texts = {a.out: page.users_page(runs, a.out, a.tables), a.tables: page.dev_tables(runs, a.tables, a.out)}
    status = 0
    for path, text in texts.items():
        if a.check:
            have = data.read_text(path)
            if have == text:
                print(f"page: {path} matches the results ({len(dirs)} directories)")
                continue
            sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                                       path + " (committed)", path + " (generated)"))
            print(f"page: {path} differs from what the results give; regenerate it with "
                  f"python3 benchmarks/report.py page", file=sys.stderr)
            status = 1
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"page: wrote {path} ({len(text.encode())} bytes) from {len(dirs)} directories")
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary")
    s.add_argument("files", nargs="+")
    s = sub.add_parser("check")
    s.add_argument("json")
    s.add_argument("--csv")
    s.add_argument("--require", default="", help="methods (vmmipc_setup) or latency entries that must be measured")
    s.add_argument("--expect-skipped", action="append", default=[], metavar="NAME:MODE:TEXT")
    s.add_argument("--expect-incomplete", action="store_true", help="vmmipc_setup stopped by --time-limit")
    s = sub.add_parser("plot")
    s.add_argument("files", nargs="+")
    s.add_argument("--out", default=".")
    s = sub.add_parser("page")
    s.add_argument("dirs", nargs="*", metavar="RESULTS_DIR")
    s.add_argument("--out", default=os.path.join(ROOT, "docs", "performance.md"))
    s.add_argument("--tables", default=os.path.join(ROOT, "docs", "dev", "performance-tables.md"))
    s.add_argument("--check", action="store_true")
    a = ap.parse_args()
    return {"summary": cmd_summary, "check": cmd_check, "plot": cmd_plot, "page": cmd_page}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
