"""Every result table of the docs, generated from the committed rows under results/: the GPU tables of
docs/results.md and the CPU measurements that the topic pages cite.

    python benchmarks/tables.py            rewrite the generated blocks of every page in PAGES
    python benchmarks/tables.py --check    exit 1, naming them, where a page differs from the rows

Each table sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``; edit the text around the
blocks, never inside (the next run overwrites it). A cell without rows names the runbook section that
makes them (``benchmarks/gpu.py SECTION``); `--results DIR` reads rows from elsewhere, `--page FILE` does one
page (the tables of the page of that file name in docs/).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_tables import cpu, data, health, inference, serving, summary, training  # noqa: E402
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
    "serving-frames": serving.frames,
    "serving-peers": serving.peers,
    "serving-gil": serving.gil,
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
    "mixed-orientation": cpu.mixed_orientation,
    "batcher-gil": cpu.batcher_gil,
    "load-client": cpu.load_client,
}
# Which page holds which tables (each table in one page; every page holds all of its tables).
CPU_PAGES = {"real-input.md": {"mixed-orientation"}, "serving.md": {"batcher-gil", "load-client"}}
PAGES = {"results.md": set(TABLES) - set().union(*CPU_PAGES.values()), **CPU_PAGES}
PAGE = ROOT / "docs" / "results.md"


def generate(page: str, results: Path, name: str = "results.md") -> str:
    """PAGE (the text of docs/NAME) with its generated blocks rebuilt from the rows in RESULTS."""
    rows = Results(results)
    return render(page, lambda table: "\n".join(TABLES[table](rows)) + "\n", PAGES[name])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/tables.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 where the page is out of date")
    parser.add_argument("--page", type=Path, help="one page (default: every page of PAGES under docs/)")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    paths = [args.page] if args.page else [ROOT / "docs" / name for name in PAGES]
    worst = 0
    for path in paths:
        if path.name not in PAGES:
            print(f"{path}: no generated tables belong to a page of this name ({', '.join(PAGES)})", file=sys.stderr)
            return 2
        worst = max(worst, _one_page(path, args.results, args.check))
    return worst


def _one_page(path: Path, results: Path, check: bool) -> int:
    page = path.read_text()
    try:
        rendered = generate(page, results, path.name)
    except BlockError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    stale = differing(page, rendered)
    if check:
        if stale:
            print(f"{path}: out of date with the rows: {', '.join(stale)} (python benchmarks/tables.py)",
                  file=sys.stderr)
        return 1 if stale else 0
    path.write_text(rendered)
    print(f"{path}: {len(PAGES[path.name])} tables, {len(stale)} changed" + (f" ({', '.join(stale)})" if stale
                                                                             else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
