"""The nn ops (dense, matmul, conv, pools, norms, resize) against plain-loop NumPy references."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from ops_harness import blocked, channels_last, run_op
from pydantic import ValidationError

import graphrt
from graphrt.ops import OpError, TensorType, get_op

DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
RNG = np.random.default_rng(1234)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = 1e-12 if actual.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------
# References: explicit loops, slow but obviously correct.


def ref_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    out = np.zeros((*batch, m, n))
    for idx in np.ndindex(*batch):
        am, bm, om = a[idx], b[idx], out[idx]
        for i in range(m):
            for j in range(n):
                om[i, j] = sum(float(am[i, p]) * float(bm[p, j]) for p in range(k))
    return out


def ref_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, int],
               padding: tuple[int, int, int, int], dilation: tuple[int, int],
               groups: int) -> np.ndarray:
    n_, c_, h, wd = x.shape
    o_, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    (sh, sw), (dh, dw) = strides, dilation
    padded = np.zeros((n_, c_, h + pt + pb, wd + pl + pr))
    padded[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o_ // groups
    out = np.zeros((n_, o_, oh, ow))
    for n in range(n_):
        for o in range(o_):
            g = o // og
            for y in range(oh):
                for xx in range(ow):
                    acc = 0.0 if b is None else float(b[o])
                    for c in range(cg):
                        for i in range(kh):
                            for j in range(kw):
                                acc += (padded[n, g * cg + c, y * sh + i * dh, xx * sw + j * dw]
                                        * float(w[o, c, i, j]))
                    out[n, o, y, xx] = acc
    return out


def ref_conv2d_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
                         strides: tuple[int, int], padding: tuple[int, int, int, int],
                         dilation: tuple[int, int], groups: int,
                         output_padding: tuple[int, int]) -> np.ndarray:
    n_, c_, h, wd = x.shape
    _, og, kh, kw = w.shape
    pt, pl, pb, pr = padding
    (sh, sw), (dh, dw) = strides, dilation
    oh = (h - 1) * sh - pt - pb + dh * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * sw - pl - pr + dw * (kw - 1) + output_padding[1] + 1
    cg = c_ // groups
    out = np.zeros((n_, og * groups, oh, ow))
    for n in range(n_):
        for c in range(c_):
            g = c // cg
            for y in range(h):
                for xx in range(wd):
                    for o in range(og):
                        for i in range(kh):
                            for j in range(kw):
                                ty, tx = y * sh + i * dh - pt, xx * sw + j * dw - pl
                                if 0 <= ty < oh and 0 <= tx < ow:
                                    out[n, g * og + o, ty, tx] += (float(x[n, c, y, xx])
                                                                   * float(w[c, o, i, j]))
    if b is not None:
        out += b.reshape(-1, 1, 1)
    return out


def pool_out_size(size: int, k: int, s: int, p0: int, p1: int, ceil: bool) -> int:
    """PyTorch's pooling_output_shape with asymmetric padding."""
    out = (size + p0 + p1 - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p0:
        out -= 1
    return out


def ref_pool(x: np.ndarray, kind: str, pool: tuple[int, int], strides: tuple[int, int],
             padding: tuple[int, int, int, int], ceil: bool,
             include_pad: bool = False) -> np.ndarray:
    n_, c_, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = pool, strides, padding
    oh = pool_out_size(h, kh, sh, pt, pb, ceil)
    ow = pool_out_size(w, kw, sw, pl, pr, ceil)
    out = np.zeros((n_, c_, oh, ow))
    for n in range(n_):
        for c in range(c_):
            for y in range(oh):
                for xx in range(ow):
                    hs, ws = y * sh - pt, xx * sw - pl
                    he, we = min(hs + kh, h + pb), min(ws + kw, w + pr)
                    pool_area = (he - hs) * (we - ws)
                    hs0, ws0, he0, we0 = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
                    values = [float(x[n, c, i, j]) for i in range(hs0, he0)
                              for j in range(ws0, we0)]
                    if kind == "max":
                        out[n, c, y, xx] = max(values)
                    else:
                        out[n, c, y, xx] = sum(values) / (pool_area if include_pad
                                                          else len(values))
    return out


def onnx_source(x_out: int, n_in: int, n_out: int, mode: str) -> float:
    scale = n_out / n_in
    if mode == "half_pixel":
        return (x_out + 0.5) / scale - 0.5
    if mode == "align_corners":
        return 0.0 if n_out == 1 else x_out * (n_in - 1) / (n_out - 1)
    return x_out / scale


def onnx_nearest(v: float, n_in: int, rounding: str) -> int:
    f = math.floor(v)
    if rounding == "floor":
        idx = f
    elif rounding == "ceil":
        idx = math.ceil(v)
    elif rounding == "round_prefer_floor":
        idx = f if v - f <= 0.5 else f + 1
    else:  # round_prefer_ceil
        idx = f if v - f < 0.5 else f + 1
    return min(max(idx, 0), n_in - 1)


def ref_resize(x: np.ndarray, size: tuple[int, int], method: str, mode: str,
               rounding: str | None = None) -> np.ndarray:
    n_, c_, h, w = x.shape
    oh, ow = size
    out = np.zeros((n_, c_, oh, ow))
    rounding = rounding or ("floor" if mode == "asymmetric" else "round_prefer_floor")

    def at(n: int, c: int, i: int, j: int) -> float:  # ONNX linear: edge-padded neighbours
        return float(x[n, c, min(max(i, 0), h - 1), min(max(j, 0), w - 1)])

    for n in range(n_):
        for c in range(c_):
            for y in range(oh):
                for xx in range(ow):
                    sy, sx = onnx_source(y, h, oh, mode), onnx_source(xx, w, ow, mode)
                    if method == "nearest":
                        out[n, c, y, xx] = x[n, c, onnx_nearest(sy, h, rounding),
                                             onnx_nearest(sx, w, rounding)]
                        continue
                    sy, sx = min(max(sy, 0.0), h - 1), min(max(sx, 0.0), w - 1)
                    y0, x0 = math.floor(sy), math.floor(sx)
                    ty, tx = sy - y0, sx - x0
                    top = (1 - tx) * at(n, c, y0, x0) + tx * at(n, c, y0, x0 + 1)
                    bottom = (1 - tx) * at(n, c, y0 + 1, x0) + tx * at(n, c, y0 + 1, x0 + 1)
                    out[n, c, y, xx] = (1 - ty) * top + ty * bottom
    return out


# --------------------------------------------------------------------------------------------
# dense, matmul, batch_matmul


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("data_shape", [(5,), (3, 5), (2, 3, 5)])
def test_dense(device: graphrt.Device, dtype: str, data_shape: tuple[int, ...]) -> None:
    x, w, b = rand(*data_shape, dtype=dtype), rand(4, 5, dtype=dtype), rand(4, dtype=dtype)
    expected = ref_matmul(x.reshape(-1, 5), w.T).reshape(*data_shape[:-1], 4)
    close(run_op("dense", [x, w], {}, device)[0], expected)
    close(run_op("dense", [x, w, b], {}, device)[0], expected + b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("a_shape", "b_shape", "ta", "tb"), [
    ((3, 4), (4, 5), False, False),
    ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True),
    ((4, 3), (5, 4), True, True),
    ((2, 1, 3, 4), (3, 4, 5), False, False),   # batch dims broadcast
    ((3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (1, 5, 4), True, True),
])
def test_matmul(device: graphrt.Device, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                ta: bool, tb: bool) -> None:
    a, b = rand(*a_shape), rand(*b_shape)
    expected = ref_matmul(np.swapaxes(a, -1, -2) if ta else a,
                          np.swapaxes(b, -1, -2) if tb else b)
    got = run_op("matmul", [a, b], {"transpose_a": ta, "transpose_b": tb}, device)[0]
    close(got, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("a_shape", "b_shape", "ta", "tb"), [
    ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((1, 3, 4), (3, 5, 4), False, True),
    ((3, 4, 3), (1, 4, 5), True, False),
])
def test_batch_matmul(device: graphrt.Device, a_shape: tuple[int, ...],
                      b_shape: tuple[int, ...], ta: bool, tb: bool) -> None:
    a, b = rand(*a_shape, dtype="float64"), rand(*b_shape, dtype="float64")
    expected = ref_matmul(np.swapaxes(a, -1, -2) if ta else a,
                          np.swapaxes(b, -1, -2) if tb else b)
    got = run_op("batch_matmul", [a, b], {"transpose_a": ta, "transpose_b": tb}, device)[0]
    close(got, expected)


# --------------------------------------------------------------------------------------------
# conv2d, conv2d_transpose

CONV_CASES = [
    # (data shape, out channels, kernel, strides, padding, dilation, groups)
    ((2, 3, 6, 5), 4, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((1, 3, 7, 8), 2, (3, 2), (2, 3), (1, 0, 2, 1), (1, 1), 1),     # strides, asym. padding
    ((1, 2, 7, 7), 3, (2, 3), (1, 2), (2, 1, 0, 1), (2, 3), 1),     # dilation
    ((2, 4, 6, 6), 6, (3, 3), (2, 1), (1, 1, 1, 1), (1, 2), 2),     # groups 2
    ((1, 4, 5, 6), 8, (3, 3), (1, 1), (1, 2, 1, 0), (1, 1), 4),     # depthwise, multiplier 2
    ((2, 3, 5, 5), 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3),     # depthwise
    ((2, 4, 4, 5), 6, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),     # 1x1 fast path
    ((1, 2, 4, 4), 2, (1, 1), (2, 2), (1, 0, 0, 1), (1, 1), 1),     # 1x1, strided and padded
    ((1, 1, 3, 3), 2, (2, 2), (1, 1), (3, 3, 3, 3), (1, 1), 1),     # windows all in padding
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "o", "k", "strides", "padding", "dilation", "groups"),
                         CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(device: graphrt.Device, shape: tuple[int, int, int, int], o: int,
                k: tuple[int, int], strides: tuple[int, int],
                padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int,
                bias: bool) -> None:
    x, w = rand(*shape), rand(o, shape[1] // groups, *k)
    b = rand(o) if bias else None
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
    got = run_op("conv2d", [x, w] + ([b] if b is not None else []), attrs, device)[0]
    close(got, ref_conv2d(x, w, b, strides, padding, dilation, groups))


@pytest.mark.parametrize("device", DEVICES)
def test_conv2d_float64(device: graphrt.Device) -> None:
    x, w, b = rand(1, 4, 6, 5, dtype="float64"), rand(4, 2, 3, 2, dtype="float64"), rand(
        4, dtype="float64")
    attrs = {"strides": (2, 1), "padding": (1, 0, 1, 2), "dilation": (1, 2), "groups": 2}
    got = run_op("conv2d", [x, w, b], attrs, device)[0]
    assert got.dtype == np.float64
    close(got, ref_conv2d(x, w, b, (2, 1), (1, 0, 1, 2), (1, 2), 2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("size", "strides", "padding"), [
    ((3, 3), (2, 2), (1, 1, 1, 1)),  # ResNet's stem pool
    ((2, 3), (1, 2), (0, 1, 1, 0)),
    ((1, 1), (2, 2), (0, 0, 0, 0)),
])
def test_max_pool2d_blocked_layout(device: graphrt.Device, size: tuple[int, int],
                                   strides: tuple[int, int], padding: tuple[int, ...]) -> None:
    """``NCHW8c`` data ([N, C/8, H, W, 8]) pools as its NCHW image does, blocked (the
    reference unblocks around NCHW, the cpu's compiled pool reads it in place); a NaN stays
    in its channel's windows."""
    x = rand(2, 16, 9, 8)
    x[1, 5, 4, 4] = np.nan
    attrs = {"pool_size": size, "strides": strides, "padding": padding}
    want = run_op("max_pool2d", [x], attrs, device)[0]
    got = run_op("max_pool2d", [blocked(x)], {**attrs, "layout": "NCHW8c"}, device)[0]
    np.testing.assert_array_equal(got, blocked(want))
    assert np.isnan(want).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("data_layout", "out_layout"),
                         [("NCHW8c", "NCHW"), ("NCHW", "NCHW8c"), ("NCHW8c", "NCHW8c")])
@pytest.mark.parametrize("groups", [1, 16])
def test_conv2d_blocked_layouts(device: graphrt.Device, data_layout: str, out_layout: str,
                                groups: int) -> None:
    """``NCHW8c`` data and outputs ([N, C/8, H, W, 8]) are the NCHW convolution's, blocked
    (the reference unblocks around NCHW, the cpu's compiled kernels read them in place)."""
    x, w, b = rand(2, 16, 7, 6), rand(16, 16 // groups, 3, 3), rand(16)
    attrs = {"padding": (1, 1, 1, 1), "strides": (2, 1), "groups": groups,
             "data_layout": data_layout, "out_layout": out_layout}
    data = blocked(x) if data_layout == "NCHW8c" else x
    got = run_op("conv2d", [data, w, b], attrs, device)[0]
    want = ref_conv2d(x, w, b, (2, 1), (1, 1, 1, 1), (1, 1), groups)
    close(got, blocked(want) if out_layout == "NCHW8c" else want)


def _near(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape and got.dtype == dtype
    tolerance = 1e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("data_layout", "out_layout", "kernel_layout"),
                         [("NHWC", "NHWC", "OHWI"), ("NHWC", "NCHW", "OIHW"),
                          ("NCHW", "NHWC", "OHWI"), ("NCHW", "NCHW", "OHWI")])
@pytest.mark.parametrize(("groups", "dilation", "dtype"),
                         [(1, (1, 1), "float32"), (2, (2, 1), "float32"),
                          (12, (1, 1), "float32"), (1, (1, 1), "float16")])
def test_conv2d_channels_last(device: graphrt.Device, data_layout: str, out_layout: str,
                              kernel_layout: str, groups: int, dilation: tuple[int, int],
                              dtype: str) -> None:
    """``NHWC`` data and outputs and an ``OHWI`` weight are the NCHW convolution's,
    transposed (the reference runs NCHW copies; cuDNN reads them as they are)."""
    x, w, b = (rand(2, 12, 7, 6, dtype=dtype), rand(12, 12 // groups, 3, 2, dtype=dtype),
               rand(12, dtype=dtype))
    attrs = {"padding": (1, 0, 1, 1), "strides": (2, 1), "groups": groups,
             "dilation": dilation, "data_layout": data_layout, "out_layout": out_layout,
             "kernel_layout": kernel_layout}
    got = run_op("conv2d", [channels_last(x) if data_layout == "NHWC" else x,
                            channels_last(w) if kernel_layout == "OHWI" else w, b], attrs,
                 device)[0]
    want = ref_conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                      (2, 1), (1, 0, 1, 1), dilation, groups)
    _near(got, channels_last(want) if out_layout == "NHWC" else want, dtype)


def test_conv2d_channels_last_workspace_holds_its_copies() -> None:
    """The executor plans the NCHW copies after the convolution's own three arrays: data,
    weight and output, in that order, where they are channels last."""
    op = get_op("conv2d")
    attrs = op.attrs.model_validate({"data_layout": "NHWC", "out_layout": "NHWC",
                                     "kernel_layout": "OHWI", "padding": (1, 1, 1, 1)})
    types = [TensorType((1, 5, 6, 4), F32), TensorType((8, 3, 3, 4), F32)]
    assert op.infer(types, attrs, [None, None]) == [TensorType((1, 5, 6, 8), F32)]
    assert op.workspace is not None
    copies = op.workspace(np, types, attrs)[-3:]
    assert [t.shape for t in copies] == [(1, 4, 5, 6), (8, 4, 3, 3), (1, 8, 5, 6)]


TRANSPOSE_CASES = [
    # (data shape, out channels per group, kernel, strides, padding, dilation, groups, out pad)
    ((2, 3, 4, 4), 2, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    ((1, 2, 3, 4), 3, (3, 2), (2, 3), (1, 0, 2, 1), (1, 1), 1, (1, 2)),
    ((1, 4, 3, 3), 2, (3, 3), (2, 2), (1, 1, 1, 1), (2, 1), 2, (1, 0)),
    ((2, 3, 4, 3), 1, (2, 2), (2, 1), (0, 1, 1, 0), (1, 1), 3, (0, 0)),   # depthwise
    ((1, 2, 2, 2), 2, (3, 3), (1, 1), (0, 0, 0, 0), (2, 2), 2, (1, 1)),   # out pad < dilation
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "og", "k", "strides", "padding", "dilation", "groups", "opad"),
                         TRANSPOSE_CASES)
def test_conv2d_transpose(device: graphrt.Device, shape: tuple[int, int, int, int], og: int,
                          k: tuple[int, int], strides: tuple[int, int],
                          padding: tuple[int, int, int, int], dilation: tuple[int, int],
                          groups: int, opad: tuple[int, int]) -> None:
    x, w, b = rand(*shape), rand(shape[1], og, *k), rand(og * groups)
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups,
             "output_padding": opad}
    close(run_op("conv2d_transpose", [x, w], attrs, device)[0],
          ref_conv2d_transpose(x, w, None, strides, padding, dilation, groups, opad))
    close(run_op("conv2d_transpose", [x, w, b], attrs, device)[0],
          ref_conv2d_transpose(x, w, b, strides, padding, dilation, groups, opad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "o", "k", "strides", "padding", "dilation", "groups"),
                         CONV_CASES)
def test_conv2d_transpose_is_the_adjoint_of_conv2d(
        device: graphrt.Device, shape: tuple[int, int, int, int], o: int, k: tuple[int, int],
        strides: tuple[int, int], padding: tuple[int, int, int, int],
        dilation: tuple[int, int], groups: int) -> None:
    """<conv2d(x, w), y> == <x, conv2d_transpose(y, w)> with the same weight and attrs."""
    x, w = rand(*shape, dtype="float64"), rand(o, shape[1] // groups, *k, dtype="float64")
    attrs: dict[str, Any] = {"strides": strides, "padding": padding, "dilation": dilation,
                             "groups": groups}
    conv = run_op("conv2d", [x, w], attrs, device)[0]
    y = rand(*conv.shape, dtype="float64")
    # output_padding recovers the rows/columns the strided conv2d skipped at the end.
    h, wd = shape[2:]
    opad = tuple(size + p0 + p1 - d * (kk - 1) - 1 - (out - 1) * s
                 for size, p0, p1, d, kk, out, s in ((h, padding[0], padding[2], dilation[0],
                                                      k[0], conv.shape[2], strides[0]),
                                                     (wd, padding[1], padding[3], dilation[1],
                                                      k[1], conv.shape[3], strides[1])))
    back = run_op("conv2d_transpose", [y, w], {**attrs, "output_padding": opad}, device)[0]
    assert back.shape == x.shape
    np.testing.assert_allclose(np.vdot(conv, y), np.vdot(x, back), rtol=1e-12)


class CountingXp:
    """numpy, counting the calls of its matrix-product functions."""

    PRODUCTS = frozenset({"matmul", "tensordot", "dot", "einsum", "inner", "vdot"})

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(np, name)
        if name not in self.PRODUCTS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_conv_calls_blas_once_not_per_pixel(groups: int) -> None:
    """An 8x8-output conv2d (and conv2d_transpose) makes at most ``groups`` matrix products."""
    x, w = rand(2, 8, 10, 10), rand(8, 8 // groups, 3, 3)
    op = get_op("conv2d")
    attrs = op.attrs.model_validate({"groups": groups})
    (out_type,) = op.infer([TensorType(x.shape, "float32"), TensorType(w.shape, "float32")],
                           attrs, [None, None])
    assert out_type.shape == (2, 8, 8, 8)
    out = np.empty(out_type.shape, np.float32)
    xp = CountingXp()
    op.compute(xp, [x, w], [out], attrs)
    depthwise = groups == x.shape[1]  # shifted multiply-adds, no matrix product
    assert (0 if depthwise else 1) <= sum(xp.calls.values()) <= groups
    close(out, ref_conv2d(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1), groups))

    top = get_op("conv2d_transpose")
    tattrs = top.attrs.model_validate({"groups": groups})
    back = np.empty(x.shape, np.float32)
    xp = CountingXp()
    top.compute(xp, [out, w], [back], tattrs)
    assert 1 <= sum(xp.calls.values()) <= groups


def test_non_contiguous_outputs_are_written() -> None:
    x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(3)
    op = get_op("conv2d")
    attrs = op.attrs.model_validate({})
    out = np.zeros((1, 3, 3, 6), np.float32)[..., ::2]
    op.compute(np, [x, w, b], [out], attrs)
    close(out, ref_conv2d(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 1))
    x2, w2 = rand(3, 4), rand(2, 4)
    out2 = np.zeros((3, 4), np.float32)[:, ::2]
    get_op("dense").compute(np, [x2, w2], [out2], get_op("dense").attrs.model_validate({}))
    close(out2, ref_matmul(x2, w2.T))


# --------------------------------------------------------------------------------------------
# Pools

POOL_CASES = [
    # (data shape, pool, strides, padding, ceil_mode)
    ((2, 3, 6, 6), (2, 2), None, (0, 0, 0, 0), False),
    ((1, 2, 7, 5), (3, 2), (2, 1), (1, 0, 1, 1), False),
    ((1, 2, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0), True),     # ceil adds a partial window
    ((1, 2, 7, 8), (3, 3), (2, 3), (1, 2, 2, 0), True),
    ((1, 1, 3, 3), (2, 2), (2, 2), (1, 1, 1, 1), True),     # a window starting in the end pad
    ((2, 2, 6, 7), (3, 2), (3, 2), (2, 1, 0, 1), True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "pool", "strides", "padding", "ceil"), POOL_CASES)
def test_max_pool2d(device: graphrt.Device, shape: tuple[int, int, int, int],
                    pool: tuple[int, int], strides: tuple[int, int] | None,
                    padding: tuple[int, int, int, int], ceil: bool) -> None:
    x = rand(*shape)
    attrs = {"pool_size": pool, "strides": strides, "padding": padding, "ceil_mode": ceil}
    close(run_op("max_pool2d", [x], attrs, device)[0],
          ref_pool(x, "max", pool, strides or pool, padding, ceil))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "pool", "strides", "padding", "ceil"), POOL_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool2d(device: graphrt.Device, shape: tuple[int, int, int, int],
                    pool: tuple[int, int], strides: tuple[int, int] | None,
                    padding: tuple[int, int, int, int], ceil: bool, include_pad: bool) -> None:
    x = rand(*shape)
    attrs = {"pool_size": pool, "strides": strides, "padding": padding, "ceil_mode": ceil,
             "count_include_pad": include_pad}
    close(run_op("avg_pool2d", [x], attrs, device)[0],
          ref_pool(x, "avg", pool, strides or pool, padding, ceil, include_pad))


@pytest.mark.parametrize("device", DEVICES)
def test_pool_known_values(device: graphrt.Device) -> None:
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    ceil = run_op("avg_pool2d", [x], {"pool_size": (2, 2), "ceil_mode": True}, device)[0]
    assert ceil.shape == (1, 1, 3, 3)
    assert ceil[0, 0, 0, 0] == 3.0 and ceil[0, 0, 2, 2] == 24.0 and ceil[0, 0, 0, 2] == 6.5
    floor = run_op("max_pool2d", [x], {"pool_size": (2, 2)}, device)[0]
    np.testing.assert_array_equal(floor[0, 0], [[6, 8], [16, 18]])
    padded = {"pool_size": (3, 3), "strides": (1, 1), "padding": (1, 1, 1, 1)}
    exclude = run_op("avg_pool2d", [x], padded, device)[0]
    include = run_op("avg_pool2d", [x], {**padded, "count_include_pad": True}, device)[0]
    assert exclude[0, 0, 0, 0] == (0 + 1 + 5 + 6) / 4
    assert include[0, 0, 0, 0] == (0 + 1 + 5 + 6) / 9
    # A window that would start in the end padding is dropped (PyTorch, ONNX opset 19).
    small = np.ones((1, 1, 3, 3), np.float32)
    dropped = run_op("max_pool2d", [small], {"pool_size": (2, 2), "padding": (1, 1, 1, 1),
                                             "ceil_mode": True}, device)[0]
    assert dropped.shape == (1, 1, 2, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_max_pool2d_integers(device: graphrt.Device) -> None:
    x = RNG.integers(-100, 100, size=(1, 2, 5, 4)).astype(np.int32)
    got = run_op("max_pool2d", [x], {"pool_size": (2, 2), "padding": (1, 1, 0, 0)}, device)[0]
    assert got.dtype == np.int32
    close(got.astype(np.float64), ref_pool(x, "max", (2, 2), (2, 2), (1, 1, 0, 0), False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_global_pools(device: graphrt.Device, dtype: str) -> None:
    x = rand(2, 3, 4, 5, dtype=dtype)
    avg = np.zeros((2, 3, 1, 1))
    top = np.zeros((2, 3, 1, 1))
    for n in range(2):
        for c in range(3):
            values = [float(v) for v in x[n, c].ravel()]
            avg[n, c, 0, 0] = sum(values) / len(values)
            top[n, c, 0, 0] = max(values)
    close(run_op("global_avg_pool2d", [x], {}, device)[0], avg)
    close(run_op("global_max_pool2d", [x], {}, device)[0], top)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "pool", "strides", "padding", "ceil"), POOL_CASES[:3])
def test_pools_channels_last(device: graphrt.Device, shape: tuple[int, int, int, int],
                             pool: tuple[int, int], strides: tuple[int, int] | None,
                             padding: tuple[int, int, int, int], ceil: bool) -> None:
    x = rand(*shape)
    attrs = {"pool_size": pool, "strides": strides, "padding": padding, "ceil_mode": ceil,
             "layout": "NHWC"}
    close(run_op("max_pool2d", [channels_last(x)], attrs, device)[0],
          channels_last(ref_pool(x, "max", pool, strides or pool, padding, ceil)))
    close(run_op("avg_pool2d", [channels_last(x)], {**attrs, "count_include_pad": True}, device)[0],
          channels_last(ref_pool(x, "avg", pool, strides or pool, padding, ceil, True)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_pools_of_channels_last_data_give_nchw(device: graphrt.Device,
                                                      dtype: str) -> None:
    """[N, C, 1, 1] either way: of a 1x1 image, NCHW and NHWC are the same bytes."""
    x = rand(2, 5, 4, 3, dtype=dtype)
    for name, reduce in (("global_avg_pool2d", np.mean), ("global_max_pool2d", np.max)):
        got = run_op(name, [channels_last(x)], {"layout": "NHWC"}, device)[0]
        _near(got, reduce(x.astype(np.float64), axis=(2, 3), keepdims=True), dtype)


# --------------------------------------------------------------------------------------------
# Normalization


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 4, 5), 1), ((4, 3), 1), ((2, 5, 3), -1),
                                             ((3, 2, 2), 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm(device: graphrt.Device, shape: tuple[int, ...], axis: int,
                    dtype: str) -> None:
    x = rand(*shape, dtype=dtype)
    c = shape[axis]
    gamma, beta, mean = rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype)
    var = (np.abs(rand(c)) + 0.1).astype(dtype)
    eps = 1e-3
    moved = np.moveaxis(x, axis, 0).astype(np.float64)
    expected = np.empty_like(moved)
    for i in range(c):
        expected[i] = ((moved[i] - float(mean[i])) / math.sqrt(float(var[i]) + eps)
                       * float(gamma[i]) + float(beta[i]))
    got = run_op("batch_norm", [x, gamma, beta, mean, var], {"axis": axis, "epsilon": eps},
                 device)[0]
    close(got, np.moveaxis(expected, 0, axis))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 6), -1), ((4, 5), 0), ((2, 4, 3), 1),
                                             ((7,), 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm(device: graphrt.Device, shape: tuple[int, ...], axis: int,
                    dtype: str) -> None:
    x = rand(*shape, dtype=dtype)
    size = shape[axis]
    gamma, beta = rand(size, dtype=dtype), rand(size, dtype=dtype)
    moved = np.moveaxis(x, axis, -1).astype(np.float64)
    expected = np.empty_like(moved)
    for idx in np.ndindex(*moved.shape[:-1]):
        v = moved[idx]
        mean = sum(v) / size
        var = sum((e - mean) ** 2 for e in v) / size
        expected[idx] = (v - mean) / math.sqrt(var + 1e-5) * gamma + beta
    close(run_op("layer_norm", [x, gamma, beta], {"axis": axis}, device)[0],
          np.moveaxis(expected, -1, axis))


# --------------------------------------------------------------------------------------------
# resize2d

MODES = ["half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["nearest", "bilinear"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("shape", "size"), [((1, 2, 3, 4), (7, 10)), ((2, 1, 8, 6), (3, 4)),
                                             ((1, 1, 5, 5), (1, 5)), ((1, 1, 4, 3), (4, 1))])
def test_resize2d(device: graphrt.Device, method: str, mode: str, shape: tuple[int, ...],
                  size: tuple[int, int]) -> None:
    x = rand(*shape)
    attrs = {"size": size, "method": method, "coordinate_transformation_mode": mode}
    close(run_op("resize2d", [x], attrs, device)[0], ref_resize(x, size, method, mode))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("mode", MODES)
def test_resize2d_nearest_modes(device: graphrt.Device, rounding: str, mode: str) -> None:
    x = rand(1, 1, 6, 4, dtype="float64")
    attrs = {"size": (4, 9), "method": "nearest", "coordinate_transformation_mode": mode,
             "nearest_mode": rounding}
    close(run_op("resize2d", [x], attrs, device)[0], ref_resize(x, (4, 9), "nearest", mode,
                                                                 rounding))


@pytest.mark.parametrize("device", DEVICES)
def test_resize2d_known_values(device: graphrt.Device) -> None:
    row = np.array([[[[0.0, 1.0]]]], np.float32)

    def resize(x: np.ndarray, size: tuple[int, int], method: str, mode: str,
               **extra: Any) -> np.ndarray:
        attrs = {"size": size, "method": method, "coordinate_transformation_mode": mode, **extra}
        return np.asarray(run_op("resize2d", [x], attrs, device)[0][0, 0])

    np.testing.assert_allclose(resize(row, (1, 3), "bilinear", "align_corners"), [[0, 0.5, 1]])
    np.testing.assert_allclose(resize(row, (1, 4), "bilinear", "half_pixel"),
                               [[0, 0.25, 0.75, 1]])
    np.testing.assert_allclose(resize(row, (1, 4), "bilinear", "asymmetric"),
                               [[0, 0.5, 1, 1]])
    np.testing.assert_array_equal(resize(row, (1, 4), "nearest", "half_pixel"), [[0, 0, 1, 1]])
    np.testing.assert_array_equal(resize(row, (1, 4), "nearest", "asymmetric"), [[0, 0, 1, 1]])
    quad = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    # Halves: half_pixel 4 -> 2 samples 0.5 and 2.5; round_prefer_floor takes 0 and 2.
    np.testing.assert_array_equal(resize(quad, (1, 2), "nearest", "half_pixel"), [[0, 2]])
    np.testing.assert_array_equal(
        resize(quad, (1, 2), "nearest", "half_pixel", nearest_mode="round_prefer_ceil"),
        [[1, 3]])


# --------------------------------------------------------------------------------------------
# Rejections

F32 = "float32"
REJECTIONS: list[tuple[str, list[Any], dict[str, Any], str]] = [
    ("dense", [((3, 4), F32)], {}, "expected 2 or 3 inputs"),
    ("dense", [((3, 4), F32), ((5, 3), F32)], {}, "K = 4"),
    ("dense", [((3, 4), F32), ((5, 4, 1), F32)], {}, "weight must be 2-D"),
    ("dense", [((3, 4), F32), ((5, 4), F32), ((4,), F32)], {}, "bias must be [5]"),
    ("dense", [((3, 4), F32), ((5, 4), "float64")], {}, "dtype of data"),
    ("dense", [((3, 4), "int32"), ((5, 4), "int32")], {}, "data must be one of"),
    ("matmul", [((3, 4), F32), ((5, 6), F32)], {}, "inner dimensions differ"),
    ("matmul", [((3, 4), F32), ((3, 6), F32)], {"transpose_b": True}, "inner dimensions"),
    ("matmul", [((4,), F32), ((4, 6), F32)], {}, "at least 2-D"),
    ("matmul", [((2, 3, 4), F32), ((3, 4, 6), F32)], {}, "do not broadcast"),
    ("matmul", [((3, 4), "float16"), ((4, 6), F32)], {}, "dtype of a"),
    ("batch_matmul", [((2, 3, 4), F32), ((3, 4, 5), F32)], {}, "equal or 1"),
    ("batch_matmul", [((3, 4), F32), ((4, 5), F32)], {}, "a must be 3-D"),
    ("batch_matmul", [((2, 3, 4), F32), ((2, 5, 4), F32)], {}, "inner dimensions"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 2, 3, 3), F32)], {}, "C/groups = 3/1 = 3"),
    ("conv2d", [((1, 4, 5, 5), F32), ((4, 2, 3, 3), F32)], {"groups": 3}, "divisible by groups"),
    ("conv2d", [((1, 4, 5, 5), F32), ((3, 2, 3, 3), F32)], {"groups": 2}, "output channels"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 3, 3, 3), F32), ((3,), F32)], {}, "bias must be [4]"),
    ("conv2d", [((3, 5, 5), F32), ((4, 3, 3, 3), F32)], {}, "data must be 4-D"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 3, 3), F32)], {}, "weight must be 4-D"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 3, 3, 3), "float64")], {}, "dtype of data"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 3, 3, 3), F32), ((4,), "float16")], {},
     "bias must have the dtype"),
    ("conv2d", [((1, 3, 2, 5), F32), ((4, 3, 3, 3), F32)], {}, "output would be empty"),
    ("conv2d", [((1, 3, 5, 5), F32), ((4, 3, 3, 3), F32)], {"dilation": (3, 1)},
     "output would be empty"),
    ("conv2d", [((0, 3, 5, 5), F32), ((4, 3, 3, 3), F32)], {}, "no empty axis"),
    ("conv2d", [((1, 3, 5, 5), F32)], {}, "expected 2 or 3 inputs"),
    ("conv2d", [((1, 2, 5, 5, 4), F32), ((8, 8, 3, 3), F32)], {"data_layout": "NCHW8c"},
     "[N, C/8, H, W, 8]"),
    ("conv2d", [((1, 16, 5, 5), F32), ((8, 16, 3, 3), F32)], {"data_layout": "NCHW8c"},
     "data must be 5-D"),
    ("conv2d", [((1, 8, 5, 5), F32), ((12, 8, 3, 3), F32)], {"out_layout": "NCHW8c"},
     "divisible by 8, given 12"),
    ("conv2d", [((1, 5, 5, 3, 1), F32), ((4, 3, 3, 3), F32)], {"data_layout": "NHWC"},
     "data must be 4-D (NHWC)"),
    ("conv2d", [((1, 5, 5, 3), F32), ((4, 3, 3), F32)], {"data_layout": "NHWC",
                                                          "kernel_layout": "OHWI"},
     "OHWI: [O, KH, KW, C/groups]"),
    ("conv2d", [((1, 5, 5, 3), F32), ((4, 3, 3, 2), F32)], {"data_layout": "NHWC",
                                                             "kernel_layout": "OHWI"},
     "C/groups = 3/1 = 3"),
    ("max_pool2d", [((1, 5, 5), F32)], {"pool_size": (2, 2), "layout": "NHWC"},
     "data must be 4-D (NHWC)"),
    ("max_pool2d", [((1, 8, 5, 5), F32)], {"pool_size": (2, 2), "layout": "NCHW8c"},
     "data must be 5-D (NCHW8c)"),
    ("global_avg_pool2d", [((1, 5, 5), F32)], {"layout": "NHWC"}, "data must be 4-D (NHWC)"),
    ("conv2d_transpose", [((1, 3, 5, 5), F32), ((4, 2, 3, 3), F32)], {}, "C_in = 3"),
    ("conv2d_transpose", [((1, 3, 5, 5), F32), ((3, 2, 3, 3), F32)], {"groups": 2},
     "divisible by groups"),
    ("conv2d_transpose", [((1, 4, 5, 5), F32), ((4, 2, 3, 3), F32), ((2,), F32)],
     {"groups": 2}, "bias must be [4]"),
    ("conv2d_transpose", [((1, 4, 5, 5), F32), ((4, 2, 3, 3), F32)],
     {"strides": (2, 2), "output_padding": (2, 0)}, "output_padding along H"),
    ("conv2d_transpose", [((1, 4, 1, 1), F32), ((4, 2, 1, 1), F32)],
     {"padding": (1, 0, 0, 0)}, "output would be empty"),
    ("max_pool2d", [((1, 3, 5), F32)], {"pool_size": (2, 2)}, "data must be 4-D"),
    ("max_pool2d", [((1, 3, 1, 5), F32)], {"pool_size": (2, 2)}, "output would be empty"),
    ("max_pool2d", [((1, 3, 5, 5), F32)], {"pool_size": (2, 2), "padding": (2, 0, 0, 0)},
     "smaller than the pool size"),
    ("max_pool2d", [((1, 3, 5, 5), "bool")], {"pool_size": (2, 2)}, "data must be one of"),
    ("avg_pool2d", [((1, 3, 5, 5), "int32")], {"pool_size": (2, 2)}, "data must be one of"),
    ("avg_pool2d", [((1, 3, 5, 5), F32), ((1,), F32)], {"pool_size": (2, 2)},
     "expected 1 inputs"),
    ("global_avg_pool2d", [((3, 5, 5), F32)], {}, "data must be 4-D"),
    ("global_max_pool2d", [((1, 3, 0, 5), F32)], {}, "no empty axis"),
    ("batch_norm", [((2, 3, 4), F32)] + [((4,), F32)] * 4, {}, "gamma must be [3]"),
    ("batch_norm", [((2, 3, 4), F32)] + [((3,), F32)] * 3 + [((3,), "float64")], {},
     "moving_var must have the dtype"),
    ("batch_norm", [((2, 3, 4), F32)] + [((3,), F32)] * 4, {"axis": 3}, "out of range"),
    ("batch_norm", [((2, 3, 4), F32)] + [((3,), F32)] * 3, {}, "expected 5 inputs"),
    ("layer_norm", [((2, 3, 4), F32), ((3,), F32), ((3,), F32)], {}, "gamma must be [4]"),
    ("layer_norm", [((2, 3, 4), F32), ((4,), F32), ((4, 1), F32)], {}, "beta must be [4]"),
    ("layer_norm", [((2, 3, 4), "int64"), ((4,), "int64"), ((4,), "int64")], {},
     "data must be one of"),
    ("resize2d", [((3, 4, 4), F32)], {"size": (2, 2), "method": "nearest"}, "data must be 4-D"),
    ("resize2d", [((1, 3, 4, 4), "int8")], {"size": (2, 2), "method": "bilinear"},
     "data must be one of"),
]


@pytest.mark.parametrize(("name", "inputs", "attrs", "message"), REJECTIONS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(REJECTIONS)])
def test_rejections(name: str, inputs: list[tuple[tuple[int, ...], str]], attrs: dict[str, Any],
                    message: str) -> None:
    op = get_op(name)
    types = [TensorType(shape, dtype) for shape, dtype in inputs]
    with pytest.raises(OpError) as err:
        op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))
    assert message in str(err.value)


@pytest.mark.parametrize(("name", "attrs"), [
    ("conv2d", {"strides": (0, 1)}),
    ("conv2d", {"padding": (0, 0, -1, 0)}),
    ("conv2d", {"padding": (1, 1)}),
    ("conv2d", {"groups": 0}),
    ("conv2d", {"dilation": (1, 0)}),
    ("conv2d", {"output_padding": (1, 1)}),
    ("conv2d", {"data_layout": "NCHW4c"}),
    ("conv2d", {"kernel_layout": "HWIO"}),
    ("avg_pool2d", {"pool_size": (2, 2), "layout": "NCHW8c"}),
    ("conv2d_transpose", {"out_layout": "NCHW8c"}),
    ("conv2d_transpose", {"output_padding": (-1, 0)}),
    ("max_pool2d", {}),
    ("max_pool2d", {"pool_size": (0, 2)}),
    ("avg_pool2d", {"pool_size": (2, 2), "strides": (2, 0)}),
    ("max_pool2d", {"pool_size": (2, 2), "count_include_pad": True}),
    ("batch_norm", {"epsilon": -1.0}),
    ("layer_norm", {"axis": 1.5}),
    ("resize2d", {"size": (2, 2)}),
    ("resize2d", {"size": (2, 0), "method": "nearest"}),
    ("resize2d", {"size": (2, 2), "method": "bicubic"}),
    ("resize2d", {"size": (2, 2), "method": "nearest",
                  "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("matmul", {"transpose_c": True}),
    ("dense", {"units": 3}),
])
def test_bad_attributes_are_refused(name: str, attrs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        get_op(name).attrs.model_validate(attrs)


def test_registered() -> None:
    for name in ["dense", "matmul", "batch_matmul", "conv2d", "conv2d_transpose", "max_pool2d",
                 "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", "batch_norm",
                 "layer_norm", "resize2d"]:
        op = get_op(name)
        assert not any(op.needs_data(3))
        assert op.elementwise is None


def test_lrn_with_a_window_wider_than_the_channels_returns_at_once() -> None:
    """size=2**62 over 2 channels: every window holds both channels, and the kernel loops over
    the shifts that reach a channel, not over the window (it never returned)."""
    x = np.array([[1.0, 2.0]], np.float32)
    size = 2**62
    (got,) = run_op("lrn", [x], {"size": size, "alpha": 1.0, "beta": 1.0, "bias": 1.0})
    np.testing.assert_allclose(got, x / (1.0 + 5.0 / size), rtol=1e-6)
