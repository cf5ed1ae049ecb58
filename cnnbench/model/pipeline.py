"""Framework-free facts of the ``pipeline`` strategy, shared by the PyTorch and JAX pipelines.

Both frameworks cut a model into the same pieces (the stem, every residual block, the head; for
smallcnn its two conv blocks and its dense head) and give each stage the same contiguous run of
them, so a pipeline row of one framework is comparable with the other's.
"""

from __future__ import annotations

import numpy as np

from cnnbench.model.facts import RESNET18_BLOCKS, RESNET50_BLOCKS


def pipeline_pieces(model: str) -> int:
    """How many pieces a model splits into (PyTorch's pieces() is asserted against it; Flax's
    run_pieces refuses a span beyond its pieces, and the last stage's span ends at this count)."""
    return {"smallcnn": 3, "resnet18_cifar": sum(RESNET18_BLOCKS) + 2, "resnet50": sum(RESNET50_BLOCKS) + 2}[model]


def split_points(count: int, stages: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges of pieces, as even in piece count as possible."""
    if stages > count:
        raise ValueError(f"{stages} pipeline stages, but the model has only {count} pieces")
    bounds = np.linspace(0, count, stages + 1).round().astype(int)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def pipeline_unsupported(model: str, devices: int, hosts: int, global_batch: int, microbatches: int) -> str | None:
    """Why a pipeline run cannot be built: one stage per device, one host, whole micro-batches."""
    if hosts > 1:
        return "the pipeline strategy runs on one host here"
    if devices > pipeline_pieces(model):
        return (f"{devices} pipeline stages, but {model} splits into {pipeline_pieces(model)} "
                f"pieces (stem, blocks, head)")
    if global_batch % microbatches:
        return f"global batch {global_batch} does not split into {microbatches} micro-batches"
    return None
