"""Sweeps as Slurm batch jobs, what each run asks of Slurm: its nodes, tasks and time, and the generated
sbatch script kept next to the results (readable, resubmittable by hand with ``sbatch``).

For ``results/runs.csv`` the jobs live in ``results/runs.slurm/``: per run ``<run_id>.sbatch``,
``<run_id>.run.json`` (the fully resolved run the job trains), ``<run_id>.<jobid>.out`` (the job's log) and
``<run_id>.rows.csv`` (the row the job wrote), plus ``jobs.jsonl``, the ledger of submitted jobs
(:mod:`cnnbench.cluster.ledger`).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnnbench.errors import SpecError
from cnnbench.options import SlurmSpec
from cnnbench.runs import Run
from cnnbench.spec import check_sbatch_lines

# A job's processes start, import their framework and rendezvous before the run's own timeout_s
# starts counting; the Slurm limit leaves room for that, so that our timeout (which writes a row)
# fires before Slurm's (which kills without one).
START_MARGIN_S = 300.0


def with_overrides(table: SlurmSpec, **overrides: Any) -> SlurmSpec:
    """The spec's [slurm] table with the command line's options (those not None) on top."""
    given = {name: value for name, value in overrides.items() if value is not None}
    if "extra" in given:
        given["extra"] = table.extra + check_sbatch_lines("--sbatch", "option", tuple(given["extra"]))
    return dataclasses.replace(table, **given)


def place_runs(runs: Sequence[Run], options: SlurmSpec, source: str) -> list[Run]:
    """Each run with its host count: a run of more devices than one node holds spans several."""
    placed = []
    for run in runs:
        per_node = options.devices_per_node or run.devices
        hosts = 1
        if run.devices > per_node:
            if run.devices % per_node:
                raise SpecError(source, "slurm.devices_per_node",
                                f"a run of {run.devices} devices cannot be split into nodes of {per_node}")
            hosts = run.devices // per_node
        if hosts % options.hosts_per_node and hosts > 1:
            raise SpecError(source, "slurm.hosts_per_node",
                            f"{hosts} hosts of a {run.devices}-device run do not fill nodes of "
                            f"{options.hosts_per_node} hosts each")
        placed.append(dataclasses.replace(run, hosts=hosts, host_rank=0, coordinator=""))
    return placed


@dataclass(frozen=True)
class Resources:
    """The #SBATCH resource lines of one run."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    time_limit_min: int

    def describe(self) -> str:
        gpus = f", {self.gpus_per_node} GPU(s)/node" if self.gpus_per_node else ""
        return f"{self.nodes} node(s) x {self.tasks_per_node} task(s){gpus}, {self.time_limit_min} min"


def resources(run: Run, options: SlurmSpec) -> Resources:
    tasks_per_node = min(options.hosts_per_node, run.hosts)
    gpus = run.devices_per_host * tasks_per_node if run.device_kind == "gpu" else 0
    minutes = options.time_limit_min or math.ceil((run.timeout_s + START_MARGIN_S) / 60)
    return Resources(nodes=run.hosts // tasks_per_node, tasks_per_node=tasks_per_node, gpus_per_node=gpus,
                     cpus_per_task=options.cpus_per_task, time_limit_min=minutes)


# -- files of one job ---------------------------------------------------------------------------------


def jobs_dir(out: Path) -> Path:
    """``results/runs.csv`` -> ``results/runs.slurm/``."""
    return out.with_name(out.stem + ".slurm")


@dataclass(frozen=True)
class JobFiles:
    folder: Path
    run_id: str

    @property
    def script(self) -> Path:
        return self.folder / f"{self.run_id}.sbatch"

    @property
    def run_json(self) -> Path:
        return self.folder / f"{self.run_id}.run.json"

    @property
    def rows(self) -> Path:
        return self.folder / f"{self.run_id}.rows.csv"

    def log(self, job_id: str | None = None) -> Path:
        return self.folder / f"{self.run_id}.{job_id or '%j'}.out"


def render_script(run: Run, options: SlurmSpec, files: JobFiles, *, python: str, repo: Path,
                  workdir: Path) -> str:
    """The batch script of one run: resources, then one srun task per cnnbench host. It runs in the
    folder `sweep` was started in (relative paths of the spec mean the same), with cnnbench from ``repo``."""
    res = resources(run, options)
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# cnnbench run {run.run_id}: {run.label}",
             f"# resubmit by hand with: sbatch {q(str(files.script))}",
             f"#SBATCH --job-name=cnnbench-{run.backend}-{run.strategy}-x{run.devices}",
             f"#SBATCH --nodes={res.nodes}",
             f"#SBATCH --ntasks-per-node={res.tasks_per_node}",
             f"#SBATCH --time={res.time_limit_min}",
             f"#SBATCH --output={files.log()}",
             f"#SBATCH --chdir={workdir}",
             # A requeued job would rerun under the same id; a NODE_FAIL row and a resubmission
             # by the next `sweep --slurm` say more.
             "#SBATCH --no-requeue"]
    if res.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={res.gpus_per_node}")
    if res.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={res.cpus_per_task}")
    for name in ("partition", "account", "qos", "constraint"):
        value = getattr(options, name)
        if value:
            lines.append(f"#SBATCH --{name}={value}")
    lines += list(check_sbatch_lines(run.source, "slurm.extra", options.extra))
    # srun does not inherit --cpus-per-task from the allocation (Slurm 22.05's srun(1)): the step says it.
    step_cpus = f" --cpus-per-task={res.cpus_per_task}" if res.cpus_per_task else ""
    lines += ["", "set -euo pipefail",
              f'export PYTHONPATH={q(str(repo))}"${{PYTHONPATH:+:$PYTHONPATH}}"']
    if options.setup:
        lines += ["# [slurm] setup", *options.setup]
    lines += [
        "# The frameworks' rendezvous listens on host 0, the node this script runs on: a port free here.",
        f"export CNNBENCH_COORDINATOR_PORT=$({q(python)} -c "
        "'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])')",
        "# One task per cnnbench host; SLURM_PROCID/SLURM_NTASKS/SLURM_JOB_NODELIST give each its place.",
        f"srun --ntasks={run.hosts} --ntasks-per-node={res.tasks_per_node}{step_cpus} --kill-on-bad-exit=1 "
        f"{q(python)} -m cnnbench.cluster.job {q(str(files.run_json))} {q(str(files.rows))}",
        ""]
    return "\n".join(lines)
