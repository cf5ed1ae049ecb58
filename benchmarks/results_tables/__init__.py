"""The result tables of docs/results.md, each built from the committed rows (benchmarks/tables.py)."""
