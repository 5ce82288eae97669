"""The compiled depthwise convolution (graphrt.kernels.cpu.direct_conv.depthwise_jobs): every
geometry against the reference, its epilogue, and the cpu provider choosing it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import with_epilogue

from graphrt.kernels import Epilogue, chain
from graphrt.kernels.cpu.conv import DepthwisePlan, conv_plan, run_conv_with
from graphrt.kernels.cpu.jit import direct_conv
from graphrt.ops import TensorType, get_op
from graphrt.ops.convolution import run_conv as reference_conv

KERNELS = direct_conv()
pytestmark = pytest.mark.skipif(KERNELS is None, reason="the compiled kernels are off")
RNG = np.random.default_rng(21)

# (x shape, kernel, strides, dilation, begin pads, end pads)
CASES = [
    ((1, 8, 12, 12), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((2, 5, 11, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((1, 4, 10, 13), (5, 5), (1, 2), (1, 1), (2, 2), (2, 2)),
    ((1, 3, 9, 9), (3, 3), (1, 1), (2, 2), (2, 0), (1, 2)),
    ((3, 16, 7, 7), (3, 3), (1, 1), (1, 1), (0, 0), (0, 0)),
    ((1, 6, 4, 4), (7, 7), (1, 1), (1, 1), (3, 3), (3, 3)),  # windows larger than the image
    ((1, 2, 1, 1), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((1, 3, 2, 1), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # no column reads all 3 taps
    ((2, 4, 6, 5), (3, 3), (1, 1), (1, 3), (0, 2), (1, 1)),  # wide dilation, one-sided pads
    ((1, 5, 6, 9), (3, 3), (1, 1), (1, 1), (0, 2), (2, 0)),  # a small plane, uneven pads
    ((1, 3, 5, 40), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # wider than SMALL_PLANE
    ((1, 2, 4, 6), (3, 3), (1, 1), (1, 1), (0, 0), (0, 0)),  # a small plane read in part
    ((2, 16, 9, 19), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # whole groups, 8-pixel blocks
    ((1, 24, 17, 17), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),  # whole groups, stride 2
    ((1, 12, 40, 130), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # bands, a partial group
    ((1, 8, 30, 120), (5, 5), (2, 2), (1, 1), (2, 2), (2, 2)),  # bands of a wide kernel
    ((1, 8, 6, 37), (3, 3), (2, 1), (1, 1), (1, 1), (1, 1)),  # row tiles, rows 2 apart
    ((1, 16, 5, 35), (3, 3), (1, 2), (1, 1), (0, 1), (1, 0)),  # row tiles of stride 2
]


def out_shape(xs: tuple[int, ...], k: tuple[int, int], s: tuple[int, int],
              d: tuple[int, int], b: tuple[int, int], e: tuple[int, int]) -> tuple[int, ...]:
    return (xs[0], xs[1], *((xs[2 + a] + b[a] + e[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1
                            for a in range(2)))


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize(("bias", "residual", "relu", "clip"),
                         [(False, False, False, None), (True, False, True, None),
                          (True, True, True, None), (True, False, False, (0.0, 6.0)),
                          (False, True, False, (-0.5, 0.5))])
def test_the_depthwise_kernel_matches_the_reference(case: tuple[Any, ...], bias: bool,
                                                    residual: bool, relu: bool,
                                                    clip: tuple[float, float] | None) -> None:
    xs, k, s, d, b, e = case
    os_ = out_shape(xs, k, s, d, b, e)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((xs[1], 1, *k)).astype(np.float32)
    inputs = [x, w] + ([RNG.standard_normal(xs[1]).astype(np.float32)] if bias else [])
    extra = RNG.standard_normal(os_).astype(np.float32) if residual else None
    plan = conv_plan(xs, w.shape, os_, "float32", "float32", True, xs[1], s, d, b, True)
    assert isinstance(plan.direct, DepthwisePlan)
    got = np.full(os_, 9.0, np.float32)
    run_conv_with(KERNELS, np, inputs, [got], xs[1], s, d, b, extra, relu, clip)
    want = np.empty(os_, np.float32)
    reference_conv(np, inputs, [want], xs[1], s, d, b)
    want = with_epilogue(want, extra, relu, clip)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_cpu_provider_runs_a_depthwise_convolution_with_its_epilogue() -> None:
    conv = get_op("conv2d")
    attrs = conv.attrs.model_validate({"padding": (1, 1, 1, 1), "groups": 8})
    types = [TensorType((1, 8, 10, 10), "float32"), TensorType((8, 1, 3, 3), "float32"),
             TensorType((8,), "float32")]
    out = conv.infer(types, attrs, [None] * 3)
    prepared = chain("cpu", np).prepare(conv, attrs, types, out, Epilogue(relu=True))
    assert prepared is not None and prepared.provider == "cpu"
    x, w, bias = (RNG.standard_normal(t.shape).astype(np.float32) for t in types)
    got = np.empty(out[0].shape, np.float32)
    prepared.call(x, w, bias, got, *(np.empty(t.shape, t.dtype) for t in prepared.workspace))
    want = np.empty_like(got)
    reference_conv(np, [x, w, bias], [want], 8, (1, 1), (1, 1), (1, 1))
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-5, atol=1e-5)


def test_a_grouped_convolution_that_is_not_depthwise_keeps_the_reference() -> None:
    plan = conv_plan((1, 8, 6, 6), (8, 2, 3, 3), (1, 8, 4, 4), "float32", "float32", True, 4,
                     (1, 1), (1, 1), (0, 0), True)
    assert plan.direct is None and plan.reference is not None


@pytest.mark.parametrize(("kernel", "strides", "dilation", "row"),
                         [((3, 3), (1, 1), (1, 1), 1), ((3, 3), (2, 2), (1, 1), 2),
                          ((3, 3), (1, 2), (1, 1), 2), ((3, 3), (2, 1), (1, 1), 1),
                          ((3, 3), (1, 3), (1, 1), 0), ((3, 3), (1, 1), (1, 2), 0),
                          ((5, 5), (1, 1), (1, 1), 0), ((1, 3), (1, 1), (1, 1), 1)])
def test_the_row_tiles_run_kernels_three_taps_wide(kernel: tuple[int, int],
                                                   strides: tuple[int, int],
                                                   dilation: tuple[int, int], row: int) -> None:
    """Tiles of 8 pixels in one output row share each kernel row's input vectors where the
    kernel is 3 taps wide (dilation 1) and the column stride 1 or 2 (geometry's last
    entry); other kernels keep the general tile."""
    xs = (1, 8, 20, 40)
    os_ = out_shape(xs, kernel, strides, dilation, (0, 0), (0, 0))
    plan = conv_plan(xs, (8, 1, *kernel), os_, "float32", "float32", True, 8, strides,
                     dilation, (0, 0), True).direct
    assert isinstance(plan, DepthwisePlan) and int(plan.geometry[-1]) == row
