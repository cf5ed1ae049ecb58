"""`cnnbench parity`'s checks as rows: every check of every installed backend pair (and each model's
parameter count per participant) appended to a JSON-lines file with the commit and the framework
versions, for the parity table of docs/results.md (`python benchmarks/tables.py`).

python benchmarks/parity_rows.py [--out results/parity_cpu.jsonl] [--model M ...] [--backends a,b]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from runbook import sidefile  # noqa: E402

from cnnbench import envinfo  # noqa: E402
from cnnbench.model.facts import MODELS  # noqa: E402
from cnnbench.parity.check import PARITY_CONFIGS, installed_backends, participants, run_parity  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "parity_cpu.jsonl")
    parser.add_argument("--model", action="append", choices=sorted(MODELS))
    parser.add_argument("--backends", help="comma-separated; default every installed backend")
    args = parser.parse_args()
    envinfo.git_sha()  # the commit as the run starts (cached): edits made while it runs are not its code
    backends = args.backends.split(",") if args.backends else installed_backends()
    models = args.model or list(PARITY_CONFIGS)
    result = run_parity(models, backends)
    versions = {label: envinfo.backend_versions(backend, strategy)
                for label, backend, strategy in participants(backends)}
    records: list[dict] = [{"kind": "invocation", "versions": versions, "host": envinfo.host_name(),
                            "python": envinfo.python_version()}]
    records += [{"kind": "check", "model": c.model, "pair": c.pair, "check": c.what, "value": c.value,
                 "limit": c.limit, "ok": c.ok} for c in result.checks]
    records += [{"kind": "params", "model": model, "participant": label, "params": count}
                for model, counts in result.params.items() for label, count in counts.items()]
    sidefile.append(args.out, records)
    print(f"{args.out}: {len(result.checks) - len(result.failed)} of {len(result.checks)} checks passed")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
