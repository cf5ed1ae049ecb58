"""`cnnbench validate`: every spec the repository ships validates, each for the command it is meant for,
through that command's own expansion; the plan says what would run."""

from __future__ import annotations

import re

import pytest
from conftest import REPO, TINY_DIGITS, run_cli, write_spec
from typer.testing import CliRunner

from cnnbench.cli import app
from cnnbench.data import arrays

EXPERIMENTS = sorted((REPO / "experiments").glob("**/*.toml"))


@pytest.fixture
def official_size_data(tmp_path, monkeypatch):
    """CNNBENCH_DATA with CIFAR-10 files of the official sizes (sparse: no disk, no download) and sample
    image folders; validate
    checks that a dataset's files exist and how many images they hold, as `run` would."""
    folder = tmp_path / "data" / "cifar10"
    folder.mkdir(parents=True)
    for name in (*arrays.CIFAR10_TRAIN_FILES, arrays.CIFAR10_TEST_FILE):
        with open(folder / name, "wb") as handle:
            handle.truncate(10_000 * arrays.CIFAR10_RECORD_BYTES)
    # the image-folder experiments: small sample folders stand in for the real ones
    from cnnbench.data.samples import write_image_folder

    for image in write_image_folder(tmp_path / "data" / "samples" / "images", 2, 2, (40, 56)):
        # a batch of 256 and windows of 5 steps need 1,280 training images: links to the two per class
        for copy in range(400):
            (image.parent / f"{image.stem}-{copy}{image.suffix}").hardlink_to(image)
    write_image_folder(tmp_path / "data" / "frames" / "images", 2, ["astronaut"], (40, 56))
    monkeypatch.setenv("CNNBENCH_DATA", str(tmp_path / "data"))


def _validate(*args: str) -> str:
    done = CliRunner().invoke(app, ["validate", *map(str, args)])
    assert done.exit_code == 0, f"{done.output}\n{done.exception!r}"
    return done.output


def _plans(output: str) -> dict[str, int]:
    """command -> number of planned lines under its headline."""
    plans, current = {}, None
    for line in output.splitlines():
        found = re.search(r": valid for (\S+),", line)
        if found:
            current = found.group(1)
            plans[current] = 0
        elif re.match(r"\s+\d+\. ", line):
            plans[current] += 1
    return plans


def test_the_repository_ships_training_and_inference_specs():
    names = {p.name for p in EXPERIMENTS}
    assert {"quickstart.toml", "resnet50_infer.toml", "resnet50_ablation.toml"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: str(p.relative_to(REPO / "experiments")))
def test_every_experiment_validates_and_lists_what_it_would_run(path, official_size_data):
    plans = _plans(_validate(path))
    assert plans and all(count >= 1 for count in plans.values()), plans


def test_inference_specs_are_planned_by_infer_with_their_jobs():
    output = _validate(REPO / "experiments" / "resnet50_infer.toml")
    assert set(_plans(output)) == {"infer", "serve"}  # its [serve] table also configures `cnnbench serve`
    assert "serve dynamic 100 req/s" in output and "ablation pad b50" in output
    assert "skipped row: jax compile" in output  # what infer would write as skipped, said up front
    assert set(_plans(_validate(REPO / "experiments" / "resnet50_ablation.toml"))) == {"infer"}


def test_a_spec_with_training_and_inference_tables_is_planned_for_both(tmp_path):
    spec = write_spec(tmp_path, TINY_DIGITS.replace('dataset = "digits"', 'dataset = "synthetic"')
                      .replace("epochs = 2", "") + "[infer]\nbatch_sizes = [1, 4]\ninput = \"float32_pageable\"\n")
    plans = _plans(_validate(spec))
    assert plans == {"run": 1, "infer": 2}
    assert _plans(_validate(spec, "--for", "infer")) == {"infer": 2}


def test_a_spec_for_no_command_fails_as_a_training_spec_with_one_line(tmp_path):
    spec = write_spec(tmp_path, TINY_DIGITS.replace("per_device_batch = 64", ""))
    done = run_cli("validate", spec)
    assert done.returncode == 2 and "per_device_batch: required for weak scaling" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    done = run_cli("validate", spec, "--for", "serve-nothing")
    assert done.returncode == 2 and "--for: unknown command" in done.stderr


SERVE_ONLY = """
    name = "serve_only"
    model = "smallcnn"
    dataset = "synthetic"
    backends = ["torch", "jax"]
    device = "cpu"
    [serve]
    port = 8123
    max_batch = 16
    frontends = 2
"""


def test_a_spec_with_only_serve_is_planned_for_serve(tmp_path):
    """#32.5: not "valid for infer, 0 worker run(s)": the model, backend, warmed-up batch shapes and port."""
    spec = write_spec(tmp_path, SERVE_ONLY)
    output = _validate(spec)
    assert _plans(output) == {"serve": 2}
    assert "valid for serve, 2 server(s) (one per process: pass --backend)" in output
    assert ("serve --backend torch: smallcnn fp32 28x28 on cpu, batching dynamic (max_batch 16, deadline 5 ms), "
            "warms up batch shapes 8, 16; 2 front-end process(es); listens on http://127.0.0.1:8123") in output
    assert _plans(_validate(spec, "--for", "serve")) == {"serve": 2}
    plain = SERVE_ONLY.replace("max_batch = 16", 'batching = "none"').replace("frontends = 2", "frontends = 0")
    unbatched = write_spec(tmp_path, plain, "none.toml")
    assert "warms up batch shapes 1;" in _validate(unbatched, "--for", "serve")
    done = run_cli("validate", spec, "--for", "infer")
    assert done.returncode == 0 and "0 worker run(s)" in done.stdout  # infer has nothing to measure there
