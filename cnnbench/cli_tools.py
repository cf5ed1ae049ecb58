"""The commands around the benchmark: `upgrade`, `samples`, `parity`, `list`, `env` (registered on the app in
:mod:`cnnbench.cli`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cnnbench import envinfo
from cnnbench.cli_options import BackendOpt, parse_backends
from cnnbench.errors import UserError
from cnnbench.model.facts import MODELS
from cnnbench.registry import REGISTRY


def upgrade(csv: Annotated[list[Path], typer.Argument(help="Results CSVs written by an older cnnbench.")]) -> None:
    """Rewrite older results files in the current row format (added columns left empty)."""
    from cnnbench.table.store import upgrade_file

    for path in csv:
        count = upgrade_file(path)
        print(f"{path}: {'upgraded ' + str(count) + ' row(s)' if count else 'already current'}")


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
    backends = list(parse_backends(backend) or installed_backends())
    if len(backends) < 2:
        raise UserError(f"parity needs two installed backends, found {', '.join(backends) or 'none'}")
    result = run_parity(models, backends)
    print("parameters:\n" + format_params(result.params) + "\n")
    print(format_checks(result.checks))
    failed = result.failed
    print(f"{len(result.checks) - len(failed)} of {len(result.checks)} checks passed")
    if failed:
        raise typer.Exit(1)


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
