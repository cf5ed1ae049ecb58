"""One step from given weights on a given batch, in a backend's own worker process.

Used by ``cnnbench parity`` and by the data-parallel equivalence tests: the same weights and
batch go to every backend (or device count); logits in inference mode and the weights after one
SGD step come back in the neutral layout.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from cnnbench.errors import UserError
from cnnbench.model.facts import image_hw
from cnnbench.model.layout import neutral_layout
from cnnbench.options import default_options
from cnnbench.run.launch import launch, run_folder
from cnnbench.runs import Run


@dataclass(frozen=True)
class ProbeResult:
    logits: np.ndarray  # inference-mode logits of eval_x, before the step
    weights: dict[str, np.ndarray]  # after one training step, neutral layout, in layer order
    params: int


def probe_run(backend: str, strategy: str, model: str, *, devices: int = 1, image_size: int | tuple[int, int],
              channels: int, num_classes: int, global_batch: int, lr: float = 0.1,
              momentum: float = 0.0, weight_decay: float = 0.0, sync_bn: bool = False,
              precision: str = "fp32", timeout_s: float = 600.0, model_parallel: int = 1,
              microbatches: int = 1) -> Run:
    """A one-step run on CPU devices: plain SGD by default, as the parity checks ask."""
    if global_batch % devices:
        raise UserError(f"probe: global batch {global_batch} does not split over {devices} devices")
    return Run(
        run_id=uuid.uuid4().hex[:12], spec_name="probe", spec_hash="", source="<probe>",
        backend=backend, strategy=strategy, trial=0, model=model, dataset="synthetic", data_path="",
        image_size=image_hw(image_size), channels=channels, num_classes=num_classes, synthetic_size=global_batch,
        device_kind="cpu", devices=devices, hosts=1, scaling="weak",
        per_device_batch=global_batch // devices, global_batch=global_batch, precision=precision,
        compile=False, sync_bn=sync_bn, lr=lr, momentum=momentum, weight_decay=weight_decay,
        nesterov=False, schedule="constant", warmup_epochs=0.0, epochs=0, steps_per_epoch=0,
        total_steps=1, warmup_steps=0, windows=1, window_steps=1, seed=0, target_accuracy=0.0,
        timeout_s=timeout_s, options=default_options(backend), model_parallel=model_parallel, microbatches=microbatches,
    )


def random_weights(model: str, image_size: int | tuple[int, int], channels: int, num_classes: int,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Neutral weights with realistic scales (He-like kernels, BN statistics away from 0/1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in neutral_layout(model, image_size, channels, num_classes):
        if name.endswith("running_var"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(("running_mean", ".bias")):
            value = rng.normal(0.0, 0.1, shape)
        elif len(shape) == 1:  # BN scale
            value = rng.uniform(0.8, 1.2, shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        out[name] = value.astype(np.float32)
    return out


def run_probe(run: Run, weights: dict[str, np.ndarray] | None, x: np.ndarray, y: np.ndarray,
              eval_x: np.ndarray) -> ProbeResult:
    with run_folder("cnnbench-probe-") as tmp:
        probe_in, probe_out = tmp / "in.npz", tmp / "out.npz"
        named = {f"w:{k}": v for k, v in (weights or {}).items()}
        np.savez(probe_in, x=x.astype(np.float32), y=y.astype(np.int64), eval_x=eval_x.astype(np.float32), **named)
        outcome = launch(run, probe=(probe_in, probe_out))
        if outcome.status != "ok" or not probe_out.exists():
            tail = "\n".join(outcome.log_tail)
            raise RuntimeError(f"probe {run.backend}/{run.strategy} x{run.devices} failed: {outcome.error}\n{tail}")
        with np.load(probe_out) as saved:
            names = [str(n) for n in saved["names"]]
            return ProbeResult(saved["logits"], {n: saved[f"w:{n}"] for n in names}, int(saved["params"]))
