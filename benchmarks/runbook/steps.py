"""What a section of the GPU runbook does with its time: bounded steps, spec variants, skips said aloud.

A section gets one ``Context``. Every command it starts goes through ``Context.run``: its own timeout
(never past what is left of the section's budget), its own process group (killed whole on timeout, so
no compile worker outlives it), its output appended to the section's log and shown in its last lines
when it fails. A step that cannot run says so through ``Context.skip`` and appears in the summary the
runner prints at the end.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from spec_variant import write_variant  # noqa: E402

from runbook import sidefile  # noqa: E402

# A section's budget: the 9-minute sections fit the 10-minute calls of a rented GPU with start-up to spare.
SECTION_BUDGET_S = 540.0
# On a CPU, SMOKE compiles and imports are far slower than on the GPU host; time is not the point there.
SMOKE_SCALE = 3.0
TIMEOUT_RC = 124
# A group of steps starts only with this much more time left than the longest group so far took: the
# groups of one section differ by a few percent (DDP pairs on an H100: 176 and 173 s; the third needed 200).
GROUP_MARGIN = 1.15
WHEELS = BENCHMARKS / "gpu_wheels.txt"

# SMOKE: the same code paths at sizes a CPU runs in seconds.
SMOKE_MODEL = {"device": "cpu", "model": "smallcnn", "image_size": 16, "channels": 3, "num_classes": 10}
SMOKE_TRAIN = {**SMOKE_MODEL, "per_device_batch": 4, "timing.warmup_steps": 1, "timing.windows": 2,
               "timing.window_steps": 2, "timeout_s": 400}
SMOKE_INFER = {**SMOKE_MODEL, "infer.batch_sizes": [2], "infer.latency_samples": 2, "timing.warmup_steps": 1,
               "timing.windows": 2, "timing.window_steps": 2, "timeout_s": 400}


@dataclass
class Step:
    name: str
    rc: int
    seconds: float
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass
class Context:
    """One section's run: where rows go, the shared caches, the clock, the mode."""

    section: str
    out: Path            # results folder (results/ or --out)
    cache: Path          # compile caches and sample data, shared by the sections of one call
    logs: Path
    smoke: bool
    budget_s: float = SECTION_BUDGET_S
    only: tuple[str, ...] = ()  # run only the steps whose name contains one of these (--only)
    python: str = sys.executable
    begun: float = field(default_factory=time.monotonic)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    matched: set[str] = field(default_factory=set)  # the --only texts some step's name contained
    group_s: list[float] = field(default_factory=list)  # how long each group of steps took (run_group)

    def __post_init__(self) -> None:
        self.work = self.cache / "specs" / self.section  # spec variants: inputs, not results
        for folder in (self.out, self.work, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        self.log = self.logs / f"{self.section}.log"
        if self.smoke:
            self.budget_s *= SMOKE_SCALE

    # -- time and messages -------------------------------------------------------------------------
    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.begun)

    def say(self, text: str) -> None:
        print(f"[{self.section} {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def skip(self, step: str, reason: str) -> None:
        self.skipped.append(f"{step}: {reason}")
        self.say(f"{step}: skipped ({reason})")

    # -- environment -------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Every step's environment: the checkout first on the path, the compile caches of this call
        (cnnbench's runs get the same folders through compile_cache_dir; the plain peers through these)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update(TORCHINDUCTOR_CACHE_DIR=str(self.cache / "torch"), TORCHINDUCTOR_FX_GRAPH_CACHE="1",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="1", JAX_COMPILATION_CACHE_DIR=str(self.cache / "jax"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
                   # SMOKE's tiny samples never stand in for the real ones, whatever the cache folder
                   CNNBENCH_DATA=str(self.cache / ("data-smoke" if self.smoke else "data")), PYTHONUNBUFFERED="1")
        if self.smoke:
            env.update(SMOKE="1", CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
        return env

    def missing(self, *modules: str) -> list[str]:
        return [m for m in modules if importlib.util.find_spec(m) is None]

    # -- steps -------------------------------------------------------------------------------------
    def run_group(self, group: str, steps: Sequence[str], body: Callable[[], None]) -> None:
        """BODY runs STEPS that mean nothing apart (a cnnbench row and the plain peer it is compared with):
        all of them or none. It starts only when what is left of the budget covers the longest group this
        section has run so far, plus a margin (the groups of a section are alike: three DDP modes, three
        compile scopes); the first group always starts. Otherwise a skip names the --only that reruns it in a
        call of its own (on a cold H100, options-ddp spent 110 s of its last 190 on a cnnbench half whose peer
        then ran out of budget, a row compared with nothing)."""
        if not any(self.asked(step) for step in steps):
            body()  # --only leaves the group out: its steps say so themselves, and its time says nothing
            return
        if self.group_s:
            need = max(self.group_s) * GROUP_MARGIN
            if self.left() < need:
                self.skip(group, f"a group of this section took up to {max(self.group_s):.0f} s, "
                                 f"{max(self.left(), 0):.0f} s of the budget is left; rerun it alone: "
                                 f"benchmarks/gpu.py {self.section} --only '{group}'")
                return
        begun = time.monotonic()
        body()
        self.group_s.append(time.monotonic() - begun)

    def asked(self, name: str) -> bool:
        """Whether --only leaves step NAME in (every step when --only is not given)."""
        hits = {text for text in self.only if text in name}
        self.matched |= hits
        return not self.only or bool(hits)

    def run(self, name: str, cmd: Sequence[Any], limit_s: float, *, cwd: Path | None = None,
            env: dict[str, str] | None = None, quiet: bool = False, needed: bool = False) -> Step | None:
        """CMD under min(limit, time left); None (and a skip) when too little is left to start it, or when
        --only leaves it out. NEEDED marks a step the others need (wheels, sample data): --only keeps it."""
        if not needed and not self.asked(name):
            self.skip(name, "not asked for (--only)")
            return None
        limit = limit_s * (SMOKE_SCALE if self.smoke else 1.0)
        left = self.left()
        if left < 20:
            self.skip(name, f"section budget of {self.budget_s:.0f} s spent")
            return None
        limit = min(limit, left)
        argv = [str(c) for c in cmd]
        started = time.monotonic()
        with self.log.open("a") as log:
            log.write(f"\n== {name} (limit {limit:.0f} s): {' '.join(argv)}\n")
            log.flush()
            mark = log.tell()
            process = subprocess.Popen(argv, cwd=cwd or ROOT, env={**self.env(), **(env or {})}, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            rc = _wait(process, limit)
        seconds = time.monotonic() - started
        with self.log.open() as log:
            log.seek(mark)
            output = log.read()
        step = Step(name, rc, seconds, output)
        if rc == TIMEOUT_RC:
            self.failed.append(f"{name}: stopped at its limit of {limit:.0f} s")
        elif rc:
            self.failed.append(f"{name}: exit {rc}")
        if not quiet or rc:
            self.say(f"{name}: {'ok' if rc == 0 else 'TIMEOUT' if rc == TIMEOUT_RC else f'exit {rc}'} "
                     f"in {seconds:.0f} s")
        if rc:
            tail = [line for line in output.splitlines() if line.strip()][-8:]
            print("\n".join(f"    | {line[:200]}" for line in tail), flush=True)
        return step

    def cnnbench(self, name: str, command: str, spec: Path | str, rows: str, limit_s: float,
                 *args: str) -> Step | None:
        """`cnnbench run|infer SPEC --out OUT/ROWS` on one device."""
        devices = ("--devices", "1") if command == "run" else ()
        return self.run(name, [self.python, "-m", "cnnbench.cli", command, spec, *devices, "--out", self.out / rows,
                               "--no-report", *args], limit_s)

    def keep(self, produced: Path, rows: str, **extra: Any) -> int:
        """Append the records a step wrote to PRODUCED (JSON or JSON lines) to OUT/ROWS, stamped with the
        commit; the count kept (0 when the step wrote nothing)."""
        records = sidefile.read(produced)
        produced.unlink(missing_ok=True)
        return sidefile.append(self.out / rows, records, **extra)

    def scratch(self, name: str) -> Path:
        """A fresh path in this section's work folder for a step's own output."""
        path = self.work / name
        path.unlink(missing_ok=True)
        return path

    def spec(self, base: str | Path, name: str, changes: dict[str, Any] | None = None,
             smoke: dict[str, Any] | None = None) -> Path:
        """A copy of BASE named NAME with the call's compile cache and CHANGES (and in SMOKE mode the
        SMOKE changes, tiny sizes on the CPU)."""
        all_changes = {"name": name, "compile_cache_dir": str(self.cache), **(changes or {})}
        if self.smoke:
            all_changes.update(smoke or {})
        return write_variant(ROOT / base, self.work / f"{name}.toml", all_changes)


def _wait(process: subprocess.Popen, limit: float) -> int:
    """The exit code, or TIMEOUT_RC after SIGTERM (then SIGKILL) to the whole process group."""
    try:
        return process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        stop_group(process, 10)
        return TIMEOUT_RC


def stop_group(process: subprocess.Popen, grace_s: float) -> int | None:
    """SIGTERM to the process group PROCESS leads (started with start_new_session), SIGKILL after GRACE_S;
    the leader's exit code (None if it outlived both). Children in the group (a server's workers) go too."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
    return None


def install_wheels(ctx: Context, modules: Sequence[str]) -> list[str]:
    """Install the carried wheels (.whl/ at the repository root) where MODULES are missing; what is
    still missing afterwards, each said with the command that provides it."""
    missing = ctx.missing(*modules)
    folder = ROOT / ".whl"
    if missing and folder.is_dir():
        # only what is missing (pinned as gpu_wheels.txt pins it): one absent wheel must not stop the others
        pins = {line.split("==")[0].strip().lower().replace("-", "_"): line.strip()
                for line in WHEELS.read_text().splitlines() if line.strip() and not line.startswith("#")}
        wanted = [pins.get(module.lower(), module) for module in missing]
        ctx.run("install wheels", [ctx.python, "-m", "pip", "install", "--no-index", "--find-links", folder,
                                   *wanted], 300, needed=True)
        importlib.invalidate_caches()
        missing = ctx.missing(*modules)
    return missing


def wheels_hint() -> str:
    return (f"pip install --no-index --find-links .whl -r {WHEELS.relative_to(ROOT)} (the wheels from `pip download "
            f"-r {WHEELS.relative_to(ROOT)} -d .whl` on a machine with an index)")
