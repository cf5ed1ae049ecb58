"""JAX ``pipeline`` strategy: the model cut into one stage per device, GPipe micro-batches.

Explicit stage placement, one controller: each stage is a span of the Flax model's pieces (the
same pieces and split as PyTorch's pipeline, see :mod:`cnnbench.model.pipeline`) with its parameters,
batch statistics and optimizer state committed to its own device. A step issues, micro-batch by
micro-batch, every stage's jitted forward (which keeps its ``jax.vjp`` residuals) and copies the
activations to the next device; the last stage computes its loss and backward at once. Then the
backwards run micro-batch by micro-batch from the last stage to the first, each stage summing its
gradients, and every stage applies its optimizer update on its own device. JAX dispatches
asynchronously, so while device s works on micro-batch m, device s-1 is already on m+1: the GPipe
bubble, not a serialised loop.

Each micro-batch loss is its mean divided by the micro-batch count, so the summed gradients are the
whole batch's mean gradient (as ScheduleGPipe scales them). Batch norm normalises each micro-batch
on its own and updates the running statistics once per micro-batch, as PyTorch's pipeline does;
with ``microbatches = 1`` a step equals the single-device step.
"""

from __future__ import annotations

import functools
import resource
from typing import Any

import numpy as np

from backends.jax.common import compute_dtype, make_optimizer, run_devices
from backends.jax.train import JaxTrainer
from cnnbench.backend import BuildContext
from cnnbench.model.pipeline import pipeline_pieces, split_points
from cnnbench.runs import Run


class JaxPipelineTrainer(JaxTrainer):
    def __init__(self, run: Run, ctx: BuildContext) -> None:  # noqa: D107 - the module docstring says it
        import jax
        import jax.numpy as jnp

        from backends.jax.models import build_model

        self.jax, self.jnp, self.run, self.ctx = jax, jnp, run, ctx
        self.devices = run_devices(run)
        self.local_devices, self.pmap = self.devices, False
        dtype = compute_dtype(run)
        self.eval_model = build_model(run.model, run.num_classes, dtype)
        # The whole model is initialised as in every other strategy (same seed, same weights), then
        # each stage takes the variables its pieces name.
        image = (*run.image_size, run.channels)
        # jitted: one compilation, not one per initialiser op (the same values)
        whole = jax.jit(lambda key: self.eval_model.init(key, jnp.zeros((1, *image), jnp.float32), train=False))(
            jax.random.key(run.seed))
        self.tx = make_optimizer(run, ctx.lr_table)
        self._fresh_optimizer = jax.jit(self.tx.init)
        # Each stage's variable names and input shape, traced without computing anything.
        self.stages, self.names = [], []
        activation = jax.ShapeDtypeStruct((run.global_batch // run.microbatches, *image), jnp.float32)
        for span in split_points(pipeline_pieces(run.model), run.devices):
            module = build_model(run.model, run.num_classes, dtype, span=span)
            shapes = jax.eval_shape(lambda a, m=module: m.init(jax.random.key(0), a, train=False), activation)
            activation = jax.eval_shape(lambda v, a, m=module: m.apply(v, a, train=False), shapes, activation)
            self.stages.append(module)
            self.names.append({c: list(shapes.get(c, {})) for c in ("params", "batch_stats")})
        self.state = self._split({"params": whole["params"], "batch_stats": whole.get("batch_stats", {})})
        self._make_stage_programs()
        self._eval = jax.jit(self._eval_batch)
        self._losses: list = []
        self._setup_input()

    def _split(self, whole: dict) -> list[dict]:
        """Whole-model variables -> one state per stage (its variables and fresh optimizer state),
        committed to the stage's device."""
        states = []
        for names, device in zip(self.names, self.devices):
            state = {c: {n: whole[c][n] for n in names[c]} for c in ("params", "batch_stats")}
            state["opt_state"] = self._fresh_optimizer(state["params"])
            states.append(self.jax.device_put(state, device))
        return states

    # -- the stage programs --------------------------------------------------------------------
    def _make_stage_programs(self) -> None:
        jax, jnp = self.jax, self.jnp
        import optax

        scale = 1.0 / self.run.microbatches
        tree_add = lambda a, b: jax.tree.map(jnp.add, a, b)  # noqa: E731

        def train_apply(module, params, batch_stats, a):
            """A stage's training-mode output and its updated batch statistics."""
            out, updates = module.apply({"params": params, "batch_stats": batch_stats}, a, train=True,
                                        mutable=["batch_stats"])
            return out, updates.get("batch_stats", {})

        def forward_of(module, first: bool):
            apply = functools.partial(train_apply, module)

            def forward(params, batch_stats, a):
                # The first stage's input is data: no gradient with respect to it.
                if first:
                    out, vjp, batch_stats = jax.vjp(lambda p: apply(p, batch_stats, a), params, has_aux=True)
                else:
                    out, vjp, batch_stats = jax.vjp(lambda p, x: apply(p, batch_stats, x), params, a, has_aux=True)
                return out, vjp, batch_stats

            return jax.jit(forward)

        def backward(vjp, grad_out, grad_sum):
            grads = vjp(grad_out)
            return tree_add(grad_sum, grads[0]), (grads[1] if len(grads) > 1 else None)

        def last_of(module, first: bool):
            def loss_fn(params, batch_stats, a, y):
                logits, batch_stats = train_apply(module, params, batch_stats, a)
                return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean() * scale, batch_stats

            def last(params, batch_stats, a, y, grad_sum):
                argnums = 0 if first else (0, 2)
                (loss, batch_stats), grads = jax.value_and_grad(loss_fn, argnums, has_aux=True)(
                    params, batch_stats, a, y)
                if first:
                    return loss, batch_stats, tree_add(grad_sum, grads), None
                return loss, batch_stats, tree_add(grad_sum, grads[0]), grads[1]

            return jax.jit(last, donate_argnums=(4,))

        def update(state, grads):
            updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
            return {"params": optax.apply_updates(state["params"], updates), "batch_stats": state["batch_stats"],
                    "opt_state": opt_state}

        last_index = len(self.stages) - 1
        self._forward = [forward_of(m, s == 0) for s, m in enumerate(self.stages[:-1])]
        self._last = last_of(self.stages[-1], last_index == 0)
        self._backward = jax.jit(backward, donate_argnums=(2,))
        self._zeros = jax.jit(lambda params: jax.tree.map(jnp.zeros_like, params))
        # The state's buffers become the new state's; the summed gradients have nothing to alias.
        self._update = jax.jit(update, donate_argnums=(0,))

    # -- the step ------------------------------------------------------------------------------
    def step(self, batch=None) -> None:
        jax = self.jax
        xs, ys = batch if batch is not None else self.next_batch()
        states, devices, last = self.state, self.devices, len(self.stages) - 1
        grad_sums = [self._zeros(state["params"]) for state in states]
        stats = [state["batch_stats"] for state in states]
        residuals: list[list[Any]] = [[] for _ in states]
        grads_in: list[Any] = []
        losses = []
        # Forwards, micro-batch by micro-batch; the last stage runs its backward straight away.
        for x, y in zip(xs, ys):
            a = x
            for s in range(last):
                a, vjp, stats[s] = self._forward[s](states[s]["params"], stats[s], a)
                residuals[s].append(vjp)
                a = jax.device_put(a, devices[s + 1])
            loss, stats[last], grad_sums[last], g = self._last(states[last]["params"], stats[last], a, y,
                                                               grad_sums[last])
            losses.append(loss)
            grads_in.append(g)
        # Backwards, micro-batch by micro-batch, from the last stage to the first.
        for m, g in enumerate(grads_in):
            for s in reversed(range(last)):
                grad_sums[s], g = self._backward(residuals[s][m], jax.device_put(g, devices[s]), grad_sums[s])
        self.state = [self._update(dict(state, batch_stats=stats[s]), grad_sums[s]) for s, state in enumerate(states)]
        self._losses.append(losses)

    def sync(self) -> None:
        self.jax.block_until_ready(self.state)

    def train_loss(self) -> float:
        # Each micro-batch loss is already divided by the micro-batch count: a step's loss is their sum.
        losses = [sum(float(v) for v in step) for step in self._losses]
        self._losses = []
        return float(np.mean(losses)) if losses else float("nan")

    # -- input: micro-batches of images on the first stage's device, labels on the last's -------
    def _place(self, x: np.ndarray, y: np.ndarray) -> tuple[list, list]:
        jax, first, last = self.jax, self.devices[0], self.devices[-1]
        xs, ys = np.split(x, self.run.microbatches), np.split(y, self.run.microbatches)
        return [jax.device_put(part, first) for part in xs], [jax.device_put(part, last) for part in ys]

    # -- the whole model, for evaluation and inspection ----------------------------------------
    def _single_state(self) -> dict:
        """All stages' variables gathered on the first device (evaluation runs the whole model there)."""
        whole: dict[str, dict] = {"params": {}, "batch_stats": {}}
        for state in self.state:
            for collection in whole:
                whole[collection].update(self.jax.device_put(state[collection], self.devices[0]))
        return whole

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        from backends.jax.models import neutral_to_state

        run = self.run
        params, batch_stats = neutral_to_state(weights, run.model, run.image_size, run.channels, run.num_classes)
        self.state = self._split({"params": params, "batch_stats": batch_stats})

    def peak_memory_bytes(self) -> int | None:
        if self.run.device_kind == "gpu":  # the busiest stage's device
            peaks = [int((d.memory_stats() or {}).get("peak_bytes_in_use", 0)) for d in self.devices]
            return max(peaks) or None
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
