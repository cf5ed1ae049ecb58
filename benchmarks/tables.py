"""Every result table of docs/results.md, generated from the committed rows under results/.

    python benchmarks/tables.py            rewrite the generated blocks of docs/results.md
    python benchmarks/tables.py --check    exit 1, naming them, where the page differs from the rows

Each table sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``; edit the text around the
blocks, never inside (the next run overwrites it). A cell without rows names the runbook section that
makes them (``benchmarks/gpu.py SECTION``); `--results DIR` reads rows from elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_tables import data, health, inference, serving, summary, training  # noqa: E402
from results_tables.blocks import BlockError, differing, render  # noqa: E402
from results_tables.rows import ROOT, Results  # noqa: E402

TABLES: dict[str, Callable[[Results], list[str]]] = {
    "targets": summary.targets,
    "baseline": training.baseline,
    "pairs": training.pairs,
    "options": training.options,
    "ddp-options": training.ddp_options,
    "keras": training.keras,
    "inference-by-input": inference.by_input,
    "infer-sweep": inference.sweep,
    "ablation": inference.ablation,
    "dynamic-batching": inference.dynamic_batching,
    "serving": serving.serving,
    "serving-frontends": serving.frontends,
    "serving-sweep": serving.sweep,
    "model-parallel": training.model_parallel,
    "microbatches": training.microbatches,
    "real-input": data.real_input,
    "decode": data.decode,
    "prepare": data.prepare,
    "frames-split": inference.frames_split,
    "frames-infer": inference.frames_infer,
    "health-training": health.training,
    "health-energy": health.energy,
    "health-known": health.known,
    "health-caches": health.caches,
    "health-layers": health.layers,
    "health-cudnn": health.cudnn,
    "health-loader": health.loader,
    "health-pinned": health.pinned,
    "charts": summary.charts,
    "parity": summary.parity,
}
PAGE = ROOT / "docs" / "results.md"


def generate(page: str, results: Path) -> str:
    rows = Results(results)
    return render(page, lambda name: "\n".join(TABLES[name](rows)) + "\n", set(TABLES))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/tables.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 where the page is out of date")
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    page = args.page.read_text()
    try:
        rendered = generate(page, args.results)
    except BlockError as exc:
        print(f"{args.page}: {exc}", file=sys.stderr)
        return 2
    stale = differing(page, rendered)
    if args.check:
        if stale:
            print(f"{args.page}: out of date with the rows: {', '.join(stale)} (python benchmarks/tables.py)",
                  file=sys.stderr)
        return 1 if stale else 0
    args.page.write_text(rendered)
    print(f"{args.page}: {len(TABLES)} tables, {len(stale)} changed" + (f" ({', '.join(stale)})" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
