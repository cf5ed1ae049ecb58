"""Inference tables: inputs by batch, the sweep, the ablation, dynamic batching in process, 1080p frames."""

from __future__ import annotations

from results_tables.rows import (
    Results,
    Row,
    cards_note,
    missing,
    newest,
    number,
    ok,
    on_card,
    provenance,
    rate,
    table,
    usual_card,
)

INPUTS = ("resident", "uint8_pinned", "float32_pinned", "float32_pageable")
BACKEND_SECTION = {"torch": "inference-torch", "jax": "inference-jax"}


def by_input_rows(results: Results) -> dict[tuple, Row]:
    rows = [r for r in results.csv("h200_perf.csv") if r["spec_name"] == "perf_infer"]
    return newest(rows, lambda r: (r["backend"], r["variant"], r["global_batch"]))


def by_input(results: Results) -> list[str]:
    latest = by_input_rows(results)
    usual = usual_card(latest.values())
    columns = [(b, i) for b in ("torch", "jax") for i in INPUTS]

    def cell(row: Row | None, backend: str) -> str:
        return on_card(rate(row, BACKEND_SECTION[backend]), row, usual)

    lines = [[str(batch), *(cell(latest.get((b, i, batch)), b) for b, i in columns)] for batch in (1, 64, 256, 512)]
    header = ["batch", *(f"{b} {i}" for b, i in columns)]
    return (table(header, lines) + cards_note(latest.values(), usual)
            + ["", provenance({"h200_perf.csv": list(latest.values())})])


def _sweep_rows(results: Results) -> list[Row]:
    return [r for r in results.csv("h200_infer.csv")
            if r["mode"] == "infer" and r["variant"] in ("sweep", "float32_pageable")]


def sweep(results: Results) -> list[str]:
    rows = _sweep_rows(results)
    latest = newest(rows, lambda r: (r["backend"], r["global_batch"]))
    batches = sorted({batch for _, batch in latest}) or [1, 8, 32, 64, 256]
    lines = []
    for batch in batches:
        cells = [str(batch)]
        for backend in ("torch", "jax"):
            row = latest.get((backend, batch))
            cells += [rate(row, "infer-sweep"),
                      f"{row['latency_ms_p50']:.1f} / {row['latency_ms_p99']:.1f}" if ok(row) else "—"]
        lines.append(cells)
    how = {b: ("compiled" if any(r["compile"] for r in rows if r["backend"] == b) else "eager") if b == "torch"
           else "jit" for b in ("torch", "jax")}
    header = ["batch", f"torch bf16 {how['torch']} img/s", "torch p50 / p99 ms", "jax bf16 img/s", "jax p50 / p99 ms"]
    return table(header, lines) + ["", provenance({"h200_infer.csv": list(latest.values())})]


TOGGLES = {"baseline": "baseline", "compile": "compile (`torch.compile`; JAX always jits)", "bf16": "bf16",
           "fp16": "fp16", "channels_last": "channels_last", "pinned": "pinned host memory + `non_blocking`",
           "pad": "pad 50 -> 64 (multiple of 32, masked)",
           "all": "all applicable together (bf16, pinned, pad; torch also compile, channels_last)"}


def ablation(results: Results) -> list[str]:
    rows = [r for r in results.csv("h200_ablation.csv") if r["variant"] in TOGGLES]
    latest = newest(rows, lambda r: (r["backend"], r["variant"]))
    lines = []
    for toggle, label in TOGGLES.items():
        cells = [label]
        for backend in ("torch", "jax"):
            row, base = latest.get((backend, toggle)), latest.get((backend, "baseline"))
            if row is None:
                cells += [missing("ablation"), ""]
            elif row["status"] == "skipped":
                cells += [f"skipped: {str(row.get('error') or '')[:60]}", "—"]
            elif not ok(row) or toggle == "baseline" or not ok(base):
                cells += [rate(row, "ablation", "step_time_ms_median", 2), "—"]
            else:
                ms, base_ms = row["step_time_ms_median"], base["step_time_ms_median"]
                cells += [f"{ms:.2f}", f"{ms - base_ms:+.2f} ms ({base_ms / ms:.2f}x)"]
        lines.append(cells)
    header = ["toggle", "torch ms per batch", "torch change (speed-up)", "jax ms per batch", "jax change (speed-up)"]
    return table(header, lines) + ["", provenance({"h200_ablation.csv": list(latest.values())})]


def dynamic_batching(results: Results) -> list[str]:
    rows = [r for r in results.csv("h200_infer.csv") if r["mode"] == "serve"]
    latest = newest(rows, lambda r: (r["backend"], r["variant"], r["arrival_rate_rps"]))
    rates = sorted({key[2] for key in latest}) or [100, 1000, 3000]
    lines = []
    for backend in ("torch", "jax"):
        for offered in rates:
            cells = [backend, number(offered)]
            for variant in ("dynamic", "batch1"):
                row = latest.get((backend, variant, offered))
                cells.append(f"{number(row['images_per_sec'])}, {row['latency_ms_p50']:,.1f} / "
                             f"{row['latency_ms_p99']:,.1f}" + (f", {row['mean_batch']:.1f}" if variant == "dynamic"
                                                                 else "") if ok(row) else rate(row, "infer-sweep"))
            lines.append(cells)
    header = ["backend", "offered req/s", "dynamic: achieved, p50 / p99 ms, mean batch",
              "batch = 1: achieved, p50 / p99 ms"]
    return table(header, lines, "lrll") + ["", provenance({"h200_infer.csv": list(latest.values())})]


def _newest_record(records: list[Row]) -> Row | None:
    found = newest(records, lambda r: 0)
    return found.get(0)


def _loader_window(split: dict) -> str:
    """Which batches the loader and end-to-end figures time: rows before the steady-state window carry no
    ``timed_batches`` and timed 12 batches right after the first, inside the burst of the workers' first round."""
    if "timed_batches" in split:
        return (f"Loader and end-to-end figures: {split['timed_batches']} batches timed after one round of the "
                "workers' first batches (steady state).")
    return ("Loader and end-to-end figures: 12 batches timed right after the first, while the workers' first "
            "batches arrive together (a burst, not the rate the workers sustain).")


def frames_split(results: Results) -> list[str]:
    split = _newest_record(results.jsonl("h200_data_split.jsonl"))
    peer = _newest_record(results.jsonl("h200_data_peer.jsonl"))
    absent = missing("frames")

    def get(*path: str, digits: int = 1) -> str:
        value = split
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return absent if value is None else f"{value:,.{digits}f}"

    same = "(same batch)"
    lines = [["decode, one core, serial (16 frames)", get("jpeg", "decode_ms_per_batch_1core"),
              get("video", "decode_ms_per_batch_1core")],
             ["DataLoader, host side (JPEG: the loader workers; the video: its one reader in the main process)",
              get("jpeg", "loader_ms_per_batch"), get("video", "loader_ms_per_batch")],
             ["copy: uint8 NHWC from pinned memory", get("copy_ms", "uint8_pinned", digits=2), same],
             ["copy: float32 NCHW from pageable memory", get("copy_ms", "fp32_pageable"), same],
             ["copy: float32 NCHW from pinned memory", get("copy_ms", "fp32_pinned", digits=2), same],
             ["compute: prepare on the GPU + model", get("compute_ms", "prepare_and_model"), same],
             ["compute: model alone, resident input", get("compute_ms", "model"), same],
             ["plain PyTorch loop (`plain_peers/torch_frames.py`, torchvision ResNet-50)",
              number(peer["step_time_ms_median"], 1) if peer else absent, same],
             ["end to end (decode + copy overlapped with compute)", get("jpeg", "end_to_end_ms_per_batch"),
              get("video", "end_to_end_ms_per_batch")],
             ["end to end: of which the main thread waited for the loader",
              get("jpeg", "end_to_end_loader_wait_ms_per_batch"), get("video", "end_to_end_loader_wait_ms_per_batch")]]
    shown = {"h200_data_split.jsonl": [split] if split else [], "h200_data_peer.jsonl": [peer] if peer else []}
    note = (f"Batch {split['batch']} x {split['size']}, {split['precision']}, compiled: {split['compile']}, "
            f"{split['workers']} loader workers. {_loader_window(split)}" if split else "")
    return table(["stage (ms per batch)", "from JPEG files", "from the video"], lines, "lrr") + ["", note,
                                                                                                 provenance(shown)]


def frames_infer(results: Results) -> list[str]:
    rows = [r for r in results.csv("h200_data.csv") if r["mode"] == "infer"]
    latest = newest(rows, lambda r: (r["backend"], r["precision"]))
    lines = []
    for backend in ("torch", "jax"):
        for precision in ("bf16", "fp16"):
            row = latest.get((backend, precision))
            lines.append([backend, precision, rate(row, "frames-infer", "step_time_ms_median", 1),
                          rate(row, "frames-infer"),
                          f"{row['latency_ms_p50']:.1f} / {row['latency_ms_p99']:.1f}" if ok(row) else "—"])
    header = ["backend", "precision", "ms per batch of 16 x 1080 x 1920", "images/s", "latency p50 / p99 ms"]
    return table(header, lines, "llrrr") + ["", provenance({"h200_data.csv": list(latest.values())})]
