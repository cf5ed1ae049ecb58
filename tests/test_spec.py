"""Spec parsing and validation: good specs expand as expected; bad ones name the field."""

from __future__ import annotations

import pytest
from conftest import TINY_DIGITS, run_cli, write_spec

from cnnbench.errors import SpecError
from cnnbench.expand import expand, plan_windows
from cnnbench.spec import load_spec, parse_spec_text, spec_hash
from cnnbench.table import store

BASE = """
name = "t"
model = "smallcnn"
dataset = "digits"
device = "cpu"
per_device_batch = 32
epochs = 4
"""


def parse(extra: str = "", base: str = BASE):
    return parse_spec_text(base + extra, "t.toml")


def test_defaults_and_expansion_product():
    spec = parse('backends = ["torch", "jax"]\ndevices = [1, 2]\nprecision = ["fp32", "bf16"]\ntrials = 2\n'
                 '[jax]\nstrategies = ["sharded", "pmap"]\n')
    runs = expand(spec)
    # torch: 1 strategy, jax: 2 -> 3 x 2 devices x 2 precisions x 2 trials
    assert len(runs) == 3 * 2 * 2 * 2
    keys = {(r.backend, r.strategy, r.devices, r.precision, r.trial) for r in runs}
    assert len(keys) == len(runs)
    one = next(r for r in runs if r.devices == 2)
    assert one.global_batch == 64 and one.per_device_batch == 32
    assert one.lr == pytest.approx(0.1 * 64 / 256)  # linear scaling from the base LR
    assert one.device_type == "cpu-emulated"
    assert next(r for r in runs if r.devices == 1).device_type == "cpu"


def test_strong_scaling_splits_global_batch():
    base = BASE.replace("per_device_batch = 32", "global_batch = 64")
    runs = expand(parse('scaling = "strong"\ndevices = [1, 2, 4]\nbackends = ["torch"]\n', base))
    assert [(r.devices, r.per_device_batch, r.global_batch) for r in runs] == [(1, 64, 64), (2, 32, 64), (4, 16, 64)]


def test_strong_scaling_indivisible_names_numbers():
    base = BASE.replace("per_device_batch = 32", "global_batch = 100")
    with pytest.raises(SpecError) as err:
        parse('scaling = "strong"\ndevices = [1, 3]\n', base)
    assert "global_batch" in str(err.value) and "100" in str(err.value) and "3" in str(err.value)


@pytest.mark.parametrize("extra, field", [
    ("bogus = 1\n", "bogus"),
    ('model = "vgg"\n', "model"),
    ('precision = "fp8"\n', "precision"),
    ("devices = [0]\n", "devices"),
    ('devices = "two"\n', "devices"),
    ("epochs = 1.5\n", "epochs"),
    ("[optimizer]\nmomentum = 2.0\n", "optimizer.momentum"),
    ("[optimizer]\nlearning_rate = 0.1\n", "optimizer.learning_rate"),
    ('[torch]\nstrategies = ["fsdp"]\n', "torch.strategies"),
    ('[timing]\nwindows = 0\n', "timing.windows"),
    ('scaling = "diagonal"\n', "scaling"),
    ("image_size = 32\n", "image_size"),
    ('data_path = "/nowhere"\n', "data_path"),
    ('[torch]\ncompile_scope = "graph"\n', "torch.compile_scope"),
    ('[torch]\ncompile_scope = "model"\ncompiled_autograd = true\n', "torch.compiled_autograd"),
    ('[torch]\ncompile_scope = "model"\nddp_compile = "python_reducer"\n', "torch.ddp_compile"),
    ('[torch]\nddp_compile = "no_optimization"\ncompiled_autograd = true\n', "torch.ddp_compile"),
    ('[infer]\ninput = ["resident", "uint16_pinned"]\n', "infer.input[1]"),
])
def test_bad_field_is_named(extra, field):
    key = extra.split("=")[0].strip()
    base = "".join(line + "\n" for line in BASE.splitlines() if not line.startswith(key + " "))
    text = base + extra
    with pytest.raises(SpecError) as err:
        parse_spec_text(text, "t.toml")
    assert f"t.toml: {field}" in str(err.value)


def test_model_dataset_compatibility():
    with pytest.raises(SpecError) as err:
        parse_spec_text(BASE.replace("smallcnn", "resnet50"), "t.toml")
    assert "resnet50" in str(err.value) and "digits" in str(err.value)


def test_windows_must_fit_the_run():
    with pytest.raises(SpecError) as err:
        expand(parse("[timing]\nwindows = 50\n"))
    assert "t.toml: epochs" in str(err.value)


def test_plan_windows_never_spans_an_epoch():
    plan = plan_windows(total_steps=100, steps_per_epoch=22, warmup_steps=5, windows=5, window_steps=10)
    assert plan[0] == (6, 16)
    for start, end in plan:
        assert start // 22 == (end - 1) // 22
    synthetic = plan_windows(total_steps=56, steps_per_epoch=0, warmup_steps=5, windows=5, window_steps=10)
    assert synthetic == [(6, 16), (16, 26), (26, 36), (36, 46), (46, 56)]


def test_spec_hash_ignores_swept_lists():
    a = parse("devices = [1]\n")
    b = parse("devices = [1, 2, 4]\ntrials = 3\n")
    c = parse("seed = 3\n")
    assert spec_hash(a) == spec_hash(b) != spec_hash(c)


def test_every_committed_experiment_validates(tmp_path, monkeypatch):
    from pathlib import Path

    from cnnbench.data.samples import write_image_folder

    # The image-folder experiments read $CNNBENCH_DATA: small sample folders stand in for the real ones.
    write_image_folder(tmp_path / "samples" / "images", 2, 2, (40, 56))
    write_image_folder(tmp_path / "frames" / "images", 2, ["astronaut"], (40, 56))
    monkeypatch.setenv("CNNBENCH_DATA", str(tmp_path))
    for path in sorted(Path(__file__).resolve().parent.parent.glob("experiments/*.toml")):
        spec = load_spec(path)
        assert spec.name


@pytest.mark.parametrize("content, expected", [
    ("this is [not toml", "not valid TOML"),
    ("", "empty spec"),
])
def test_cli_bad_files_one_line_exit_2(tmp_path, content, expected):
    path = write_spec(tmp_path, content)
    out = tmp_path / "rows.csv"
    done = run_cli("run", path, "--out", out)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and expected in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_cli_missing_file_directory_and_unknown_backend(tmp_path):
    for args, expected in [(("validate", tmp_path / "nope.toml"), "no such file"),
                           (("validate", tmp_path), "is a directory"),
                           (("run", "--backend", "mxnet", "--out", tmp_path / "r.csv"), "unknown backend 'mxnet'")]:
        done = run_cli(*args)
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r.csv").exists()


def test_cli_validate_prints_runs(tiny_spec):
    done = run_cli("validate", tiny_spec)
    assert done.returncode == 0, done.stderr
    assert "1 run(s)" in done.stdout and "torch/ddp" in done.stdout


def test_strategies_a_framework_lacks_become_skipped_rows_with_the_reason(tmp_path):
    """Not an error in the spec: the comparison gets a row that says why there is no number."""
    text = (TINY_DIGITS.replace('["torch"]', '["tensorflow", "torch"]').replace("devices = [1]", "devices = [2]")
            + '[tensorflow]\nstrategies = ["pipeline"]\n[torch]\nstrategies = ["tensor"]\n')
    spec, out = write_spec(tmp_path, text), tmp_path / "rows.csv"
    plan = run_cli("validate", spec)
    assert plan.returncode == 0 and plan.stdout.count("-> skipped row (not supported") == 2, plan.stdout
    done = run_cli("run", spec, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr
    pipeline, tensor = store.read_rows(out)
    assert (pipeline["strategy"], pipeline["status"]) == ("pipeline", "skipped")
    assert "TensorFlow has no maintained native mechanism" in pipeline["error"]
    assert (tensor["strategy"], tensor["status"]) == ("tensor", "skipped")
    assert "shards convolutions along the batch only" in tensor["error"]


@pytest.mark.parametrize("table, strategy, extra, expected", [
    ("jax", "data+tensor", "", "needs a multiple of model_parallel"),
    ("jax", "pipeline", "microbatches = 3\n", "global batch 128 does not split into 3 micro-batches"),
])
def test_impossible_model_parallel_configurations_are_refused_with_a_reason(tmp_path, table, strategy, extra,
                                                                           expected):
    text = TINY_DIGITS.replace('["torch"]', f'["{table}"]').replace("devices = [1]", "devices = [2]")
    done = run_cli("validate", write_spec(tmp_path, extra + text + f'[{table}]\nstrategies = ["{strategy}"]\n'))
    assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_pipeline_rows_do_not_claim_synchronized_batch_norm(tmp_path):
    text = (TINY_DIGITS.replace('"smallcnn"', '"resnet18_cifar"').replace('"digits"', '"synthetic"')
            .replace("epochs = 2", "image_size = 16\nsync_bn = true").replace("devices = [1]", "devices = [2]")
            + '[torch]\nstrategies = ["ddp", "pipeline"]\n')
    ddp, pipeline = expand(load_spec(write_spec(tmp_path, text)), check_devices=False)
    assert (ddp.strategy, ddp.sync_bn) == ("ddp", True) and (pipeline.strategy, pipeline.sync_bn) == ("pipeline", False)
