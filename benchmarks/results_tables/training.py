"""Training tables: every path once, cnnbench beside the plain peers, options, Keras, model parallelism."""

from __future__ import annotations

from results_tables.rows import (
    NO_TF_GPU,
    Results,
    Row,
    card,
    cards_note,
    missing,
    newest,
    number,
    ok,
    on_card,
    provenance,
    rate,
    ratio,
    share,
    table,
    usual_card,
)

PAIR_LABELS = {  # runbook pair -> (label, batch, section)
    "eager": ("PyTorch eager", 256, "training"),
    "model": ("PyTorch compiled, model only (`compile_scope = \"model\"`)", 256, "training"),
    "step": ("PyTorch compiled, whole step (`compile_scope = \"step\"`)", 256, "training"),
    "step-cudagraphs": ("PyTorch whole step, `compile_mode = \"reduce-overhead\"` (CUDA graphs)", 256,
                        "training-graphs"),
    "jax": ("JAX sharded", 256, "training-jax"),
    "jax-b512": ("JAX sharded", 512, "training-jax"),
}


def _gib(row: Row) -> str:
    return "—" if row.get("peak_memory_mb") is None else f"{row['peak_memory_mb'] / 1024:.1f}"


def _first_step(row: Row | None) -> str:
    return f"{row['first_step_s']:.1f}" if ok(row) and row.get("first_step_s") is not None else "—"


def baseline(results: Results) -> list[str]:
    files = {name: results.csv(name) for name in ("h200_resnet50.csv", "h200_resnet18.csv")}
    lines, shown = [], []
    for name, rows in files.items():
        latest = newest(rows, lambda r: (r["backend"], r["strategy"], bool(r["compile"])))
        model = "resnet50 b256" if "resnet50" in name else "resnet18_cifar b512"
        for backend, strategy, compiled, label in (("torch", "ddp", False, "eager"),
                                                   ("torch", "ddp", True, "torch.compile"),
                                                   ("jax", "sharded", False, "XLA"), ("jax", "pmap", False, "XLA")):
            row = latest.get((backend, strategy, compiled))
            shown.append(row)
            cells = [rate(row, "baseline")]
            cells += ([number(row["step_time_ms_median"], 1), _first_step(row), share(row.get("mfu")),
                       number(row["peak_memory_mb"])] if ok(row) else ["—"] * 4)
            lines.append([model, f"{backend} / {strategy}", label, *cells])
    header = ["model", "backend / strategy", "compile", "images/s", "step ms (median)", "first step s", "MFU",
              "peak memory MiB"]
    return table(header, lines, "lll" + "r" * 5) + ["", provenance({k: [r for r in v] for k, v in files.items()})]


def pair_rows(results: Results) -> dict[str, tuple[Row | None, Row | None]]:
    """pair -> (the newest peer line, cnnbench's row of the same invocation)."""
    peers = newest(results.jsonl("h200_perf_peers.jsonl"), lambda r: r.get("pair"))
    perf = results.csv("h200_perf.csv")
    by_id = {r["run_id"]: r for r in perf}
    found = {}
    for pair in PAIR_LABELS:
        peer = peers.get(pair)
        linked = peer.get("cnnbench_run_id") if peer else None
        row = by_id.get(linked) if linked else newest(
            [r for r in perf if r["spec_name"] == f"compare_{pair}"], lambda r: 0).get(0)
        found[pair] = (peer, row)
    return found


def pairs(results: Results) -> list[str]:
    lines, peers, rows = [], [], []
    for pair, (peer, row) in pair_rows(results).items():
        label, batch, section = PAIR_LABELS[pair]
        peer_ips = peer.get("images_per_sec") if peer else None
        ours = row.get("images_per_sec") if ok(row) else None
        peers.append(peer)
        rows.append(row)
        first = f"{peer['first_step_s']:.1f}" if peer else "—"
        lines.append([label, str(batch), card(row) if row else "—", number(peer_ips) if peer else missing(section),
                      rate(row, section), ratio(ours, peer_ips) or "—", f"{first} / {_first_step(row)}"])
    header = ["configuration", "batch", "card", "plain peer img/s", "cnnbench img/s",
              "cnnbench / peer (target >= 0.97)", "first step s (peer / cnnbench)"]
    return table(header, lines, "llr" + "r" * 4) + ["", provenance({"h200_perf_peers.jsonl": [p for p in peers if p],
                                                               "h200_perf.csv": [r for r in rows if r]})]


OPTION_LABELS = {  # h200_options.csv spec name -> (the option, the baseline row it is compared with)
    "torch_eager_fused": ('`[torch] optimizer_impl = "fused"` (eager, the GPU default)', ("torch", False)),
    "torch_eager_foreach": ('`[torch] optimizer_impl = "foreach"` (eager)', ("torch", False)),
    "torch_compile_reduce_overhead": ('`compile = true`, `compile_mode = "reduce-overhead"` (CUDA graphs)',
                                      ("torch", True)),
    "torch_compile_max_autotune_no_cudagraphs": ('`compile = true`, `compile_mode = "max-autotune-no-cudagraphs"`',
                                                 ("torch", True)),
    "jax_b512": ("`per_device_batch = 512`", ("jax", False)),
    "jax_b1024": ("`per_device_batch = 1024`", ("jax", False)),
    "jax_no_command_buffers": ('`[jax] xla_flags = "--xla_gpu_enable_command_buffer="` (no CUDA graphs in XLA)',
                               ("jax", False)),
}


def options(results: Results) -> list[str]:
    rows = results.csv("h200_options.csv")
    latest = newest(rows, lambda r: r["spec_name"])
    base_rows = results.csv("h200_resnet50.csv")
    base = newest([r for r in base_rows if r["strategy"] in ("ddp", "sharded")],
                  lambda r: (r["backend"], bool(r["compile"])))
    usual = usual_card(r for r in latest.values() if ok(r))
    lines, used = [], []
    for name, (label, against) in OPTION_LABELS.items():
        row, reference = latest.get(name), base.get(against)
        used += [row, reference]
        versus = "—"
        if ok(row) and ok(reference):
            change = row["images_per_sec"] / reference["images_per_sec"] - 1
            versus = (f"{change:+.1%} vs {number(reference['images_per_sec'])}" if card(row) == card(reference)
                      else f"— (the baseline row ran on the {card(reference)})")
        backend = "torch / ddp" if against[0] == "torch" else "jax / sharded"
        lines.append([backend, label, str(row["global_batch"]) if row else "—",
                      on_card(rate(row, "options-autotune" if "autotune" in name else "options"),
                              row if ok(row) else None, usual),
                      number(row["step_time_ms_median"], 1) if ok(row) else "—", _first_step(row), versus])
    header = ["backend", "option", "batch", "images/s", "step ms", "first step s", "vs. the baseline table's row"]
    shown = {"h200_options.csv": [r for r in used if r in rows],
             "h200_resnet50.csv": [r for r in used if r in base_rows]}
    return (table(header, lines, "llrrrrr") + cards_note((r for r in latest.values() if ok(r)), usual)
            + ["", provenance(shown)])


DDP_MODES = ("ddp_optimizer", "no_optimization", "python_reducer")


def ddp_options(results: Results) -> list[str]:
    peers = newest(results.jsonl("h200_perf_peers.jsonl"), lambda r: r.get("pair"))
    perf = results.csv("h200_perf.csv")
    latest = newest(perf, lambda r: r["spec_name"])
    lines, used_peers, used_rows = [], [], []
    for mode in DDP_MODES:
        peer, row = peers.get(f"ddp-{mode}"), latest.get(f"torch_ddp_{mode}")
        used_peers.append(peer)
        used_rows.append(row)
        ours = row["images_per_sec"] if ok(row) else None
        lines.append([f'`ddp_compile = "{mode}"`', number(peer["images_per_sec"]) if peer else missing("options-ddp"),
                      rate(row, "options-ddp"), ratio(ours, peer["images_per_sec"] if peer else None) or "—",
                      f"{peer['first_step_s']:.1f} / {_first_step(row)}" if peer else f"— / {_first_step(row)}"])
    header = ["1-process DDP, whole step compiled", "plain peer `--ddp` img/s", "cnnbench img/s", "cnnbench / peer",
              "first step s (peer / cnnbench)"]
    return table(header, lines) + ["", provenance({"h200_perf_peers.jsonl": [p for p in used_peers if p],
                                                 "h200_perf.csv": [r for r in used_rows if r]})]


def keras(results: Results) -> list[str]:
    rows = results.csv("h200_keras.csv")
    latest = newest(rows, lambda r: (r["backend"], r["strategy"]))
    order = (("jax", "sharded", "native Flax", None), ("keras", "keras-jax", "", ("jax", "sharded")),
             ("torch", "ddp", "native, channels_last", None), ("keras", "keras-torch", "", ("torch", "ddp")),
             ("keras", "keras-tensorflow", "", None))
    lines = []
    for backend, strategy, note, native in order:
        name = f"{backend} / {strategy}" + (f" ({note})" if note else "")
        if strategy == "keras-tensorflow":
            lines.append([name, NO_TF_GPU, "", "", "", "", ""])
            continue
        row = latest.get((backend, strategy))
        native_row = latest.get(native) if native else None
        versus = ratio(row["images_per_sec"], native_row["images_per_sec"], 2) if ok(row) and ok(native_row) else None
        lines.append([name, str(row["backend_version"]) if row else "—", rate(row, "keras"),
                      number(row["step_time_ms_median"], 1) if ok(row) else "—", _first_step(row),
                      number(row["peak_memory_mb"]) if ok(row) else "—", versus or "—"])
    header = ["backend / strategy", "backend_version", "images/s", "step ms", "first step s", "peak memory MiB",
              "vs. native"]
    return table(header, lines, "ll" + "r" * 5) + ["", provenance({"h200_keras.csv": list(latest.values())})]


def _mp_key(row: Row) -> tuple:
    return row["backend"], row["strategy"], row.get("microbatches") if row["strategy"] == "pipeline" else None


def model_parallel(results: Results) -> list[str]:
    rows = [r for r in results.csv("h200_model_parallel.csv") if r["spec_name"] == "resnet50_model_parallel"]
    latest = newest(rows, _mp_key)
    lines = []
    for backend, strategy, micro, shape in (("torch", "ddp", None, "—"), ("torch", "pipeline", 4, "1 stage, 4 x 64"),
                                            ("jax", "sharded", None, "data=1"),
                                            ("jax", "tensor", None, "data=1 x model=1"),
                                            ("jax", "pipeline", 4, "1 stage, 4 x 64")):
        row = latest.get((backend, strategy, micro))
        lines.append([f"{backend} / {strategy}", shape, rate(row, "model-parallel"),
                      number(row["step_time_ms_median"], 1) if ok(row) else "—",
                      _gib(row) if ok(row) else "—"])
    header = ["backend / strategy", "mesh / micro-batches", "images/s", "step ms", "peak memory GiB"]
    return table(header, lines, "llrrr") + ["", provenance({"h200_model_parallel.csv": list(latest.values())})]


def microbatches(results: Results) -> list[str]:
    rows = results.csv("h200_model_parallel.csv")
    data_parallel = newest([r for r in rows if r["spec_name"] == "resnet50_model_parallel"
                            and r["strategy"] in ("ddp", "sharded")], lambda r: r["backend"])
    pipelines = newest([r for r in rows if r["strategy"] == "pipeline"], lambda r: (r["backend"], r["microbatches"]))
    lines, used = [], list(data_parallel.values())
    for count in (1, 2, 4, 8):
        cells = [f"{count} x {256 // count}"]
        for backend in ("torch", "jax"):
            row, base = pipelines.get((backend, count)), data_parallel.get(backend)
            used.append(row)
            section = "model-parallel" if count == 4 else "microbatches"
            versus = ratio(row["images_per_sec"], base["images_per_sec"], 2) if ok(row) and ok(base) else None
            cells += [rate(row, section) + (f" ({versus}x)" if versus else ""),
                      _gib(row) if ok(row) else "—"]
        lines.append(cells)
    header = ["micro-batches of", "torch img/s (vs ddp)", "torch peak GiB", "jax img/s (vs sharded)", "jax peak GiB"]
    return table(header, lines) + ["", provenance({"h200_model_parallel.csv": [r for r in used if r]})]
