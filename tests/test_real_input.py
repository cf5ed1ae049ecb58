"""Real input: an image folder and a video through each framework's own loader, and bad input refused.

The sample data are written here from scikit-image's photographs (cnnbench.data.samples): 2 classes x 6
JPEGs of 40x56 and a 10-frame clip. Every run trains a couple of steps and must write the data_wait
columns, measured by the runner.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, write_spec

from cnnbench.data import files
from cnnbench.data.loader import SampleReader, plan_for
from cnnbench.data.samples import write_image_folder, write_video
from cnnbench.options import DataSpec
from cnnbench.table import store

SPEC = """
    name = "real-{dataset}"
    model = "smallcnn"
    dataset = "{dataset}"
    data_path = "{path}"
    image_size = 16
    backends = ["{backend}"]
    device = "cpu"
    per_device_batch = 5
    {extra}
    [data]
    workers = {workers}
    {data}
    [timing]
    warmup_steps = 0
    windows = 1
    window_steps = 1
"""


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("samples")
    write_image_folder(root / "folder", 6, 2, (40, 56), seed=0)
    return {"folder": root / "folder", "video": write_video(root / "clip.mp4", 10, (40, 56), fps=10)}


def _spec(tmp_path: Path, dataset: str, path: Path, backend: str = "torch", workers: int = 0, data: str = "",
          extra: str = "", name: str = "spec.toml") -> Path:
    extra = extra or ("epochs = 1" if dataset == "image_folder" else "steps = 3")
    return write_spec(tmp_path, SPEC.format(dataset=dataset, path=path, backend=backend, workers=workers,
                                            data=data, extra=extra), name)


@pytest.mark.parametrize("backend", ["torch", "jax", "tensorflow"])
def test_folder_and_video_train_in_every_framework_with_data_wait_columns(tmp_path, samples, backend):
    out = tmp_path / "rows.csv"
    folder = _spec(tmp_path, "image_folder", samples["folder"], backend, workers=1, name="folder.toml")
    video = _spec(tmp_path, "video", samples["video"], backend, name="video.toml")
    for spec in (folder, video):
        done = run_cli("run", spec, "--out", out, "--no-report")
        assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["error"] for r in rows]
    by_source = {r["input_source"]: r for r in rows}
    assert set(by_source) == {"files", "video"}
    assert by_source["files"]["loader_workers"] == 1 and by_source["files"]["test_accuracy"] is not None
    for row in rows:
        assert row["image_size"] == "16x16"
        assert row["data_wait_ms_median"] >= 0 and 0 <= row["data_wait_share"] < 1


def test_every_framework_reads_the_same_items_in_the_same_order_with_the_same_crops(samples):
    """The neutral plan fixes each step's items and draws; two readers (two frameworks, two workers)
    give identical samples."""
    from types import SimpleNamespace

    run = SimpleNamespace(dataset="image_folder", data_path=str(samples["folder"]), image_size=(16, 24), seed=3,
                          data=DataSpec(test_fraction=0.2))
    plan = plan_for(run)
    assert len(plan.train_items) == 10 and len(plan.test_items) == 2  # every 5th file of each class
    assert list(plan.step_items(0, 0, 4)) == list(plan_for(run).step_items(0, 0, 4))
    assert list(plan.epoch_order(0)) != list(plan.epoch_order(1))  # a new order each epoch
    item = int(plan.step_items(1, 0, 4)[0])
    a, b = SampleReader(plan).sample(1, item, True), SampleReader(plan).sample(1, item, True)
    assert np.array_equal(a.pixels, b.pixels) and np.array_equal(a.box, b.box) and a.flip == b.flip
    assert a.pixels.shape == (40, 56, 3) and a.label == plan.labels[item]


def test_shuffle_buffer_keeps_items_within_their_block():
    order = files.epoch_order(np.arange(12), seed=0, epoch=0, shuffle_buffer=4)
    assert [sorted(order[i:i + 4]) for i in (0, 4, 8)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def _bad(tmp_path: Path, path: Path, dataset: str = "image_folder", **kw) -> str:
    done = run_cli("validate", _spec(tmp_path, dataset, path, **kw))
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_bad_folders_files_sizes_and_videos_get_one_line_and_exit_2(tmp_path, samples):
    assert "no such folder" in _bad(tmp_path, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    assert "holds no class folders" in _bad(tmp_path, tmp_path / "empty")
    (tmp_path / "empty_class" / "cat").mkdir(parents=True)
    assert "cat holds no .jpg" in _bad(tmp_path, tmp_path / "empty_class")
    odd = tmp_path / "odd"
    write_image_folder(odd, 2, ["astronaut"], (40, 56), seed=0)
    (odd / "astronaut" / "notes.jpg").write_text("not a picture")
    assert "notes.jpg: not a readable image" in _bad(tmp_path, odd)
    mixed = tmp_path / "mixed"
    write_image_folder(mixed, 2, ["astronaut"], (16, 16), seed=0)
    write_image_folder(mixed, 1, ["coffee"], (24, 16), seed=1)
    line = _bad(tmp_path, mixed, data="resize = false")
    assert "coffee/0000.jpg: 24x16 differs from image_size 16x16" in line and "resize = false" in line
    fake = tmp_path / "clip.mp4"
    fake.write_text("no video here")
    assert "cannot open as a video" in _bad(tmp_path, fake, dataset="video")


def test_image_size_below_the_model_minimum_is_refused(tmp_path, samples):
    spec = _spec(tmp_path, "image_folder", samples["folder"])
    spec.write_text(spec.read_text().replace('model = "smallcnn"', 'model = "resnet50"')
                    .replace("image_size = 16", "image_size = [16, 64]"))
    done = run_cli("validate", spec)
    assert done.returncode == 2 and "image_size" in done.stderr and "height >= 32" in done.stderr


def _truncated_folder(root: Path) -> Path:
    write_image_folder(root, 6, 2, (40, 56), seed=0)
    victim = root / "coffee" / "0002.jpg"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])  # the header survives, the scan data and EOI do not
    return victim


def test_a_truncated_image_fails_the_run_naming_it(tmp_path):
    victim = _truncated_folder(tmp_path / "folder")
    out = tmp_path / "rows.csv"
    fail = _spec(tmp_path, "image_folder", tmp_path / "folder", name="fail.toml")
    run_cli("run", fail, "--out", out, "--no-report")
    (row,) = store.read_rows(out)
    assert row["status"] == "failed" and str(victim) in row["error"] and "truncated JPEG" in row["error"]
    assert row["skipped_inputs"] is None  # corrupt = "fail": nothing is skipped, nothing counted


@pytest.mark.parametrize("backend", ["torch", "jax", "tensorflow"])
def test_a_skipped_image_is_counted_in_the_row_warned_and_named_in_the_summary_line(tmp_path, backend):
    """#32.2: corrupt = "skip" is not silent, without -v: the loader workers' skips (a DataLoader worker
    process, tf.data's and grain's threads) reach the row's skipped_inputs and the launcher's stderr."""
    victim = _truncated_folder(tmp_path / "folder")
    out = tmp_path / "rows.csv"
    skip = _spec(tmp_path, "image_folder", tmp_path / "folder", backend, workers=1, data='corrupt = "skip"',
                 name="skip.toml")
    done = run_cli("run", skip, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "ok" and row["skipped_inputs"] == 1, row
    assert f'warning: skipped 1 corrupt input(s) ([data] corrupt = "skip"): {victim}' in done.stderr
    (summary,) = [line for line in done.stderr.splitlines() if line.startswith("[1/1] ok")]
    assert f"skipped 1 corrupt input(s), the first: {victim}: truncated JPEG" in summary


def test_validate_lists_every_bad_file_of_a_folder_up_to_a_limit(tmp_path):
    """#32.2: not the first bad file per attempt: all of them, ten named and "... and N more"."""
    folder = tmp_path / "folder"
    write_image_folder(folder, 12, 2, (40, 56), seed=0)
    victims = sorted((folder / "astronaut").glob("*.jpg"))
    for victim in victims:  # the header survives, the scan data and EOI do not
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    spec = _spec(tmp_path, "image_folder", folder)
    done = run_cli("validate", spec)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"12 of 24 files bad: {victims[0]}: truncated JPEG" in done.stderr
    assert str(victims[9]) in done.stderr and str(victims[10]) not in done.stderr and "; ... and 2 more" in done.stderr
    done = run_cli("validate", _spec(tmp_path, "image_folder", folder, data='corrupt = "skip"', name="skip.toml"))
    assert done.returncode == 0 and "valid for run" in done.stdout
    assert "warning:" in done.stderr and "12 of 24 files bad" in done.stderr and "skipped_inputs" in done.stderr
    for victim in victims[:3]:
        victim.write_text("not a picture")  # unreadable headers: the scan names every one at once
    line = _bad(tmp_path, folder)
    assert all(f"{v}: not a readable image" in line for v in victims[:3]) and "3 of 24 files bad" in line


def test_gpu_decode_is_refused_on_a_cpu_run(tmp_path, samples):
    line = _bad(tmp_path, samples["folder"], data='decode_device = "gpu"')
    assert "data.decode_device" in line and "needs a GPU run" in line


def test_infer_sweeps_batches_of_video_frames(tmp_path, samples):
    spec = write_spec(tmp_path, f"""
        name = "infer-video"
        model = "smallcnn"
        dataset = "video"
        data_path = "{samples['video']}"
        image_size = 16
        backends = ["torch"]
        device = "cpu"
        [infer]
        batch_sizes = [1, 4]
        input = "float32_pageable"
        latency_samples = 2
        [timing]
        warmup_steps = 0
        windows = 1
        window_steps = 2
    """)
    out = tmp_path / "infer.csv"
    done = run_cli("infer", spec, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    found = [(r["global_batch"], r["status"], r["input_source"]) for r in rows]
    assert found == [(1, "ok", "video"), (4, "ok", "video")]


def test_host_prepare_matches_the_reference_sampling():
    """`cnnbench infer` prepares frames from files on the host: the same sampling as every prepare()."""
    from cnnbench.data.augment import crop_draws, reference_prepare
    from cnnbench.data.loader import prepare_on_host

    images = np.random.default_rng(0).integers(0, 256, (3, 20, 30, 3), dtype=np.uint8)
    for kind, out in (("random_resized_crop", (8, 12)), ("pad_crop", (20, 30)), ("center", (10, 10))):
        draws = crop_draws(1, 0, np.arange(3), (20, 30), kind, out)
        mine = prepare_on_host(images, draws.boxes, draws.flips, out, (0.5,) * 3, (0.2,) * 3)
        expected = reference_prepare(images, draws.boxes, draws.flips, out, (0.5,) * 3, (0.2,) * 3)
        np.testing.assert_allclose(mine, expected.transpose(0, 3, 1, 2), atol=1e-4)


def test_cifar10_trains_with_pad_crop_and_flip_on_the_device(tmp_path):
    """CIFAR-10's training images cross as uint8 and get the standard augmentation; its test split stays
    the normalised arrays."""
    from test_data import _write_cifar

    (tmp_path / "cifar").mkdir()
    _write_cifar(tmp_path / "cifar")
    spec = write_spec(tmp_path, f"""
        name = "cifar-aug"
        model = "resnet18_cifar"
        dataset = "cifar10"
        data_path = "{tmp_path / 'cifar'}"
        backends = ["torch"]
        device = "cpu"
        per_device_batch = 8
        epochs = 1
        [timing]
        warmup_steps = 0
        windows = 1
        window_steps = 2
    """)
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "ok" and row["input_source"] == "arrays" and row["data_wait_share"] is not None
    assert row["test_accuracy"] is not None
    plan = plan_for(type("R", (), {"dataset": "cifar10", "image_size": (32, 32), "seed": 0, "data": DataSpec()})(),
                    np.zeros((4, 32, 32, 3), np.uint8), np.arange(4))
    assert (plan.train_kind, plan.eval_kind) == ("pad_crop", "none")


def test_loader_workers_start_without_cuda_unless_asked(tmp_path):
    """worker_init_fn hides CUDA from a DataLoader worker (hide_cuda_in_workers = true) or leaves it."""
    import subprocess
    import sys

    from conftest import REPO

    # both cases in one process (one PyTorch import): each starts from CUDA_VISIBLE_DEVICES=0
    code = ("import os; from backends.torch.input import _WorkerInit\n"
            "for hide in (True, False):\n"
            "    os.environ['CUDA_VISIBLE_DEVICES'] = '0'; _WorkerInit(0, hide)(0)\n"
            "    print(repr(os.environ['CUDA_VISIBLE_DEVICES']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.stdout.split() == ["''", "'0'"], done.stderr[-2000:]  # hidden, then left as it was


@pytest.mark.gpu
@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_folder_trains_on_one_gpu_with_cpu_or_nvjpeg_decode(tmp_path, samples, decode):
    spec = _spec(tmp_path, "image_folder", samples["folder"], workers=2, data=f'decode_device = "{decode}"')
    spec.write_text(spec.read_text().replace('device = "cpu"', 'device = "gpu"'))
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--no-report", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "ok" and row["device_type"] == "gpu" and row["data_wait_share"] is not None, row["error"]


def test_mixed_sizes_share_one_canvas_and_each_crop_stays_in_its_image(tmp_path):
    from types import SimpleNamespace

    write_image_folder(tmp_path / "mixed", 3, ["astronaut"], (16, 16), seed=0)
    write_image_folder(tmp_path / "mixed", 3, ["coffee"], (24, 20), seed=1)
    run = SimpleNamespace(dataset="image_folder", data_path=str(tmp_path / "mixed"), image_size=(8, 8), seed=0,
                          data=DataSpec(test_fraction=0.0))
    plan = plan_for(run)
    assert plan.canvas_hw == (24, 20)
    reader = SampleReader(plan)
    for item in range(len(plan.labels)):
        sample = reader.sample(0, item, True)
        height, width = plan.index.sizes[item]
        y0, x0, h, w = sample.box
        assert sample.pixels.shape == (24, 20, 3)
        assert 0 <= y0 and y0 + h <= height and 0 <= x0 and x0 + w <= width
        assert not sample.pixels[height:].any() and not sample.pixels[:, width:].any()  # zero padding


def test_torch_input_close_stops_its_persistent_workers(samples):
    """Left to interpreter exit, persistent workers with pin_memory cost 5 s each to join (a finished
    14-worker GPU run hung for 70 s); close() stops them at once."""
    import time
    from types import SimpleNamespace

    import psutil
    import torch

    from backends.torch.input import TorchInput

    run = SimpleNamespace(dataset="image_folder", data_path=str(samples["folder"]), image_size=(16, 16), seed=0,
                          data=DataSpec(workers=3, prefetch=2))
    me = psutil.Process()
    before = {child.pid for child in me.children()}  # other tests' servers may be running
    source = TorchInput(plan_for(run), torch.device("cpu"), global_batch=4, rank=0, world=1, channels_last=False)
    images, labels = source.next_batch()
    assert images.shape == (4, 3, 16, 16) and labels.shape == (4,)
    workers = [child for child in me.children() if child.pid not in before]
    assert len(workers) == 3  # the persistent workers, alive between batches
    started = time.perf_counter()
    source.close()
    assert not any(worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE for worker in workers)
    assert time.perf_counter() - started < 5


def test_torch_sampler_runs_epoch_after_epoch_in_the_neutral_order(samples):
    """One endless sampler: the loader reads ahead across epoch boundaries instead of draining at each
    (tf.data and grain stream the same way), and each epoch has its own neutral order."""
    import itertools
    from types import SimpleNamespace

    from backends.torch.input import _StepSampler

    run = SimpleNamespace(dataset="image_folder", data_path=str(samples["folder"]), image_size=(16, 16), seed=0,
                          data=DataSpec())
    plan = plan_for(run)
    sampler = _StepSampler(plan, global_batch=4, lo=2, count=2)  # rank 1 of 2
    steps = sampler.steps_per_epoch
    keys = list(itertools.islice(iter(sampler), 3 * steps))
    assert steps == len(plan.train_items) // 4 and len(keys) == 3 * steps
    for epoch in range(3):
        order = plan.epoch_order(epoch)
        for step in range(steps):
            assert keys[epoch * steps + step] == [(epoch, int(i), True) for i in order[step * 4 + 2:step * 4 + 4]]


def test_a_folder_of_both_orientations_crosses_in_a_canvas_bounded_by_the_model_with_the_same_crops(tmp_path):
    """#32.3: one portrait and one landscape size no longer pad every image into a square of the longer
    side: images over 4x the model's size are shrunk on the host (their crop boxes with them), so the
    uint8 batch is bounded by the model, and each crop shows what it showed from the full-size image."""
    from types import SimpleNamespace

    from cnnbench.data.loader import HOST_CANVAS_FACTOR, collate, prepare_on_host

    write_image_folder(tmp_path / "mixed", 4, ["astronaut"], (120, 200), seed=0)
    write_image_folder(tmp_path / "mixed", 4, ["coffee"], (200, 120), seed=1)
    run = SimpleNamespace(dataset="image_folder", data_path=str(tmp_path / "mixed"), image_size=(8, 8), seed=0,
                          data=DataSpec(test_fraction=0.0))
    plan = plan_for(run)
    bound = HOST_CANVAS_FACTOR * 8
    assert plan.index.canvas_hw == (200, 200) and plan.canvas_hw == (bound, bound)
    reader = SampleReader(plan)
    same, other = [], []
    for item in range(len(plan.labels)):
        sample = reader.sample(2, item, True)
        height, width = plan.index.sizes[item]
        kept = (bound, round(width * bound / height)) if height > width else (round(height * bound / width), bound)
        y0, x0, h, w = sample.box
        assert sample.pixels.shape == (bound, bound, 3)
        assert 0 <= y0 and y0 + h <= kept[0] + 1e-4 and 0 <= x0 and x0 + w <= kept[1] + 1e-4
        assert not sample.pixels[kept[0]:].any() and not sample.pixels[:, kept[1]:].any()
        # the same crop from the full-size image: the same picture, up to the host's area filter; another
        # epoch's crop of the image is the control
        image, _ = reader.pixels(item)
        unit = ((0.0,) * 3, (1 / 255,) * 3)
        shrunk = prepare_on_host(*collate([sample])[::2], np.array([sample.flip]), (8, 8), *unit).ravel()
        for epoch, found in ((2, same), (5, other)):
            box, flip = plan.draw(epoch, item, (height, width), True)
            whole = prepare_on_host(image[None], box[None], np.array([flip]), (8, 8), *unit).ravel()
            found.append(np.corrcoef(shrunk, whole)[0, 1])
    assert min(same) > 0.85 and np.median(same) > np.median(other) + 0.2, (same, other)
