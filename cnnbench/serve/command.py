"""`cnnbench serve SPEC`: the spec's model behind HTTP, in one process (``frontends = 0``) or as front-end
processes feeding one engine process (:mod:`cnnbench.serve.frontends`)."""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass
from typing import Any

from cnnbench.backend import load as load_backend
from cnnbench.errors import UserError
from cnnbench.infer.batcher import copy_threads_for
from cnnbench.serve.config import ServeConfig, apply_switch_interval, default_frontends


@dataclass(frozen=True)
class EngineRecipe:
    """How a process builds its engine: ``module.function(*args)``, after setting ``env`` (picklable, so
    the engine process of the multi-process server builds it itself)."""

    module: str
    function: str
    args: tuple
    env: tuple[tuple[str, str], ...] = ()

    def build(self) -> Any:
        for key, value in self.env:  # before the framework is imported
            os.environ.setdefault(key, value)
        return getattr(importlib.import_module(self.module), self.function)(*self.args)


def backend_engine(backend: str, run: Any, variant: Any, top_k: int, pad_multiple: int) -> Any:
    """The serving engine of ``backend``, built through the backend contract."""
    return load_backend(backend).build_serve_engine(run, variant, top_k, pad_multiple)


def config_from_spec(table: Any, overrides: dict[str, Any]) -> ServeConfig:
    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    settings = {name: getattr(table, name) for name in fields if hasattr(table, name)}
    settings["deadline_ms"] = table.timeout_ms
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if settings.get("frontends", -1) < 0:
        settings["frontends"] = 0 if settings.get("batching") == "none" else default_frontends()
    return ServeConfig(**settings)


def serve(config: ServeConfig, recipe: EngineRecipe, info: dict[str, Any]) -> int:
    """Run the server of ``config`` until it is stopped; its exit code."""
    import signal

    from cnnbench import faults
    from cnnbench.serve.stacks import print_stacks_on_signal

    print_stacks_on_signal()  # the supervisor or the one server process; each child registers its own
    info.setdefault("top_k", config.top_k)
    info.setdefault("model_name", info["row"]["model"])
    # 0 (by image size) is resolved here, once: the batcher of either server takes the count as it is
    config = dataclasses.replace(config, copy_threads=copy_threads_for(tuple(info["image_shape"]),
                                                                       config.copy_threads))
    info["config"] = dataclasses.asdict(config)
    serving = f"frontends={config.frontends}" + (f";listen={config.listen}" if config.frontends else "")
    if config.copy_threads > 1:  # named only where a large image is copied by several threads
        serving += f";copy_threads={config.copy_threads}"
    if config.switch_interval_ms:  # named only where it differs from Python's own
        serving += f";switch_interval_ms={config.switch_interval_ms:g}"
    info["row"]["backend_options"] = ";".join(filter(None, [info["row"].get("backend_options"), serving]))
    if config.frontends:
        from cnnbench.serve.frontends import Supervisor

        return Supervisor(config, recipe, info).run()
    from cnnbench.serve.app import run_server
    from cnnbench.serve.service import InferenceService

    apply_switch_interval(config, "server process")  # it runs the engine and its batcher
    service = InferenceService(config, recipe.build, info, wrap_engine=faults.install_on_engine)
    return run_server(service, stop_signals=(signal.SIGINT, signal.SIGTERM))


def serve_spec(spec: Any, backend: str | None, device_kind: str | None, overrides: dict[str, Any]) -> int:
    """`cnnbench serve`: the spec's model, with ``[serve]`` settings and CLI overrides."""
    from cnnbench.infer.plan import serve_run
    from cnnbench.infer.rows import serve_http_row

    names = [backend] if backend else list(spec.backends)
    if len(names) != 1:
        raise UserError(f"serve: one backend per server process; the spec lists {', '.join(names)}: pass --backend")
    config = config_from_spec(spec.serve, overrides)
    if config.batching != spec.serve.batching:
        spec = dataclasses.replace(spec, serve=dataclasses.replace(spec.serve, batching=config.batching))
    run, variant = serve_run(spec, names[0], device_kind)
    module = load_backend(run.backend)
    env = dict(module.launch_layout(run).env)  # e.g. a CPU run hides the GPUs, JAX gets its platform
    if run.device_kind == "cpu":
        # Intra-op threads of a CPU model fight the server's own threads (event loop, decoders, batcher)
        # for the cores: with all cores they made a 2-core machine 20x slower at low load.
        threads = (os.cpu_count() or 1) - (0 if config.frontends else config.decode_workers) - 1
        env.setdefault("OMP_NUM_THREADS", str(max(1, threads)))
    info = {"image_shape": [*run.image_size, run.channels], "top_k": min(config.top_k, run.num_classes),
            "model_name": run.model, "row": serve_http_row(run, variant, dataclasses.asdict(config))}
    recipe = EngineRecipe("cnnbench.serve.command", "backend_engine",
                          (run.backend, run, variant, config.top_k, config.pad_multiple), tuple(env.items()))
    return serve(config, recipe, info)
