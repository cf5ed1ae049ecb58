"""The option tables of a spec, as frozen dataclasses: each field's default, its doc and its checks
(choices, min, max) declared once, here.

A spec (:mod:`cnnbench.spec`) holds one instance of each table; runs carry the tables they need
(a run's backend options, its ``[data]`` table) to the worker as these same types, so a trainer reads
``run.options.bucket_cap_mb`` with the default defined next to its doc, never a ``.get(key, default)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cnnbench.registry import MODEL_PARALLEL_STRATEGIES, REGISTRY
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


def spec_field(default: Any, doc: str, **checks: Any) -> Any:
    """A spec field: its default, a docstring for users, and checks (choices, min, max)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default")
    return field(default=default, metadata={"doc": doc, **checks})


_f = spec_field


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
                                        "threads wait for under the GIL). Opt-in: every shape is captured at warm-up; "
                                        "measured in docs/results.md.")


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
    copy_threads: int = _f(0, "serve: threads copying one request's pixels into its batch slot; 0: 4 for "
                              "images of 1 MiB or more (a 1080p frame is 6.2 MB), else 1.", min=0, max=64)
    batching: str = _f("dynamic", "serve: dynamic (the pipelined batcher) or none (one forward per request, "
                                  "the plain route pattern).", choices=("dynamic", "none"))
    frontends: int = _f(-1, "serve: HTTP front-end processes (each parses, validates and decodes, and writes "
                            "pixels into a shared-memory ring) feeding one engine process that owns the "
                            "device; 0: one process does both; -1: from the host's cores (0 below 4 cores, "
                            "else (cores - 2) // 2 up to 8).", min=-1, max=32)
    listen: str = _f("reuseport", "serve, frontends > 0: each front end its own SO_REUSEPORT socket (the kernel "
                                  "spreads connections) or one shared socket (uvicorn's worker model).",
                     choices=("reuseport", "shared"))
    max_pixels: int = _f(36_000_000, "serve: JPEG/PNG bodies whose header says more pixels get "
                                     "pixel_limit_status, before any decoding.", min=1)
    pixel_limit_status: int = _f(413, "serve: the status of an image over max_pixels: 413 or 400.",
                                 choices=(413, 400))
    header_timeout_s: float = _f(5.0, "serve: a request head must be complete this long after its connection "
                                      "opened or its previous answer (idle connections close then).", min=0.001)
    body_timeout_s: float = _f(30.0, "serve: a body must be complete this long after its head (408).", min=0.001)
    max_header_bytes: int = _f(32 * 1024, "serve: request line and headers at most; past it 431.", min=1)
    max_connections: int = _f(1024, "serve: open connections per front end at most; past it 503.", min=1)
    switch_interval_ms: float = _f(0.0, "serve: the GIL switch interval of the process that runs the engine "
                                        "(sys.setswitchinterval), ms; 0: Python's own (5 ms). A launch that holds "
                                        "the GIL keeps the batcher's threads waiting up to one interval; eager "
                                        "PyTorch lets go of it per operator call (docs/serving.md: the GIL).",
                                   min=0.0, max=100.0)
    stop_timeout_s: float = _f(60.0, "serve, frontends > 0: each stage of a stop (the front ends, then the "
                                     "engine's drain) waits at most this long; a process still running then "
                                     "prints its threads' stacks (SIGUSR2) and is killed (SIGKILL).",
                               min=0.001)


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


BackendOptions = TorchOptions | TensorflowOptions | JaxOptions | KerasOptions

# Each backend's table in a spec (``[torch]``, ...) and on its runs.
OPTIONS_OF: dict[str, type] = {"torch": TorchOptions, "tensorflow": TensorflowOptions, "jax": JaxOptions,
                               "keras": KerasOptions}


def default_options(backend: str) -> BackendOptions:
    return OPTIONS_OF[backend]()


def options_text(options: BackendOptions) -> str:
    """The options a run ran with, as the ``backend_options`` column shows them (strategies are a column
    of their own)."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name != "strategies"}
    return ";".join(f"{k}={v}" for k, v in sorted(fields.items()))
