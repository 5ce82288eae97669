"""Every dynamic model runs at every batch from 1 to its bound, on cpu and on sim: the example
graph with a symbolic batch, and converted ONNX models with a dynamic batch, each batch against
ONNX Runtime. A kernel's workspace need not grow with the batch (the reference depthwise
convolution's accumulator blocks do not), so planning at the bound alone once failed every
batch of a MobileNetV2 but the bound on sim; scratch is now sized for every admissible shape
(``graphrt/executor/workspace_bounds.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.executor.workspace_bounds import widest_scratch
from graphrt.lib import Lowering, TensorType
from tests.conftest import MODELS

onnx = pytest.importorskip("onnx")
from onnx_harness import run_ort  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEVICES = [graphrt.cpu(0), graphrt.sim(0)]


def _builders() -> Any:
    sys.path.insert(0, str(ROOT / "examples" / "onnx"))
    try:
        import models
    finally:
        sys.path.remove(str(ROOT / "examples" / "onnx"))
    return models


def _converted() -> dict[str, tuple[Any, int]]:
    models = _builders()
    return {
        "mobilenet_v2": (models.mobilenet_v2(symbolic=True), 8),
        "resnet18": (models.resnet18(symbolic=True, image=64), 4),
        "bert_encoder": (models.bert_encoder(seq=16, layers=2, hidden=64, heads=4, vocab=200,
                                             symbolic=["batch"]), 8),
        "mlp": (models.mlp(batch="batch", width=64, layers=3), 16),
    }


CONVERTED = _converted()


def _inputs(model: Any, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    data = {}
    for value in model.graph.input:
        shape = [batch if d.dim_param else d.dim_value
                 for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            data[value.name] = rng.integers(0, 200, shape)
        else:
            data[value.name] = rng.standard_normal(shape).astype(np.float32)
    if "attention_mask" in data:
        data["attention_mask"] = (rng.random(data["attention_mask"].shape) > 0.2).astype(
            np.float32)
    return data


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("name", list(CONVERTED))
def test_converted_model_runs_at_every_batch(name: str, device: graphrt.Device) -> None:
    model, bound = CONVERTED[name]
    module = graphrt.from_onnx(model, dim_bounds={"batch": bound}).create(device)
    rng = np.random.default_rng(bound)
    for batch in range(1, bound + 1):
        data = _inputs(model, batch, rng)
        got = [np.asarray(graphrt.params.to_host("out", y)) for y in module(**data)]
        want = run_ort(model, data)
        for ours, theirs in zip(got, want, strict=True):
            assert ours.shape == theirs.shape, (name, batch)
            np.testing.assert_allclose(ours, theirs, rtol=2e-3, atol=2e-3,
                                       err_msg=f"{name} at batch {batch} on {device}")


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_example_graph_runs_at_every_batch(device: graphrt.Device) -> None:
    model = MODELS / "mlp_dynamic"
    module = graphrt.create(model / "graph.json",
                            graphrt.Library.from_json(model / "lib.json"), device)
    shapes = module.get_input_info()["shape"]
    rng = np.random.default_rng(0)
    module.load_params({name: rng.standard_normal(shape).astype(np.float32) / 8
                        for name, shape in shapes.items() if name != "x"})
    bound = module.graph.shape_vars["n"].max
    for n in range(1, bound + 1):
        (probs,) = module(x=rng.standard_normal((n, 64)).astype(np.float32))
        host = graphrt.params.to_host("probs", probs)
        assert host.shape == (n, 10)
        np.testing.assert_allclose(host.sum(axis=1), 1, atol=1e-5)


def _lowering(resize: Any) -> Lowering:
    return Lowering(calls=(), arity=2, intermediates=(TensorType((8, 4), "float32"),),
                    lifetimes=((0, 0),), resize=resize)


def test_scratch_is_sized_for_the_widest_admissible_shape() -> None:
    graph = graphrt.load_graph(MODELS / "mlp_dynamic" / "graph.json")
    node = next(n for n in graph.nodes if n.op != "null")
    seen = []

    def resize(types: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
        n = types[0].shape[0]
        seen.append(n)
        return (TensorType((n * (40 // n),), "float32"),)  # 40 floats at n = 1, 32 at 8

    widened = widest_scratch(graph, node, _lowering(resize))
    assert sorted(set(seen)) == list(range(1, graph.shape_vars["n"].max + 1))
    assert widened.nbytes() == (40 * 4,)
    assert widest_scratch(graph, node, _lowering(None)).nbytes() == (8 * 4 * 4,)

    def refusing(types: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
        if types[0].shape[0] % 2:
            raise graphrt.GraphFormatError("odd sizes never run")
        return (TensorType((1,), "float32"),)

    assert widest_scratch(graph, node, _lowering(refusing)).nbytes() == (8 * 4 * 4,)
