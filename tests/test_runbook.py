"""The GPU runbook (benchmarks/gpu.py) on the CPU: its list, one section in SMOKE mode end to end, the
bounded steps, and the freshness of committed rows against a real git history."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from runbook import freshness, sidefile  # noqa: E402
from runbook.sections import SECTIONS, Output, Section  # noqa: E402
from runbook.steps import TIMEOUT_RC, Context, install_wheels, wheels_hint  # noqa: E402

from cnnbench import envinfo  # noqa: E402

GPU_PY = REPO / "benchmarks" / "gpu.py"


def _runbook(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SMOKE"}
    return subprocess.run([sys.executable, str(GPU_PY), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def test_list_names_every_section_with_its_minutes_and_the_state_of_its_rows():
    done = _runbook("--list")
    assert done.returncode == 0, done.stderr[-2000:]
    states = re.compile(r"^(\S+)\s+(\d+)\s+(current \(|stale since [0-9a-f]{12} |no rows$|\d+ rows)", re.MULTILINE)
    found = {m.group(1): int(m.group(2)) for m in states.finditer(done.stdout)}
    assert set(found) == set(SECTIONS)
    assert all(0 < minutes < 9 for minutes in found.values())
    assert "each fits a 10-minute call" in done.stdout


def test_an_unknown_section_is_one_line_and_exit_2():
    done = _runbook("trainng")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"benchmarks/gpu.py: unknown section 'trainng'; sections: {', '.join(SECTIONS)}"]


def test_the_frames_section_in_smoke_mode_writes_its_rows_with_the_commit(tmp_path):
    out = tmp_path / "out"
    committed = (REPO / "results" / "h200_data_split.jsonl").read_bytes()
    done = _runbook("--smoke", "frames", "--out", str(out), "--cache", str(tmp_path / "cache"), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (split,) = sidefile.read(out / "h200_data_split.jsonl")
    assert split["git_sha"] == envinfo.git_sha() and re.fullmatch(r"[0-9a-f]{12}(-dirty)?", split["git_sha"])
    assert split["batch"] == 4 and split["compute_ms"]["model"] > 0 and split["jpeg"]["end_to_end_ms_per_batch"] > 0
    for source in ("jpeg", "video"):  # the wait for the loader is a part of the end to end, timed in the same loop
        part = split[source]
        assert 0 < part["end_to_end_loader_wait_ms_per_batch"] < part["end_to_end_ms_per_batch"]
    assert "frames peer: skipped (the peer is torchvision's ResNet-50 on a GPU" in done.stdout
    assert "frames: 0 failed, 1 skipped" in done.stdout
    assert f"stamped with commit {split['git_sha']} (CNNBENCH_GIT_SHA overrides)" in done.stdout
    assert (REPO / "results" / "h200_data_split.jsonl").read_bytes() == committed  # --out: results/ untouched


def test_a_step_past_its_limit_is_stopped_with_its_whole_process_group(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False)
    marker = tmp_path / "child.pid"
    begun = time.monotonic()
    step = ctx.run("sleeper", ["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"], limit_s=1)
    assert step is not None and step.rc == TIMEOUT_RC and time.monotonic() - begun < 30
    child = Path(f"/proc/{marker.read_text().strip()}/stat")
    time.sleep(0.5)  # the background sleep went with its parent (gone, or a zombie nobody has reaped yet)
    assert not child.exists() or child.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert ctx.failed == ["sleeper: stopped at its limit of 1 s"]
    assert "== sleeper (limit 1 s)" in ctx.log.read_text()


def test_a_step_that_would_start_past_the_budget_is_skipped_and_said(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False, budget_s=10)
    assert ctx.run("late", ["true"], limit_s=5) is None
    assert ctx.skipped == ["late: section budget of 10 s spent"]


def test_a_group_starts_only_when_the_budget_left_covers_the_longest_group_so_far(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False, budget_s=3)
    ran = []
    ctx.run_group("first", ("first cnnbench", "first peer"), lambda: (time.sleep(2), ran.append("first")))
    ctx.run_group("second", ("second cnnbench", "second peer"), lambda: ran.append("second"))
    assert ran == ["first"]  # 2 s taken, about 1 s left: neither half of the second pair starts
    assert len(ctx.skipped) == 1 and ctx.skipped[0].startswith("second: a group of this section took up to 2 s")
    assert ctx.skipped[0].endswith("rerun it alone: benchmarks/gpu.py t --only 'second'")
    roomy = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False, budget_s=60)
    roomy.run_group("first", ("first cnnbench",), lambda: time.sleep(0.2))
    roomy.run_group("second", ("second cnnbench",), lambda: ran.append("roomy second"))
    assert ran[-1] == "roomy second" and roomy.skipped == []


def test_a_group_left_out_by_only_is_not_timed_nor_skipped_for_the_budget(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False, budget_s=3,
                  only=("third",))
    ctx.run_group("first", ("first cnnbench",), lambda: time.sleep(2))
    assert ctx.group_s == [] and ctx.skipped == []
    ctx.run_group("third", ("third cnnbench",), lambda: None)
    assert len(ctx.group_s) == 1 and ctx.matched == {"third"}


def test_only_runs_the_named_steps_and_the_ones_they_need(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False, only=("b1024",))
    assert ctx.run("jax_b512", ["true"], limit_s=5) is None
    assert ctx.run("samples data", ["true"], limit_s=5, needed=True).ok
    assert ctx.run("jax_b1024", ["true"], limit_s=5).ok
    assert ctx.skipped == ["jax_b512: not asked for (--only)"] and ctx.matched == {"b1024"}


def test_only_in_a_smoke_section_writes_just_that_steps_rows_and_a_text_that_matches_nothing_fails(tmp_path):
    out = tmp_path / "out"
    done = _runbook("--smoke", "input-prep", "--out", str(out), "--cache", str(tmp_path / "cache"),
                    "--only", "jax prepare", "--only", "jax_b1O24", timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "decode speed, one core: skipped (not asked for (--only))" in done.stdout
    assert "benchmarks/gpu.py: --only 'jax_b1O24' matched no step of input-prep" in done.stdout
    assert not (out / "h200_decode.jsonl").exists()
    impls = {row["impl"] for row in sidefile.read(out / "h200_prepare_speed.jsonl")}
    assert impls and all(impl.startswith("jax") for impl in impls)


def test_a_missing_module_without_carried_wheels_names_the_pip_command(tmp_path):
    ctx = Context("t", tmp_path / "out", tmp_path / "cache", tmp_path / "logs", smoke=False)
    assert install_wheels(ctx, ["json", "no_such_module_for_the_runbook"]) == ["no_such_module_for_the_runbook"]
    assert "pip install --no-index --find-links .whl -r benchmarks/gpu_wheels.txt" in wheels_hint()


def _git(repo, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def test_rows_are_current_until_a_dependency_changes(tmp_path):
    repo = tmp_path / "repo"
    (repo / "code").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "code" / "a.py").write_text("x = 1\n")
    (repo / "other.py").write_text("y = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    made = _git(repo, "rev-parse", "--short=12", "HEAD")
    results = tmp_path / "results"
    section = Section("s", 1, "", lambda ctx: None, ("code",), (Output("rows.jsonl"),))
    assert freshness.status(section, results, repo) == "no rows"
    results.mkdir()
    (results / "rows.jsonl").write_text(json.dumps({"v": 1, "git_sha": made, "timestamp_utc": "2026-01-01T00:00:00Z"})
                                        + "\n")
    assert freshness.status(section, results, repo) == f"current (1 rows, newest of {made}, 2026-01-01)"
    (repo / "other.py").write_text("y = 2\n")
    _git(repo, "commit", "-qam", "not a dependency")
    assert freshness.status(section, results, repo).startswith("current")
    (repo / "code" / "a.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "changes the code")
    change = _git(repo, "rev-parse", "HEAD")
    assert freshness.status(section, results, repo) == (f"stale since {change[:12]} changes the code "
                                                        f"(newest row of {made}, 2026-01-01)")
    with (results / "rows.jsonl").open("a") as handle:  # a newer row made by the new code
        handle.write(json.dumps({"v": 2, "git_sha": change[:12] + "-dirty", "timestamp_utc": "2026-01-02T00:00:00Z",
                                 "device_name": "NVIDIA H200"}) + "\n")
    assert freshness.status(section, results, repo) == (f"current (2 rows, newest of {change[:12]} with "
                                                        f"uncommitted changes, 2026-01-02, H200)")


def test_a_serving_engine_change_leaves_training_and_inference_rows_current(tmp_path):
    """The backends' serve.py makes only the serving rows; cnnbench/serve is a dependency of every serving
    section (the real sections' pathspecs, against a scratch history: a section goes stale exactly when
    the newest commit touching its dependencies is no longer the one its rows were made by)."""
    repo = tmp_path / "repo"
    for path in ("backends/torch/serve.py", "backends/torch/train.py", "cnnbench/serve/app.py"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    made = _git(repo, "rev-parse", "HEAD")
    names = ("training", "serving", "serving-frames")

    def stale(name: str) -> bool:
        return freshness.last_change(SECTIONS[name].deps, repo)[0] != made

    assert not any(stale(name) for name in names)
    for path, want in (("backends/torch/serve.py", (False, True, True)), ("cnnbench/serve/app.py", (False, True, True)),
                       ("backends/torch/train.py", (True, True, True))):
        (repo / path).write_text((repo / path).read_text() + "x += 1\n")
        _git(repo, "commit", "-qam", f"change {path}")
        assert tuple(stale(name) for name in names) == want, path
        _git(repo, "reset", "-q", "--hard", made)
