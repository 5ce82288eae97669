"""Shapes a model computes from its symbolic dimensions are traced, not guessed from samples:
products of variables (``batch * seq`` rows), reshape targets that split a merged dimension
(GPT-2's ``[batch * seq, h] -> [batch, seq, h]``) and masks expanded to ``[batch, 1, seq,
seq]`` convert once and match ONNX Runtime at every size within the bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphrt  # noqa: E402
from graphrt.onnx.convert import convert_model  # noqa: E402
from graphrt.onnx.symint import SymInt  # noqa: E402
from graphrt.schema.symbolic import parse_dim  # noqa: E402

BOUNDS = {"batch": 4, "seq": 16}


def _model() -> Any:
    """x [batch, seq, 8] flattened to [batch * seq, 8] rows for a MatMul and split back to
    [batch, seq, 6]; mask [batch, seq] expanded to [batch, 1, seq, seq]; every target shape
    computed with Shape, Gather, Mul, Unsqueeze and Concat, as exporters write them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    ints = {"zero": [0], "one": [1], "eight": [8], "six": [6], "axes12": [1, 2]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    inits.append(numpy_helper.from_array(w, "w"))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["q"], axis=0),
        helper.make_node("Mul", ["b", "q"], ["rows"]),
        helper.make_node("Concat", ["rows", "eight"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["proj"]),
        helper.make_node("Concat", ["b", "q", "six"], ["out_shape"], axis=0),
        helper.make_node("Reshape", ["proj", "out_shape"], ["y"]),
        helper.make_node("Unsqueeze", ["mask", "axes12"], ["m4"]),
        helper.make_node("Cast", ["m4"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["b", "one", "q", "q"], ["mask_shape"], axis=0),
        helper.make_node("Expand", ["mf", "mask_shape"], ["wide"]),
        helper.make_node("ReduceSum", ["wide", "one"], ["m"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes, "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 6]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 1, "seq", "seq"])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def model() -> Any:
    return _model()


@pytest.fixture(scope="module")
def bundle(model: Any) -> graphrt.Bundle:
    return graphrt.from_onnx(model, dim_bounds=BOUNDS)


def test_shape_arithmetic_converts_once_into_symbolic_ops(model: Any,
                                                         bundle: graphrt.Bundle) -> None:
    graph = bundle.graph
    assert graph.is_dynamic
    dims = {str(d) for entry in graph.entries for d in (entry.dims or ()) if not
            isinstance(d, int)}
    assert "batch * seq" in dims  # the flattened rows: a product, not an affine fit
    lib = convert_model(model, dim_bounds=BOUNDS).emitted.lib
    ops = {step["op"] for function in lib["functions"].values() for step in function["body"]}
    assert {"reshape_symbolic", "broadcast_to_symbolic"} <= ops


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 3), (3, 7), (4, 16), (1, 16), (4, 1)])
def test_every_size_within_the_bounds_matches_onnx_runtime(model: Any, bundle: graphrt.Bundle,
                                                           batch: int, seq: int) -> None:
    rng = np.random.default_rng(batch * 100 + seq)
    x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
    mask = rng.integers(0, 2, (batch, seq)).astype(np.int64)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want_y, want_m = session.run(None, {"x": x, "mask": mask})
    for device in ("cpu", "sim"):
        y, m = bundle.create(device)(x=x, mask=mask)
        np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(m), want_m)


def test_a_size_past_the_bound_is_refused_by_name(bundle: graphrt.Bundle) -> None:
    x = np.zeros((2, 17, 8), np.float32)
    with pytest.raises(graphrt.InputError, match="seq"):
        bundle.create("cpu")(x=x, mask=np.zeros((2, 17), np.int64))


def test_symint_keeps_products_and_exact_quotients() -> None:
    batch, seq = SymInt.variable("batch", 8), SymInt.variable("seq", 64)
    rows = batch * seq * 4
    assert (rows, rows.text) == (2048, "4 * batch * seq")
    assert type(rows // (seq * 2)) is SymInt and (rows // (seq * 2)).text == "2 * batch"
    assert rows // (batch * seq * 4) == 1 and type(rows // (batch * seq * 4)) is int
    assert rows % seq == 0 and (seq + 1) % 2 == 1
    half = (seq + 1) // 2  # not a polynomial: kept whole, still exact
    assert (int(half), half.text) == (32, "((seq + 1) // 2)")
    assert parse_dim(half.text).evaluate({"seq": 9}) == 5
    assert (seq - seq) == 0 and type(seq - seq) is int
    assert max(batch, 1) is batch  # broadcasting picks the object, keeping the expression


def test_symbolic_ops_refuse_what_they_cannot_evaluate() -> None:
    op = get_op("reshape_symbolic")
    x, ref = TensorType((6,), "float32"), TensorType((2, 3), "int64")
    with pytest.raises(OpError, match="uses \\['seq'\\]"):
        op.infer([x, ref], op.attrs(shape=["batch", "seq"], dims={"batch": (1, 0)}),
                 [None, None])
    with pytest.raises(OpError, match="does not exist"):
        op.infer([x, ref], op.attrs(shape=["batch"], dims={"batch": (2, 0)}), [None, None])
    with pytest.raises(OpError, match="elements"):
        op.infer([x, ref], op.attrs(shape=["batch", 2], dims={"batch": (1, 0)}),
                 [None, None])
    wide = get_op("broadcast_to_symbolic")
    with pytest.raises(OpError, match="does not broadcast"):
        wide.infer([TensorType((3,), "float32"), ref],
                   wide.attrs(shape=["batch"], dims={"batch": (1, 0)}), [None, None])


def _causal_model() -> Any:
    """Self-attention scores over x [batch, seq, 4] under a causal mask built the way
    TorchScript exports of transformers build it: ``Range(0, seq)`` from ``Shape``, counted
    from the end and compared with itself, plus a bias of those positions read as data (at a
    smaller size it is no prefix of the bound's table, so it must be computed per run)."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), k)
             for k, v in {"one": 1, "zero": 0, "ax0": [0], "ax1": [1]}.items()]
    inits.append(numpy_helper.from_array(np.array(-1e4, np.float32), "low"))
    inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "tenth"))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["q"], axis=0),
        helper.make_node("Range", ["zero", "q", "one"], ["r"]),
        helper.make_node("Sub", ["q", "one"], ["last"]),
        helper.make_node("Sub", ["last", "r"], ["back"]),  # no prefix of the bound's table
        helper.make_node("Unsqueeze", ["back", "ax1"], ["rows"]),
        helper.make_node("Unsqueeze", ["back", "ax0"], ["cols"]),
        helper.make_node("LessOrEqual", ["cols", "rows"], ["causal"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["x", "xt"], ["scores"]),
        helper.make_node("Where", ["causal", "scores", "low"], ["masked"]),
        helper.make_node("Cast", ["back"], ["pos"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pos", "tenth"], ["bias"]),
        helper.make_node("Add", ["masked", "bias"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "causal", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "seq"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_mask_built_from_a_size_is_computed_at_run_time() -> None:
    model = _causal_model()
    lib = convert_model(model, dim_bounds=BOUNDS).emitted.lib
    ops = {step["op"] for function in lib["functions"].values() for step in function["body"]}
    assert {"shape_of", "arange"} <= ops  # made per run from the input's shape, not folded
    bundle = graphrt.from_onnx(model, dim_bounds=BOUNDS)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    modules = {device: bundle.create(device) for device in ("cpu", "sim")}
    rng = np.random.default_rng(3)
    for batch, seq in [(1, 1), (2, 5), (4, 16), (3, 9)]:
        x = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        for device, module in modules.items():
            module.set_input(x=x)
            (y,) = module(x=x)
            np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{device} at batch={batch}, seq={seq}")
    # arange's shape function reads its three scalars on the host: on the accelerator, that
    # is all that crosses (24 bytes), whatever the sequence length
    report = modules["sim"].profile(repeat=1)
    shape_runs = [node for node in report.nodes if node.kind == "shape"]
    assert shape_runs and {node.bytes for node in shape_runs} == {24}


def test_a_triangular_mask_of_a_size_is_cut_from_the_bounds_table() -> None:
    """A Trilu mask at any size is the leading block of the mask at the bound, so the
    conversion keeps the bound's table and slices it per run (no steps to remake it)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["ones"],
                         value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Trilu", ["ones"], ["tri"]),
        helper.make_node("Mul", ["x", "tri"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "trilu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", "seq"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    lib = convert_model(model, dim_bounds={"seq": 6}).emitted.lib
    ops = {step["op"] for function in lib["functions"].values() for step in function["body"]}
    assert "slice_like" in ops and "arange" not in ops
    module = graphrt.from_onnx(model, dim_bounds={"seq": 6}).create("cpu")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for seq in (1, 3, 6):
        x = np.arange(seq * seq, dtype=np.float32).reshape(seq, seq)
        np.testing.assert_array_equal(np.asarray(module(x=x)[0]),
                                      session.run(None, {"x": x})[0])


def test_shape_of_and_arange_say_what_they_need() -> None:
    shape_of, arange = get_op("shape_of"), get_op("arange")
    x = TensorType((2, 3, 4), "float32")
    assert shape_of.infer([x], shape_of.attrs(start=1), [None]) == [
        TensorType((2,), "int64")]
    out = np.empty(2, np.int64)
    shape_of.positional(np, shape_of.attrs(start=1), 1)(np.zeros((2, 3, 4)), out)
    assert out.tolist() == [3, 4]
    scalar = TensorType((), "int64")
    with pytest.raises(OpError, match="needs the values"):
        arange.infer([scalar] * 3, arange.attrs(), [None] * 3)
    with pytest.raises(OpError, match="delta is 0"):
        arange.infer([scalar] * 3, arange.attrs(), [np.array(0), np.array(3), np.array(0)])
    with pytest.raises(OpError, match="must be one integer"):
        arange.infer([TensorType((), "float32"), scalar, scalar], arange.attrs(),
                     [np.array(0.0), np.array(3), np.array(1)])
    bounds = [np.array(7), np.array(0), np.array(-2)]
    (found,) = arange.infer([scalar] * 3, arange.attrs(), bounds)
    values = np.empty(found.shape, np.int64)
    arange.positional(np, arange.attrs(), 3)(*bounds, values)
    assert values.tolist() == [7, 5, 3, 1]  # ONNX Range: start + delta * i, i < ceil(n)


def test_min_and_max_are_dimensions_with_their_bounds() -> None:
    expr = parse_dim("min(300, count) * 4")
    assert expr.evaluate({"count": 12}) == 48 and expr.evaluate({"count": 999}) == 1200
    assert expr.bounds({"count": (0, 3234)}) == (0, 1200)
    assert parse_dim("max(n, 2)").bounds({"n": (1, 8)}) == (2, 8)
    assert parse_dim("min").is_variable  # a variable may still be called min
    with pytest.raises(ValueError, match="two arguments"):
        parse_dim("min(n)")
    from graphrt.onnx.symint import sym_min

    found = SymInt.variable("count", 3234)
    assert sym_min(300, found).text == "min(300, count)" and sym_min(found, found) is found
