"""Running one ONNX model through graphrt, ONNX Runtime and ONNX's reference evaluator, for the
ONNX frontend's differential tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ort_compat import for_ort, ort_ir_version

import graphrt

ort = pytest.importorskip("onnxruntime")
reference = pytest.importorskip("onnx.reference")


def run_graphrt(model: Any, data: dict[str, np.ndarray],
                device: graphrt.Device | None = None) -> list[np.ndarray]:
    """``model`` converted by ``graphrt.from_onnx`` and run once on ``device`` (cpu)."""
    module = graphrt.from_onnx(model).create(device or graphrt.cpu(0))
    return [np.array(out) for out in module(**data)]


def run_ort(model: Any, data: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run by ONNX Runtime on its CPU provider (at an IR version it reads)."""
    session = ort.InferenceSession(for_ort(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, data))


def run_reference(model: Any, data: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run by ONNX's reference evaluator (where ONNX Runtime departs from the spec)."""
    return list(reference.ReferenceEvaluator(model).run(None, data))


def node_model(op: str, data: dict[str, np.ndarray], consts: dict[str, np.ndarray | None],
               opset: int, n_outputs: int = 1, **attrs: Any) -> Any:
    """A one-node model: ``data`` are graph inputs, ``consts`` initializers (None: omitted)."""
    import onnx
    from onnx import TensorProto, helper

    names = [*data, *consts]
    inputs = [name if not (name in consts and consts[name] is None) else "" for name in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, inputs, outputs, name=f"my_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in data.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()
         if v is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    first = next(iter(data.values()), None)
    elem = TensorProto.FLOAT if first is None else helper.np_dtype_to_tensor_dtype(first.dtype)
    return typed(model, elem)


def declared_model(op: str, inputs: dict[str, tuple[list[int], int]], consts: dict[str, Any],
                   opset: int, outputs: int = 1, domain: str = "", **attrs: Any) -> Any:
    """A one-node model whose graph inputs only declare their shapes (no data anywhere)."""
    import onnx
    from onnx import helper, numpy_helper

    node = helper.make_node(op, [*inputs, *consts], [f"y{i}" for i in range(outputs)],
                            name=f"hostile_{op.lower()}", domain=domain, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, elem, shape) for k, (shape, elem) in inputs.items()],
        [onnx.ValueInfoProto(name=f"y{i}") for i in range(outputs)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return typed(helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)],
                                   ir_version=8), 1)  # FLOAT


def typed(model: Any, elem: int) -> Any:
    """``model`` with its outputs typed by ONNX's shape inference; an output it cannot type (a
    data-dependent shape, an invalid node) gets ``elem`` and a shape of unknown rank."""
    import onnx

    model = onnx.shape_inference.infer_shapes(model)
    for output in model.graph.output:
        if not output.type.tensor_type.elem_type:
            output.type.tensor_type.elem_type = elem
        if not output.type.tensor_type.HasField("shape"):
            output.type.tensor_type.shape.SetInParent()
    return model


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Same dtype and shape; equal integers and booleans, floats within the tolerances (NaN
    where the other has NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (
        got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True)
