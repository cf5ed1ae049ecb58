"""The sections of the GPU runbook, declared: what each runs, how long it takes on one H200 with the
compile caches warm, which files' code makes its rows, and which rows of the results files are its own."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runbook import data, health, inference, serving, sidefile, training
from runbook.pairs import read_rows
from runbook.steps import Context

Row = dict
Pick = Callable[[Row], bool]


def everything(_: Row) -> bool:
    return True


def spec_is(*names: str) -> Pick:
    return lambda row: row.get("spec_name") in names


def spec_starts(prefix: str) -> Pick:
    return lambda row: (row.get("spec_name") or "").startswith(prefix)


def field_is(name: str, *values: str) -> Pick:
    return lambda row: row.get(name) in values


@dataclass(frozen=True)
class Output:
    """Rows of one results file that a section writes (CSV rows or JSON lines)."""

    file: str
    pick: Pick = everything

    def rows(self, results: Path) -> list[Row]:
        path = results / self.file
        found = sidefile.read(path) if path.suffix in (".jsonl", ".json") else read_rows(path)
        return [row for row in found if self.pick(row)]


# Code every training or inference row depends on (the lead's restructuring moves some of these files;
# a path that does not exist simply matches nothing).
CORE = ("cnnbench/run", "cnnbench/runs.py", "cnnbench/spec.py", "cnnbench/options.py", "cnnbench/registry.py",
        "cnnbench/backend.py", "cnnbench/expand.py", "cnnbench/rows.py", "cnnbench/gpu_monitor.py",
        "cnnbench/model", "cnnbench/table", "backends/__init__.py", "benchmarks/runbook/steps.py")
TORCH_DIR, JAX_DIR = "backends/torch", "backends/jax"
# A backend's serving engine (serve.py) makes only the serving rows: a change there leaves the training and
# inference rows current (git pathspecs; the serving sections name the whole folders).
TORCH = (TORCH_DIR, f":(exclude){TORCH_DIR}/serve.py")
JAX = (JAX_DIR, f":(exclude){JAX_DIR}/serve.py")
PAIRS = ("benchmarks/runbook/pairs.py", "experiments/resnet50_synthetic.toml")
INFER = ("cnnbench/infer", "experiments/resnet50_infer.toml", "benchmarks/runbook/inference.py")


@dataclass(frozen=True)
class Section:
    name: str
    minutes: float                    # expected on one H200, compile caches warm
    summary: str
    run: Callable[[Context], None]
    deps: tuple[str, ...]             # paths (git pathspecs) whose code makes the rows
    outputs: tuple[Output, ...]
    needs: tuple[str, ...] = field(default=())  # modules the GPU host lacks unless the wheels were carried


def _compare(*pairs: str) -> tuple[Output, ...]:
    return (Output("h200_perf.csv", spec_is(*(f"compare_{p}" for p in pairs))),
            Output("h200_perf_peers.jsonl", field_is("pair", *pairs)))


SECTIONS: dict[str, Section] = {s.name: s for s in (
    Section("baseline", 8, "every training path once: ResNet-50 (torch eager and compiled, jax sharded and pmap), "
            "ResNet-18 CIFAR", training.baseline,
            (*CORE, *TORCH, *JAX, "experiments/resnet50_synthetic.toml", "experiments/resnet18_synthetic.toml",
             "benchmarks/runbook/training.py"),
            (Output("h200_resnet50.csv"), Output("h200_resnet18.csv"))),
    Section("training", 7, "PyTorch eager, compiled model only and compiled whole step beside their plain peers",
            training.training, (*CORE, *PAIRS, *TORCH, "benchmarks/plain_peers/torch_resnet50.py"),
            _compare("eager", "model", "step")),
    Section("training-graphs", 5, "the whole step with CUDA graphs (reduce-overhead) beside its plain peer",
            training.training_graphs, (*CORE, *PAIRS, *TORCH, "benchmarks/plain_peers/torch_resnet50.py"),
            _compare("step-cudagraphs")),
    Section("training-jax", 4, "JAX sharded at batch 256 and 512 beside the plain Flax loop", training.training_jax,
            (*CORE, *PAIRS, *JAX, "benchmarks/plain_peers/jax_resnet50.py"), _compare("jax", "jax-b512")),
    Section("options", 8, "one option at a time: fused/foreach SGD, reduce-overhead, JAX batch 512 and 1024, XLA "
            "command buffers off", training.options,
            (*CORE, *TORCH, *JAX, "experiments/resnet50_synthetic.toml", "benchmarks/runbook/training.py"),
            (Output("h200_options.csv", lambda r: r.get("spec_name") in training.OPTIONS),)),
    Section("options-autotune", 8, "torch.compile with max-autotune-no-cudagraphs (still compiling after 450 s "
            "with cold caches: run it twice on one host, one --cache)", training.options_autotune,
            (*CORE, *TORCH, "experiments/resnet50_synthetic.toml", "benchmarks/runbook/training.py"),
            (Output("h200_options.csv", lambda r: r.get("spec_name") in training.AUTOTUNE_OPTIONS),)),
    Section("options-ddp", 8, "the 1-process DDP wrapper with each ddp_compile mode beside the peer's --ddp",
            training.options_ddp, (*CORE, *PAIRS, *TORCH, "benchmarks/plain_peers/torch_resnet50.py"),
            (Output("h200_perf.csv", spec_starts("torch_ddp_")),
             Output("h200_perf_peers.jsonl", lambda r: r.get("pair", "").startswith("ddp-")))),
    Section("inference-torch", 8, "PyTorch inference by input at batches 256, 512, then 1, 64; the plain compiled "
            "forward at 256", inference.inference_torch,
            (*CORE, *INFER, *TORCH, "benchmarks/plain_peers/torch_resnet50_infer.py"),
            (Output("h200_perf.csv", lambda r: r.get("spec_name") == "perf_infer" and r.get("backend") == "torch"),
             Output("h200_perf_peers.jsonl", field_is("pair", "infer-torch-b256")))),
    Section("inference-jax", 4, "JAX inference by input at batches 1, 64, 256, 512; the plain jitted forward at 256",
            inference.inference_jax, (*CORE, *INFER, *JAX, "benchmarks/plain_peers/jax_resnet50_infer.py"),
            (Output("h200_perf.csv", lambda r: r.get("spec_name") == "perf_infer" and r.get("backend") == "jax"),
             Output("h200_perf_peers.jsonl", field_is("pair", "infer-jax-b256")))),
    Section("infer-sweep", 6, "batch sizes 1-512 from float32 pageable memory (eager PyTorch, JAX) and dynamic "
            "batching under Poisson load in process", inference.infer_sweep, (*CORE, *INFER, *TORCH, *JAX),
            (Output("h200_infer.csv", lambda r: r.get("mode") == "serve"
                    or r.get("variant") in ("sweep", "float32_pageable")),)),
    Section("ablation", 6, "the inference ablation (compile, bf16, fp16, channels_last, pinned, pad), 3 rounds",
            inference.ablation, (*CORE, *INFER, *TORCH, *JAX, "experiments/resnet50_ablation.toml"),
            (Output("h200_ablation.csv"),)),
    Section("keras", 5, "Keras 3 on its jax and torch engines beside the native backends", training.keras,
            (*CORE, *TORCH, *JAX, "backends/keras", "experiments/keras_resnet50.toml"), (Output("h200_keras.csv"),),
            needs=("keras",)),
    Section("model-parallel", 6, "experiments/resnet50_model_parallel.toml: ddp, sharded, tensor, pipeline of 4",
            training.model_parallel, (*CORE, *TORCH, *JAX, "experiments/resnet50_model_parallel.toml"),
            (Output("h200_model_parallel.csv", spec_is("resnet50_model_parallel")),)),
    Section("microbatches", 7, "both pipelines on one stage with 1, 2 and 8 micro-batches", training.microbatches,
            (*CORE, *TORCH, *JAX, "experiments/resnet50_model_parallel.toml", "benchmarks/runbook/training.py"),
            (Output("h200_model_parallel.csv", spec_starts("resnet50_pipeline_")),)),
    Section("real-input", 8, "training from 2,048 JPEG files beside synthetic-resident, both frameworks; nvJPEG last",
            data.real_input, (*CORE, *TORCH, *JAX, "cnnbench/data", "experiments/resnet50_imagefolder.toml",
                              "benchmarks/runbook/data.py"),
            (Output("h200_data.csv", field_is("mode", "train")),)),
    Section("frames", 6, "a 16 x 1080 x 1920 batch split into decode, copy and compute; the plain PyTorch peer",
            inference.frames, (*CORE, *TORCH, "cnnbench/data", "benchmarks/data_split.py",
                               "benchmarks/plain_peers/torch_frames.py"),
            (Output("h200_data_split.jsonl"), Output("h200_data_peer.jsonl"))),
    Section("frames-infer", 6, "cnnbench infer experiments/frames_1080p_infer.toml, both frameworks, bf16 and fp16",
            inference.frames_infer, (*CORE, *INFER, *TORCH, *JAX, "cnnbench/data",
                                     "experiments/frames_1080p_infer.toml"),
            (Output("h200_data.csv", field_is("mode", "infer")),)),
    Section("input-prep", 4, "JPEG decoders on one host core; each framework's on-device prepare",
            data.input_prep, ("cnnbench/data", f"{TORCH_DIR}/transforms.py", f"{JAX_DIR}/transforms.py",
                              "benchmarks/decode_speed.py", "benchmarks/prepare_speed.py"),
            (Output("h200_decode.jsonl"), Output("h200_prepare_speed.jsonl"))),
    Section("serving", 7, "cnnbench serve + cnnbench load: the HTTP stack alone (one process, then the default "
            "front ends), torch eager, torch CUDA graphs, jax",
            serving.serving, (*CORE, *INFER, TORCH_DIR, JAX_DIR, "cnnbench/serve", "experiments/resnet50_serve.toml",
                              "benchmarks/serve_pipeline.py", "benchmarks/runbook/serving.py",
                              "tests/numpy_serve_engine.py"),
            (Output("h200_serve_http.csv"), Output("h200_stack_http.csv"), Output("h200_serve_pipeline.jsonl")),
            needs=("starlette", "uvicorn", "httptools")),
    Section("serving-gil", 6, "the engine process's GIL switch interval (5, 1, 0.1 ms): engine and "
            "in-process batcher for torch eager, CUDA graphs and jax, then cnnbench serve raw at saturation for "
            "eager and jax", serving.serving_gil,
            (*CORE, *INFER, TORCH_DIR, JAX_DIR, "cnnbench/serve", "experiments/resnet50_serve.toml",
             "benchmarks/serve_pipeline.py", "benchmarks/runbook/serving.py"),
            (Output("h200_serve_gil.jsonl"), Output("h200_serve_gil_http.csv")),
            needs=("starlette", "uvicorn", "httptools")),
    Section("health", 6, "profiled training through cnnbench health, compile caches cold and warm, the probes",
            health.health, (*CORE, *TORCH, *JAX, "cnnbench/report/health.py", "cnnbench/report/traces.py",
                            "benchmarks/health_pitfalls.py", "benchmarks/runbook/health.py"),
            (Output("h200_health.csv"), Output("h200_health_probes.jsonl"))),
)}


def gpu_tests(ctx: Context) -> None:
    """The gpu-marked tests; their counts kept as one record. Only the files that carry the mark are
    collected: the others import CPU-only peers (tritonclient, jupytext) that the GPU machine lacks, and one
    failed import stops the whole collection."""
    marked = sorted(str(path) for path in Path("tests").glob("test_*.py") if "mark.gpu" in path.read_text())
    step = ctx.run("gpu-marked tests", [ctx.python, "-m", "pytest", "-q", "-m", "gpu", *marked, "-p",
                                        "no:cacheprovider"], 480)
    if step is None:
        return
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)",
                                                     step.output)}
    sidefile.append(ctx.out / "h200_gpu_tests.jsonl", [{"rc": step.rc, **counts}])


def script(path: str, results: str, budget_s: int, **env: str) -> Callable[[Context], None]:
    """A section whose steps live in a shell script with its own per-step timeouts (the known-answer health
    cases, the multi-front-end serving benchmark): run under the section's budget, its files kept under
    results/RESULTS."""
    def run(ctx: Context) -> None:
        folder = ctx.out / results
        ctx.run(path, ["bash", path, folder], budget_s,
                env={"BUDGET_S": str(budget_s - 20), "PYTHON": ctx.python, **env})  # the runbook's own Python
    return run


SECTIONS["health-known"] = Section(
    "health-known", 8, "known-answer checks of the health metrics (matmul loop, host sleep, pageable copies, a "
    "sync), profiled training and inference health, energy per image, the pinned-memory probe (gpu_health.sh)",
    script("benchmarks/gpu_health.sh", "h200_health", 500, SECTIONS="known,train,pinned,energy", PIN_PAST="0"),
    (*CORE, *TORCH, *JAX, "cnnbench/report/health.py", "cnnbench/report/traces.py", "benchmarks/gpu_health.sh",
     "benchmarks/health_known.py", "benchmarks/health_pitfalls.py", "backends/profilers.py"),
    (Output("h200_health/health_rows.csv"), Output("h200_health/known.jsonl")))
SERVE_DEPS = (*CORE, *INFER, TORCH_DIR, JAX_DIR, "cnnbench/serve", "benchmarks/gpu_serve.sh",
              "benchmarks/serve_clients.py", "benchmarks/serve_pipeline.py")
SECTIONS["serving-frontends"] = Section(
    "serving-frontends", 6, "PyTorch with CUDA graphs: the engine alone, cnnbench serve with 0 and 4 front ends at "
    "100 req/s and raw at saturation by cnnbench load and by wrk, JPEG with 1/2/4/8 front ends "
    "(gpu_serve.sh PARTS=frontends)",
    script("benchmarks/gpu_serve.sh", "h200_serve_frontends", 520, PARTS="frontends",
           FRONTENDS_CONFIGS="torch-graphs"),
    SERVE_DEPS, (Output("h200_serve_frontends/frontends_http.csv", field_is("backend", "torch")),),
    needs=("starlette", "uvicorn", "httptools"))
SECTIONS["serving-frontends-jax"] = Section(
    "serving-frontends-jax", 5, "JAX: the engine alone, cnnbench serve with 0 and 4 front ends at 100 req/s and raw "
    "at saturation by cnnbench load and by wrk (gpu_serve.sh PARTS=frontends)",
    script("benchmarks/gpu_serve.sh", "h200_serve_frontends", 460, PARTS="frontends", FRONTENDS_CONFIGS="jax"),
    SERVE_DEPS, (Output("h200_serve_frontends/frontends_http.csv", field_is("backend", "jax")),),
    needs=("starlette", "uvicorn", "httptools"))
SECTIONS["serving-sweep"] = Section(
    "serving-sweep", 6, "PyTorch CUDA graphs served raw at saturation with 1/2/4/7 front ends on SO_REUSEPORT "
    "sockets and 4/7 on one shared socket, by cnnbench load and wrk: the default count and socket mode "
    "(gpu_serve.sh PARTS=sweep)",
    script("benchmarks/gpu_serve.sh", "h200_serve_sweep", 500, PARTS="sweep"),
    SERVE_DEPS, (Output("h200_serve_sweep/frontends_http.csv"),),
    needs=("starlette", "uvicorn", "httptools"))


def _frames(compiled: bool) -> Section:
    """The seed's case (gpu_serve.sh PARTS=frames), eager or compiled: each writes the rows of its own kind."""
    kind = field_is("compile", "true", "True") if compiled else field_is("compile", "false", "False")
    summary = ("the same frames with the forward compiled (torch.compile, every batch padded to 16: one shape for "
               "the server to compile; infer and serve share one compile cache folder), served with 1 and with 4 "
               "threads copying each frame into its batch slot, 10 s each" if compiled else
               "the seed's case: 1080x1920 JPEG frames at a 1080x1920 input, max batch 16, PyTorch fp16, cnnbench "
               "infer of the same spec, then cnnbench serve with its default front ends (gpu_serve.sh PARTS=frames)")
    return Section(
        "serving-frames-compiled" if compiled else "serving-frames", 6 if compiled else 3, summary,
        script("benchmarks/gpu_serve.sh", "h200_serve_frames", 500 if compiled else 300, PARTS="frames",
               FRAMES_COMPILE=str(compiled).lower(), FRAMES_SECS="10",
               # the engine's copy of 6 MB frames by one thread, then by the default 4 (H100: 291 served of 576)
               FRAMES_COPY_THREADS="1 0",
               # a drain takes 0.4 s; a compiled engine held past the bound prints its stacks after 20 s, not 60
               STOP_TIMEOUT_S="20"),
        (*SERVE_DEPS, "experiments/frames_1080p_infer.toml", "benchmarks/spec_variant.py"),
        (Output("h200_serve_frames/frames_http.csv", kind), Output("h200_serve_frames/frames_infer.csv", kind)),
        needs=("starlette", "uvicorn", "httptools"))


SECTIONS["serving-frames"] = _frames(compiled=False)
SECTIONS["serving-frames-compiled"] = _frames(compiled=True)
SECTIONS["serving-stop"] = Section(
    "serving-stop", 3, "a diagnosis, not a table: the compiled 1080p server whose first engine after `cnnbench "
    "infer` was held after SIGTERM until its bound, served 3 s with 1 copy thread and stopped with a 15 s bound, so "
    "a held engine's Python and native stacks land in its log (rows in a folder of their own: no table reads them)",
    script("benchmarks/gpu_serve.sh", "h200_serve_stop", 300, PARTS="frames", FRAMES_COMPILE="true", FRAMES_SECS="3",
           FRAMES_COPY_THREADS="1", STOP_TIMEOUT_S="15"),
    (*SERVE_DEPS, "experiments/frames_1080p_infer.toml", "benchmarks/spec_variant.py"),
    (Output("h200_serve_stop/frames_http.csv"),),
    needs=("starlette", "uvicorn", "httptools"))
SECTIONS["serving-peers"] = Section(
    "serving-peers", 6, "PyTorch eager: the engine alone, cnnbench serve with 0 and the default front ends and its "
    "plain route, the same engine behind LitServe with 1 and 4 workers, raw and JPEG at saturation "
    "(gpu_serve.sh PARTS=litserve)",
    script("benchmarks/gpu_serve.sh", "h200_serve_peers", 420, PARTS="litserve"),
    (*SERVE_DEPS, "benchmarks/litserve_peer.py"),
    (Output("h200_serve_peers/peers_http.csv"), Output("h200_serve_peers/litserve_http.csv")),
    needs=("starlette", "uvicorn", "httptools", "litserve"))
SECTIONS["gpu-tests"] = Section("gpu-tests", 6, "the gpu-marked tests (pass counts kept)", gpu_tests,
                                ("cnnbench", "backends", "tests"), (Output("h200_gpu_tests.jsonl"),))
