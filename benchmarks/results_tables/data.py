"""Real-input tables: training from JPEG files beside synthetic-resident, decoders on one core, prepare."""

from __future__ import annotations

from results_tables.rows import (
    NO_TF_GPU,
    Results,
    Row,
    card,
    missing,
    newest,
    number,
    ok,
    provenance,
    rate,
    share,
    table,
)

CONFIGS = (  # (backend, strategy, spec name, input, decode)
    ("torch", "ddp", "resnet50_synthetic", "synthetic (resident)", "-"),
    ("torch", "ddp", "resnet50_imagefolder", "JPEG files, DataLoader workers", "CPU (simplejpeg)"),
    ("torch", "ddp", "resnet50_imagefolder_gpu_decode", "JPEG files, DataLoader workers", "GPU (nvJPEG)"),
    ("jax", "sharded", "resnet50_synthetic", "synthetic (resident)", "-"),
    ("jax", "sharded", "resnet50_imagefolder", "JPEG files, grain workers", "CPU (simplejpeg)"),
)


def training_rows(results: Results) -> dict[tuple, Row]:
    return newest(_trained(results), lambda r: (r["backend"], r["spec_name"]))


def _trained(results: Results) -> list[Row]:
    return [r for r in results.csv("h200_data.csv") if r["mode"] == "train"]


def synthetic_of_the_same_call(results: Results, row: Row | None) -> Row | None:
    """The newest synthetic-resident row of ROW's backend made by the same commit on the same card, i.e.
    by the same runbook call: a ratio against another card's or another call's row would mix the spread
    between machines into it."""
    if row is None:
        return None
    same = [r for r in _trained(results) if r["spec_name"] == "resnet50_synthetic" and r["backend"] == row["backend"]
            and r.get("git_sha") == row.get("git_sha") and r.get("device_name") == row.get("device_name")]
    return newest(same, lambda r: 0).get(0)


def real_input(results: Results) -> list[str]:
    latest = training_rows(results)
    lines, shown = [], list(latest.values())
    for backend, strategy, spec, source, decode in CONFIGS:
        row = latest.get((backend, spec))
        synthetic = row if spec == "resnet50_synthetic" else synthetic_of_the_same_call(results, row)
        shown.append(synthetic)
        versus = (f"{row['images_per_sec'] / synthetic['images_per_sec']:.1%}" if ok(row) and ok(synthetic) else "—")
        lines.append([f"{backend} / {strategy}", source, decode, card(row) if row else "—", rate(row, "real-input"),
                      versus, number(row.get("data_wait_ms_median"), 2) if ok(row) else "—",
                      share(row.get("data_wait_share")) if ok(row) else "—"])
    lines.append(["tensorflow / mirrored", "JPEG files, tf.data", "CPU", "—", NO_TF_GPU, "", "", ""])
    header = ["backend", "input", "decode", "card", "images/s", "vs. synthetic-resident of the same call",
              "data_wait_ms_median", "data_wait_share"]
    # provenance names each commit, day and card once, so a row listed twice is harmless
    return table(header, lines, "llll" + "r" * 4) + ["", provenance({"h200_data.csv": [r for r in shown if r]})]


def decode(results: Results) -> list[str]:
    found = newest(results.jsonl("h200_decode.jsonl"), lambda r: 0).get(0)
    if not found:
        return table(["decoder (one core)", "1080x1920 img/s", "375x500 img/s"],
                     [[missing("input-prep"), "", ""]]) + ["", provenance({})]
    lines = [[name, number(rates.get("1080x1920")), number(rates.get("375x500"))]
             for name, rates in found["images_per_sec"].items()]
    return table(["decoder (one core of the GPU host)", "1080x1920 img/s", "375x500 img/s"], lines) + [
        "", provenance({"h200_decode.jsonl": [found]})]


CASES = {"train_rrc_224_bf16": "training: random resized crop to 224, flip, bf16",
         "eval_center_224_bf16": "evaluation: centre crop to 224, bf16",
         "frames_1080p_fp16": "1080p frames: whole frame (fast path), fp16"}
IMPLS = ("torch eager", "torch compiled", "jax jit")


def prepare(results: Results) -> list[str]:
    records = [r for r in results.jsonl("h200_prepare_speed.jsonl") if r.get("device") == "gpu"]
    latest = newest(records, lambda r: (r["case"], r["impl"]))
    lines = []
    for case, label in CASES.items():
        shape = next((r["input"] for (c, _), r in latest.items() if c == case), "")
        cells = []
        for impl in IMPLS:
            row = latest.get((case, impl))
            cells.append(missing("input-prep") if row is None else f"{row['ms_per_batch']:.3g}")
        lines.append([label, shape.replace("x", " x ", 1), *cells])
    header = ["case (ms per batch)", "input batch", "PyTorch eager", "PyTorch compiled", "JAX"]
    return table(header, lines, "llrrr") + ["", provenance({"h200_prepare_speed.jsonl": list(latest.values())})]
