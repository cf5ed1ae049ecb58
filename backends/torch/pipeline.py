"""PyTorch ``pipeline`` strategy: the model cut into one stage per process, GPipe micro-batches.

Every process builds the whole model from the same seed, then keeps one contiguous run of its
pieces (stem, each residual block, head) as its stage; ``torch.distributed.pipelining`` moves
activations forward and gradients back between neighbouring ranks, ``ScheduleGPipe`` runs all
micro-batch forwards, then all backwards, and scales the gradients by the micro-batch count, so a
step equals one step on the whole batch for networks without batch norm. Batch norm normalises
each micro-batch on its own (as in every GPipe): with ``microbatches = 1`` the step equals the
single-device step exactly. Each rank owns its stage's parameters; before evaluation or reading
weights, owners broadcast them so that every rank holds the current whole model.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from backends.torch.common import optimizer_kwargs
from backends.torch.models import ResNet, SmallCNN, build_model
from backends.torch.train import TorchTrainer
from cnnbench.backend import BuildContext
from cnnbench.model.pipeline import pipeline_pieces, split_points
from cnnbench.runs import Run


def pieces(model: nn.Module) -> list[nn.Module]:
    """The model as a sequence of modules whose composition is its forward pass."""
    if isinstance(model, SmallCNN):
        return [nn.Sequential(model.conv1, nn.ReLU(), nn.MaxPool2d(2)),
                nn.Sequential(model.conv2, nn.ReLU(), nn.MaxPool2d(2)),
                nn.Sequential(nn.Flatten(1), model.fc1, nn.ReLU(), model.fc2)]
    if isinstance(model, ResNet):
        stem = nn.Sequential(model.conv1, model.bn1, nn.ReLU(), model.maxpool)
        blocks = [block for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for block in stage]
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), model.fc)
        return [stem, *blocks, head]
    raise ValueError(f"no pipeline split for {type(model).__name__}")


class PipelineTrainer(TorchTrainer):
    def __init__(self, run: Run, ctx: BuildContext) -> None:  # noqa: D107 - the module docstring says it
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        on_gpu = self._join(run, ctx)
        self.module = build_model(run.model, run.image_size, run.channels, run.num_classes).to(
            self.device, memory_format=self.memory_format)
        parts = pieces(self.module)
        assert len(parts) == pipeline_pieces(run.model), "pipeline_pieces() disagrees with pieces()"
        self.ranges = split_points(len(parts), self.world)
        start, end = self.ranges[self.rank]
        self.stage_module = nn.Sequential(*parts[start:end])
        # Which rank owns each state entry: the stage whose pieces hold it.
        self.owner = {}
        for rank, (lo, hi) in enumerate(self.ranges):
            for tensor in nn.Sequential(*parts[lo:hi]).state_dict(keep_vars=True).values():
                self.owner[id(tensor)] = rank
        self.is_first, self.is_last = self.rank == 0, self.rank == self.world - 1
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.precision)
        stage_in, stage_out = self._example_activations(parts, start, end)
        self.stage = PipelineStage(self.stage_module, self.rank, self.world, self.device,
                                   input_args=(stage_in,), output_args=(stage_out,))
        self.criterion = nn.CrossEntropyLoss()
        self.schedule = ScheduleGPipe(self.stage, run.microbatches, loss_fn=self.criterion)
        self.optimizer = torch.optim.SGD(
            self.stage_module.parameters(), lr=float(ctx.lr_table[0]), momentum=run.momentum,
            weight_decay=run.weight_decay, nesterov=run.nesterov,
            **optimizer_kwargs(run.options.optimizer_impl, on_gpu))
        self.scaler = None
        self.lr_table = [float(v) for v in ctx.lr_table]
        self.step_count, self.loss_steps = 0, 0
        self.loss_sum = torch.zeros((), device=self.device)
        self._setup_pipeline_input()

    def _example_activations(self, parts: list[nn.Module], start: int, end: int):
        """This stage's input and output for one micro-batch, computed locally (every rank has the
        whole model) in eval mode: without them PipelineStage infers shapes by running a training-mode
        forward on uninitialised buffers, which corrupts batch-norm running statistics."""
        run = self.run
        x = torch.zeros((run.global_batch // run.microbatches, run.channels, *run.image_size),
                        device=self.device).contiguous(memory_format=self.memory_format)
        self.module.eval()
        with torch.no_grad(), torch.autocast(self.device.type, dtype=self.autocast_dtype,
                                             enabled=self.autocast_dtype is not None):
            for piece in parts[:start]:
                x = piece(x)
            stage_in = x
            for piece in parts[start:end]:
                x = piece(x)
        self.module.train()
        # Training-mode metadata: a later stage's input and every output carry gradients back.
        return stage_in.detach().requires_grad_(start > 0), x.detach().requires_grad_(True)

    def _setup_pipeline_input(self) -> None:
        """Every stage reads the same global batch (the first feeds it in, the last scores it): the
        data-parallel input path with one replica, so shuffling per epoch is the same as there."""
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        run, data = self.run, self.ctx.dataset
        if run.dataset == "synthetic":
            self.fixed_batch = (self._to_device(data.train_x[: run.global_batch]),
                                torch.from_numpy(data.train_y[: run.global_batch]).to(self.device))
            self.steps_per_epoch = 0
            return
        self.fixed_batch = None
        dataset = TensorDataset(torch.from_numpy(data.train_x), torch.from_numpy(data.train_y))
        self.sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=run.seed,
                                          drop_last=True)
        self.loader = DataLoader(dataset, batch_size=run.global_batch, sampler=self.sampler, drop_last=True)
        self.steps_per_epoch = len(self.loader)
        self.epoch, self.batches = 0, iter(())

    def step(self, batch=None) -> None:
        x, y = batch if batch is not None else self.next_batch()
        lr = self.lr_table[min(self.step_count, len(self.lr_table) - 1)]
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            if self.is_first and self.is_last:
                self.schedule.step(x, target=y, losses=losses)
            elif self.is_first:
                self.schedule.step(x)
            elif self.is_last:
                self.schedule.step(target=y, losses=losses)
            else:
                self.schedule.step()
        self.optimizer.step()
        if self.is_last:  # micro-batch losses are means: their mean is the batch's mean loss
            self.loss_sum += torch.stack([loss.detach().float() for loss in losses]).mean()
            self.loss_steps += 1
        self.step_count += 1

    def _share_whole_model(self) -> None:
        """Owners broadcast their stage's parameters and buffers: every rank then has the model."""
        with torch.no_grad():
            for tensor in self.module.state_dict(keep_vars=True).values():
                dist.broadcast(tensor.data, src=self.owner[id(tensor)])

    def evaluate(self) -> tuple[float, float]:
        self._share_whole_model()
        return super().evaluate()

    def predict(self, images: np.ndarray) -> np.ndarray:
        self._share_whole_model()
        return super().predict(images)

    def get_weights(self) -> dict[str, np.ndarray]:
        self._share_whole_model()
        return super().get_weights()
