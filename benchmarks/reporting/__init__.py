"""The benchmark reporting tool's parts (benchmarks/report.py is the command):
data (reading runs), check (the JSON schema), goals (the ratios against their
targets), page (docs/performance.md and docs/dev/performance-tables.md),
plots (PNG files, with matplotlib)."""
