"""The multi-process server (front-end processes feeding one engine process through a shared-memory
ring) on the framework-free engine: right answers across front ends, and every way it can stop: SIGTERM
drains, a killed front end is restarted while the others serve, a dead engine gives 503 and a non-zero
exit, Ctrl-C stops the group; the ring leaves /dev/shm each time. Servers are real subprocesses on
127.0.0.1, stopped by pid; every wait is bounded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import REPO
from numpy_serve_engine import SHAPE, expected_answer
from test_http_serve import Server, _free_port, _images, _metric, _raw

from cnnbench.serve.ring import segment_names


def frontend_server(compute_ms: float, frontends: int = 2, max_batch: int = 4, env: dict[str, str] | None = None,
                    new_session: bool = False) -> Server:
    port = _free_port()
    command = [sys.executable, str(REPO / "tests" / "numpy_serve_engine.py"), str(port), str(compute_ms),
               str(max_batch), "64", "5", "dynamic", "auto", str(frontends)]
    server = Server(command, port, env)
    if new_session:  # its own process group, as a terminal's foreground job is
        server.process.kill()
        server.process.wait()
        server.process = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True)
    return server.wait_ready()


def frontend_pids(base: str, tries: int = 40) -> set[int]:
    """The front ends' pids, from /v1/info over fresh connections (the kernel spreads them)."""
    return {httpx.get(base + "/v1/info", timeout=5).json()["frontend"]["pid"] for _ in range(tries)}


def assert_ring_removed(server: Server) -> None:
    assert segment_names(server.process.pid) == [], segment_names(server.process.pid)


def test_every_answer_is_right_across_front_ends_and_requests_share_batches():
    # the engine process, and only it, takes the GIL switch interval of the config (it says so itself)
    server = frontend_server(compute_ms=20, frontends=2, env={"NUMPY_ENGINE_SERVE": '{"switch_interval_ms": 0.25}'})
    try:
        assert segment_names(server.process.pid)  # the ring exists while it serves
        assert len(frontend_pids(server.base)) == 2
        images = _images(48, SHAPE, seed=11)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda image: _raw(httpx, server.base, image), images))
        assert [a.json()["classes"] for a in answers] == [expected_answer(i) for i in images]
        batches = _metric(server.base, "cnnbench_batch_size_count")
        assert 0 < batches < 48  # server-wide, read from the ring by whichever front end answers
        assert _metric(server.base, 'cnnbench_requests_total{status="200"}') == 48
        # the engine process's time, written into the ring after each batch: its launcher at 20 ms a batch
        # (NumpyEngine's launch returns at once: little launching, the rest idle) and its own CPU
        launches = _metric(server.base, "cnnbench_launches_total")
        assert launches >= batches and _metric(server.base, "cnnbench_engine_process_cpu_seconds_total") > 0
        idle = sum(_metric(server.base, f'cnnbench_launcher_seconds_total{{state="{state}"}}')
                   for state in ("no_request", "filling", "device_full"))
        assert idle > _metric(server.base, 'cnnbench_launcher_seconds_total{state="launching"}') >= 0
        info = httpx.get(server.base + "/v1/info").json()
        assert "frontends=2" in info["row"]["backend_options"]
        assert "switch_interval_ms=0.25" in info["row"]["backend_options"]
        assert info["row"]["device_name"] == "numpy"  # the engine's card, read from the ring: rows name it
    finally:
        assert server.stop() == 0
    assert_ring_removed(server)
    said = re.findall(r"cnnbench serve: (.*): GIL switch interval (.*) ms", server.process.stdout.read())
    assert said == [("engine process", "0.25")], said


def test_sigterm_answers_everything_in_progress_then_exits_0_and_removes_the_ring():
    server = frontend_server(compute_ms=300, frontends=2, max_batch=2)
    images = _images(6, SHAPE, seed=12)
    with ThreadPoolExecutor(6) as pool:
        pending = [pool.submit(_raw, httpx, server.base, image) for image in images]
        deadline = time.monotonic() + 10
        while _metric(server.base, "cnnbench_queue_depth") < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(server.process.pid, signal.SIGTERM)
        answers = [p.result(timeout=30) for p in pending]
    assert [a.json()["classes"] for a in answers] == [expected_answer(i) for i in images]
    assert server.process.wait(timeout=30) == 0
    assert_ring_removed(server)
    # the log says where the stop spent its time, and every process's exit code
    assert re.search(r"stopped: front ends in [\d.]+ s \(exit codes 0, 0\), engine drained in [\d.]+ s "
                     r"\(exit code 0\)", server.process.stdout.read())


@pytest.mark.parametrize("frontends", [2, 0])
def test_a_drained_server_exits_0_at_once_whatever_a_framework_leaves_for_exit(frontends):
    # the engine's builder registers an exit handler that never returns, as PyTorch's compile-worker pool
    # can after a cold compile; the old engine process sat in it until the supervisor killed it (exit 1)
    server = frontend_server(compute_ms=5, frontends=frontends, env={"CNNBENCH_FAULT": "kind=hold_exit"})
    image = _images(1, SHAPE, seed=16)[0]
    assert _raw(httpx, server.base, image).json()["classes"] == expected_answer(image)
    began = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - began < 20  # Server.stop waits 30 s, then SIGKILLs (exit -9)
    if frontends:
        assert "engine drained" in (log := server.process.stdout.read()) and "(exit code 0)" in log, log
        assert re.search(r"engine: stop taken, draining \d+ waiting requests\n(.*\n)*.*engine: drained in [\d.]+ s",
                         log), log  # the engine's own two lines, in order
        assert_ring_removed(server)


def test_stacks_on_demand_and_an_engine_held_past_the_stop_bound_says_where_then_is_killed():
    # the first compiled engine of a 1080p GPU run was held after its work until SIGKILL, and said nothing
    server = frontend_server(compute_ms=5, frontends=2, env={"CNNBENCH_FAULT": "kind=hold_drain",
                                                              "NUMPY_ENGINE_SERVE": '{"stop_timeout_s": 2}'})
    images = _images(2, SHAPE, seed=17)
    assert _raw(httpx, server.base, images[0]).json()["classes"] == expected_answer(images[0])
    for pid in (min(frontend_pids(server.base)), server.process.pid):  # any server process, on demand: it goes on
        os.kill(pid, signal.SIGUSR2)
    assert _raw(httpx, server.base, images[1]).json()["classes"] == expected_answer(images[1])
    began = time.monotonic()
    assert server.stop() == 1
    assert time.monotonic() - began < 20  # 2 s bound + 2 s for the stacks, not the default 60 s
    log = server.process.stdout.read()
    assert "cnnbench-engine (pid" in log and "still running 2 s after its stop signal" in log, log
    # the engine took its stop and was held in the drain: its first line came, its second did not
    assert "engine: stop taken, draining 0 waiting requests" in log and "engine: drained in" not in log, log
    # the held thread's stack names the function that holds it; the front end's dump came before
    assert re.search(r'File ".*faults\.py", line \d+ in hold_drain', log), log
    assert re.search(r'frontend\.py", line \d+ in frontend_main', log), log  # a front end's main thread
    assert re.search(r'frontends\.py", line \d+ in run', log), log  # the supervisor's
    # then py-spy's (a dev dependency) native dump of the held engine: the same function, below it the C frames
    assert "native stacks of pid" in log, log
    assert re.search(r"hold_drain \(.*faults\.py:\d+\)", log), log
    assert "engine drained" in log and "(exit code -9)" in log, log
    assert_ring_removed(server)


def test_a_killed_front_end_is_restarted_and_the_others_keep_serving():
    server = frontend_server(compute_ms=5, frontends=2)
    try:
        before = frontend_pids(server.base)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        images = _images(20, SHAPE, seed=13)
        answers = [_raw(httpx, server.base, image) for image in images]  # fresh connections, served by the other
        assert [a.json()["classes"] for a in answers] == [expected_answer(i) for i in images]
        deadline, now = time.monotonic() + 30, before
        while time.monotonic() < deadline and (victim in now or len(now) < 2):
            time.sleep(0.3)
            now = frontend_pids(server.base, tries=20)
        assert victim not in now and len(now) == 2 and len(now & before) == 1  # one new, one untouched
    finally:
        assert server.stop() == 0
    assert "died (exit code -9); restarting it" in server.process.stdout.read()
    assert_ring_removed(server)


def test_a_dead_engine_gives_503_and_the_server_exits_non_zero():
    server = frontend_server(compute_ms=5, frontends=2, max_batch=1, env={"CNNBENCH_FAULT": "step=1,kind=kill"})
    images = _images(2, SHAPE, seed=14)
    first = _raw(httpx, server.base, images[0])
    assert first.json()["classes"] == expected_answer(images[0])
    second = _raw(httpx, server.base, images[1])  # its batch kills the engine
    assert second.status_code == 503 and "engine process has stopped" in second.json()["error"]
    assert server.process.wait(timeout=60) == 1
    assert "the engine process stopped" in server.process.stdout.read()
    assert_ring_removed(server)


def test_sigterm_to_the_process_group_stops_every_front_end_with_exit_0():
    # a service manager's stop (systemd's control-group SIGTERM, the runbook's killpg) reaches each front end
    # from the sender and again from the supervisor; front end 0 takes 1.5 s to exit after its server has
    # stopped, so the second SIGTERM finds it stopped: it used to die by it (exit code -15, server exit 1)
    server = frontend_server(compute_ms=5, frontends=2, new_session=True,
                             env={"CNNBENCH_FAULT": "rank=0,kind=slow_exit,ms=1500"})
    image = _images(1, SHAPE, seed=17)[0]
    assert _raw(httpx, server.base, image).json()["classes"] == expected_answer(image)
    os.killpg(server.process.pid, signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    assert "(exit codes 0, 0), engine drained" in (log := server.process.stdout.read()), log
    assert_ring_removed(server)


@pytest.mark.parametrize("slow_start", [False, True], ids=["started", "one-front-end-still-starting"])
def test_ctrl_c_to_the_process_group_stops_cleanly(slow_start):
    # still starting: front end 1 has no handlers of its own yet when Ctrl-C and the supervisor's SIGTERM
    # come (as on a busy host, where a front end's imports outlast the engine's start); served by front end 0
    env = {"CNNBENCH_FAULT": "rank=1,kind=slow_start,ms=6000"} if slow_start else None
    server = frontend_server(compute_ms=5, frontends=2, new_session=True, env=env)
    image = _images(1, SHAPE, seed=15)[0]
    assert _raw(httpx, server.base, image).json()["classes"] == expected_answer(image)
    if slow_start:
        assert len(frontend_pids(server.base, tries=8)) == 1  # front end 1 is not listening yet
    os.killpg(server.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert server.process.wait(timeout=60) == 0
    assert_ring_removed(server)
    deadline, left = time.monotonic() + 10, "?"
    while left and time.monotonic() < deadline:  # Python's resource tracker exits last, on its own
        left = subprocess.run(["pgrep", "-g", str(server.process.pid)], capture_output=True, text=True).stdout.strip()
        time.sleep(0.1)
    assert left == ""
