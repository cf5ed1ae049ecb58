"""Worker entry point: ``python -m cnnbench.run.worker RUN_JSON RESULT_JSON [--probe IN OUT]``.

Runs inside the process tree the launcher starts for one run (under torchrun for PyTorch). It
loads the data, asks the backend for a trainer, drives the shared protocol and, on process 0
only, writes a result JSON (atomically). Any process that fails writes its error next to it, so
the launcher can name the real cause rather than a secondary "peer closed the connection".

``--probe IN OUT`` replaces training by: load weights and a batch from IN (npz), compute logits in
inference mode, take one training step on the batch, save logits and the new weights to OUT.
The parity checks and the data-parallel equivalence tests use it.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from cnnbench import envinfo, faults, gpu_monitor
from cnnbench.backend import BuildContext
from cnnbench.backend import load as load_backend
from cnnbench.data import arrays as data_sources
from cnnbench.data.loader import InputPlan, plan_for, reads_uint8
from cnnbench.errors import error_line
from cnnbench.process_exit import leave
from cnnbench.run.launch import PID_SUFFIX, STACKS_SUFFIX
from cnnbench.run.protocol import train
from cnnbench.run.schedule import lr_table_for
from cnnbench.runs import Run, run_from_json


def _process_position(run: Run) -> tuple[int, int, int]:
    """(process index, process count, local rank): torchrun's variables, else one per host."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    return run.host_rank, run.hosts, 0


def load_dataset(run: Run) -> data_sources.Dataset:
    if run.dataset == "digits":
        return data_sources.load_digits_dataset()
    if run.dataset == "cifar10":
        return data_sources.load_cifar10_dataset(run.data_path or None)
    return data_sources.synthetic_dataset(run.synthetic_size, run.image_size, run.channels,
                                          run.num_classes, run.seed)


def load_inputs(run: Run) -> tuple[data_sources.Dataset, InputPlan | None]:
    """The arrays a trainer holds and, for uint8 sources, the input plan its loader reads."""
    if not reads_uint8(run):
        return load_dataset(run), None
    if run.dataset == "cifar10":
        train_u8, train_y, dataset = data_sources.load_cifar10_uint8(run.data_path or None)
        return dataset, plan_for(run, train_u8, train_y)
    plan = plan_for(run)
    empty_x, empty_y = np.zeros((0, run.channels, *run.image_size), np.float32), np.zeros(0, np.int64)
    return data_sources.Dataset(empty_x, plan.labels[plan.train_items], empty_x, empty_y, run.num_classes), plan


def _write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def _logger(run: Run, is_main: bool):
    if not is_main:
        return lambda msg: None
    return lambda msg: print(f"[{run.backend}/{run.strategy} x{run.devices}] {msg}", file=sys.stderr, flush=True)


def _train(run: Run, ctx: BuildContext, result_path: Path, is_main: bool) -> None:
    log = _logger(run, is_main)
    if not is_main:  # only process 0 traces (--profile)
        run = dataclasses.replace(run, profile_dir="")
    trainer = load_backend(run.backend).build(run, ctx)
    faults.install(trainer, ctx.process_index)
    monitor = (gpu_monitor.start(ctx.local_rank, gpus=run.devices_per_host)
               if is_main and run.device_kind == "gpu" else None)
    try:
        result = train(trainer, run, log, gpu_monitor.EnergyMeter(monitor) if monitor else None)
    finally:
        if monitor:
            monitor.stop()
    if hasattr(trainer, "close"):
        trainer.close()
    if is_main:
        _write_result(trainer, run, result, monitor, result_path)
    if getattr(trainer, "leaves_at_once", False):  # see Trainer.leaves_at_once
        leave(0)


def _write_result(trainer: Any, run: Run, result: Any, monitor: Any, result_path: Path) -> None:
    peak = trainer.peak_memory_bytes()
    payload = {
        **result.timing_summary(run.global_batch, run.devices),
        **result.data_wait_summary(),
        "first_step_s": result.first_step_s,
        "window_step_ms": result.window_step_ms,
        "train_wall_s": result.train_wall_s,
        "train_loss_final": result.train_loss_final,
        "test_loss": result.test_loss,
        "test_accuracy": result.test_accuracy,
        "time_to_accuracy_s": result.time_to_accuracy_s,
        "history": result.history,
        "profile_path": result.profile_path,
        "params": trainer.param_count(),
        "peak_memory_mb": peak / 2**20 if peak is not None else None,
        "device_name": trainer.device_name(),
        "python": envinfo.python_version(),
        **(monitor.summary(result.window_spans) if monitor else {}),
        # Host 0's GPUs measured; other hosts are taken to draw alike (the images are all hosts').
        **(gpu_monitor.energy_columns(result.window_energy_j, result.window_spans,
                                      run.global_batch * run.window_steps * len(result.window_spans) / run.hosts,
                                      run.devices_per_host) if monitor else {}),
    }
    _write_json_atomic(result_path, payload)


def _infer(run: Run, result_path: Path) -> None:
    from cnnbench.data.normalize import normalize_uint8_nhwc, synthetic_uint8_nhwc
    from cnnbench.infer.measure import InferImages, run_inference

    if run.dataset in ("image_folder", "video"):  # real frames, decoded and cropped before timing
        from cnnbench.data.loader import host_pixels

        pixels = host_pixels(run, run.synthetic_size)
    else:
        pixels = synthetic_uint8_nhwc(run.synthetic_size, run.image_size, run.channels, run.seed)
    images = InferImages(pixels, normalize_uint8_nhwc(pixels))
    monitor = gpu_monitor.start(0) if run.device_kind == "gpu" else None
    try:
        result = run_inference(run, load_backend(run.backend).build_inference, images, _logger(run, True),
                               monitor.energy_mj if monitor else None)
    finally:
        if monitor:
            monitor.stop()
    _write_json_atomic(result_path, {**result, "python": envinfo.python_version()})


def _probe(run: Run, ctx: BuildContext, probe_in: Path, probe_out: Path, is_main: bool) -> None:
    trainer = load_backend(run.backend).build(run, ctx)
    with np.load(probe_in) as saved:
        weights = {k[2:]: saved[k] for k in saved.files if k.startswith("w:")}
        eval_x = saved["eval_x"]
    if weights:
        trainer.set_weights(weights)
    logits = trainer.predict(eval_x)
    trainer.step()
    trainer.sync()
    after = trainer.get_weights()
    if hasattr(trainer, "close"):
        trainer.close()
    if is_main:
        shapes = {f"w:{k}": v for k, v in after.items()}
        np.savez(probe_out, logits=logits, params=np.array(trainer.param_count()),
                 names=np.array(list(after)), **shapes)


def _dump_stacks_on_request(path: Path) -> None:
    """On SIGUSR1 (sent by the launcher at a timeout) every thread's Python stack goes to ``path``:
    a run that hangs then says where. The file stays open for the process's life, as faulthandler needs."""
    global _stacks_file
    _stacks_file = open(path, "w")  # noqa: SIM115 - must outlive this call
    faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True)


_stacks_file = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cnnbench.run.worker")
    parser.add_argument("run_json", type=Path)
    parser.add_argument("result_json", type=Path)
    parser.add_argument("--probe", nargs=2, type=Path, metavar=("IN", "OUT"))
    args = parser.parse_args(argv)
    run = run_from_json(args.run_json.read_text())
    index, count, local_rank = _process_position(run)
    _dump_stacks_on_request(args.result_json.with_name(f"{args.result_json.name}.rank{index}{STACKS_SUFFIX}"))
    # After the SIGUSR1 handler, so a recorded worker can always be asked for its stacks. The launcher
    # also kills the ranks by these pids: torchrun starts each in a session of its own, so if torchrun
    # itself dies, neither its process group nor its children lead to them any more.
    args.result_json.with_name(f"{args.result_json.name}.rank{index}{PID_SUFFIX}").write_text(str(os.getpid()))
    try:
        if run.mode == "infer":
            _infer(run, args.result_json)
            return 0
        if args.probe:
            with np.load(args.probe[0]) as saved:
                dataset = data_sources.Dataset(saved["x"], saved["y"], saved["x"][:0], saved["y"][:0],
                                               run.num_classes)
            inputs = None
        else:
            dataset, inputs = load_inputs(run)
        ctx = BuildContext(dataset=dataset, lr_table=lr_table_for(run), process_index=index,
                           process_count=count, local_rank=local_rank, inputs=inputs)
        if args.probe:
            _probe(run, ctx, args.probe[0], args.probe[1], index == 0)
        else:
            _train(run, ctx, args.result_json, index == 0)
    except BaseException as exc:  # noqa: BLE001 - report every failure, then fail
        message = error_line(exc)  # the traceback (TensorFlow's frames too) stays in the log
        err = args.result_json.with_name(f"{args.result_json.name}.rank{index}.err")
        _write_json_atomic(err, {"rank": index, "time": time.time(), "error": message,
                                 "traceback": traceback.format_exc()})
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
