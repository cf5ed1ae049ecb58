"""PyTorch inference model for `cnnbench infer` (forward only, one device, no process group)."""

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
from cnnbench.infer.plan import Variant
from cnnbench.runs import Run


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
        self.eager_model = None if variant.compile else model  # layer scopes in traces (eager only)
        if variant.compile:
            # One graph per batch size, each specialised (as jit does): without this, the second
            # shape switches dynamo to dynamic shapes, and past the recompile limit it falls back
            # to eager without a word, so a batch sweep would time something else.
            import torch._dynamo.config as dynamo_config

            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo_config, name):
                    setattr(dynamo_config, name, 64)
            model = torch.compile(model, mode=variant.compile_mode, dynamic=False)
        self.model, self.pinned = model, variant.pinned
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(variant.precision)

    def host_batch(self, images: np.ndarray) -> torch.Tensor:
        batch = torch.from_numpy(np.ascontiguousarray(images))
        return pinned(batch) if self.pinned else batch

    @torch.inference_mode()
    def infer(self, host_batch: torch.Tensor) -> torch.Tensor:
        x = host_batch.to(self.device, non_blocking=self.pinned).contiguous(memory_format=self.memory_format)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            return self.model(x)

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
