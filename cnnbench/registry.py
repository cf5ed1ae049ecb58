"""The backend registry: names -> backend packages (``backends/<framework>/``), as plain data.

The core knows a backend by its entry here: its strategies, the packages stamped on its rows, how to
install it, and the module path of its package. Nothing here imports a backend: :func:`cnnbench.backend.load`
imports the package by that path when a run needs it, and the package's face imports its framework only
inside the functions that build a trainer, so the launching process can ask for versions, strategies and
process layouts without importing PyTorch, TensorFlow or JAX (which must never share a process).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BackendEntry:
    name: str
    module: str
    strategies: tuple[str, ...]  # the first is the default
    packages: tuple[str, ...]  # distributions whose versions are stamped on rows
    install_hint: str
    # Packages that only some strategies use (the engine under Keras), stamped on their rows.
    strategy_packages: dict[str, tuple[str, ...]] = field(default_factory=dict)


REGISTRY: dict[str, BackendEntry] = {
    e.name: e
    for e in (
        BackendEntry("torch", "backends.torch", ("ddp", "pipeline"), ("torch",),
                     "pip install torch (CPU: torch==2.13.0; see constraints/)"),
        BackendEntry("tensorflow", "backends.tensorflow", ("mirrored", "fit"),
                     ("tensorflow", "tensorflow-cpu", "keras"),
                     "pip install tensorflow-cpu keras (GPU: tensorflow[and-cuda])"),
        BackendEntry("jax", "backends.jax", ("sharded", "pmap", "tensor", "data+tensor", "pipeline"),
                     ("jax", "jaxlib", "flax", "optax"),
                     "pip install jax flax optax (GPU: jax[cuda12])"),
        BackendEntry("keras", "backends.keras", ("keras-jax", "keras-torch", "keras-tensorflow"),
                     ("keras",), "pip install keras plus the engine: jax, torch or tensorflow-cpu",
                     strategy_packages={"keras-jax": ("jax", "jaxlib"), "keras-torch": ("torch",),
                                        "keras-tensorflow": ("tensorflow", "tensorflow-cpu")}),
    )
}

BACKEND_NAMES: tuple[str, ...] = tuple(REGISTRY)

# Model-parallel strategy names: a backend without one refuses it with a reason (not a typo error).
MODEL_PARALLEL_STRATEGIES: tuple[str, ...] = ("pipeline", "tensor", "data+tensor")
