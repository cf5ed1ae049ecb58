"""Starts one run as a fresh process tree with the backend's layout and collects its outcome.

Frameworks never share a process with each other or with the launcher: PyTorch runs N processes
under torchrun, TensorFlow and JAX one process per host that owns all its devices. Emulation
flags and device visibility go into the environment before the framework is imported. The tree
runs in its own session, so a timeout, a crash of one rank or a Ctrl-C kills all of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from cnnbench.backend import Layout
from cnnbench.backend import load as load_backend
from cnnbench.data.loader import SKIP_LOG_ENV, read_skip_log
from cnnbench.runs import Outcome, Run

# Workers start here, so that `python -m cnnbench.run.worker` finds the package also where it is not
# installed (a checkout copied to a GPU machine and run as `python3 -m cnnbench.cli`).
REPO_ROOT = Path(__file__).resolve().parents[2]

KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 60
STACKS_SUFFIX = ".stacks"  # a worker's Python stacks, written on SIGUSR1 (cnnbench.run.worker)
STACKS_WAIT_S = 1.0
PID_SUFFIX = ".pid"  # each worker's pid, written as it starts (cnnbench.run.worker)


def cpu_threads_per_process(processes: int) -> int:
    """Emulated devices split the cores; oversubscribing threads would measure contention."""
    return max(1, (os.cpu_count() or 1) // max(processes, 1))


def worker_command(run: Run, layout: Layout, run_json: Path, result_json: Path,
                   extra: list[str]) -> list[str]:
    worker = ["-m", "cnnbench.run.worker", str(run_json), str(result_json), *extra]
    if not layout.torchrun:
        return [sys.executable, *worker]
    if run.hosts > 1:
        # --coordinator may list every host (TF_CONFIG needs them all); host 0's comes first.
        addr, port = run.coordinator.split(",")[0].rsplit(":", 1)
        # Static rendezvous keeps node rank = host rank, so global rank 0 (the writer) is on host 0.
        place = ["--nnodes", str(run.hosts), "--node-rank", str(run.host_rank),
                 "--master-addr", addr, "--master-port", port]
    else:
        place = ["--standalone", "--nnodes", "1"]
    return [sys.executable, "-m", "torch.distributed.run", *place,
            "--nproc-per-node", str(layout.processes), "--max-restarts", "0", *worker]


def _recorded_workers(workdir: Path | None) -> list:
    """The worker processes that wrote their pid into this run's folder and still run it (a pid can be
    reused: only a process whose command line names this folder counts). Not their DataLoader children,
    not torchrun."""
    import psutil

    found = []
    for path in sorted(workdir.glob(f"*{PID_SUFFIX}")) if workdir else []:
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            worker = psutil.Process(int(path.read_text()))
            if str(workdir) in " ".join(worker.cmdline()):
                found.append(worker)
    return found


def _kill_tree(proc: subprocess.Popen, workdir: Path | None = None) -> None:
    """SIGTERM the run's session, every descendant and every worker recorded in ``workdir``, then
    SIGKILL whatever outlives the grace."""
    import psutil

    try:
        leader = psutil.Process(proc.pid)
        family = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    known = {member.pid for member in family}
    for worker in _recorded_workers(workdir):
        with contextlib.suppress(psutil.NoSuchProcess):
            family += [p for p in (worker, *worker.children(recursive=True)) if p.pid not in known]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.send_signal(sig)
        _, family = psutil.wait_procs(family, timeout=KILL_GRACE_S)
        if not family:
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


def _dump_worker_stacks(workdir: Path) -> str:
    """Ask every worker of a run that timed out for its stacks; the text, one header per rank.

    Only the recorded workers are signalled (a worker writes its pid once its SIGUSR1 handler is in
    place): their DataLoader children are forks whose stacks say nothing, and torchrun would take
    SIGUSR1 as a kill.
    """
    workers = _recorded_workers(workdir)
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGUSR1)
    if not workers:
        return ""
    time.sleep(STACKS_WAIT_S)  # faulthandler writes from the signal handler, at once
    parts = []
    for path in sorted(workdir.glob(f"*{STACKS_SUFFIX}")):
        text = path.read_text(errors="replace").strip()
        if text:
            rank = path.name.removesuffix(STACKS_SUFFIX).rsplit(".", 1)[-1]
            parts.append(f"--- {rank}: Python stacks at the timeout ---\n{text}")
    return "\n".join(parts)


def _pump(stream, tail: deque, echo: bool) -> None:
    for line in iter(stream.readline, ""):
        tail.append(line.rstrip("\n"))
        if echo:
            sys.stderr.write(line)
            sys.stderr.flush()


def _first_rank_error(workdir: Path) -> str:
    errors = []
    for path in workdir.glob("*.err"):
        try:
            errors.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    if not errors:
        return ""
    first = min(errors, key=lambda e: e["time"])
    return f"rank {first['rank']}: {first['error']}"


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def telling_error_line(tail: Iterable[str]) -> str:
    """The most telling line of a failed run's log: a C++ abort's message first (torchrun's summary
    of a rank killed by a signal says only "error_file: <N/A>"), else the last error or exception."""
    lines = [line.strip() for line in tail if line.strip()]
    for marker in ("what():", "terminate called"):
        found = [text for text in lines if marker in text]
        if found:
            return found[-1][:500]
    for text in reversed(lines):
        if ("Error" in text or "error" in text or "Exception" in text) and not text.startswith("error_file"):
            return text[:500]
    return ""


# A run's temporary folder is named after the launching process: cnnbench-<pid>-<random>.
_RUN_FOLDER = re.compile(r"^cnnbench-(?:probe-)?(\d+)-")


@contextlib.contextmanager
def run_folder(prefix: str = "cnnbench-") -> Iterator[Path]:
    """A temporary folder for one run's files (run.json, result.json, the ranks' errors), removed on
    every way out: ok, failed, timed out, an exception, Ctrl-C or SIGTERM. A launcher killed outright
    (SIGKILL) cannot clean up, so every new run first removes the folders of launchers that are gone."""
    remove_orphaned_run_folders()
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        yield folder
    finally:
        for _ in range(3):  # a rank that was just killed may have written one last file meanwhile
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                break
            time.sleep(0.2)


def remove_orphaned_run_folders(root: Path | None = None) -> list[Path]:
    """Remove this user's run folders whose launching process no longer exists; returns them."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob("cnnbench-*"):
        found = _RUN_FOLDER.match(folder.name)
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if found and mine and not _alive(int(found.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def launch(run: Run, *, verbose: bool = False, probe: tuple[Path, Path] | None = None) -> Outcome:
    """Run one configuration in a fresh process tree; never raises for worker failures."""
    layout = load_backend(run.backend).launch_layout(run)
    with run_folder() as workdir:
        run_json, result_json = workdir / "run.json", workdir / "result.json"
        run_json.write_text(run.to_json())
        extra = ["--probe", str(probe[0]), str(probe[1])] if probe else []
        env = {**os.environ, **layout.env, "PYTHONUNBUFFERED": "1"}
        # Keep NVLink multicast off in every process (it can take shared GPUs out of service).
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
        env[SKIP_LOG_ENV] = str(workdir / "skipped_inputs.log")
        cmd = worker_command(run, layout, run_json, result_json, extra)
        tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                cwd=REPO_ROOT)
        reader = threading.Thread(target=_pump, args=(proc.stdout, tail, verbose), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=run.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stacks = _dump_worker_stacks(workdir)
            _kill_tree(proc, workdir)
        except BaseException:  # Ctrl-C or SIGTERM in the launcher: take the workers down too
            _kill_tree(proc, workdir)
            raise
        else:
            if proc.returncode != 0:
                _kill_tree(proc, workdir)  # a rank may have left children behind, or torchrun its ranks
        reader.join(timeout=5)
        wall = time.perf_counter() - start
        skipped = read_skip_log(workdir / "skipped_inputs.log")
        if timed_out:
            error = f"timed out after {run.timeout_s:g} s (timeout_s); process tree killed"
            if stacks:  # where it hung: printed whole, the row keeps the one-line error
                sys.stderr.write(stacks + "\n")
                error += "; the workers' stacks are printed above"
            return Outcome("failed", error=error, wall_s=wall, log_tail=list(tail), skipped_inputs=skipped)
        # Only global rank 0 (on host 0) writes a result; other hosts succeed by exiting cleanly.
        if proc.returncode == 0 and (probe or result_json.exists() or run.host_rank != 0):
            result = json.loads(result_json.read_text()) if result_json.exists() else {}
            return Outcome("ok", result=result, wall_s=wall, log_tail=list(tail), skipped_inputs=skipped)
        reported = _first_rank_error(workdir)
        error = reported or telling_error_line(tail) or f"worker failed: {_exit_reason(proc.returncode)}"
        return Outcome("failed", error=error, wall_s=wall, log_tail=list(tail), worker_reported=bool(reported),
                       skipped_inputs=skipped)
