"""The Keras 3 backend: one Keras model trained by model.fit on the JAX, PyTorch and TensorFlow engines."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from conftest import run_cli, write_spec

from cnnbench import envinfo
from cnnbench.table import store

# The quickstart (test_end_to_end) covers keras-jax on 1 and 2 emulated devices.
KERAS_DIGITS = """
    name = "keras-digits"
    model = "smallcnn"
    dataset = "digits"
    backends = ["keras"]
    devices = [1]
    device = "cpu"
    per_device_batch = 32
    epochs = 8
    target_accuracy = 0.95
    [optimizer]
    lr = 0.4
    momentum = 0.9
    weight_decay = 5e-4
    [keras]
    strategies = ["keras-torch", "keras-tensorflow"]
"""


def test_torch_and_tensorflow_engines_reach_accuracy(tmp_path):
    # one invocation per engine, side by side (each spends much of its life importing its framework)
    engines = ["keras-torch", "keras-tensorflow"]
    specs = [write_spec(tmp_path, KERAS_DIGITS.replace('["keras-torch", "keras-tensorflow"]', f'["{engine}"]'),
                        f"{engine}.toml") for engine in engines]
    outs = [tmp_path / f"{engine}.csv" for engine in engines]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda spec, out: run_cli("run", spec, "--out", out, "--no-report"), specs, outs))
    for invocation in done:
        assert invocation.returncode == 0, invocation.stderr[-3000:]
    rows = [row for out in outs for row in store.read_rows(out)]
    assert [r["strategy"] for r in rows] == ["keras-torch", "keras-tensorflow"]
    keras_version = envinfo.package_version("keras")
    for row in rows:
        assert row["status"] == "ok" and row["test_accuracy"] >= 0.95, row
        assert row["params"] == 53_002
        # backend_version carries Keras' version and the engine's
        assert row["backend_version"].startswith(keras_version) and row["backend_version"].count(" ") == 2
        assert "keras=" in row["stack_versions"]
    assert rows[0]["backend_version"].endswith(f"(torch {envinfo.package_version('torch')})")
    assert rows[1]["backend_version"].endswith(f"{envinfo.backend_version('tensorflow')})")


def _refused(tmp_path, text: str) -> str:
    out = tmp_path / "rows.csv"
    done = run_cli("validate", write_spec(tmp_path, text))
    assert done.returncode == 2 and not out.exists()
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def test_keras_torch_on_several_devices_is_a_skipped_row_naming_the_keras_version(tmp_path):
    text = KERAS_DIGITS.replace("devices = [1]", "devices = [2]").replace(
        '["keras-torch", "keras-tensorflow"]', '["keras-torch"]')
    out = tmp_path / "rows.csv"
    done = run_cli("run", write_spec(tmp_path, text), "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr
    (row,) = store.read_rows(out)
    assert row["status"] == "skipped" and "run keras-torch on 1 device" in row["error"]
    assert f"keras {envinfo.package_version('keras')} has no data parallelism for the PyTorch engine" in row["error"]


def test_keras_jax_with_batch_norm_on_several_devices_needs_sync_bn(tmp_path):
    text = (KERAS_DIGITS.replace('"smallcnn"', '"resnet18_cifar"').replace('"digits"', '"synthetic"')
            .replace("devices = [1]", "devices = [2]").replace("epochs = 8", "image_size = 16")
            .replace("target_accuracy = 0.95", "")
            .replace('["keras-torch", "keras-tensorflow"]', '["keras-jax"]'))
    assert "set sync_bn = true" in _refused(tmp_path, text)
    synced = text.replace("[optimizer]", "sync_bn = true\n    [optimizer]")
    done = run_cli("validate", write_spec(tmp_path, synced, "synced.toml"))
    assert done.returncode == 0, done.stderr
