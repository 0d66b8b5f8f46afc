#!/usr/bin/env python3
"""Checks that every message docs/troubleshooting.md quotes as vmmipc's is
still one the library prints: each literal piece of a quoted heading (the
text between <placeholders> and "..."), when at least 8 characters long,
must occur in the string literals of src/ (adjacent literals joined, printf
conversions standing for any text). Headings marked as another program's
(from the driver, Open MPI, MPICH) or that describe a symptom are skipped.
Strict: every piece counts, however short.
Run by CI from the repository root."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
corpus = []
for path in sorted((root / "src").rglob("*.c")):
    text = path.read_text()
    # Join adjacent string literals ("a" "b" -> "ab"), then keep the literals.
    # (also across a macro's line continuations).
    text = re.sub(r'"[ \t]*\\?[ \t]*\n\s*"', "", text)
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text):
        lit = lit.replace('\\"', '"').replace("%%", "%")
        corpus.append(re.sub(r"%[-0-9.]*(?:ll|l|z)?[a-z]", "\x00", lit))
corpus = "\n".join(corpus)

literals = [l for l in corpus.split("\n") if len(l.replace("\x00", "")) >= 12]
# A literal matches a quoted message when it occurs in it with any text
# standing for its conversions (and for the doc's <placeholders>).
patterns = [re.compile("".join(".*?" if c == "\x00" else re.escape(c) for c in l)) for l in literals]

doc = (root / "docs" / "troubleshooting.md").read_text()
bad = checked = 0
for m in re.finditer(r"^### `([^`]+)`(.*)$", doc, re.M):
    msg, after = m.group(1), m.group(2)
    if re.search(r"\((from|Open MPI|MPICH|.*not vmmipc)", after):
        continue
    spans = [x.span() for pat in patterns for x in pat.finditer(msg)]
    pos = 0
    # Only placeholders, "...", errno names with their text (from a table)
    # and the "; hint: " that vmmipc__os_error puts between a message and its
    # hint end the pieces; every other word must be printed, short pieces too.
    for piece in re.split(r"(<[^>]*>|\.\.\.|: E[A-Z]+ \([^)]*\)|; hint: )", msg):
        start, pos = pos, pos + len(piece)
        if piece.startswith(("<", ": E", "; hint")) or piece == "..." or not re.search(r"\w", piece):
            continue
        checked += 1
        if not any(a <= start and start + len(piece) <= b for a, b in spans):
            print(f"docs/troubleshooting.md: not printed by src/ any more: {piece!r}\n  in: {msg}")
            bad += 1
print(f"check_troubleshooting: {checked} quoted pieces checked, {bad} missing")
sys.exit(1 if bad else 0)
