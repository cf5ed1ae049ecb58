"""Plain PyTorch ResNet-50 inference over camera frames, as a skilled user writes it without cnnbench:
torchvision's model, channels_last, eval, inference_mode, fp16 or bf16 autocast, torch.compile, a
batch of 16 x 3 x 1080 x 1920 resident on the GPU (the compute that cnnbench's frame path is compared with).

python benchmarks/plain_peers/torch_frames.py [--precision bf16|fp16] [--no-compile] [--batch 16]
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from window_timer import measure, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, nargs=2, default=(1080, 1920))
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last).eval()
    forward = model if args.no_compile else torch.compile(model)
    x = torch.randn(args.batch, 3, *args.size, device=device).to(memory_format=torch.channels_last)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]

    @torch.inference_mode()
    def step() -> None:
        with torch.autocast("cuda", dtype=dtype):
            forward(x)

    result = measure(step, torch.cuda.synchronize, args.batch, warmup=5, windows=5, window_steps=10)
    report(f"torch resnet50 frames {args.precision} {'eager' if args.no_compile else 'compiled'}", result)


if __name__ == "__main__":
    main()
