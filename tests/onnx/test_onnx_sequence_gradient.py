"""Sequences (resolved at conversion) and Gradient (reverse mode at conversion), against ONNX
Runtime and by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ort_compat import for_ort

import graphrt

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


def model(nodes: list[Any], inputs: dict[str, list[int]], outputs: dict[str, list[Any]],
          inits: tuple[Any, ...] = (), extra: tuple[Any, ...] = ()) -> Any:
    """A model; each output's shape may name a dim ("?") and "n" is an int64 output."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                     for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "n" else TensorProto.FLOAT,
                                       s) for n, s in outputs.items()],
        list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *extra])


def both(m: Any, feeds: dict[str, np.ndarray[Any, Any]]) -> None:
    session = ort.InferenceSession(for_ort(m).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = graphrt.from_onnx(m).create("cpu")(**feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def ints(name: str, values: list[int]) -> Any:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)] if len(values) > 1 else [],
                              values)


X = np.arange(24, dtype="float32").reshape(4, 6)


@pytest.mark.parametrize("split, keepdims", [(None, 1), (None, 0), ([1, 2, 3], 1), (4, 1)])
def test_split_to_sequence_then_at_and_length(split: Any, keepdims: int) -> None:
    inits, inputs = [ints("pos", [-1])], ["x"]
    if split is not None:
        inits.append(helper.make_tensor("s", TensorProto.INT64,
                                        [len(split)] if isinstance(split, list) else [],
                                        split if isinstance(split, list) else [split]))
        inputs.append("s")
    m = model([helper.make_node("SplitToSequence", inputs, ["seq"], axis=1, keepdims=keepdims),
               helper.make_node("SequenceAt", ["seq", "pos"], ["last"]),
               helper.make_node("SequenceLength", ["seq"], ["n"])], {"x": [4, 6]},
              {"last": ["?"] * (2 - (split is None and not keepdims)), "n": []}, tuple(inits))
    both(m, {"x": X})


@pytest.mark.parametrize("new_axis", [0, 1])
def test_construct_insert_erase_concat(new_axis: int) -> None:
    m = model([helper.make_node("SequenceConstruct", ["x", "y"], ["s0"]),
               helper.make_node("SequenceInsert", ["s0", "x", "p0"], ["s1"]),
               helper.make_node("SequenceErase", ["s1", "p1"], ["s2"]),
               helper.make_node("ConcatFromSequence", ["s2"], ["out"], axis=0,
                                new_axis=new_axis)],
              {"x": [4, 6], "y": [4, 6]}, {"out": ["?"] * (2 + new_axis)},
              (ints("p0", [0]), ints("p1", [-1])))
    both(m, {"x": X, "y": X + 100})


def test_sequence_errors_name_the_node() -> None:
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"], name="make"),
               helper.make_node("SequenceAt", ["s", "p"], ["out"], name="at")],
              {"x": [2]}, {"out": [2]}, (ints("p", [3]),))
    with pytest.raises(graphrt.ConversionError, match=r"'at'.*position 3 is out of range"):
        graphrt.from_onnx(m)
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"])], {"x": [2]}, {"s": [2]})
    with pytest.raises(graphrt.ConversionError,
                       match="output 's' is a sequence, but the model declares it a tensor"):
        graphrt.from_onnx(m)


TRAINING = helper.make_opsetid("ai.onnx.preview.training", 1)


def test_gradient_of_arithmetic_matches_the_analytic_one() -> None:
    # d = (a + b) * a / b - relu(a): dd/da = (2a + b)/b - [a > 0], dd/db = -a^2 / b^2
    m = model([helper.make_node("Add", ["a", "b"], ["c"]),
               helper.make_node("Mul", ["c", "a"], ["e"]),
               helper.make_node("Div", ["e", "b"], ["f"]),
               helper.make_node("Relu", ["a"], ["r"]),
               helper.make_node("Sub", ["f", "r"], ["d"]),
               helper.make_node("Gradient", ["a", "b"], ["da", "db"], xs=["a", "b"], y="d",
                                domain="ai.onnx.preview.training")],
              {"a": [3], "b": [1]}, {"d": [3], "da": [3], "db": [1]}, extra=(TRAINING,))
    a, b = np.array([-1.0, 2.0, 3.0], "float32"), np.array([2.0], "float32")
    d, da, db = graphrt.from_onnx(m).create("cpu")(a=a, b=b)
    np.testing.assert_allclose(d, (a + b) * a / b - np.maximum(a, 0), rtol=1e-6)
    np.testing.assert_allclose(da, (2 * a + b) / b - (a > 0), rtol=1e-6)
    np.testing.assert_allclose(db, [np.sum(-(a**2) / b**2)], rtol=1e-6)


def test_gradient_through_an_op_without_a_rule_is_refused() -> None:
    m = model([helper.make_node("Sqrt", ["a"], ["d"], name="root"),
               helper.make_node("Gradient", ["a"], ["da"], xs=["a"], y="d", name="grad",
                                domain="ai.onnx.preview.training")],
              {"a": [3]}, {"da": [3]}, extra=(TRAINING,))
    with pytest.raises(graphrt.ConversionError, match=r"'grad'.*cannot differentiate op 'sqrt'"):
        graphrt.from_onnx(m)
