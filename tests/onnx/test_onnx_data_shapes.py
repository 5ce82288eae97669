"""Ops whose output shape follows their input values, fed at run time: NonZero, Unique,
NonMaxSuppression, Compress and TopK with a computed k. Each converts once, plans its outputs at
the op's bound with a shape variable the shape function binds per run, and matches ONNX Runtime
for inputs of every count, on cpu and on the simulated accelerator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphrt  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any],
           inits: list[Any] | None = None) -> Any:
    graph = helper.make_graph(nodes, "data_shapes", inputs, outputs, inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _value(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model: Any, feeds: list[dict[str, np.ndarray[Any, Any]]],
           **convert: Any) -> graphrt.Bundle:
    bundle = graphrt.from_onnx(model, **convert)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    modules = {device: bundle.create(device) for device in ("cpu", "sim")}
    for feed in feeds:
        want = session.run(None, feed)
        for device, module in modules.items():
            got = module(**feed)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6,
                                           err_msg=f"{device}, {list(feed)}")
    return bundle


def test_nonzero_gathers_what_it_found_for_any_count() -> None:
    model = _model([helper.make_node("NonZero", ["x"], ["nz"]),
                    helper.make_node("Transpose", ["nz"], ["at"], perm=[1, 0]),
                    helper.make_node("GatherND", ["x", "at"], ["found"])],
                   [_value("x", F, [3, 4])],
                   [_value("nz", I64, [2, "k"]), _value("found", F, ["k"])])
    rng = np.random.default_rng(0)
    feeds = [{"x": (rng.random((3, 4)) < p).astype(np.float32) * rng.random((3, 4)).astype(
        np.float32)} for p in (0.0, 0.3, 0.8, 1.0)]
    bundle = _check(model, feeds)
    (var,) = bundle.graph.shape_vars.values()
    assert (var.min, var.max) == (0, 12)  # a count of 0 to the input's 12 elements


def test_nonzero_under_a_symbolic_batch_is_bounded_by_the_batch() -> None:
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])],
                   [_value("x", F, ["batch", 5])], [_value("nz", I64, [2, "k"])])
    rng = np.random.default_rng(1)
    feeds = [{"x": (rng.random((batch, 5)) < 0.5).astype(np.float32)} for batch in (1, 3, 6)]
    bundle = _check(model, feeds, dim_bounds={"batch": 6})
    bounds = {name: (v.min, v.max) for name, v in bundle.graph.shape_vars.items()}
    assert bounds.pop("batch") == (1, 6) and list(bounds.values()) == [(0, 30)]


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": 1, "sorted": 0}])
def test_unique_in_both_orders_and_along_an_axis(attrs: dict[str, int]) -> None:
    model = _model([helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"],
                                     **attrs)],
                   [_value("x", F, [4, 3])],
                   [_value("y", F, ["u"] if "axis" not in attrs else ["r", "c"]),
                    _value("first", I64, ["u"]), _value("inverse", I64, ["n"]),
                    _value("counts", I64, ["u"])])
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.integers(0, high, (4, 3)).astype(np.float32)} for high in (1, 2, 5, 50)]
    feeds.append({"x": np.array([[1, 2, 1], [1, 2, 1], [3, 3, 3], [1, 2, 1]], np.float32)})
    _check(model, feeds)


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_selects_boxes_for_gathering(center: int) -> None:
    """The detection pattern: NMS, then the selected boxes gathered with its indices."""
    inits = [numpy_helper.from_array(np.array([3], np.int64), "limit"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.2], np.float32), "min_score"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "batch_box")]
    model = _model([helper.make_node("NonMaxSuppression",
                                     ["boxes", "scores", "limit", "iou", "min_score"], ["sel"],
                                     center_point_box=center),
                    helper.make_node("Gather", ["sel", "batch_box"], ["pick"], axis=1),
                    helper.make_node("GatherND", ["boxes", "pick"], ["kept"])],
                   [_value("boxes", F, [2, 6, 4]), _value("scores", F, [2, 3, 6])],
                   [_value("sel", I64, ["k", 3]), _value("kept", F, ["k", 4])], inits)
    rng = np.random.default_rng(3 + center)
    feeds = []
    for spread in (0.1, 1.0, 5.0):
        corner = rng.random((2, 6, 2)).astype(np.float32) * spread
        size = rng.random((2, 6, 2)).astype(np.float32) + 0.2
        boxes = np.concatenate([corner, corner + size], axis=-1)
        feeds.append({"boxes": boxes, "scores": rng.random((2, 3, 6)).astype(np.float32)})
    feeds.append({"boxes": feeds[0]["boxes"], "scores": np.zeros((2, 3, 6), np.float32)})
    _check(model, feeds)


def test_compress_with_a_condition_given_at_run_time() -> None:
    model = _model([helper.make_node("Compress", ["x", "keep"], ["y"], axis=1)],
                   [_value("x", F, [2, 5]), _value("keep", B, [5])], [_value("y", F, [2, "k"])])
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    feeds = [{"x": x, "keep": np.array(mask, bool)} for mask in
             ([0, 0, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 1, 1, 1])]
    _check(model, feeds)


def test_topk_with_k_given_at_run_time() -> None:
    model = _model([helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)],
                   [_value("x", F, [3, 6]), _value("k", I64, [1])],
                   [_value("values", F, [3, "k"]), _value("indices", I64, [3, "k"])])
    x = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    _check(model, [{"x": x, "k": np.array([k], np.int64)} for k in (0, 1, 4, 6)])


def test_a_count_past_what_was_planned_cannot_happen_and_bad_k_is_named() -> None:
    model = _model([helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)],
                   [_value("x", F, [3, 6]), _value("k", I64, [1])],
                   [_value("values", F, [3, "k"]), _value("indices", I64, [3, "k"])])
    module = graphrt.from_onnx(model).create("cpu")
    x = np.zeros((3, 6), np.float32)
    with pytest.raises(graphrt.GraphrtError, match="k 7 must lie in \\[0, 6\\]"):
        module(x=x, k=np.array([7], np.int64))
    (values, _) = module(x=x, k=np.array([2], np.int64))  # still usable
    assert values.shape == (3, 2)


def test_the_profiler_counts_what_a_shape_function_reads() -> None:
    """NonZero's count needs its input's values: on the accelerator, exactly those bytes
    cross to the host before the kernel runs."""
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])],
                   [_value("x", F, [4, 8])], [_value("nz", I64, [2, "k"])])
    module = graphrt.from_onnx(model).create("sim")
    x = np.eye(4, 8, dtype=np.float32)
    module.set_input(x=x)
    report = module.profile(repeat=1)
    (shape_run,) = [node for node in report.nodes if node.kind == "shape"]
    assert shape_run.bytes == x.nbytes
    assert np.asarray(module(x=x)[0]).tolist() == np.array(np.nonzero(x)).tolist()


def test_a_node_after_two_data_dependent_ones_waits_for_both_counts() -> None:
    """x's and y's nonzero values added: the add reads one entry sized by each NonZero, so it
    may be prepared only once both have run (before, the first stage re-prepared it with the
    second's stale size and its shape function refused the mix)."""
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    model = _model([helper.make_node("NonZero", ["x"], ["ix"]),
                    helper.make_node("NonZero", ["y"], ["iy"]),
                    helper.make_node("Reshape", ["ix", "flat"], ["jx"]),
                    helper.make_node("Reshape", ["iy", "flat"], ["jy"]),
                    helper.make_node("Gather", ["x", "jx"], ["vx"]),
                    helper.make_node("Gather", ["y", "jy"], ["vy"]),
                    helper.make_node("Add", ["vx", "vy"], ["sum"])],
                   [_value("x", F, [6]), _value("y", F, [6])], [_value("sum", F, ["k"])],
                   inits)
    feeds = [{"x": np.array(x, np.float32), "y": np.array(y, np.float32)} for x, y in (
        ([1, 0, 2, 0, 3, 0], [0, 4, 0, 5, 0, 6]), ([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]),
        ([0, 0, 0, 0, 0, 7], [8, 0, 0, 0, 0, 0]))]
    _check(model, feeds)


def test_top_k_of_the_smaller_of_a_count_and_a_constant() -> None:
    """A detector's ``TopK(scores, min(3, found))``: the k is traced as ``min(3, count)``
    and the topk reads it from its input's shape on every run (``with_shape_vars``)."""
    inits = [numpy_helper.from_array(np.array([3], np.int64), "three"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    model = _model([helper.make_node("NonZero", ["x"], ["ix"]),
                    helper.make_node("Reshape", ["ix", "flat"], ["jx"]),
                    helper.make_node("Gather", ["x", "jx"], ["found"]),
                    helper.make_node("Shape", ["found"], ["count"]),
                    helper.make_node("Concat", ["three", "count"], ["both"], axis=0),
                    helper.make_node("ReduceMin", ["both"], ["k"], keepdims=1),
                    helper.make_node("TopK", ["found", "k"], ["top", "where"])],
                   [_value("x", F, [8])], [_value("top", F, ["k"]), _value("where", I64, ["k"])],
                   inits)
    lib = graphrt.onnx.convert.convert_model(model).emitted.lib
    assert any(step["op"] == "with_shape_vars" and step["attrs"]["op"] == "topk"
               for function in lib["functions"].values() for step in function["body"])
    feeds = [{"x": np.array(x, np.float32)} for x in (
        [0, 5, 0, 1, 0, 0, 9, 2], [0, 0, 0, 0, 0, 0, 0, 4], [0, 0, 0, 0, 0, 0, 0, 0],
        [1, 2, 3, 4, 5, 6, 7, 8])]
    _check(model, feeds)
