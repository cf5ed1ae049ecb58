"""Plain PyTorch ResNet-50 inference, as a skilled user writes it without cnnbench: torchvision's
model in eval mode, channels_last, bf16 autocast, ``torch.compile`` (static shapes), the batch
resident on the GPU (the model's own rate), under ``torch.inference_mode``.

python benchmarks/plain_peers/torch_resnet50_infer.py [--batch 256] [--mode default]
    [--device cpu --arch tiny --image-size 32]   (a quick check on a CPU)
"""

from __future__ import annotations

import argparse

import torch
from torch_resnet50 import build
from window_timer import measure, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    model = build(args.arch).to(device, memory_format=torch.channels_last).eval()

    @torch.compile(mode=args.mode, dynamic=False)
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return model(x)

    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
    x = x.to(memory_format=torch.channels_last)

    @torch.inference_mode()
    def step() -> None:
        forward(x)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    result = measure(step, sync, args.batch, warmup=5, windows=5, window_steps=10)
    report(f"torch {args.arch} inference compiled bf16 b{args.batch}", {**vars(args), **result})


if __name__ == "__main__":
    main()
