"""The fast convolution kernels (issue 14): a workspace the executor plans, one GEMM over the
batch or one per large image, 1x1 without im2col, depthwise as shifted multiply-adds."""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder
from ops_harness import run_op

import graphrt
from graphrt.kernels import chain
from graphrt.lib import Library
from graphrt.ops import TensorType, get_op
from graphrt.ops.convolution import conv_plan

RNG = np.random.default_rng(14)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, ...],
              pads: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> np.ndarray:
    """An N-d convolution in float64, one kernel offset at a time over a padded copy."""
    rank = x.ndim - 2
    n = x.shape[0]
    o, cg = w.shape[:2]
    padded = np.pad(x.astype(np.float64),
                    [(0, 0), (0, 0), *zip(pads[:rank], pads[rank:], strict=True)])
    out_space = [(padded.shape[2 + a] - dilation[a] * (w.shape[2 + a] - 1) - 1) // strides[a]
                 + 1 for a in range(rank)]
    out = np.zeros((n, o, *out_space))
    og = o // groups
    for offset in itertools.product(*(range(k) for k in w.shape[2:])):
        window = tuple(slice(k * d, k * d + (size - 1) * s + 1, s) for k, d, s, size in
                       zip(offset, dilation, strides, out_space, strict=True))
        taps = padded[(slice(None), slice(None), *window)]
        for g in range(groups):
            part = taps[:, g * cg:(g + 1) * cg]
            kernel = w[(slice(g * og, (g + 1) * og), slice(None), *offset)].astype(np.float64)
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", part, kernel)
    if b is not None:
        out += b.astype(np.float64).reshape(o, *(1,) * rank)
    return out


def attrs_for(strides: tuple[int, ...], pads: tuple[int, ...], dilation: tuple[int, ...],
              groups: int) -> dict[str, Any]:
    return {"strides": list(strides), "padding": list(pads), "dilation": list(dilation),
            "groups": groups}


# (x shape, w shape, strides, pads (begins then ends), dilation, groups, bias)
CASES = [
    ((1, 6, 9, 9), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6, True),  # depthwise
    ((2, 6, 9, 8), (12, 1, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 6, True),  # multiplier 2
    ((3, 4, 11, 10), (4, 1, 3, 2), (2, 3), (2, 3, 2, 3), (2, 3), 4, False),  # dilated dw
    ((1, 3, 4, 4), (3, 1, 3, 3), (1, 1), (3, 3, 3, 3), (1, 1), 3, True),  # pad > kernel
    ((1, 8, 7, 7), (5, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),  # 1x1, own im2col
    ((3, 8, 7, 7), (5, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),  # 1x1, batched
    ((2, 8, 30, 30), (5, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, False),  # 1x1 per image
    ((2, 8, 9, 9), (5, 8, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, True),  # strided 1x1
    ((4, 6, 8, 7), (6, 3, 3, 3), (1, 2), (1, 0, 1, 2), (2, 1), 2, True),  # groups, batch
    ((2, 3, 30, 29), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),  # per image
    ((2, 3, 5, 5), (2, 3, 2, 2), (4, 4), (0, 0, 0, 0), (1, 1), 1, False),  # stride > kernel
    ((3, 4, 9), (6, 2, 3), (2,), (1, 2), (1,), 2, True),  # 1-D
    ((2, 2, 5, 4, 6), (3, 2, 2, 3, 2), (1, 2, 2), (1, 0, 1, 0, 1, 1), (1, 1, 2), 1, True),
    ((2, 3, 5, 6), (3, 1, 2, 3), (1, 1), (0, 1, 1, 0), (1, 2), 3, True),  # depthwise, batch
]


def case_id(case: tuple[Any, ...]) -> str:
    x, w, s, p, d, g, b = case
    return f"x{list(x)}-w{list(w)}-s{list(s)}-p{list(p)}-d{list(d)}-g{g}-b{int(b)}"


def inputs_for(case: tuple[Any, ...], dtype: str) -> list[np.ndarray]:
    x, w, _, _, _, _, bias = case
    arrays = [RNG.standard_normal(x), RNG.standard_normal(w)]
    if bias:
        arrays.append(RNG.standard_normal(w[0]))
    return [a.astype(dtype) for a in arrays]


def op_name(case: tuple[Any, ...]) -> str:
    return "conv2d" if len(case[0]) == 4 else "conv"


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_matches_the_float64_reference(case: tuple[Any, ...], dtype: str) -> None:
    _, _, strides, pads, dilation, groups, _ = case
    name = "conv" if dtype == "float16" else op_name(case)
    ins = inputs_for(case, dtype)
    attrs = attrs_for(strides, pads, dilation, groups)
    got = run_op(name, ins, attrs, lowered=True)[0]
    want = reference(ins[0], ins[1], ins[2] if len(ins) == 3 else None, strides, pads,
                     dilation, groups)
    assert got.dtype == np.dtype(dtype)
    rtol, atol = {"float16": (2e-3, 2e-3), "float32": (1e-5, 1e-5),
                  "float64": (1e-12, 1e-12)}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sim_equals_cpu_bitwise(case: tuple[Any, ...]) -> None:
    _, _, strides, pads, dilation, groups, _ = case
    ins = inputs_for(case, "float32")
    attrs = attrs_for(strides, pads, dilation, groups)
    cpu = run_op(op_name(case), ins, attrs, lowered=True)[0]
    sim = run_op(op_name(case), ins, attrs, graphrt.sim(0), lowered=True)[0]
    np.testing.assert_array_equal(cpu, sim)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_planned_workspace_holding_garbage_gives_the_plain_result(
        case: tuple[Any, ...], dtype: str) -> None:
    """The executor's scratch is shared between nodes: whatever it holds must not leak."""
    _, _, strides, pads, dilation, groups, _ = case
    name = "conv" if dtype == "float16" else op_name(case)
    op = get_op(name)
    attrs = op.attrs.model_validate(attrs_for(strides, pads, dilation,
                                              groups))
    ins = inputs_for(case, dtype)
    types = [TensorType(a.shape, dtype) for a in ins]
    (out_type,) = op.infer(types, attrs, [None] * len(ins))
    assert op.workspace is not None
    spaces = [np.full(t.shape, np.nan, t.dtype) for t in op.workspace(np, types, attrs)]
    planned = np.full(out_type.shape, np.nan, dtype)
    op.positional(np, attrs, len(ins))(*ins, planned, *spaces)
    plain = np.empty(out_type.shape, dtype)
    op.positional(np, attrs, len(ins))(*ins, plain)
    np.testing.assert_array_equal(planned, plain)
    np.testing.assert_array_equal(planned, run_op(name, ins, attrs.model_dump())[0])


def test_the_plan_picks_the_algorithm() -> None:
    def plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], groups: int = 1,
             dtype: str = "float32", stride: int = 1, pad: int = 0) -> Any:
        gemm = "float32" if dtype == "float16" else dtype
        return conv_plan(x, w, out, dtype, gemm, True, groups, (stride, stride), (1, 1),
                         (pad, pad))

    one_by_one = plan((1, 64, 14, 14), (32, 64, 1, 1), (1, 32, 14, 14))
    # the data is its own im2col, the GEMM writes out: every workspace array is empty
    assert [t.shape for t in one_by_one.workspace()] == [(0,)] * 3
    small = plan((8, 64, 7, 7), (32, 64, 3, 3), (8, 32, 7, 7), pad=1)
    assert not small.per_image and small.cols == (1, 576, 8 * 49)  # one GEMM for the batch
    large = plan((8, 64, 56, 56), (32, 64, 1, 1), (8, 32, 56, 56))
    assert large.per_image and not any(prod(t.shape) for t in large.workspace())  # no copies
    half = plan((1, 64, 14, 14), (32, 64, 1, 1), (1, 32, 14, 14), dtype="float16")
    assert [(t.dtype, bool(prod(t.shape))) for t in half.workspace()] == [
        ("float32", True), ("float32", True), ("float32", False)]  # cast once
    depthwise = plan((2, 32, 14, 14), (32, 1, 3, 3), (2, 32, 7, 7), groups=32, stride=2,
                     pad=1)
    assert depthwise.planes is not None and depthwise.cols is not None
    assert depthwise.cols[0] == 4  # one plane per stride phase


def conv_relu_lib() -> tuple[Library, Any]:
    """A lib with one function, conv2d (2 groups, padded) then relu; and that function."""
    lib = Library()
    fn = lib.define("fused_conv_relu", {
        "inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
            {"op": "conv2d", "inputs": ["x", "w", "b"], "outputs": ["t"],
             "attrs": {"padding": [1, 1, 1, 1], "groups": 2}},
            {"op": "relu", "inputs": ["t"], "outputs": ["y"]}]})
    return lib, fn


def test_the_lowering_plans_the_workspace_for_its_call_only() -> None:
    _, fn = conv_relu_lib()
    f32 = "float32"
    ins = [TensorType((4, 6, 8, 8), f32), TensorType((6, 3, 3, 3), f32),
           TensorType((6,), f32)]
    out = TensorType((4, 6, 8, 8), f32)
    lowering = fn.lower(ins, [out], kernels=chain("cpu", np), where="node 3")
    op = get_op("conv2d")
    declared = op.workspace(np, ins, op.attrs.model_validate({"padding": [1] * 4,
                                                              "groups": 2}))
    assert declared  # im2col and the batch's GEMM result
    assert lowering.intermediates == (out, *declared)  # t, then the workspace
    conv_call = lowering.calls[0]
    assert conv_call.args == (0, 1, 2, 4, 5, 6, 7)  # inputs, t, then the workspace (3)
    assert lowering.lifetimes[1:] == ((0, 0),) * len(declared)


def test_a_graph_with_a_conv_function_runs_with_planned_scratch() -> None:
    x = RNG.standard_normal((4, 6, 8, 8)).astype(np.float32)
    w = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    g = GraphBuilder()
    ix, iw, ib = g.input("x", [4, 6, 8, 8]), g.input("w", [6, 3, 3, 3]), g.input("b", [6])
    y = g.op("conv", "fused_conv_relu", [ix, iw, ib], shape=[4, 6, 8, 8])
    graph = g.build(heads=[y])
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        mod = graphrt.create(graph, conv_relu_lib()[0], device)
        # t (4*6*8*8), im2col (27 * 256) and the batch's GEMM result (6 * 256), float32
        assert sum(d.scratch for d in mod.placement().devices) >= 4 * (1536 + 6912 + 1536)
        mod.run(x=x, w=w, b=b)
        first = np.asarray(mod.get_output(0)).copy()
        mod.run(x=x, w=w, b=b)
        np.testing.assert_array_equal(np.asarray(mod.get_output(0)), first)
        want = np.maximum(reference(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 2), 0)
        np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5)
