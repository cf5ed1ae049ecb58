"""Which devices this host's TensorFlow process uses (shared by training and inference).

Emulated devices are logical CPU devices made before any TensorFlow op; GPUs are hidden from CPU runs
and never pre-allocated whole (memory growth on). Across hosts, TF_CONFIG names every worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from cnnbench.runs import Run


@dataclass(frozen=True)
class DevicePlan:
    """Which devices this host's TensorFlow process uses, decided before TensorFlow starts."""

    devices: tuple[str, ...]  # device strings for MirroredStrategy
    logical_cpus: int  # logical CPU devices to create (0: leave the CPU alone)
    hide_gpus: bool


def device_plan(run: Run, physical_gpus: int) -> DevicePlan:
    """GPUs when the run asks for them (one replica per GPU), else N logical CPU devices."""
    n = run.devices_per_host
    if run.device_kind == "gpu":
        if physical_gpus < n:
            raise RuntimeError(f"{n} GPUs requested, TensorFlow sees {physical_gpus}")
        return DevicePlan(tuple(f"/gpu:{i}" for i in range(n)), 0, False)
    return DevicePlan(tuple(f"/cpu:{i}" for i in range(n)), n, True)


def worker_addresses(run: Run) -> list[str]:
    """TF_CONFIG needs every worker: ``--coordinator`` lists them (comma-separated), or gives one
    ADDR:PORT from which hosts on one machine take consecutive ports."""
    given = [a for a in run.coordinator.split(",") if a]
    if len(given) == run.hosts:
        return given
    addr, port = given[0].rsplit(":", 1)
    return [f"{addr}:{int(port) + i}" for i in range(run.hosts)]


def tf_config(run: Run) -> dict:
    return {"cluster": {"worker": worker_addresses(run)}, "task": {"type": "worker", "index": run.host_rank}}


def configure_devices(tf, run: Run) -> DevicePlan:
    """Must run before any TensorFlow op: device configuration is frozen at the first one."""
    gpus = tf.config.list_physical_devices("GPU")
    plan = device_plan(run, len(gpus))
    if plan.hide_gpus:
        tf.config.set_visible_devices([], "GPU")
    else:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    if plan.logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * plan.logical_cpus)
    return plan
