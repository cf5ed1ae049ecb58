"""Inside a Slurm allocation: which cnnbench host this task is, how many there are, and where
host 0's rendezvous listens -- the values `cnnbench run --hosts/--host-rank/--coordinator` takes.

One task per cnnbench host (the generated script starts them with one ``srun``). With one task per
node, as on a real cluster, SLURM_PROCID equals SLURM_NODEID and SLURM_NTASKS equals SLURM_NNODES;
the task variables are used because they stay right when several tasks share one node (the test
machine stands in for two nodes that way). The coordinator is the first host of SLURM_JOB_NODELIST,
expanded by ``scontrol show hostnames`` (Slurm's own parser of ``node[01-04,07]``), and the port that
the batch script found free on that host (CNNBENCH_COORDINATOR_PORT).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

PORT_VARIABLE = "CNNBENCH_COORDINATOR_PORT"


class AllocationError(RuntimeError):
    """The environment is not a Slurm task of a cnnbench job (a variable is missing or malformed)."""


@dataclass(frozen=True)
class Placement:
    """This task's place in the run: what --hosts, --host-rank and --coordinator would say."""

    hosts: int
    host_rank: int
    coordinator: str  # host:port of every cnnbench host, comma-separated, host 0 first


def expand_hostnames(nodelist: str) -> list[str]:
    """``node[01-02],gpu7`` -> ``['node01', 'node02', 'gpu7']``, by Slurm itself."""
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AllocationError(f"scontrol show hostnames failed: {exc}") from None
    names = done.stdout.split()
    if done.returncode != 0 or not names:
        raise AllocationError(f"scontrol show hostnames {nodelist!r}: {done.stderr.strip() or 'no hosts'}")
    return names


def tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE, e.g. ``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise AllocationError(f"SLURM_TASKS_PER_NODE: cannot read {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except KeyError:
        raise AllocationError(f"{name} is not set: not inside a Slurm task (run it under srun)") from None
    except ValueError:
        raise AllocationError(f"{name}: expected an integer, found {env[name]!r}") from None


def placement(env: Mapping[str, str], hostnames: list[str] | None = None) -> Placement:
    """The placement of the task whose environment is ``env`` (os.environ inside ``srun``).

    Tasks are laid out in Slurm's default block distribution: the first node's tasks first. Each
    cnnbench host gets port + its rank, so that hosts sharing a node (the TF_CONFIG workers) differ.
    """
    hosts, rank = _int(env, "SLURM_NTASKS"), _int(env, "SLURM_PROCID")
    port = _int(env, PORT_VARIABLE)
    names = hostnames if hostnames is not None else expand_hostnames(env.get("SLURM_JOB_NODELIST", ""))
    counts = tasks_per_node(env.get("SLURM_TASKS_PER_NODE", str(hosts)))
    task_hosts = [name for name, count in zip(names, counts) for _ in range(count)]
    if len(task_hosts) != hosts:
        raise AllocationError(f"{hosts} tasks (SLURM_NTASKS) but SLURM_TASKS_PER_NODE "
                              f"{env.get('SLURM_TASKS_PER_NODE')!r} over {names} places {len(task_hosts)}")
    if not 0 <= rank < hosts:
        raise AllocationError(f"SLURM_PROCID {rank} is outside 0..{hosts - 1}")
    coordinator = ",".join(f"{name}:{port + index}" for index, name in enumerate(task_hosts))
    return Placement(hosts=hosts, host_rank=rank, coordinator=coordinator)
