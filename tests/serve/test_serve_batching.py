"""Dynamic batching in this process, where every run can be counted: what merges, what does not,
how a batch is split at ``max_batch``, and how a bad request in a batch spares the others.
Also the batch axis a model gets, serving on the simulated accelerator, the in-process
:class:`~graphrt.serve.Server` and the ``graphrt serve`` command line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphrt  # noqa: E402
from graphrt.serve import BatchAxis, Batcher, Server, load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _two_dims() -> Any:
    """``relu(x @ w)`` on x [batch, seq, 8]: two symbolic dimensions."""
    weight = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")], "two_dims",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return graphrt.from_onnx(model, dim_bounds={"batch": 8, "seq": 16})


@pytest.fixture(scope="module")
def two_dims() -> Any:
    return load_model(_two_dims(), name="two_dims")


@pytest.fixture(scope="module")
def encoder(model_files: dict[str, Path]) -> Any:
    return load_model(model_files["encoder"], dim_bounds={"batch": 8}, name="encoder")


def _submit_all(batcher: Batcher, requests: list[dict[str, Any]]) -> list[Any]:
    async def main() -> list[Any]:
        outcomes = await asyncio.gather(*(batcher.submit(r) for r in requests),
                                        return_exceptions=True)
        await batcher.close()
        return list(outcomes)
    return asyncio.run(main())


def _runs(batcher: Batcher) -> list[float]:
    """(samples, runs) of the model's batch-size histogram."""
    labels = {"model": batcher.model.name}
    read = batcher.metrics.registry.get_sample_value
    return [read("graphrt_batch_size_sum", labels) or 0.0,
            read("graphrt_batch_size_count", labels) or 0.0]


def test_requests_that_wait_together_run_once(two_dims: Any) -> None:
    rng = np.random.default_rng(1)
    requests = [{"x": rng.standard_normal((1, 5, 8)).astype(np.float32)} for _ in range(8)]
    batcher = Batcher(two_dims, max_delay_s=5.0)  # full at 8 (the bound): no waiting
    outcomes = _submit_all(batcher, requests)
    assert _runs(batcher) == [8, 1]
    for request, outcome in zip(requests, outcomes, strict=True):
        np.testing.assert_allclose(outcome["y"], two_dims.run(request)["y"], rtol=1e-6)


def test_other_shapes_past_the_batch_run_apart(two_dims: Any) -> None:
    rng = np.random.default_rng(2)
    requests = [{"x": rng.standard_normal((n, seq, 8)).astype(np.float32)}
                for n, seq in [(1, 3), (2, 5), (1, 3), (2, 3), (1, 5)]]
    batcher = Batcher(two_dims, max_delay_s=0.2)
    outcomes = _submit_all(batcher, requests)
    assert _runs(batcher) == [7, 2]  # seq 3: 1 + 1 + 2 rows; seq 5: 2 + 1 rows
    for request, outcome in zip(requests, outcomes, strict=True):
        assert outcome["y"].shape == (*request["x"].shape[:2], 4)
        np.testing.assert_allclose(outcome["y"], two_dims.run(request)["y"], rtol=1e-6)


def test_max_batch_splits_a_queue(two_dims: Any) -> None:
    rng = np.random.default_rng(3)
    requests = [{"x": rng.standard_normal((1, 2, 8)).astype(np.float32)} for _ in range(10)]
    batcher = Batcher(two_dims, max_batch=4, max_delay_s=0.2)
    _submit_all(batcher, requests)
    assert _runs(batcher) == [10, 3]
    single = Batcher(two_dims, max_batch=1, max_delay_s=0.2)
    _submit_all(single, requests[:3])
    assert _runs(single) == [3, 3]


def test_a_bad_request_in_a_batch_spares_the_others(encoder: Any) -> None:
    rng = np.random.default_rng(4)

    def good() -> dict[str, Any]:
        return {"input_ids": rng.integers(0, 100, (1, 16)),
                "attention_mask": np.ones((1, 16), np.float32)}

    out_of_vocab = {"input_ids": np.full((1, 16), 10**6), "attention_mask":
                    np.ones((1, 16), np.float32)}
    two_ways = {"input_ids": rng.integers(0, 100, (1, 16)),
                "attention_mask": np.ones((2, 16), np.float32)}
    requests = [good(), out_of_vocab, good(), two_ways, good()]
    outcomes = _submit_all(Batcher(encoder, max_delay_s=0.2), requests)
    assert isinstance(outcomes[1], graphrt.ExecutionError)
    assert "fused_take_add" in str(outcomes[1])
    assert isinstance(outcomes[3], graphrt.InputError)
    for i in (0, 2, 4):
        np.testing.assert_allclose(outcomes[i]["last_hidden_state"],
                                   encoder.run(requests[i])["last_hidden_state"], rtol=1e-5,
                                   atol=1e-6)


def test_a_full_queue_refuses_at_once(two_dims: Any) -> None:
    requests = [{"x": np.zeros((1, 2, 8), np.float32)} for _ in range(6)]
    outcomes = _submit_all(Batcher(two_dims, max_queue=2, max_batch=1), requests)
    refused = [o for o in outcomes if isinstance(o, graphrt.RequestError)]
    assert refused and all(o.status == 503 for o in refused)
    assert sum(isinstance(o, dict) for o in outcomes) >= 2


def test_a_request_timing_out_in_the_queue_leaves_it(two_dims: Any) -> None:
    x = {"x": np.ones((1, 2, 8), np.float32)}
    batcher = Batcher(two_dims, max_batch=1)

    async def main() -> list[Any]:
        running = asyncio.ensure_future(batcher.submit(x))
        await asyncio.sleep(0)
        ahead = asyncio.ensure_future(batcher.submit(dict(x=x["x"].copy())))  # `late` is
        late = asyncio.ensure_future(batcher.submit(dict(x=x["x"].copy()),  # looked for
                                                    timeout_s=1e-6))  # past it
        outcomes = await asyncio.gather(running, late, ahead, return_exceptions=True)
        assert batcher.queued == 0
        await batcher.close()
        return list(outcomes)

    running, late, ahead = asyncio.run(main())
    assert isinstance(late, graphrt.RequestError) and late.status == 504
    want = two_dims.run(x)["y"]
    np.testing.assert_array_equal(running["y"], want)
    np.testing.assert_array_equal(ahead["y"], want)


def test_the_batch_axis_of_a_model(two_dims: Any, model_files: dict[str, Path]) -> None:
    assert two_dims.batch == BatchAxis("batch", 8)
    assert load_model(_two_dims(), max_batch=3, warm_up=False).batch == BatchAxis("batch", 3)
    assert load_model(_two_dims(), max_batch=1, warm_up=False).batch is None
    assert load_model(model_files["mlp"], warm_up=False).batch is None  # static [8, 64]
    assert load_model(model_files["slow"], warm_up=False).batch is None


def test_models_serve_on_the_simulated_accelerator(model_files: dict[str, Path],
                                                   local: dict[str, Any]) -> None:
    for name in ("mlp", "cnn", "dense"):
        on_sim = load_model(model_files[name], device_spec="sim", dim_bounds={"batch": 8})
        assert on_sim.device == graphrt.sim(0)
        from serve_harness import sample_inputs

        inputs = sample_inputs(name, np.random.default_rng(5), batch=2)
        got = on_sim.run(inputs)
        for output, value in local[name].run(inputs).items():
            assert type(got[output]) is np.ndarray
            np.testing.assert_allclose(got[output], value, rtol=1e-5, atol=1e-6)


def test_load_model_refuses_what_it_cannot_load(tmp_path: Path) -> None:
    with pytest.raises(graphrt.BundleError, match="no model at"):
        load_model(tmp_path / "missing.grb")
    with pytest.raises(graphrt.ArgumentError, match="expected a path or a Bundle"):
        load_model(42)  # type: ignore[arg-type]


def test_server_in_a_background_thread(model_files: dict[str, Path]) -> None:
    model = load_model(model_files["mlp"])
    with Server([model], port=0) as server:
        assert server.port != 0
        with urllib.request.urlopen(f"{server.url}/v2/models/mlp/ready") as reply:
            assert reply.status == 200
    with pytest.raises(graphrt.GraphrtError, match="two models are named 'mlp'"):
        Server([model, model])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphrt", "serve", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_command_line_errors() -> None:
    assert "--max-delay-ms" in _cli("--help").stdout
    usage = _cli("examples/bundles/mlp", "--max-delay-ms", "soon")
    assert usage.returncode == 2
    assert "must be a finite number of milliseconds >= 0, given 'soon'" in usage.stderr
    names = _cli("examples/bundles/mlp", "--name", "a", "--name", "b")
    assert names.returncode == 2 and "2 --name options for 1 models" in names.stderr
    missing = _cli("no/such/model.grb")
    assert missing.returncode == 1
    assert "BundleError: no model at no/such/model.grb" in missing.stderr


def test_without_the_serve_extra_the_import_says_what_to_install() -> None:
    code = ("import sys; sys.modules['starlette'] = None\n"
            "try:\n    import graphrt.serve\n"
            "except Exception as err:\n    print(type(err).__name__, err)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert "GraphrtError graphrt.serve needs starlette" in done.stdout, done
    assert "pip install 'graphrt[serve]'" in done.stdout


def test_a_model_whose_tensors_the_protocol_cannot_name_is_refused_by_name() -> None:
    """float8 has no Open Inference Protocol datatype: loading says so, not a KeyError."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)], "f8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    with pytest.raises(graphrt.BundleError, match=r"'y' is float8_e4m3fn.*no datatype"):
        load_model(graphrt.from_onnx(model), name="f8", warm_up=False)
