"""A spec with ``compile = true`` is served by the compiled forward that `cnnbench infer` times, not by
the eager model: the engine's launch compiles a graph (dynamo's count grows) and answers as eager does.
(Until 2026-12-06 the serving engine called the eager model whatever the spec said, so served rows that
said compile=true had run eager.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO, write_spec

SPEC = """
    name = "serve_compiled"
    model = "smallcnn"
    dataset = "synthetic"
    image_size = 16
    channels = 3
    num_classes = 10
    backends = ["torch"]
    device = "cpu"
    compile = true
    [serve]
    max_batch = 8
    pad_multiple = 4
"""

SCRIPT = textwrap.dedent("""
    import dataclasses, json, sys
    import numpy as np
    import torch._dynamo.utils
    from backends.torch.serve import TorchServeEngine
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    run, variant = serve_run(load_spec(sys.argv[1]), "torch", "cpu")
    engines = {c: TorchServeEngine(run, dataclasses.replace(variant, compile=c), top_k=3, pad_multiple=4)
               for c in (False, True)}
    engines[True].base.model.load_state_dict(engines[False].base.model.state_dict())
    graphs = {}
    answers = {}
    for compiled, engine in engines.items():
        buffer = engine.staging_buffers(1, 8)[0]
        buffer[:] = np.random.default_rng(0).integers(0, 256, buffer.shape, dtype=np.uint8)
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        answers[compiled] = engine.collect(engine.launch(0, 3))
        graphs[compiled] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
    (eager_ids, eager_scores), (ids, scores) = answers[False], answers[True]
    print(json.dumps({"spec_compile": variant.compile, "graphs": [graphs[False], graphs[True]],
                      "shape": list(ids.shape), "same_ids": bool((ids == eager_ids).all()),
                      "score_diff": float(abs(scores - eager_scores).max())}))
""")


def test_a_compiled_spec_is_served_by_the_compiled_forward(tmp_path):
    spec = write_spec(tmp_path, SPEC)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(spec)], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["spec_compile"] is True
    assert result["graphs"][0] == 0 and result["graphs"][1] >= 1  # eager compiles nothing; compiled does
    assert result["shape"] == [3, 3]
    assert result["same_ids"] and result["score_diff"] < 1e-4
