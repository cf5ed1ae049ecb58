"""The ``cnnbench`` command."""

from __future__ import annotations

import dataclasses
import signal
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from backends import BACKEND_NAMES, REGISTRY
from cnnbench import envinfo
from cnnbench.errors import UserError
from cnnbench.model.facts import MODELS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO_ROOT / "experiments" / "quickstart.toml"
DEFAULT_OUT = Path("results") / "runs.csv"


class ClickStyleCommand(TyperCommand):
    """`--help` in the conventions of click tools: `SPEC` (required) or `[SPEC]` for an argument,
    TEXT/PATH/INTEGER/FLOAT after an option that takes a value, nothing after a flag.

    typer's own help shows Python types (`<list[str]>`, `<int range>`), `{spec}` for a required
    argument and, in its rich mode, `<bool>` after flags and console markup eaten from the text (a
    `[infer]` table name vanished); the app therefore runs without markup (`rich_markup_mode=None`,
    every help text printed literally) and this class names the placeholders.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_argument_usage(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # typer adds the type after the name
                arguments.append((_argument_usage(param), record[1]))
            else:
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


_METAVARS = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


def _metavar(param: Any) -> str:
    if param.param_type_name == "argument":
        return param.name.upper()
    described = getattr(param, "type_descriptor", None)
    if described is None:  # a typer without the descriptor (older or newer than the pinned one): click's own
        return param.type.name.upper()
    if described.is_choice:
        return "[" + "|".join(map(str, described.choices)) + "]"
    if described.is_path:
        return "PATH"
    kind = typing.get_args(described.annotation)[0] if described.is_list else described.annotation
    return _METAVARS.get(kind, getattr(kind, "__name__", "VALUE").upper())


def _argument_usage(param: Any) -> str:
    name = param.metavar or param.name.upper()
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


class _App(typer.Typer):
    """Every command of the app (also those added later) gets the click-style help."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any):
        return super().command(*args, cls=cls or ClickStyleCommand, **kwargs)


app = _App(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
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
BackendOpt = Annotated[Optional[list[str]], typer.Option(
    "--backend", "-b", help="Backends to run: a comma-separated list (torch,jax), or the option repeated, or all; "
                            "it replaces the spec's list and may name a backend the spec leaves out.")]
DevicesOpt = Annotated[Optional[str], typer.Option(help="Device counts, e.g. 1,2,4 (overrides the spec).")]
OutOpt = Annotated[Path, typer.Option(help="Results CSV to append to; checked before anything runs (a missing "
                                             "folder is created).")]
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
    from cnnbench.run.execute import execute_runs, split_done
    from cnnbench.run.plans import gap_note
    from cnnbench.runs import expand
    from cnnbench.spec import load_spec

    _check_device(device)
    if slurm:
        if peak_tflops is not None:
            raise UserError("--peak-tflops: not with --slurm (each job's row takes its GPU's known peak)")
        _slurm_sweep(spec, out, backend=backend, devices=devices, device=device, force=force, dry_run=dry_run,
                     wait=wait, no_report=no_report, overrides=dict(partition=partition, account=account, qos=qos,
                                                                    constraint=constraint, extra=sbatch))
        return
    if wait:
        raise UserError("--wait: only with --slurm")
    runs = expand(load_spec(spec), backends=_parse_backends(backend), devices=_parse_devices(devices),
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
    from cnnbench.cluster.slurm import with_overrides
    from cnnbench.cluster.sweep import slurm_sweep
    from cnnbench.runs import expand
    from cnnbench.spec import load_spec

    parsed = load_spec(spec)
    # The submitting host is often a login node without GPUs: "auto" means the cluster's GPUs here.
    kind = device or ("gpu" if parsed.device == "auto" else parsed.device)
    runs = expand(parsed, backends=_parse_backends(backend), devices=_parse_devices(devices), device_kind=kind,
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

    _check_device(device)
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


@app.command()
def serve(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML: the model, precision, [serve] settings.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="torch or jax (one per process).")] = None,
    device: DeviceOpt = None,
    host: Annotated[Optional[str], typer.Option(help="Address to bind (default: [serve] host, 127.0.0.1).")] = None,
    port: Annotated[Optional[int], typer.Option(help="TCP port (0: any free one).")] = None,
    max_batch: Annotated[Optional[int], typer.Option(help="Largest batch the batcher launches.")] = None,
    deadline_ms: Annotated[Optional[float], typer.Option(
        help="Launch a batch when its oldest request has waited this long.")] = None,
    max_queue: Annotated[Optional[int], typer.Option(help="Requests waiting at most; past it 503.")] = None,
    max_body_bytes: Annotated[Optional[int], typer.Option(help="Larger bodies get 413.")] = None,
    decode_workers: Annotated[Optional[int], typer.Option(help="Image-decoding threads.")] = None,
    batching: Annotated[Optional[str], typer.Option(
        help="dynamic (pipelined batcher) or none (one forward per request).")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="Classes in each answer.")] = None,
    http: Annotated[Optional[str], typer.Option(help="uvicorn's HTTP parser: auto, h11 or httptools.")] = None,
) -> None:
    """Serve the spec's model over HTTP: POST /v1/infer, GET /healthz, /metrics, /v1/info (SIGTERM drains)."""
    from cnnbench.infer.server import serve_spec
    from cnnbench.spec import load_spec

    _check_device(device)
    overrides = {"host": host, "port": port, "max_batch": max_batch, "deadline_ms": deadline_ms,
                 "max_queue": max_queue, "max_body_bytes": max_body_bytes, "decode_workers": decode_workers,
                 "batching": batching, "top_k": top_k, "http": http}
    code = serve_spec(load_spec(spec), backend, device, overrides)
    if code:
        raise typer.Exit(code)


@app.command()
def load(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000 (loopback only).")],
    rate: Annotated[list[float], typer.Option("--rate", "-r", help="Offered load, requests/s (repeatable).")],
    requests: Annotated[int, typer.Option(min=1, help="Requests per rate, at most.")] = 1000,
    duration: Annotated[float, typer.Option(min=0.1, help="Arrivals at each rate end after this many s.")] = 10.0,
    input: Annotated[str, typer.Option("--input", help="raw (uint8 tensor), jpeg or png.")] = "raw",
    source_size: Annotated[Optional[str], typer.Option(
        help="jpeg/png: picture size WxH before the server resizes it (default the model's).")] = None,
    processes: Annotated[int, typer.Option(min=1, help="Client processes sharing the rate.")] = 1,
    connections: Annotated[int, typer.Option(min=1, help="HTTP connections, all processes together.")] = 256,
    timeout: Annotated[float, typer.Option(min=0.1, help="Per-request limit, s.")] = 30.0,
    wait: Annotated[float, typer.Option(min=0.0, help="Wait this long for /healthz to say ready, s.")] = 600.0,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    out: Annotated[Path, typer.Option(help="Results CSV to append to.")] = Path("results") / "serve_http.csv",
) -> None:
    """Open-loop Poisson load over HTTP against `cnnbench serve`; one `serve-http` row per rate."""
    from cnnbench.infer import loadgen
    from cnnbench.table import store

    if input not in loadgen.INPUTS:
        raise UserError(f"--input: expected one of {', '.join(loadgen.INPUTS)}, found {input!r}")
    size = None
    if source_size:
        try:
            size = tuple(int(n) for n in source_size.lower().split("x"))
            assert len(size) == 2 and min(size) > 0
        except (ValueError, AssertionError):
            raise UserError(f"--source-size: expected WxH such as 500x375, found {source_size!r}") from None
    base = loadgen.check_loopback(url)
    store.check_appendable(out)
    info = loadgen.wait_ready(base, wait)
    bodies = loadgen.request_bodies(input, tuple(info["image_shape"]), size, seed=seed)
    rows = []
    for offered in rate:
        before = loadgen.batch_totals(loadgen.get_json(base, "/metrics")[1])
        result = loadgen.offer_load(base + "/v1/infer", bodies, offered, requests, duration, timeout,
                                    connections, processes, seed)
        after = loadgen.batch_totals(loadgen.get_json(base, "/metrics")[1])
        batches = after[1] - before[1]
        mean_batch = (after[0] - before[0]) / batches if batches else None
        row = loadgen.load_row(info, result, input, mean_batch)
        store.append_rows(out, [row])
        rows.append(row)
        p50, p99 = result.percentile(50), result.percentile(99)
        print(f"{offered:g} req/s offered: {result.achieved_rps:.0f} answered/s, {result.ok}/{result.sent} ok, "
              f"p50 {p50 or float('nan'):.1f} ms, p99 {p99 or float('nan'):.1f} ms, mean batch "
              f"{mean_batch or float('nan'):.1f}, errors {result.errors_text() or 'none'}, client lag p99 "
              f"{result.client_lag_ms_p99:.1f} ms")
    print(f"appended {len(rows)} row(s) to {out}")
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
    size: Annotated[tuple[int, int], typer.Option(
        metavar="INTEGER INTEGER", help="Image and frame size: height, width.")] = (375, 500),
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
    from cnnbench.parity.check import format_checks, format_params, installed_backends, run_parity

    models = model or list(MODELS)
    for name in models:
        if name not in MODELS:
            raise UserError(f"--model: unknown model {name!r}; expected one of {', '.join(MODELS)}")
    backends = list(_parse_backends(backend) or installed_backends())
    if len(backends) < 2:
        raise UserError(f"parity needs two installed backends, found {', '.join(backends) or 'none'}")
    result = run_parity(models, backends)
    print("parameters:\n" + format_params(result.params) + "\n")
    print(format_checks(result.checks))
    failed = result.failed
    print(f"{len(result.checks) - len(failed)} of {len(result.checks)} checks passed")
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
        found = envinfo.backend_devices(entry.name)
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
