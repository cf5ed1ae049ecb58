"""Plain JAX/Flax ResNet-50 inference, as a skilled user writes it without cnnbench: the plain
Flax ResNet-50 of ``jax_resnet50.py`` in inference mode, bf16 compute, ``jax.jit``, the batch
resident on the GPU (the model's own rate).

python benchmarks/plain_peers/jax_resnet50_infer.py [--batch 256] [--image-size 224] [--tiny]
"""

from __future__ import annotations

import argparse

import jax
from jax_resnet50 import ResNet50
from window_timer import measure, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--tiny", action="store_true", help="one block: a quick check on a CPU")
    args = parser.parse_args()
    model = ResNet50(blocks=(1,) if args.tiny else ResNet50.blocks)
    x = jax.random.normal(jax.random.key(1), (args.batch, args.image_size, args.image_size, 3))
    variables = model.init(jax.random.key(0), x[:1], train=False)
    forward = jax.jit(lambda v, x: model.apply(v, x, train=False))
    holder = {}

    def step() -> None:
        holder["out"] = forward(variables, x)

    result = measure(step, lambda: jax.block_until_ready(holder.get("out")), args.batch, warmup=5, windows=5,
                     window_steps=10)
    report(f"jax resnet50 inference bf16 b{args.batch}", {**vars(args), **result})


if __name__ == "__main__":
    main()
