"""ONNX tensor and shape ops: graphrt against ONNX Runtime (and ONNX's reference implementation
where ONNX Runtime lacks an op or departs from the spec), across the opsets where each op
changed; zero-size and 0-d tensors end to end on cpu and sim; error paths; and the new standard
ops of ``graphrt/lib/ops/indexing.py`` against numpy on cpu and sim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx_harness import node_model as make_model
from onnx_harness import run_graphrt, run_ort, run_reference, typed
from ops_harness import run_op
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import graphrt.onnx.backend as backend  # noqa: E402
from graphrt.onnx import convert_model  # noqa: E402

RNG = np.random.default_rng(11)
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def check(model: Any, data: dict[str, np.ndarray], oracle: Any = run_ort,
          device: graphrt.Device | None = None) -> list[np.ndarray]:
    got, want = run_graphrt(model, data, device), oracle(model, data)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return got


# ---------------------------------------------------------------------------------------------
# ONNX ops against ONNX Runtime, per opset

X = f32(2, 3, 4)
H = f32(4, 5).astype(np.float16)
SEQ = f32(4, 3, 2)

# (id, op, opset, graph inputs, initializers, attributes, outputs, oracle)
Case = tuple[str, str, int, dict[str, np.ndarray], dict[str, np.ndarray | None],
             dict[str, Any], int, Any]
CASES: list[Case] = [
    # Reshape: 0 copies, -1 infers; allowzero from 14
    ("reshape-7", "Reshape", 7, {"x": X}, {"s": i64(0, -1)}, {}, 1, run_ort),
    ("reshape-13", "Reshape", 13, {"x": X}, {"s": i64(4, 0, -1)}, {}, 1, run_ort),
    ("reshape-14-allowzero", "Reshape", 14, {"x": np.zeros((0, 3), np.float32)},
     {"s": i64(3, 0)}, {"allowzero": 1}, 1, run_ort),
    ("reshape-14-copyzero", "Reshape", 14, {"x": np.zeros((0, 3), np.float32)},
     {"s": i64(0, 3, 1)}, {}, 1, run_ort),
    ("reshape-21-f16", "Reshape", 21, {"x": H}, {"s": i64(-1)}, {}, 1, run_ort),
    # Transpose
    ("transpose-default", "Transpose", 7, {"x": X}, {}, {}, 1, run_ort),
    ("transpose-perm", "Transpose", 13, {"x": X}, {}, {"perm": [1, 2, 0]}, 1, run_ort),
    ("transpose-f16", "Transpose", 21, {"x": H}, {}, {}, 1, run_ort),
    # Squeeze / Unsqueeze: attribute before 13, input from 13
    ("squeeze-7-all", "Squeeze", 7, {"x": f32(1, 3, 1)}, {}, {}, 1, run_ort),
    ("squeeze-11-neg", "Squeeze", 11, {"x": f32(1, 3, 1)}, {}, {"axes": [-1]}, 1, run_ort),
    ("squeeze-13-input", "Squeeze", 13, {"x": f32(1, 3, 1)}, {"a": i64(0)}, {}, 1, run_ort),
    ("squeeze-13-none", "Squeeze", 13, {"x": f32(1, 3, 1)}, {}, {}, 1, run_ort),
    ("unsqueeze-7", "Unsqueeze", 7, {"x": f32(3, 4)}, {}, {"axes": [0, 3]}, 1, run_ort),
    ("unsqueeze-11-neg", "Unsqueeze", 11, {"x": f32(3, 4)}, {}, {"axes": [-1]}, 1, run_ort),
    ("unsqueeze-13-input", "Unsqueeze", 13, {"x": f32(3, 4)}, {"a": i64(2, 0)}, {}, 1,
     run_ort),
    ("unsqueeze-13-scalar", "Unsqueeze", 13, {"x": np.array(2.5, np.float32)}, {"a": i64(0)},
     {}, 1, run_ort),
    # Expand (bidirectional), Tile
    ("expand-8", "Expand", 8, {"x": f32(3, 1)}, {"s": i64(2, 1, 4)}, {}, 1, run_ort),
    ("expand-13-smaller", "Expand", 13, {"x": f32(2, 3, 1)}, {"s": i64(1, 5)}, {}, 1, run_ort),
    ("tile-7", "Tile", 7, {"x": f32(2, 3)}, {"r": i64(2, 1)}, {}, 1, run_ort),
    ("tile-13-zero", "Tile", 13, {"x": f32(2, 3)}, {"r": i64(0, 3)}, {}, 1, run_ort),
    # Concat (negative axis from 11)
    ("concat-7", "Concat", 7, {"a": f32(2, 3), "b": f32(1, 3)}, {}, {"axis": 0}, 1, run_ort),
    ("concat-13-neg", "Concat", 13, {"a": f32(2, 3), "b": f32(2, 1), "c": f32(2, 0)}, {},
     {"axis": -1}, 1, run_ort),
    ("concat-13-f16", "Concat", 13, {"a": H, "b": H}, {}, {"axis": 1}, 1, run_ort),
    # Split: attribute split before 13, input from 13, num_outputs (uneven) at 18
    ("split-7-attr", "Split", 7, {"x": f32(6, 2)}, {}, {"split": [1, 5]}, 2, run_ort),
    ("split-11-equal-neg", "Split", 11, {"x": f32(2, 6)}, {}, {"axis": -1}, 3, run_ort),
    ("split-13-input", "Split", 13, {"x": f32(2, 6)}, {"s": i64(2, 0, 4)}, {"axis": 1}, 3,
     run_ort),
    ("split-18-uneven", "Split", 18, {"x": f32(7, 2)}, {}, {"num_outputs": 3}, 3, run_ort),
    # Slice: attributes before 10, inputs from 10 (clamping, negative steps, INT limits)
    ("slice-7-attrs", "Slice", 7, {"x": X}, {}, {"starts": [1, -3], "ends": [1000, -1],
                                                  "axes": [1, 2]}, 1, run_ort),
    ("slice-10-inputs", "Slice", 10, {"x": X}, {"s": i64(0, 1), "e": i64(1, 3),
                                                "a": i64(0, 2), "t": i64(1, 2)}, {}, 1,
     run_ort),
    ("slice-13-negstep", "Slice", 13, {"x": X},
     {"s": i64(I64_MAX, -1), "e": i64(I64_MIN, -100), "a": i64(2, 1), "t": i64(-1, -2)}, {},
     1, run_ort),
    ("slice-13-start-before", "Slice", 13, {"x": X},
     {"s": i64(-100), "e": i64(I64_MIN), "a": i64(2), "t": i64(-1)}, {}, 1, run_ort),
    ("slice-13-empty", "Slice", 13, {"x": X}, {"s": i64(3), "e": i64(1), "a": i64(2)}, {}, 1,
     run_ort),
    ("slice-13-f16", "Slice", 13, {"x": H}, {"s": i64(1), "e": i64(-1)}, {}, 1, run_ort),
    # Gather (negative indices), GatherElements, GatherND (batch_dims from 12)
    ("gather-7", "Gather", 7, {"x": X}, {"i": i64(2, 0)}, {"axis": 1}, 1, run_ort),
    ("gather-13-neg", "Gather", 13, {"x": X, "i": np.array([[-1, 0], [1, -4]], np.int64)},
     {}, {"axis": -1}, 1, run_ort),
    ("gather-13-scalar", "Gather", 13, {"x": H}, {"i": np.array(-2, np.int64)}, {}, 1,
     run_ort),
    ("gatherelements-13", "GatherElements", 13,
     {"x": X, "i": np.array([[[0, -1, 2]], [[1, 1, -3]]], np.int64)}, {}, {"axis": 2}, 1,
     run_ort),
    ("gathernd-11", "GatherND", 11, {"x": X, "i": np.array([[1, 2], [0, -1]], np.int64)}, {},
     {}, 1, run_ort),
    ("gathernd-12-batch", "GatherND", 12,
     {"x": X, "i": np.array([[[2, 1]], [[0, 3]]], np.int64)}, {}, {"batch_dims": 1}, 1,
     run_ort),
    # Scatter (9..10), ScatterElements, ScatterND with reductions by opset
    ("scatter-9", "Scatter", 9, {"x": f32(3, 3), "i": np.array([[1, 0, 2]], np.int64),
                                 "u": f32(1, 3)}, {}, {"axis": 0}, 1, run_ort),
    ("scatterelements-11-neg", "ScatterElements", 11,
     {"x": f32(3, 4), "i": np.array([[-1, 0], [1, 2]], np.int64), "u": f32(2, 2)}, {},
     {"axis": 1}, 1, run_ort),
    ("scatterelements-16-add-dup", "ScatterElements", 16,
     {"x": f32(2, 5), "i": np.array([[1, 1, 3, 1]], np.int64), "u": f32(1, 4)}, {},
     {"axis": 1, "reduction": "add"}, 1, run_ort),
    ("scatterelements-16-mul", "ScatterElements", 16,
     {"x": f32(4, 2), "i": np.array([[0, 3], [0, 3]], np.int64), "u": f32(2, 2)}, {},
     {"reduction": "mul"}, 1, run_ort),
    ("scatterelements-18-max", "ScatterElements", 18,
     {"x": f32(4, 2), "i": np.array([[0, 3], [0, 3], [2, 3]], np.int64), "u": f32(3, 2)}, {},
     {"reduction": "max"}, 1, run_ort),
    ("scatterelements-18-min-int", "ScatterElements", 18,
     {"x": np.arange(8, dtype=np.int64).reshape(4, 2),
      "i": np.array([[0, 3], [0, 3]], np.int64), "u": np.array([[-5, 9], [3, -2]], np.int64)},
     {}, {"reduction": "min"}, 1, run_ort),
    ("scatternd-11", "ScatterND", 11, {"x": f32(4, 3), "i": np.array([[2], [0]], np.int64),
                                       "u": f32(2, 3)}, {}, {}, 1, run_ort),
    ("scatternd-16-add-dup", "ScatterND", 16,
     {"x": f32(4, 3), "i": np.array([[1, 2], [1, 2], [-1, 0]], np.int64), "u": f32(3)}, {},
     {"reduction": "add"}, 1, run_ort),
    ("scatternd-18-min", "ScatterND", 18,
     {"x": f32(2, 2, 2), "i": np.array([[[0], [0]], [[1], [0]]], np.int64),
      "u": f32(2, 2, 2, 2)}, {}, {"reduction": "min"}, 1, run_ort),
    # Pad: attributes before 11, inputs from 11, axes at 18, wrap at 19, negative pads crop
    ("pad-7-constant", "Pad", 7, {"x": f32(2, 3)}, {}, {"pads": [1, 0, 0, 2], "value": 1.5},
     1, run_ort),
    ("pad-7-reflect", "Pad", 7, {"x": f32(3, 4)}, {}, {"pads": [1, 2, 2, 1],
                                                       "mode": "reflect"}, 1, run_ort),
    ("pad-11-edge", "Pad", 11, {"x": f32(3, 4)}, {"p": i64(0, 3, 2, 0)}, {"mode": "edge"}, 1,
     run_ort),
    ("pad-11-value", "Pad", 11, {"x": f32(3, 4)},
     {"p": i64(1, 1, 1, 1), "v": np.array(-2.0, np.float32)}, {}, 1, run_ort),
    ("pad-13-negative", "Pad", 13, {"x": f32(4, 5)}, {"p": i64(-1, 2, 1, -2)}, {}, 1,
     run_ort),
    ("pad-18-axes", "Pad", 18, {"x": X}, {"p": i64(1, 2), "v": None, "a": i64(-1)}, {}, 1,
     run_ort),
    ("pad-19-wrap", "Pad", 19, {"x": f32(3, 4)}, {"p": i64(2, 1, 1, 3)}, {"mode": "wrap"}, 1,
     run_ort),
    ("pad-21-f16", "Pad", 21, {"x": H}, {"p": i64(1, 0, 0, 1)}, {}, 1, run_ort),
    ("pad-13-neginf", "Pad", 13, {"x": f32(2, 3)},
     {"p": i64(1, 0, 0, 2), "v": np.array(-np.inf, np.float32)}, {}, 1, run_ort),
    ("pad-13-int64-exact", "Pad", 13, {"x": np.arange(6, dtype=np.int64).reshape(2, 3)},
     {"p": i64(0, 1, 1, 0), "v": np.array(2**62 + 1, np.int64)}, {}, 1, run_ort),
    ("pad-7-crop-past-the-data", "Pad", 7, {"x": f32(2, 3)}, {},
     {"pads": [0, -4, 0, 5], "value": 3.0}, 1, run_ort),
    ("centercroppad-18", "CenterCropPad", 18, {"x": f32(5, 4, 3)}, {"s": i64(2, 7)},
     {"axes": [0, 1]}, 1, run_reference),
    # DepthToSpace (mode from 11), SpaceToDepth (mode at 28)
    ("depthtospace-7", "DepthToSpace", 7, {"x": f32(1, 8, 2, 3)}, {}, {"blocksize": 2}, 1,
     run_ort),
    ("depthtospace-13-crd", "DepthToSpace", 13, {"x": f32(2, 8, 2, 3)}, {},
     {"blocksize": 2, "mode": "CRD"}, 1, run_ort),
    ("spacetodepth-13", "SpaceToDepth", 13, {"x": f32(2, 3, 4, 6)}, {}, {"blocksize": 2}, 1,
     run_ort),
    ("spacetodepth-28-crd", "SpaceToDepth", 28, {"x": f32(1, 2, 4, 6)}, {},
     {"blocksize": 2, "mode": "CRD"}, 1, run_reference),
    # Shape (start/end at 15), Size
    ("shape-13", "Shape", 13, {"x": X}, {}, {}, 1, run_ort),
    ("shape-15-slice", "Shape", 15, {"x": X}, {}, {"start": -2, "end": 10}, 1, run_ort),
    ("size-13", "Size", 13, {"x": X}, {}, {}, 1, run_ort),
    # Range, ConstantOfShape, EyeLike, OneHot
    ("range-11-int", "Range", 11, {}, {"a": np.array(10, np.int32), "b": np.array(-3, np.int32),
                                       "c": np.array(-4, np.int32)}, {}, 1, run_ort),
    ("range-11-float", "Range", 11, {}, {"a": np.array(0.5, np.float32),
                                         "b": np.array(3.2, np.float32),
                                         "c": np.array(0.7, np.float32)}, {}, 1,
     run_reference),  # ONNX Runtime adds delta repeatedly in float32; ONNX: start + i * delta
    ("constantofshape-9", "ConstantOfShape", 9, {}, {"s": i64(2, 3)},
     {"value": onnx.numpy_helper.from_array(np.array([7], np.int32))}, 1, run_ort),
    ("constantofshape-20-default", "ConstantOfShape", 20, {}, {"s": i64(0, 3)}, {}, 1,
     run_ort),
    ("eyelike-9", "EyeLike", 9, {"x": f32(3, 5)}, {}, {"k": 2}, 1, run_ort),
    ("eyelike-22-dtype", "EyeLike", 22, {"x": f32(4, 3)}, {},
     {"k": -1, "dtype": TensorProto.INT32}, 1, run_ort),
    ("onehot-9", "OneHot", 9, {"i": np.array([[0, 3], [2, 5]], np.int64)},
     {"d": np.array(4, np.int64), "v": np.array([0, 1], np.float32)}, {}, 1, run_ort),
    ("onehot-11-neg-axis0", "OneHot", 11, {"i": np.array([[-1, 3], [2, -5]], np.int64)},
     {"d": np.array(4.0, np.float32), "v": np.array([2, 9], np.int32)}, {"axis": 0}, 1,
     run_ort),
    # CumSum, TopK (k attribute before 10, input from 10, largest/sorted from 11), Compress,
    # ReverseSequence
    ("cumsum-11", "CumSum", 11, {"x": X}, {"a": np.array(1, np.int64)}, {}, 1, run_ort),
    ("cumsum-14-excl-rev", "CumSum", 14, {"x": np.arange(12, dtype=np.int32).reshape(3, 4)},
     {"a": np.array(-1, np.int32)}, {"exclusive": 1, "reverse": 1}, 1, run_ort),
    ("topk-7-attr", "TopK", 7, {"x": f32(3, 5)}, {}, {"k": 2}, 2, run_ort),
    ("topk-10-input", "TopK", 10, {"x": f32(3, 5)}, {"k": i64(3)}, {"axis": 0}, 2, run_ort),
    ("topk-11-smallest-ties", "TopK", 11,
     {"x": np.array([[3, 1, 3, 1, 2, 1]], np.float32)}, {"k": i64(4)}, {"largest": 0}, 2,
     run_ort),
    ("topk-11-largest-ties", "TopK", 11,
     {"x": np.array([[3, 1, 3, 1, 2, 3]], np.int64)}, {"k": i64(4)}, {"axis": -1}, 2,
     run_ort),
    ("compress-9-axis", "Compress", 9, {"x": X}, {"c": np.array([1, 0, 1], bool)},
     {"axis": 1}, 1, run_ort),
    ("compress-11-flat", "Compress", 11, {"x": f32(2, 2)},
     {"c": np.array([0, 1, 1], bool)}, {}, 1, run_ort),
    ("reversesequence-10", "ReverseSequence", 10, {"x": SEQ},
     {"l": np.array([4, 1, 3], np.int64)}, {}, 1, run_ort),
    ("reversesequence-10-batch0", "ReverseSequence", 10, {"x": f32(3, 4)},
     {"l": np.array([2, 0, 4], np.int64)}, {"batch_axis": 0, "time_axis": 1}, 1, run_ort),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_the_oracle(case: Case) -> None:
    _, op, opset, data, consts, attrs, n_outputs, oracle = case
    check(make_model(op, data, consts, opset, n_outputs, **attrs), data, oracle)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in {
    "reshape-14-allowzero", "unsqueeze-13-scalar", "gather-13-scalar", "split-13-input",
    "slice-13-empty", "scatternd-16-add-dup", "pad-19-wrap", "topk-11-largest-ties",
    "onehot-11-neg-axis0", "reversesequence-10", "depthtospace-13-crd", "tile-13-zero",
    "expand-8", "eyelike-22-dtype", "cumsum-14-excl-rev", "gathernd-12-batch",
    "scatterelements-18-max", "pad-13-neginf", "pad-13-int64-exact"}], ids=lambda c: c[0])
def test_op_runs_on_sim_like_on_cpu(case: Case) -> None:
    _, op, opset, data, consts, attrs, n_outputs, _ = case
    model = make_model(op, data, consts, opset, n_outputs, **attrs)
    for got, want in zip(run_graphrt(model, data, graphrt.sim(0)), run_ort(model, data),
                         strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def constant_model(opset: int, **attrs: Any) -> Any:
    node = helper.make_node("Constant", [], ["y"], name="const", **attrs)
    graph = helper.make_graph([node], "g", [], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(("opset", "attrs"), [
    (9, {"value": onnx.numpy_helper.from_array(np.arange(6, dtype=np.int8).reshape(2, 3))}),
    (12, {"value_float": 2.5}),
    (12, {"value_floats": [1.0, -2.0]}),
    (13, {"value_int": 7}),
    (13, {"value_ints": [1, 2, 3]}),
])
def test_constant_forms(opset: int, attrs: dict[str, Any]) -> None:
    check(constant_model(opset, **attrs), {})


def test_one_hot_before_opset_11_leaves_negative_indices_off() -> None:
    """OneHot-9 calls every index outside [0, depth) out of range; negative indices count from
    the end only from opset 11 (ONNX Runtime and ONNX's reference wrap them at 9 too)."""
    data = {"i": np.array([-1, 2], np.int64)}
    consts: dict[str, np.ndarray | None] = {"d": np.array(3, np.int64),
                                            "v": np.array([0, 1], np.float32)}
    (got,) = run_graphrt(make_model("OneHot", data, consts, 9), data)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1]])
    (got,) = run_graphrt(make_model("OneHot", data, consts, 11), data)
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 0, 1]])


def test_shape_inputs_given_at_run_time_are_frozen_by_the_backend() -> None:
    """A Reshape/Slice/Pad whose shape, starts or pads is a graph input converts per value."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    p = helper.make_tensor_value_info("p", TensorProto.INT64, [4])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("Pad", ["r", "p"], ["y"])], "g", [x, s, p],
        [onnx.ValueInfoProto(name="y")])
    model = typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                  TensorProto.FLOAT)
    xv = f32(2, 6)
    rep = backend.prepare(model)
    for shape, pads in [((3, 4), (0, 1, 0, 0)), ((-1, 2), (1, 0, 0, 2))]:
        (got,) = rep.run([xv, i64(*shape), i64(*pads)])
        want = run_ort(model, {"x": xv, "s": i64(*shape), "p": i64(*pads)})[0]
        np.testing.assert_array_equal(got, want)


def test_a_shape_computed_from_a_graph_input_freezes_that_input() -> None:
    """Reshape's target is s + 1 (s a graph input): the backend converts per value of s."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    graph = helper.make_graph(
        [helper.make_node("Add", ["s", "one"], ["t"]),
         helper.make_node("Reshape", ["x", "t"], ["y"])], "g", [x, s],
        [onnx.ValueInfoProto(name="y")], [helper.make_tensor("one", TensorProto.INT64, [],
                                                             [1])])
    model = typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                  TensorProto.FLOAT)
    with pytest.raises(ConversionError, match="computed from graph input 's'"):
        graphrt.from_onnx(model)
    xv = f32(2, 6)
    (got,) = backend.prepare(model).run([xv, i64(2, 3)])
    np.testing.assert_array_equal(got, xv.reshape(3, 4))


def test_shape_and_size_fold_into_a_reshape() -> None:
    """Shape → Gather → Concat → Reshape makes no steps but the reshape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
         helper.make_node("Concat", ["n1", "minus1"], ["t"], axis=0),
         helper.make_node("Reshape", ["x", "t"], ["y"])], "g", [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
         helper.make_tensor("zero1", TensorProto.INT64, [1], [0]),
         helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    functions = convert_model(model).emitted.lib["functions"]
    assert [s["op"] for f in functions.values() for s in f["body"]] == ["reshape"]
    check(model, {"x": f32(2, 3, 4)})


# ---------------------------------------------------------------------------------------------
# zero-size and 0-d tensors end to end


ZERO_CASES: list[Case] = [
    ("transpose-zero", "Transpose", 13, {"x": np.zeros((0, 3), np.float32)}, {}, {}, 1,
     run_ort),
    ("tile-zero-input", "Tile", 13, {"x": np.zeros((0, 3), np.float32)}, {"r": i64(2, 2)},
     {}, 1, run_ort),
    ("expand-scalar", "Expand", 13, {"x": np.array(3.0, np.float32)}, {"s": i64(2, 3)}, {},
     1, run_ort),
    ("squeeze-to-scalar", "Squeeze", 13, {"x": np.ones((1, 1), np.float32)}, {}, {}, 1,
     run_ort),
    ("scatternd-no-updates", "ScatterND", 13,
     {"x": f32(3, 2), "i": np.zeros((0, 1), np.int64), "u": np.zeros((0, 2), np.float32)},
     {}, {}, 1, run_ort),
    ("gather-empty-indices", "Gather", 13, {"x": f32(3, 2), "i": np.zeros((0,), np.int64)},
     {}, {}, 1, run_ort),
    ("topk-k0", "TopK", 13, {"x": f32(4, 3)}, {"k": i64(0)}, {}, 2, run_ort),
    ("cumsum-empty", "CumSum", 14, {"x": np.zeros((2, 0), np.float32)},
     {"a": np.array(1, np.int64)}, {}, 1, run_ort),
    ("onehot-empty", "OneHot", 11, {"i": np.zeros((0, 2), np.int64)},
     {"d": np.array(3, np.int64), "v": np.array([0, 1], np.float32)}, {}, 1, run_ort),
    ("concat-empty", "Concat", 13, {"a": np.zeros((0, 2), np.float32),
                                    "b": np.zeros((0, 2), np.float32)}, {}, {"axis": 0}, 1,
     run_ort),
    ("split-zero-parts", "Split", 13, {"x": f32(3)}, {"s": i64(0, 3, 0)}, {}, 3, run_ort),
    ("size-scalar", "Size", 13, {"x": np.array(1.0, np.float32)}, {}, {}, 1, run_ort),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ZERO_CASES, ids=[c[0] for c in ZERO_CASES])
def test_zero_size_and_scalar_tensors(case: Case, device: graphrt.Device) -> None:
    _, op, opset, data, consts, attrs, n_outputs, oracle = case
    check(make_model(op, data, consts, opset, n_outputs, **attrs), data, oracle, device)


# ---------------------------------------------------------------------------------------------
# errors name the node


@pytest.mark.parametrize(("op", "opset", "data", "consts", "attrs", "match"), [
    ("Pad", 18, {"x": f32(2, 2)}, {"p": i64(1, 1, 1, 1)}, {"mode": "wrap"},
     "mode 'wrap' is not one of constant, reflect, edge at opset 18"),
    ("Pad", 13, {"x": f32(2, 2)}, {"p": i64(3, 0, 0, 0)}, {"mode": "reflect"},
     "reflect mode pads axis 0"),
    ("DepthToSpace", 13, {"x": f32(1, 4, 2, 2)}, {}, {"blocksize": 2, "mode": "XYZ"},
     "mode 'XYZ'"),
    ("ScatterElements", 16, {"x": f32(2, 2), "i": np.zeros((1, 2), np.int64),
                             "u": f32(1, 2)}, {}, {"reduction": "max"},
     "reduction 'max' is not one of none, add, mul at opset 16"),
    ("Concat", 13, {"a": f32(2, 2), "b": f32(2, 2)}, {}, {"axis": 2}, "axis 2 is out of range"),
    ("Reshape", 13, {"x": f32(2, 6)}, {"s": i64(-1, -1)}, {}, "more than one -1"),
    ("Reshape", 13, {"x": f32(2, 6)}, {"s": i64(5, -1)}, {}, "cannot infer"),
    ("TopK", 11, {"x": f32(2, 3)}, {"k": i64(4)}, {}, r"k 4 must lie in \[0, 3\]"),
    ("Split", 13, {"x": f32(6)}, {"s": i64(2, 2)}, {}, "add up to 6"),
    ("Slice", 13, {"x": f32(6)}, {"s": i64(0), "e": i64(3), "a": i64(0), "t": i64(0)}, {},
     "step of axis 0 is 0"),
    ("Tile", 13, {"x": f32(2, 3)}, {"r": i64(2)}, {}, "repeats"),
    ("Expand", 13, {"x": f32(2, 3)}, {"s": i64(4, 3)}, {}, "do not broadcast"),
    ("Squeeze", 13, {"x": f32(2, 3)}, {"a": i64(0)}, {}, "axis 0 has size 2"),
    ("CumSum", 14, {"x": f32(2, 3)}, {"a": i64(1, 0)}, {}, "axis must be one value"),
])
def test_bad_attributes_name_the_node(op: str, opset: int, data: dict[str, np.ndarray],
                                      consts: dict[str, np.ndarray | None],
                                      attrs: dict[str, Any],
                                      match: str) -> None:
    model = make_model(op, data, consts, opset, 2 if op == "TopK" else 1, **attrs)
    with pytest.raises(ConversionError, match=match) as info:
        graphrt.from_onnx(model)
    assert f"my_{op.lower()}" in str(info.value)


def test_sparse_and_string_constants_are_refused() -> None:
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("i", TensorProto.INT64, [1], [0]), [3])
    with pytest.raises(ConversionError, match="sparse constant"):
        graphrt.from_onnx(constant_model(13, sparse_value=sparse))
    with pytest.raises(ConversionError, match="string constant"):
        graphrt.from_onnx(constant_model(13, value_strings=["a"]))


def test_a_runtime_condition_for_compress_sizes_its_output_per_run() -> None:
    """Compress's output size follows its condition's values: a computed condition makes a
    data-dependent node, planned at the condition's length and sized on every run."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    graph = helper.make_graph(
        [helper.make_node("Greater", ["x", "zero"], ["c"]),
         helper.make_node("Compress", ["x", "c"], ["y"], name="pick")], "g", [x],
        [onnx.ValueInfoProto(name="y")],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    model = typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                  TensorProto.FLOAT)
    module = graphrt.from_onnx(model).create("cpu")
    for x in ([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [4.0, 5.0, 6.0]):
        given = np.array(x, np.float32)
        np.testing.assert_array_equal(module(x=given)[0], given[given > 0])


# ---------------------------------------------------------------------------------------------
# the new standard ops against numpy, on cpu and sim


def run(name: str, inputs: list[np.ndarray], attrs: dict[str, Any],
        device: graphrt.Device) -> list[np.ndarray]:
    return run_op(name, inputs, attrs, device)


def infer(name: str, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    op = get_op(name)
    return op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))


@pytest.mark.parametrize("device", DEVICES)
def test_tile_and_broadcast_to(device: graphrt.Device) -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (out,) = run("tile", [x], {"reps": [2, 3]}, device)
    np.testing.assert_array_equal(out, np.tile(x, (2, 3)), strict=True)
    (out,) = run("tile", [np.array(5.0, np.float32)], {"reps": []}, device)
    assert out.shape == () and out == 5.0
    (out,) = run("broadcast_to", [x[:1]], {"shape": [4, 2, 3]}, device)
    np.testing.assert_array_equal(out, np.broadcast_to(x[:1], (4, 2, 3)), strict=True)
    (out,) = run("broadcast_to", [x], {"shape": [0, 2, 3]}, device)
    assert out.shape == (0, 2, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_nd(device: graphrt.Device) -> None:
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    idx = np.array([[[2, -1], [0, 0]], [[1, 3], [-3, 2]]], np.int32)
    (out,) = run("gather_nd", [data, idx], {"batch_dims": 1}, device)
    want = np.stack([data[b][tuple(np.moveaxis(idx[b] % [3, 4], -1, 0))] for b in range(2)])
    np.testing.assert_array_equal(out, want, strict=True)
    (out,) = run("gather_nd", [data, np.array([[1], [0]], np.int64)], {}, device)
    np.testing.assert_array_equal(out, data[[1, 0]], strict=True)
    (out,) = run("gather_nd", [data, np.zeros((2, 1, 0), np.int64)], {"batch_dims": 1},
                 device)  # an empty index tuple selects the whole slice
    np.testing.assert_array_equal(out, data[:, None], strict=True)
    with pytest.raises(OpError, match=r"indices must lie in \[-3, 3\)"):
        run("gather_nd", [data, np.array([[0, 3]], np.int64)], {}, device)


def scatter_reference(data: np.ndarray, positions: Sequence[tuple[int, ...]],
                      updates: Sequence[Any], reduction: str) -> np.ndarray:
    """Each update applied in turn (ONNX's reference loop)."""
    out: np.ndarray = np.array(data, copy=True)
    for where, value in zip(positions, updates, strict=True):
        if reduction == "none":
            out[where] = value
        else:
            combine = {"add": np.add, "mul": np.multiply, "max": np.maximum,
                       "min": np.minimum}[reduction]
            out[where] = combine(out[where], value)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_applies_repeats_in_order(device: graphrt.Device,
                                                   reduction: str) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    idx = np.array([[1, 1, -1], [0, 3, 3], [2, 2, 2]], np.int64)
    upd = np.arange(9, dtype=np.float32).reshape(3, 3) * 1.5 - 4
    (out,) = run("scatter_elements", [data, idx, upd], {"axis": 1, "reduction": reduction},
                 device)
    positions = [(i, int(idx[i, j]) % 4) for i in range(3) for j in range(3)]
    want = scatter_reference(data, positions, list(upd.reshape(-1)), reduction)
    np.testing.assert_array_equal(out, want, strict=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd(device: graphrt.Device, reduction: str) -> None:
    data = np.arange(24, dtype=np.int64).reshape(4, 3, 2)
    idx = np.array([[1], [3], [1], [-4]], np.int64)
    upd = np.arange(24, dtype=np.int64).reshape(4, 3, 2) * 7 % 11
    (out,) = run("scatter_nd", [data, idx, upd], {"reduction": reduction}, device)
    positions = [(int(i) % 4,) for i in idx[:, 0]]
    want = scatter_reference(data, positions, list(upd), reduction)
    np.testing.assert_array_equal(out, want, strict=True)


@pytest.mark.parametrize("device", DEVICES)
def test_cumsum(device: graphrt.Device) -> None:
    x = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    for exclusive in (False, True):
        for reverse in (False, True):
            (out,) = run("cumsum", [x], {"axis": 1, "exclusive": exclusive,
                                         "reverse": reverse}, device)
            src = x[:, ::-1] if reverse else x
            want = np.cumsum(src, axis=1, dtype=np.int32)
            if exclusive:
                want = np.concatenate([np.zeros((3, 1), np.int32), want[:, :-1]], axis=1)
            np.testing.assert_array_equal(out, want[:, ::-1] if reverse else want, strict=True)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_orders_ties_by_index(device: graphrt.Device) -> None:
    x = np.array([[1, 5, 5, 2, 5, 1], [0, 0, 0, 0, 0, 0]], np.uint64)
    values, indices = run("topk", [x], {"k": 4, "axis": 1}, device)
    np.testing.assert_array_equal(indices, [[1, 2, 4, 3], [0, 1, 2, 3]], strict=True)
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, 1), strict=True)
    values, indices = run("topk", [x.astype(np.float16)], {"k": 3, "axis": -1,
                                                          "largest": False}, device)
    np.testing.assert_array_equal(indices, [[0, 5, 3], [0, 1, 2]], strict=True)
    assert values.dtype == np.float16 and indices.dtype == np.int64


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_and_eye_like(device: graphrt.Device) -> None:
    idx = np.array([[0, -1], [7, 2.7]], np.float32)
    (out,) = run("one_hot", [idx, np.array([-1, 4], np.int8)], {"depth": 3, "axis": 1},
                 device)
    want = np.full((2, 3, 2), -1, np.int8)
    want[0, 0, 0] = want[0, 2, 1] = want[1, 2, 1] = 4
    np.testing.assert_array_equal(out, want, strict=True)
    (out,) = run("one_hot", [idx, np.array([0, 1], np.float32)],
                 {"depth": 3, "wrap_negative": False}, device)
    assert out[0, 1].sum() == 0
    (out,) = run("eye_like", [np.zeros((3, 5), np.float32)], {"k": 1, "dtype": "int64"},
                 device)
    np.testing.assert_array_equal(out, np.eye(3, 5, 1, dtype=np.int64), strict=True)
    (out,) = run("eye_like", [np.zeros((3, 2), np.float32)], {"k": -5, "dtype": "bool"},
                 device)
    np.testing.assert_array_equal(out, np.zeros((3, 2), bool), strict=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_inverts_space_to_depth(device: graphrt.Device, mode: str) -> None:
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    (packed,) = run("space_to_depth", [x], {"blocksize": 2, "mode": mode}, device)
    assert packed.shape == (2, 12, 2, 3)
    (back,) = run("depth_to_space", [packed], {"blocksize": 2, "mode": mode}, device)
    np.testing.assert_array_equal(back, x, strict=True)


@pytest.mark.parametrize("device", DEVICES)
def test_reverse_sequence(device: graphrt.Device) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    lens = np.array([4, 0, 2], np.int32)
    (out,) = run("reverse_sequence", [x, lens], {"batch_axis": 0, "time_axis": 1}, device)
    want = x.copy()
    for b, n in enumerate(lens):
        want[b, :n] = x[b, :n][::-1]
    np.testing.assert_array_equal(out, want, strict=True)
    with pytest.raises(OpError, match=r"sequence_lens must lie in \[0, 4\]"):
        run("reverse_sequence", [x, np.array([5, 0, 0], np.int32)],
            {"batch_axis": 0, "time_axis": 1}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_pad_fill(device: graphrt.Device) -> None:
    x = np.arange(6, dtype=np.uint64).reshape(2, 3)
    big = np.array([2**64 - 1], np.uint64)
    (out,) = run("pad_fill", [x, big], {"pad_width": [(1, 0), (0, 2)]}, device)
    np.testing.assert_array_equal(out, np.pad(x, [(1, 0), (0, 2)], constant_values=big[0]),
                                  strict=True)
    (out,) = run("pad_fill", [np.zeros((0, 2), np.float32), np.array(np.nan, np.float32)],
                 {"pad_width": [(1, 1), (0, 0)]}, device)
    assert out.shape == (2, 2) and np.isnan(out).all()
    with pytest.raises(OpError, match="one element of the data's dtype"):
        infer("pad_fill", [TensorType((2,), "float32"), TensorType((), "float64")],
              {"pad_width": [(1, 1)]})


@pytest.mark.parametrize("device", DEVICES)
def test_new_ops_take_zero_size_tensors(device: graphrt.Device) -> None:
    empty = np.zeros((0, 3), np.float32)
    assert run("tile", [empty], {"reps": [2, 2]}, device)[0].shape == (0, 6)
    assert run("cumsum", [empty], {"axis": 1}, device)[0].shape == (0, 3)
    values, indices = run("topk", [empty], {"k": 2, "axis": 1}, device)
    assert values.shape == indices.shape == (0, 2)
    (out,) = run("gather_nd", [f32(2, 3), np.zeros((0, 2), np.int64)], {}, device)
    assert out.shape == (0,)
    data = f32(2, 3)
    (out,) = run("scatter_elements", [data, np.zeros((0, 3), np.int64),
                                      np.zeros((0, 3), np.float32)], {}, device)
    np.testing.assert_array_equal(out, data, strict=True)
    assert run("one_hot", [np.zeros((0,), np.int64), np.array([0, 1], np.float32)],
               {"depth": 4}, device)[0].shape == (0, 4)


@pytest.mark.parametrize(("name", "types", "attrs", "match"), [
    ("tile", [TensorType((2, 3), "float32")], {"reps": [2]}, "one value per axis"),
    ("broadcast_to", [TensorType((2, 3), "float32")], {"shape": [3, 3]}, "does not broadcast"),
    ("gather_nd", [TensorType((2, 3), "float32"), TensorType((2, 3), "int64")], {},
     "exceeds the 2 dims"),
    ("gather_nd", [TensorType((2, 3), "float32"), TensorType((3, 1), "int64")],
     {"batch_dims": 1}, "must match"),
    ("scatter_elements", [TensorType((2, 3), "float32"), TensorType((2, 2), "int64"),
                          TensorType((2, 3), "float32")], {}, "same shape"),
    ("scatter_nd", [TensorType((4, 3), "float32"), TensorType((2, 1), "int64"),
                    TensorType((2, 4), "float32")], {}, r"updates must have shape \[2, 3\]"),
    ("cumsum", [TensorType((), "float32")], {}, "at least 1-D"),
    ("topk", [TensorType((2, 3), "float32")], {"k": 4}, r"k 4 must lie in \[0, 3\]"),
    ("one_hot", [TensorType((2,), "int64"), TensorType((3,), "float32")], {"depth": 2},
     "shape \\[2\\]"),
    ("eye_like", [TensorType((2, 3, 4), "float32")], {"dtype": "float32"}, "must be 2-D"),
    ("depth_to_space", [TensorType((1, 6, 2, 2), "float32")], {"blocksize": 2},
     "divisible by blocksize"),
    ("space_to_depth", [TensorType((1, 6, 3, 2), "float32")], {"blocksize": 2},
     "divisible by blocksize"),
    ("reverse_sequence", [TensorType((3, 4), "float32"), TensorType((3,), "int64")], {},
     r"sequence_lens must have shape \[4\]"),
])
def test_shape_functions_refuse_bad_inputs(name: str, types: list[TensorType],
                                           attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(OpError, match=match):
        infer(name, types, attrs)


def test_scatter_reduction_is_validated_by_the_attrs_model() -> None:
    with pytest.raises(ValueError, match="reduction"):
        get_op("scatter_nd").attrs.model_validate({"reduction": "sum"})
