"""Data sources and the framework-neutral parts of input pipelines."""
