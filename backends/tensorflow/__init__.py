"""TensorFlow/Keras backend's face: the contract functions, the trainer chosen by strategy.

- ``mirrored``, ``fit``: tf.distribute.MirroredStrategy (MultiWorkerMirroredStrategy across hosts),
  :mod:`backends.tensorflow.train`.
- inference: :mod:`backends.tensorflow.infer`; serving: :mod:`backends.tensorflow.serve`.

Which devices a process uses is decided in :mod:`backends.tensorflow.common`, before any TensorFlow
op. TensorFlow is imported only inside the trainers and :func:`devices`, never at module level.
"""

from __future__ import annotations

import json

from backends.tensorflow.common import tf_config
from cnnbench import envinfo
from cnnbench.backend import BuildContext, Layout
from cnnbench.runs import Run


def version() -> str | None:
    return envinfo.backend_version("tensorflow")


def not_supported(run: Run) -> str | None:
    """What TensorFlow itself lacks for a run (it becomes a ``skipped`` row with this reason)."""
    if run.strategy in ("pipeline", "tensor", "data+tensor"):
        return (f"not supported: strategy {run.strategy}: TensorFlow has no maintained native mechanism for it "
                f"with Keras models (DTensor and its Keras integration were dropped); use the jax or torch backend")
    if run.hosts > 1 and run.strategy == "fit":
        return (f"not supported: strategy fit across hosts: model.fit under MultiWorkerMirroredStrategy fails "
                f"in keras {envinfo.package_version('keras')} (PerReplica inputs); use mirrored")
    return None


def unsupported(run: Run) -> str | None:
    """Why a configuration is impossible here (the spec is refused before anything is launched)."""
    if run.hosts > 1 and run.device_kind == "cpu" and run.devices_per_host > 1:
        return "MultiWorkerMirroredStrategy on CPU uses one device per host; set devices = hosts"
    return None


def launch_layout(run: Run) -> Layout:
    env = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if run.device_kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    if run.hosts > 1:
        env["TF_CONFIG"] = json.dumps(tf_config(run))
    return Layout(processes=1, env=env)


def build(run: Run, ctx: BuildContext):
    from backends.tensorflow.train import TFTrainer

    return TFTrainer(run, ctx)


def infer_unsupported(variant) -> str | None:
    if variant.channels_last:
        return "Keras models are channels-last (NHWC) already; channels_last is a PyTorch option"
    if variant.pinned:
        return "TensorFlow stages host inputs itself and has no pinned-memory option"
    if variant.input not in ("resident", "float32_pageable"):
        return f"input {variant.input}: TensorFlow takes resident or float32_pageable batches here"
    return None


def build_inference(run: Run, variant):
    from backends.tensorflow.infer import TFInference

    return TFInference(run, variant)


def build_serve_engine(run: Run, variant, top_k: int, pad_multiple: int):
    """The engine of `cnnbench serve`: uint8 staging buffers, normalise + forward + top-k in one tf.function."""
    from backends.tensorflow.serve import TFServeEngine

    return TFServeEngine(run, variant, top_k, pad_multiple)


def devices() -> list[str]:
    import tensorflow as tf

    return [f"{d.device_type}:{d.name}" for d in tf.config.list_physical_devices()]
