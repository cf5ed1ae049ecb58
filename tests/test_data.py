"""Data sources: digits split, CIFAR-10 binary files written here in the official format."""

from __future__ import annotations

import numpy as np
import pytest

from cnnbench.data import arrays as data
from cnnbench.errors import DataError


def test_digits_split_is_fixed_stratified_and_standardised():
    ds = data.load_digits_dataset()
    assert ds.train_x.shape[1:] == (1, 8, 8) and ds.train_x.dtype == np.float32
    assert len(ds.train_y) + len(ds.test_y) == 1797
    info = data.dataset_info("digits")
    assert (info.train_size, info.test_size) == (len(ds.train_y), len(ds.test_y))
    # stratified: every class in the test split, in proportion
    counts = np.bincount(ds.test_y, minlength=10)
    assert counts.min() >= 30
    assert abs(float(ds.train_x.mean())) < 1e-4 and abs(float(ds.train_x.std()) - 1) < 1e-3
    again = data.load_digits_dataset()
    np.testing.assert_array_equal(ds.test_y, again.test_y)


def _write_cifar(folder, per_file=7, test=5, seed=0):
    rng = np.random.default_rng(seed)
    written = {}
    for name in (*data.CIFAR10_TRAIN_FILES, data.CIFAR10_TEST_FILE):
        n = test if name == data.CIFAR10_TEST_FILE else per_file
        images = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, n)
        data.write_cifar10_file(folder / name, images, labels)
        written[name] = (images, labels)
    return written


def test_cifar10_binary_roundtrip(tmp_path):
    written = _write_cifar(tmp_path)
    # The record format itself: 1 label byte, then 3072 pixel bytes, R plane first.
    raw = (tmp_path / "data_batch_1.bin").read_bytes()
    images, labels = written["data_batch_1.bin"]
    assert len(raw) == 7 * 3073 and raw[0] == labels[0] and raw[1] == images[0, 0, 0, 0]
    assert raw[1 + 1024] == images[0, 1, 0, 0]  # first green pixel
    ds = data.load_cifar10_dataset(str(tmp_path))
    assert ds.train_x.shape == (35, 3, 32, 32) and ds.test_x.shape == (5, 3, 32, 32)
    np.testing.assert_array_equal(ds.train_y[:7], labels)
    expected = (images[0, 2] / 255.0 - data.CIFAR10_MEAN[2]) / data.CIFAR10_STD[2]
    np.testing.assert_allclose(ds.train_x[0, 2], expected, rtol=1e-5)
    info = data.dataset_info("cifar10", str(tmp_path))
    assert (info.train_size, info.test_size, info.image_size) == (35, 5, (32, 32))


def test_cifar10_from_env_and_archive_folder(tmp_path, monkeypatch):
    inner = tmp_path / "cifar10" / "cifar-10-batches-bin"
    inner.mkdir(parents=True)
    _write_cifar(inner)
    monkeypatch.setenv("CNNBENCH_DATA", str(tmp_path))
    assert data.dataset_info("cifar10").train_size == 35


def test_cifar10_missing_and_malformed_files(tmp_path):
    with pytest.raises(DataError, match="missing file .*data_batch_1.bin"):
        data.dataset_info("cifar10", str(tmp_path))
    _write_cifar(tmp_path)
    (tmp_path / "data_batch_3.bin").write_bytes(b"\x01" * 100)
    with pytest.raises(DataError, match="malformed file .*data_batch_3.bin.*3073"):
        data.dataset_info("cifar10", str(tmp_path))


def test_cifar10_bad_label_is_rejected(tmp_path):
    _write_cifar(tmp_path)
    raw = bytearray((tmp_path / "test_batch.bin").read_bytes())
    raw[0] = 42
    (tmp_path / "test_batch.bin").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="label 42"):
        data.load_cifar10_dataset(str(tmp_path))


def test_spec_with_missing_cifar_names_data_path(tmp_path):
    from conftest import run_cli, write_spec

    spec = write_spec(tmp_path, f"""
        name = "c"
        model = "resnet18_cifar"
        dataset = "cifar10"
        data_path = "{tmp_path / 'nothing'}"
        per_device_batch = 8
    """)
    done = run_cli("validate", spec)
    assert done.returncode == 2 and "data_path" in done.stderr and "missing file" in done.stderr


def test_synthetic_is_deterministic():
    a = data.synthetic_dataset(4, 16, 3, 10, seed=1)
    b = data.synthetic_dataset(4, 16, 3, 10, seed=1)
    np.testing.assert_array_equal(a.train_x, b.train_x)
    assert not a.has_test
