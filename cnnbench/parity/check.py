"""Proof that the CNN is the same in every framework.

For each model and every pair of installed backends, from the *same* neutral weights and batch:
  1. parameter counts (exact, real configuration) and the ordered list of weight shapes;
  2. forward logits in inference mode: relative L2 difference <= FORWARD_TOL;
  3. one plain SGD step (no momentum, fp32, training mode): the weights after the step, relative
     L2 difference (all tensors together) <= STEP_TOL, and the *updates* (after - before) of all tensors
     together, whose comparison catches a wrong gradient that a small weight change would hide,
     <= UPDATE_TOL.
BN running variances are left out of 3: PyTorch keeps the unbiased estimate, Keras and Flax the
biased one (each framework's own convention); running means are compared.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from cnnbench import envinfo
from cnnbench.model.facts import REFERENCE_PARAMS, image_hw
from cnnbench.model.layout import neutral_layout, trainable_count
from cnnbench.parity.probe import ProbeResult, probe_run, random_weights, run_probe
from cnnbench.registry import REGISTRY

FORWARD_TOL = 1e-4
PARITY_LR = 0.01
# The update check's limit is set from float32's own noise floor: against a float64 computation of
# the same step (JAX, x64), float32 updates differ by ~1e-6 for smallcnn and resnet18_cifar but by
# ~2e-2 for resnet50, whose BN-parameter gradients are sums that cancel (untrained weights, few
# samples per channel in the last stage). A real mismatch (padding, BN epsilon, momentum or decay
# convention, layout) moves updates by far more than that, and most also fail the forward check.
# The same noise limits the weights after the step for resnet50 (its updates are large relative to
# the weights at this size), so its step tolerance is 5e-3 instead of 1e-4.
UPDATE_TOL = {"smallcnn": 1e-3, "resnet18_cifar": 1e-3, "resnet50": 5e-2}
STEP_TOL = {"smallcnn": 1e-4, "resnet18_cifar": 1e-4, "resnet50": 5e-3}

# (image size, channels, classes, batch) used for the numerical checks; resnet50 at 64x64 to keep
# CPU time small (its parameter count does not depend on the image size).
PARITY_CONFIGS = {
    "smallcnn": (8, 1, 10, 8),
    "resnet18_cifar": (32, 3, 10, 4),
    "resnet50": (64, 3, 1000, 4),
}
REAL_CONFIGS = {model: key for key in REFERENCE_PARAMS for model in [key[0]]}


@dataclass(frozen=True)
class Check:
    model: str
    pair: str
    what: str
    value: float
    limit: float
    integer: bool = False  # a count (parameters, layers): shown as an integer, not as 0.00e+00

    @property
    def ok(self) -> bool:
        return self.value <= self.limit

    def shown(self, number: float) -> str:
        return f"{int(number):,d}" if self.integer else f"{number:.2e}"


@dataclass
class ParityResult:
    """The checks, and each model's parameter count per participant (label -> count)."""

    checks: list[Check] = field(default_factory=list)
    params: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-12))


def compare(model: str, name_a: str, a: ProbeResult, name_b: str, b: ProbeResult,
            start: dict[str, np.ndarray]) -> list[Check]:
    pair = f"{name_a} vs {name_b}"
    shapes_a = [(k, v.shape) for k, v in a.weights.items()]
    shapes_b = [(k, v.shape) for k, v in b.weights.items()]
    differing = sum(x != y for x, y in zip(shapes_a, shapes_b)) + abs(len(shapes_a) - len(shapes_b))
    checks = [
        Check(model, pair, "params difference", abs(a.params - b.params), 0, integer=True),
        Check(model, pair, "layers with other shapes", differing, 0, integer=True),
        Check(model, pair, "forward rel L2", _rel(a.logits, b.logits), FORWARD_TOL),
    ]
    compared = [k for k in a.weights if not k.endswith("running_var") and k in b.weights]
    after_a = np.concatenate([a.weights[k].ravel() for k in compared])
    after_b = np.concatenate([b.weights[k].ravel() for k in compared])
    checks.append(Check(model, pair, "weights after step rel L2", _rel(after_a, after_b), STEP_TOL[model]))
    update_a = np.concatenate([(a.weights[k] - start[k]).ravel() for k in compared])
    update_b = np.concatenate([(b.weights[k] - start[k]).ravel() for k in compared])
    checks.append(Check(model, pair, "update rel L2", _rel(update_a, update_b), UPDATE_TOL[model]))
    return checks


def installed_backends() -> list[str]:
    return [name for name in REGISTRY if envinfo.backend_version(name)]


def participants(backends: list[str]) -> list[tuple[str, str, str]]:
    """(label, backend, strategy) compared: each backend's default strategy; for keras, every
    installed engine, since the same Keras model runs on each (labelled by the strategy)."""
    found = []
    for backend in backends:
        entry = REGISTRY[backend]
        if entry.strategy_packages:
            found += [(s, backend, s) for s in entry.strategies if envinfo.backend_version(backend, s)]
        else:
            found.append((backend, backend, entry.strategies[0]))
    return found


def run_parity(models: list[str], backends: list[str], perturb: tuple[str, str] | None = None,
               seed: int = 0, image_size: tuple[int, int] | None = None) -> ParityResult:
    """All checks for the models across the backends, and the parameter counts; ``perturb=(label,
    tensor)`` changes one weight that one participant receives (the tests use it to prove a mismatch
    is caught); ``image_size`` replaces the models' parity sizes with one (height, width).

    Every probe is a process of its own that spends most of its life importing its framework and
    compiling, so they run side by side, up to one per core (at least two)."""
    result = ParityResult()
    checks = result.checks
    inputs, jobs, layout = {}, [], {}
    for model in models:
        side, channels, classes, batch = PARITY_CONFIGS[model]
        size = image_hw(image_size or side)
        real = REAL_CONFIGS[model]
        layout[model] = Check(model, "layout", "layout params - reference",
                              abs(trainable_count(neutral_layout(*real)) - REFERENCE_PARAMS[real]), 0, integer=True)
        start = random_weights(model, size, channels, classes, seed)
        rng = np.random.default_rng(seed + 1)
        x = rng.standard_normal((batch, channels, *size)).astype(np.float32)
        inputs[model] = (start, x, rng.integers(0, classes, batch))
        for label, backend, strategy in participants(backends):
            weights = dict(start)
            if perturb and perturb[0] == label:
                weights[perturb[1]] = weights[perturb[1]] * 1.01
            run = probe_run(backend, strategy, model, image_size=size, channels=channels,
                            num_classes=classes, global_batch=batch, lr=PARITY_LR)
            jobs.append((model, label, run, weights))
    with ThreadPoolExecutor(max(2, min(len(jobs), os.cpu_count() or 1))) as pool:
        futures = [pool.submit(run_probe, run, weights, inputs[model][1], inputs[model][2], inputs[model][1])
                   for model, _, run, weights in jobs]
        probes = [future.result() for future in futures]
    for model in models:
        found: dict[str, ProbeResult] = {label: probe for (m, label, _, _), probe in zip(jobs, probes) if m == model}
        result.params[model] = {label: probe.params for label, probe in found.items()}
        checks.append(layout[model])
        for name_a, name_b in itertools.combinations(found, 2):
            checks += compare(model, name_a, found[name_a], name_b, found[name_b], inputs[model][0])
    return result


def format_params(params: dict[str, dict[str, int]]) -> str:
    """e.g. ``resnet50: 25,557,032 in torch, tensorflow, jax``; participants that differ are grouped
    by their count. The counts are of the parity configuration (PARITY_CONFIGS)."""
    lines = []
    for model, counts in params.items():
        groups: dict[int, list[str]] = {}
        for label, count in counts.items():
            groups.setdefault(count, []).append(label)
        size, channels, classes, _ = PARITY_CONFIGS[model]
        found = "; ".join(f"{count:,d} in {', '.join(labels)}" for count, labels in groups.items())
        lines.append(f"{model}: {found} ({size}x{size}x{channels}, {classes} classes)")
    return "\n".join(lines)


def format_checks(checks: list[Check]) -> str:
    lines = ["| model | backends | check | value | limit | ok |", "|---|---|---|---:|---:|---|"]
    for c in checks:
        limit = c.shown(c.limit) if c.integer else f"{c.limit:.0e}"
        lines.append(f"| {c.model} | {c.pair} | {c.what} | {c.shown(c.value)} | {limit} | {'yes' if c.ok else 'NO'} |")
    return "\n".join(lines)
