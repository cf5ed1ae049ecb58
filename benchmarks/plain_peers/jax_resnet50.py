"""Plain JAX/Flax ResNet-50 training loop, as a skilled user writes it without cnnbench:
flax.linen ResNet-50 v1.5 with nn.BatchNorm, bf16 compute, jax.jit with donated state, optax SGD.

python benchmarks/plain_peers/jax_resnet50.py [--batch 256] [--image-size 224] [--tiny]
(``--tiny``: one bottleneck block instead of 16, a quick check of the script on a CPU)
"""

from __future__ import annotations

import argparse
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from window_timer import measure, report


class Bottleneck(nn.Module):
    width: int
    stride: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, train: bool):
        conv = partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)
        residual = x
        y = nn.relu(norm()(conv(self.width, (1, 1))(x)))
        y = nn.relu(norm()(conv(self.width, (3, 3), (self.stride, self.stride), padding=((1, 1), (1, 1)))(y)))
        y = norm()(conv(self.width * 4, (1, 1))(y))
        if residual.shape != y.shape:
            residual = norm()(conv(self.width * 4, (1, 1), (self.stride, self.stride))(residual))
        return nn.relu(y + residual)


class ResNet50(nn.Module):
    dtype: jnp.dtype = jnp.bfloat16
    blocks: tuple[int, ...] = (3, 4, 6, 3)  # per stage

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, dtype=self.dtype)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for stage, blocks in enumerate(self.blocks):
            for block in range(blocks):
                x = Bottleneck(64 * 2**stage, 2 if stage > 0 and block == 0 else 1, self.dtype)(x, train)
        return nn.Dense(1000, dtype=self.dtype)(x.mean(axis=(1, 2))).astype(jnp.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224, help="smaller: a quick check on a CPU")
    parser.add_argument("--tiny", action="store_true", help="one block: a quick check on a CPU")
    args = parser.parse_args()
    model = ResNet50(blocks=(1,) if args.tiny else ResNet50.blocks)
    x = jax.random.normal(jax.random.key(1), (args.batch, args.image_size, args.image_size, 3))
    y = jax.random.randint(jax.random.key(2), (args.batch,), 0, 1000)
    variables = model.init(jax.random.key(0), x[:1], train=False)
    tx = optax.chain(optax.add_decayed_weights(5e-5), optax.sgd(0.1, momentum=0.9))
    state = {"params": variables["params"], "batch_stats": variables["batch_stats"]}
    state["opt"] = tx.init(state["params"])

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(state, x, y):
        def loss_fn(params):
            logits, updates = model.apply({"params": params, "batch_stats": state["batch_stats"]}, x,
                                          mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updates["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt = tx.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "batch_stats": stats, "opt": opt}, loss

    holder = {"state": state}

    def step() -> None:
        holder["state"], _ = train_step(holder["state"], x, y)

    result = measure(step, lambda: jax.block_until_ready(holder["state"]), args.batch)
    report(f"jax resnet50 b{args.batch}", {**vars(args), **result})


if __name__ == "__main__":
    main()
