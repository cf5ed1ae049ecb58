"""Every framework's serving engine answers what `cnnbench infer` computes: the engine's uint8 path
(normalisation, layout, precision, padding to a multiple, top-k inside the framework) against the same
model's float32 path of `cnnbench infer`, normalised on the host by the shared reference, with softmax
and top-k taken in numpy. A wrong scale, a swapped channel order or a padded row that leaks into the
answer shows here; HTTP adds nothing to this (tests/test_http_serve.py covers the server).
One process per framework: PyTorch and TensorFlow never share one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, write_spec
from test_http_serve import TINY_SERVE  # a 16x16 smallcnn on CPU, [serve] max_batch 8, pad_multiple 4

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from cnnbench.backend import load
    from cnnbench.data.normalize import normalize_uint8_nhwc
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    backend = sys.argv[2]
    run, variant = serve_run(load_spec(sys.argv[1]), backend, "cpu")
    engine = load(backend).build_serve_engine(run, variant, 3, 4)
    images = np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    buffer = engine.staging_buffers(1, 8)[0]
    buffer[:] = 255  # stale rows: padding (5 -> 8) must not reach the answers of the 5
    buffer[:5] = images
    ids, scores = engine.collect(engine.launch(0, 5))
    now_ids, now_scores = engine.infer_now(images[:2])

    base = engine.base  # the same weights, through `cnnbench infer`'s float32 path
    logits = base.fetch(base.infer(base.host_batch(normalize_uint8_nhwc(images), "float32_pageable")))
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    ref_ids = np.argsort(-probs, axis=1)[:, :3]
    ref_scores = np.take_along_axis(probs, ref_ids, 1)
    print(json.dumps({"shape": list(ids.shape), "same_ids": bool((ids == ref_ids).all()),
                      "score_diff": float(np.abs(scores - ref_scores).max()),
                      "now_same_ids": bool((now_ids == ref_ids[:2]).all()),
                      "now_score_diff": float(np.abs(now_scores - ref_scores[:2]).max()),
                      "score_spread": float(ref_scores[:, 0].max() - ref_scores[:, 0].min())}))
""")


@pytest.mark.parametrize("backend", ["torch", "jax", "tensorflow"])
def test_the_serving_engine_answers_what_infer_computes(tmp_path, backend):
    spec = write_spec(tmp_path, TINY_SERVE.format(backend=backend))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(spec), backend], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["shape"] == [5, 3]
    assert result["same_ids"] and result["score_diff"] < 1e-4, result
    assert result["now_same_ids"] and result["now_score_diff"] < 1e-4, result
    assert result["score_spread"] > 1e-4  # the images get different answers: a constant model would pass
