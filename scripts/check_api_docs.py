#!/usr/bin/env python3
"""Checks docs/api.md against the public headers:
1. every function of include/vmmipc.h has an entry ("### name"), and no entry
   names a function the header lacks;
2. every entry of a function that returns vmmipc_result_t lists its results
   ("Results:"), and names every result code (VMMIPC_ERR_*) that the header's
   comment for that function names. Shorthands of api.md count as the codes
   they stand for ("transport and agreement results", "driver-load results",
   "as `vmmipc_other`");
3. the structs of include/vmmipc_win_device.h and the device functions of
   include/vmmipc_device.cuh are documented in docs/device-api.md.
Run by CI; no arguments needed from the repository root."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
header = (root / "include" / "vmmipc.h").read_text()
api = (root / "docs" / "api.md").read_text()
problems = []

# 1. one entry per function
decls = {}  # name -> (return type, the comment just above the declaration)
for m in re.finditer(r"(/\*(?:(?!\*/).)*\*/\s*)?VMMIPC_API\s+([^;(]*?)\b(vmmipc_[a-z0-9_]+)\s*\(", header, re.S):
    decls[m.group(3)] = (m.group(2).strip(), m.group(1) or "")
entries = dict(re.findall(r"(?ms)^### (vmmipc_[a-z0-9_]+)\s*\n(.*?)(?=^##|\Z)", api))
for f in sorted(decls):
    if f not in entries:
        problems.append(f"docs/api.md: no entry for {f} (declared in include/vmmipc.h)")
for f in sorted(set(entries) - set(decls)):
    problems.append(f"docs/api.md: entry for {f}, which include/vmmipc.h does not declare")

# 2. results
SHORTHANDS = {
    "transport and agreement results": {"PEER", "TIMEOUT", "ABORTED", "INVALID_DESC", "SYSTEM", "RESOURCE", "MPI",
                                        "BUSY"},
    "driver-load results": {"UNSUPPORTED", "CUDA"},
}


def codes_of(name, seen=()):
    text = entries.get(name, "")
    codes = set(re.findall(r"`(?:VMMIPC_ERR_)?([A-Z][A-Z_]+)`", text))
    codes |= set(re.findall(r"VMMIPC_ERR_([A-Z_]+)", text))
    for phrase, implied in SHORTHANDS.items():
        if phrase in text.lower():
            codes |= implied
    for other in re.findall(r"[Aa]s `(vmmipc_[a-z0-9_]+)`", text):
        if other != name and other not in seen:
            codes |= codes_of(other, seen + (name,))
    return codes


documented_codes = 0
for f, (ret, comment) in sorted(decls.items()):
    if f not in entries or ret != "vmmipc_result_t":
        continue
    if "Results:" not in entries[f]:
        problems.append(f"docs/api.md: the entry for {f} lists no results")
        continue
    have = codes_of(f)
    for code in sorted(set(re.findall(r"VMMIPC_ERR_([A-Z_]+)", comment))):
        documented_codes += 1
        if code not in have:
            problems.append(f"docs/api.md: {f}: the header's comment names VMMIPC_ERR_{code}, its entry does not")

# 3. the device headers
device_doc = (root / "docs" / "device-api.md").read_text()
names = set(re.findall(r"__device__[^(]*?\b(vmmipc_dev_[a-z0-9_]+)\s*\(",
                       (root / "include" / "vmmipc_device.cuh").read_text()))
names |= set(re.findall(r"\}\s*(vmmipc_[a-z0-9_]+_t)\s*;", (root / "include" / "vmmipc_win_device.h").read_text()))
for n in sorted(names):
    if n not in device_doc and n not in api:
        problems.append(f"docs/device-api.md: {n} (include/vmmipc_device.cuh, vmmipc_win_device.h) is not documented")

for p in problems:
    print(p)
print(f"check_api_docs: {len(decls)} functions, {len(set(decls) & set(entries))} documented, {documented_codes} "
      f"result codes of the header's comments checked, {len(names)} device names; {len(problems)} problems")
sys.exit(1 if problems else 0)
