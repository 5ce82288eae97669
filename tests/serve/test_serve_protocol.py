"""``graphrt serve`` driven by ``tritonclient``, the client written for Triton: health,
metadata, configuration, and inference on bundles and ONNX-converted models, over HTTP (JSON
and binary tensors) and gRPC, equal to the same models run in this process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("onnx")
httpclient = pytest.importorskip("tritonclient.http")
from serve_harness import (  # noqa: E402
    BOUND,
    ROOT,
    SERVED,
    ServerProcess,
    infer_json,
    outputs_of,
    request,
    sample_inputs,
)

from graphrt.serve.datatypes import DATATYPES  # noqa: E402


def _http_inputs(inputs: dict[str, np.ndarray[Any, Any]], binary: bool) -> list[Any]:
    made = []
    for name, value in inputs.items():
        tensor = httpclient.InferInput(name, list(value.shape), DATATYPES[str(value.dtype)])
        tensor.set_data_from_numpy(value, binary_data=binary)
        made.append(tensor)
    return made


def _close(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_health_and_server_metadata(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert client.is_server_live() and client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "graphrt"
    assert "binary_tensor_data" in metadata["extensions"]
    for name in SERVED:
        assert client.is_model_ready(name)
        assert client.is_model_ready(name, model_version="1")
    assert not client.is_model_ready("nope")
    index = client.get_model_repository_index()
    assert [entry["name"] for entry in index] == list(SERVED)
    assert {entry["state"] for entry in index} == {"READY"}


def test_model_metadata_says_symbolic_dims_as_minus_one(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert client.get_model_metadata("mlp") == {
        "name": "mlp", "versions": ["1"], "platform": "graphrt",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [8, 64]}],
        "outputs": [{"name": "fused_dense_softmax", "datatype": "FP32", "shape": [8, 10]}]}
    encoder = client.get_model_metadata("encoder")
    assert encoder["inputs"] == [
        {"name": "input_ids", "datatype": "INT64", "shape": [-1, 16]},
        {"name": "attention_mask", "datatype": "FP32", "shape": [-1, 16]}]
    assert encoder["outputs"] == [{"name": "last_hidden_state", "datatype": "FP32",
                                   "shape": [-1, 16, 32]}]


def test_model_config_in_tritons_terms(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    dense = client.get_model_config("dense")
    assert dense["max_batch_size"] == BOUND
    assert dense["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [64]}]
    assert "dynamic_batching" in dense
    fixed = client.get_model_config("cnn")
    assert fixed["max_batch_size"] == 0
    assert fixed["input"][0]["dims"] == [4, 3, 32, 32]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("name", SERVED)
def test_infer_equals_in_process(server: ServerProcess, local: dict[str, Any], name: str,
                                 binary: bool) -> None:
    client = httpclient.InferenceServerClient(server.url)
    rng = np.random.default_rng(len(name))
    inputs = sample_inputs(name, rng, batch=3)
    outputs = [httpclient.InferRequestedOutput(o, binary_data=binary)
               for o in local[name].output_names]
    result = client.infer(name, _http_inputs(inputs, binary), outputs=outputs,
                          request_id=f"req-{name}")
    assert result.get_response()["id"] == f"req-{name}"
    assert result.get_response()["model_name"] == name
    want = local[name].run(inputs)
    for output in local[name].output_names:
        _close(result.as_numpy(output), want[output])


def test_infer_through_the_versioned_route_and_compressed_bodies(
        server: ServerProcess, local: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(server.url)
    inputs = sample_inputs("resnet", np.random.default_rng(1), batch=2)
    want = local["resnet"].run(inputs)["logits"]
    for algorithm in (None, "gzip", "deflate"):
        result = client.infer("resnet", _http_inputs(inputs, True), model_version="1",
                              request_compression_algorithm=algorithm)
        _close(result.as_numpy("logits"), want)


def test_output_selection_and_binary_output_default(server: ServerProcess,
                                                    local: dict[str, Any]) -> None:
    inputs = sample_inputs("dense", np.random.default_rng(2), batch=2)
    reply = infer_json(server, "dense", inputs,
                       outputs=[{"name": "output", "parameters": {"binary_data": False}}])
    assert reply.status == 200
    _close(outputs_of(reply)["output"].astype(np.float32), local["dense"].run(inputs)["output"])
    binary = infer_json(server, "dense", inputs, parameters={"binary_data_output": True})
    assert binary.status == 200
    assert binary.headers["content-type"] == "application/octet-stream"
    length = int(binary.headers["inference-header-content-length"])
    header = binary.body[:length]
    assert b'"binary_data_size":512' in header
    got = np.frombuffer(binary.body[length:], np.float32).reshape(2, 64)
    _close(got, local["dense"].run(inputs)["output"])


def test_batch_bounds_come_from_the_model(server: ServerProcess) -> None:
    inputs = sample_inputs("dense", np.random.default_rng(3), batch=BOUND + 1)
    reply = infer_json(server, "dense", inputs)
    assert reply.status == 400
    assert "outside its bounds [1, 8]" in reply.error


def test_grpc_infer_equals_in_process(server: ServerProcess, local: dict[str, Any]) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("encoder")
    assert client.get_model_metadata("encoder", as_json=True)["inputs"][0]["shape"] == [
        "-1", "16"]  # int64 fields are strings in protobuf's JSON
    assert client.get_model_config("dense", as_json=True)["config"]["max_batch_size"] == BOUND
    for name in ("encoder", "cnn", "dense"):
        inputs = sample_inputs(name, np.random.default_rng(4), batch=2)
        tensors = []
        for key, value in inputs.items():
            tensor = grpcclient.InferInput(key, list(value.shape), DATATYPES[str(value.dtype)])
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        result = client.infer(name, tensors, request_id="g1")
        assert result.get_response().id == "g1"
        want = local[name].run(inputs)
        for output in local[name].output_names:
            _close(result.as_numpy(output), want[output])


def test_grpc_errors_have_the_protocols_codes(server: ServerProcess) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    tensor = grpcclient.InferInput("x", [8, 63], "FP32")
    tensor.set_data_from_numpy(np.zeros((8, 63), np.float32))
    with pytest.raises(InferenceServerException, match="dimension 1 is 63") as wrong:
        client.infer("mlp", [tensor])
    assert wrong.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="unknown model 'nope'") as unknown:
        client.infer("nope", [tensor])
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    typed = grpcclient.InferInput("input", [1, 64], "FP32")
    typed.set_data_from_numpy(np.ones((1, 64), np.float32))
    assert client.infer("dense", [typed]).as_numpy("output").shape == (1, 64)


def test_metrics_count_requests_errors_latency_and_batches(server: ServerProcess) -> None:
    infer_json(server, "dense", sample_inputs("dense", np.random.default_rng(5), batch=1))
    infer_json(server, "dense", {"input": np.zeros((1, 3), np.float32)})
    reply = request(server, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain")
    text = reply.body.decode()
    for line in ('graphrt_inference_requests_total{model="dense",status="200"}',
                 'graphrt_inference_requests_total{model="dense",status="400"}',
                 'graphrt_inference_errors_total{model="dense",status="400"}',
                 'graphrt_request_latency_seconds_bucket{le="0.005",model="dense"}',
                 'graphrt_queue_seconds_count{model="dense"}',
                 'graphrt_compute_seconds_count{model="dense"}',
                 'graphrt_batch_size_bucket{le="1.0",model="dense"}',
                 'graphrt_queue_depth{model="dense"}'):
        assert line in text, line


def test_statistics_in_tritons_terms(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    inputs = sample_inputs("resnet", np.random.default_rng(6), batch=2)
    client.infer("resnet", _http_inputs(inputs, True))
    (stats,) = client.get_inference_statistics("resnet")["model_stats"]
    assert stats["name"] == "resnet" and stats["version"] == "1"
    assert stats["inference_count"] >= 2 and stats["execution_count"] >= 1
    assert stats["inference_stats"]["success"]["count"] >= 1
    assert stats["inference_stats"]["compute_infer"]["ns"] > 0
    assert {"batch_size", "compute_infer"} <= set(stats["batch_stats"][0])
    every = client.get_inference_statistics()["model_stats"]
    assert [s["name"] for s in every] == list(SERVED)
    grpcclient = pytest.importorskip("tritonclient.grpc")
    over_grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    assert over_grpc.get_inference_statistics("resnet").model_stats[0].inference_count >= 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("name", ["mlp", "encoder", "resnet"])
def test_a_script_written_for_triton_runs_unchanged(server: ServerProcess, protocol: str,
                                                    name: str) -> None:
    import subprocess
    import sys

    port = server.grpc_port if protocol == "grpc" else server.port
    done = subprocess.run([sys.executable, str(ROOT / "examples/serve/triton_client.py"),
                           "-u", f"127.0.0.1:{port}", "-i", protocol, "-m", name],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("PASS")
