"""The ``cnnbench`` command."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from backends import BACKEND_NAMES, REGISTRY
from cnnbench import envinfo
from cnnbench.errors import UserError
from cnnbench.model.facts import MODELS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO_ROOT / "experiments" / "quickstart.toml"
DEFAULT_OUT = Path("results") / "runs.csv"

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train the same CNN data-parallel under PyTorch, TensorFlow and JAX; "
                       "one timing protocol, one CSV row per run.")


def _parse_backends(values: list[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            if name == "all":
                names.extend(BACKEND_NAMES)
            elif name in REGISTRY:
                names.append(name)
            else:
                raise UserError(f"--backend: unknown backend {name!r}; expected one of "
                                f"{', '.join(BACKEND_NAMES)} or all")
    return tuple(dict.fromkeys(names))


def _parse_devices(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--devices: expected comma-separated integers such as 1,2,4, found {text!r}") from None
    if any(n < 1 for n in counts):
        raise UserError(f"--devices: device counts must be >= 1, found {text!r}")
    return counts


def _check_device(device: str | None) -> None:
    if device not in (None, "cpu", "gpu"):
        raise UserError(f"--device: expected cpu or gpu, found {device!r}")


SpecArg = Annotated[Optional[Path], typer.Argument(help="Experiment TOML (default: experiments/quickstart.toml).")]
BackendOpt = Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="Backend(s) to run, or all.")]
DevicesOpt = Annotated[Optional[str], typer.Option(help="Device counts, e.g. 1,2,4 (overrides the spec).")]
OutOpt = Annotated[Path, typer.Option(help="Results CSV to append to.")]
DeviceOpt = Annotated[Optional[str], typer.Option(help="cpu or gpu (overrides the spec's device).")]
PeakTflopsOpt = Annotated[Optional[float], typer.Option(help="Device peak TFLOP/s for the mfu column.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Stream worker output.")]
NoReportOpt = Annotated[bool, typer.Option("--no-report", help="Do not regenerate the charts.")]


@app.command()
def run(
    spec: SpecArg = None,
    backend: BackendOpt = None,
    devices: DevicesOpt = None,
    out: OutOpt = DEFAULT_OUT,
    trials: Annotated[Optional[int], typer.Option(min=1, help="Trials (overrides the spec).")] = None,
    device: DeviceOpt = None,
    compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile",
                                                    help="Override the spec's compile switch.")] = None,
    hosts: Annotated[int, typer.Option(min=1, help="Hosts taking part (run this on each).")] = 1,
    host_rank: Annotated[int, typer.Option(min=0, help="This host's rank, 0..hosts-1.")] = 0,
    coordinator: Annotated[str, typer.Option(help="ADDR:PORT of host 0, for hosts > 1.")] = "",
    peak_tflops: PeakTflopsOpt = None,
    profile: Annotated[Optional[Path], typer.Option(
        help="Trace the first timed window of each run into DIR/<run_id> (left out of the timing).")] = None,
    verbose: VerboseOpt = False,
    no_report: NoReportOpt = False,
) -> None:
    """Run an experiment: every backend x strategy x device count x trial, one row each."""
    from cnnbench.run.execute import execute_runs
    from cnnbench.runs import expand
    from cnnbench.spec import load_spec

    if hosts > 1 and not coordinator:
        raise UserError("--coordinator: required with --hosts > 1 (ADDR:PORT of host 0)")
    if host_rank >= hosts:
        raise UserError(f"--host-rank: expected 0..{hosts - 1}, found {host_rank}")
    _check_device(device)
    parsed = load_spec(spec or DEFAULT_SPEC)
    if compile is not None:
        parsed = dataclasses.replace(parsed, compile=compile)
    runs = expand(parsed, backends=_parse_backends(backend), devices=_parse_devices(devices),
                  trials=trials, hosts=hosts, host_rank=host_rank, coordinator=coordinator,
                  device_kind=device)
    if profile:
        if parsed.timing.windows < 2:
            raise UserError(f"--profile: needs timing.windows >= 2 (the traced window is left out of the "
                            f"timing); {parsed.source} has {parsed.timing.windows}")
        runs = [dataclasses.replace(r, profile_dir=str(profile.resolve() / r.run_id)) for r in runs]
    rows = execute_runs(runs, out, verbose=verbose, peak_tflops=peak_tflops)
    _finish(rows, out, wrote=host_rank == 0, report=not no_report)


@app.command()
def sweep(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML.")],
    backend: BackendOpt = None,
    devices: DevicesOpt = None,
    out: OutOpt = DEFAULT_OUT,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rerun runs that already have an ok row.")] = False,
    device: DeviceOpt = None,
    peak_tflops: PeakTflopsOpt = None,
    verbose: VerboseOpt = False,
    no_report: NoReportOpt = False,
) -> None:
    """Run every run of a spec that has no ok row in OUT yet: an interrupted sweep resumes."""
    from cnnbench.run.execute import execute_runs, split_done
    from cnnbench.runs import expand
    from cnnbench.spec import load_spec

    _check_device(device)
    runs = expand(load_spec(spec), backends=_parse_backends(backend), devices=_parse_devices(devices),
                  device_kind=device, check_devices=not dry_run)
    todo, done = (runs, []) if force else split_done(runs, out)
    if dry_run:
        print(f"{spec}: {len(runs)} run(s), {len(todo)} to run, {len(done)} already in {out}")
        for index, item in enumerate(runs, start=1):
            state = "run" if item in todo else "done"
            print(f"  {index:3d}. [{state}] {item.label} scaling={item.scaling} global_batch={item.global_batch}"
                  f"{_gap_note(item)}")
        return
    if done:
        print(f"skipping {len(done)} run(s) already ok in {out}", file=sys.stderr)
    rows = execute_runs(todo, out, verbose=verbose, peak_tflops=peak_tflops)
    _finish(rows, out, wrote=True, report=not no_report)


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Experiment TOML.")],
             device: Annotated[Optional[str], typer.Option(help="cpu or gpu.")] = None) -> None:
    """Check a spec and print the runs it expands to (device availability is not checked)."""
    from cnnbench.runs import expand
    from cnnbench.spec import load_spec

    runs = expand(load_spec(spec), device_kind=device, check_devices=False)
    print(f"{spec}: valid, {len(runs)} run(s)")
    for index, item in enumerate(runs, start=1):
        print(f"  {index:3d}. {item.label}  lr={item.lr:.4g} steps={item.total_steps}{_gap_note(item)}")


def _gap_note(run) -> str:
    """A run its framework cannot do is planned as a skipped row: the plan says so."""
    from cnnbench.runs import not_supported

    reason = not_supported(run)
    return f"  -> skipped row ({reason})" if reason else ""


@app.command()
def report(
    csv: Annotated[Optional[list[Path]], typer.Argument(help="Result CSVs (default: results/runs.csv).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Folder for the charts (default: next to the first CSV).")] = None,
    model: Annotated[Optional[str], typer.Option(help="Only this model.")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Only this dataset.")] = None,
    device_type: Annotated[Optional[str], typer.Option(help="Only cpu, cpu-emulated or gpu rows.")] = None,
) -> None:
    """Regenerate comparison charts (PNG + SVG) and summary.md from result CSVs."""
    from cnnbench.report.train import build_report, report_dir_for

    paths = list(csv or [DEFAULT_OUT])
    made = build_report(paths, out or report_dir_for(paths[0]), model, dataset, device_type)
    for name, files in made.files.items():
        print(f"{name}: {', '.join(map(str, files))}")


def _finish(rows: list[dict], out: Path, wrote: bool, report: bool) -> None:
    """The end of `run` and `sweep`: the table, the charts, exit code 1 if any run failed."""
    from cnnbench.run.execute import format_table

    if rows:
        print(format_table(rows))
    if wrote:  # on hosts other than 0 nothing was appended
        print(f"appended {len(rows)} row(s) to {out}")
        if report:
            _report_after_run(out)
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)


def _report_after_run(out: Path) -> None:
    from cnnbench.errors import ResultsFileError
    from cnnbench.report.train import build_report, report_dir_for

    try:
        made = build_report([out], report_dir_for(out))
        print(f"charts in {made.out_dir}", file=sys.stderr)
    except ResultsFileError as exc:  # e.g. no ok rows yet: nothing to draw
        print(f"cnnbench: no charts: {exc}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - the rows are written; a chart bug must not hide that
        print(f"cnnbench: charts failed: {type(exc).__name__}: {exc}", file=sys.stderr)


@app.command()
def infer(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML with [infer] (and [serve]) tables.")],
    backend: BackendOpt = None,
    out: Annotated[Path, typer.Option(help="Results CSV to append to.")] = Path("results") / "infer.csv",
    device: DeviceOpt = None,
    profile: Annotated[Optional[Path], typer.Option(help="Trace one window of the largest sweep batch here.")] = None,
    peak_tflops: PeakTflopsOpt = None,
    verbose: VerboseOpt = False,
    no_report: NoReportOpt = False,
) -> None:
    """Inference: batch-size sweep, optimisation ablation and dynamic batching under load."""
    from cnnbench.infer.plan import expand_infer
    from cnnbench.run.execute import INFER_TABLE, execute_infer, format_table
    from cnnbench.spec import load_spec

    _check_device(device)
    runs, skipped = expand_infer(load_spec(spec), backends=_parse_backends(backend), device_kind=device,
                                 profile_dir=str(profile.resolve()) if profile else "")
    rows = execute_infer(runs, skipped, out, verbose=verbose, peak_tflops=peak_tflops)
    print(format_table(rows, INFER_TABLE))
    print(f"appended {len(rows)} row(s) to {out}")
    if not no_report:
        _report_after_run(out)
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)


@app.command()
def upgrade(csv: Annotated[list[Path], typer.Argument(help="Results CSVs written by an older cnnbench.")]) -> None:
    """Rewrite older results files in the current row format (added columns left empty)."""
    from cnnbench.table.store import upgrade_file

    for path in csv:
        count = upgrade_file(path)
        print(f"{path}: {'upgraded ' + str(count) + ' row(s)' if count else 'already current'}")


@app.command()
def samples(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write images/CLASS/*.jpg and video.mp4 into.")],
    size: Annotated[tuple[int, int], typer.Option(help="Image and frame size H W.")] = (375, 500),
    per_class: Annotated[int, typer.Option(min=1, help="JPEGs per class.")] = 8,
    classes: Annotated[int, typer.Option(min=1, help="Classes (one scikit-image photograph each).")] = 4,
    video_frames: Annotated[int, typer.Option(min=0, help="Frames of the sample video (0: no video).")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of the crops and flips.")] = 0,
) -> None:
    """Write sample data from photographs scikit-image ships (no download): a JPEG folder and a video."""
    from cnnbench.data.samples import write_image_folder, write_video

    images = write_image_folder(out_dir / "images", per_class, classes, size, seed)
    print(f"{out_dir / 'images'}: {len(images)} JPEGs of {size[0]}x{size[1]} in {classes} class folders")
    if video_frames:
        video = write_video(out_dir / "video.mp4", video_frames, size)
        print(f"{video}: {video_frames} frames of {size[0]}x{size[1]}")


@app.command()
def parity(
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="Model(s); default all.")] = None,
    backend: BackendOpt = None,
) -> None:
    """Prove the models are the same in every installed backend (counts, forward, one SGD step)."""
    from cnnbench.parity.check import format_checks, installed_backends, run_parity

    models = model or list(MODELS)
    for name in models:
        if name not in MODELS:
            raise UserError(f"--model: unknown model {name!r}; expected one of {', '.join(MODELS)}")
    backends = list(_parse_backends(backend) or installed_backends())
    if len(backends) < 2:
        raise UserError(f"parity needs two installed backends, found {', '.join(backends) or 'none'}")
    checks = run_parity(models, backends)
    print(format_checks(checks))
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    if failed:
        raise typer.Exit(1)


@app.command(name="list")
def list_things() -> None:
    """Models, datasets and backends (with their strategies and installed versions)."""
    from cnnbench.data.catalog import DATASETS

    print("models:")
    for info in MODELS.values():
        print(f"  {info.name:15s} {info.summary}")
    print("datasets:\n  " + ", ".join(DATASETS))
    print("backends:")
    for entry in REGISTRY.values():
        version = envinfo.backend_version(entry.name) or "not installed"
        print(f"  {entry.name:11s} {version:22s} strategies: {', '.join(entry.strategies)}")


@app.command()
def env() -> None:
    """Frameworks installed and the devices each one sees (each asked in its own process)."""
    print(f"python {envinfo.python_version()} on {envinfo.host_name()}, cnnbench {envinfo.git_sha() or '?'}")
    for entry in REGISTRY.values():
        versions = envinfo.backend_versions(entry.name)
        if not envinfo.backend_version(entry.name):
            print(f"{entry.name}: not installed ({entry.install_hint})")
            continue
        code = f"import json, {entry.module} as m; print(json.dumps(m.devices()))"
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  timeout=300, cwd=REPO_ROOT)
            found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
        except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
            found = None
        listed = ", ".join(found) if found else "could not list devices"
        print(f"{entry.name}: {', '.join(f'{k} {v}' for k, v in versions.items())}; devices: {listed}")


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupted() -> None:
    print("cnnbench: interrupted; workers stopped, no partial row written", file=sys.stderr)
    sys.exit(130)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        code = app(standalone_mode=False)
    except UserError as exc:
        print(f"cnnbench: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            _interrupted()
        # Usage errors of the command line (typer vendors click): print their message, exit 2.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            sys.exit(2)
        raise
    if code == 130:  # typer turns Ctrl-C (and our SIGTERM) into exit code 130
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
