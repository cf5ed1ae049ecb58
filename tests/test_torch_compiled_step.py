"""The whole-step compile of the PyTorch trainer (``[torch] compile_scope = "step"``: forward, loss,
backward and the optimizer step compiled) trains exactly as the model-only compile with the eager
optimizer does: the same weights after a few steps with a changing learning rate, and no
recompilation when the rate changes (it lives in a device tensor, not in the graph).

The reference is the compiled model, not eager PyTorch: smallcnn's max-pool windows hold ties
(ReLU zeros) that inductor's max-pool backward breaks differently from eager's, which moves the
convolution gradients by ~1e-3 after one step; the dense layers agree with eager to 1e-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import dataclasses, json
    import numpy as np
    import torch, torch._dynamo.utils
    from backends.torch.train import TorchTrainer
    from cnnbench.data.arrays import synthetic_dataset
    from cnnbench.parity.probe import probe_run
    from cnnbench.backend import BuildContext

    base = probe_run("torch", "ddp", "smallcnn", image_size=8, channels=1, num_classes=10, global_batch=16,
                     momentum=0.9, weight_decay=5e-4)
    lrs = np.array([0.1, 0.05, 0.02], np.float32)  # a schedule that changes every step
    ctx = BuildContext(synthetic_dataset(16, 8, 1, 10, seed=1), lrs, 0, 1, 1)

    def train(run):
        trainer = TorchTrainer(run, ctx)
        graphs = []
        for _ in lrs:
            trainer.step()
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        trainer.sync()
        return trainer.get_weights(), trainer.train_loss(), graphs

    start = TorchTrainer(base, ctx).get_weights()
    compiled = {scope: train(dataclasses.replace(base, compile=True,
                                                 options=dataclasses.replace(base.options, compile_scope=scope)))
                for scope in ("model", "step")}
    (model, model_loss, _), (step, step_loss, graphs) = compiled["model"], compiled["step"]
    print(json.dumps({"max_diff": max(float(np.abs(model[k] - step[k]).max()) for k in model),
                      "moved": max(float(np.abs(start[k] - step[k]).max()) for k in model),
                      "losses": [model_loss, step_loss], "graphs": graphs}))
""")


def test_whole_step_compile_trains_as_the_compiled_model():
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                          cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["moved"] > 1e-2, result  # the steps did train
    assert result["max_diff"] <= 1e-6, result
    assert abs(result["losses"][0] - result["losses"][1]) <= 1e-6, result
    # The second step compiles once more (the momentum buffers now exist); the third step's new
    # rate reuses its graphs.
    assert result["graphs"][1] == result["graphs"][2], result
