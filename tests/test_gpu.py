"""GPU paths (skipped where nvidia-smi finds no GPU): PyTorch DDP over NCCL and JAX on one GPU."""

from __future__ import annotations

import pytest
from conftest import REPO, run_cli

from cnnbench.table import store

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_resnet18_bf16_on_one_gpu(tmp_path, backend):
    out = tmp_path / "gpu.csv"
    done = run_cli("run", REPO / "experiments" / "resnet18_synthetic.toml", "--devices", "1", "-b", backend,
                   "--out", out, "--no-report", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    assert rows and all(r["status"] == "ok" and r["device_type"] == "gpu" for r in rows)
    assert all(r["params"] == 11_173_962 and r["peak_memory_mb"] > 0 for r in rows)


def test_serve_engine_cuda_graph_replays_match_the_eager_forward():
    """A graph replay answers like the eager forward for every padded shape, also with two batches in
    flight (the copy of the next cannot overwrite the input the previous replay still reads)."""
    import dataclasses

    import numpy as np

    from backends.torch.serve import TorchServeEngine
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    spec = load_spec(REPO / "experiments" / "resnet50_serve.toml")
    run, variant = serve_run(spec, "torch", "gpu")
    graphs = TorchServeEngine(run, dataclasses.replace(variant, cuda_graphs=True), top_k=5, pad_multiple=8)
    eager = TorchServeEngine(run, dataclasses.replace(variant, cuda_graphs=False), top_k=5, pad_multiple=8)
    eager.base.model.load_state_dict(graphs.base.model.state_dict())
    rng = np.random.default_rng(0)
    for engine in (graphs, eager):
        for buffer in engine.staging_buffers(2, 32):
            buffer[:] = rng.integers(0, 256, buffer.shape, dtype=np.uint8)
        rng = np.random.default_rng(0)  # the same images in both engines
    for valid in (3, 8, 17, 32):
        in_flight = [graphs.launch(0, valid), graphs.launch(1, valid)]
        got = [graphs.collect(handle) for handle in in_flight]
        want = [eager.collect(eager.launch(index, valid)) for index in (0, 1)]
        for (g_ids, g_scores), (w_ids, w_scores) in zip(got, want):
            assert g_ids.shape == (valid, 5)
            assert (g_ids[:, 0] == w_ids[:, 0]).mean() > 0.95  # bf16: near-ties may swap
            assert np.allclose(g_scores[:, 0], w_scores[:, 0], atol=2e-2)
    # a graph per padded shape that ran: 3 and 8 pad to 8, 17 to 24 (captured on first use)
    assert sorted(graphs._graphs) == [8, 24, 32]


def test_serve_engine_compiled_forward_replays_in_a_cuda_graph():
    """``compile = true`` with serve_cuda_graphs: the graph captures the compiled uint8 forward, and its
    replays answer as that forward does outside a graph."""
    import dataclasses

    import numpy as np

    from backends.torch.serve import TorchServeEngine
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    spec = load_spec(REPO / "experiments" / "resnet50_serve.toml")
    run, variant = serve_run(spec, "torch", "gpu")
    compiled = dataclasses.replace(variant, compile=True)
    graphs = TorchServeEngine(run, dataclasses.replace(compiled, cuda_graphs=True), top_k=5, pad_multiple=32)
    plain = TorchServeEngine(run, dataclasses.replace(compiled, cuda_graphs=False), top_k=5, pad_multiple=32)
    plain.base.model.load_state_dict(graphs.base.model.state_dict())
    for engine in (graphs, plain):
        buffer = engine.staging_buffers(1, 32)[0]
        buffer[:] = np.random.default_rng(0).integers(0, 256, buffer.shape, dtype=np.uint8)
    for valid in (3, 32):
        (g_ids, g_scores), (p_ids, p_scores) = (e.collect(e.launch(0, valid)) for e in (graphs, plain))
        assert g_ids.shape == (valid, 5)
        assert (g_ids[:, 0] == p_ids[:, 0]).mean() > 0.95
        assert np.allclose(g_scores[:, 0], p_scores[:, 0], atol=2e-2)
    assert sorted(graphs._graphs) == [32]
