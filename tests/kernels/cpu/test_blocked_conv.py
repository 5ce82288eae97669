"""The compiled convolutions on blocked data (``[N, C/8, H, W, 8]``, conv2d's ``NCHW8c``):
every pair of data and output layouts, for the direct kernel (3x3, strided, 1x1 read in
place) and the depthwise one, with their epilogues, against the reference in NCHW."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import blocked, with_epilogue

from graphrt.kernels.cpu.conv import DepthwisePlan, DirectPlan, conv_epilogue
from graphrt.kernels.cpu.jit import direct_conv
from graphrt.ops import TensorType
from graphrt.ops.convolution import run_conv as reference_conv
from graphrt.ops.nn import nchw_shape

pytestmark = pytest.mark.skipif(direct_conv() is None, reason="the compiled kernels are off")
RNG = np.random.default_rng(8)


def unblocked(x: np.ndarray) -> np.ndarray:
    n, c8, h, w, _ = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(n, c8 * 8, h, w)


# (x shape, O, kernel, strides, begin/end pads, groups)
CASES = [
    ((1, 16, 9, 11), 24, (3, 3), (1, 1), (1, 1), 1),   # padded copy from blocked data
    ((2, 8, 10, 10), 16, (3, 3), (2, 2), (1, 1), 1),   # strided, a half block of channels
    ((1, 32, 7, 7), 40, (1, 1), (1, 1), (0, 0), 1),    # 1x1 read in place
    ((2, 32, 7, 7), 56, (1, 1), (1, 1), (0, 0), 1),    # 32, then 24 as a tile of 32
    ((1, 32, 20, 20), 64, (3, 3), (1, 1), (1, 1), 1),  # two tiles at once (12 pixels)
    ((2, 64, 19, 19), 96, (1, 1), (1, 1), (0, 0), 1),  # the same, and a short last tile
    ((1, 16, 12, 12), 8, (1, 1), (2, 2), (0, 0), 1),   # strided 1x1 read in place
    ((1, 24, 13, 17), 24, (3, 3), (1, 1), (1, 1), 24),  # depthwise
    ((2, 16, 15, 15), 16, (3, 3), (2, 2), (1, 1), 16),  # depthwise, strided, batch
    ((1, 8, 40, 70), 8, (5, 5), (1, 1), (2, 2), 8),    # depthwise, several bands
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("layouts", [(True, False), (False, True), (True, True)],
                         ids=["in", "out", "both"])
@pytest.mark.parametrize(("residual", "relu", "clip"),
                         [(False, False, None), (True, True, None), (False, False, (0.0, 6.0))])
def test_blocked_layouts_match_the_reference(case: tuple[Any, ...], layouts: tuple[bool, bool],
                                             residual: bool, relu: bool,
                                             clip: tuple[float, float] | None) -> None:
    xs, o, k, s, p, groups = case
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((o, xs[1] // groups, *k)).astype(np.float32)
    bias = RNG.standard_normal(o).astype(np.float32)
    out_shape = (xs[0], o, *((xs[2 + a] + 2 * p[a] - k[a]) // s[a] + 1 for a in range(2)))
    want = np.empty(out_shape, np.float32)
    reference_conv(np, [x, w, bias], [want], groups, s, (1, 1), p)
    extra = RNG.standard_normal(out_shape).astype(np.float32) if residual else None
    want = with_epilogue(want, extra, relu, clip)
    data = blocked(x) if layouts[0] else x
    out_type = TensorType(out_shape if not layouts[1] else
                          (out_shape[0], o // 8, *out_shape[2:], 8), "float32")
    kernel = conv_epilogue(np, [TensorType(data.shape, "float32"),
                                TensorType(w.shape, "float32"), TensorType((o,), "float32")],
                           out_type, groups, s, (1, 1), p, residual, relu, clip, layouts)
    assert kernel is not None
    got = np.full(out_type.shape, 7.0, np.float32)
    args: list[Any] = [data, w, bias]
    if extra is not None:
        args.append(blocked(extra) if layouts[1] else extra)
    kernel(*args, got)
    result = unblocked(got) if layouts[1] else got
    np.testing.assert_allclose(result, want, rtol=1e-4, atol=1e-4)


def test_logical_shapes_and_plans() -> None:
    assert nchw_shape((2, 3, 5, 5, 8), True) == (2, 24, 5, 5)
    from graphrt.kernels.cpu.conv import conv_plan
    pointwise = conv_plan((1, 16, 28, 28), (32, 16, 1, 1), (1, 32, 28, 28), "float32",
                          "float32", True, 1, (1, 1), (1, 1), (0, 0), True, (True, True))
    assert isinstance(pointwise.direct, DirectPlan)  # blocked data: never the panel kernel
    assert pointwise.direct.blocked and pointwise.direct.blocked_out
    assert pointwise.direct.workspace is None  # read in place
    depthwise = conv_plan((1, 16, 9, 9), (16, 1, 3, 3), (1, 16, 9, 9), "float32", "float32",
                          True, 16, (1, 1), (1, 1), (1, 1), True, (True, False))
    assert isinstance(depthwise.direct, DepthwisePlan) and not depthwise.direct.blocked_out


@pytest.mark.parametrize("case", CASES[:4], ids=[str(i) for i in range(4)])
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_taps_give_the_bits_of_one_offset_per_tap(
        case: tuple[Any, ...], threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocked plan's tiles load one offset per 8 taps (``GROUPED``); with an offset per
    tap (the flag off) they sum the same products in the same order: the same bits."""
    from graphrt.kernels.cpu import crew

    kernels = direct_conv()
    assert kernels is not None
    xs, o, k, s, p, _ = case
    x = blocked(RNG.standard_normal(xs).astype(np.float32))
    w = RNG.standard_normal((o, xs[1], *k)).astype(np.float32)
    bias = RNG.standard_normal(o).astype(np.float32)
    extra = RNG.standard_normal((xs[0], o, *((xs[2 + a] + 2 * p[a] - k[a]) // s[a] + 1
                                             for a in range(2)))).astype(np.float32)
    out_type = TensorType((extra.shape[0], o // 8, *extra.shape[2:], 8), "float32")
    results = []
    for grouped in (kernels.GROUPED, 0):
        monkeypatch.setattr(kernels, "GROUPED", grouped)
        kernel = conv_epilogue(np, [TensorType(x.shape, "float32"), TensorType(w.shape, "float32"),
                                    TensorType((o,), "float32")],
                               out_type, 1, s, (1, 1), p, True, False, (0.0, 6.0), (True, True))
        assert kernel is not None
        got = np.full(out_type.shape, np.nan, np.float32)
        with crew.threads_held(threads):
            kernel(x, w, bias, blocked(extra), got)
        results.append(got)
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
def test_a_tile_of_32_for_24_channels_stores_only_those(kernel: tuple[int, int]) -> None:
    """On AVX-512, the blocked output's last 24 channels run as one tile of 32 (the packed
    weight's zeros past them) that stores three groups of 8: nothing past the output's end,
    where the fourth would land, is written."""
    x = blocked(RNG.standard_normal((1, 16, 12, 12)).astype(np.float32))
    w = RNG.standard_normal((24, 16, *kernel)).astype(np.float32)
    bias = RNG.standard_normal(24).astype(np.float32)
    pad = kernel[0] // 2
    out_type = TensorType((1, 3, 12, 12, 8), "float32")
    conv = conv_epilogue(np, [TensorType(x.shape, "float32"), TensorType(w.shape, "float32"),
                              TensorType((24,), "float32")],
                         out_type, 1, (1, 1), (1, 1), (pad, pad), False, True, None,
                         (True, True))
    assert conv is not None
    size = int(np.prod(out_type.shape))
    room = np.full(2 * size, 7.0, np.float32)  # the output, then what follows it in memory
    got = room[:size].reshape(out_type.shape)
    conv(x, w, bias, got)
    want = np.empty((1, 24, 12, 12), np.float32)
    reference_conv(np, [unblocked(x), w, bias], [want], 1, (1, 1), (1, 1), (pad, pad))
    np.testing.assert_allclose(unblocked(got), np.maximum(want, 0), rtol=1e-4, atol=1e-4)
    assert (room[size:] == 7.0).all()
