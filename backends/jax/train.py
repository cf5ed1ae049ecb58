"""JAX/Flax data and tensor parallelism: one jitted step over a device mesh, or ``jax.pmap``.

- ``sharded``: ``jax.jit`` over a 1-D ``data`` mesh; the batch is sharded with
  ``NamedSharding(mesh, P('data'))``, parameters and optimizer state are replicated and donated.
  Local BN statistics (the default) come from grouped batch norm; ``sync_bn`` uses the whole
  global batch, which is what a plain jitted step computes.
- ``pmap``: the classic per-device step with ``lax.pmean`` of gradients; BN statistics local or
  ``pmean``-ed across the axis.
In both, running statistics are averaged across devices (as MirroredStrategy's mirrored
variables are), so every device evaluates with the same model.
- ``tensor`` / ``data+tensor``: the same jitted step over a ``('data', 'model')`` mesh with the
  weights sharded by channel over ``model`` (:func:`tensor_spec`).

The pipeline (:mod:`backends.jax.pipeline`) builds on this trainer.
"""

from __future__ import annotations

import resource
from typing import Any

import numpy as np

from backends.jax.common import compute_dtype, make_optimizer, run_devices
from cnnbench import envinfo
from cnnbench.backend import BuildContext
from cnnbench.runs import Run

AXIS = "data"
MODEL = "model"


def mesh_shape(run: Run) -> tuple[int, int]:
    """(data, model) extent of the device mesh: ``tensor`` shards over every device, ``data+tensor``
    over ``model_parallel`` devices and replicates over the rest; the data strategies use data only."""
    if run.strategy == "tensor":
        return 1, run.devices
    if run.strategy == "data+tensor":
        return run.devices // run.model_parallel, run.model_parallel
    return run.devices, 1


def tensor_spec(shape: tuple[int, ...], model: int):
    """How one state array is laid out over the ``model`` axis: convolution kernels (HWIO) by output
    channel, batch-norm vectors by channel, dense kernels by input feature; anything that does not
    split evenly is replicated. Momentum buffers have their parameter's shape, so they follow it."""
    from jax.sharding import PartitionSpec as P

    if model == 1:
        return P()
    if len(shape) == 4 and shape[3] % model == 0:
        return P(None, None, None, MODEL)
    if len(shape) == 2 and shape[0] % model == 0:
        return P(MODEL, None)
    if len(shape) == 1 and shape[0] % model == 0:
        return P(MODEL)
    return P()


class JaxTrainer:
    input = None  # a JaxInput for uint8 sources (set in _setup_input)

    def __init__(self, run: Run, ctx: BuildContext) -> None:
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from backends.jax.models import build_model

        if run.hosts > 1:
            jax.distributed.initialize(run.coordinator.split(",")[0], run.hosts, run.host_rank)
        self.jax, self.jnp, self.run, self.ctx = jax, jnp, run, ctx
        self.devices = run_devices(run)
        self.local_devices = [d for d in self.devices if d.process_index == jax.process_index()]
        self.pmap = run.strategy == "pmap"
        dtype = compute_dtype(run)
        data_ways, model_ways = mesh_shape(run)
        # Local BN = one group per data-parallel slice of the batch (model shards see the same images).
        groups = data_ways if (not self.pmap and not run.sync_bn) else 1
        # Over a single device there is nothing to synchronize: no collective in the step.
        axis = AXIS if (self.pmap and run.sync_bn and run.devices > 1) else None
        self.model = build_model(run.model, run.num_classes, dtype, groups, axis)
        self.eval_model = build_model(run.model, run.num_classes, dtype)
        shape = (1, *run.image_size, run.channels)
        self.tx = make_optimizer(run, ctx.lr_table)

        def initial_state(key):
            variables = self.model.init(key, jnp.zeros(shape, jnp.float32), train=False)
            params, stats = variables["params"], variables.get("batch_stats", {})
            return {"params": params, "batch_stats": stats, "opt_state": self.tx.init(params)}

        # One compiled program: run eagerly, every initialiser op is a compilation of its own (134 for
        # ResNet-18, 11 s of a CPU worker's 19 s). The same random values either way.
        state = jax.jit(initial_state)(jax.random.key(run.seed))
        self._fresh_optimizer = jax.jit(self.tx.init)
        auto = jax.sharding.AxisType.Auto
        self.mesh = jax.make_mesh((data_ways, model_ways), (AXIS, MODEL), (auto, auto), devices=self.devices)
        self.replicated = NamedSharding(self.mesh, P())
        self.batch_sharding = NamedSharding(self.mesh, P(AXIS))
        # The state's layout: replicated for data parallelism, sharded over `model` for tensor
        # parallelism (XLA inserts the all-gathers and reductions the sharded convolutions need).
        self.state_sharding = lambda tree: jax.tree.map(
            lambda a: NamedSharding(self.mesh, tensor_spec(np.shape(a), model_ways)), tree)
        if self.pmap:
            self.state = self._replicate(state)
            self._step = jax.pmap(self._make_step(pmap=True), axis_name=AXIS, donate_argnums=(0,),
                                  devices=self.local_devices)
        else:
            shardings = self.state_sharding(state)
            self.state = jax.device_put(state, shardings)
            self._step = jax.jit(self._make_step(pmap=False), donate_argnums=(0,),
                                 out_shardings=(shardings, self.replicated))
        self._eval = jax.jit(self._eval_batch)
        self._losses: list = []
        self._setup_input()

    def _replicate(self, tree: Any) -> Any:
        """One copy per device along a leading axis (jax.device_put_replicated is deprecated)."""
        n = len(self.local_devices)
        return self.jax.device_put(self.jax.tree.map(lambda a: np.stack([np.asarray(a)] * n), tree),
                                   self.batch_sharding)

    # -- the training step ---------------------------------------------------------------------
    def _make_step(self, pmap: bool):
        jax, jnp, model, tx = self.jax, self.jnp, self.model, self.tx
        import optax

        prepare = self._prepare

        def step(state, x, y):
            x = prepare(x)

            def loss_fn(params):
                logits, updates = model.apply({"params": params, "batch_stats": state["batch_stats"]},
                                              x, train=True, mutable=["batch_stats"])
                loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
                return loss, updates.get("batch_stats", {})

            (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
            if pmap:  # per-device mean loss -> global mean; running statistics averaged too
                grads, loss, batch_stats = jax.lax.pmean((grads, loss, batch_stats), AXIS)
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            return {"params": params, "batch_stats": batch_stats, "opt_state": opt_state}, loss

        del jnp
        return step

    # -- input ---------------------------------------------------------------------------------
    def _prepare(self, x):
        """Inside the jitted step: a uint8 batch (images, boxes, flips) -> normalised float images."""
        if not isinstance(x, tuple):
            return x
        from backends.jax.transforms import prepare

        plan = self.ctx.inputs
        return prepare(*x, out_hw=plan.out_hw, mean=plan.mean, std=plan.std, dtype=compute_dtype(self.run))

    def _setup_input(self) -> None:
        run, data = self.run, self.ctx.dataset
        self.local_batch = run.global_batch // self.jax.process_count()
        lo = self.jax.process_index() * self.local_batch
        self.input = None
        if self.ctx.inputs is not None:  # uint8 frames from files, video or CIFAR-10 (grain)
            from backends.jax.input import JaxInput

            self.input = JaxInput(self.ctx.inputs, run.global_batch, self.jax.process_index(),
                                  self.jax.process_count(), run.total_steps)
            self.fixed_batch, self._next = None, None
            self.steps_per_epoch = run.steps_per_epoch
            return
        if run.dataset == "synthetic":
            x = np.ascontiguousarray(data.train_x[lo:lo + self.local_batch].transpose(0, 2, 3, 1))
            self.fixed_batch = self._place(x, data.train_y[lo:lo + self.local_batch])
            self.steps_per_epoch = 0
            return
        self.fixed_batch = None
        self.train_x = np.ascontiguousarray(data.train_x.transpose(0, 2, 3, 1))  # NHWC once
        self.steps_per_epoch = run.steps_per_epoch
        self._cursor, self._epoch, self._order = 0, 0, None
        self._next = None

    def _place(self, x: Any, y: np.ndarray) -> tuple[Any, Any]:
        """This process's slice of a global batch -> device arrays laid out for the step (``x``: images,
        or the uint8 tuple (images, boxes, flips), each split along the batch)."""
        jax = self.jax
        if self.pmap:  # a leading device axis, one slice per device (what pmap maps over)
            n = len(self.local_devices)
            return jax.tree.map(lambda a: jax.device_put(a.reshape((n, -1) + a.shape[1:]), self.batch_sharding),
                                (x, y))
        if jax.process_count() > 1:
            return jax.tree.map(lambda a: jax.make_array_from_process_local_data(self.batch_sharding, a), (x, y))
        return jax.device_put((x, y), self.batch_sharding)

    def _host_batch(self) -> tuple[Any, Any]:
        if self.input is not None:
            return self._place(*self.input.next_host_batch())
        run = self.run
        if self._order is None or self._cursor == self.steps_per_epoch:
            rng = np.random.default_rng(run.seed + self._epoch)
            self._order, self._cursor = rng.permutation(len(self.train_x)), 0
            self._epoch += 1
        start = self._cursor * run.global_batch + self.jax.process_index() * self.local_batch
        index = np.sort(self._order[start:start + self.local_batch])
        self._cursor += 1
        return self._place(self.train_x[index], self.ctx.dataset.train_y[index])

    def next_batch(self) -> tuple[Any, Any]:
        """The next batch on the devices (the runner times how long this waits)."""
        if self.fixed_batch is not None:
            return self.fixed_batch
        # Keep one batch in flight: device_put is asynchronous, so the copy overlaps the step.
        batch = self._next if self._next is not None else self._host_batch()
        self._next = self._host_batch()
        return batch

    def step(self, batch: tuple[Any, Any] | None = None) -> None:
        x, y = batch if batch is not None else self.next_batch()
        self.state, loss = self._step(self.state, x, y)
        self._losses.append(loss)  # a device array: reading it would sync

    def sync(self) -> None:
        self.jax.block_until_ready(self.state)

    def close(self) -> None:
        if self.input is not None:
            self.input.close()

    # -- evaluation and inspection -------------------------------------------------------------
    def _single_state(self) -> dict:
        if self.pmap:
            return self.jax.tree.map(lambda a: a[0], self.state)
        return self.state

    def train_loss(self) -> float:
        losses = [float(np.asarray(v).reshape(-1)[0]) for v in self._losses]
        self._losses = []
        return float(np.mean(losses)) if losses else float("nan")

    def _eval_batch(self, variables, x, y, valid):
        import optax

        x = self._prepare(x)
        logits = self.eval_model.apply(variables, x, train=False)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        correct = (logits.argmax(-1) == y).astype(self.jnp.float32)
        return (loss * valid).sum(), (correct * valid).sum()

    def evaluate(self) -> tuple[float, float]:
        data, batch = self.ctx.dataset, 2 * self.run.global_batch
        state = self._single_state()
        variables = {"params": state["params"], "batch_stats": state["batch_stats"]}
        if self.input is not None and self.run.dataset != "cifar10":  # files: through the loader
            loss_sum, correct, count = 0.0, 0.0, 0
            for (x, y), valid in self.input.eval_batches(batch):
                mask = (np.arange(batch) < valid).astype(np.float32)
                loss, right = self._eval(variables, x, y, mask)
                loss_sum, correct, count = loss_sum + float(loss), correct + float(right), count + valid
            return loss_sum / max(count, 1), correct / max(count, 1)
        x_all = data.test_x.transpose(0, 2, 3, 1)
        loss_sum, correct = 0.0, 0.0
        for lo in range(0, len(x_all), batch):
            x, y = x_all[lo:lo + batch], data.test_y[lo:lo + batch]
            valid = np.ones(batch, np.float32)
            if len(y) < batch:  # pad the last chunk: one compiled shape for all chunks
                valid[len(y):] = 0
                x = np.concatenate([x, np.zeros((batch - len(y),) + x.shape[1:], x.dtype)])
                y = np.concatenate([y, np.zeros(batch - len(y), y.dtype)])
            loss, right = self._eval(variables, x, y, valid)
            loss_sum, correct = loss_sum + float(loss), correct + float(right)
        return loss_sum / len(x_all), correct / len(x_all)

    def predict(self, images: np.ndarray) -> np.ndarray:
        state = self._single_state()
        variables = {"params": state["params"], "batch_stats": state["batch_stats"]}
        return np.asarray(self.eval_model.apply(variables, images.transpose(0, 2, 3, 1), train=False))

    def param_count(self) -> int:
        return int(sum(np.prod(a.shape) for a in self.jax.tree.leaves(self._single_state()["params"])))

    def get_weights(self) -> dict[str, np.ndarray]:
        from backends.jax.models import state_to_neutral

        state, run = self._single_state(), self.run
        return state_to_neutral(state["params"], state["batch_stats"], run.model, run.image_size,
                                run.channels, run.num_classes)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        from backends.jax.models import neutral_to_state

        run = self.run
        params, batch_stats = neutral_to_state(weights, run.model, run.image_size, run.channels, run.num_classes)
        state = {"params": params, "batch_stats": batch_stats, "opt_state": self._fresh_optimizer(params)}
        self.state = self._replicate(state) if self.pmap else self.jax.device_put(state, self.state_sharding(state))

    def profiler(self, directory):
        from backends import profilers

        return profilers.jax_trace(directory)

    def peak_memory_bytes(self) -> int | None:
        stats = self.devices[0].memory_stats() if self.run.device_kind == "gpu" else None
        if stats:
            return int(stats.get("peak_bytes_in_use", 0))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def device_name(self) -> str:
        if self.run.device_kind == "gpu":
            return self.devices[0].device_kind
        return envinfo.cpu_name()

