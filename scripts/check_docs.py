#!/usr/bin/env python3
"""Checks the documentation (README.md, docs/**/*.md, benchmarks/README.md):
1. every relative Markdown link and image points at a file or folder that
   exists, and every path named in the text (docs/....md, examples/...) does;
2. every C/C++ block of docs/integration.md is a file under examples/ whole,
   or lines of one verbatim, so the guide shows only code that CI builds
   (a first line "// compile: ..." is scripts/check_doc_code.py's marker);
3. the users' pages (docs/*.md) stay within their size budget.
Run by CI from the repository root."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
BUDGET = 85 * 1024  # docs/*.md in all (issue 25); maintainers' records live in docs/dev/
# Pages and examples that another branch adds while this one is open: a link
# to one is accepted until it lands (empty when nothing is pending).
PENDING = set()

bad = 0


def fail(msg):
    global bad
    print(f"check_docs: {msg}")
    bad += 1


pages = [root / "README.md", root / "benchmarks" / "README.md"] + sorted((root / "docs").rglob("*.md"))
links = 0
for page in pages:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks name files of other trees
    rel = page.relative_to(root)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        links += 1
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        if not path.exists() and name not in PENDING:
            fail(f"{rel}: link to {target}: no such file")
    for named in re.findall(r"(?<![\w./-])((?:docs|examples)/[\w./-]*\w)", text):
        links += 1
        if not (root / named).exists() and named not in PENDING:
            fail(f"{rel}: names {named}: no such file")

guide = (root / "docs" / "integration.md").read_text()
sources = {p: p.read_text() for p in (root / "examples").rglob("*") if p.is_file()}
blocks = re.findall(r"```(?:c|cpp|cu)\n(.*?)```", guide, re.S)
# A first line "// compile: ..." is scripts/check_doc_code.py's marker, not the file's.
blocks = [re.sub(r"\A//\s*compile:.*\n", "", b) for b in blocks]
for b in blocks:
    if not any(b.rstrip("\n") in s for s in sources.values()):
        fail(f"docs/integration.md: a code block is not in any file under examples/: {b.splitlines()[0]!r}")
pending = sorted(p for p in PENDING if not (root / p).exists())
size = sum(p.stat().st_size for p in (root / "docs").glob("*.md"))
if size > BUDGET:
    fail(f"docs/*.md total {size} bytes, over the users' pages' budget of {BUDGET}")
print(f"check_docs: {len(pages)} pages, {links} links and paths, {len(blocks)} guide blocks checked; docs/*.md "
      f"{size} bytes of {BUDGET}; {bad} problems" + (f"; pending from other branches: {', '.join(pending)}"
                                                      if pending else ""))
sys.exit(1 if bad else 0)
