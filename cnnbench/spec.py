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

from cnnbench.data import catalog as data_sources
from cnnbench.errors import DataError, SpecError
from cnnbench.model.facts import MODELS, image_hw, image_size_problem
from cnnbench.options import (
    DEVICE_KINDS,
    PRECISIONS,
    SCALINGS,
    BackendOptions,
    DataSpec,
    InferSpec,
    JaxOptions,
    KerasOptions,
    OptimizerSpec,
    ServeSpec,
    SlurmSpec,
    TensorflowOptions,
    TimingSpec,
    TorchOptions,
)
from cnnbench.options import spec_field as _f
from cnnbench.registry import BACKEND_NAMES


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

    def backend_options(self, backend: str) -> BackendOptions:
        return getattr(self, backend)

    def run_options(self, backend: str) -> BackendOptions:
        """The backend's table as its runs carry it: an empty ``compile_cache_dir`` takes the spec's."""
        options = self.backend_options(backend)
        if hasattr(options, "compile_cache_dir") and not options.compile_cache_dir:
            options = dataclasses.replace(options, compile_cache_dir=self.compile_cache_dir)
        return options


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
