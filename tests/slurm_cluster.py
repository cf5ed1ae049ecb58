"""A real one-node Slurm cluster under a temporary folder: munged with its own key and socket,
slurmctld and slurmd on free loopback ports, stopped by their pids.

Used by the session fixture in tests/test_slurm.py; runnable by hand too
(``python tests/slurm_cluster.py DIR`` starts one and prints the SLURM_CONF to export).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
START_TIMEOUT_S = 60.0


def slurm_installed() -> bool:
    return all(shutil.which(name) for name in (*DAEMONS, "sbatch", "scontrol", "squeue", "scancel"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


@dataclass
class LocalSlurm:
    """The daemons' pids and the files a client needs (SLURM_CONF)."""

    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o755)  # munged wants its socket reachable
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        # The node's real CPU count and (a little less than) its memory: slurmd refuses a node that
        # claims more than it has. The partition oversubscribes its cores (FORCE:4), so a job never
        # waits for cores that another test's job holds; each job takes 256 MB unless it asks more.
        self.conf.write_text(f"""\
ClusterName=cnnbenchtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SrunPortRange={_free_port()}-{_free_port()}
AuthType=auth/munge
AuthInfo=socket={self.root}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MailProg=/bin/true
DefMemPerNode=256
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
KillWait=2
OverTimeLimit=0
InactiveLimit=0
MinJobAge=600
SlurmdTimeout=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={int(_memory_mb() * 0.8)} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP
""")

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.stdout", "w")  # noqa: SIM115 - lives as long as the daemon
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **self.env})
        self.pids[name] = proc.pid

    def start(self) -> None:
        try:
            self._start_all()
        except BaseException:
            self.stop()  # nothing outlives a failed start
            raise

    def _start_all(self) -> None:
        self.write_config()
        munge = self.root / "munge"
        self._start("munged", ["munged", "--foreground", "--force", f"--socket={munge}/munge.socket",
                               f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid",
                               f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"])
        self._wait_for(lambda: (munge / "munge.socket").exists(), "munged socket")
        self._start("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
        self._wait_for(lambda: self._scontrol("ping").returncode == 0 and
                       "UP" in self._scontrol("ping").stdout, "slurmctld")
        self._start("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait_for(self._node_idle, "slurmd (node idle)")

    def _scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=20,
                              env={**os.environ, **self.env})

    def _node_idle(self) -> bool:
        out = self._scontrol("show", "node", self.node).stdout
        return "State=IDLE" in out

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, pid in self.pids.items():
                if not _alive(pid):
                    raise RuntimeError(f"{name} exited while waiting for {what}; logs in {self.root}:\n"
                                       f"{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} not ready after {START_TIMEOUT_S:.0f} s; logs in {self.root}:\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.stdout")):
            parts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(parts)

    def cancel_all(self, timeout_s: float = 30.0) -> None:
        """scancel every job of this cluster and wait until slurmd has ended them: a job's
        slurmstepd would outlive slurmd otherwise."""
        env = {**os.environ, **self.env}
        if not _alive(self.pids.get("slurmctld", -1)):
            return
        subprocess.run(["scancel", "--full", "--user", str(os.getuid())], env=env, capture_output=True, timeout=20)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            queue = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                   timeout=20)
            if queue.returncode != 0 or not queue.stdout.strip():
                return
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM each daemon by its pid (slurmd first), SIGKILL what is left after a grace."""
        for name in reversed(DAEMONS):
            pid = self.pids.get(name)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        self.pids.clear()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    import sys

    cluster = LocalSlurm(Path(sys.argv[1]).resolve())
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf}  # pids: {cluster.pids}")
