"""``graphrt serve`` under load: 32 concurrent clients x 50 requests with every output checked,
the bounded queue (503), request timeouts (504), and a SIGTERM that finishes the requests in
flight before the process exits."""

from __future__ import annotations

import http.client
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("onnx")
from serve_harness import (
    ServerProcess,
    binary_body,
    infer_binary,
    outputs_of,
    request,
    sample_inputs,
    start_server,
    threads_each,
)

CLIENTS, REQUESTS = 32, 50


def _batch_counts(server: ServerProcess, model: str) -> tuple[float, float]:
    text = request(server, "GET", "/metrics").body.decode()
    found = {}
    for kind in ("sum", "count"):
        match = re.search(rf'graphrt_batch_size_{kind}{{model="{model}"}} (\S+)', text)
        found[kind] = float(match.group(1)) if match else 0.0
    return found["sum"], found["count"]


def test_32_clients_50_requests_each_every_output_right(server: ServerProcess,
                                                        local: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((CLIENTS, REQUESTS, 1, 64)).astype(np.float32)
    want = np.stack([np.stack([local["dense"].run({"input": x})["output"] for x in row])
                     for row in inputs])
    before = _batch_counts(server, "dense")

    def client(i: int) -> list[str]:
        problems = []
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            for j in range(REQUESTS):
                body, headers = binary_body({"input": inputs[i, j]})
                connection.request("POST", "/v2/models/dense/infer", body, headers)
                response = connection.getresponse()
                data = response.read()
                if response.status != 200:
                    problems.append(f"client {i} request {j}: {response.status} {data[:200]!r}")
                    continue
                length = int(response.getheader("inference-header-content-length") or 0)
                got = np.frombuffer(data[length:], np.float32).reshape(1, 64)
                if not np.allclose(got, want[i, j], rtol=1e-4, atol=1e-5):
                    problems.append(f"client {i} request {j}: wrong output")
        finally:
            connection.close()
        return problems

    problems = [p for found in threads_each(CLIENTS, client) for p in found]
    assert problems == []
    samples, runs = (now - then for now, then in zip(_batch_counts(server, "dense"), before,
                                                      strict=True))
    assert samples == CLIENTS * REQUESTS
    assert runs <= samples  # every request ran, some of them stacked with others


def test_a_full_queue_is_503_and_the_server_goes_on(tight: ServerProcess,
                                                    local: dict[str, Any]) -> None:
    x = sample_inputs("slow", np.random.default_rng(1))

    replies = threads_each(12, lambda i: infer_binary(tight, "slow", x))
    statuses = sorted(reply.status for reply in replies)
    assert set(statuses) == {200, 503}, statuses
    assert statuses.count(200) >= 2  # the queue's two, at the least
    full = next(reply for reply in replies if reply.status == 503)
    assert "the queue is full (2 requests waiting); retry later" in full.error
    want = local["slow"].run(x)["output"]
    for reply in replies:
        if reply.status == 200:
            np.testing.assert_allclose(outputs_of(reply)["output"], want, rtol=1e-4,
                                       atol=1e-4)
    assert infer_binary(tight, "slow", x).status == 200


def test_a_request_past_its_timeout_is_504(tight: ServerProcess) -> None:
    x = sample_inputs("slow", np.random.default_rng(2))

    replies = threads_each(2, lambda i: infer_binary(  # two: the queue holds both
        tight, "slow", x, parameters={"timeout": 1000}))  # microseconds
    assert [reply.status for reply in replies] == [504] * 2, [r.body for r in replies]
    assert "no result within the request's timeout of 0.001 s" in replies[0].error
    assert infer_binary(tight, "slow", x).status == 200


def test_sigterm_finishes_the_requests_in_flight(model_files: dict[str, Path],
                                                 tmp_path: Path,
                                                 local: dict[str, Any]) -> None:
    server = start_server({"slow": model_files["slow"]}, tmp_path / "serve.log",
                          "--max-batch", "1")
    x = sample_inputs("slow", np.random.default_rng(3))
    results: list[Any] = []
    lock = threading.Lock()

    def send() -> None:
        reply = infer_binary(server, "slow", x)
        with lock:
            results.append(reply)

    senders = [threading.Thread(target=send) for _ in range(4)]
    for sender in senders:
        sender.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until all four arrived (three of them queue)
        text = request(server, "GET", "/metrics").body.decode()
        if 'graphrt_queue_depth{model="slow"} 3.0' in text:
            break
        time.sleep(0.005)
    assert server.stop() == 0, server.log_text()
    for sender in senders:
        sender.join()
    assert [reply.status for reply in results] == [200] * 4, results
    want = local["slow"].run(x)["output"]
    for reply in results:
        np.testing.assert_allclose(outputs_of(reply)["output"], want, rtol=1e-4, atol=1e-4)
    with pytest.raises(OSError):
        request(server, "GET", "/v2/health/live", timeout=5)
