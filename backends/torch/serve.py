"""The PyTorch engine behind `cnnbench serve`: pinned uint8 staging buffers, the host-to-device copy
on its own CUDA stream, normalisation on the device, top-k on the device.

A launch enqueues, without waiting: on the copy stream, the staging rows -> device (non_blocking from
page-locked memory) and an event; on the compute stream, a wait for that event, uint8 NHWC -> float
NCHW (a permuted view: channels_last strides, no copy), scale and shift, the forward pass, softmax,
top-k, the (small) top-k copied back into pinned memory, and a done event. The copy of batch n+1 thus
runs while batch n computes. On a CPU the buffers are plain memory and the same calls run in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from backends.torch.infer import TorchInference
from cnnbench.data.normalize import channel_scale_shift
from cnnbench.infer.batcher import padded_size
from cnnbench.infer.plan import Variant
from cnnbench.runs import Run


class TorchServeEngine:
    def __init__(self, run: Run, variant: Variant, top_k: int, pad_multiple: int) -> None:
        self.base = TorchInference(run, variant)  # the model, device, autocast and memory format of `infer`
        self.device, self.on_gpu = self.base.device, self.base.on_gpu
        self.image_shape = (*run.image_size, run.channels)
        self.top_k, self.pad_multiple = min(top_k, run.num_classes), max(pad_multiple, 1)
        scale, shift = channel_scale_shift(run.channels)  # broadcast over NCHW
        self.scale = torch.from_numpy(scale).to(self.device).view(1, -1, 1, 1)
        self.shift = torch.from_numpy(shift).to(self.device).view(1, -1, 1, 1)
        self.copy_stream = torch.cuda.Stream(self.device) if self.on_gpu else None
        self.compute_stream = torch.cuda.Stream(self.device) if self.on_gpu else None
        self._host: list[torch.Tensor] = []
        if self.on_gpu:
            torch.cuda.synchronize()  # scale and shift were made on the default stream; launches use others

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        shape = (max_batch, *self.image_shape)
        self._host = [torch.empty(shape, dtype=torch.uint8, pin_memory=self.on_gpu) for _ in range(count)]
        return [t.numpy() for t in self._host]  # views: a slot written in numpy is the pinned memory

    @torch.inference_mode()
    def _top_k(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = images.permute(0, 3, 1, 2).float() * self.scale + self.shift
        x = x.contiguous(memory_format=self.base.memory_format)
        dtype = self.base.autocast_dtype
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            logits = self.base.model(x)
        scores, ids = torch.softmax(logits.float(), dim=1).topk(self.top_k, dim=1)
        return ids, scores

    @torch.inference_mode()
    def launch(self, index: int, valid: int) -> Any:
        host = self._host[index]
        rows = host[: padded_size(valid, self.pad_multiple, len(host))]  # rows past `valid` hold stale images: masked
        if not self.on_gpu:
            ids, scores = self._top_k(rows)
            return ids.numpy()[:valid], scores.numpy()[:valid]
        with torch.cuda.stream(self.copy_stream):
            on_device = rows.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        with torch.cuda.stream(self.compute_stream):
            self.compute_stream.wait_event(copied)
            on_device.record_stream(self.compute_stream)  # allocated on the copy stream, used here
            ids, scores = self._top_k(on_device)
            ids, scores = ids.to("cpu", non_blocking=True), scores.to("cpu", non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.compute_stream)
        return ids, scores, done, valid

    def collect(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        if not self.on_gpu:
            return handle
        ids, scores, done, valid = handle
        done.synchronize()
        return ids.numpy()[:valid], scores.numpy()[:valid]

    @torch.inference_mode()
    def infer_now(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One plain forward, as a route that calls the model per request would: pageable copy, wait."""
        ids, scores = self._top_k(torch.from_numpy(np.ascontiguousarray(images)).to(self.device))
        return ids.cpu().numpy(), scores.cpu().numpy()

    def device_name(self) -> str:
        return self.base.device_name()
