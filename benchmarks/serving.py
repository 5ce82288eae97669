"""Serving (``graphrt serve``) against in-process runs of the same model: the serving overhead
and the dynamic-batching gain.

Two workloads from ``examples/onnx/models.py`` (seeded random weights), saved as ``.onnx``:

* **mlp**: 4 Gemm layers of 1024, input ``input`` [batch, 1024] with a symbolic batch bounded
  by ``--batch-bound`` (64; ``--dim batch=64``). Every request holds one sample.
* **resnet18**: ResNet-18 at 224x224, batch 1 (a fixed batch: the server cannot stack it).

Each is served by ``graphrt serve`` run as users run it, as a subprocess on 127.0.0.1 (a free
port, ``--log-level warning``): **unbatched** (``--max-batch 1``) and, for the MLP,
**batched** (the default bound, 64) with each ``--max-delay-ms`` of ``--delays`` (0 and 2).
The servers of one workload run side by side on their own ports (an idle one costs nothing)
and are loaded one at a time. The load comes from this process: N client threads (``--clients``
1, 8, 32), each with its own persistent keep-alive connection, send requests back to back
with the binary tensor extension (JSON header, ``Inference-Header-Content-Length``, the raw
float32 bytes; the output asked for as binary). The default client (``--client raw``) writes
a prebuilt request on a socket and parses the response's status line and headers itself:
client and server share the machine's cores, so the less the client costs, the less it takes
from the server. ``--client http.client`` and ``--client tritonclient`` (one
``tritonclient.http.InferenceServerClient`` per thread, as a user's code would) load it with
those instead; each phase prints the client's CPU per request, which says what the choice
costs. Whatever the load client, every server first answers a ``tritonclient`` request
(metadata and one inference, checked), so the protocol is known to work with Triton's client.

A phase is one server at one concurrency: the clients run for ``--warmup-s`` and until each
has had a response (the first responses answer the clients' common start, a burst, not the
steady state), then for ``--seconds``, the measured window. Requests completed inside it
count: req/s is their number over the window; median and p90 are their latencies (send to
full response). Every response is checked: status 200, output name, datatype, shape, and its
values equal the in-process result for that input (batch 1, ``rtol`` 1e-4, ``atol`` 1e-5;
every response, warm-ups included, after the phase so that the checks cost the clients no time
inside it); each failure is an error (the first one printed). "mean batch" is the server's own
count: the difference of ``graphrt_batch_size_sum`` / ``graphrt_batch_size_count`` on
``/metrics`` over the window. The server's CPU per request (``/proc/PID/stat``) and that of
its main thread, uvicorn's event loop where the app's Python runs, are printed too, and, in
the JSON, the app's own latency and run-time figures (``graphrt_request_latency_seconds``,
``graphrt_compute_seconds``).

The in-process baseline is the same model loaded in this process (``load_model``, as the
server does) and called back to back on one thread at batch 1: its req/s and median latency.
Since the machine's speed drifts (~30% minute to minute here), an in-process block of
``--inproc-s`` runs right before every phase, and the phases of one round run each server and
concurrency once (servers in rotated order); ``--rounds`` rounds. "vs in-process" is the
served figure over the in-process one of the blocks beside the same phases: req/s (x, higher
is better) and median latency (x, lower is better). Two more in-process rows, one block per
round: the same calls each handed to a worker thread and waited for, as the server's batcher
runs them (what serving costs beyond that is the protocol's), and, for the MLP, batch 32
(samples/s: about the best a batching server could do).

Other processes on the machine disturb the figures (on a shared machine, tests of other work
took a core and more here). Before each in-process block and phase the benchmark waits up to
``--quiet-wait-s`` for them to use under 0.2 cores, and every row reports the cores they used
meanwhile ("other load"); rows where it is large are to be rerun, not believed.

Targets (PASS/FAIL, not asserted):
(a) MLP, 32 clients: batched (``--max-delay-ms 0``) req/s >= 2x unbatched req/s.
(b) ResNet-18, 1 client: median served latency <= 1.15x median in-process latency.

Usage: ``python benchmarks/serving.py [--workloads mlp,resnet18] [--clients 1,8,32]
[--seconds 1.5] [--rounds 4] [--warmup-s 0.5] [--inproc-s 0.5] [--delays 0,2] [--client raw]
[--quiet-wait-s 2] [--keep-logs DIR] [--json out.json]`` (about 4 minutes on 2 cores with the
defaults; more ``--rounds`` or ``--seconds`` lengthen it).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

# Importing it drops a preset OPENBLAS_CORETYPE (re-executing this script; the servers inherit
# the cleaned environment) and brings the shared helpers: the model builders, the machine.
import onnx_models
import orjson

RTOL, ATOL = 1e-4, 1e-5
SETTLE_S = 0.2
"""Pause before each phase and in-process block: after a run, OpenBLAS's workers spin for
about 0.1 s and graphrt's helpers for about 1 ms, holding a core the next one needs."""
POOL = {"mlp": 64, "resnet18": 8}
"""Distinct inputs per workload; client k sends them in turn, starting at its own offset."""
THREADED = "in-process, worker thread"
"""The in-process row whose calls run on a worker thread, as the server runs them."""
QUIET_CORES = 0.2
"""Other processes' load (cores) under which the machine counts as quiet (see --quiet-wait-s)."""
TARGET_BATCHING = 2.0
TARGET_OVERHEAD = 1.15

Array = np.ndarray[Any, Any]


# -- the servers ------------------------------------------------------------------------------


def proc_cpu_s(stat: Path) -> float:
    """User + system CPU seconds from a ``/proc/.../stat`` file."""
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def graphrt_command() -> list[str]:
    """``graphrt`` next to this Python (the venv's console script), else ``python -m graphrt``."""
    script = Path(sys.executable).with_name("graphrt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "graphrt"]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format: ``name{labels} value`` lines → {``name{labels}``: value}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            try:
                values[series] = float(value)
            except ValueError:
                continue
    return values


@dataclasses.dataclass
class ServerProcess:
    """One ``graphrt serve`` subprocess.

    Attributes:
        label: its name in the table (``unbatched``, ``batched 0ms``, ...).
        args: the options after the model (``--max-batch 1``, ``--max-delay-ms 2``, ...).
    """

    label: str
    model_path: Path
    model_name: str
    args: list[str]
    log_path: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.port = free_port()
        command = [*graphrt_command(), "serve", str(self.model_path), "--port", str(self.port),
                   "--log-level", "warning", *self.args]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"graphrt serve ({self.label}) exited with "
                                 f"{self.process.returncode}:\n{self.log_tail()}")
            try:
                status, _ = self.get("/v2/health/ready")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"graphrt serve ({self.label}) not ready after {timeout_s:g} s:\n"
                         f"{self.log_tail()}")

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        status, body = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics answered {status}")
        return parse_metrics(body.decode())

    def cpu_s(self) -> float:
        """The server process's user + system CPU seconds so far."""
        assert self.process is not None
        return proc_cpu_s(Path(f"/proc/{self.process.pid}/stat"))

    def loop_cpu_s(self) -> float:
        """CPU seconds of the process's main thread: uvicorn's event loop, where the app's
        Python runs (parsing, routing, batching, encoding, metrics)."""
        assert self.process is not None
        pid = self.process.pid
        return proc_cpu_s(Path(f"/proc/{pid}/task/{pid}/stat"))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def problems(self) -> list[str]:
        """The log's warnings, errors and tracebacks (the startup banner is not one)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(word in line for word in (
            "WARNING", "ERROR", "CRITICAL", "Traceback", "Exception", "Error"))]

    def series(self, values: dict[str, float], name: str, **labels: str) -> float:
        text = ",".join(f'{k}="{v}"' for k, v in {"model": self.model_name, **labels}.items())
        return values.get(f"{name}{{{text}}}", 0.0)


# -- the workloads ----------------------------------------------------------------------------


@dataclasses.dataclass
class Workload:
    """A model, its inputs and their in-process outputs, and the servers that serve it."""

    name: str
    model_path: Path
    input_name: str
    output_name: str
    sample_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    dims: list[str]
    inputs: list[Array] = dataclasses.field(default_factory=list)
    references: Array | None = None
    model: Any = None
    servers: list[ServerProcess] = dataclasses.field(default_factory=list)


def build_workload(name: str, directory: Path, bound: int) -> Workload:
    import onnx

    models = onnx_models.load_models()
    if name == "mlp":
        proto = models.mlp(batch="batch", width=1024, layers=4)
        workload = Workload(name, directory / "mlp.onnx", "input", "output", (1, 1024),
                            (1, 1024), ["--dim", f"batch={bound}"])
    elif name == "resnet18":
        proto = models.resnet18(batch=1)
        workload = Workload(name, directory / "resnet18.onnx", "input", "logits",
                            (1, 3, 224, 224), (1, 1000), [])
    else:
        raise SystemExit(f"unknown workload {name!r} (mlp, resnet18)")
    onnx.save(proto, workload.model_path)
    rng = np.random.default_rng(1)
    workload.inputs = [rng.standard_normal(workload.sample_shape).astype(np.float32)
                       for _ in range(POOL[name])]
    return workload


def load_in_process(workload: Workload, bound: int) -> None:
    """The model as the server loads it, in this process, and its outputs for the pool."""
    from graphrt.serve import load_model

    bounds = {"batch": bound} if workload.dims else None
    workload.model = load_model(workload.model_path, dim_bounds=bounds)
    workload.references = np.stack([workload.model.run({workload.input_name: x})[
        workload.output_name] for x in workload.inputs])


# -- the clients ------------------------------------------------------------------------------


def infer_body(workload: Workload, x: Array) -> tuple[bytes, int]:
    """An infer request's body with the binary tensor extension, and its JSON header's length."""
    raw = np.ascontiguousarray(x, np.float32).tobytes()
    header = orjson.dumps({
        "inputs": [{"name": workload.input_name, "datatype": "FP32", "shape": list(x.shape),
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": workload.output_name, "parameters": {"binary_data": True}}]})
    return header + raw, len(header)


class BadResponse(Exception):
    """A response that is not a 200 with the output asked for."""


def decode_output(workload: Workload, status: int, header_length: int | None, body: bytes
                  ) -> Array:
    """The output of a binary-extension response (checked: name, datatype, shape, size)."""
    if status != 200:
        raise BadResponse(f"status {status}: {body[:200]!r}")
    if header_length is None:
        raise BadResponse(f"no Inference-Header-Content-Length: {body[:200]!r}")
    try:
        (output,) = orjson.loads(body[:header_length])["outputs"]
        size = output.get("parameters", {}).get("binary_data_size")
        described = (output["name"], output["datatype"], tuple(output["shape"]))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise BadResponse(f"malformed response header ({err!r}): {body[:200]!r}") from None
    if described != (workload.output_name, "FP32", workload.output_shape) or (
            size != len(body) - header_length):
        raise BadResponse(f"unexpected output {output} for a body of {len(body)} bytes")
    return np.frombuffer(body, np.float32, offset=header_length).reshape(workload.output_shape)


class RawClient:
    """HTTP/1.1 keep-alive on a bare socket: prebuilt requests, the response parsed by hand
    (status line, Content-Length, Inference-Header-Content-Length). The cheapest client."""

    def __init__(self, workload: Workload, port: int, path: str) -> None:
        self.workload = workload
        self.port = port
        self.requests = []
        for x in workload.inputs:
            body, header_length = infer_body(workload, x)
            head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Content-Type: application/octet-stream\r\n"
                    f"Inference-Header-Content-Length: {header_length}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            self.requests.append(head + body)
        self.buffer = bytearray()
        self.sock = self._connect()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _fill(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def infer(self, index: int) -> Array:
        self.sock.sendall(self.requests[index])
        buffer = self.buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "content-length" not in fields:
            raise BadResponse(f"no Content-Length in {lines}")
        need = end + 4 + int(fields["content-length"])
        while len(buffer) < need:
            self._fill()
        body = bytes(buffer[end + 4:need])
        del buffer[:need]
        if fields.get("connection", "").lower() == "close":
            self.reconnect()
        length = fields.get("inference-header-content-length")
        return decode_output(self.workload, status, None if length is None else int(length),
                             body)

    def reconnect(self) -> None:
        self.close()
        self.buffer.clear()
        self.sock = self._connect()

    def close(self) -> None:
        self.sock.close()


class HttpClient:
    """``http.client.HTTPConnection`` (keep-alive) with the binary tensor extension."""

    def __init__(self, workload: Workload, port: int, path: str) -> None:
        self.workload = workload
        self.port = port
        self.path = path
        self.bodies = [infer_body(workload, x) for x in workload.inputs]
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def infer(self, index: int) -> Array:
        body, header_length = self.bodies[index]
        self.conn.request("POST", self.path, body, {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(header_length)})
        response = self.conn.getresponse()
        data = response.read()
        length = response.getheader("Inference-Header-Content-Length")
        return decode_output(self.workload, response.status,
                             None if length is None else int(length), data)

    def reconnect(self) -> None:
        self.conn.close()

    def close(self) -> None:
        self.conn.close()


class TritonClient:
    """``tritonclient.http.InferenceServerClient``, one per thread, binary data both ways."""

    def __init__(self, workload: Workload, port: int, path: str) -> None:
        import tritonclient.http as triton

        self.triton = triton
        self.workload = workload
        self.url = f"127.0.0.1:{port}"
        self.client = triton.InferenceServerClient(self.url, network_timeout=120.0)
        self.requests = []
        for x in workload.inputs:
            tensor = triton.InferInput(workload.input_name, list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=True)
            self.requests.append(tensor)
        self.outputs = [triton.InferRequestedOutput(workload.output_name, binary_data=True)]

    def infer(self, index: int) -> Array:
        try:
            result = self.client.infer(self.server_name, [self.requests[index]],
                                       outputs=self.outputs)
        except self.triton.InferenceServerException as err:
            raise BadResponse(f"tritonclient: {err}") from None
        value: Array | None = result.as_numpy(self.workload.output_name)
        if value is None or value.dtype != np.float32 or value.shape != (
                self.workload.output_shape):
            raise BadResponse(f"tritonclient: output {value!r:.200}")
        return value

    server_name = ""

    def reconnect(self) -> None:
        self.client.close()
        self.client = self.triton.InferenceServerClient(self.url, network_timeout=120.0)

    def close(self) -> None:
        self.client.close()


CLIENTS: dict[str, Callable[[Workload, int, str], Any]] = {
    "raw": RawClient, "http.client": HttpClient, "tritonclient": TritonClient}


def triton_check(workload: Workload, server: ServerProcess) -> str:
    """Metadata and one inference through ``tritonclient.http``, checked."""
    try:
        import tritonclient.http as triton
    except ImportError:
        return "skipped (tritonclient is not installed)"
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        if not client.is_server_ready() or not client.is_model_ready(server.model_name):
            return "FAILED: not ready"
        meta = client.get_model_metadata(server.model_name)
        tensor = triton.InferInput(workload.input_name, list(workload.sample_shape), "FP32")
        tensor.set_data_from_numpy(workload.inputs[0], binary_data=True)
        result = client.infer(server.model_name, [tensor], outputs=[
            triton.InferRequestedOutput(workload.output_name, binary_data=True)])
        value = result.as_numpy(workload.output_name)
        assert workload.references is not None
        if value is None or not np.allclose(value, workload.references[0], RTOL, ATOL):
            return "FAILED: the output differs from the in-process one"
        return f"ok (inputs {[(i['name'], i['shape']) for i in meta['inputs']]})"
    except Exception as err:
        return f"FAILED: {type(err).__name__}: {err}"
    finally:
        client.close()


# -- the measurements -------------------------------------------------------------------------


def in_process_block(workload: Workload, seconds: float, min_calls: int = 10,
                     batch: int = 1, worker: ThreadPoolExecutor | None = None
                     ) -> dict[str, Any]:
    """``model.run`` back to back on this thread (or each call handed to ``worker``'s thread
    and waited for, as the server's batcher does): latencies and calls per second."""
    time.sleep(SETTLE_S)
    name = workload.input_name
    run: Callable[[dict[str, Array]], Any] = workload.model.run
    if worker is not None:
        def run(feeds: dict[str, Array]) -> Any:
            return worker.submit(workload.model.run, feeds).result()

    if batch == 1:
        feeds = [{name: x} for x in workload.inputs]
    else:
        stacked = np.concatenate([workload.inputs[i % len(workload.inputs)]
                                  for i in range(batch)])
        feeds = [{name: stacked}]
    run(feeds[0])
    latencies: list[float] = []
    cpu, busy = own_cpu_s(), machine_busy_s()
    start = time.perf_counter()
    now = start
    while now - start < seconds or len(latencies) < min_calls:
        begun = now
        run(feeds[len(latencies) % len(feeds)])
        now = time.perf_counter()
        latencies.append(now - begun)
    others = machine_busy_s() - busy - (own_cpu_s() - cpu)
    return {"latencies": latencies, "elapsed": now - start, "batch": batch,
            "other_cores": max(0.0, others) / (now - start), "thread": worker is not None}


@dataclasses.dataclass
class Record:
    start: float
    end: float
    index: int
    value: Array | None
    error: str | None


def load_phase(workload: Workload, server: ServerProcess, clients: int, warmup_s: float,
               seconds: float, client_kind: str) -> dict[str, Any]:
    """``clients`` threads load ``server`` for ``warmup_s``, then for the measured window."""
    time.sleep(SETTLE_S)
    path = f"/v2/models/{server.model_name}/infer"
    stop = threading.Event()
    records: list[list[Record]] = [[] for _ in range(clients)]
    failures: list[str] = []
    connected = threading.Barrier(clients + 1)

    def client_thread(k: int) -> None:
        try:
            client = CLIENTS[client_kind](workload, server.port, path)
            if isinstance(client, TritonClient):
                client.server_name = server.model_name
        except Exception as err:
            failures.append(f"client {k} could not connect: {err}")
            connected.abort()
            return
        mine = records[k]
        index = k * len(workload.inputs) // max(clients, 1)
        try:
            connected.wait()
            while not stop.is_set():
                index = (index + 1) % len(workload.inputs)
                begun = time.perf_counter()
                try:
                    value: Array | None = client.infer(index)
                    error = None
                except BadResponse as err:
                    value, error = None, str(err)
                except Exception as err:  # the connection is in doubt: a new one
                    value, error = None, f"{type(err).__name__}: {err}"
                    client.reconnect()
                mine.append(Record(begun, time.perf_counter(), index, value, error))
        except threading.BrokenBarrierError:
            pass
        finally:
            client.close()

    threads = [threading.Thread(target=client_thread, args=(k,), daemon=True)
               for k in range(clients)]
    for thread in threads:
        thread.start()
    try:
        connected.wait()
    except threading.BrokenBarrierError:
        stop.set()
        raise SystemExit(f"{server.label}: {failures}") from None
    time.sleep(warmup_s)
    # Steady state: every client has had a response (the first ones answer the clients'
    # common start, in a burst that a short window would mistake for the steady state).
    limit = time.perf_counter() + 120.0
    while (min(len(mine) for mine in records) < 1 and time.perf_counter() < limit
           and server.alive()):
        time.sleep(0.02)
    before, cpu_before, loop_before = server.metrics(), server.cpu_s(), server.loop_cpu_s()
    client_cpu_before, busy_before = own_cpu_s(), machine_busy_s()
    window_start = time.perf_counter()
    time.sleep(seconds)
    window_end = time.perf_counter()
    after, cpu_after, loop_after = server.metrics(), server.cpu_s(), server.loop_cpu_s()
    client_cpu_after, busy_after = own_cpu_s(), machine_busy_s()
    stop.set()
    for thread in threads:
        thread.join()

    everything = [r for mine in records for r in mine]
    errors = [r.error for r in everything if r.error is not None]
    checked = [r for r in everything if r.value is not None]
    assert workload.references is not None
    if checked:
        got = np.stack([r.value for r in checked if r.value is not None])
        want = workload.references[[r.index for r in checked]]
        good = np.isclose(got, want, RTOL, ATOL).reshape(len(checked), -1).all(axis=1)
        good &= np.isfinite(got).reshape(len(checked), -1).all(axis=1)
        for r, ok in zip(checked, good, strict=True):
            if not ok:
                bad = workload.references[r.index]
                r.error = (f"output differs from the in-process one: max|err| "
                           f"{float(np.abs(r.value - bad).max()):.3g}")
                errors.append(r.error)
    window = window_end - window_start
    inside = [r for r in everything if window_start <= r.end < window_end]
    answered = [r for r in inside if r.error is None]

    def delta(name: str, **labels: str) -> float:
        return server.series(after, name, **labels) - server.series(before, name, **labels)

    batches = delta("graphrt_batch_size_count")
    client_cpu = client_cpu_after - client_cpu_before
    others = busy_after - busy_before - client_cpu - (cpu_after - cpu_before)
    served = delta("graphrt_request_latency_seconds_count")
    return {
        "workload": workload.name, "server": server.label, "clients": clients,
        "window_s": window, "requests": len(answered),
        "errors": len(inside) - len(answered),
        "errors_all": len(errors), "responses_all": len(everything),
        "first_error": errors[0] if errors else None,
        "latencies": [r.end - r.start for r in answered],
        "batch_sum": delta("graphrt_batch_size_sum"), "batch_count": batches,
        "server_latency_s": delta("graphrt_request_latency_seconds_sum") / served
        if served else None,
        "compute_s_per_run": delta("graphrt_compute_seconds_sum") / batches if batches else None,
        "queue_s": delta("graphrt_queue_seconds_sum") / delta("graphrt_queue_seconds_count")
        if delta("graphrt_queue_seconds_count") else None,
        "server_cpu_s": cpu_after - cpu_before, "client_cpu_s": client_cpu,
        "loop_cpu_s": loop_after - loop_before, "other_cores": max(0.0, others) / window,
    }


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has used so far (``/proc/stat``: all but
    idle and iowait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wait_quiet(max_s: float, limit: float = QUIET_CORES, span: float = 0.5) -> float:
    """Wait until the other processes on the machine use under ``limit`` cores for ``span``
    seconds (the servers idle meanwhile), at most ``max_s``; returns the seconds waited."""
    began = time.perf_counter()
    while time.perf_counter() - began < max_s:
        busy, cpu = machine_busy_s(), own_cpu_s()
        time.sleep(span)
        if (machine_busy_s() - busy - (own_cpu_s() - cpu)) / span < limit:
            break
    return time.perf_counter() - began


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# -- the run ----------------------------------------------------------------------------------


def servers_for(workload: Workload, delays: list[float], logs: Path) -> list[ServerProcess]:
    model_name = workload.model_path.stem
    servers = [ServerProcess("unbatched", workload.model_path, model_name,
                             [*workload.dims, "--max-batch", "1"],
                             logs / f"{workload.name}-unbatched.log")]
    if workload.dims:  # a batch axis: batching servers too
        for delay in delays:
            servers.append(ServerProcess(f"batched {delay:g}ms", workload.model_path,
                                         model_name,
                                         [*workload.dims, "--max-delay-ms", f"{delay:g}"],
                                         logs / f"{workload.name}-batched-{delay:g}ms.log"))
    return servers


def run_workload(workload: Workload, args: argparse.Namespace, logs: Path
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Every round: for each concurrency, each server (rotated order), an in-process block
    then a load phase. Returns the phases, the in-process blocks and the notes."""
    workload.servers = servers_for(workload, args.delays, logs)
    started = time.perf_counter()
    for server in workload.servers:
        server.start()
    try:
        for server in workload.servers:
            server.wait_ready()
        print(f"{workload.name}: {len(workload.servers)} server(s) ready in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        load_in_process(workload, args.batch_bound)
        notes: dict[str, Any] = {"tritonclient_check": {}}
        for server in workload.servers:
            check = triton_check(workload, server)
            notes["tritonclient_check"][server.label] = check
            print(f"  tritonclient check, {server.label}: {check}", flush=True)
        phases: list[dict[str, Any]] = []
        blocks: list[dict[str, Any]] = []
        worker = ThreadPoolExecutor(1, thread_name_prefix="in-process-worker")
        for turn in range(args.rounds):
            for clients in args.clients:
                shift = turn % len(workload.servers)
                for server in workload.servers[shift:] + workload.servers[:shift]:
                    waited = wait_quiet(args.quiet_wait_s)
                    block = in_process_block(workload, args.inproc_s)
                    block.update(workload=workload.name, round=turn, server=server.label,
                                 clients=clients, waited_s=waited)
                    blocks.append(block)
                    phase = load_phase(workload, server, clients, args.warmup_s, args.seconds,
                                       args.client)
                    phase["round"] = turn
                    phases.append(phase)
                    print(progress(phase, block), flush=True)
            wait_quiet(args.quiet_wait_s)
            threaded = in_process_block(workload, args.inproc_s, worker=worker)
            threaded.update(workload=workload.name, round=turn, server=THREADED, clients=1)
            blocks.append(threaded)
            if workload.dims:
                batched = in_process_block(workload, args.inproc_s, batch=32)
                batched.update(workload=workload.name, round=turn, server="in-process b32",
                               clients=1)
                blocks.append(batched)
        worker.shutdown()
    finally:
        for server in workload.servers:
            server.stop()
        workload.model = None
    notes["server_log"] = {server.label: server.problems() for server in workload.servers}
    return phases, blocks, notes


def progress(phase: dict[str, Any], block: dict[str, Any]) -> str:
    lat = phase["latencies"]
    inproc = statistics.median(block["latencies"])
    mean_batch = (phase["batch_sum"] / phase["batch_count"]) if phase["batch_count"] else 0
    per = max(phase["requests"], 1)
    return (f"  round {phase['round']} {phase['server']:<13} {phase['clients']:>3} clients: "
            f"{phase['requests'] / phase['window_s']:8.1f} req/s, median "
            f"{statistics.median(lat) * 1e3 if lat else float('nan'):7.2f} ms (in-process "
            f"{inproc * 1e3:.2f} ms), mean batch {mean_batch:5.2f}, errors {phase['errors_all']},"
            f" CPU/req server {phase['server_cpu_s'] / per * 1e6:.0f} us (event loop "
            f"{phase['loop_cpu_s'] / per * 1e6:.0f}), client "
            f"{phase['client_cpu_s'] / per * 1e6:.0f} us; other processes "
            f"{phase['other_cores']:.2f} cores ({block['other_cores']:.2f} in-process)")


def summarize(phases: list[dict[str, Any]], blocks: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per workload and server and concurrency, pooled over the rounds, and the
    in-process rows; ratios against the in-process blocks run beside the same phases."""
    rows: list[dict[str, Any]] = []
    keys = list(dict.fromkeys((p["workload"], p["server"], p["clients"]) for p in phases))
    for workload in dict.fromkeys(k[0] for k in keys):
        own = [b for b in blocks if b["workload"] == workload and b["batch"] == 1
               and not b["thread"]]
        lat = [t for b in own for t in b["latencies"]]
        rows.append({"workload": workload, "server": "in-process", "clients": 1,
                     "req_s": sum(len(b["latencies"]) for b in own) / sum(b["elapsed"]
                                                                         for b in own),
                     "median_ms": statistics.median(lat) * 1e3,
                     "p90_ms": percentile(lat, 90) * 1e3, "mean_batch": 1.0, "errors": 0,
                     "tput_ratio": 1.0, "latency_ratio": 1.0, "requests": len(lat),
                     "other_cores": statistics.mean(b["other_cores"] for b in own)})
        inproc = rows[-1]
        threaded = [b for b in blocks if b["workload"] == workload and b["thread"]]
        if threaded:
            lat_t = [t for b in threaded for t in b["latencies"]]
            req_s = len(lat_t) / sum(b["elapsed"] for b in threaded)
            rows.append({"workload": workload, "server": THREADED, "clients": 1,
                         "req_s": req_s, "median_ms": statistics.median(lat_t) * 1e3,
                         "p90_ms": percentile(lat_t, 90) * 1e3, "mean_batch": 1.0,
                         "errors": 0, "tput_ratio": req_s / inproc["req_s"],
                         "latency_ratio": statistics.median(lat_t) * 1e3 / inproc["median_ms"],
                         "requests": len(lat_t),
                         "other_cores": statistics.mean(b["other_cores"] for b in threaded)})
        b32 = [b for b in blocks if b["workload"] == workload and b["batch"] > 1]
        if b32:
            lat32 = [t for b in b32 for t in b["latencies"]]
            samples = sum(len(b["latencies"]) * b["batch"] for b in b32)
            req_s = samples / sum(b["elapsed"] for b in b32)
            rows.append({"workload": workload, "server": "in-process b32", "clients": 1,
                         "req_s": req_s, "median_ms": statistics.median(lat32) * 1e3,
                         "p90_ms": percentile(lat32, 90) * 1e3, "mean_batch": 32.0,
                         "errors": 0, "tput_ratio": req_s / inproc["req_s"],
                         "latency_ratio": float("nan"), "requests": len(lat32),
                         "other_cores": statistics.mean(b["other_cores"] for b in b32)})
    for workload, server, clients in keys:
        mine = [p for p in phases if (p["workload"], p["server"], p["clients"]) ==
                (workload, server, clients)]
        beside = [b for b in blocks if (b["workload"], b["server"], b["clients"], b["batch"])
                  == (workload, server, clients, 1)]
        lat = [t for p in mine for t in p["latencies"]]
        inproc_lat = [t for b in beside for t in b["latencies"]]
        inproc_tput = sum(len(b["latencies"]) for b in beside) / sum(b["elapsed"]
                                                                     for b in beside)
        requests = sum(p["requests"] for p in mine)
        req_s = requests / sum(p["window_s"] for p in mine)
        count = sum(p["batch_count"] for p in mine)
        by_round = []
        for p in mine:
            b = next(b for b in beside if b["round"] == p["round"])
            if p["latencies"]:
                by_round.append({
                    "round": p["round"],
                    "tput_ratio": p["requests"] / p["window_s"] / (len(b["latencies"])
                                                                   / b["elapsed"]),
                    "latency_ratio": statistics.median(p["latencies"])
                    / statistics.median(b["latencies"]),
                    "req_s": p["requests"] / p["window_s"]})
        rows.append({
            "workload": workload, "server": server, "clients": clients, "req_s": req_s,
            "median_ms": statistics.median(lat) * 1e3 if lat else float("nan"),
            "p90_ms": percentile(lat, 90) * 1e3,
            "mean_batch": sum(p["batch_sum"] for p in mine) / count if count else float("nan"),
            "errors": sum(p["errors_all"] for p in mine),
            "responses": sum(p["responses_all"] for p in mine), "requests": requests,
            "first_error": next((p["first_error"] for p in mine if p["first_error"]), None),
            "tput_ratio": req_s / inproc_tput,
            "latency_ratio": (statistics.median(lat) / statistics.median(inproc_lat)
                              if lat else float("nan")),
            "inproc_req_s": inproc_tput, "inproc_median_ms": statistics.median(inproc_lat) * 1e3,
            "server_cpu_us_per_req": sum(p["server_cpu_s"] for p in mine) / max(requests, 1)
            * 1e6,
            "client_cpu_us_per_req": sum(p["client_cpu_s"] for p in mine) / max(requests, 1)
            * 1e6,
            "loop_cpu_us_per_req": sum(p["loop_cpu_s"] for p in mine) / max(requests, 1) * 1e6,
            "server_latency_ms": statistics.median([p["server_latency_s"] for p in mine
                                                    if p["server_latency_s"] is not None]
                                                   or [float("nan")]) * 1e3,
            "compute_ms_per_run": statistics.median([p["compute_s_per_run"] for p in mine
                                                     if p["compute_s_per_run"] is not None]
                                                    or [float("nan")]) * 1e3,
            "other_cores": statistics.mean(p["other_cores"] for p in mine),
            "inproc_other_cores": statistics.mean(b["other_cores"] for b in beside),
            "by_round": by_round})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| workload | server | clients | req/s | median ms | p90 ms | mean batch | errors "
            "| req/s vs in-process | median vs in-process | server CPU us/req (event loop) | "
            "client CPU us/req | other load |")
    lines = [head, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        server_cpu = r.get("server_cpu_us_per_req")
        loop_cpu = r.get("loop_cpu_us_per_req")
        client_cpu = r.get("client_cpu_us_per_req")
        samples = " samples" if r["server"] == "in-process b32" else ""
        latency_ratio = r.get("latency_ratio", float("nan"))
        lines.append(
            f"| {r['workload']} | {r['server']} | {r['clients']} | {r['req_s']:.0f}{samples} | "
            f"{r['median_ms']:.2f} | {r['p90_ms']:.2f} | {r['mean_batch']:.2f} | "
            f"{r['errors']}{'/' + str(r['responses']) if 'responses' in r else ''} | "
            f"{r['tput_ratio']:.2f}x | "
            f"{'' if latency_ratio != latency_ratio else f'{latency_ratio:.2f}x'} | "
            f"{'' if server_cpu is None else f'{server_cpu:.0f} ({loop_cpu:.0f})'} | "
            f"{'' if client_cpu is None else f'{client_cpu:.0f}'} | "
            f"{r['other_cores']:.2f} |")
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]], delays: list[float]) -> list[dict[str, Any]]:
    found = {(r["workload"], r["server"], r["clients"]): r for r in rows}
    results: list[dict[str, Any]] = []
    label = f"batched {delays[0]:g}ms" if delays else None
    unbatched, batched = found.get(("mlp", "unbatched", 32)), found.get(("mlp", label, 32))
    if unbatched and batched:
        ratio = batched["req_s"] / unbatched["req_s"]
        rounds = sorted(b["req_s"] / u["req_s"] for b, u in zip(
            batched["by_round"], unbatched["by_round"], strict=False))
        results.append({
            "target": "(a) mlp, 32 clients: batched req/s / unbatched req/s >= 2",
            "ratio": ratio, "pass": ratio >= TARGET_BATCHING, "rounds": rounds,
            "detail": f"{batched['req_s']:.0f} / {unbatched['req_s']:.0f} req/s ({label}); "
                      f"per round {', '.join(f'{x:.2f}' for x in rounds)}; other processes "
                      f"{batched['other_cores']:.2f} / {unbatched['other_cores']:.2f} cores"})
    else:
        results.append({"target": "(a) mlp, 32 clients, batching gain", "ratio": None,
                        "pass": None, "detail": "not measured (needs workload mlp, 32 "
                                                "clients and a --delays value)"})
    served = found.get(("resnet18", "unbatched", 1))
    if served:
        rounds = sorted(x["latency_ratio"] for x in served["by_round"])
        results.append({
            "target": "(b) resnet18, 1 client: median served / median in-process <= 1.15",
            "ratio": served["latency_ratio"],
            "pass": served["latency_ratio"] <= TARGET_OVERHEAD, "rounds": rounds,
            "detail": f"{served['median_ms']:.2f} / {served['inproc_median_ms']:.2f} ms; per "
                      f"round {', '.join(f'{x:.3f}' for x in rounds)}; other processes "
                      f"{served['other_cores']:.2f} / {served['inproc_other_cores']:.2f} cores"})
    else:
        results.append({"target": "(b) resnet18, 1 client, serving overhead", "ratio": None,
                        "pass": None, "detail": "not measured (needs workload resnet18 and "
                                                "1 client)"})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mlp,resnet18")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients per phase")
    parser.add_argument("--seconds", type=float, default=1.5,
                        help="measured window per phase (per round)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup-s", type=float, default=0.5,
                        help="load before each measured window")
    parser.add_argument("--inproc-s", type=float, default=0.5,
                        help="in-process block before each phase (at least 10 calls)")
    parser.add_argument("--delays", default="0,2",
                        help="--max-delay-ms of the batched MLP servers (the first: target a)")
    parser.add_argument("--batch-bound", type=int, default=64,
                        help="the MLP's dynamic batch bound (--dim batch=N)")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="raw")
    parser.add_argument("--quiet-wait-s", type=float, default=2.0,
                        help="before each in-process block and phase, wait up to this long "
                             f"for other processes to use under {QUIET_CORES} cores (0: never)")
    parser.add_argument("--keep-logs", type=Path, default=None,
                        help="copy the servers' logs to this directory")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    args.delays = [float(d) for d in args.delays.split(",") if d.strip()]
    workload_names = [w.strip() for w in args.workloads.split(",") if w.strip()]

    began = time.perf_counter()
    env = onnx_models.environment()
    print(onnx_models.describe_machine(env))
    print(f"load: {args.client} client, threads with one keep-alive connection each; "
          f"{args.rounds} rounds; per phase {args.warmup_s:g} s warm-up + {args.seconds:g} s "
          f"measured; an in-process block of {args.inproc_s:g} s before each phase\n",
          flush=True)
    phases: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="graphrt-serving-") as scratch:
        directory = Path(scratch)
        for name in workload_names:
            workload = build_workload(name, directory, args.batch_bound)
            got_phases, got_blocks, notes[name] = run_workload(workload, args, directory)
            phases += got_phases
            blocks += got_blocks
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in directory.glob("*.log"):
                shutil.copy(log, args.keep_logs / log.name)
    rows = summarize(phases, blocks)
    checks = targets(rows, args.delays)
    elapsed = time.perf_counter() - began

    print("\nreq/s: requests completed in the measured windows over their length (in-process "
          "b32: samples/s at batch 32); median, p90: latency per request; mean batch: samples "
          "per run on the server (/metrics); errors: failed or wrong responses / responses "
          "checked (all, warm-ups included); vs in-process: against the in-process batch-1 "
          "blocks beside the same phases; CPU per request: the server process (its event-loop "
          "thread), the load-client process; other load: cores used by other processes on the "
          "machine meanwhile\n")
    print(table(rows))
    print()
    for row in rows:
        if row.get("first_error"):
            print(f"first error, {row['workload']} {row['server']} {row['clients']} clients: "
                  f"{row['first_error']}")
    for name, note in notes.items():
        for label, problems in note.get("server_log", {}).items():
            for line in problems[:5]:
                print(f"server log, {name} {label}: {line}")
    for check in checks:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[check["pass"]]
        ratio = "" if check["ratio"] is None else f" {check['ratio']:.2f}x"
        print(f"{verdict} {check['target']}:{ratio} ({check['detail']})")
    print(f"\nwall time {elapsed:.0f} s")
    if args.json is not None:
        for p in phases:
            p["latency_ms"] = {"median": statistics.median(p["latencies"]) * 1e3
                               if p["latencies"] else None,
                               "p90": percentile(p["latencies"], 90) * 1e3}
            del p["latencies"]
        for b in blocks:
            b["median_ms"] = statistics.median(b["latencies"]) * 1e3
            b["calls"] = len(b["latencies"])
            del b["latencies"]
        args.json.write_text(json.dumps({
            "environment": env, "options": {k: v if not isinstance(v, Path) else str(v)
                                            for k, v in vars(args).items()},
            "rows": rows, "targets": checks, "phases": phases, "in_process_blocks": blocks,
            "notes": notes, "wall_s": elapsed}, indent=2, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
