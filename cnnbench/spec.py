"""Experiment specs: TOML -> validated, frozen objects -> the list of runs they expand to.

Every error names the file and the field, says what was expected and what was found, and is
raised as :class:`~cnnbench.errors.SpecError` (the CLI turns it into one line and exit code 2).
Fields that sweep take a scalar or a list; the spec expands into the product
backends x strategies x scaling x batch x precision x devices x trials.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import BACKEND_NAMES, MODEL_PARALLEL_STRATEGIES, REGISTRY
from cnnbench.data import catalog as data_sources
from cnnbench.errors import DataError, SpecError
from cnnbench.model.facts import MODELS, image_hw, image_size_problem
from cnnbench.table.spread import DEFAULT_SPREAD_LIMIT

PRECISIONS = ("fp32", "bf16", "fp16")
SCALINGS = ("weak", "strong")
DEVICE_KINDS = ("auto", "cpu", "gpu")
SCHEDULES = ("constant", "cosine")
INFER_TOGGLES = ("compile", "bf16", "fp16", "channels_last", "pinned", "pad")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_SCOPES = ("model", "step")
DDP_COMPILE_MODES = ("ddp_optimizer", "python_reducer", "no_optimization")
INFER_INPUTS = ("resident", "uint8_pinned", "float32_pinned", "float32_pageable")


def _f(default: Any, doc: str, **checks: Any) -> Any:
    """A spec field: its default, a docstring for users, and checks (choices, min, max)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default")
    return field(default=default, metadata={"doc": doc, **checks})


@dataclass(frozen=True)
class OptimizerSpec:
    """SGD with momentum, identical in every backend (coupled L2 weight decay, PyTorch's form)."""

    lr: float = _f(0.1, "Base learning rate at global batch 256; scaled by global_batch / 256.", min=0.0)
    momentum: float = _f(0.9, "Momentum (0 disables it).", min=0.0, max=1.0)
    weight_decay: float = _f(5e-5, "L2 weight decay added to the gradient of every parameter.", min=0.0)
    nesterov: bool = _f(False, "Nesterov momentum.")
    schedule: str = _f("constant", "Learning-rate schedule after warm-up.", choices=SCHEDULES)
    warmup_epochs: float = _f(0.0, "Linear warm-up length in epochs (real data only).", min=0.0)


@dataclass(frozen=True)
class TimingSpec:
    """The timing protocol: first step alone, warm-up discarded, then timed windows."""

    warmup_steps: int = _f(5, "Steps after the first one that are run and discarded.", min=0)
    windows: int = _f(5, "Number of timed windows.", min=1)
    window_steps: int = _f(10, "Steps in each timed window.", min=1)
    spread_limit: float = _f(DEFAULT_SPREAD_LIMIT, "A run whose windows spread more than this (p90 / p10 - 1 "
                                                   "of the step times) is flagged as noisy.", min=0.0)


@dataclass(frozen=True)
class TorchOptions:
    """PyTorch backend options."""

    strategies: tuple[str, ...] = _f(("ddp",), "ddp: DistributedDataParallel; pipeline: GPipe.",
                                     choices=REGISTRY["torch"].strategies + ("tensor", "data+tensor"))
    compile_mode: str = _f("default", "torch.compile mode when `compile = true`.", choices=COMPILE_MODES)
    compile_scope: str = _f("step", "What `compile = true` compiles: the whole training step (forward, loss, "
                                    "backward, optimizer step) or the model's forward only.", choices=COMPILE_SCOPES)
    ddp_compile: str = _f("ddp_optimizer", "torch._dynamo.config.optimize_ddp for a compiled DDP model: split the "
                                           "graph at bucket boundaries, the Python reducer traced by compiled "
                                           "autograd, or one graph.", choices=DDP_COMPILE_MODES)
    compiled_autograd: bool = _f(False, "Trace the backward pass into the compiled step (compile_scope = "
                                        "\"step\"); ddp_compile = \"python_reducer\" turns it on.")
    wrap_ddp_single: bool = _f(False, "Wrap the model in DDP also when the run has one process (a 1-process "
                                      "DDP only adds its reducer over a group of one).")
    channels_last: bool = _f(False, "Use the channels_last memory format for model and inputs.")
    num_workers: int = _f(0, "DataLoader worker processes (real data).", min=0)
    pin_memory: bool = _f(False, "DataLoader pin_memory (GPU).")
    persistent_workers: bool = _f(False, "Keep DataLoader workers alive between epochs.")
    prefetch_factor: int = _f(2, "Batches prefetched per DataLoader worker.", min=1)
    bucket_cap_mb: int = _f(25, "DDP gradient bucket size, MiB.", min=1)
    optimizer_impl: str = _f("auto", "SGD implementation: auto (fused on GPUs, foreach on CPUs), fused, foreach "
                                     "or for-loop.", choices=("auto", "fused", "foreach", "for-loop"))
    cudnn_benchmark: bool = _f(True, "torch.backends.cudnn.benchmark: time the convolution algorithms per shape "
                                     "at first use and keep the fastest (GPU).")
    deterministic: bool = _f(False, "torch.use_deterministic_algorithms(True, warn_only=True) and "
                                    "cudnn.deterministic: deterministic kernels where they exist; ops without "
                                    "one warn (GPU).")
    compile_cache_dir: str = _f("", "Inductor's FX graph / Triton cache for this backend (TORCHINDUCTOR_CACHE_DIR); "
                                    "default: the top-level compile_cache_dir.")
    serve_cuda_graphs: bool = _f(False, "`cnnbench serve` on a GPU: each padded batch shape's forward is captured "
                                        "once in a CUDA graph and replayed per batch (microseconds of host work "
                                        "instead of the eager forward's milliseconds of Python, which the server's "
                                        "threads wait for under the GIL). Off until measured on a GPU.")


@dataclass(frozen=True)
class TensorflowOptions:
    """TensorFlow/Keras backend options."""

    strategies: tuple[str, ...] = _f(("mirrored",), "mirrored: custom step under strategy.run; fit: model.fit.",
                                     choices=REGISTRY["tensorflow"].strategies + MODEL_PARALLEL_STRATEGIES)


@dataclass(frozen=True)
class JaxOptions:
    """JAX/Flax backend options."""

    strategies: tuple[str, ...] = _f(("sharded",), "sharded: jit over a device mesh; pmap: jax.pmap.",
                                     choices=REGISTRY["jax"].strategies)
    xla_flags: str = _f("", "Extra XLA_FLAGS for the worker, e.g. \"--xla_gpu_enable_command_buffer=\".")
    compile_cache_dir: str = _f("", "JAX's persistent compilation cache (jax_compilation_cache_dir, every "
                                    "compilation kept); default: the top-level compile_cache_dir.")


@dataclass(frozen=True)
class KerasOptions:
    """Keras 3 backend options: one Keras model trained by model.fit on the engine each strategy names."""

    strategies: tuple[str, ...] = _f(("keras-jax",), "keras-jax, keras-torch, keras-tensorflow.",
                                     choices=REGISTRY["keras"].strategies)


@dataclass(frozen=True)
class InferSpec:
    """`cnnbench infer`: forward-only runs over batch sizes, and the optimisation ablation."""

    batch_sizes: tuple[int, ...] = _f((1, 8, 32), "Batch sizes of the forward-only sweep.", min=1)
    latency_samples: int = _f(30, "Batches timed one at a time (synchronized, logits copied to the host) "
                                  "for the latency percentiles.", min=1)
    ablation: tuple[str, ...] = _f((), "Toggles measured one at a time against a plain baseline (fp32, no "
                                       "compile, NCHW, pageable memory, no padding), plus all together.",
                                   choices=INFER_TOGGLES)
    ablation_batch: int = _f(50, "Batch size of the ablation (not a multiple of pad_multiple, so `pad` pads).",
                             min=1)
    pad_multiple: int = _f(32, "The `pad` toggle pads each batch up to a multiple of this and masks the "
                               "padding out of the results.", min=1)
    rounds: int = _f(3, "The ablation measures its variants in this many interleaved rounds.", min=1)
    input: tuple[str, ...] = _f(("uint8_pinned",), "Where each sweep batch starts: resident (on the device "
                                "already: the model's own rate), uint8_pinned (uint8 NHWC in pinned host "
                                "memory, converted and normalised on the device), float32_pinned, "
                                "float32_pageable (a normalised float32 batch in ordinary host memory).",
                                choices=INFER_INPUTS)


@dataclass(frozen=True)
class ServeSpec:
    """`cnnbench infer`: a dynamic micro-batcher under open-loop Poisson load (and batch = 1);
    `cnnbench serve`: the HTTP server's settings."""

    rates: tuple[float, ...] = _f((), "Offered loads in requests/s; empty: no serving runs.", min=0.001)
    max_batch: int = _f(32, "The batcher flushes when it holds this many requests...", min=1)
    timeout_ms: float = _f(5.0, "...or when the oldest request has waited this long since it arrived.", min=0.0)
    requests: int = _f(400, "Requests offered at each rate (at most).", min=1)
    max_duration_s: float = _f(20.0, "Arrivals at each rate end after this long.", min=0.1)
    pad_multiple: int = _f(8, "Dynamic batches are padded to a multiple of this, so that compiled and "
                              "jitted models see a few shapes only.", min=1)
    # `cnnbench serve` (the HTTP server); max_batch, timeout_ms (the deadline) and pad_multiple apply too.
    host: str = _f("127.0.0.1", "serve: address to bind.")
    port: int = _f(8000, "serve: TCP port (0: any free port).", min=0, max=65535)
    max_queue: int = _f(256, "serve: requests waiting for the device at most; past it, 503 with Retry-After.", min=1)
    max_body_bytes: int = _f(8 * 2**20, "serve: larger request bodies get 413.", min=1)
    decode_workers: int = _f(4, "serve: threads decoding JPEG/PNG bodies (OpenCV releases the GIL).", min=1)
    top_k: int = _f(5, "serve: classes in each answer.", min=1)
    batching: str = _f("dynamic", "serve: dynamic (the pipelined batcher) or none (one forward per request, "
                                  "the plain route pattern).", choices=("dynamic", "none"))
    frontends: int = _f(-1, "serve: HTTP front-end processes (each parses, validates and decodes, and writes "
                            "pixels into a shared-memory ring) feeding one engine process that owns the "
                            "device; 0: one process does both; -1: from the host's cores (0 below 4 cores, "
                            "else (cores - 2) // 2 up to 8).", min=-1, max=32)
    max_pixels: int = _f(36_000_000, "serve: JPEG/PNG bodies whose header says more pixels get "
                                     "pixel_limit_status, before any decoding.", min=1)
    pixel_limit_status: int = _f(413, "serve: the status of an image over max_pixels: 413 or 400.",
                                 choices=(413, 400))
    header_timeout_s: float = _f(5.0, "serve: a request head must be complete this long after its connection "
                                      "opened or its previous answer (idle connections close then).", min=0.001)
    body_timeout_s: float = _f(30.0, "serve: a body must be complete this long after its head (408).", min=0.001)
    max_header_bytes: int = _f(32 * 1024, "serve: request line and headers at most; past it 431.", min=1)
    max_connections: int = _f(1024, "serve: open connections per front end at most; past it 503.", min=1)


@dataclass(frozen=True)
class SlurmSpec:
    """`cnnbench sweep --slurm`: how each run becomes a batch job (CLI options override these)."""

    partition: str = _f("", "#SBATCH --partition (empty: the cluster's default).")
    account: str = _f("", "#SBATCH --account.")
    qos: str = _f("", "#SBATCH --qos.")
    constraint: str = _f("", "#SBATCH --constraint, e.g. \"h100|h200\".")
    devices_per_node: int = _f(0, "Most devices of one run on one node: a run of more spans "
                                  "devices / devices_per_node nodes (0: every run on one node).", min=0)
    cpus_per_task: int = _f(0, "#SBATCH --cpus-per-task, one task per host (0: the cluster's default).", min=0)
    time_limit_min: int = _f(0, "#SBATCH --time in minutes (0: timeout_s plus a start-up margin).", min=0)
    extra: tuple[str, ...] = _f((), "More #SBATCH lines, e.g. \"--mem=64G\" or \"#SBATCH --exclusive\".")
    setup: tuple[str, ...] = _f((), "Shell lines the job runs before srun, e.g. \"module load cuda\".")
    hosts_per_node: int = _f(1, "cnnbench hosts sharing one node: 1 on a cluster; more lets one machine "
                                "stand in for several nodes (testing).", min=1)
    poll_s: float = _f(10.0, "How often `--wait` asks Slurm about the jobs, seconds.", min=0.1)


DECODE_DEVICES = ("cpu", "gpu")
CORRUPT_POLICIES = ("fail", "skip")
AUGMENTS = ("auto", "random_resized_crop", "pad_crop", "center", "none")


@dataclass(frozen=True)
class DataSpec:
    """The input pipeline of real data (image_folder, video, cifar10, digits): each framework's own
    loader (PyTorch DataLoader, tf.data, grain) is set up from these fields."""

    workers: int = _f(0, "Loader workers decoding in parallel: DataLoader num_workers, tf.data map "
                         "parallelism (0: AUTOTUNE), grain worker_count (0: in the main process).", min=0)
    prefetch: int = _f(2, "Batches prefetched: per DataLoader worker (prefetch_factor), tf.data prefetch "
                          "buffer, grain's read-ahead; the next batch is always copied during the step.", min=1)
    pin_memory: bool = _f(True, "Batches in page-locked host memory, copied non-blocking (GPU runs).")
    shuffle_buffer: int = _f(0, "0: a seeded permutation of the whole epoch; N: shuffle within blocks of N "
                                "consecutive items (streaming sources such as video).", min=0)
    decode_device: str = _f("cpu", "Where JPEGs are decoded: cpu (loader workers) or gpu "
                                   "(torchvision.io.decode_jpeg on CUDA; torch only).", choices=DECODE_DEVICES)
    hide_cuda_in_workers: bool = _f(True, "DataLoader workers start with CUDA_VISIBLE_DEVICES=\"\" so they "
                                          "cannot create a CUDA context.")
    corrupt: str = _f("fail", "An image that cannot be decoded: fail (the run fails naming the file) or skip "
                              "(counted, warned, replaced by the next good image).", choices=CORRUPT_POLICIES)
    augment: str = _f("auto", "Training crop: auto (image_folder random_resized_crop, cifar10 pad_crop, video "
                              "none), random_resized_crop, pad_crop, center or none; all with a horizontal "
                              "flip except none and center. Evaluation uses center (video: none).",
                      choices=AUGMENTS)
    resize: bool = _f(True, "Resize to image_size on the device; false: every image must already be "
                            "image_size.")
    test_fraction: float = _f(0.2, "image_folder: share of each class held out as the test split "
                                   "(every k-th file in sorted order).", min=0.0, max=0.9)
    frames: int = _f(0, "video: frames used (0: all).", min=0)


@dataclass(frozen=True)
class Spec:
    """One experiment: a model, a dataset, and the axes to sweep."""

    name: str = _f(None, "Experiment name, stamped on every row.")
    model: str = _f(None, "Network to train.", choices=tuple(MODELS))
    dataset: str = _f(None, "Data source.", choices=data_sources.DATASETS)
    data_path: str = _f("", "Folder of a file dataset (cifar10, image_folder) or the video file (video); "
                            "cifar10's default is $CNNBENCH_DATA/cifar10.")
    image_size: tuple[int, ...] = _f((), "Model input size: an integer (square) or [height, width] "
                                         "(synthetic, image_folder, video; cifar10 and digits fix it).", min=1)
    channels: int = _f(0, "Image channels (synthetic only).", min=0)
    num_classes: int = _f(0, "Classes (synthetic only; real datasets fix it).", min=0)
    synthetic_size: int = _f(0, "Synthetic images generated (default: one global batch).", min=0)
    backends: tuple[str, ...] = _f(BACKEND_NAMES, "Backends to run, or \"all\".", choices=BACKEND_NAMES)
    devices: tuple[int, ...] = _f((1,), "Device counts to run, all hosts together.", min=1)
    device: str = _f("auto", "auto (GPUs if present), cpu (emulated devices) or gpu.", choices=DEVICE_KINDS)
    scaling: tuple[str, ...] = _f(("weak",), "weak: per_device_batch fixed; strong: global_batch fixed.",
                                  choices=SCALINGS)
    per_device_batch: tuple[int, ...] = _f((), "Per-device batch sizes (weak scaling).", min=1)
    global_batch: tuple[int, ...] = _f((), "Global batch sizes (strong scaling).", min=1)
    precision: tuple[str, ...] = _f(("fp32",), "Compute precision(s).", choices=PRECISIONS)
    compile: bool = _f(False, "torch.compile / XLA jit_compile (JAX always jits).")
    sync_bn: bool = _f(False, "Synchronize batch-norm statistics across devices.")
    model_parallel: int = _f(2, "Devices that share one model copy in data+tensor (tensor and pipeline use "
                                "all devices of the run).", min=1)
    microbatches: int = _f(4, "Micro-batches per step of the pipeline strategy.", min=1)
    epochs: int = _f(1, "Epochs over the training set (real data).", min=1)
    steps: int = _f(0, "Total steps (synthetic data; default: what the timing protocol needs).", min=0)
    trials: int = _f(1, "Repetitions of every run.", min=1)
    seed: int = _f(0, "Seed for initialisation, data order and synthetic data.", min=0)
    target_accuracy: float = _f(0.0, "Test accuracy for time_to_accuracy_s (0: none).", min=0.0, max=1.0)
    compile_cache_dir: str = _f("", "Folder where compiled programs persist across process restarts (PyTorch "
                                    "inductor's FX graph cache, JAX's persistent cache), set before the framework "
                                    "starts; empty: the frameworks' defaults.")
    timeout_s: float = _f(1800.0, "Wall-clock limit of one run; the process tree is killed after it.", min=1.0)
    optimizer: OptimizerSpec = _f(OptimizerSpec(), "Optimizer settings.")
    timing: TimingSpec = _f(TimingSpec(), "Timing protocol settings.")
    torch: TorchOptions = _f(TorchOptions(), "PyTorch options.")
    tensorflow: TensorflowOptions = _f(TensorflowOptions(), "TensorFlow options.")
    jax: JaxOptions = _f(JaxOptions(), "JAX options.")
    keras: KerasOptions = _f(KerasOptions(), "Keras 3 options.")
    infer: InferSpec = _f(InferSpec(), "Inference benchmark (`cnnbench infer`).")
    serve: ServeSpec = _f(ServeSpec(), "Dynamic batching under load (`cnnbench infer`), the HTTP server "
                                       "(`cnnbench serve`).")
    slurm: SlurmSpec = _f(SlurmSpec(), "Batch jobs of `cnnbench sweep --slurm`.")
    data: DataSpec = _f(DataSpec(), "Input pipeline of real data.")
    source: str = field(default="<spec>", metadata={"internal": True})

    def backend_options(self, backend: str) -> Any:
        return getattr(self, backend)


# ---------------------------------------------------------------------------------------------
# Parsing: TOML table -> dataclass, with one precise message per problem.


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "table"}.get(type(value), type(value).__name__)


def _check_scalar(kind: type, value: Any, source: str, path: str, meta: dict) -> Any:
    expected = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}[kind]
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise SpecError(source, path, f"expected {expected}, found {_type_name(value)} {value!r}")
    if "choices" in meta and value not in meta["choices"]:
        raise SpecError(source, path, f"expected one of {', '.join(map(str, meta['choices']))}, found {value!r}")
    if "min" in meta and value < meta["min"]:
        raise SpecError(source, path, f"expected a value >= {meta['min']}, found {value!r}")
    if "max" in meta and value > meta["max"]:
        raise SpecError(source, path, f"expected a value <= {meta['max']}, found {value!r}")
    return value


def _parse_table(cls: type, table: dict, source: str, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise SpecError(source, prefix + unknown[0],
                        f"unknown field; expected one of {', '.join(sorted(fields))}")
    values = {}
    for name, value in table.items():
        path, meta, hint = prefix + name, fields[name].metadata, hints[name]
        if name == "image_size" and cls is Spec:
            values[name] = _parse_image_size(value, source, path)
        elif dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise SpecError(source, path, f"expected a table [{path}], found {_type_name(value)}")
            values[name] = _parse_table(hint, value, source, path + ".")
        elif typing.get_origin(hint) is tuple:
            kind = typing.get_args(hint)[0]
            if kind is str and name == "backends" and value == "all":
                value = list(BACKEND_NAMES)
            items = value if isinstance(value, list) else [value]
            if not items:
                raise SpecError(source, path, "expected at least one value, found an empty list")
            parsed = [_check_scalar(kind, v, source, f"{path}[{i}]" if isinstance(value, list) else path, meta)
                      for i, v in enumerate(items)]
            if len(set(parsed)) != len(parsed):
                raise SpecError(source, path, f"values repeat: {parsed}")
            values[name] = tuple(parsed)
        else:
            values[name] = _check_scalar(hint, value, source, path, meta)
    missing = [n for n, f in fields.items() if f.default is None and n not in values]
    if missing:
        raise SpecError(source, prefix + missing[0], "required field is missing")
    return cls(**values)


def _parse_image_size(value: Any, source: str, path: str) -> tuple[int, int]:
    """An integer (square) or [height, width] -> (height, width)."""
    items = value if isinstance(value, list) else [value, value]
    if len(items) != 2:
        raise SpecError(source, path, f"expected an integer or [height, width], found {value!r}")
    return tuple(_check_scalar(int, v, source, path, {"min": 1}) for v in items)  # type: ignore[return-value]


def parse_spec_text(text: str, source: str = "<spec>") -> Spec:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, None, f"not valid TOML: {exc}") from None
    if not table:
        raise SpecError(source, None, "empty spec: expected at least name, model and dataset")
    spec = _parse_table(Spec, table, source)
    spec = dataclasses.replace(spec, source=source)
    _check_consistency(spec)
    return spec


def load_spec(path: str | Path) -> Spec:
    path = Path(path)
    if not path.exists():
        raise SpecError(str(path), None, "no such file")
    if path.is_dir():
        raise SpecError(str(path), None, "is a directory, expected a TOML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(str(path), None, f"cannot be read: {exc}") from None
    return parse_spec_text(text, str(path))


# ---------------------------------------------------------------------------------------------
# Cross-field checks and expansion into runs.


def dataset_info_for(spec: Spec) -> data_sources.DatasetInfo:
    model = MODELS[spec.model]
    try:
        return data_sources.dataset_info(
            spec.dataset, spec.data_path or None,
            image_size=spec.image_size or image_hw(model.default_image_size),
            channels=spec.channels or model.default_channels,
            num_classes=spec.num_classes or model.default_classes,
            synthetic_size=spec.synthetic_size, data=spec.data,
        )
    except DataError as exc:
        raise SpecError(spec.source, "data_path", str(exc)) from None


SIZED_DATASETS = ("synthetic", "image_folder", "video")  # the spec's image_size applies to these


def _check_consistency(spec: Spec) -> None:
    src = spec.source
    if spec.dataset != "synthetic":
        for name in ("image_size", "channels", "num_classes", "synthetic_size"):
            if getattr(spec, name) and not (name == "image_size" and spec.dataset in SIZED_DATASETS):
                raise SpecError(src, name, f"only for dataset synthetic; {spec.dataset} fixes it")
        if spec.steps and spec.dataset != "video":
            raise SpecError(src, "steps", f"only for datasets synthetic and video; {spec.dataset} trains for "
                                          f"`epochs`")
    if spec.dataset not in data_sources.FILE_DATASETS and spec.data_path:
        raise SpecError(src, "data_path", f"only for file datasets ({', '.join(data_sources.FILE_DATASETS)}), "
                                          f"found dataset {spec.dataset}")
    if spec.dataset in ("image_folder", "video") and not spec.data_path:
        raise SpecError(src, "data_path", f"required for dataset {spec.dataset} (the folder or the video file)")
    if "weak" not in spec.scaling and spec.per_device_batch:
        raise SpecError(src, "per_device_batch", "only for weak scaling; strong scaling uses global_batch")
    if "strong" not in spec.scaling and spec.global_batch:
        raise SpecError(src, "global_batch", "only for strong scaling; weak scaling uses per_device_batch")
    model = MODELS[spec.model]
    info = dataset_info_for(spec) if spec.dataset != "cifar10" else None
    problem = image_size_problem(spec.model, info.image_size if info else (32, 32))
    if problem:
        raise SpecError(src, "image_size" if spec.dataset in SIZED_DATASETS else "model",
                        f"{problem} (dataset {spec.dataset})")
    _check_torch_compile(spec)
    if spec.sync_bn and not model.has_batchnorm:
        raise SpecError(src, "sync_bn", f"model {spec.model} has no batch norm")
    check_sbatch_lines(src, "slurm.extra", spec.slurm.extra)
    for index, line in enumerate(spec.slurm.setup):
        if "\n" in line or "\r" in line:
            raise SpecError(src, f"slurm.setup[{index}]", "expected one shell line per item, found a newline")
    for strong_batch in spec.global_batch if "strong" in spec.scaling else ():
        for n in spec.devices:
            if strong_batch % n:
                raise SpecError(src, "global_batch",
                                f"strong scaling splits global_batch {strong_batch} over {n} devices: "
                                f"{strong_batch} is not divisible by {n}")


def _check_torch_compile(spec: Spec) -> None:
    torch = spec.torch
    if torch.compiled_autograd and torch.compile_scope != "step":
        raise SpecError(spec.source, "torch.compiled_autograd",
                        "needs compile_scope = \"step\" (the backward pass runs inside the compiled step)")
    if torch.ddp_compile == "python_reducer" and torch.compile_scope != "step":
        raise SpecError(spec.source, "torch.ddp_compile",
                        "python_reducer is traced by compiled autograd: it needs compile_scope = \"step\"")
    if torch.ddp_compile == "no_optimization" and torch.compiled_autograd:
        raise SpecError(spec.source, "torch.ddp_compile",
                        "no_optimization cannot be combined with compiled_autograd (PyTorch refuses it)")
def check_sbatch_lines(source: str, field_name: str, lines: tuple[str, ...]) -> tuple[str, ...]:
    """Extra #SBATCH lines, given as ``--opt=value`` or ``#SBATCH --opt=value``: normalised to the
    latter; anything else (a newline, a shell command) would end up in the script, so it is refused."""
    normalised = []
    for index, line in enumerate(lines):
        text = line.strip()
        text = text if text.startswith("#SBATCH ") else f"#SBATCH {text}"
        option = text.removeprefix("#SBATCH ").strip()
        if "\n" in line or "\r" in line or not option.startswith("-"):
            raise SpecError(source, f"{field_name}[{index}]",
                            f"expected an sbatch option such as \"--mem=64G\", found {line!r}")
        normalised.append(f"#SBATCH {option}")
    return tuple(normalised)


def check_training_batches(spec: Spec) -> None:
    """A spec used for training needs its batch list (an inference-only spec does not)."""
    if "weak" in spec.scaling and not spec.per_device_batch:
        raise SpecError(spec.source, "per_device_batch", "required for weak scaling")
    if "strong" in spec.scaling and not spec.global_batch:
        raise SpecError(spec.source, "global_batch", "required for strong scaling")


def spec_hash(spec: Spec) -> str:
    """Hash of the fields that fix what one run computes; the swept lists are left out, so a
    sweep that gains a device count or a trial still recognises the runs it already has."""
    swept = {"name", "backends", "devices", "scaling", "per_device_batch", "global_batch",
             "precision", "trials", "timeout_s", "source", "infer", "serve", "slurm"}
    fixed = {k: v for k, v in dataclasses.asdict(spec).items() if k not in swept}
    # How noisy a run may be before it is flagged changes nothing it computes.
    fixed["timing"] = {k: v for k, v in fixed["timing"].items() if k != "spread_limit"}
    for backend in BACKEND_NAMES:  # the strategies list is swept too
        fixed[backend] = {k: v for k, v in fixed[backend].items() if k != "strategies"}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, default=list).encode()).hexdigest()[:12]
