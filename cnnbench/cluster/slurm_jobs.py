"""Slurm's own commands: submitting a script, and the states of submitted jobs (scontrol while slurmctld
still holds a job, sacct where accounting storage is configured)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cnnbench.errors import UserError

# Job states in which the job may still run (or run again); every other state is final.
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})
SLURM_COMMAND_TIMEOUT_S = 60.0


class SlurmError(UserError):
    """A Slurm command is missing or refused the request (sbatch rejected a script, ...)."""


def _slurm(args: list[str], what: str) -> subprocess.CompletedProcess:
    if not shutil.which(args[0]):
        raise SlurmError(f"{args[0]} not found: --slurm needs Slurm's client commands on PATH")
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: {args[0]} did not answer in {SLURM_COMMAND_TIMEOUT_S:.0f} s") from None


def submit(script: Path) -> str:
    """sbatch the script; returns the job id."""
    done = _slurm(["sbatch", "--parsable", str(script)], "sbatch")
    if done.returncode != 0:
        raise SlurmError(f"sbatch {script} refused: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, CANCELLED, NODE_FAIL, ...
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""
    source: str = "scontrol"  # scontrol | sacct

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def _fields(line: str) -> dict[str, str]:
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def parse_scontrol_jobs(text: str) -> dict[str, JobState]:
    """``scontrol show job -o`` (one job a line) -> states by job id."""
    states = {}
    for line in text.splitlines():
        got = _fields(line)
        if "JobId" in got and "JobState" in got:
            states[got["JobId"]] = JobState(got["JobState"], got.get("Reason", ""), got.get("NodeList", ""),
                                            got.get("ExitCode", ""))
    return states


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -X -n -P -o JobID,State,ExitCode,NodeList,Reason`` -> states by job id."""
    states = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0]:
            # "CANCELLED by 1000": the state is the first word
            states[parts[0]] = JobState(parts[1].split()[0] if parts[1] else "UNKNOWN",
                                        parts[4] if len(parts) > 4 else "", parts[3], parts[2], "sacct")
    return states


def query_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """States of the jobs Slurm still knows: slurmctld's memory first (no accounting needed), then
    accounting for the ones it has forgotten. A job neither knows is missing from the answer.
    Raises SlurmError when slurmctld cannot be reached, so that no job is settled on a network blip."""
    wanted = list(dict.fromkeys(job_ids))
    if not wanted:
        return {}
    done = _slurm(["scontrol", "show", "job", "-o"], "scontrol show job")
    if done.returncode != 0:
        raise SlurmError(f"scontrol show job: {done.stderr.strip() or 'failed'}")
    known = parse_scontrol_jobs(done.stdout)
    states = {job: known[job] for job in wanted if job in known}
    forgotten = [job for job in wanted if job not in states]
    if forgotten and shutil.which("sacct"):
        found = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(forgotten), "-o",
                                "JobID,State,ExitCode,NodeList,Reason"], capture_output=True, text=True,
                               timeout=SLURM_COMMAND_TIMEOUT_S)
        if found.returncode == 0:  # "accounting storage is disabled" is rc 1: nothing to learn there
            states.update({job: s for job, s in parse_sacct(found.stdout).items() if job in forgotten})
    return states
