"""The layout's rules: no import cycles anywhere; the core's rooms stand on floors (tests/import_graph.py FLOORS)
and import only downwards, never `backends`; the core never imports a framework at import time."""

from __future__ import annotations

import pytest
from import_graph import (
    FLOORS,
    find_cycles,
    import_graph,
    module_level_framework_imports,
    project_sources,
    room,
    upward_arrows,
)

# The three loops the flat layout had, each as the lazy import that closed it: putting one back must fail.
OLD_LOOPS = {
    "backends.torch.train": "from backends.torch.pipeline import PipelineTrainer",
    "backends.jax.train": "from backends.jax.pipeline import JaxPipelineTrainer",
    "backends.tensorflow.train": "from backends.tensorflow.infer import TFInference",
}
CLOSERS = {
    "backends.torch.pipeline": "from backends.torch.train import TorchTrainer",
    "backends.jax.pipeline": "from backends.jax.train import JaxTrainer",
    "backends.tensorflow.infer": "from backends.tensorflow.train import TFTrainer",
}


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph(project_sources()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_core_rooms_import_only_downwards_and_never_backends() -> None:
    arrows = upward_arrows(import_graph(project_sources()))
    assert not arrows, "imports against the floors:\n" + "\n".join(arrows)


def test_every_core_room_has_a_floor() -> None:
    rooms = {room(name) for name in project_sources()} - {None}
    assert rooms <= set(FLOORS), f"rooms without a floor in tests/import_graph.py: {sorted(rooms - set(FLOORS))}"


@pytest.mark.parametrize(("module", "line"), [
    ("cnnbench.table.store", "from cnnbench.report.health import write_for_row"),  # a lower room reaching up
    ("cnnbench.spec", "from backends.torch import build"),  # the core reaching a backend
    ("cnnbench.runs", "import backends"),
])
def test_floor_check_names_an_arrow_against_the_floors(module: str, line: str) -> None:
    sources = project_sources()
    sources.setdefault("backends", "")
    sources[module] += f"\n\ndef _reaching_up():\n    {line}\n"
    target = line.split()[1]
    assert any(arrow.startswith(f"{module} -> {target}") for arrow in upward_arrows(import_graph(sources)))


@pytest.mark.parametrize("module", sorted(OLD_LOOPS))
def test_cycle_check_names_a_reintroduced_loop(module: str) -> None:
    sources = project_sources()
    # Both directions, each inside a function as the old code had them.
    sources[module] += f"\n\ndef _reintroduced():\n    {OLD_LOOPS[module]}\n"
    closer = next(m for m in CLOSERS if m.rsplit(".", 1)[0] == module.rsplit(".", 1)[0])
    sources[closer] += f"\n\ndef _other_way():\n    {CLOSERS[closer]}\n"
    cycles = find_cycles(import_graph(sources))
    assert any(module in c and closer in c for c in cycles), cycles


def test_core_and_backend_faces_import_no_framework_at_module_level() -> None:
    """The launcher imports the core and every backend's face: none may start a framework (they must
    never share a process, and device emulation flags must be set before one starts)."""
    offenders = {}
    for name, text in project_sources().items():
        core = name.startswith("cnnbench")
        face = name == "backends" or name.count(".") == 1 and name.startswith("backends.")
        if core or face:
            found = module_level_framework_imports(text)
            if found:
                offenders[name] = found
    assert not offenders, offenders


def test_framework_check_sees_a_module_level_import() -> None:
    text = "import numpy\ntry:\n    import torch\nexcept ImportError:\n    pass\n\ndef f():\n    import jax\n"
    assert module_level_framework_imports(text) == ["torch"]


def test_workers_start_in_the_repository_root():
    """`python -m cnnbench.run.worker` must find the package where it is not installed (a checkout run as
    `python3 -m cnnbench.cli` on another machine): the launcher starts workers in the repository root."""
    from cnnbench.run import launch

    assert (launch.REPO_ROOT / "cnnbench" / "run" / "worker.py").is_file()


# Same module names in every backend package (as keras does per engine): a reader who knows where PyTorch
# keeps its trainers knows where JAX and TensorFlow keep theirs.
BACKEND_MODULES = {"__init__", "train", "models", "input", "transforms", "infer", "serve", "common", "pipeline",
                   "optim"}
EVERY_FRAMEWORK_HAS = {"train", "models", "common"}


def test_backend_packages_use_the_same_module_names() -> None:
    from import_graph import ROOT

    packages = sorted(p for p in (ROOT / "backends").iterdir() if (p / "__init__.py").exists())
    assert {p.name for p in packages} >= {"torch", "jax", "tensorflow", "keras"}
    for package in packages:
        names = {p.stem for p in package.glob("*.py")}
        assert names <= BACKEND_MODULES, f"{package.name}: modules outside the shared names: {names - BACKEND_MODULES}"
        assert names >= EVERY_FRAMEWORK_HAS, f"{package.name}: missing {EVERY_FRAMEWORK_HAS - names}"
    arrays = {p.name for p in packages if (p / "input.py").exists() and (p / "transforms.py").exists()}
    assert arrays >= {"torch", "jax", "tensorflow"}  # the three native input pipelines
