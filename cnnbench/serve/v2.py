"""The Open Inference Protocol (KServe v2, as Triton Inference Server speaks it over HTTP) beside /v1.

``GET /v2`` (server metadata), ``/v2/health/live``, ``/v2/health/ready``, ``/v2/models/{model}`` (model
metadata), ``/v2/models/{model}/ready``, ``/v2/models/{model}/config`` (Triton's model configuration:
``max_batch_size`` and ``dynamic_batching``, which Triton's clients read), ``POST
/v2/models/{model}/infer``; each model route also under ``/versions/1``. One model, one input ``IMAGE``
(UINT8, shape [N, H, W, C], N <= max_batch: each image goes to the batcher as one request) and two
outputs, ``CLASSES`` (INT32 [N, K]) and ``SCORES`` (FP32 [N, K]), the top-k. Tensors come as JSON
``data`` or with the binary-data extension (``Inference-Header-Content-Length``: the JSON header's
length; ``parameters.binary_data_size`` per input); outputs go back as JSON or binary, as asked.
Errors are Triton's shape, ``{"error": "..."}``: 404 for an unknown model or version, 400 for a request
that does not match the model (sizes that disagree, a wrong shape or datatype).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from cnnbench.serve.answers import error_response, infer_status
from cnnbench.serve.limits import RequestRefused, read_body

INPUT = "IMAGE"
OUTPUTS = {"CLASSES": ("INT32", "TYPE_INT32", np.int32), "SCORES": ("FP32", "TYPE_FP32", np.float32)}
VERSION = "1"
HEADER_LENGTH = "inference-header-content-length"


class _Refused(RequestRefused):
    pass


def _bad(message: str) -> _Refused:
    return _Refused(400, message)


def model_metadata(service: Any) -> dict[str, Any]:
    top_k = service.info["top_k"]
    return {"name": service.info["model_name"], "versions": [VERSION], "platform": "cnnbench",
            "inputs": [{"name": INPUT, "datatype": "UINT8", "shape": [-1, *service.image_shape]}],
            "outputs": [{"name": name, "datatype": kind, "shape": [-1, top_k]}
                        for name, (kind, _, _) in OUTPUTS.items()]}


def model_config(service: Any) -> dict[str, Any]:
    config, top_k = service.config, service.info["top_k"]
    return {"name": service.info["model_name"], "platform": "cnnbench", "backend": service.info["row"]["backend"],
            "max_batch_size": config.max_batch,
            "input": [{"name": INPUT, "data_type": "TYPE_UINT8", "format": "FORMAT_NHWC",
                       "dims": list(service.image_shape)}],
            "output": [{"name": name, "data_type": kind, "dims": [top_k]} for name, (_, kind, _) in OUTPUTS.items()],
            "dynamic_batching": {"max_queue_delay_microseconds": int(config.deadline_ms * 1000),
                                 "preferred_batch_size": [config.max_batch],
                                 "default_queue_policy": {"max_queue_size": config.max_queue}}}


def parse_infer(body: bytes, header_length: str | None, image_shape: tuple[int, ...],
                max_batch: int) -> tuple[dict[str, Any], np.ndarray]:
    """(the JSON request, the images as uint8 [N, H, W, C]) of one infer body; raises a 400."""
    if header_length is not None:
        if not header_length.isdigit() or not 0 < int(header_length) <= len(body):
            raise _bad(f"Inference-Header-Content-Length {header_length!r}: expected 1..{len(body)} (the body's "
                       f"length)")
        head, binary = body[:int(header_length)], memoryview(body)[int(header_length):]
    else:
        head, binary = body, memoryview(b"")
    try:
        request = json.loads(head)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(f"the inference request is not JSON: {exc}") from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list) or len(request["inputs"]) != 1:
        raise _bad(f"expected {{\"inputs\": [one tensor named {INPUT}]}}")
    tensor = request["inputs"][0]
    if not isinstance(tensor, dict) or tensor.get("name") != INPUT:
        raise _bad(f"unexpected input {tensor.get('name') if isinstance(tensor, dict) else tensor!r}: the model "
                   f"takes one input, {INPUT}")
    if tensor.get("datatype") != "UINT8":
        raise _bad(f"input {INPUT}: datatype {tensor.get('datatype')!r}, expected UINT8")
    shape = tensor.get("shape")
    if (not isinstance(shape, list) or len(shape) != 4 or list(shape[1:]) != list(image_shape)
            or not isinstance(shape[0], int) or not 1 <= shape[0] <= max_batch):
        raise _bad(f"input {INPUT}: shape {shape}, expected [N, {', '.join(map(str, image_shape))}] with "
                   f"1 <= N <= {max_batch} (max_batch_size)")
    need = int(np.prod(shape))
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        if size != need:
            raise _bad(f"input {INPUT}: binary_data_size {size} disagrees with shape {shape} ({need} bytes)")
        if len(binary) != need:
            raise _bad(f"the body carries {len(binary)} bytes after its JSON header; binary_data_size says {need}")
        images = np.frombuffer(binary, np.uint8).reshape(shape)
    else:
        if len(binary):
            raise _bad(f"the body carries {len(binary)} bytes after its JSON header and no input has "
                       f"binary_data_size")
        try:
            images = np.asarray(tensor.get("data"), dtype=np.int64).reshape(shape)
        except (TypeError, ValueError):
            raise _bad(f"input {INPUT}: data must hold {need} integers for shape {shape}") from None
        if images.min() < 0 or images.max() > 255:
            raise _bad(f"input {INPUT}: UINT8 data outside 0..255")
        images = images.astype(np.uint8)
    return request, images


def _outputs_wanted(request: dict[str, Any]) -> dict[str, bool]:
    """Output name -> as binary; all outputs unless some are named."""
    default_binary = bool((request.get("parameters") or {}).get("binary_data_output", False))
    named = request.get("outputs")
    if not named:
        return {name: default_binary for name in OUTPUTS}
    wanted = {}
    for output in named:
        name = output.get("name") if isinstance(output, dict) else None
        if name not in OUTPUTS:
            raise _bad(f"unknown output {name!r}: the model has {', '.join(OUTPUTS)}")
        wanted[name] = bool((output.get("parameters") or {}).get("binary_data", default_binary))
    return wanted


def infer_response(model: str, request: dict[str, Any], results: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    from starlette.responses import Response

    wanted = _outputs_wanted(request)
    arrays = {"CLASSES": np.stack([ids for ids, _ in results]).astype(np.int32),
              "SCORES": np.stack([scores for _, scores in results]).astype(np.float32)}
    outputs, blobs = [], []
    for name, binary in wanted.items():
        array, (kind, _, _) = arrays[name], OUTPUTS[name]
        output: dict[str, Any] = {"name": name, "datatype": kind, "shape": list(array.shape)}
        if binary:
            blob = array.tobytes()
            output["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            output["data"] = array.ravel().tolist()
        outputs.append(output)
    answer = {"model_name": model, "model_version": VERSION, "outputs": outputs}
    if "id" in request:
        answer["id"] = request["id"]
    head = json.dumps(answer).encode()
    if not blobs:
        return Response(head, media_type="application/json")
    return Response(head + b"".join(blobs), media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(head))})


def routes(service: Any, counted: Any) -> list[Any]:
    """The /v2 routes over ``service``; ``counted(request, handler)`` counts and times infer answers."""
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def unknown_model(request: Any) -> Any:
        model, version = request.path_params["model"], request.path_params.get("version", VERSION)
        if model != service.info["model_name"]:
            return error_response(404, f"unknown model {model!r}: this server serves {service.info['model_name']!r}")
        if version != VERSION:
            return error_response(404, f"unknown version {version!r} of model {model!r}: it has {VERSION}")
        return None

    async def server_metadata(request: Any) -> Any:
        return JSONResponse({"name": "cnnbench", "version": service.info.get("version", ""),
                             "extensions": ["binary_tensor_data", "model_configuration"]})

    async def live(request: Any) -> Any:
        return Response(status_code=200)

    async def ready(request: Any) -> Any:
        return Response(status_code=200 if service.ready.is_set() else 503)

    async def metadata(request: Any) -> Any:
        return unknown_model(request) or JSONResponse(model_metadata(service))

    async def model_ready(request: Any) -> Any:
        return unknown_model(request) or await ready(request)

    async def config(request: Any) -> Any:
        return unknown_model(request) or JSONResponse(model_config(service))

    async def answer(request: Any) -> Any:
        refused = unknown_model(request)
        if refused is not None:
            return refused
        if not service.ready.is_set():
            return error_response(503, service.failure or "warming up: every batch shape is compiled before serving")
        body = await read_body(request, service.config)
        parsed, images = parse_infer(body, request.headers.get(HEADER_LENGTH), service.image_shape,
                                     service.config.max_batch)
        _outputs_wanted(parsed)  # an unknown output name is refused before the model runs
        status, result = await infer_status(service, list(images))
        if status != 200:
            return error_response(status, result)
        return infer_response(service.info["model_name"], parsed, result)

    async def infer(request: Any) -> Any:
        return await counted(request, answer)

    table = [("", metadata, ["GET"]), ("/ready", model_ready, ["GET"]), ("/config", config, ["GET"]),
             ("/infer", infer, ["POST"])]
    model_routes = [Route(prefix + suffix, handler, methods=methods) for suffix, handler, methods in table
                    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")]
    return [Route("/v2", server_metadata), Route("/v2/health/live", live), Route("/v2/health/ready", ready),
            *model_routes]
