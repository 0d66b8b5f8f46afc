#!/usr/bin/env python3
"""Fails when the committed fuzz seed corpus (fuzz/corpus) is of another wire
version than the library's: every descriptor of fuzz/corpus/desc must carry
VMMIPC__DESC_VERSION (src/desc/desc.h), every frame header of
fuzz/corpus/frame VMMIPC__FRAME_VERSION (src/transport/codec.h), and every
collective message ("VMMC") that begins a DATA frame's payload
VMMIPC__CMSG_VERSION (src/coll/msg.h); some must. Regenerate
with fuzz/gen_corpus (docs/testing.md). Run by CI and fuzz/run.sh."""
import pathlib
import re
import struct
import sys

root = pathlib.Path(__file__).resolve().parent.parent


def version(header, name):
    text = (root / header).read_text()
    m = re.search(r"#define\s+%s\s+(\d+)u?" % name, text)
    if not m:
        sys.exit(f"check_fuzz_corpus: {name} not found in {header}")
    return int(m.group(1))


desc_v = version("src/desc/desc.h", "VMMIPC__DESC_VERSION")
frame_v = version("src/transport/codec.h", "VMMIPC__FRAME_VERSION")
cmsg_v = version("src/coll/msg.h", "VMMIPC__CMSG_VERSION")
bad = []
checked = 0
cmsgs = 0
# fuzz/fuzz.h: a control byte, then the packed descriptor ("VMMI", u16 version).
for f in sorted((root / "fuzz/corpus/desc").iterdir()):
    b = f.read_bytes()
    checked += 1
    if len(b) < 7 or b[1:5] != b"VMMI":
        bad.append(f"{f.relative_to(root)}: not a packed descriptor")
    elif struct.unpack_from("<H", b, 5)[0] != desc_v:
        bad.append(f"{f.relative_to(root)}: descriptor version {struct.unpack_from('<H', b, 5)[0]}, "
                   f"the library's is {desc_v}")
# A mode byte, then records [op:u8][len:u16][frame header ("vmtp", u16 version) ...].
for f in sorted((root / "fuzz/corpus/frame").iterdir()):
    b = f.read_bytes()
    checked += 1
    i, frames = 1, 0
    while i + 3 <= len(b):
        n = struct.unpack_from("<H", b, i + 1)[0]
        rec = b[i + 3:i + 3 + n]
        i += 3 + n
        if len(rec) < 6 or rec[0:4] != b"vmtp":
            continue  # deliberately short or foreign records are part of the corpus
        frames += 1
        v = struct.unpack_from("<H", rec, 4)[0]
        if v != frame_v:
            bad.append(f"{f.relative_to(root)}: a frame of version {v}, the library's is {frame_v}")
            break
        # [kind:u16 at 6], [index:u32 at 52]; the payload after the 64-byte header.
        if len(rec) >= 70 and struct.unpack_from("<H", rec, 6)[0] == 2 and struct.unpack_from("<I", rec, 52)[0] == 0 \
                and rec[64:68] == b"VMMC":
            cmsgs += 1
            cv = struct.unpack_from("<H", rec, 68)[0]
            if cv != cmsg_v:
                bad.append(f"{f.relative_to(root)}: a collective message of version {cv}, the library's is {cmsg_v}")
                break
    if frames == 0:
        bad.append(f"{f.relative_to(root)}: no frame header found")
if cmsgs == 0:
    bad.append("fuzz/corpus/frame: no collective message (\"VMMC\") in any seed")
for line in bad:
    print(line)
if bad:
    print("check_fuzz_corpus: regenerate the corpus with vmmipc_fuzz_corpus (fuzz/gen_corpus.c; docs/dev/fuzzing.md)")
print(f"check_fuzz_corpus: {checked} seeds, descriptor version {desc_v}, frame version {frame_v}, "
      f"{cmsgs} collective messages of version {cmsg_v}")
sys.exit(1 if bad else 0)
