"""`cnnbench sweep SPEC --slurm`: collect what earlier jobs left, submit the runs still missing,
and with ``--wait`` follow the jobs until every row is in the results CSV."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cnnbench.cluster.ledger import Ledger, TrackedJob, collect, follow, submit_runs
from cnnbench.cluster.sbatch import jobs_dir, place_runs, resources
from cnnbench.expand import not_supported
from cnnbench.options import SlurmSpec
from cnnbench.run.execute import run_key, split_done
from cnnbench.run.rows import skipped_row
from cnnbench.runs import Run


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def slurm_sweep(runs: Sequence[Run], out: Path, options: SlurmSpec, *, source: str, repo: Path,
                wait: bool = False, force: bool = False, dry_run: bool = False) -> list[dict[str, Any]] | None:
    """Rows collected (with ``wait``), or None when the jobs were left running (or nothing was done)."""
    from cnnbench.table import store

    runs = place_runs(runs, options, source)
    ledger = Ledger(jobs_dir(out))
    store.check_appendable(out)
    collected: list[dict[str, Any]] = []
    active: list[TrackedJob] = []
    if not dry_run:  # earlier jobs' rows first, so that a finished run is not submitted again
        collected, active, _ = collect(ledger, out)
        if collected:
            _say(f"collected {len(collected)} row(s) of earlier slurm jobs into {out}")
    todo, done = (list(runs), []) if force else split_done(runs, out)
    running = {run_key(job.run): job for job in active}
    attach = [r for r in todo if run_key(r) in running]
    submit = [r for r in todo if run_key(r) not in running]
    if dry_run:
        print(f"{source}: {len(runs)} run(s), {len(submit)} to submit, {len(done)} already in {out}")
        for index, run in enumerate(runs, start=1):
            state = "done" if run in done else "submit"
            print(f"  {index:3d}. [{state}] {run.label} hosts={run.hosts}: {resources(run, options).describe()}")
        return None
    if done:
        _say(f"skipping {len(done)} run(s) already ok in {out}")
    for run in attach:
        _say(f"slurm job {running[run_key(run)].job_id} is still on {run.label}: not submitted again")
    if not submit and not attach and not wait:
        _say("nothing to submit: every run has its row")
        return collected or None
    skipped = [skipped_row(run, reason) for run in submit if (reason := not_supported(run))]
    if skipped:  # a run its framework cannot do is a skipped row, written here without a job
        store.append_rows(out, skipped)
        collected += skipped
        _say(f"{len(skipped)} run(s) written as skipped rows: {skipped[0]['error']}")
    jobs = submit_runs([run for run in submit if not not_supported(run)], options, ledger, repo=repo)
    if not wait:
        ids = [job.job_id for job in jobs] + [running[run_key(r)].job_id for r in attach]
        print(" ".join(ids))
        if ids:
            _say(f"{len(ids)} slurm job(s) queued; rows go to {ledger.folder}/ and into {out} on the next "
                 f"`cnnbench sweep {source} --slurm --wait --out {out}`")
        return None
    return collected + follow(ledger, out, options.poll_s)
