"""Plain PyTorch ResNet-50 training loop, as a skilled user writes it without cnnbench:
torchvision's model, channels_last, bf16 autocast, SGD momentum, cudnn.benchmark, synthetic data.

``--compile model`` compiles the model's forward (backward through AOTAutograd, the optimizer step
eager); ``--compile step`` compiles the whole step, forward, loss, backward and ``optimizer.step()``
in one compiled function (dynamo splits it at ``backward()`` and around the optimizer step, whose
update is compiled too). ``--ddp MODE`` wraps the model in DistributedDataParallel over a process
group of one, compiled with ``torch._dynamo.config.optimize_ddp = MODE`` (``python_reducer`` with
compiled autograd, which it needs).

python benchmarks/plain_peers/torch_resnet50.py [--compile [model|step]] [--mode MODE] [--batch 256]
    [--optimizer fused|foreach] [--ddp ddp_optimizer|python_reducer|no_optimization]
    [--device cpu --arch tiny --image-size 32]   (the last three: a quick check on a CPU)
"""

from __future__ import annotations

import argparse
import os

import torch
from window_timer import measure, report


def build(arch: str) -> torch.nn.Module:
    """A torchvision network by name, or ``tiny`` (a few layers, for a quick check without
    torchvision)."""
    if arch == "tiny":
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1000))
    import torchvision

    return getattr(torchvision.models, arch)()


def wrap_ddp(model: torch.nn.Module, mode: str, device: torch.device) -> torch.nn.Module:
    import torch._dynamo.config as dynamo_config
    import torch.distributed as dist

    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"))
    on_gpu = device.type == "cuda"
    dist.init_process_group("nccl" if on_gpu else "gloo", device_id=device if on_gpu else None)
    dynamo_config.optimize_ddp = mode  # read by DDP's constructor: set before wrapping
    dynamo_config.compiled_autograd = mode == "python_reducer"
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if on_gpu else None,
                                                     gradient_as_bucket_view=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", nargs="?", const="model", choices=("model", "step"))
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--optimizer", default="fused", choices=("fused", "foreach"))
    parser.add_argument("--ddp", choices=("ddp_optimizer", "python_reducer", "no_optimization"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device(args.device)
    model = build(args.arch).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5,
                                **{args.optimizer: True})
    criterion = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
    x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    wrapped = wrap_ddp(model, args.ddp, device) if args.ddp else model
    forward = torch.compile(wrapped, mode=args.mode) if args.compile == "model" else wrapped

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = criterion(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if args.compile == "step":
        step = torch.compile(step, mode=args.mode)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    quick = {} if device.type == "cuda" else {"warmup": 1, "windows": 2, "window_steps": 2}
    result = measure(step, sync, args.batch, **quick)
    name = f"compiled {args.compile}" + (f" {args.mode}" if args.mode != "default" else "") if args.compile else "eager"
    report(f"torch {args.arch} {name} b{args.batch} {args.optimizer}" + (f" ddp {args.ddp}" if args.ddp else ""),
           {**vars(args), **result})


if __name__ == "__main__":
    main()
