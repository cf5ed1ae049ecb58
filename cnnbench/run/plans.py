"""What each command would launch for a spec: the plans `cnnbench validate` prints.

Every command that reads a spec registers a planner here with :func:`planner`: the top-level keys
(tables or fields) that mark a spec as meant for that command, and a function that runs the
command's own parse + expand path (the same functions the command calls, without launching
anything) and describes the result. `validate` runs the planners whose keys the spec has (all of
them when it has several: a spec may be for `run` and `infer` at once), or the one named by
``--for``; a spec with none of the keys is a training spec. A new command with a new table adds
one decorated function below, and `validate` and its test over `experiments/` cover it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cnnbench.errors import UserError
from cnnbench.spec import Spec, load_spec

TRAINING = "run"


@dataclass(frozen=True)
class Plan:
    """A headline (how many runs) and one line per run the command would launch."""

    command: str
    headline: str
    lines: list[str]


@dataclass(frozen=True)
class Planner:
    command: str
    keys: tuple[str, ...]  # top-level spec keys that mean "this spec is for `command`"
    plan: Callable[[Spec, str | None], Plan]


PLANNERS: dict[str, Planner] = {}


def planner(command: str, *, keys: tuple[str, ...]) -> Callable:
    """Register ``fn(spec, device_kind) -> Plan`` as the plan of ``command``."""
    def register(fn: Callable[[Spec, str | None], Plan]) -> Callable[[Spec, str | None], Plan]:
        PLANNERS[command] = Planner(command, keys, fn)
        return fn
    return register


def commands_for(path: Path) -> list[str]:
    """The commands a spec file is meant for, by the keys it has (training when none match)."""
    keys = set(tomllib.loads(path.read_text(encoding="utf-8")))
    found = [p.command for p in PLANNERS.values() if keys & set(p.keys)]
    return found or [TRAINING]


def validate(path: Path, command: str | None = None, device_kind: str | None = None) -> list[Plan]:
    """Parse the spec (every table checked) and plan it for each command it is meant for."""
    if command is not None and command not in PLANNERS:
        raise UserError(f"--for: unknown command {command!r}; expected one of {', '.join(PLANNERS)}")
    spec = load_spec(path)  # refuses a bad file before commands_for reads it
    return [PLANNERS[name].plan(spec, device_kind) for name in ([command] if command else commands_for(path))]


def bad_image_files(spec: Spec) -> str | None:
    """An image folder's files that would not decode (truncated, empty, not images), all listed at once
    (a run stops at the first, or skips each as it meets it): with ``[data] corrupt = "fail"`` a
    DataError, with "skip" the warning to print; None when every file is whole or the data are no folder."""
    from cnnbench.data import catalog, files
    from cnnbench.errors import DataError

    if spec.dataset != "image_folder" or not spec.data_path:
        return None
    index = catalog.scan(spec.dataset, spec.data_path)
    problems = files.incomplete_images(index)
    if not problems:
        return None
    text = f"{spec.data_path}: {files.bad_files_text(problems, len(index))}"
    if spec.data.corrupt != "skip":
        raise DataError(f"{text} ([data] corrupt = \"fail\": a run stops at the first; \"skip\" skips them)")
    return f"warning: {text} ([data] corrupt = \"skip\": runs skip them, counted in skipped_inputs)"


def gap_note(run) -> str:
    """A run its framework cannot do is planned as a skipped row: the plan says so."""
    from cnnbench.expand import not_supported

    reason = not_supported(run)
    return f"  -> skipped row ({reason})" if reason else ""


@planner(TRAINING, keys=("per_device_batch", "global_batch"))
def training_plan(spec: Spec, device_kind: str | None) -> Plan:
    """`cnnbench run` / `sweep`: every backend x strategy x batch x precision x devices x trial."""
    from cnnbench.expand import expand

    runs = expand(spec, device_kind=device_kind, check_devices=False)
    lines = [f"{item.label}  lr={item.lr:.4g} steps={item.total_steps}{gap_note(item)}" for item in runs]
    return Plan("run", f"{len(runs)} run(s) (devices present are not checked)", lines)


@planner("infer", keys=("infer",))
def infer_plan(spec: Spec, device_kind: str | None) -> Plan:
    """`cnnbench infer`: one worker per backend and precision, each with its jobs; skipped variants."""
    from cnnbench.infer.plan import expand_infer

    runs, skipped = expand_infer(spec, device_kind=device_kind)
    lines = [f"{run.backend} infer {run.model} {run.precision} on {run.device_kind}: {job.label}"
             for run in runs for job in run.jobs]
    lines += [f"skipped row: {run.backend} {variant.name} ({reason})" for run, variant, reason in skipped]
    jobs = sum(len(run.jobs) for run in runs)
    return Plan("infer", f"{len(runs)} worker run(s), {jobs} job(s), {len(skipped)} skipped row(s)", lines)


@planner("serve", keys=("serve",))
def serve_plan(spec: Spec, device_kind: str | None) -> Plan:
    """`cnnbench serve`: per backend (one per server process), the model it loads, the batch shapes it
    warms up before it says ready, and where it listens."""
    from cnnbench.infer.batcher import batch_shapes
    from cnnbench.infer.plan import serve_run
    from cnnbench.serve.command import config_from_spec

    config = config_from_spec(spec.serve, {})
    # the batch sizes the server runs, each warmed up before /healthz says ready (none: one image at a time)
    shapes = ", ".join(map(str, batch_shapes(config.max_batch, config.pad_multiple)
                           if config.batching != "none" else [1]))
    lines = []
    for backend in spec.backends:
        run, variant = serve_run(spec, backend, device_kind)
        height, width = run.image_size
        lines.append(f"serve --backend {backend}: {run.model} {run.precision} {height}x{width} on {run.device_kind}, "
                     f"batching {config.batching} (max_batch {config.max_batch}, deadline {config.deadline_ms:g} ms), "
                     f"warms up batch shapes {shapes}; {config.frontends or 'no'} front-end process(es); "
                     f"listens on http://{config.host}:{config.port}")
    several = " (one per process: pass --backend)" if len(spec.backends) > 1 else ""
    return Plan("serve", f"{len(lines)} server(s){several}", lines)
