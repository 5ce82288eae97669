"""Bad requests to a running ``graphrt serve``: each gets its status and the protocol's
``{"error": ...}`` body naming what was wrong, and the server answers the next good request.

Also the limits: a body above the size limit (413, declared, streamed or inflated), a kernel
failure (500 naming the node)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("onnx")
from serve_harness import Reply, ServerProcess, infer_json, request, sample_inputs

Body = tuple[bytes, dict[str, str]]


def _json(document: Any) -> Body:
    return orjson.dumps(document), {"content-type": "application/json"}


def _dense(**fields: Any) -> dict[str, Any]:
    tensor = {"name": "input", "datatype": "FP32", "shape": [1, 64], "data": [0.5] * 64}
    tensor.update(fields)
    return {"inputs": [tensor]}


def _binary(size: int, payload: int, extra: bytes = b"") -> Body:
    header = orjson.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                       "parameters": {"binary_data_size": size}}]})
    return header + b"\0" * payload + extra, {"inference-header-content-length":
                                              str(len(header))}


def _encoder(**inputs: Any) -> dict[str, Any]:
    return {"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}
                       for name, (datatype, shape, data) in inputs.items()]}


_IDS = ("INT64", [1, 16], [1] * 16)
_MASK = ("FP32", [1, 16], [1.0] * 16)

# (model, request body and headers, status, a phrase the error must contain)
CASES: dict[str, tuple[str, Callable[[], Body], int, str]] = {
    "malformed JSON": ("dense", lambda: (b'{"inputs": [', {}), 400, "not valid JSON"),
    "JSON not an object": ("dense", lambda: _json([1, 2]), 400, "must be a JSON object"),
    "no inputs": ("dense", lambda: _json({"id": "x"}), 400, "'inputs' is required"),
    "inputs not an array": ("dense", lambda: _json({"inputs": {"name": "input"}}), 400,
                            "'inputs' must be an array"),
    "input not an object": ("dense", lambda: _json({"inputs": [3]}), 400,
                            "inputs[0] must be an object"),
    "unknown input": ("dense", lambda: _json(_dense(name="y")), 400,
                      "model 'dense' has no input 'y' (its inputs: input)"),
    "missing input": ("encoder", lambda: _json(_encoder(input_ids=_IDS)), 400,
                      "needs input(s) 'attention_mask'"),
    "input given twice": ("encoder", lambda: _json(_encoder(input_ids=_IDS) | {
        "inputs": _encoder(input_ids=_IDS)["inputs"] * 2}), 400,
                          "'input_ids' is given more than once"),
    "wrong datatype": ("dense", lambda: _json(_dense(datatype="FP64")), 400,
                       "datatype 'FP64' does not match the model's FP32"),
    "BYTES datatype": ("dense", lambda: _json(_dense(datatype="BYTES")), 400,
                       "'BYTES' (not a datatype graphrt has)"),
    "wrong rank": ("dense", lambda: _json(_dense(shape=[64], data=[0.5] * 64)), 400,
                   "shape [64] has 1 dimensions, the model's [-1, 64] has 2"),
    "wrong fixed dimension": ("dense", lambda: _json(_dense(shape=[1, 63], data=[0.5] * 63)),
                              400, "dimension 1 is 63, the model's is 64"),
    "negative dimension": ("dense", lambda: _json(_dense(shape=[-1, 64])), 400,
                           "'shape' must be an array of non-negative integers"),
    "data shorter than shape": ("dense", lambda: _json(_dense(data=[0.5] * 3)), 400,
                                "'data' has 3 elements, the shape [1, 64] needs 64"),
    "strings as numbers": ("dense", lambda: _json(_dense(data=["0.5"] * 64)), 400,
                           "must hold numbers for datatype FP32, given strings"),
    "fractions for integers": ("encoder", lambda: _json(_encoder(
        input_ids=("INT64", [1, 16], [1.5] * 16), attention_mask=_MASK)), 400,
                               "must hold integers for datatype INT64"),
    "ragged data": ("dense", lambda: _json(_dense(shape=[2, 64], data=[[1] * 64, [3]])), 400,
                    "'data' is not a flat or nested array of numbers of one shape"),
    "no data": ("dense", lambda: _json(_dense(data=None)), 400,
                "no 'data' and no binary_data_size"),
    "binary size disagrees with shape": ("dense", lambda: _binary(100, 100), 400,
                                         "binary_data_size is 100 bytes, the shape [1, 64] of "
                                         "FP32 needs 256"),
    "binary size past the body": ("dense", lambda: _binary(256, 10), 400,
                                  "runs past the body's binary section"),
    "unclaimed binary bytes": ("dense", lambda: _binary(256, 256, b"xyz"), 400,
                               "3 bytes of binary data that no input claims"),
    "header length not a number": ("dense", lambda: (_json(_dense())[0], {
        "inference-header-content-length": "ten"}), 400,
                                   "Inference-Header-Content-Length is not a non-negative"),
    "header length past the body": ("dense", lambda: (_json(_dense())[0], {
        "inference-header-content-length": "999999"}), 400, "but the body has"),
    "unknown output": ("dense", lambda: _json(_dense() | {"outputs": [{"name": "logits"}]}),
                       400, "model 'dense' has no output 'logits' (its outputs: output)"),
    "id not a string": ("dense", lambda: _json(_dense() | {"id": 7}), 400,
                        "'id' must be a string"),
    "negative timeout": ("dense", lambda: _json(_dense() | {"parameters": {"timeout": -1}}),
                         400, "'timeout' must be a non-negative integer"),
    "sequence batching": ("dense", lambda: _json(_dense() | {"parameters": {
        "sequence_id": 4}}), 400, "stateless models only"),
    "classification": ("dense", lambda: _json(_dense() | {"outputs": [{
        "name": "output", "parameters": {"classification": 3}}]}), 400,
                       "classification extension is not supported"),
    "inputs binding a variable two ways": ("encoder", lambda: _json(_encoder(
        input_ids=("INT64", [2, 16], [1] * 32), attention_mask=_MASK)), 400, "batch"),
    "unknown model": ("nope", lambda: _json(_dense()), 404,
                      "unknown model 'nope' (served: mlp, cnn, resnet, encoder, dense)"),
    "unknown encoding": ("dense", lambda: (_json(_dense())[0], {"content-encoding": "br"}),
                         415, "Content-Encoding 'br' is not supported"),
    "corrupt gzip": ("dense", lambda: (b"\x1f\x8b not gzip", {"content-encoding": "gzip"}),
                     400, "does not decompress"),
    "truncated gzip": ("dense", lambda: (gzip.compress(_json(_dense())[0])[:-12], {
        "content-encoding": "gzip"}), 400, "truncated"),
    "kernel failure": ("encoder", lambda: _json(_encoder(
        input_ids=("INT64", [1, 16], [10**6] * 16), attention_mask=_MASK)), 500,
                       "node 4 'fused_take_add'"),
}


def _good(server: ServerProcess, local: dict[str, Any]) -> None:
    inputs = sample_inputs("dense", np.random.default_rng(0))
    reply = infer_json(server, "dense", inputs)
    assert reply.status == 200, reply.body
    got = np.asarray(reply.json()["outputs"][0]["data"], np.float32).reshape(1, 64)
    np.testing.assert_allclose(got, local["dense"].run(inputs)["output"], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_request_is_answered_and_the_server_goes_on(server: ServerProcess,
                                                        local: dict[str, Any],
                                                        case: str) -> None:
    model, make, status, phrase = CASES[case]
    body, headers = make()
    reply = request(server, "POST", f"/v2/models/{model}/infer", body, headers)
    assert reply.status == status, reply.body
    assert phrase in reply.error, reply.error
    if status == 500:
        assert "take: indices must lie in [-100, 100)" in reply.error
    _good(server, local)


@pytest.mark.parametrize(("method", "path", "status", "phrase"), [
    ("GET", "/v2/models/dense/infer", 405, "Method Not Allowed"),
    ("GET", "/v2/models/nope", 404, "unknown model 'nope'"),
    ("GET", "/v2/models/dense/versions/2", 404, "model 'dense' has no version '2'"),
    ("POST", "/v2/models/dense/versions/7/infer", 404, "has no version '7'"),
    ("GET", "/v3/models", 404, "no route GET /v3/models"),
    ("GET", "/v2/models/nope/config", 404, "unknown model 'nope'"),
])
def test_bad_routes(server: ServerProcess, local: dict[str, Any], method: str, path: str,
                    status: int, phrase: str) -> None:
    reply = request(server, method, path, b"{}" if method == "POST" else None)
    assert reply.status == status
    assert phrase in reply.error
    _good(server, local)


def _too_large(tight: ServerProcess, body: bytes, headers: dict[str, str]) -> Reply:
    return request(tight, "POST", "/v2/models/mlp/infer", body, headers)


def test_a_body_above_the_limit_is_413(tight: ServerProcess) -> None:
    big = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [8, 64],
                                    "data": [0.5] * (300_000)}]})
    assert len(big) > 1024 * 1024
    declared = _too_large(tight, big, {"content-type": "application/json"})
    assert declared.status == 413
    assert "more than the server's limit of 1048576" in declared.error

    def chunks() -> Any:
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    streamed = _too_large(tight, chunks(), {})  # type: ignore[arg-type] # sent chunked
    assert streamed.status == 413
    bomb = zlib.compress(b" " * (8 * 1024 * 1024))
    inflated = _too_large(tight, bomb, {"content-encoding": "deflate"})
    assert inflated.status == 413
    assert "decompresses to more than" in inflated.error
    ok = infer_json(tight, "mlp", {"x": np.zeros((8, 64), np.float32)})
    assert ok.status == 200
