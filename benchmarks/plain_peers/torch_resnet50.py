"""Plain PyTorch ResNet-50 training loop, as a skilled user writes it without cnnbench:
torchvision's model, channels_last, bf16 autocast, SGD momentum, cudnn.benchmark, synthetic data.

python benchmarks/plain_peers/torch_resnet50.py [--compile] [--batch 256]
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from window_timer import measure, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5, fused=True)
    criterion = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    forward = torch.compile(model) if args.compile else model

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    result = measure(step, torch.cuda.synchronize, args.batch)
    report(f"torch resnet50 {'compiled' if args.compile else 'eager'}", result)


if __name__ == "__main__":
    main()
