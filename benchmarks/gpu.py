"""Every GPU measurement of cnnbench, in named sections of under 9 minutes each on one H200.

    python benchmarks/gpu.py --list                   sections, minutes, whether the committed rows are current
    python benchmarks/gpu.py SECTION [SECTION ...]    run them in order; rows appended under results/
    python benchmarks/gpu.py --smoke SECTION          the same code paths at tiny sizes on a CPU (or SMOKE=1)

Options: --out DIR (rows elsewhere, for trial runs), --cache DIR (the compile caches and sample data that
the sections of one call share; default ~/.cache/cnnbench/runbook, so a later call on the same machine
starts warm), --logs DIR (each section's full output; default CACHE/logs/TIME). Every step runs under
its own timeout inside its section's budget; what is skipped is said, with why. Rows carry the commit
(git_sha); so do the JSON-lines side files. The tables of docs/results.md come from the committed rows:
`python benchmarks/tables.py`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# this checkout's cnnbench (not an installed one: the rows carry this checkout's commit), then runbook/
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from runbook import freshness  # noqa: E402
from runbook.sections import SECTIONS, Section  # noqa: E402
from runbook.steps import ROOT, Context, install_wheels, wheels_hint  # noqa: E402

from cnnbench import envinfo  # noqa: E402
from cnnbench.table import store  # noqa: E402


def show_list(results: Path) -> None:
    width = max(map(len, SECTIONS))
    print(f"{'section':{width}s}  min  committed rows")
    for section in SECTIONS.values():
        print(f"{section.name:{width}s}  {section.minutes:3.0f}  {freshness.status(section, results)}")
        print(f"{'':{width}s}       {section.summary}")
    total = sum(s.minutes for s in SECTIONS.values())
    print(f"\n{len(SECTIONS)} sections, about {total:.0f} minutes in all; each fits a 10-minute call")


def _row_counts(section: Section, results: Path) -> int:
    return sum(len(output.rows(results)) for output in section.outputs)


def upgrade_outputs(section: Section, ctx: Context) -> None:
    """Results files of an older row format are rewritten in the current one before rows are appended
    (cnnbench refuses to append to them; `cnnbench upgrade` does the same)."""
    for output in section.outputs:
        path = ctx.out / output.file
        if path.suffix == ".csv" and path.exists() and store.upgrade_file(path):
            ctx.say(f"{path.name}: rewritten in the current row format (cnnbench upgrade)")


def run_section(section: Section, args: argparse.Namespace) -> Context:
    ctx = Context(section.name, args.out, args.cache, args.logs, args.smoke, only=tuple(args.only))
    upgrade_outputs(section, ctx)
    before = _row_counts(section, args.out)
    ctx.say(f"{section.summary} (expected {section.minutes:.0f} min{', SMOKE' if args.smoke else ''})")
    missing = install_wheels(ctx, section.needs) if section.needs else []
    if missing:
        ctx.skip("the whole section", f"{', '.join(missing)} not installed: {wheels_hint()}")
    else:
        section.run(ctx)
    minutes = (time.monotonic() - ctx.begun) / 60
    ctx.say(f"done in {minutes:.1f} min: {_row_counts(section, args.out) - before} rows into {args.out}")
    return ctx


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/gpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=", ".join(SECTIONS))
    parser.add_argument("--list", action="store_true", help="the sections and the state of their committed rows")
    parser.add_argument("--smoke", action="store_true", default=os.environ.get("SMOKE") == "1",
                        help="tiny sizes on the CPU (also SMOKE=1)")
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="results folder (default results/)")
    parser.add_argument("--cache", type=Path, help="compile caches and sample data shared by the sections")
    parser.add_argument("--logs", type=Path, help="the sections' full output")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="run only the steps whose name contains TEXT (repeatable; the wheel and sample-data "
                             "steps always run): one cell of a section when a call has little time")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.exit(2, f"benchmarks/gpu.py: unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}\n")
    if not args.sections and not args.list:
        parser.exit(2, "benchmarks/gpu.py: name one or more sections, or --list\n")
    default_cache = Path.home() / ".cache" / "cnnbench" / ("runbook-smoke" if args.smoke else "runbook")
    # Every step runs in the repository root; a results folder inside it is named relative to it, so that
    # the commands and "appended to" lines kept in the committed logs hold no host's own paths.
    args.out = args.out.resolve()  # against the caller's folder, before moving to the root
    os.chdir(ROOT)
    if args.out.is_relative_to(ROOT):
        args.out = args.out.relative_to(ROOT)
    args.cache = (args.cache or default_cache).resolve()
    args.logs = (args.logs or args.cache / "logs" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.list:
        show_list(args.out)
        if not args.sections:
            return 0
    sha = envinfo.git_sha()
    if not sha:
        print("warning: no git checkout here: the rows will carry no commit", flush=True)
    # said up front: a copied tree whose git metadata lags the files would stamp the wrong commit, and
    # CNNBENCH_GIT_SHA is how the caller names the right one
    print(f"rows into {args.out}, stamped with commit {sha or 'none'} (CNNBENCH_GIT_SHA overrides); compile "
          f"caches and sample data in {args.cache}; logs in {args.logs}", flush=True)
    done = [run_section(SECTIONS[name], args) for name in args.sections]
    print("\nsummary")
    for ctx in done:
        print(f"  {ctx.section}: {len(ctx.failed)} failed, {len(ctx.skipped)} skipped")
        for line in ctx.failed:
            print(f"    failed: {line}")
        for line in ctx.skipped:
            print(f"    skipped: {line}")
    unmatched = [text for text in args.only if not any(text in ctx.matched for ctx in done)]
    for text in unmatched:
        print(f"benchmarks/gpu.py: --only {text!r} matched no step of {', '.join(args.sections)}", flush=True)
    return 1 if unmatched or any(ctx.failed for ctx in done) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
