"""The PyTorch engine behind `cnnbench serve`: pinned uint8 staging buffers, the host-to-device copy
on its own CUDA stream, normalisation on the device, top-k on the device.

A launch enqueues, without waiting: on the copy stream, the staging rows -> device (non_blocking from
page-locked memory) and an event; on the compute stream, a wait for that event, uint8 NHWC -> float
NCHW (a permuted view: channels_last strides, no copy), scale and shift, the forward pass, softmax,
top-k, the (small) top-k copied back into pinned memory, and a done event. The copy of batch n+1 thus
runs while batch n computes. On a CPU the buffers are plain memory and the same calls run in order.

With ``compile`` the forward is `infer`'s compiled uint8 forward (one graph per padded batch shape, the
normalisation fused into its first kernels), so a served row that says compile=true ran what `cnnbench
infer` of the same spec times; without it, the eager model.

With ``variant.cuda_graphs`` (``[torch] serve_cuda_graphs = true``, GPU only) the compute half of
a launch is one CUDA graph replay per padded batch shape, captured at the shape's first launch (the
server's warm-up), of whichever forward ``compile`` picks: the eager forward costs milliseconds of Python
per batch, held under the GIL that the event loop and the batcher's threads need too; a replay costs
microseconds. A graph reads its
input from one fixed device buffer, so the copy stream still lands each batch in a fresh buffer and the
compute stream copies it into the graph's input (device to device, microseconds) just before the
replay: the next batch's upload cannot overwrite an input that is still being read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from backends.torch.infer import TorchInference, normalize_uint8
from cnnbench.infer.batcher import padded_size
from cnnbench.runs import Run, Variant


class TorchServeEngine:
    def __init__(self, run: Run, variant: Variant, top_k: int, pad_multiple: int) -> None:
        self.base = TorchInference(run, variant)  # the model, device, autocast and memory format of `infer`
        self.device, self.on_gpu = self.base.device, self.base.on_gpu
        self.image_shape = (*run.image_size, run.channels)
        self.top_k, self.pad_multiple = min(top_k, run.num_classes), max(pad_multiple, 1)
        self.copy_stream = torch.cuda.Stream(self.device) if self.on_gpu else None
        self.compute_stream = torch.cuda.Stream(self.device) if self.on_gpu else None
        self._host: list[torch.Tensor] = []
        self.cuda_graphs = bool(variant.cuda_graphs and self.on_gpu)
        self.compiled = variant.compile  # the spec's compile: the server runs the forward `infer` times
        self._graphs: dict[int, tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        if self.on_gpu:
            torch.cuda.synchronize()  # the model was made on the default stream; launches use others

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        shape = (max_batch, *self.image_shape)
        self._host = [torch.empty(shape, dtype=torch.uint8, pin_memory=self.on_gpu) for _ in range(count)]
        return [t.numpy() for t in self._host]  # views: a slot written in numpy is the pinned memory

    @torch.inference_mode()
    def _top_k(self, images: torch.Tensor, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        if self.compiled:
            # the compiled uint8 forward of `infer` (one graph per padded shape, normalisation fused into
            # its first kernels); autocast is traced into the graph, so no cache of cast weights exists
            logits = self.base.forward_uint8(images)
        else:
            x = normalize_uint8(images, self.base.scale, self.base.shift, self.base.memory_format)
            dtype = self.base.autocast_dtype
            # cache=False in a graph capture: autocast's cache of cast weights must not outlive the capture
            with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=cache):
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
            if self.cuda_graphs:
                graph, graph_input, ids, scores = self._graph(len(rows))
                graph_input.copy_(on_device)
                graph.replay()  # on the current (compute) stream, after the copy
            else:
                ids, scores = self._top_k(on_device)
            # the top-k results leave the graph's fixed outputs before the next replay (same stream)
            ids, scores = ids.to("cpu", non_blocking=True), scores.to("cpu", non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.compute_stream)
        return ids, scores, done, valid

    def _graph(self, size: int) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The captured forward of batch ``size``: (graph, its input buffer, its top-k ids, scores)."""
        if size not in self._graphs:
            graph_input = torch.zeros((size, *self.image_shape), dtype=torch.uint8, device=self.device)
            # Eager runs first, on a side stream as capture requires: cuDNN autotuning and lazy
            # initialisation must not happen inside the capture.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._top_k(graph_input, cache=False)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the completer thread may synchronize on an earlier batch meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                ids, scores = self._top_k(graph_input, cache=False)
            self._graphs[size] = (graph, graph_input, ids, scores)
        return self._graphs[size]

    def collect(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        if not self.on_gpu:
            return handle
        ids, scores, done, valid = handle
        done.synchronize()
        return ids.numpy()[:valid], scores.numpy()[:valid]

    @torch.inference_mode()
    def infer_now(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One plain forward, as a route that calls the model per request would: pageable copy, wait."""
        # a request body's array is read-only (np.frombuffer): copy it then, as torch.from_numpy warns otherwise
        ids, scores = self._top_k(torch.from_numpy(np.require(images, requirements=("C", "W"))).to(self.device))
        return ids.cpu().numpy(), scores.cpu().numpy()

    def device_name(self) -> str:
        return self.base.device_name()
