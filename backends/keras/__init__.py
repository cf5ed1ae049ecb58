"""Keras 3 backend's face: the contract functions; one Keras model trained by ``model.fit`` on the
engine that the strategy names (:mod:`backends.keras.train`).

Each strategy runs in its own process with ``KERAS_BACKEND`` set before Keras is imported; nothing
here imports Keras or an engine.
"""

from __future__ import annotations

from cnnbench import envinfo
from cnnbench.backend import BuildContext, Layout
from cnnbench.model.facts import MODELS
from cnnbench.runs import Run

ENGINES = {"keras-jax": "jax", "keras-torch": "torch", "keras-tensorflow": "tensorflow"}


def version() -> str | None:
    return envinfo.package_version("keras")



def engines_with_distribution() -> tuple[str, ...]:
    """Engines for which the installed Keras ships a distribution library (``keras.distribution``).

    Read from the package's files: importing Keras here would import its default engine into the
    launching process, which must stay free of frameworks."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.origin:
        return ()
    backend_dir = Path(spec.origin).parent / "src" / "backend"
    return tuple(e for e in ("jax", "torch", "tensorflow") if (backend_dir / e / "distribution_lib.py").exists())


def not_supported(run: Run) -> str | None:
    """What Keras itself lacks for a run (it becomes a ``skipped`` row with this reason)."""
    if ENGINES[run.strategy] == "torch" and run.devices > 1 and "torch" not in engines_with_distribution():
        return (f"not supported: keras {version()} has no data parallelism for the PyTorch engine "
                f"(keras.distribution supports {', '.join(engines_with_distribution()) or 'no engine'}); "
                f"run keras-torch on 1 device")
    return None


def unsupported(run: Run) -> str | None:
    """Why a configuration is impossible here (the spec is refused before anything is launched)."""
    engine = ENGINES[run.strategy]
    if run.hosts > 1:
        return "the keras backend runs on one host; use the jax, torch or tensorflow backend across hosts"
    if engine == "jax" and run.devices > 1 and MODELS[run.model].has_batchnorm and not run.sync_bn:
        return ("keras-jax on several devices computes batch-norm statistics over the global batch "
                "(keras.distribution.DataParallel is one SPMD program); set sync_bn = true")
    return None


def launch_layout(run: Run) -> Layout:
    engine = ENGINES[run.strategy]
    env = {"KERAS_BACKEND": engine, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if run.device_kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        if engine == "jax":
            env["JAX_PLATFORMS"] = "cpu"
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={run.devices}"
    return Layout(processes=1, env=env)


def build(run: Run, ctx: BuildContext):
    from backends.keras.train import KerasTrainer

    return KerasTrainer(run, ctx)


def devices() -> list[str]:
    """Engines, not devices: each engine lists its devices in its own process (``cnnbench env``)."""
    return [f"{s} ({envinfo.backend_version('keras', s) or 'engine not installed'})" for s in ENGINES]
