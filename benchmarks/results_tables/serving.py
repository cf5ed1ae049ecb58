"""The serving table: the engine and the in-process batcher without HTTP, then `cnnbench serve` under
`cnnbench load` on the same host, for PyTorch eager, PyTorch with CUDA graphs and JAX."""

from __future__ import annotations

import re

from results_tables.rows import Results, Row, card, failed_cell, made_at, missing, newest, number, ok, provenance, table

CONFIGS = ("torch", "torch-graphs", "jax")
ABSENT = missing("serving")


def _config(backend: str, options: str | None) -> str:
    return f"{backend}-graphs" if "cuda_graphs=True" in (options or "") else backend


def p99_target(pipeline: dict, config: str) -> str:
    """The p99 goal at 100 req/s for one engine: the deadline, one batch of the size a lone request is padded
    to (measured alone in the same invocation), and 5 ms of HTTP and queueing."""
    found = pipeline.get(config) or {}
    if "small_batch_ms" not in found:
        return ""
    return f" (target {found['timeout_ms'] + found['small_batch_ms'] + 5:.1f})"


def answered_200(row: Row) -> float:
    """Answers 200 per second. wrk's Requests/sec counts 503s of a full queue too: rows written before
    serve_clients.py counted 200s only (no ``wrk_rate=2xx`` in backend_options) are scaled by their 200
    share (``requests`` 200s of ``requests_offered`` responses)."""
    options = row.get("backend_options") or ""
    rate = float(row["images_per_sec"] or 0)
    if "client=wrk" in options and "wrk_rate=2xx" not in options and row.get("requests_offered"):
        return rate * float(row.get("requests") or 0) / float(row["requests_offered"])
    return rate


def offer_limit(row: Row) -> str:
    """What to add to a saturation figure: an offer answered in full measured the client's rate, not the
    server's, whose bound is then somewhere above it."""
    answered_in_full = float(row["images_per_sec"]) >= 0.97 * float(row["arrival_rate_rps"])
    return "; all answered: the offer was the limit, not the server" if answered_in_full else ""


def stack_key(row: Row) -> tuple[int, str]:
    """(front ends, HTTP parser) of a no-model server row; rows from before front ends were one process."""
    options = row.get("backend_options") or ""
    found = re.search(r"(?:^|;)frontends=(\d+)", options)
    return int(found.group(1)) if found else 0, options.rsplit("http=", 1)[-1]


def refused(row: Row) -> str:
    """How many requests a full queue refused (503), as the row's errors_by_status counts them."""
    found = re.search(r"(?:^|;)(?:503|non2xx)=(\d+)", str(row.get("errors_by_status") or ""))
    return f", {number(float(found.group(1)))} refused (503)" if found else ""


def launcher_cell(pipeline: dict) -> str:
    """Where the in-process batcher's launcher spent its time, beside one launch of the engine alone."""
    found = pipeline.get("batcher_launcher")
    if not found or "engine_launch_ms" not in pipeline:
        return missing("serving")
    # the launching thread's CPU time in a launch: rows from before it was measured have none
    cpu = (f" (CPU {pipeline['engine_launch_cpu_ms']:.2f} / {found['batcher_launch_cpu_ms']:.2f} ms)"
           if "engine_launch_cpu_ms" in pipeline and "batcher_launch_cpu_ms" in found else "")
    return (f"{pipeline['engine_launch_ms']:.2f} / {found['batcher_launch_ms']:.2f} ms{cpu}; idle "
            f"{found['idle_no_request']:.0%} / {found['idle_filling']:.0%} / {found['idle_device_full']:.0%}")


def serving(results: Results) -> list[str]:
    pipeline = newest(results.jsonl("h200_serve_pipeline.jsonl"),
                      lambda r: _config(r["backend"], "cuda_graphs=True" if r.get("cuda_graphs") else ""))
    http = newest(results.csv("h200_serve_http.csv"),
                  lambda r: (_config(r["backend"], r["backend_options"]), r["variant"], r["request_input"],
                             r["arrival_rate_rps"]))
    stack = newest(results.csv("h200_stack_http.csv"), stack_key)
    shown_http: list[Row] = []  # the HTTP rows behind a cell: older keys (other offered rates) stay out

    def engine(config: str) -> float | None:
        found = pipeline.get(config)
        return found["engine_img_s"] if found else None

    def pipe(config: str, text) -> str:
        found = pipeline.get(config)
        return text(found) if found else ABSENT

    def load(config: str, variant: str, kind: str, offered: int, text) -> str:
        if variant == "none" and config == "torch-graphs":
            return "(as torch: one forward per request)"
        row: Row | None = http.get((config, variant, kind, offered))
        if row is None:
            return ABSENT
        shown_http.append(row)
        return text(row) if ok(row) else failed_cell(row)

    def highest(config: str, kind: str, floor: int, text) -> str:
        """The newest row offered at least FLOOR req/s (the section once offered 8,000 raw and 4,000 JPEG,
        which engines with CUDA graphs or XLA answered in full, now more), shown with its offered rate."""
        rows = [r for key, r in http.items() if key[:3] == (config, "dynamic", kind) and float(key[3]) >= floor]
        if not rows:
            return ABSENT
        row = max(rows, key=made_at)
        shown_http.append(row)
        return text(row) if ok(row) else failed_cell(row)

    def of_offered(row: Row, more: str = "") -> str:
        offered, rate = float(row["arrival_rate_rps"]), float(row["images_per_sec"])
        return f"{number(rate)} of {number(offered)} offered{more}{offer_limit(row)}"

    def answered(row: Row, config: str) -> str:
        base = engine(config)
        part = f", {row['images_per_sec'] / base:.0%} of the engine" if base else ""
        return of_offered(row, f"{part}, mean batch {number(row.get('mean_batch'), 1)}")

    def p50_p99(row: Row, config: str = "") -> str:
        return f"{number(row['latency_ms_p50'], 1)} / {number(row['latency_ms_p99'], 1)}" + p99_target(pipeline,
                                                                                                       config)

    lines = [
        ["engine alone, batch 32, img/s (one batch ms)",
         *(pipe(c, lambda p: f"{number(p['engine_img_s'])} ({p['batch_ms']:.2f} ms)") for c in CONFIGS)],
        ["in-process pipelined batcher, img/s (share of the engine)",
         *(pipe(c, lambda p: f"{number(p['batcher_img_s'])} ({p['batcher_img_s'] / p['engine_img_s']:.0%})")
           for c in CONFIGS)],
        ["in-process batcher's launcher: host ms per launch, engine alone / under the batcher (the launching "
         "thread's own CPU ms in it, where measured); share of its time idle with no request / a batch filling / "
         "the device full",
         *(pipe(c, launcher_cell) for c in CONFIGS)],
        ["HTTP, raw, 3,000 req/s offered: answered img/s, p99 ms, mean batch",
         *(load(c, "dynamic", "raw", 3000, lambda r: f"{number(r['images_per_sec'])}, {number(r['latency_ms_p99'], 1)}"
                f", {number(r.get('mean_batch'), 1)}") for c in CONFIGS)],
        ["HTTP, raw, saturation: answered img/s of the offered rate, mean batch",
         *(highest(c, "raw", 8000, lambda r, c=c: answered(r, c)) for c in CONFIGS)],
        ["HTTP, raw, 100 req/s: p50 / p99 ms (target: 5 ms deadline + one batch of 8 + 5 ms)",
         *(load(c, "dynamic", "raw", 100, lambda r, c=c: p50_p99(r, c)) for c in CONFIGS)],
        ["HTTP, JPEG 500x375, saturation: answered img/s of the offered rate",
         *(highest(c, "jpeg", 4000, of_offered) for c in CONFIGS)],
        ["JPEG decode + resize, 1 thread / the server's decode threads, img/s",
         *(pipe(c, lambda p: f"{number(p['decode_per_s_1'])} / {number(p['decode_per_s_workers'])} "
                             f"({p['decode_workers']} threads)") for c in CONFIGS)],
        ["plain route (one forward per request), 100 req/s: p50 / p99 ms",
         *(load(c, "none", "raw", 100, p50_p99) for c in CONFIGS)],
        ["plain route, saturation (1,500 req/s offered): answered img/s",
         *(load(c, "none", "raw", 1500, lambda r: number(r["images_per_sec"])) for c in CONFIGS)],
    ]
    def answered_req(row: Row | None) -> str:
        return number(row["images_per_sec"]) if ok(row) else ABSENT if row is None else failed_cell(row)

    one_process = {key: row for key, row in stack.items() if key[0] == 0}
    offered = {number(float(r["arrival_rate_rps"])) for r in one_process.values()}
    lines.append(["HTTP stack alone (no model, one process: no front ends), raw, "
                  f"{' and '.join(sorted(offered)) or '—'} req/s offered: answered req/s, httptools / h11 parser",
                  " / ".join(answered_req(stack.get((0, parser))) for parser in ("httptools_impl", "h11_impl")),
                  "(the same server)", "(the same server)"])
    with_frontends = [row for key, row in stack.items() if key[0] > 0 and key[1] == "httptools_impl"]
    front = max(with_frontends, key=made_at) if with_frontends else None
    setting = (f"{stack_key(front)[0]} front ends as the servers above, raw, "
               f"{number(float(front['arrival_rate_rps']))} req/s offered" if front
               else "the servers' default front ends, raw, at saturation")
    cell = answered_req(front)
    if ok(front):
        graphs = engine("torch-graphs")
        cell += (f" ({float(front['images_per_sec']) / graphs:.2f})" if graphs else "") + offer_limit(front)
    lines.append([f"HTTP stack alone (no model), {setting}: answered req/s (share of the CUDA-graphs engine)",
                  cell, "(the same server)", "(the same server)"])
    shown = {"h200_serve_pipeline.jsonl": list(pipeline.values()), "h200_serve_http.csv": shown_http,
             "h200_stack_http.csv": list(stack.values())}
    return table(["", "torch", "torch, CUDA graphs", "jax"], lines, "lrrr") + ["", provenance(shown)]


FRONTENDS_DIR = "h200_serve_frontends"


def absent(config: str) -> str:
    """The runbook section that makes the front-end rows of one engine."""
    return missing("serving-frontends-jax" if config == "jax" else "serving-frontends")


def _option(options: str | None, name: str) -> str | None:
    """One ``name=value`` of a row's backend_options."""
    for part in (options or "").split(";"):
        key, _, value = part.partition("=")
        if key == name:
            return value
    return None


def frontends(results: Results) -> list[str]:
    """`cnnbench serve` with front-end processes (gpu_serve.sh PARTS=frontends): the same server with one
    process and with four front ends, at 100 req/s and at saturation by both clients, and JPEG requests as
    front ends are added."""
    pipeline = newest(results.jsonl(f"{FRONTENDS_DIR}/pipeline.jsonl"),
                      lambda r: _config(r["backend"], "cuda_graphs=True" if r.get("cuda_graphs") else ""))
    rows = [r for r in results.csv(f"{FRONTENDS_DIR}/frontends_http.csv") if ok(r)]
    found = newest(rows, lambda r: (_config(r["backend"], r["backend_options"]),
                                    _option(r["backend_options"], "frontends"),
                                    _option(r["backend_options"], "client") or "cnnbench load", r["request_input"],
                                    r["arrival_rate_rps"] or 0))
    configs = ("torch-graphs", "jax")

    def cell(config: str, fe: int, client: str, kind: str, offered: float, text) -> str:
        row = found.get((config, str(fe), client, kind, offered))
        return text(row) if row else absent(config)

    def share(config: str, row: Row) -> str:
        engine = pipeline.get(config, {}).get("engine_img_s")
        rate = answered_200(row)
        return f"{number(rate)}" + (f" ({rate / engine:.2f} of the engine)" if engine else "")

    def load_rate(config: str, fe: int) -> str:
        offered = sorted({k[4] for k in found if k[:4] == (config, str(fe), "cnnbench load", "raw") and k[4] > 100})
        if not offered:
            return absent(config)
        row = found[(config, str(fe), "cnnbench load", "raw", offered[-1])]
        return f"{share(config, row)} of {number(offered[-1])} offered, p99 {number(row['latency_ms_p99'], 1)} ms"

    lines = [["engine alone, batch 32, img/s",
              *(number(pipeline[c]["engine_img_s"]) if c in pipeline else absent(c) for c in configs)]]
    for fe in (0, 4):
        where = "one process" if fe == 0 else f"{fe} front ends"
        lines.append([f"{where}, raw at saturation, wrk (closed loop, 512 connections): answered req/s, p99",
                      *(cell(c, fe, "wrk", "raw", 0, lambda r, c=c: f"{share(c, r)}, p99 "
                             f"{number(r['latency_ms_p99'], 1)} ms") for c in configs)])
        lines.append([f"{where}, raw, cnnbench load (open loop) at its highest offered rate",
                      *(load_rate(c, fe) for c in configs)])
        lines.append([f"{where}, raw, 100 req/s: p50 / p99 ms (target: 5 ms deadline + one batch of 8 + 5 ms)",
                      *(cell(c, fe, "cnnbench load", "raw", 100, lambda r, c=c: f"{number(r['latency_ms_p50'], 1)} / "
                             f"{number(r['latency_ms_p99'], 1)}{p99_target(pipeline, c)}") for c in configs)])
    def jpeg(config: str, fe: int) -> str:
        if config != configs[0] and (config, str(fe), "cnnbench load", "jpeg", 4000) not in found:
            return "(measured with PyTorch only: the front ends' decoding is the bound)"
        return cell(config, fe, "cnnbench load", "jpeg", 4000,
                    lambda r: f"{number(r['images_per_sec'])}, {number(r['latency_ms_p99'], 1)}")

    for fe in (1, 2, 4, 8):
        lines.append([f"JPEG 500x375, {fe} front end(s), 4,000 req/s offered: answered img/s, p99 ms",
                      *(jpeg(c, fe) for c in configs)])
    shown = {f"{FRONTENDS_DIR}/pipeline.jsonl": list(pipeline.values()),
             f"{FRONTENDS_DIR}/frontends_http.csv": list(found.values())}
    return table(["", "torch, CUDA graphs", "jax"], lines, "lrr") + ["", provenance(shown)]


SWEEP_DIR = "h200_serve_sweep"
SWEEP_ABSENT = missing("serving-sweep")
SWEEP_SETTINGS = ((1, "reuseport"), (2, "reuseport"), (4, "reuseport"), (7, "reuseport"), (4, "shared"),
                  (7, "shared"))


def sweep(results: Results) -> list[str]:
    """What the default front-end count and socket mode rest on (gpu_serve.sh PARTS=sweep): PyTorch with
    CUDA graphs, raw at saturation, by wrk and by `cnnbench load`, per front-end count and socket mode."""
    pipeline = newest(results.jsonl(f"{SWEEP_DIR}/pipeline.jsonl"),  # the engine of the sweep's own invocation
                      lambda r: _config(r["backend"], "cuda_graphs=True" if r.get("cuda_graphs") else ""))
    engine = pipeline.get("torch-graphs", {}).get("engine_img_s")
    rows = [r for r in results.csv(f"{SWEEP_DIR}/frontends_http.csv") if ok(r)]
    found = newest(rows, lambda r: (int(_option(r["backend_options"], "frontends") or 0),
                                    _option(r["backend_options"], "listen"),
                                    "wrk" if _option(r["backend_options"], "client") else "cnnbench load"))

    def rate(row: Row | None, offered: bool) -> str:
        if row is None:
            return SWEEP_ABSENT
        value = answered_200(row)
        share = f" ({value / engine:.2f} of the engine)" if engine else ""
        of = f" of {number(row['arrival_rate_rps'])} offered" if offered else ""
        return f"{number(value)}{share}{of}, p99 {number(row['latency_ms_p99'], 1)} ms{refused(row)}"

    def verdict(row: Row | None) -> str:
        errors = str((row or {}).get("errors_by_status") or "")
        if row is None:
            return SWEEP_ABSENT
        if "client_bound" in errors:
            return "disagree by more than 10 %: trust wrk"
        return "cnnbench load below saturation" if "not_compared" in errors else "agree within 10 %"

    lines = [[f"{fe} front end(s), {listen}", rate(found.get((fe, listen, "wrk")), False),
              rate(found.get((fe, listen, "cnnbench load")), True), verdict(found.get((fe, listen, "wrk")))]
             for fe, listen in SWEEP_SETTINGS]
    shown = {f"{SWEEP_DIR}/pipeline.jsonl": list(pipeline.values()),
             f"{SWEEP_DIR}/frontends_http.csv": list(found.values())}
    return table(["PyTorch, CUDA graphs, raw 224x224", "wrk (closed loop, 512 connections): answered 200/s",
                  "cnnbench load (open loop)", "the two clients"], lines, "lrrl") + ["", provenance(shown)]


FRAMES_DIR = "h200_serve_frames"
FRAMES_ABSENT = missing("serving-frames")


def frames(results: Results) -> list[str]:
    """The seed's case (gpu_serve.sh PARTS=frames): 1080x1920 JPEG frames served at a 1080x1920 input, against
    `cnnbench infer` of the same spec in the same invocation (target: served >= 0.8 of it)."""
    def key(row: Row) -> tuple[str, str, str, bool]:  # an invocation's card: infer and serve ran on it
        return card(row), row["backend"], row["precision"], str(row.get("compile")).lower() == "true"

    def served_key(row: Row) -> tuple[str, str, str, bool, str]:  # ...and each copy-thread count served
        return *key(row), _option(row["backend_options"], "copy_threads") or "1"

    infer_rows = [r for r in results.csv(f"{FRAMES_DIR}/frames_infer.csv") if ok(r)]

    def infer_before(row: Row) -> Row | None:
        """The `cnnbench infer` row of ROW's invocation: the newest of its key made before it (the script
        runs infer first, then its servers), so every ratio is of one invocation."""
        made = newest((r for r in infer_rows if key(r) == key(row) and made_at(r) <= made_at(row)), key)
        return made.get(key(row))

    def carded(row: Row) -> Row:
        """Rows served before front ends named the card: the card of `cnnbench infer` of the same commit."""
        if row.get("device_name"):
            return row
        same = [r for r in infer_rows if r.get("git_sha") == row.get("git_sha") and key(r)[1:] == key(row)[1:]]
        return {**row, "device_name": same[-1]["device_name"]} if same else row

    http = newest([carded(r) for r in results.csv(f"{FRAMES_DIR}/frames_http.csv")], served_key)
    lines, paired = [], []
    for (gpu, backend, precision, compiled, copy_threads), row in sorted(http.items()):
        alone = infer_before(row)
        if alone is not None:
            paired.append(alone)
        rate = answered_200(row)
        if not ok(row):
            served = failed_cell(row)
        else:
            share = rate / alone["images_per_sec"] if alone else None
            verdict = "" if share is None else f" ({share:.2f} of infer: {'met' if share >= 0.8 else 'not met'})"
            served = f"{number(rate)}{verdict}"
        lines.append([f"{backend} {precision}, {'compiled' if compiled else 'eager'}", gpu,
                      f"{number(alone['images_per_sec'])} ({number(alone['step_time_ms_median'], 1)} ms)"
                      if alone else FRAMES_ABSENT,
                      _option(row["backend_options"], "frontends") or "0", copy_threads,
                      number(row["arrival_rate_rps"]), served,
                      f"{number(row['latency_ms_p50'], 1)} / {number(row['latency_ms_p99'], 1)}" if ok(row) else "",
                      number(row.get("mean_batch"), 1) + refused(row) if ok(row) else ""])
    header = ["backend, precision", "card", "cnnbench infer, batch 16: frames/s (batch ms)", "front ends",
              "copy threads", "offered req/s", "served frames/s (target >= 0.8 of infer)", "p50 / p99 ms",
              "mean batch"]
    shown = {f"{FRAMES_DIR}/frames_infer.csv": paired,
             f"{FRAMES_DIR}/frames_http.csv": list(http.values())}
    return table(header, lines or [[FRAMES_ABSENT, *[""] * 8]], "llrrrrrrr") + ["", provenance(shown)]


PEERS_DIR = "h200_serve_peers"
PEERS_ABSENT = missing("serving-peers")


def peers(results: Results) -> list[str]:
    """LitServe beside cnnbench serve (gpu_serve.sh PARTS=litserve): the same PyTorch eager engine, raw
    224x224 and JPEG 500x375 at saturation, one invocation; the engine alone as the ceiling."""
    pipeline = newest(results.jsonl(f"{PEERS_DIR}/pipeline.jsonl"), lambda r: r["backend"])
    engine = pipeline.get("torch", {}).get("engine_img_s")
    ours = newest(results.csv(f"{PEERS_DIR}/peers_http.csv"),  # variant: dynamic, or none (the plain route)
                  lambda r: (r["variant"] == "none", _option(r["backend_options"], "frontends") or "0",
                             r["request_input"]))
    theirs = newest(results.csv(f"{PEERS_DIR}/litserve_http.csv"),
                    lambda r: (_option(r["backend_options"], "workers") or "1", r["request_input"]))

    def cell(row: Row | None) -> str:
        if row is None:
            return PEERS_ABSENT
        if not ok(row):
            return failed_cell(row)
        rate = answered_200(row)
        share = f" ({rate / engine:.2f})" if engine and row["request_input"] == "raw" else ""
        return (f"{number(rate)}{share}, {number(row['latency_ms_p50'], 1)} / {number(row['latency_ms_p99'], 1)}"
                f"{refused(row)}")

    lines = [["engine alone, batch 32 (no HTTP)", number(engine) if engine else PEERS_ABSENT, ""]]
    for fe in sorted({k[1] for k in ours if not k[0]}, key=int) or ["0"]:
        where = "one process" if fe == "0" else f"{fe} front ends"
        lines.append([f"cnnbench serve, {where}", cell(ours.get((False, fe, "raw"))),
                      cell(ours.get((False, fe, "jpeg")))])
    lines.append(["cnnbench serve, plain route (one forward per request)", cell(ours.get((True, "0", "raw"))),
                  cell(ours.get((True, "0", "jpeg")))])
    for workers in sorted({k[0] for k in theirs}, key=int) or ["1"]:
        lines.append([f"LitServe, {workers} worker(s), 4 API servers", cell(theirs.get((workers, "raw"))),
                      cell(theirs.get((workers, "jpeg")))])
    shown = {f"{PEERS_DIR}/pipeline.jsonl": list(pipeline.values()),
             f"{PEERS_DIR}/peers_http.csv": list(ours.values()),
             f"{PEERS_DIR}/litserve_http.csv": list(theirs.values())}
    cards = sorted({card(r) for r in ours.values()} - {"—"})  # one invocation: one card
    title = "PyTorch eager, ResNet-50 bf16" + (f", {' and '.join(cards)}" if cards else "")
    return table([title, "raw 224x224: answered img/s (of the engine), p50 / p99 ms",
                  "JPEG 500x375: answered img/s, p50 / p99 ms"], lines, "lrr") + ["", provenance(shown)]


GIL_ABSENT = missing("serving-gil")


def gil(results: Results) -> list[str]:
    """The engine process's GIL switch interval (`benchmarks/gpu.py serving-gil`, one invocation): per engine
    and interval, the engine alone, the in-process batcher and `cnnbench serve` raw at saturation."""
    pipeline = newest(results.jsonl("h200_serve_gil.jsonl"),
                      lambda r: _config(r["backend"], "cuda_graphs=True" if r.get("cuda_graphs") else ""))
    http = newest(results.csv("h200_serve_gil_http.csv"),
                  lambda r: (_config(r["backend"], r["backend_options"]),
                             float(_option(r["backend_options"], "switch_interval_ms") or 5)))
    switches = sorted({float(ms) for p in pipeline.values() for ms in p.get("batcher_img_s_by_switch_ms", {})},
                      reverse=True)
    lines = []
    for config in CONFIGS:
        found = pipeline.get(config)
        for switch_ms in switches or [5.0]:
            key = f"{switch_ms:g}"
            engine = (found or {}).get("engine_img_s_by_switch_ms", {}).get(key)
            batched = (found or {}).get("batcher_img_s_by_switch_ms", {}).get(key)
            row = http.get((config, switch_ms))
            if config == "torch-graphs":
                served = "not run: a launch is one graph replay"
            elif row is None:
                served = GIL_ABSENT
            elif not ok(row):
                served = failed_cell(row)
            else:
                base = f" ({float(row['images_per_sec']) / engine:.2f})" if engine else ""
                served = f"{number(float(row['images_per_sec']))} of {number(float(row['arrival_rate_rps']))}{base}"
            lines.append([config, f"{key} ms" + (" (Python's own)" if switch_ms == 5 else ""),
                          number(engine) if engine else GIL_ABSENT,
                          f"{number(batched)} ({batched / engine:.2f})" if engine and batched else GIL_ABSENT,
                          served])
    header = ["engine", "GIL switch interval", "engine alone, img/s", "in-process batcher, img/s (of the engine)",
              "HTTP raw at saturation: answered of offered req/s (of the engine)"]
    shown = {"h200_serve_gil.jsonl": list(pipeline.values()), "h200_serve_gil_http.csv": list(http.values())}
    return table(header, lines, "llrrr") + ["", provenance(shown)]
