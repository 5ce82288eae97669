"""Sequences as graph inputs and outputs: item ``i`` of sequence ``s`` is graph input or output
``s[i]``, its length and shapes fixed at conversion; ONNX Runtime gives the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ort_compat import for_ort

import graphrt

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import graphrt.onnx.backend as backend  # noqa: E402


def seq_info(name: str, elem: int = TensorProto.FLOAT, shape: Any = ("n", 3)) -> Any:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def sequence_model() -> Any:
    """``out = [s[0] + x, ..., s[-1] + x, x]`` and ``total = concat(s) + 1`` (axis 0)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["item", "xb"], ["summed"])], "body",
        [helper.make_tensor_value_info("item", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("xb", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("summed", TensorProto.FLOAT, ["n", 3])])
    nodes = [helper.make_node("SequenceMap", ["s", "x"], ["mapped"], body=body),
             helper.make_node("SequenceInsert", ["mapped", "x"], ["out"]),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
             helper.make_node("Add", ["cat", "one"], ["total"])]
    graph = helper.make_graph(
        nodes, "g", [seq_info("s"), helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [seq_info("out"), helper.make_tensor_value_info("total", TensorProto.FLOAT, ["t", 3])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


ITEMS = [np.arange(6, dtype="float32").reshape(2, 3), np.full((1, 3), 7, "float32")]
X = np.array([1, 2, 3], "float32")


def reference(m: Any, feeds: dict[str, Any]) -> list[Any]:
    session = ort.InferenceSession(for_ort(m).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def test_a_sequence_input_becomes_one_input_per_item_and_an_output_one_per_item() -> None:
    m = sequence_model()
    bundle = graphrt.from_onnx(m, shapes={"s": [list(a.shape) for a in ITEMS]})
    assert bundle.metadata["sequences"] == {"inputs": {"s": 2}, "outputs": {"out": 3}}
    module = bundle.create("cpu")
    assert list(module.get_input_info()["shape"])[:3] == ["s[0]", "s[1]", "x"]
    got = module(**{"s[0]": ITEMS[0], "s[1]": ITEMS[1], "x": X})
    out, total = reference(m, {"s": ITEMS, "x": X})
    assert len(got) == len(out) + 1
    for g, e in zip(got, [*out, total], strict=True):
        np.testing.assert_array_equal(g, e)
    module.set_input(**{"s[0]": ITEMS[0], "s[1]": ITEMS[1], "x": X})
    module.run()
    np.testing.assert_array_equal(module.get_output("out[1]"), out[1])


def test_the_backend_takes_and_gives_lists_and_converts_once_per_length() -> None:
    m = sequence_model()
    rep = backend.prepare(m)
    for items in (ITEMS, ITEMS[:1], [*ITEMS, ITEMS[0] * 2]):
        out, total = rep.run({"s": items, "x": X})
        e_out, e_total = reference(m, {"s": items, "x": X})
        assert isinstance(out, list) and len(out) == len(e_out)
        for g, e in zip(out, e_out, strict=True):
            np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(total, e_total)


def test_a_sequence_input_can_be_frozen_as_constants() -> None:
    m = sequence_model()
    module = graphrt.from_onnx(m, constants={"s": ITEMS}).create("cpu")
    assert not any(name.startswith("s[") for name in module.get_input_info()["shape"])
    got = module(x=X)
    out, total = reference(m, {"s": ITEMS, "x": X})
    for g, e in zip(got, [*out, total], strict=True):
        np.testing.assert_array_equal(g, e)


def test_an_empty_sequence_input_is_allowed() -> None:
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["s"], ["n"])], "g", [seq_info("s")],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (n,) = graphrt.from_onnx(m, shapes={"s": []}).create("cpu")()
    assert int(n) == 0


@pytest.mark.parametrize("shapes, message", [
    ({}, r"graph input 's' is a sequence of tensors; give the shape of each item"),
    ({"s": [2, 3]}, r"give the shape of each item"),
    ({"s": [[2, -3]]}, r"shapes\['s\[0\]'\] must be a list of non-negative ints"),
])
def test_a_sequence_input_without_item_shapes_is_a_clear_error(shapes: dict[str, Any],
                                                               message: str) -> None:
    with pytest.raises(graphrt.ConversionError, match=message):
        graphrt.from_onnx(sequence_model(), shapes=shapes)


def test_constants_for_a_sequence_must_be_a_list() -> None:
    with pytest.raises(graphrt.ConversionError, match=r"constants\['s'\] must be a list"):
        graphrt.from_onnx(sequence_model(), constants={"s": ITEMS[0]})


def test_a_declared_sequence_output_that_is_a_tensor_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [seq_info("y", shape=[3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(graphrt.ConversionError,
                       match="output 'y' is a tensor, but the model declares it a sequence"):
        graphrt.from_onnx(m)


def test_the_backend_refuses_a_tensor_fed_as_a_sequence_and_keeps_working() -> None:
    rep = backend.prepare(sequence_model())
    with pytest.raises(graphrt.InputError, match="input 's' is a sequence: give a list"):
        rep.run({"s": ITEMS[0], "x": X})
    with pytest.raises(graphrt.InputError, match=r"input 's\[1\]': not a numeric array"):
        rep.run({"s": [ITEMS[0], [object()]], "x": X})
    out, _ = rep.run({"s": ITEMS, "x": X})
    assert len(out) == 3


def test_a_loop_whose_run_time_condition_decides_a_sequence_length_freezes_it() -> None:
    """The carried sequence grows by one item per iteration, so how many ran must be known:
    the backend converts once per condition value; ``from_onnx`` asks for it by name."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("SequenceInsert", ["seq_in", "f"], ["seq_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         seq_info("seq_in", shape=[])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         seq_info("seq_out", shape=[])])
    graph = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["empty"]),
         helper.make_node("Loop", ["m", "cond", "empty"], ["seq"], body=body)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [seq_info("seq", shape=[])],
        [helper.make_tensor("m", TensorProto.INT64, [], [3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(graphrt.ConversionError, match=r"the condition.*constants=\{'cond'"):
        graphrt.from_onnx(m)
    rep = backend.prepare(m)
    assert [float(v) for v in rep.run([np.array(True)])[0]] == [0.0, 1.0, 2.0]
    assert rep.run([np.array(False)])[0] == []
