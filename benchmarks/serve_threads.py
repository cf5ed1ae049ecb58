"""Where does serving time go? Times the inference handler of `cnnbench infer`'s serving path
(pad, host batch, copy, forward, logits to host) in the calling thread, in a worker thread, and in a
worker thread while another thread wakes every 0.3 ms (as the load generator does at 3,000 req/s).

Usage: python benchmarks/serve_threads.py [torch|jax] [gpu|cpu] [batch]
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time

import numpy as np

from cnnbench.infer.measure import pad_to_multiple
from cnnbench.parity.probe import probe_run
from cnnbench.runs import Variant


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "torch"
    kind = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    gpu = kind == "gpu"
    run = probe_run(backend, "infer", "resnet50" if gpu else "smallcnn", image_size=224 if gpu else 8,
                    channels=3 if gpu else 1, num_classes=1000 if gpu else 10, global_batch=batch)
    run = dataclasses.replace(run, device_kind=kind)
    if backend == "torch":
        from backends.torch.infer import TorchInference as Model
    else:
        from backends.jax.infer import JaxInference as Model
    model = Model(run, Variant("x", precision="bf16", compile=backend == "jax", channels_last=backend == "torch"))
    images = np.random.default_rng(0).standard_normal((batch, run.channels, *run.image_size),
                                                      dtype=np.float32)

    def handler() -> None:
        padded, valid = pad_to_multiple(np.stack(list(images)), 8)
        model.fetch(model.infer(model.host_batch(padded)))[:valid]

    def timed(n: int = 50) -> float:
        for _ in range(5):
            handler()
        begun = time.perf_counter()
        for _ in range(n):
            handler()
        return (time.perf_counter() - begun) * 1000 / n

    print(f"{backend} {kind} batch {batch}: caller thread {timed():.2f} ms")
    box: list[float] = []
    t = threading.Thread(target=lambda: box.append(timed()))
    t.start()
    t.join()
    print(f"{backend} {kind} batch {batch}: worker thread {box[0]:.2f} ms")
    stop = threading.Event()

    def waker() -> None:
        while not stop.is_set():
            time.sleep(0.0003)

    w = threading.Thread(target=waker)
    w.start()
    t = threading.Thread(target=lambda: box.append(timed()))
    t.start()
    t.join()
    stop.set()
    w.join()
    print(f"{backend} {kind} batch {batch}: worker thread + 0.3 ms waker {box[1]:.2f} ms "
          f"(switch interval {sys.getswitchinterval() * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
