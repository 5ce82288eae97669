"""graphrt.serve.ray: the protocol's routes through Ray Serve replicas, and Ray Data batch
inference with :class:`Predictor`, against the same models run in this process.

One local Ray instance serves the whole module (started once: it takes seconds); the models
are the example MLP bundle (a fixed [8, 64] input) and an ONNX MLP with a symbolic batch
(``examples/onnx/models.py``), which travels to the replicas as bundle bytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from http.client import HTTPConnection
from typing import Any

import numpy as np
import orjson
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
pytest.importorskip("ray.data")
httpclient = pytest.importorskip("tritonclient.http")
from serve_harness import EXAMPLES, free_port, onnx_builders  # noqa: E402

import graphrt  # noqa: E402
from graphrt.errors import ArgumentError, BundleError, InputError  # noqa: E402
from graphrt.serve import ServedModel, load_model  # noqa: E402
from graphrt.serve.ray import Predictor, deployment, run  # noqa: E402

# Ray Data warns of its own deprecated settings when its context is first read.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data")

MLP = EXAMPLES / "bundles" / "mlp"
CNN = EXAMPLES / "bundles" / "cnn.grb"
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
Array = np.ndarray[Any, Any]


@pytest.fixture(scope="module")
def dense() -> graphrt.Bundle:
    """An MLP with a symbolic batch (up to 64), converted from ONNX: a bundle in memory."""
    models = onnx_builders()
    return graphrt.from_onnx(models.mlp(batch="batch", width=64, layers=2),
                             dim_bounds={"batch": 64})


@pytest.fixture(scope="module")
def local(dense: graphrt.Bundle) -> dict[str, ServedModel]:
    """The models run in this process: the reference."""
    return {"mlp": load_model(MLP), "dense": load_model(dense, name="dense")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[int]:
    """A local Ray instance; yields the port Serve's HTTP proxy will listen on."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield free_port()
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def served(cluster: int, dense: graphrt.Bundle) -> str:
    """Both models behind Ray Serve (two replicas, each with its own copy), via ``run``."""
    url = run([MLP, dense], names=[None, "dense"], num_replicas=2,
              ray_actor_options={"num_cpus": 0.5}, host="127.0.0.1", port=cluster)
    assert url == f"http://127.0.0.1:{cluster}"
    wait_ready(cluster, "")
    return f"127.0.0.1:{cluster}"


def wait_ready(port: int, prefix: str, timeout: float = 30.0) -> None:
    """Until the proxy routes ``prefix`` to a ready replica."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status, _ = call(port, "GET", f"{prefix}/v2/health/ready")
        if status == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"{prefix or '/'} not ready within {timeout} s (last status {status})")


def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request through the proxy; the status and the JSON body (None if not JSON)."""
    connection = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = None if body is None else orjson.dumps(body)
        connection.request(method, path, body=payload,
                           headers={"content-type": "application/json"} if payload else {})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        return response.status, orjson.loads(data)
    except orjson.JSONDecodeError:
        return response.status, None


def json_request(inputs: Mapping[str, Array]) -> dict[str, Any]:
    return {"inputs": [{"name": name, "datatype": "FP32", "shape": list(value.shape),
                        "data": value.ravel().tolist()} for name, value in inputs.items()]}


def infer(client: Any, model: ServedModel, inputs: Mapping[str, Array], binary: bool
          ) -> dict[str, Array]:
    """``tritonclient.http`` infer, with binary or JSON tensors both ways."""
    tensors = []
    for name, value in inputs.items():
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        tensors.append(tensor)
    outputs = [httpclient.InferRequestedOutput(name, binary_data=binary)
               for name in model.output_names]
    result = client.infer(model.name, tensors, outputs=outputs)
    return {name: result.as_numpy(name) for name in model.output_names}


# -- Ray Serve ---------------------------------------------------------------------------------

def test_serve_metadata_and_replicas(served: str, local: dict[str, ServedModel]) -> None:
    client = httpclient.InferenceServerClient(served)
    assert client.is_server_live() and client.is_server_ready()
    for name, model in local.items():
        assert client.is_model_ready(name)
        assert client.get_model_metadata(name) == model.metadata()
    assert client.get_model_config("dense")["max_batch_size"] == 64
    assert client.get_model_config("mlp")["max_batch_size"] == 0
    replicas = serve.status().applications["graphrt"].deployments["graphrt"].replica_states
    assert replicas == {"RUNNING": 2}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_serve_infer_matches_in_process(served: str, local: dict[str, ServedModel],
                                        binary: bool) -> None:
    client = httpclient.InferenceServerClient(served)
    rng = np.random.default_rng(1)
    cases = [("mlp", {"x": rng.standard_normal((8, 64)).astype(np.float32)})]
    cases += [("dense", {"input": rng.standard_normal((rows, 64)).astype(np.float32)})
              for rows in (1, 5, 64)]
    for _ in range(2):  # Ray spreads the requests over the two replicas
        for name, inputs in cases:
            got = infer(client, local[name], inputs, binary)
            for output, value in local[name].run(inputs).items():
                np.testing.assert_allclose(got[output], value, **TOLERANCE)


def test_serve_bad_request_then_good(served: str, cluster: int,
                                     local: dict[str, ServedModel]) -> None:
    wrong = {"x": np.zeros((8, 32), np.float32)}
    status, body = call(cluster, "POST", "/v2/models/mlp/infer", json_request(wrong))
    assert status == 400 and set(body) == {"error"} and "dimension 1" in body["error"], body
    status, body = call(cluster, "POST", "/v2/models/nothing/infer", json_request(wrong))
    assert status == 404 and "unknown model" in body["error"], body
    status, body = call(cluster, "POST", "/v2/models/dense/infer",
                        json_request({"input": np.zeros((65, 64), np.float32)}))
    assert status == 400 and "bounds" in body["error"], body
    good = {"x": np.ones((8, 64), np.float32)}
    status, body = call(cluster, "POST", "/v2/models/mlp/infer", json_request(good))
    assert status == 200, body
    (output,) = body["outputs"]
    np.testing.assert_allclose(np.reshape(output["data"], output["shape"]),
                               local["mlp"].run(good)["fused_dense_softmax"], **TOLERANCE)


def test_serve_autoscaling_under_a_prefix(served: str, cluster: int, dense: graphrt.Bundle,
                                          local: dict[str, ServedModel]) -> None:
    app = deployment(dense, names=["dense"],
                     autoscaling_config={"min_replicas": 1, "max_replicas": 2},
                     ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=16)
    serve.run(app, name="auto", route_prefix="/auto")
    try:
        wait_ready(cluster, "/auto")
        status, body = call(cluster, "GET", "/auto/v2/models/dense")
        assert status == 200 and body == local["dense"].metadata()
        inputs = {"input": np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)}
        status, body = call(cluster, "POST", "/auto/v2/models/dense/infer",
                            json_request(inputs))
        assert status == 200, body
        (output,) = body["outputs"]
        np.testing.assert_allclose(np.reshape(output["data"], output["shape"]),
                                   local["dense"].run(inputs)["output"], **TOLERANCE)
        status, body = call(cluster, "GET", "/auto/v2/models/mlp")
        assert status == 404 and "unknown model" in body["error"]
    finally:
        serve.delete("auto")


def test_deployment_arguments(dense: graphrt.Bundle) -> None:
    """Refused on the driver, before anything is deployed."""
    with pytest.raises(ArgumentError, match="2 names for 1 models"):
        deployment(MLP, names=["a", "b"])
    with pytest.raises(ArgumentError, match="named 'a'"):
        deployment([MLP, dense], names=["a", "a"])
    with pytest.raises(ArgumentError, match="not both"):
        deployment(MLP, num_replicas=2, autoscaling_config={"max_replicas": 2})
    with pytest.raises(ArgumentError, match="num_replicas"):
        deployment(MLP, num_replicas=0)
    with pytest.raises(ArgumentError, match=r"models\[1\]\).*given int 3"):
        deployment([MLP, 3])  # type: ignore[list-item]
    with pytest.raises(ArgumentError, match="no models"):
        deployment([])
    with pytest.raises(ArgumentError, match=r"\.grb bundle file's content"):
        deployment(b"not a zip")
    with pytest.raises(BundleError, match="no model at"):
        deployment(EXAMPLES / "bundles" / "missing.grb")
    with pytest.raises(ArgumentError, match="options"):
        deployment(MLP, options={"max_batch": 4})  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="port"):
        run(MLP, port=70000)


# -- Ray Data ----------------------------------------------------------------------------------

def test_data_dynamic_batch(cluster: int, dense: graphrt.Bundle,
                            local: dict[str, ServedModel]) -> None:
    """Rows of 64 values through a [batch, 64] model, stacked up to max_batch rows a run."""
    x = np.random.default_rng(3).standard_normal((200, 64)).astype(np.float32)
    ds = ray.data.from_items([{"id": i, "input": x[i]} for i in range(len(x))])
    out = ds.map_batches(Predictor, fn_constructor_kwargs={"model": dense, "max_batch": 16,
                                                           "keep_columns": ["id"]},
                         concurrency=2, batch_size=64, num_cpus=0.5)
    rows = sorted(out.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in rows] == list(range(len(x)))
    assert set(rows[0]) == {"id", "output"}
    for i, row in enumerate(rows):
        expect = local["dense"].run({"input": x[i:i + 1]})["output"][0]
        np.testing.assert_allclose(row["output"], expect, **TOLERANCE)


def test_data_fixed_shape(cluster: int, local: dict[str, ServedModel]) -> None:
    """The [8, 64] MLP: rows of 64 values are samples, 8 to a run (the last run filled up);
    rows of [8, 64] are whole runs."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((203, 64)).astype(np.float32)
    ds = ray.data.from_items([{"id": i, "x": x[i]} for i in range(len(x))])
    out = ds.map_batches(Predictor, fn_constructor_kwargs={
                             "model": str(MLP), "keep_columns": ["id"],
                             "output_columns": {"fused_dense_softmax": "probs"}},
                         concurrency=2, batch_size=60, num_cpus=0.5)
    rows = sorted(out.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in rows] == list(range(len(x)))
    model = local["mlp"]
    for i, row in enumerate(rows):
        alone = model.run({"x": np.repeat(x[i:i + 1], 8, axis=0)})["fused_dense_softmax"][0]
        np.testing.assert_allclose(row["probs"], alone, **TOLERANCE)

    whole = rng.standard_normal((12, 8, 64)).astype(np.float32)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    try:  # from_numpy's one column, "data", feeds the model's one input
        out = ray.data.from_numpy(whole).map_batches(
            Predictor, fn_constructor_kwargs={"model": str(MLP)}, concurrency=1, batch_size=5,
            num_cpus=0.5)
        got = np.stack([row["fused_dense_softmax"] for row in out.take_all()])
    finally:
        context.execution_options.preserve_order = False
    expect = np.stack([model.run({"x": sample})["fused_dense_softmax"] for sample in whole])
    np.testing.assert_allclose(got, expect, **TOLERANCE)


# -- Predictor in this process -----------------------------------------------------------------

def test_predictor_in_process(local: dict[str, ServedModel]) -> None:
    """Bundle bytes, column mapping, empty batches and the errors, without Ray's workers."""
    predictor = Predictor(CNN.read_bytes(), input_columns={"data": "image"})
    images = np.random.default_rng(5).standard_normal((2, 4, 3, 32, 32))  # float64: cast
    result = predictor({"image": images})
    cnn = load_model(CNN)
    for i in range(2):
        expect = cnn.run({"data": images[i].astype(np.float32)})
        for name, value in expect.items():
            np.testing.assert_allclose(result[name][i], value, **TOLERANCE)

    mlp = Predictor(MLP)
    empty = mlp({"x": np.zeros((0, 64), np.float32)})
    assert empty["fused_dense_softmax"].shape == (0, 10)
    with pytest.raises(InputError, match="dimension 1 is 32"):
        mlp({"x": np.zeros((3, 32), np.float32)})
    with pytest.raises(InputError, match="lacks"):
        mlp({"a": np.zeros((3, 64)), "b": np.zeros((3, 64))})
    with pytest.raises(InputError, match="cannot be cast"):
        mlp({"x": np.zeros((3, 64), np.complex64)})
    with pytest.raises(InputError, match="do not fit"):
        mlp({"x": np.zeros((3,), np.float32)})
    with pytest.raises(ArgumentError, match="batch_format"):
        mlp([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="has no input 'q'"):
        Predictor(MLP, input_columns={"q": "x"})
    with pytest.raises(ArgumentError, match="also an output column"):
        Predictor(MLP, keep_columns=["fused_dense_softmax"])
    with pytest.raises(ArgumentError, match="given int 3"):
        Predictor(3)  # type: ignore[arg-type]
    with pytest.raises(BundleError, match="no model at"):
        Predictor(EXAMPLES / "bundles" / "missing.grb")


def test_ingress_starts_with_or_without_a_lifespan(caplog: pytest.LogCaptureFixture) -> None:
    """Ray Serve runs the ingress's lifespan (which starts the batchers); an ASGI server that
    does not gets them started at the first request."""
    import asyncio

    from graphrt.serve import create_app
    from graphrt.serve.ray import _ReplicaIngress

    async def get(app: Any, path: str) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
                   "query_string": b"", "headers": [], "root_path": "", "scheme": "http",
                   "server": ("t", 80), "asgi": {"version": "3.0"}}, receive, send)
        return int(sent[0]["status"])

    async def lifespan(app: Any) -> list[str]:
        events = asyncio.Queue[dict[str, Any]]()
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            events.put_nowait({"type": kind})
        sent: list[str] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message["type"])

        await app({"type": "lifespan", "asgi": {"version": "3.0"}}, events.get, send)
        return sent

    async def scenario() -> None:
        bare = _ReplicaIngress(create_app([load_model(MLP, warm_up=False)]))
        assert await get(bare, "/v2/health/ready") == 200  # started by the request
        assert bare.app.state.graphrt.ready
        await bare.app.state.graphrt.shutdown()
        assert "ran no lifespan" in caplog.text
        caplog.clear()

        hosted = _ReplicaIngress(create_app([load_model(MLP, warm_up=False)]))
        state = hosted.app.state.graphrt
        assert await lifespan(hosted) == ["lifespan.startup.complete",
                                          "lifespan.shutdown.complete"]
        assert not state.ready  # started, then shut down by the lifespan
        assert await get(hosted, "/v2/health/ready") == 503  # and not started again
        assert "ran no lifespan" not in caplog.text

    asyncio.run(scenario())
