"""`cnnbench infer` on CPU: batch-size sweep, ablation (one row per toggle), serving, profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli, write_spec

from cnnbench.table import store

INFER_SPEC = """
    name = "infer-tiny"
    model = "smallcnn"
    dataset = "synthetic"
    image_size = 8
    channels = 1
    num_classes = 10
    backends = ["torch", "jax", "keras"]
    device = "cpu"
    [timing]
    warmup_steps = 2
    windows = 3
    window_steps = 5
    [infer]
    batch_sizes = [1, 16]
    input = ["resident", "uint8_pinned", "float32_pinned", "float32_pageable"]
    latency_samples = 10
    ablation = ["bf16", "channels_last", "pinned", "pad"]
    ablation_batch = 20
    pad_multiple = 8
    [serve]
    rates = [200]
    max_batch = 8
    timeout_ms = 5
    requests = 60
"""


@pytest.fixture(scope="module")
def infer_rows(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("infer")
    out, profile = tmp / "infer.csv", tmp / "traces"
    done = run_cli("infer", write_spec(tmp, INFER_SPEC), "--out", out, "--profile", profile)
    assert done.returncode == 0, done.stderr[-3000:]
    return store.read_rows(out), out, profile


SWEEP = ("resident", "uint8_pinned", "float32_pinned", "float32_pageable")


def test_sweep_rows_per_batch_size_and_input(infer_rows):
    rows, _, _ = infer_rows
    for backend in ("torch", "jax"):
        for source in ("resident", "float32_pageable"):
            sweep = [r for r in rows if r["backend"] == backend and r["variant"] == source]
            assert [r["global_batch"] for r in sweep] == [1, 16]
            for r in sweep:
                assert r["status"] == "ok" and r["mode"] == "infer" and r["strategy"] == "infer"
                assert f"input={source}" in r["backend_options"]
                assert r["latency_ms_p50"] <= r["latency_ms_p90"] <= r["latency_ms_p99"]
                assert r["images_per_sec"] == pytest.approx(r["global_batch"] / (r["step_time_ms_median"] / 1000),
                                                            rel=0.01)
                assert r["first_step_s"] > 0 and r["windows"] == 3
                # the CSV keeps 6 significant digits: the ratio of two rounded times is good to ~1e-5 of
                # itself (a busy machine's spread of 4.1 is off by 2.5e-5 in absolute terms)
                assert r["step_time_spread"] + 1 == pytest.approx(r["step_time_ms_p90"] / r["step_time_ms_p10"],
                                                                  rel=2e-5)
        # on a CPU there is nothing to pin: one skipped row per pinned input says so
        for source in ("uint8_pinned", "float32_pinned"):
            (row,) = [r for r in rows if r["backend"] == backend and r["variant"] == source]
            assert row["status"] == "skipped" and "on CPU there is no copy" in row["error"]
    # JAX always jits; the keras backend has no inference path: one skipped row says so
    assert all(r["compile"] for r in rows if r["backend"] == "jax" and r["variant"] in SWEEP)
    (keras,) = [r for r in rows if r["backend"] == "keras"]
    assert keras["status"] == "skipped" and "no inference path" in keras["error"]


def test_ablation_has_one_row_per_toggle_and_says_why_a_toggle_is_skipped(infer_rows):
    rows, _, _ = infer_rows
    for backend in ("torch", "jax"):
        ablation = {r["variant"]: r for r in rows if r["backend"] == backend and r["mode"] == "infer"
                    and r["variant"] not in SWEEP}
        assert set(ablation) == {"baseline", "bf16", "channels_last", "pinned", "pad", "all"}
        assert all(r["global_batch"] == 20 for r in ablation.values())
        # three interleaved rounds (the default) of 3 windows each
        assert ablation["baseline"]["windows"] == 9 and ablation["pad"]["windows"] == 9
        assert ablation["pinned"]["status"] == "skipped" and "on CPU there is no copy" in ablation["pinned"]["error"]
        assert ablation["pad"]["status"] == "ok" and "pad_multiple=8" in ablation["pad"]["backend_options"]
        assert ablation["bf16"]["precision"] == "bf16" and ablation["all"]["precision"] == "bf16"
    jax_cl = next(r for r in rows if r["backend"] == "jax" and r["variant"] == "channels_last")
    assert jax_cl["status"] == "skipped" and "PyTorch option" in jax_cl["error"]
    torch_all = next(r for r in rows if r["backend"] == "torch" and r["variant"] == "all")
    # all = every applicable toggle: pinned is not applicable on CPU
    assert "channels_last=True" in torch_all["backend_options"]
    assert "input=float32_pageable" in torch_all["backend_options"]


def test_serving_rows_compare_dynamic_batching_with_batch_one(infer_rows):
    rows, _, _ = infer_rows
    for backend in ("torch", "jax"):
        serve = {r["variant"]: r for r in rows if r["backend"] == backend and r["mode"] == "serve"}
        assert set(serve) == {"dynamic", "batch1"}
        for r in serve.values():
            assert r["status"] == "ok" and r["requests"] == 60 and r["arrival_rate_rps"] == 200
            assert r["latency_ms_p50"] <= r["latency_ms_p99"]
        assert serve["batch1"]["mean_batch"] == 1 and serve["batch1"]["max_batch"] == 1
        assert 1 <= serve["dynamic"]["mean_batch"] <= 8 and serve["dynamic"]["batch_timeout_ms"] == 5


def test_profiles_are_written_and_charts_made(infer_rows):
    rows, out, profile = infer_rows
    traced = [r for r in rows if r.get("profile_path")]
    assert {(r["backend"], r["global_batch"]) for r in traced} == {("torch", 16), ("jax", 16)}
    for r in traced:
        files = [p for p in Path(r["profile_path"]).rglob("*") if p.is_file()]
        assert files and all(p.stat().st_size > 0 for p in files), r["profile_path"]
        assert 0 < r["device_busy_share"] <= 1 and (Path(r["profile_path"]) / "health.md").is_file()  # health
    charts = out.with_name(out.stem)
    for name in ("infer_throughput", "infer_latency", "ablation", "serve_latency", "serve_throughput"):
        assert (charts / f"{name}.png").stat().st_size > 0
    assert "| torch | 20 | channels_last |" in (charts / "ablation.md").read_text()


def test_inference_on_several_devices_is_refused(tmp_path):
    text = INFER_SPEC.replace('device = "cpu"', 'device = "cpu"\n    devices = [2]')
    done = run_cli("infer", write_spec(tmp_path, text), "--out", tmp_path / "x.csv")
    assert done.returncode == 2 and "inference runs on one device" in done.stderr
    assert not (tmp_path / "x.csv").exists()
