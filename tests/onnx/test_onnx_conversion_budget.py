"""Conversion is bounded by the model's bytes, not by the sizes it declares (issue 33, items 3,
4 and 6): constants computed at import fit the fold limit and one budget for the whole model;
bigger masks and fills stay steps that run at run time, and index tables that would not fit are
a ``ConversionError`` naming the node. Each hostile model below is a few hundred bytes that made
``from_onnx`` allocate gigabytes (or unroll for minutes) before."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from onnx_harness import declared_model as declared
from onnx_harness import node_model, run_graphrt, run_ort

from graphrt.errors import ConversionError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphrt.onnx.builder as builder  # noqa: E402
from graphrt.onnx import convert_model  # noqa: E402

PEAK_LIMIT = 256 << 20
"""Most bytes a hostile model below may make conversion allocate (the fold budget is 1 GiB,
but none of these models has anything worth folding)."""


@pytest.fixture
def peak() -> Iterator[list[int]]:
    """The peak bytes traced while the test ran (numpy reports its buffers to tracemalloc)."""
    found: list[int] = []
    tracemalloc.start()
    try:
        yield found
    finally:
        found.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert found[-1] < PEAK_LIMIT, f"conversion allocated {found[-1]:,} bytes at peak"


F32, I64 = TensorProto.FLOAT, TensorProto.INT64
BIG = 1 << 16  # a declared axis: squared, 4 Gi elements

STAY_STEPS = {
    "trilu": lambda: declared("Trilu", {"x": ([BIG, BIG], F32)}, {}, 14),
    "dropout-mask": lambda: declared("Dropout", {"x": ([BIG, BIG], F32)}, {}, 13, outputs=2),
    "causal-attention": lambda: declared(
        "Attention", {"q": ([1, 1, BIG, 8], F32), "k": ([1, 1, BIG, 8], F32),
                      "v": ([1, 1, BIG, 8], F32)}, {}, 23, is_causal=1),
    "affine-grid": lambda: declared("AffineGrid", {"theta": ([1, 2, 3], F32)},
                                    {"size": np.array([1, 1, BIG, BIG], np.int64)}, 20),
    "hardmax": lambda: declared("Hardmax", {"x": ([1, 1 << 33], F32)}, {}, 13),
}


@pytest.mark.parametrize("name", sorted(STAY_STEPS))
def test_a_mask_or_fill_too_large_to_fold_stays_a_step(name: str, peak: list[int]) -> None:
    converted = convert_model(STAY_STEPS[name]())
    assert converted.emitted.nodes  # it converted, into steps that run at run time


REFUSED = {
    "range-int": (lambda: declared("Range", {}, {
        "start": np.array(0, np.int64), "limit": np.array(1 << 40, np.int64),
        "delta": np.array(1, np.int64)}, 11), "Range's output"),
    "range-float": (lambda: declared("Range", {}, {
        "start": np.array(0, np.float32), "limit": np.array(1e12, np.float32),
        "delta": np.array(0.5, np.float32)}, 11), "Range's output"),
    "pad-wrap": (lambda: declared("Pad", {"x": ([4], F32)}, {
        "pads": np.array([0, 1 << 34], np.int64)}, 19, mode="wrap"),
        "the wrap indices of axis 0"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_table_too_large_to_compute_is_refused_by_name(name: str, peak: list[int]) -> None:
    make, what = REFUSED[name]
    with pytest.raises(ConversionError, match=f"hostile_.*{what} would be a constant of shape "
                       r".* computed at conversion, more than the 67,108,864 bytes"):
        convert_model(make())


def test_range_refuses_non_finite_bounds() -> None:
    model = declared("Range", {}, {"start": np.array(0, np.float32),
                                   "limit": np.array(np.inf, np.float32),
                                   "delta": np.array(1, np.float32)}, 11)
    with pytest.raises(ConversionError, match=r"must be finite, given 0\.0, inf, 1\.0"):
        convert_model(model)


def test_the_fold_budget_bounds_the_total_and_leaves_the_rest_as_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """20 ConstantOfShape of 1 MiB each under a 4 MiB budget: 4 fold, the rest run as steps,
    and the sum is still right."""
    monkeypatch.setattr(builder, "FOLD_BUDGET", 4 << 20)
    count, shape = 20, np.array([256, 1024], np.int64)
    nodes, consts = [], {"shape": shape}
    for i in range(count):
        value = numpy_helper.from_array(np.array([float(i)], np.float32), f"v{i}")
        nodes.append(helper.make_node("ConstantOfShape", ["shape"], [f"c{i}"], value=value))
    nodes.append(helper.make_node("Sum", [f"c{i}" for i in range(count)], ["s"]))
    nodes.append(helper.make_node("Add", ["x", "s"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [256, 1024])],
        [helper.make_tensor_value_info("y", F32, [256, 1024])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    converted = convert_model(model)
    funcs = [node.func_name for node in converted.emitted.nodes]
    assert sum("broadcast_to" in func for func in funcs) == count - 4
    x = np.ones((256, 1024), np.float32)
    (y,) = run_graphrt(model, {"x": x})
    np.testing.assert_array_equal(y, x + sum(range(count)))


def test_a_table_past_the_budget_names_what_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables count against the same budget as folded results: once earlier nodes spent it,
    the next table is refused with the total used."""
    monkeypatch.setattr(builder, "FOLD_BUDGET", 1 << 10)
    b = builder.Builder(source="node 7 'late' (Trilu)")
    for _ in range(2):
        b.computed((64,), "int64", "a table", lambda: np.zeros(64, np.int64))
    with pytest.raises(ConversionError, match=r"node 7 'late' \(Trilu\): Trilu's row numbers "
                       r"would be .* past the 1,024 bytes graphrt computes at conversion in all "
                       r"\(1,024 used\)"):
        b.computed((64, 1), "int64", "Trilu's row numbers", lambda: np.zeros((64, 1)))


def test_masks_that_fit_still_fold_and_match_onnx_runtime() -> None:
    """The masks built by ops fold into the same constants as before and match ORT."""
    x = np.random.default_rng(3).standard_normal((2, 5, 7)).astype(np.float32)
    for upper in (0, 1):
        model = node_model("Trilu", {"x": x}, {"k": np.array(1, np.int64)}, 14, upper=upper)
        converted = convert_model(model)
        assert [node.func_name for node in converted.emitted.nodes] == ["fused_where"]
        np.testing.assert_array_equal(run_graphrt(model, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_causal_conv_with_state_is_one_convolution_whatever_its_kernel_size() -> None:
    """100,000 declared taps make as many steps as 3 (it unrolled about 4 steps per tap)."""
    sizes = []
    for taps in (3, 100_000):
        model = declared("CausalConvWithState", {"x": ([1, 2, 8], F32),
                                                 "w": ([2, 1, taps], F32)}, {}, 27, outputs=2)
        sizes.append(len(convert_model(model).emitted.nodes))
    assert sizes[0] == sizes[1] < 20
