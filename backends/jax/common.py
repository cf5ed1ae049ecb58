"""What the JAX trainers share: the optimizer, the devices of a run, the compute dtype."""

from __future__ import annotations

from cnnbench.runs import Run


def make_optimizer(run: Run, lr_table):
    """SGD with coupled L2 (as PyTorch's), the learning rate read from the run's per-step table."""
    import jax.numpy as jnp
    import optax

    table = jnp.asarray(lr_table)
    schedule = lambda count: table[jnp.minimum(count, table.shape[0] - 1)]  # noqa: E731
    return optax.chain(
        optax.add_decayed_weights(run.weight_decay),  # coupled L2, as PyTorch's SGD
        optax.sgd(schedule, momentum=run.momentum or None, nesterov=run.nesterov),
    )


def run_devices(run: Run) -> list:
    """The first ``run.devices`` devices JAX sees (emulated CPU devices or GPUs)."""
    import jax

    devices = jax.devices()[: run.devices]
    if len(devices) != run.devices:
        raise RuntimeError(f"{run.devices} devices requested, JAX sees {len(jax.devices())}")
    return devices


def compute_dtype(run: Run):
    import jax.numpy as jnp

    return {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(run.precision, jnp.float32)
