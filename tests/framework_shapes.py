"""Run as a script in its own process: `python tests/framework_shapes.py BACKEND`.

BACKEND is torch, tensorflow, jax, or keras-ENGINE (the Keras models on the jax or torch engine).

Builds the three models natively in one framework and prints, as JSON, each model's trainable
parameter count and its weights' neutral names and shapes in order. One framework per process.
"""

from __future__ import annotations

import json
import math
import os
import sys

from cnnbench.model.facts import image_hw

CONFIGS = [("smallcnn", 8, 1, 10), ("resnet18_cifar", 32, 3, 10), ("resnet50", 224, 3, 1000),
           ("resnet50", (64, 96), 3, 1000)]  # height != width: the same parameters


def torch_shapes(model, size, channels, classes):
    from backends.torch.models import build_model

    net = build_model(model, size, channels, classes)
    layout = [(k, list(v.shape)) for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")]
    return sum(p.numel() for p in net.parameters()), layout


def keras_shapes(model, size, channels, classes):
    from backends.keras.models import build_model, get_neutral_weights

    net = build_model(model, size, channels, classes)
    weights = get_neutral_weights(net, classes)
    params = int(sum(math.prod(v.shape) for v in net.trainable_variables))
    return params, [(k, list(v.shape)) for k, v in weights.items()]


def flax_shapes(model, size, channels, classes):
    import jax
    import jax.numpy as jnp

    from backends.jax.models import build_model, state_to_neutral

    net = build_model(model, classes)
    variables = jax.eval_shape(lambda: net.init(jax.random.key(0), jnp.zeros((1, *image_hw(size), channels))))
    variables = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), variables)
    params = int(sum(a.size for a in jax.tree.leaves(variables["params"])))
    weights = state_to_neutral(variables["params"], variables.get("batch_stats", {}), model, size, channels, classes)
    return params, [(k, list(v.shape)) for k, v in weights.items()]


if __name__ == "__main__":
    backend = sys.argv[1]
    os.environ["KERAS_BACKEND"] = backend.removeprefix("keras-") if backend.startswith("keras-") else "tensorflow"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if backend == "keras-jax":
        # Keras initialises every weight eagerly, one XLA compilation per random-initialiser shape (~100,
        # most of this script's time); only shapes and counts are read here, so unoptimised code will do.
        os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    fn = {"torch": torch_shapes, "jax": flax_shapes}.get(backend, keras_shapes)
    out = {}
    for config in CONFIGS:
        params, layout = fn(*config)
        out["/".join(map(str, config)).replace(" ", "")] = {"params": params, "layout": layout}
    print(json.dumps(out))
