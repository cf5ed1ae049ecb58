"""The GPU runbook: named sections of GPU measurements (benchmarks/gpu.py) and what they share."""
