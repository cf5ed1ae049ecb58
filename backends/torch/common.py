"""What the PyTorch trainers share: the optimizer's implementation switch."""

from __future__ import annotations


def optimizer_kwargs(impl: str, on_gpu: bool) -> dict[str, bool]:
    """torch.optim.SGD's implementation switch: one fused kernel, foreach (multi-tensor) or a loop."""
    if impl == "auto":
        impl = "fused" if on_gpu else "foreach"
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]
