"""What a new user's first commands print: `cnnbench env` lists every framework's devices, and a failed
TensorFlow run says why in one line (its traceback only with -v). (`validate` of a serve-only spec:
tests/test_validate.py.)"""

from __future__ import annotations

import re

import numpy as np
from conftest import TINY_DIGITS, run_cli, write_spec

from cnnbench import envinfo
from cnnbench.backend import load as load_backend
from cnnbench.errors import error_line
from cnnbench.registry import REGISTRY


def test_every_backend_face_lists_its_devices_without_importing_its_framework():
    """#32.5: `cnnbench env` printed "torch: devices: could not list devices": the face had no devices()."""
    for name in REGISTRY:
        assert callable(getattr(load_backend(name).module, "devices", None)), name


def test_env_lists_the_devices_pytorch_sees():
    found = envinfo.backend_devices("torch")  # in a process of its own, as `cnnbench env` asks
    assert found and found[-1].startswith("cpu (") and found[-1].endswith(" threads)"), found


def test_a_tensorflow_graph_error_becomes_one_line_with_its_cause(tmp_path):
    """#32.5: a real TensorFlow failure (a label outside the classes, in the real worker's training
    step): the row's error is one line naming the node and the cause, not the op's Python stack."""
    from cnnbench.parity.probe import probe_run
    from cnnbench.run.launch import launch, run_folder

    run = probe_run("tensorflow", "mirrored", "smallcnn", image_size=28, channels=1, num_classes=10, global_batch=4)
    with run_folder("cnnbench-probe-") as folder:
        x = np.zeros((4, 1, 28, 28), np.float32)
        np.savez(folder / "in.npz", x=x, y=np.array([1, 2, 3, 12]), eval_x=x)
        outcome = launch(run, probe=(folder / "in.npz", folder / "out.npz"))
    assert outcome.status == "failed" and outcome.worker_reported
    assert outcome.error.startswith("rank 0: InvalidArgumentError: Graph execution error: Detected at node ")
    assert "Received a label value of 12 which is outside the valid range of [0, 10)" in outcome.error
    assert "\n" not in outcome.error and 'File "' not in outcome.error and "[[{{node" not in outcome.error
    assert any("Traceback" in line for line in outcome.log_tail)  # the traceback: in the log, for -v


def test_error_line_keeps_plain_messages_and_bounds_long_ones():
    assert error_line(ValueError("bad shape\n  (4, 28)")) == "ValueError: bad shape (4, 28)"
    assert len(error_line("x" * 2000)) == 500


def test_a_failed_tensorflow_run_prints_its_error_as_the_summary_line_and_no_traceback(tmp_path):
    spec = write_spec(tmp_path, TINY_DIGITS.replace('["torch"]', '["tensorflow"]').replace("epochs = 2", "epochs = 1"))
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--no-report", env={"CNNBENCH_FAULT": "rank=0,step=2,kind=raise"})
    assert done.returncode == 1, done.stderr[-2000:]
    (summary,) = [line for line in done.stderr.splitlines() if line.startswith("[1/1] failed")]
    assert re.fullmatch(r"\[1/1\] failed: rank 0: InjectedFault: injected fault at step 2 on process 0 "
                        r"\(\d+\.\d s\)", summary), summary
    assert "Traceback" not in done.stderr and "    | " not in done.stderr
