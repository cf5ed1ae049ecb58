"""The tables that gather others: the performance targets, parity, and the chart folders."""

from __future__ import annotations

import re

from results_tables import data, inference, training
from results_tables.rows import ROOT, Results, Row, card, missing, newest, number, ok, provenance, table

TRAINING_FILES = ("h200_resnet50.csv", "h200_perf.csv", "h200_options.csv", "h200_data.csv",
                  "h200_model_parallel.csv", "h200_keras.csv")


def _target(label: str, value: float | None, goal: float, section: str, detail: str = "",
            row: Row | None = None) -> list[str]:
    """One target's line; ``row`` is a row of the measurement, whose card the line names (each ratio
    comes from one invocation, on one card)."""
    if value is None:
        return [label, "—", missing(section), f">= {goal:.2f}", ""]
    return [label, card(row), f"{value:.3f}" + (f" ({detail})" if detail else ""), f">= {goal:.2f}",
            "yes" if value >= goal else "no"]


def _best_training(results: Results) -> tuple[Row | None, str]:
    best, source = None, ""
    for name in TRAINING_FILES:
        for row in results.csv(name):
            candidate = (row["mode"] == "train" and ok(row) and row["model"] == "resnet50"
                         and row["precision"] == "bf16" and row["device_type"] == "gpu")
            if candidate and (best is None or row["images_per_sec"] > best["images_per_sec"]):
                best, source = row, name
    return best, source


def targets(results: Results) -> list[str]:
    lines, used = [], []
    for pair, (peer, row) in training.pair_rows(results).items():
        used += [peer, row]
        label, batch, section = training.PAIR_LABELS[pair]
        value = row["images_per_sec"] / peer["images_per_sec"] if ok(row) and peer else None
        lines.append(_target(f"training, cnnbench / plain peer: {label}, batch {batch}", value, 0.97, section,
                             row=row))
    by_input = inference.by_input_rows(results)
    peers = newest(results.jsonl("h200_perf_peers.jsonl"), lambda r: r.get("pair"))
    for backend in ("torch", "jax"):
        section = inference.BACKEND_SECTION[backend]
        resident, uint8 = by_input.get((backend, "resident", 256)), by_input.get((backend, "uint8_pinned", 256))
        peer = peers.get(f"infer-{backend}-b256")
        used.append(peer)
        value = resident["images_per_sec"] / peer["images_per_sec"] if ok(resident) and peer else None
        lines.append(_target(f"inference {backend} b256, resident / plain compiled forward", value, 0.95, section,
                             row=resident))
        value = uint8["images_per_sec"] / resident["images_per_sec"] if ok(resident) and ok(uint8) else None
        lines.append(_target(f"inference {backend} b256, uint8_pinned / resident", value, 0.90, section, row=uint8))
    real, pairs = data.training_rows(results), []
    for backend in ("torch", "jax"):
        files = real.get((backend, "resnet50_imagefolder"))
        synthetic = data.synthetic_of_the_same_call(results, files)
        pairs.append(synthetic)
        value = files["images_per_sec"] / synthetic["images_per_sec"] if ok(files) and ok(synthetic) else None
        wait = f"data wait {100 * files['data_wait_share']:.1f}%" if value and files.get("data_wait_share") else ""
        lines.append(_target(f"training {backend} from JPEG files / synthetic-resident", value, 0.90, "real-input",
                             wait, row=files))
    best, source = _best_training(results)
    if best:
        lines.append(["best ResNet-50 bf16 training on one GPU, img/s", card(best), number(best["images_per_sec"]),
                      "(no target: the best stated)",
                      f"{best['backend']} / {best['strategy']}, batch {best['global_batch']}, `{best['spec_name']}` "
                      f"in `results/{source}`"])
    return table(["target", "card", "measured", "target", "met"], lines, "llrrl") + [
        "", provenance({"h200_perf_peers.jsonl": [p for p in used if p and "pair" in p],
                        "h200_perf.csv": [r for r in used if r and "run_id" in r] + list(by_input.values()),
                        "h200_data.csv": [r for r in [*real.values(), *pairs] if r]})]


def parity(results: Results) -> list[str]:
    records = results.jsonl("parity_cpu.jsonl")
    starts = [i for i, r in enumerate(records) if r.get("kind") == "invocation"]
    if not starts:
        return ["No parity rows yet: `python benchmarks/parity_rows.py`."]
    run = records[starts[-1]:]
    invocation, checks = run[0], [r for r in run if r.get("kind") == "check"]
    by = {(c["model"], c["pair"], c["check"]): c for c in checks}
    lines = []
    for model, pair in dict.fromkeys((c["model"], c["pair"]) for c in checks if c["pair"] != "layout"):
        same = all(by[(model, pair, what)]["value"] == 0 for what in ("params difference", "layers with other shapes"))
        cells = [model, pair, "equal" if same else "DIFFER"]
        for what in ("forward rel L2", "weights after step rel L2", "update rel L2"):
            check = by[(model, pair, what)]
            cells.append(f"{check['value']:.2e} (<= {check['limit']:.0e})" + ("" if check["ok"] else " FAILED"))
        lines.append(cells)
    passed = sum(c["ok"] for c in checks)
    params = newest([r for r in run if r.get("kind") == "params"], lambda r: r["model"])
    counts = ", ".join(f"{model} {number(r['params'])}" for model, r in params.items())
    versions = "; ".join(f"{label}: " + ", ".join(f"{k} {v}" for k, v in found.items())
                         for label, found in invocation["versions"].items())
    header = ["model", "backends", "params / shapes", "forward rel L2", "weights after step rel L2", "update rel L2"]
    return table(header, lines, "lll" + "r" * 3) + [
        "", f"{passed} of {len(checks)} checks pass. Parameter counts at the parity configurations: {counts}. "
            f"Python {invocation['python']}; {versions}.", "", provenance({"parity_cpu.jsonl": run[:1]})]


CHART_TITLES = {
    "results/quickstart": "quickstart (`make run`)",
    "results/digits_scaling": "digits scaling sweep, emulated CPU devices",
    "results/h200": "H200 training, ResNet-50 and ResNet-18",
    "results/h200/h200_infer": "H200 inference: sweep, serving, first ablation",
    "results/h200/h200_ablation": "H200 ablation, interleaved rounds",
    "results/h200_keras": "H200 Keras engines beside the native backends",
    "results/h200_options": "H200 performance options, one at a time",
    "results/h200_model_parallel": "H200 model-parallel schedules",
    "results/model_parallel_cpu": "model parallelism on emulated CPU devices",
}


def charts(_: Results) -> list[str]:
    """The chart folders that benchmarks/charts.sh makes, read from the script itself."""
    found = re.findall(r"^report (\S+) (.+)$", (ROOT / "benchmarks" / "charts.sh").read_text(), re.MULTILINE)
    lines = [[CHART_TITLES.get(folder, folder), f"[`{folder}/index.html`](../{folder}/index.html)",
              ", ".join(f"`{csv.removeprefix('results/')}`" for csv in sources.split())] for folder, sources in found]
    return table(["results set", "page", "made from"], lines, "lll")
