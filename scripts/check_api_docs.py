#!/usr/bin/env python3
"""Fails when a function of include/vmmipc.h has no entry ("### name") in
docs/api.md, or when docs/api.md documents a function the header lacks.
Run by CI; no arguments needed from the repository root."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
header = (root / "include" / "vmmipc.h").read_text()
api = (root / "docs" / "api.md").read_text()
declared = sorted(set(re.findall(r"VMMIPC_API[^;(]*?\b(vmmipc_[a-z0-9_]+)\s*\(", header)))
documented = set(re.findall(r"^### (vmmipc_[a-z0-9_]+)\s*$", api, re.M))
missing = [f for f in declared if f not in documented]
stale = sorted(documented - set(declared))
for f in missing:
    print(f"docs/api.md: no entry for {f} (declared in include/vmmipc.h)")
for f in stale:
    print(f"docs/api.md: entry for {f}, which include/vmmipc.h does not declare")
print(f"check_api_docs: {len(declared)} functions, {len(declared) - len(missing)} documented")
sys.exit(1 if missing or stale else 0)
