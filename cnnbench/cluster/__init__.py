"""Schedulers: Slurm batch scripts, job states, and the allocation seen from inside a job."""
