"""What the serving tests share: the models they serve, a ``graphrt serve`` process on
127.0.0.1 and a free port, and plain HTTP requests for the cases no real client would send.

The models are small and built here (``examples/onnx/models.py`` for the ONNX ones), written
to a folder, and served the way a user serves them: bundles and ``.onnx`` files on the
command line.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BOUND = 8
"""The batch bound (``--dim batch=8``) of the ONNX models with a symbolic batch."""
SERVED = ("mlp", "cnn", "resnet", "encoder", "dense")
"""The models of the shared server, in the order it is given them."""


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def onnx_builders() -> Any:
    """``examples/onnx/models.py`` as a module."""
    sys.path.insert(0, str(EXAMPLES / "onnx"))
    try:
        import models
    finally:
        sys.path.remove(str(EXAMPLES / "onnx"))
    return models


def slow_model(rows: int = 256, width: int = 512, layers: int = 8) -> Any:
    """``layers`` MatMuls of [rows, width] by [width, width]: tens of milliseconds per run, so
    that queues fill and shutdowns find requests in flight."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    for i in range(layers):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{i}"))
        out = "output" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [out], name=f"matmul{i}"))
        x = out
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [rows, width])
          for name in ("input", "output")]
    graph = helper.make_graph(nodes, "slow", io[:1], io[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_models(folder: Path) -> dict[str, Path]:
    """Every served model as a file or folder in ``folder``, by the name it is served as."""
    import onnx

    models = onnx_builders()
    made = {
        "resnet": models.resnet18(image=32, classes=10, width=8, symbolic=True),
        "encoder": models.bert_encoder(seq=16, layers=1, hidden=32, heads=2, vocab=100,
                                       max_positions=32, symbolic=["batch"]),
        "dense": models.mlp(batch="batch", width=64, layers=2),
        "slow": slow_model(),
    }
    paths = {"mlp": EXAMPLES / "bundles" / "mlp", "cnn": EXAMPLES / "bundles" / "cnn.grb"}
    for name, model in made.items():
        path = folder / f"{name}.onnx"
        onnx.save(model, path)
        paths[name] = path
    return paths


def sample_inputs(name: str, rng: np.random.Generator, batch: int = 1
                  ) -> dict[str, np.ndarray[Any, Any]]:
    """Valid inputs for a served model (``batch`` rows where its batch is symbolic)."""
    if name == "mlp":
        return {"x": rng.standard_normal((8, 64)).astype(np.float32)}
    if name == "cnn":
        return {"data": rng.standard_normal((4, 3, 32, 32)).astype(np.float32)}
    if name == "resnet":
        return {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
    if name == "encoder":
        mask = np.ones((batch, 16), np.float32)
        mask[:, 12:] = 0
        return {"input_ids": rng.integers(0, 100, (batch, 16)), "attention_mask": mask}
    if name == "dense":
        return {"input": rng.standard_normal((batch, 64)).astype(np.float32)}
    if name == "slow":
        return {"input": rng.standard_normal((256, 512)).astype(np.float32)}
    raise KeyError(name)


@dataclass
class ServerProcess:
    """A ``graphrt serve`` subprocess; its log is kept to explain a failure."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    grpc_port: int | None = None
    closed: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"graphrt serve did not stop within {timeout} s:\n"
                                 f"{self.log_text()}") from None


def start_server(models: Mapping[str, Path], log: Path, *extra: str, grpc: bool = False,
                 timeout: float = 120.0) -> ServerProcess:
    """``graphrt serve`` of ``models`` (name → path) on a free port; returns once ready."""
    port = free_port()
    grpc_port = free_port() if grpc else None
    command = [sys.executable, "-m", "graphrt", "serve", *map(str, models.values())]
    for name in models:
        command += ["--name", name]
    command += ["--port", str(port), "--dim", f"batch={BOUND}", "--log-level", "warning",
                *extra]
    if grpc_port is not None:
        command += ["--grpc-port", str(grpc_port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                   cwd=ROOT)
    server = ServerProcess(process, port, log, grpc_port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"graphrt serve exited with {process.returncode}:\n"
                                 f"{server.log_text()}")
        with contextlib.suppress(OSError):
            if request(server, "GET", "/v2/health/ready").status == 200:
                return server
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"graphrt serve was not ready within {timeout} s:\n"
                         f"{server.log_text()}")


@dataclass(frozen=True)
class Reply:
    """An HTTP response: status, headers (lowercase names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def error(self) -> str:
        """The protocol's ``{"error": ...}`` message (fails if the body is not one)."""
        body = self.json()
        assert isinstance(body, dict) and set(body) == {"error"}, body
        assert isinstance(body["error"], str)
        return body["error"]


def request(server: ServerProcess, method: str, path: str, body: bytes | None = None,
            headers: Mapping[str, str] | None = None, timeout: float = 60.0) -> Reply:
    """One HTTP request on a new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                     response.read())
    finally:
        connection.close()


def infer_json(server: ServerProcess, model: str, inputs: Mapping[str, np.ndarray[Any, Any]],
               **extra: Any) -> Reply:
    """An infer request with every input as JSON data."""
    from graphrt.serve.datatypes import DATATYPES

    tensors = [{"name": name, "datatype": DATATYPES[str(value.dtype)],
                "shape": list(value.shape), "data": value.ravel().tolist()}
               for name, value in inputs.items()]
    return request(server, "POST", f"/v2/models/{model}/infer",
                   orjson.dumps({"inputs": tensors, **extra}),
                   {"content-type": "application/json"})


def binary_body(inputs: Mapping[str, np.ndarray[Any, Any]], **extra: Any
                ) -> tuple[bytes, dict[str, str]]:
    """An infer request body with every input in the binary tensor extension, and its
    headers; outputs are asked for as binary too."""
    from graphrt.serve.datatypes import DATATYPES

    tensors = [{"name": name, "datatype": DATATYPES[str(value.dtype)],
                "shape": list(value.shape), "parameters": {"binary_data_size": value.nbytes}}
               for name, value in inputs.items()]
    header = orjson.dumps({"inputs": tensors, "parameters": {"binary_data_output": True},
                           **extra})
    return header + b"".join(value.tobytes() for value in inputs.values()), {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream"}


def infer_binary(server: ServerProcess, model: str,
                 inputs: Mapping[str, np.ndarray[Any, Any]], **extra: Any) -> Reply:
    """An infer request with binary inputs and outputs."""
    body, headers = binary_body(inputs, **extra)
    return request(server, "POST", f"/v2/models/{model}/infer", body, headers)


def outputs_of(reply: Reply) -> dict[str, np.ndarray[Any, Any]]:
    """An infer response's outputs as arrays (JSON data or binary, float32 for JSON FP32)."""
    from graphrt.serve.datatypes import graphrt_dtype

    length = reply.headers.get("inference-header-content-length")
    body = orjson.loads(reply.body if length is None else reply.body[:int(length)])
    offset = 0 if length is None else int(length)
    found = {}
    for out in body["outputs"]:
        dtype = np.dtype(graphrt_dtype(out["datatype"]))
        size = out.get("parameters", {}).get("binary_data_size")
        if size is None:
            found[out["name"]] = np.asarray(out["data"], dtype).reshape(out["shape"])
        else:
            found[out["name"]] = np.frombuffer(reply.body[offset:offset + size], dtype
                                               ).reshape(out["shape"])
            offset += size
    return found


def expected(models: Mapping[str, Any], name: str,
             inputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
    """What the model computes in this process."""
    result: dict[str, np.ndarray[Any, Any]] = models[name].run(dict(inputs))
    return result


def threads_each(count: int, work: Any, *args: Any) -> Sequence[Any]:
    """Run ``work(i, *args)`` on ``count`` threads at once; their results in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda i: work(i, *args), range(count)))
