"""`cnnbench infer`: a spec -> one worker run per backend and precision, each with its list of jobs.

Three kinds of job, all on one device:
- ``sweep``: forward-only timing over ``infer.batch_sizes`` in the spec's own configuration
  (precision, compile, the backend's options), once for each of ``infer.input`` (where each batch
  starts: resident on the device, uint8 or float32 in pinned host memory, float32 in pageable
  memory); the variant of each row is the input's name, and a backend that cannot start from an
  input gets a ``skipped`` row saying why;
- ``ablation``: a plain baseline (fp32, no compilation, NCHW, pageable host memory, no padding)
  and each toggle of ``infer.ablation`` alone against it, then all of them together, at
  ``infer.ablation_batch``; a toggle a backend cannot apply becomes a ``skipped`` row saying why
  and is left out of ``all``;
- ``serve``: the micro-batcher under open-loop Poisson load at each of ``serve.rates``, with
  dynamic batching and with batch = 1.
Variants are plain data; the worker builds one model per variant and runs that variant's jobs.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from cnnbench.backend import load as load_backend
from cnnbench.errors import SpecError
from cnnbench.expand import resolve_device_kind
from cnnbench.registry import BACKEND_NAMES
from cnnbench.runs import InferJob, InferRun, Variant
from cnnbench.spec import Spec, dataset_info_for, spec_hash


def sweep_variants(spec: Spec, backend: str, precision: str) -> list[Variant]:
    """The spec's own configuration (what `cnnbench run` would train with), once per input."""
    torch_opts = spec.torch if backend == "torch" else None
    own = Variant("sweep", precision, spec.compile or backend == "jax",
                  torch_opts.compile_mode if torch_opts else "default", bool(torch_opts and torch_opts.channels_last))
    return [dataclasses.replace(own, name=source, input=source) for source in spec.infer.input]


def ablation_variants(spec: Spec, backend: str) -> list[Variant]:
    """The baseline, then each toggle alone."""
    infer = spec.infer
    # JAX always jits (as in training): its baseline is jitted and `compile` has nothing to add.
    baseline = Variant("baseline", compile=backend == "jax",
                       compile_mode=spec.torch.compile_mode if backend == "torch" else "default")
    changes = {
        "compile": {"compile": True},
        "bf16": {"precision": "bf16"},
        "fp16": {"precision": "fp16"},
        "channels_last": {"channels_last": True},
        "pinned": {"input": "float32_pinned"},
        "pad": {"pad_multiple": infer.pad_multiple},
    }
    return [baseline] + [dataclasses.replace(baseline, name=t, **changes[t]) for t in infer.ablation]


def all_together(baseline: Variant, toggles: list[Variant]) -> Variant | None:
    """Every applicable toggle at once (bf16 over fp16: one precision at a time)."""
    if len(toggles) < 2:
        return None
    names = {t.name for t in toggles}
    combined = dataclasses.replace(baseline, name="all")
    for toggle in toggles:
        if toggle.name == "fp16" and "bf16" in names:
            continue
        changed = {f.name: getattr(toggle, f.name) for f in dataclasses.fields(toggle)
                   if f.name != "name" and getattr(toggle, f.name) != getattr(baseline, f.name)}
        combined = dataclasses.replace(combined, **changed)
    return combined


def _unsupported(backend: str, variant: Variant, device_kind: str, baseline: Variant | None) -> str | None:
    """Why a backend cannot apply a variant (or, for an ablation toggle, why it changes nothing)."""
    if variant.precision == "fp16" and device_kind != "gpu":
        return "fp16 needs a GPU"
    if baseline is not None and variant == dataclasses.replace(baseline, name=variant.name):
        if variant.name == "compile" and backend == "jax":
            return "jax always jits: the baseline is already compiled"
        return f"{variant.name} changes nothing here"
    if variant.pinned and device_kind != "gpu":
        return "pinned memory speeds host-to-device copies; on CPU there is no copy"
    return load_backend(backend).infer_unsupported(variant)


def expand_infer(spec: Spec, *, backends: tuple[str, ...] | None = None, device_kind: str | None = None,
                 profile_dir: str = "") -> tuple[list[InferRun], list[tuple[InferRun, Variant, str]]]:
    """(runs to launch, (run, variant, reason) of ablation toggles that are skipped)."""
    kind = device_kind or resolve_device_kind(spec.device)
    if spec.devices != (1,):
        raise SpecError(spec.source, "devices", f"inference runs on one device; found {list(spec.devices)}")
    info = dataset_info_for(spec)
    backends = backends or spec.backends
    infer = spec.infer
    runs, skipped = [], []
    for backend in backends:
        for index, precision in enumerate(spec.precision):
            jobs: list[InferJob] = []
            sweeps = sweep_variants(spec, backend, precision)
            pageable = dataclasses.replace(sweeps[0], name="sweep", input="float32_pageable")
            run = _infer_run(spec, backend, precision, kind, info, profile_dir)
            reason = _unsupported(backend, pageable, kind, None)
            if reason:  # e.g. the keras backend, or fp16 on a CPU: one skipped row says why
                skipped.append((run, pageable, reason))
                continue
            for sweep in sweeps:
                why = _unsupported(backend, sweep, kind, None)
                if why:  # e.g. pinned memory on a CPU
                    skipped.append((run, sweep, why))
                    continue
                jobs += [InferJob("sweep", sweep, b) for b in infer.batch_sizes]
            if index == 0 and infer.ablation:
                baseline, *toggles = ablation_variants(spec, backend)
                applicable = [baseline]
                for variant in toggles:
                    why = _unsupported(backend, variant, kind, baseline)
                    if why:
                        skipped.append((run, variant, why))
                    else:
                        applicable.append(variant)
                combined = all_together(baseline, applicable[1:])
                for variant in applicable + ([combined] if combined else []):
                    jobs.append(InferJob("ablation", variant, infer.ablation_batch))
            if index == 0:  # the in-process batcher copies float32 requests from pageable memory
                jobs += serve_jobs(spec, pageable)
            if jobs:  # every input skipped (e.g. only pinned ones on a CPU): nothing to launch
                runs.append(dataclasses.replace(run, jobs=tuple(jobs)))
    return runs, skipped


def serve_jobs(spec: Spec, variant: Variant) -> list[InferJob]:
    """Each offered load with dynamic batching, then with batch = 1 (no waiting, no padding)."""
    serve, jobs = spec.serve, []
    for rate in serve.rates:
        for mode, max_batch, timeout in (("dynamic", serve.max_batch, serve.timeout_ms), ("batch1", 1, 0.0)):
            jobs.append(InferJob("serve", dataclasses.replace(variant, name=mode), max_batch, rate=rate,
                                 timeout_ms=timeout, requests=serve.requests, max_duration_s=serve.max_duration_s,
                                 pad_multiple=serve.pad_multiple if max_batch > 1 else 1))
    return jobs


def serve_run(spec: Spec, backend: str, device_kind: str | None = None) -> tuple[InferRun, Variant]:
    """The run and variant `cnnbench serve` builds its one model from: the spec's own configuration
    (its first precision), as the sweep measures it."""
    kind = device_kind or resolve_device_kind(spec.device)
    if spec.devices != (1,):
        raise SpecError(spec.source, "devices", f"serving runs on one device; found {list(spec.devices)}")
    if not load_backend(backend).has_serve_engine:
        serving = [name for name in BACKEND_NAMES if load_backend(name).has_serve_engine]
        raise SpecError(spec.source, "backends", f"serve: backend {backend} has no serving engine; use one of "
                                                 f"{', '.join(serving)}")
    # The staging buffers are page-locked on a GPU whatever the spec's pin_memory says.
    own = sweep_variants(spec, backend, spec.precision[0])[0]
    graphs = backend == "torch" and kind == "gpu" and spec.torch.serve_cuda_graphs
    variant = dataclasses.replace(own, name=spec.serve.batching, input="uint8_pinned" if kind == "gpu" else "resident",
                                  pad_multiple=spec.serve.pad_multiple, cuda_graphs=graphs)
    # the staging input is the server's own (uint8 buffers), not an infer input a backend may refuse
    reason = _unsupported(backend, dataclasses.replace(variant, input="resident"), kind, None)
    if reason:
        raise SpecError(spec.source, "precision", f"serve: {backend}: {reason}")
    return _infer_run(spec, backend, spec.precision[0], kind, dataset_info_for(spec), ""), variant


def _infer_run(spec: Spec, backend: str, precision: str, kind: str, info: Any, profile_dir: str) -> InferRun:
    t = spec.timing
    largest = max(spec.infer.batch_sizes + (spec.infer.ablation_batch, spec.serve.max_batch))
    return InferRun(
        run_id=uuid.uuid4().hex[:12], spec_name=spec.name, spec_hash=spec_hash(spec), source=spec.source,
        backend=backend, strategy="infer", trial=0, model=spec.model, dataset=spec.dataset,
        data_path=spec.data_path, image_size=info.image_size, channels=info.channels,
        num_classes=info.num_classes, synthetic_size=largest, device_kind=kind, devices=1, hosts=1,
        per_device_batch=largest, global_batch=largest, precision=precision, compile=spec.compile,
        warmup_steps=t.warmup_steps, windows=t.windows, window_steps=t.window_steps, seed=spec.seed,
        timeout_s=spec.timeout_s, options=spec.run_options(backend), data=spec.data,
        latency_samples=spec.infer.latency_samples, rounds=spec.infer.rounds,
        profile_dir=profile_dir, spread_limit=t.spread_limit,
    )
