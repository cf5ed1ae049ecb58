"""PyTorch ``ddp``: DistributedDataParallel, one process per device, started by torchrun.

gloo on CPU (emulated devices: N processes sharing the cores), NCCL on GPU. A run of one process
joins a process group of one but trains the bare model unless ``[torch] wrap_ddp_single`` (a
1-process DDP only adds its reducer: 3.5% of the compiled ResNet-50 step on an H200).

``compile = true`` compiles the whole training step by default (``compile_scope = "step"``:
forward, loss, backward and the optimizer step, as skilled users write it) or the model's forward
only (``"model"``); a compiled DDP model follows ``ddp_compile`` (dynamo's ``optimize_ddp``).
"""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING

import numpy as np

from backends.torch.common import apply_cudnn_options, optimizer_kwargs
from cnnbench import envinfo
from cnnbench.backend import BuildContext
from cnnbench.options import TorchOptions
from cnnbench.runs import Run

if TYPE_CHECKING:
    import torch


class TorchTrainer:
    input = None  # a TorchInput for uint8 sources (set in _setup_input)
    # After close() (barrier, destroy_process_group) a finished rank could still die in the C++ exit-time
    # destructors: "terminate called without an active exception" (SIGABRT) with no Python frame, after
    # its last epoch, about 1 two-process CPU run in 20 on a 2-core host (2026-12-07; pytorch#190489).
    # torchrun then fails the run. The worker leaves at once after close() instead (Trainer.leaves_at_once).
    leaves_at_once = True

    def __init__(self, run: Run, ctx: BuildContext) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from backends.torch.models import build_model

        on_gpu = self._join(run, ctx)
        module = build_model(run.model, run.image_size, run.channels, run.num_classes)
        if run.sync_bn:
            module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        self.module = module.to(self.device, memory_format=self.memory_format)
        opts = run.options
        self.scope = opts.compile_scope if run.compile else None
        if self.scope == "step":
            _configure_compiled_step(opts)  # read by DDP's constructor and by dynamo
        self.wrapped = self.module
        if self.world > 1 or opts.wrap_ddp_single:
            self.wrapped = DistributedDataParallel(
                self.module, device_ids=[ctx.local_rank] if on_gpu else None,
                bucket_cap_mb=opts.bucket_cap_mb, gradient_as_bucket_view=True,
            )
        mode = opts.compile_mode
        self.forward = torch.compile(self.wrapped, mode=mode) if self.scope == "model" else self.wrapped
        lr0 = float(ctx.lr_table[0])
        # A compiled step reads the learning rate from a device tensor: a Python float would be a
        # constant baked into the graph, recompiled at every change of the schedule.
        self.lr_tensor = torch.tensor(lr0, device=self.device) if self.scope == "step" else None
        self.optimizer = torch.optim.SGD(
            self.module.parameters(), lr=self.lr_tensor if self.lr_tensor is not None else lr0,
            momentum=run.momentum, weight_decay=run.weight_decay, nesterov=run.nesterov,
            **optimizer_kwargs(opts.optimizer_impl, on_gpu),
        )
        self.current_lr = lr0
        self.train_step = torch.compile(self._train_step, mode=mode) if self.scope == "step" else self._train_step
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.precision)
        self.scaler = torch.amp.GradScaler("cuda") if run.precision == "fp16" else None
        self.criterion = torch.nn.CrossEntropyLoss()
        self.lr_table = [float(v) for v in ctx.lr_table]
        self.step_count = 0
        self.loss_sum = torch.zeros((), device=self.device)
        self.loss_steps = 0
        self._setup_input()

    def _join(self, run: Run, ctx: BuildContext) -> bool:
        """This process's device and the process group (shared with the pipeline trainer); True on GPU."""
        import torch
        import torch.distributed as dist

        self.run, self.ctx = run, ctx
        self.rank, self.world = ctx.process_index, ctx.process_count
        on_gpu = run.device_kind == "gpu"
        if on_gpu:
            self.device = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(self.device)
            apply_cudnn_options(run.options)
            # TF32 for fp32 matmuls, as XLA (JAX, TensorFlow) does by default on GPUs.
            torch.set_float32_matmul_precision("high")
        else:
            self.device = torch.device("cpu")
        if not dist.is_initialized():
            dist.init_process_group("nccl" if on_gpu else "gloo",
                                    device_id=self.device if on_gpu else None)
        torch.manual_seed(run.seed)
        self.memory_format = (torch.channels_last if run.options.channels_last
                              else torch.contiguous_format)
        return on_gpu

    # -- input ---------------------------------------------------------------------------------
    def _setup_input(self) -> None:
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        run, data, b = self.run, self.ctx.dataset, self.run.per_device_batch
        self.input = None
        if self.ctx.inputs is not None:  # uint8 frames from files, video or CIFAR-10, prepared on the device
            from backends.torch.input import TorchInput

            self.fixed_batch = None
            self.input = TorchInput(self.ctx.inputs, self.device, run.global_batch, self.rank, self.world,
                                    self.memory_format == torch.channels_last)
            self.steps_per_epoch = run.steps_per_epoch
            return
        if run.dataset == "synthetic":
            # One batch resident on the device: throughput excludes input, by design.
            lo = self.rank * b
            self.fixed_batch = (self._to_device(data.train_x[lo:lo + b]),
                                torch.from_numpy(data.train_y[lo:lo + b]).to(self.device))
            self.steps_per_epoch = 0
            return
        self.fixed_batch = None
        dataset = TensorDataset(torch.from_numpy(data.train_x), torch.from_numpy(data.train_y))
        self.sampler = DistributedSampler(dataset, num_replicas=self.world, rank=self.rank,
                                          shuffle=True, seed=run.seed, drop_last=True)
        workers = run.options.num_workers
        extra = ({"persistent_workers": run.options.persistent_workers,
                  "prefetch_factor": run.options.prefetch_factor} if workers else {})
        self.loader = DataLoader(dataset, batch_size=b, sampler=self.sampler, drop_last=True,
                                 num_workers=workers, pin_memory=run.options.pin_memory,
                                 **extra)
        self.steps_per_epoch = len(self.loader)
        assert self.steps_per_epoch == run.steps_per_epoch, (self.steps_per_epoch, run.steps_per_epoch)
        self.epoch, self.batches = 0, iter(())

    def _to_device(self, images: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.ascontiguousarray(images)).to(
            self.device, memory_format=self.memory_format, non_blocking=True)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch on the device (the runner times how long this waits)."""
        if self.fixed_batch is not None:
            return self.fixed_batch
        if self.input is not None:
            return self.input.next_batch()
        try:
            x, y = next(self.batches)
        except StopIteration:
            self.sampler.set_epoch(self.epoch)
            self.epoch += 1
            self.batches = iter(self.loader)
            x, y = next(self.batches)
        x = x.to(self.device, memory_format=self.memory_format, non_blocking=True)
        return x, y.to(self.device, non_blocking=True)

    # -- the training step ---------------------------------------------------------------------
    def step(self, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        x, y = batch if batch is not None else self.next_batch()
        self._set_lr(self.lr_table[min(self.step_count, len(self.lr_table) - 1)])
        # Outside the compiled step: dynamo does not trace zero_grad (a graph break at the start).
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_sum += self.train_step(x, y)  # stays on the device: no host sync per step
        self.loss_steps += 1
        self.step_count += 1

    def _set_lr(self, lr: float) -> None:
        if lr == self.current_lr:
            return
        self.current_lr = lr
        if self.lr_tensor is not None:
            self.lr_tensor.fill_(lr)  # the optimizer's param groups hold this tensor
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, loss, backward, optimizer step: what ``compile_scope = "step"`` compiles whole;
        returns the loss.

        Without compiled autograd dynamo compiles it as three pieces: forward and loss (with the
        backward graph AOTAutograd derives from it), then the optimizer step, which PyTorch's
        optimizers fence off on purpose so that the update stays in place. The loss is summed by
        the caller: a tensor that the compiled step mutated in place, other than parameters and
        optimizer state, would make CUDA graphs (``reduce-overhead``) skip the optimizer's graph."""
        import torch

        with torch.autocast(self.device.type, dtype=self.autocast_dtype,
                            enabled=self.autocast_dtype is not None):
            loss = self.criterion(self.forward(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach().float()

    def sync(self) -> None:
        import torch
        import torch.distributed as dist

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.world > 1:
            dist.barrier()

    # -- evaluation and inspection -------------------------------------------------------------
    def _all_sum(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def train_loss(self) -> float:
        total, steps = self._all_sum([float(self.loss_sum), float(self.loss_steps)])
        self.loss_sum.zero_()
        self.loss_steps = 0
        return total / max(steps, 1)

    def _eval_batches(self):
        """(images, labels) on the device: the test split's slice of this rank."""
        import torch

        if self.input is not None and self.run.dataset != "cifar10":  # files: through the loader
            yield from self.input.eval_batches()
            return
        data = self.ctx.dataset
        images, labels = data.test_x[self.rank::self.world], data.test_y[self.rank::self.world]
        for lo in range(0, len(labels), 2 * self.run.per_device_batch):
            hi = lo + 2 * self.run.per_device_batch
            yield self._to_device(images[lo:hi]), torch.from_numpy(labels[lo:hi]).to(self.device)

    def evaluate(self) -> tuple[float, float]:
        import torch

        # Each rank scores a disjoint slice of the test split; the sums are all-reduced.
        loss_sum, correct, count = 0.0, 0.0, 0.0
        self.module.eval()
        with torch.no_grad(), torch.autocast(self.device.type, dtype=self.autocast_dtype,
                                             enabled=self.autocast_dtype is not None):
            for x, target in self._eval_batches():
                logits = self.module(x).float()
                loss_sum += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
                correct += float((logits.argmax(1) == target).sum())
                count += len(target)
        self.module.train()
        loss_sum, correct, count = self._all_sum([loss_sum, correct, count])
        return loss_sum / max(count, 1.0), correct / max(count, 1.0)

    def predict(self, images: np.ndarray) -> np.ndarray:
        import torch

        self.module.eval()
        with torch.no_grad():
            logits = self.module(self._to_device(images)).float().cpu().numpy()
        self.module.train()
        return logits

    def param_count(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: tensor.detach().float().cpu().numpy()
                for name, tensor in self.module.state_dict().items()
                if not name.endswith("num_batches_tracked")}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        import torch

        state = self.module.state_dict()
        missing = [k for k in state if not k.endswith("num_batches_tracked") and k not in weights]
        if missing or set(weights) - set(state):
            raise KeyError(f"weights do not match the model: missing {missing[:3]}, "
                           f"unexpected {sorted(set(weights) - set(state))[:3]}")
        with torch.no_grad():
            for name, value in weights.items():
                state[name].copy_(torch.from_numpy(np.asarray(value)))

    def peak_memory_bytes(self) -> int | None:
        import torch

        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def profiler(self, directory):
        from backends import profilers

        return profilers.torch_trace(directory, self.run.device_kind == "gpu",
                                     module=None if self.run.compile else self.module)

    def close(self) -> None:
        import torch.distributed as dist

        from backends.torch.common import shut_down_loader

        if self.input is not None:
            self.input.close()
        if getattr(self, "loader", None) is not None:
            shut_down_loader(self.loader)
            self.batches = iter(())  # a non-persistent iterator shuts its workers down as it goes
        if dist.is_initialized():
            # Every rank reaches the teardown before any closes its connections: a gloo peer that
            # still reads when the other side hangs up aborts its process (SIGABRT), failing the run.
            dist.barrier()
            dist.destroy_process_group()

    def device_name(self) -> str:
        import torch

        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return envinfo.cpu_name()


def _configure_compiled_step(options: TorchOptions) -> None:
    """Dynamo's settings for a compiled whole step; set before DDP is built (its constructor
    reads ``optimize_ddp`` to choose between its C++ and Python reducers)."""
    import torch._dynamo.config as dynamo_config

    ddp_mode = options.ddp_compile
    dynamo_config.optimize_ddp = ddp_mode
    dynamo_config.compiled_autograd = options.compiled_autograd or ddp_mode == "python_reducer"


def devices() -> list[str]:
    """Devices PyTorch sees (for `cnnbench env`)."""
    import torch

    found = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    return found + [f"cpu ({torch.get_num_threads()} threads)"]
