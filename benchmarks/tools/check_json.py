#!/usr/bin/env python3
"""Checks the shape of a vmmipc_bw or vmmipc_setup JSON file (and its CSV).

Used by the ctest smoke tests on the CPU stand-in: the file must parse, every
series or result must be either measured or skipped with a reason, and none
may carry an error (a failed data check). No timing is asserted.

usage: check_json.py FILE.json [--csv FILE.csv]
"""
import argparse
import csv
import json
import sys


def fail(msg):
    print(f"check_json: {msg}", file=sys.stderr)
    sys.exit(1)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def skipped_ok(entry, what):
    why = entry.get("skipped")
    if not isinstance(why, str) or not why:
        fail(f"{what}: 'skipped' must be a non-empty reason")


def check_bw(d):
    series = d.get("series")
    if not series:
        fail("no series")
    measured = set()
    for s in series:
        name = s.get("name", "?")
        if "error" in s:
            fail(f"{name}: {s['error']}")
        if "skipped" in s:
            skipped_ok(s, name)
            continue
        pts = s.get("points")
        if not pts:
            fail(f"{name}: no points")
        sizes = [p.get("size") for p in pts]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            fail(f"{name}: sizes are not increasing: {sizes}")
        for p in pts:
            for key in ("size", "iters", "seconds", "gbps", "mbps"):
                if not positive(p.get(key)):
                    fail(f"{name}: point {p} has no positive {key}")
        measured.add(name)
    for need in ("vmmipc.ce.read.uni", "vmmipc.ce.write.uni"):
        if need in {s.get("name") for s in series} and need not in measured:
            fail(f"{need} was not measured")
    for m in d.get("matrices", []):
        if "skipped" in m:
            skipped_ok(m, m.get("name", "matrix"))
            continue
        rows = m.get("gbps")
        n = d.get("ranks")
        if not rows or len(rows) != n or any(len(r) != n for r in rows):
            fail(f"matrix {m.get('name')}: not {n} x {n}")
        for i, r in enumerate(rows):
            for j, v in enumerate(r):
                if (i == j) != (v is None) or (v is not None and not positive(v)):
                    fail(f"matrix {m.get('name')}: bad entry [{i}][{j}] = {v}")
    return len(measured)


def check_setup(d):
    results = d.get("results")
    if not results:
        fail("no results")
    measured = 0
    for r in results:
        what = f"{r.get('coll')}/{r.get('method')}/{r.get('size')}x{r.get('chunks')}"
        for key in ("coll", "method", "size", "chunks", "chunk_size"):
            if key not in r:
                fail(f"{what}: no {key}")
        if "error" in r:
            fail(f"{what}: {r['error']}")
        if "skipped" in r:
            skipped_ok(r, what)
            continue
        if not positive(r.get("reps")):
            fail(f"{what}: no reps")
        if not positive(r["first"].get("wall")) or not positive(r["stats"]["wall"].get("median")):
            fail(f"{what}: no wall time")
        if len(r.get("wall_samples", [])) != r["reps"]:
            fail(f"{what}: {len(r.get('wall_samples', []))} samples for {r['reps']} reps")
        measured += 1
    colls = {r["coll"] for r in results if r["method"] == "vmmipc" and "skipped" not in r}
    if not colls:
        fail("no vmmipc collective was measured")
    return measured


def check_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        fail(f"{path}: no data rows")
    width = len(rows[0])
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            fail(f"{path}:{i}: {len(row)} fields, header has {width}")
    return len(rows) - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--csv")
    a = ap.parse_args()
    try:
        with open(a.json) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{a.json}: {e}")
    kind = d.get("benchmark")
    if kind == "vmmipc_bw":
        n = check_bw(d)
    elif kind == "vmmipc_setup":
        n = check_setup(d)
    else:
        fail(f"{a.json}: unknown benchmark {kind!r}")
    rows = check_csv(a.csv) if a.csv else 0
    print(f"check_json: {a.json}: {kind}, {n} measured entries" + (f", {rows} CSV rows" if a.csv else ""))


if __name__ == "__main__":
    main()
