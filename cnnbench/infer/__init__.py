"""Inference: the plan (which variants to run), the measurement in the worker, serving."""
