"""The ``cnnbench`` command."""

from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cnnbench import cli_serve, cli_tools
from cnnbench.cli_help import ClickStyleApp
from cnnbench.cli_options import (
    BackendOpt,
    DeviceOpt,
    DevicesOpt,
    NoReportOpt,
    OutOpt,
    PeakTflopsOpt,
    SpecArg,
    VerboseOpt,
    check_device,
    parse_backends,
    parse_devices,
)
from cnnbench.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO_ROOT / "experiments" / "quickstart.toml"
DEFAULT_OUT = Path("results") / "runs.csv"


app = ClickStyleApp(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
           help="Train the same CNN data-parallel under PyTorch, TensorFlow and JAX; "
                "one timing protocol, one CSV row per run.")


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
    from cnnbench.expand import expand
    from cnnbench.run.execute import execute_runs
    from cnnbench.spec import load_spec

    if hosts > 1 and not coordinator:
        raise UserError("--coordinator: required with --hosts > 1 (ADDR:PORT of host 0)")
    if host_rank >= hosts:
        raise UserError(f"--host-rank: expected 0..{hosts - 1}, found {host_rank}")
    check_device(device)
    parsed = load_spec(spec or DEFAULT_SPEC)
    if compile is not None:
        parsed = dataclasses.replace(parsed, compile=compile)
    runs = expand(parsed, backends=parse_backends(backend), devices=parse_devices(devices),
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
    slurm: Annotated[bool, typer.Option("--slurm", help="Submit each run as a Slurm batch job (scripts kept in "
                                                        "OUT's folder, <out>.slurm/).")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="With --slurm: follow the jobs until every row is in, "
                                                      "then draw the charts.")] = False,
    partition: Annotated[Optional[str], typer.Option(help="With --slurm: #SBATCH --partition.")] = None,
    account: Annotated[Optional[str], typer.Option(help="With --slurm: #SBATCH --account.")] = None,
    qos: Annotated[Optional[str], typer.Option(help="With --slurm: #SBATCH --qos.")] = None,
    constraint: Annotated[Optional[str], typer.Option(help="With --slurm: #SBATCH --constraint.")] = None,
    sbatch: Annotated[Optional[list[str]], typer.Option(
        help="With --slurm: one more #SBATCH line, e.g. --sbatch=--mem=64G (repeatable).")] = None,
) -> None:
    """Run every run of a spec that has no ok row in OUT yet: an interrupted sweep resumes."""
    from cnnbench.expand import expand
    from cnnbench.run.execute import execute_runs, split_done
    from cnnbench.run.plans import gap_note
    from cnnbench.spec import load_spec

    check_device(device)
    if slurm:
        if peak_tflops is not None:
            raise UserError("--peak-tflops: not with --slurm (each job's row takes its GPU's known peak)")
        _slurm_sweep(spec, out, backend=backend, devices=devices, device=device, force=force, dry_run=dry_run,
                     wait=wait, no_report=no_report, overrides=dict(partition=partition, account=account, qos=qos,
                                                                    constraint=constraint, extra=sbatch))
        return
    if wait:
        raise UserError("--wait: only with --slurm")
    runs = expand(load_spec(spec), backends=parse_backends(backend), devices=parse_devices(devices),
                  device_kind=device, check_devices=not dry_run)
    todo, done = (runs, []) if force else split_done(runs, out)
    if dry_run:
        print(f"{spec}: {len(runs)} run(s), {len(todo)} to run, {len(done)} already in {out}")
        for index, item in enumerate(runs, start=1):
            state = "run" if item in todo else "done"
            print(f"  {index:3d}. [{state}] {item.label} scaling={item.scaling} global_batch={item.global_batch}"
                  f"{gap_note(item)}")
        return
    if done:
        print(f"skipping {len(done)} run(s) already ok in {out}", file=sys.stderr)
    rows = execute_runs(todo, out, verbose=verbose, peak_tflops=peak_tflops)
    _finish(rows, out, wrote=True, report=not no_report)


def _slurm_sweep(spec: Path, out: Path, *, backend, devices, device, force: bool, dry_run: bool, wait: bool,
                 no_report: bool, overrides: dict) -> None:
    from cnnbench.cluster.sbatch import with_overrides
    from cnnbench.cluster.sweep import slurm_sweep
    from cnnbench.expand import expand
    from cnnbench.spec import load_spec

    parsed = load_spec(spec)
    # The submitting host is often a login node without GPUs: "auto" means the cluster's GPUs here.
    kind = device or ("gpu" if parsed.device == "auto" else parsed.device)
    runs = expand(parsed, backends=parse_backends(backend), devices=parse_devices(devices), device_kind=kind,
                  check_devices=False)
    rows = slurm_sweep(runs, out, with_overrides(parsed.slurm, **overrides), source=str(spec), repo=REPO_ROOT,
                       wait=wait, force=force, dry_run=dry_run)
    if rows is not None:
        _finish(rows, out, wrote=True, report=wait and not no_report)


@app.command()
def validate(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML (training, [infer]/[serve] or any other "
                                              "command's tables).")],
    device: Annotated[Optional[str], typer.Option(help="cpu or gpu.")] = None,
    for_command: Annotated[Optional[str], typer.Option(
        "--for", help="Plan the spec for this command only (default: every command whose tables or "
                      "fields it has; a spec with none is a training spec).")] = None,
) -> None:
    """Check a spec and print what each command it is for would run (devices present are not checked)."""
    from cnnbench.run.plans import bad_image_files
    from cnnbench.run.plans import validate as plan_spec
    from cnnbench.spec import load_spec

    check_device(device)
    plans = plan_spec(spec, for_command, device)
    warning = bad_image_files(load_spec(spec))
    for plan in plans:
        print(f"{spec}: valid for {plan.command}, {plan.headline}")
        for index, line in enumerate(plan.lines, start=1):
            print(f"  {index:3d}. {line}")
    if warning:
        print(f"cnnbench: {warning}", file=sys.stderr)


@app.command()
def report(
    csv: Annotated[Optional[list[Path]], typer.Argument(help="Result CSVs (default: results/runs.csv).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Folder for the charts (default: next to the first CSV).")] = None,
    model: Annotated[Optional[str], typer.Option(help="Only this model.")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Only this dataset.")] = None,
    device_type: Annotated[Optional[str], typer.Option(help="Only cpu, cpu-emulated or gpu rows.")] = None,
    spread_limit: Annotated[float, typer.Option(
        min=0.0, help="summary.md lists runs whose windows (p90/p10 - 1) or trials spread more than this.")] = 0.2,
) -> None:
    """Regenerate comparison charts (PNG + SVG) and summary.md from result CSVs (history files among
    them, e.g. from results/*.csv, are recognised and read with their results file)."""
    from cnnbench.report.train import build_report, report_dir_for
    from cnnbench.table.store import split_history_files

    paths, notes = split_history_files(list(csv or [DEFAULT_OUT]))
    for note in notes:
        print(f"cnnbench: {note}", file=sys.stderr)
    if not paths:
        raise UserError("report: only per-epoch history files given; give the results CSVs they belong to")
    made = build_report(paths, out or report_dir_for(paths[0]), model, dataset, device_type, spread_limit)
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
    out: OutOpt = Path("results") / "infer.csv",
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

    check_device(device)
    runs, skipped = expand_infer(load_spec(spec), backends=parse_backends(backend), device_kind=device,
                                 profile_dir=str(profile.resolve()) if profile else "")
    rows = execute_infer(runs, skipped, out, verbose=verbose, peak_tflops=peak_tflops)
    print(format_table(rows, INFER_TABLE))
    print(f"appended {len(rows)} row(s) to {out}")
    if not no_report:
        _report_after_run(out)
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)


@app.command()
def health(
    target: Annotated[str, typer.Argument(help="A results CSV (its last profiled row), a trace folder of "
                                               "--profile, or a trace file.")],
    run_id: Annotated[Optional[str], typer.Argument(help="Run id of the row in the CSV.")] = None,
    csv: Annotated[Optional[Path], typer.Option(help="Look TARGET up as a run id in this CSV (default: "
                                                     "results/runs.csv when TARGET is no file).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Also write the report (Markdown) here.")] = None,
) -> None:
    """Is my parallelism healthy? GPU busy, copies, syncs, data wait, first step; top kernels and layers."""
    from cnnbench.report.health import report_for, resolve

    if csv is None and not Path(target).exists() and not target.endswith(".csv"):
        csv = DEFAULT_OUT  # a bare run id
    row, trace, label = resolve(str(csv), target) if csv else resolve(target, run_id)
    _, text = report_for(row, trace, label)
    print(text, end="")
    if out:
        out.write_text(text, encoding="utf-8")


app.command()(cli_tools.upgrade)
app.command()(cli_tools.samples)
app.command()(cli_tools.parity)
app.command()(cli_serve.serve)
app.command()(cli_serve.load)


app.command(name="list")(cli_tools.list_things)
app.command()(cli_tools.env)


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
