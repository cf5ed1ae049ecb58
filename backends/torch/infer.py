"""PyTorch inference model for `cnnbench infer` (forward only, one device, no process group).

One model takes every input: a float32 batch (on the device already, or copied from pinned or
pageable host memory) goes through ``forward``; a uint8 NHWC batch through ``forward_uint8``,
which converts and normalises it on the device before the same forward. With ``compile`` each is
one compiled function, so the conversion fuses into the first kernels."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import numpy as np
import torch

from backends import profilers
from backends.torch.common import apply_cudnn_options, pinned
from backends.torch.models import build_model
from cnnbench import envinfo
from cnnbench.data.normalize import channel_scale_shift
from cnnbench.runs import Run, Variant


class TorchInference:
    def __init__(self, run: Run, variant: Variant) -> None:
        self.on_gpu = run.device_kind == "gpu"
        self.device = torch.device("cuda", 0) if self.on_gpu else torch.device("cpu")
        if self.on_gpu:
            apply_cudnn_options(run.options)
            torch.set_float32_matmul_precision("high")
        torch.manual_seed(run.seed)
        self.memory_format = torch.channels_last if variant.channels_last else torch.contiguous_format
        model = build_model(run.model, run.image_size, run.channels, run.num_classes)
        model = model.to(self.device, memory_format=self.memory_format).eval()
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(variant.precision)
        scale, shift = channel_scale_shift(run.channels)
        self.scale = torch.from_numpy(scale).to(self.device).view(1, -1, 1, 1)
        self.shift = torch.from_numpy(shift).to(self.device).view(1, -1, 1, 1)
        self.model, self.input = model, variant.input
        self.forward, self.forward_uint8 = self._forward, self._forward_uint8
        self.eager_model = None if variant.compile else model  # layer scopes in traces (eager only)
        if variant.compile:
            # One graph per batch size, each specialised (as jit does): without this, the second
            # shape switches dynamo to dynamic shapes, and past the recompile limit it falls back
            # to eager without a word, so a batch sweep would time something else.
            import torch._dynamo.config as dynamo_config

            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo_config, name):
                    setattr(dynamo_config, name, 64)
            self.forward = torch.compile(self._forward, mode=variant.compile_mode, dynamic=False)
            self.forward_uint8 = torch.compile(self._forward_uint8, mode=variant.compile_mode, dynamic=False)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            return self.model(x)

    def _forward_uint8(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._forward(normalize_uint8(pixels, self.scale, self.shift, self.memory_format))

    def host_batch(self, images: np.ndarray, input: str | None = None) -> torch.Tensor:
        source = input or self.input
        batch = torch.from_numpy(np.ascontiguousarray(images))
        if source == "resident":
            return batch.to(self.device).contiguous(memory_format=self.memory_format)
        return pinned(batch) if source.endswith("_pinned") else batch

    @torch.inference_mode()
    def infer(self, host_batch: torch.Tensor) -> torch.Tensor:
        x = host_batch
        if x.device != self.device:  # pinned memory copies asynchronously; pageable memory cannot
            x = x.to(self.device, non_blocking=self.on_gpu and x.is_pinned())
        if x.dtype == torch.uint8:
            return self.forward_uint8(x)
        return self.forward(x.contiguous(memory_format=self.memory_format))

    def fetch(self, output: torch.Tensor) -> np.ndarray:
        return output.float().cpu().numpy()

    def sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager:
        return profilers.torch_trace(directory, self.on_gpu, module=self.eager_model)

    def device_name(self) -> str:
        return torch.cuda.get_device_name(0) if self.on_gpu else envinfo.cpu_name()

    def peak_memory_bytes(self) -> int | None:
        if self.on_gpu:
            return int(torch.cuda.max_memory_allocated())
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def normalize_uint8(pixels: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                    memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
    """uint8 (N, H, W, C) on the device -> normalised float32 (N, C, H, W): the device form of
    :func:`cnnbench.data.normalize.normalize_uint8_nhwc`. NHWC pixels are channels_last already:
    the permute is free for a channels_last model."""
    x = pixels.permute(0, 3, 1, 2).float() * scale + shift
    return x.contiguous(memory_format=memory_format)
