"""docs/results.md's tables are what the committed rows give (benchmarks/tables.py), and only that."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import tables  # noqa: E402
from results_tables.blocks import BLOCK, names  # noqa: E402

from cnnbench.table import store  # noqa: E402

PAGE = REPO / "docs" / "results.md"


def _tables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "tables.py"), *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def test_every_committed_block_is_what_the_committed_rows_give():
    placed = []
    for name in tables.PAGES:  # results.md and the topic pages that cite CPU measurements
        page = (REPO / "docs" / name).read_text()
        rendered = tables.generate(page, REPO / "results", name)
        stale = [m.group("name") for m in BLOCK.finditer(page)
                 if m.group(0) not in rendered]
        assert not stale, f"{name} out of date with the rows: {stale}; run python benchmarks/tables.py"
        assert rendered == page
        placed += names(page)
    assert sorted(placed) == sorted(tables.TABLES)  # every table on exactly one page


def test_a_page_that_holds_no_tables_is_refused_with_one_line(tmp_path):
    page = tmp_path / "notes.md"
    page.write_text("# notes\n")
    done = _tables("--check", "--page", str(page))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "no generated tables belong to a page of this name" in done.stderr


def test_the_page_has_no_placeholder_left():
    page = PAGE.read_text()
    assert "TBD" not in page
    for match in BLOCK.finditer(page):  # every missing cell names the section that makes it
        for cell in match.group("body").split("|"):
            if "not measured yet" in cell:
                assert cell.strip().startswith("not measured yet: `benchmarks/gpu.py "), cell


def test_check_fails_and_names_the_table_when_a_newer_row_differs(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    page = tmp_path / "results.md"
    shutil.copy(PAGE, page)
    assert _tables("--check", "--page", str(page), "--results", str(results)).returncode == 0
    store.upgrade_file(results / "h200_keras.csv")  # as benchmarks/gpu.py does before it appends
    rows = store.read_rows(results / "h200_keras.csv")
    newer = {**next(r for r in rows if r["strategy"] == "keras-jax"), "run_id": "newer", "images_per_sec": 1234.5,
             "timestamp_utc": "2099-01-01T00:00:00+00:00"}
    store.append_rows(results / "h200_keras.csv", [newer])
    done = _tables("--check", "--page", str(page), "--results", str(results))
    assert done.returncode == 1
    assert done.stderr.strip() == f"{page}: out of date with the rows: keras (python benchmarks/tables.py)"
    assert _tables("--page", str(page), "--results", str(results)).returncode == 0
    assert "| keras / keras-jax | 3.15.1 (jax 0.11.2) | 1,234 |" in page.read_text()
    assert _tables("--check", "--page", str(page), "--results", str(results)).returncode == 0


def test_cells_without_rows_name_their_section_and_a_peer_is_paired_with_its_run(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    page = tmp_path / "results.md"
    shutil.copy(PAGE, page)
    assert _tables("--page", str(page), "--results", str(results)).returncode == 0
    text = page.read_text()
    assert "| JAX sharded | 512 | — | not measured yet: `benchmarks/gpu.py training-jax` |" in text
    assert "| 1 | not measured yet: `benchmarks/gpu.py inference-torch` |" in text
    assert "not measurable on the GPU host: TensorFlow's CUDA wheels" in text
    perf = store.read_rows(REPO / "results" / "h200_perf.csv")
    row = {**next(r for r in perf if r["spec_name"] == "compare_step"), "spec_name": "compare_jax-b512",
           "run_id": "b512run", "images_per_sec": 7000.0, "global_batch": 512, "device_name": "NVIDIA H100 80GB HBM3"}
    store.append_rows(results / "h200_perf.csv", [row])
    peer = {"pair": "jax-b512", "images_per_sec": 7400.0, "first_step_s": 19.0, "cnnbench_run_id": "b512run",
            "git_sha": "abc", "timestamp_utc": "2099-01-01T00:00:00Z"}
    (results / "h200_perf_peers.jsonl").write_text(json.dumps(peer) + "\n")
    assert _tables("--page", str(page), "--results", str(results)).returncode == 0
    text = page.read_text()
    # each figure names the card of its invocation (a section may run on an H100 as well as the H200)
    assert "| JAX sharded | 512 | H100 | 7,400 | 7,000 | 0.946 |" in text
    assert "| training, cnnbench / plain peer: JAX sharded, batch 512 | H100 | 0.946 | >= 0.97 | no |" in text


def test_a_block_without_a_generator_is_refused_with_one_line(tmp_path):
    page = tmp_path / "results.md"
    page.write_text(PAGE.read_text() + "\n<!-- table:no-such -->\n<!-- /table:no-such -->\n")
    done = _tables("--check", "--page", str(page))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "no generator for table 'no-such'" in done.stderr


def test_the_low_rate_p99_is_shown_against_its_target_from_the_engine_of_the_same_invocation(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    pipeline = results / "h200_serve_frontends" / "pipeline.jsonl"
    lines = [json.loads(line) for line in pipeline.read_text().splitlines()]
    newest_jax = [item for item in lines if item["backend"] == "jax"][-1]  # a later copy of it wins, as a rerun would
    jax = {**newest_jax, "small_batch_ms": 3.25, "pad_multiple": 8, "timeout_ms": 5.0}
    pipeline.write_text(pipeline.read_text() + json.dumps(jax) + "\n")
    page = tables.generate(PAGE.read_text(), results)
    block = next(m.group("body") for m in BLOCK.finditer(page) if m.group("name") == "serving-frontends")
    row = next(line for line in block.splitlines() if line.startswith("| 4 front ends, raw, 100 req/s"))
    torch_cell, jax_cell = row.split("|")[2:4]
    assert jax_cell.strip().endswith("(target 13.2)")  # 5 ms deadline + 3.25 ms + 5 ms
    assert "target" not in torch_cell  # no batch of 8 measured for it: no target claimed


def test_one_batch_alone_is_timed_launch_to_answer():
    sys.path.insert(0, str(REPO / "tests"))
    from numpy_serve_engine import NumpyEngine
    from serve_pipeline import one_batch_ms

    engine = NumpyEngine(compute_ms=20)
    engine.staging_buffers(1, 8)
    assert 20 <= one_batch_ms(engine, 8, repeats=5) < 40


def test_health_tables_come_from_the_health_known_folder_and_say_which_check_failed(tmp_path):
    from results_tables import health
    from results_tables.rows import Results

    folder = tmp_path / "h200_health"
    folder.mkdir()
    checks = [{"probe": "known", "framework": "jax", "case": "sleep", "metric": "gpu_busy", "value": 0.41,
               "expected": "0.5024 +- 0.03", "ok": False, "device_name": "NVIDIA H200"},
              {"probe": "known", "framework": "jax", "case": "all", "passed": 0, "of": 1}]  # a summary: not a row
    (folder / "known.jsonl").write_text("".join(json.dumps(c) + "\n" for c in checks))
    known = "\n".join(health.known(Results(tmp_path)))
    assert "| jax | sleep | gpu_busy | H200 | 0.41 | 0.5024 +- 0.03 | NO |" in known
    assert known.count("| jax |") == 1
    row = {**store.read_rows(REPO / "results" / "h200_health" / "health_rows.csv")[0], "energy_j_per_image": 0.125,
           "mean_power_w": 600.0, "images_per_sec": 4800.0}
    store.append_rows(folder / "health_rows.csv", [row])
    energy = "\n".join(health.energy(Results(tmp_path)))
    assert "| train | torch/ddp | 256 | 4,800 | 0.1250 | 8.0 | 600 |" in energy  # images per joule = 1 / J
    assert "| 4,800 |" in "\n".join(health.training(Results(tmp_path)))  # the same folder's profiled row


def test_wrk_rows_count_200s_and_older_rows_are_scaled_by_their_200_share():
    from results_tables.serving import answered_200, refused

    older = {"backend_options": "frontends=7;client=wrk;connections=512", "images_per_sec": 12882.58,
             "requests": 36537, "requests_offered": 39934, "errors_by_status": "non2xx=3397"}
    assert round(answered_200(older)) == 11787
    assert answered_200({**older, "backend_options": older["backend_options"] + ";wrk_rate=2xx"}) == 12882.58
    assert answered_200({**older, "backend_options": "frontends=7"}) == 12882.58  # cnnbench load counts 200s
    assert refused(older) == ", 3,397 refused (503)" and refused({"errors_by_status": "timeout=5"}) == ""


def test_each_served_frames_row_is_paired_with_the_infer_row_of_its_own_invocation(tmp_path):
    # two invocations on one card, each `cnnbench infer` first, then one server: a served row must not be
    # divided by the other invocation's infer rate
    from results_tables import serving
    from results_tables.rows import Results

    base = {"backend": "torch", "precision": "fp16", "compile": True, "status": "ok", "git_sha": "abc",
            "device_name": "NVIDIA H100 80GB HBM3", "mode": "infer", "variant": "uint8_pinned"}
    served = {**base, "mode": "serve-http", "variant": "dynamic", "request_input": "jpeg", "arrival_rate_rps": 1000,
              "latency_ms_p50": 150.0, "latency_ms_p99": 210.0, "mean_batch": 15.8}
    frames = tmp_path / serving.FRAMES_DIR
    frames.mkdir()
    store.append_rows(frames / "frames_infer.csv", [
        {**base, "timestamp_utc": "2026-12-06T21:43:25+00:00", "images_per_sec": 571.0, "step_time_ms_median": 28.0},
        {**base, "timestamp_utc": "2026-12-06T21:45:40+00:00", "images_per_sec": 500.0, "step_time_ms_median": 32.0}])
    store.append_rows(frames / "frames_http.csv", [
        {**served, "timestamp_utc": "2026-12-06T21:44:01+00:00", "images_per_sec": 583.0,
         "backend_options": "frontends=7;copy_threads=4"},
        {**served, "timestamp_utc": "2026-12-06T21:46:06+00:00", "images_per_sec": 585.0,
         "backend_options": "frontends=7"}])
    text = "\n".join(serving.frames(Results(tmp_path)))
    assert "| H100 | 571 (28.0 ms) | 7 | 4 | 1,000 | 583 (1.02 of infer: met) |" in text
    assert "| H100 | 500 (32.0 ms) | 7 | 1 | 1,000 | 585 (1.17 of infer: met) |" in text


def test_frames_are_served_against_infer_of_the_same_invocation_and_litserve_beside_cnnbench(tmp_path):
    from results_tables import serving
    from results_tables.rows import Results

    base = {"backend": "torch", "precision": "fp16", "compile": False, "status": "ok", "git_sha": "abc",
            "device_name": "NVIDIA H200"}
    frames = tmp_path / serving.FRAMES_DIR
    frames.mkdir()
    store.append_rows(frames / "frames_infer.csv", [{**base, "mode": "infer", "variant": "uint8_pinned",
                                                     "images_per_sec": 600.0, "step_time_ms_median": 26.7}])
    served = {**base, "mode": "serve-http", "variant": "dynamic", "request_input": "jpeg", "arrival_rate_rps": 1000,
              "backend_options": "input=uint8_pinned;frontends=7", "images_per_sec": 450.0, "latency_ms_p50": 80.0,
              "latency_ms_p99": 150.0, "mean_batch": 14.2}
    store.append_rows(frames / "frames_http.csv", [served])
    text = "\n".join(serving.frames(Results(tmp_path)))
    assert ("| torch fp16, eager | H200 | 600 (26.7 ms) | 7 | 1 | 1,000 | 450 (0.75 of infer: not met) | 80.0 / 150.0 "
            "| 14.2 |" in text)
    store.append_rows(frames / "frames_http.csv", [{**served, "images_per_sec": 540.0}])  # a rerun: the newest
    assert "540 (0.90 of infer: met)" in "\n".join(serving.frames(Results(tmp_path)))
    store.append_rows(frames / "frames_infer.csv", [{**base, "mode": "infer", "variant": "uint8_pinned",
                                                     "compile": True, "images_per_sec": 1000.0}])
    compiled = "\n".join(serving.frames(Results(tmp_path)))  # no compiled serve row: only the eager pair shows
    assert "compiled" not in compiled and "540 (0.90 of infer: met)" in compiled
    # a server per copy-thread count is a line each; a card's rows are compared with that card's infer only
    store.append_rows(frames / "frames_http.csv", [
        {**served, "backend_options": "input=uint8_pinned;frontends=7;copy_threads=4", "images_per_sec": 580.0},
        {**served, "device_name": "NVIDIA H100 80GB HBM3", "images_per_sec": 300.0}])
    both = "\n".join(serving.frames(Results(tmp_path)))
    assert "| torch fp16, eager | H200 | 600 (26.7 ms) | 7 | 4 | 1,000 | 580 (0.97 of infer: met) |" in both
    assert "| torch fp16, eager | H100 | not measured yet" in both and "540 (0.90 of infer: met)" in both

    peers = tmp_path / serving.PEERS_DIR
    peers.mkdir()
    (peers / "pipeline.jsonl").write_text(json.dumps({"backend": "torch", "engine_img_s": 4000.0}) + "\n")
    ours = {**base, "mode": "serve-http", "variant": "dynamic", "arrival_rate_rps": 8000, "latency_ms_p50": 9.0,
            "latency_ms_p99": 30.0}
    store.append_rows(peers / "peers_http.csv", [
        {**ours, "backend_options": "frontends=0", "request_input": "raw", "images_per_sec": 2000.0},
        {**ours, "backend_options": "frontends=7", "request_input": "raw", "images_per_sec": 3800.0},
        {**ours, "backend_options": "frontends=7", "request_input": "jpeg", "images_per_sec": 3000.0},
        {**ours, "variant": "none", "backend_options": "frontends=0", "request_input": "raw", "images_per_sec": 150.0}])
    store.append_rows(peers / "litserve_http.csv", [
        {**ours, "variant": "litserve", "backend_options": "server=litserve;workers=4;api_servers=4",
         "request_input": "raw", "images_per_sec": 1000.0}])
    table = "\n".join(serving.peers(Results(tmp_path)))
    assert "| engine alone, batch 32 (no HTTP) | 4,000 |  |" in table
    assert "| cnnbench serve, 7 front ends | 3,800 (0.95), 9.0 / 30.0 | 3,000, 9.0 / 30.0 |" in table
    assert "| cnnbench serve, one process | 2,000 (0.50), 9.0 / 30.0 | not measured yet" in table
    assert "| cnnbench serve, plain route (one forward per request) | 150 (0.04), 9.0 / 30.0 | not measured" in table
    assert "| LitServe, 4 worker(s), 4 API servers | 1,000 (0.25), 9.0 / 30.0 | not measured yet" in table


def test_training_from_files_is_divided_by_the_synthetic_row_of_its_own_call(tmp_path):
    # an older call on an H200 (files with nvJPEG, synthetic), a newer one on an H100 (files, synthetic): the
    # H200's nvJPEG row must keep its own call's synthetic rate, not the newer H100 one
    from results_tables import data, summary
    from results_tables.rows import Results

    def row(spec: str, ips: float, sha: str, card: str, when: str) -> dict:
        return {"backend": "torch", "strategy": "ddp", "mode": "train", "spec_name": spec, "status": "ok",
                "images_per_sec": ips, "git_sha": sha, "device_name": card, "timestamp_utc": when,
                "data_wait_share": 0.05}

    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    store.append_rows(tmp_path / "h200_data.csv", [
        row("resnet50_synthetic", 4000.0, "aaa", h200, "2026-12-03T12:00:00+00:00"),
        row("resnet50_imagefolder_gpu_decode", 1000.0, "aaa", h200, "2026-12-03T12:05:00+00:00"),
        row("resnet50_imagefolder", 3600.0, "bbb", h100, "2026-12-07T02:45:00+00:00"),
        row("resnet50_synthetic", 3000.0, "bbb", h100, "2026-12-07T02:46:00+00:00")])
    results = Results(tmp_path)
    text = "\n".join(data.real_input(results))
    assert "| GPU (nvJPEG) | H200 | 1,000 | 25.0% |" in text
    assert "| CPU (simplejpeg) | H100 | 3,600 | 120.0% |" in text
    assert "| training torch from JPEG files / synthetic-resident | H100 | 1.200 (data wait 5.0%) |" in "\n".join(
        summary.targets(results))


def test_figures_of_another_card_are_marked_and_never_compared_across_cards(tmp_path):
    # the JAX batch-1024 option ran on an H100, the baseline table's JAX row on the H200: no "vs" between them
    from results_tables import inference, training
    from results_tables.rows import Results

    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"

    def row(spec: str, backend: str, ips: float, card: str, **more) -> dict:
        return {"backend": backend, "strategy": "sharded" if backend == "jax" else "ddp", "mode": "train",
                "spec_name": spec, "status": "ok", "images_per_sec": ips, "device_name": card, "compile": False,
                "global_batch": 256, "step_time_ms_median": 30.0, "first_step_s": 10.0,
                "timestamp_utc": "2026-12-07T04:00:00+00:00", **more}

    store.append_rows(tmp_path / "h200_resnet50.csv", [row("resnet50", "jax", 7000.0, h200)])
    store.append_rows(tmp_path / "h200_options.csv", [row("jax_b512", "jax", 7500.0, h200, global_batch=512),
                                                      row("jax_b1024", "jax", 6500.0, h100, global_batch=1024)])
    store.append_rows(tmp_path / "h200_perf.csv", [
        row("perf_infer", "torch", 400.0, h100, mode="infer", variant="resident", global_batch=1),
        row("perf_infer", "jax", 450.0, h200, mode="infer", variant="resident", global_batch=1),
        row("perf_infer", "jax", 26000.0, h200, mode="infer", variant="resident", global_batch=256)])
    results = Results(tmp_path)
    options = "\n".join(training.options(results))
    assert "| 512 | 7,500 | 30.0 | 10.0 | +7.1% vs 7,000 |" in options
    assert "| 1024 | 6,500 (H100) | 30.0 | 10.0 | — (the baseline row ran on the H200) |" in options
    assert "the others on the H200" in options
    by_input = "\n".join(inference.by_input(results))
    assert "| 1 | 400 (H100) |" in by_input and "| 450 |" in by_input


def test_a_saturation_offer_answered_in_full_says_the_offer_was_the_limit(tmp_path):
    from results_tables import serving
    from results_tables.rows import Results

    def row(options: str, offered: int, answered: float, when: str) -> dict:
        return {"backend": "torch", "backend_options": options, "variant": "dynamic", "request_input": "raw",
                "arrival_rate_rps": offered, "images_per_sec": answered, "mean_batch": 31.0, "status": "ok",
                "device_name": "NVIDIA H100 80GB HBM3", "timestamp_utc": when}

    store.append_rows(tmp_path / "h200_serve_http.csv", [
        row("cuda_graphs=True", 8000, 7978.0, "2026-12-07T04:00:00+00:00"),
        row("", 8000, 4290.0, "2026-12-07T04:00:00+00:00"),
        row("", 14000, 4300.0, "2026-12-08T04:00:00+00:00")])  # a later call offered more: it is shown
    line = next(x for x in serving.serving(Results(tmp_path)) if x.startswith("| HTTP, raw, saturation"))
    torch_cell, graphs_cell = line.split("|")[2:4]
    assert torch_cell.strip() == "4,300 of 14,000 offered, mean batch 31.0"
    assert graphs_cell.strip() == ("7,978 of 8,000 offered, mean batch 31.0; all answered: the offer was the limit, "
                                   "not the server")


def test_the_no_model_server_with_front_ends_is_its_own_row_against_the_cuda_graphs_engine(tmp_path):
    from results_tables import serving
    from results_tables.rows import Results

    def row(options: str, answered: float) -> dict:
        return {"backend": "numpy", "backend_options": options, "variant": "dynamic", "request_input": "raw",
                "arrival_rate_rps": 14000, "images_per_sec": answered, "status": "ok", "device_name": "numpy",
                "timestamp_utc": "2026-12-08T04:00:00+00:00"}

    (tmp_path / "h200_serve_pipeline.jsonl").write_text(json.dumps(
        {"backend": "torch", "cuda_graphs": True, "engine_img_s": 10000.0, "batch_ms": 3.2, "batcher_img_s": 9000.0,
         "decode_per_s_1": 400.0, "decode_per_s_workers": 3000.0, "decode_workers": 8,
         "timestamp_utc": "2026-12-08T04:00:00+00:00"}) + "\n")
    store.append_rows(tmp_path / "h200_stack_http.csv", [
        row("http=h11_impl", 900.0),  # a row from before front ends: one process
        row("frontends=0;http=httptools_impl", 2350.0),
        row("frontends=7;listen=reuseport;http=httptools_impl", 12000.0)])
    lines = serving.serving(Results(tmp_path))
    one = next(x for x in lines if x.startswith("| HTTP stack alone (no model, one process"))
    assert one.split("|")[2].strip() == "2,350 / 900"  # the front-end row does not take the one-process cell
    front = next(x for x in lines if x.startswith("| HTTP stack alone (no model), 7 front ends"))
    assert "14,000 req/s offered" in front and front.split("|")[2].strip() == "12,000 (1.20)"
    store.append_rows(tmp_path / "h200_stack_http.csv", [  # a later run answered all it was offered
        {**row("frontends=7;listen=reuseport;http=httptools_impl", 13990.0), "timestamp_utc": "2026-12-09T04:00:00"}])
    front = next(x for x in serving.serving(Results(tmp_path)) if x.startswith("| HTTP stack alone (no model), 7"))
    assert front.split("|")[2].strip() == "13,990 (1.40); all answered: the offer was the limit, not the server"


def test_each_switch_interval_is_its_own_row_against_the_engine_at_that_interval(tmp_path):
    from results_tables import serving
    from results_tables.rows import Results

    def row(options: str, answered: float) -> dict:
        return {"backend": "torch", "backend_options": options, "variant": "dynamic", "request_input": "raw",
                "arrival_rate_rps": 14000, "images_per_sec": answered, "status": "ok",
                "device_name": "NVIDIA H100 80GB HBM3", "timestamp_utc": "2026-12-08T04:00:00+00:00"}

    (tmp_path / "h200_serve_gil.jsonl").write_text(json.dumps(
        {"backend": "torch", "cuda_graphs": False, "engine_img_s": 5000.0, "batcher_img_s": 3000.0,
         "engine_img_s_by_switch_ms": {"5": 5000.0, "0.25": 4000.0},
         "batcher_img_s_by_switch_ms": {"5": 2500.0, "0.25": 3600.0},
         "timestamp_utc": "2026-12-08T04:00:00+00:00"}) + "\n")
    store.append_rows(tmp_path / "h200_serve_gil_http.csv", [
        row("frontends=7;listen=reuseport;switch_interval_ms=5;http=httptools_impl", 3000.0),
        row("frontends=7;listen=reuseport;switch_interval_ms=0.25;http=httptools_impl", 3800.0)])
    lines = serving.gil(Results(tmp_path))
    cells = {tuple(c.strip() for c in x.split("|")[1:3]): [c.strip() for c in x.split("|")[3:6]]
             for x in lines if x.startswith("| torch |")}
    assert cells[("torch", "5 ms (Python's own)")] == ["5,000", "2,500 (0.50)", "3,000 of 14,000 (0.60)"]
    assert cells[("torch", "0.25 ms")] == ["4,000", "3,600 (0.90)", "3,800 of 14,000 (0.95)"]
    jax = next(x for x in lines if x.startswith("| jax | 5 ms"))
    assert jax.count("not measured yet: `benchmarks/gpu.py serving-gil`") == 3


def test_the_launcher_cell_adds_the_launching_threads_cpu_time_where_rows_carry_it():
    from results_tables.serving import launcher_cell

    idle = {"idle_no_request": 0.0, "idle_filling": 0.01, "idle_device_full": 0.5}
    before = {"engine_launch_ms": 5.59, "batcher_launcher": {"batcher_launch_ms": 7.31, **idle}}
    assert launcher_cell(before) == "5.59 / 7.31 ms; idle 0% / 1% / 50%"  # rows from before it was measured
    after = {"engine_launch_ms": 5.59, "engine_launch_cpu_ms": 5.5,
             "batcher_launcher": {"batcher_launch_ms": 7.31, "batcher_launch_cpu_ms": 5.6, **idle}}
    assert launcher_cell(after) == "5.59 / 7.31 ms (CPU 5.50 / 5.60 ms); idle 0% / 1% / 50%"
