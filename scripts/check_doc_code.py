#!/usr/bin/env python3
"""Builds, and runs, the code blocks of the users' pages (README.md,
docs/*.md) that say so on their first line:
    // compile: unit       C: compiled (-c), e.g. functions a reader calls
    // compile: program    C: compiled, linked against the library and run
    # compile: program     Python: byte-compiled and run
Programs run under the build's vmmipc-mpirun with one rank more than the
cores (at most 4: on CI, more ranks than cores, as root), on the CPU
stand-in (Python ones through the build's vmmipc-python), and must exit 0.
Blocks without the marker are prose snippets; a C block that defines main()
must carry it. C is compiled with the build's MPI wrapper and cuda.h folder,
warnings as errors: what a reader copies must build.
    python3 scripts/check_doc_code.py BUILD_DIR   (a configured and built build)"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

root = pathlib.Path(__file__).resolve().parent.parent
MARK = re.compile(r"^(//|#)\s*compile:\s*(\w+)\s*$")
LANGS = {"c": "//", "python": "#"}


def blocks():
    """(page, number, language, marker mode or None, body, marker match) of every fenced block."""
    for page in [root / "README.md"] + sorted((root / "docs").glob("*.md")):
        for i, m in enumerate(re.finditer(r"^```(\w*)\n(.*?)^```", page.read_text(), re.S | re.M)):
            lang, body = m.group(1), m.group(2)
            first = body.split("\n", 1)[0].strip()
            mark = MARK.match(first)
            yield page.relative_to(root), i + 1, lang, (mark.group(2) if mark else None), body, mark


def cache(build, key):
    m = re.search(rf"^{key}:[A-Z]*=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    return m.group(1) if m else ""


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = pathlib.Path(sys.argv[1]).resolve()
    mpicc = cache(build, "MPI_C_COMPILER") or "mpicc"
    cuda_inc = cache(build, "VMMIPC_CUDA_INCLUDE_DIR")
    lib = build / "src"
    mpirun = build / "vmmipc-mpirun"
    standin = build / "mpi_tests" / "standin" / "libvmmipc_standin.so"
    python = build / "python" / "vmmipc-python"
    env = dict(os.environ, VMMIPC_CUDA_DRIVER=str(standin), VMMIPC_TIMEOUT_MS="20000", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    ranks = str(min((os.cpu_count() or 1) + 1, 4))
    bad = done = 0

    def fail(where, what, out=""):
        nonlocal bad
        bad += 1
        print(f"check_doc_code: {where}: {what}" + (f"\n{out}" if out else ""))

    def run(cmd, where, what):
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            fail(where, f"{what}: still running after 180 s")
            return False
        if p.returncode:
            fail(where, f"{what} failed (exit {p.returncode}): {' '.join(map(str, cmd))}", p.stdout + p.stderr)
        return p.returncode == 0

    with tempfile.TemporaryDirectory() as tmp:
        for page, n, lang, mode, body, mark in blocks():
            where = f"{page}, block {n}"
            if mode is None:
                if lang in ("c", "cpp") and re.search(r"\bint\s+main\s*\(", body):
                    fail(where, "a program without a '// compile: program' first line")
                continue
            if lang not in LANGS or mark.group(1) != LANGS[lang] or mode not in ("unit", "program") or \
                    (lang == "python" and mode != "program"):
                fail(where, f"unknown marker {mark.group(0)!r} for a {lang or 'plain'} block")
                continue
            done += 1
            src = pathlib.Path(tmp) / f"{page.stem}_{n}.{'py' if lang == 'python' else 'c'}"
            src.write_text(body)
            if lang == "python":
                if run([sys.executable, "-m", "py_compile", src], where, "byte-compiling") and \
                        (python.exists() or fail(where, f"no {python}: the build has no Python module")):
                    run([mpirun, ranks, python, src], where, f"running it with {ranks} ranks on the stand-in")
                continue
            flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{root / 'include'}"] + \
                    ([f"-I{cuda_inc}"] if cuda_inc else [])
            if mode == "unit":
                run([mpicc, *flags, "-c", src, "-o", src.with_suffix(".o")], where, "compiling")
                continue
            exe = src.with_suffix("")
            if run([mpicc, *flags, src, f"-L{lib}", "-lvmmipc", f"-Wl,-rpath,{lib}", "-o", exe], where,
                   "compiling and linking"):
                run([mpirun, ranks, exe], where, f"running it with {ranks} ranks on the stand-in")
    print(f"check_doc_code: {done} marked blocks built (programs run with {ranks} ranks); {bad} problems")
    sys.exit(1 if bad else 0)


main()
