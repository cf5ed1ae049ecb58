"""Plain PyTorch ResNet-50 training loop, as a skilled user writes it without cnnbench:
torchvision's model, channels_last, bf16 autocast, SGD momentum, cudnn.benchmark, synthetic data.

``--compile model`` compiles the model's forward (backward through AOTAutograd, the optimizer step
eager); ``--compile step`` compiles the whole step, forward, loss, backward and ``optimizer.step()``
in one compiled function (dynamo splits it at ``backward()`` and around the optimizer step; the
optimizer's update is compiled too).

python benchmarks/plain_peers/torch_resnet50.py [--compile [model|step]] [--mode MODE] [--batch 256]
    [--optimizer fused|foreach]
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from window_timer import measure, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", nargs="?", const="model", choices=("model", "step"))
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--optimizer", default="fused", choices=("fused", "foreach"))
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5,
                                **{args.optimizer: True})
    criterion = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    forward = torch.compile(model, mode=args.mode) if args.compile == "model" else model

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if args.compile == "step":
        step = torch.compile(step, mode=args.mode)
    result = measure(step, torch.cuda.synchronize, args.batch)
    name = f"compiled {args.compile}" + (f" {args.mode}" if args.mode != "default" else "") if args.compile else "eager"
    report(f"torch resnet50 {name} b{args.batch} {args.optimizer}", result)


if __name__ == "__main__":
    main()
