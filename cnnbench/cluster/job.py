"""The program each Slurm task runs: ``python -m cnnbench.cluster.job RUN_JSON ROWS_CSV``.

It takes its place in the run from the SLURM_* variables (:mod:`cnnbench.cluster.allocation`) -- the
values ``cnnbench run --hosts/--host-rank/--coordinator`` would be given by hand -- and then runs
exactly like ``cnnbench run``: torchrun's rendezvous, TF_CONFIG or jax.distributed start the
framework. Host 0 writes the row (or a failed row) into the job's own ROWS_CSV.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path

from cnnbench.cluster.allocation import AllocationError, placement
from cnnbench.runs import run_from_json


def main(argv: list[str]) -> int:
    from cnnbench.run.execute import execute_one
    from cnnbench.run.rows import outcome_row
    from cnnbench.runs import Outcome
    from cnnbench.table import store

    if len(argv) != 2:
        print("usage: python -m cnnbench.cluster.job RUN_JSON ROWS_CSV", file=sys.stderr)
        return 2
    run = run_from_json(Path(argv[0]).read_text())
    rows_csv = Path(argv[1])
    try:
        place = placement(os.environ)
        if place.hosts != run.hosts:
            raise AllocationError(f"the run needs {run.hosts} host(s), the job step has {place.hosts} task(s)")
    except AllocationError as exc:
        row, history = outcome_row(run, Outcome("failed", error=f"slurm allocation: {exc}")), []
        writer = os.environ.get("SLURM_PROCID", "0") == "0"
    else:
        run = dataclasses.replace(run, host_rank=place.host_rank, coordinator=place.coordinator)
        print(f"cnnbench host {place.host_rank}/{place.hosts}, coordinator {place.coordinator}: {run.label}",
              file=sys.stderr, flush=True)
        row, history = execute_one(run, verbose=True)  # the worker's output goes to the job's log
        writer = run.host_rank == 0
    row["slurm_job_id"] = os.environ.get("SLURM_JOB_ID")
    if writer:
        # The job's own file, written whole without a lock: see cnnbench.cluster.ledger on shared file systems.
        store.write_rows_file(rows_csv, [row], history)
        print(f"row: {row['status']} {row.get('error') or ''}", file=sys.stderr, flush=True)
    return 0 if row["status"] != "failed" else 1


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    # Slurm ends a task (time limit, scancel) with SIGTERM: as an exception it reaches the launcher,
    # which takes the run's whole process tree down (it runs in a session of its own).
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    sys.exit(main(sys.argv[1:]))
