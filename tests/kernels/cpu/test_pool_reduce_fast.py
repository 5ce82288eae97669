"""Separable pools, one-pass reductions, softmax and normalize (issue 14 part 2).

Every fast path is checked against a brute-force reference (one window or row at a time, in
float64), on cpu and sim (which must agree bit for bit), including the corners the fast paths
treat separately: padding, ceil mode, dilation, divisors, float16 accumulation, chunked pools,
long rows, non-trailing axes, non-contiguous outputs and data far from zero.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from ops_harness import blocked, run_op

import graphrt
from graphrt.kernels import chain
from graphrt.kernels.cpu import pool as pooling
from graphrt.ops import TensorType
from graphrt.ops import pooling as reference_pooling
from graphrt.ops.base import get_op
from graphrt.ops.normalization import NormalizeAttrs, normalize
from graphrt.ops.pooling import window_reduce
from graphrt.ops.reductions import ROW_SUM_MAX, row_sums

RNG = np.random.default_rng(14)


def _reference_pool(x: np.ndarray, out_shape: tuple[int, ...], kernel: list[int],
                    strides: list[int], dilation: list[int], begin: list[int], kind: str,
                    divisor: str | None = None, end: list[int] | None = None) -> np.ndarray:
    """One window at a time in float64 (padding skipped); ``divisor``: None (sum or max),
    ``"valid"`` (real elements) or ``"padded"`` (positions inside the padded input)."""
    result = np.empty(out_shape, dtype=np.float64)
    space = x.shape[2:]
    for o in itertools.product(*(range(d) for d in out_shape[2:])):
        axes = []
        padded = 1
        for a, oa in enumerate(o):
            pos = [oa * strides[a] - begin[a] + k * dilation[a] for k in range(kernel[a])]
            axes.append([p for p in pos if 0 <= p < space[a]])
            if divisor == "padded":
                assert end is not None
                padded *= sum(1 for p in pos if p < space[a] + end[a])
        window = x[(slice(None), slice(None), *np.ix_(*axes))].astype(np.float64)
        flat = window.reshape(*x.shape[:2], -1)
        value = flat.max(axis=2) if kind == "max" else flat.sum(axis=2)
        if divisor == "valid":
            value = value / flat.shape[2]
        elif divisor == "padded":
            value = value / padded
        result[(slice(None), slice(None), *o)] = value
    return result


POOLS_2D = [  # pool_size, strides, padding (t, l, b, r), ceil_mode, H, W
    ((3, 3), (2, 2), (1, 1, 1, 1), False, 12, 12),
    ((3, 3), (2, 2), (1, 1, 1, 1), True, 11, 12),
    ((2, 3), (1, 2), (1, 0, 0, 2), False, 7, 9),
    ((5, 5), (1, 1), (2, 2, 2, 2), False, 6, 5),
    ((1, 1), (1, 1), (0, 0, 0, 0), False, 4, 5),
    ((2, 2), (3, 3), (0, 0, 0, 0), True, 8, 8),
    ((4, 1), (2, 1), (3, 0, 3, 0), True, 9, 3),
]


@pytest.mark.parametrize("case", POOLS_2D, ids=str)
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_max_and_avg_pool2d_match_the_window_by_window_reference(case: Any, device: str
                                                                  ) -> None:
    size, strides, pads, ceil, h, w = case
    x = RNG.standard_normal((2, 3, h, w)).astype(np.float32)
    dev = graphrt.device(f"{device}:0")
    attrs = {"pool_size": size, "strides": strides, "padding": pads, "ceil_mode": ceil}
    (got,) = run_op("max_pool2d", [x], attrs, dev)
    want = _reference_pool(x, got.shape, list(size), list(strides), [1, 1], list(pads[:2]),
                           "max")
    np.testing.assert_array_equal(got, want.astype(np.float32))
    for include in (False, True):
        (got,) = run_op("avg_pool2d", [x], {**attrs, "count_include_pad": include}, dev)
        want = _reference_pool(x, got.shape, list(size), list(strides), [1, 1],
                               list(pads[:2]), "sum", "padded" if include else "valid",
                               list(pads[2:]))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_nd_pools_with_dilation_match_the_reference(dtype: str) -> None:
    x = (RNG.standard_normal((1, 2, 7, 6, 9)) * 4).astype(dtype)
    attrs = {"kernel": [2, 3, 2], "strides": [2, 1, 3], "dilation": [2, 1, 3],
             "padding": [1, 1, 0, 1, 0, 1]}
    (got,) = run_op("max_pool", [x], attrs)
    want = _reference_pool(x, got.shape, [2, 3, 2], [2, 1, 3], [2, 1, 3], [1, 1, 0], "max")
    np.testing.assert_array_equal(got, want.astype(dtype))
    if dtype == "int32":
        return
    (got,) = run_op("avg_pool", [x], attrs)
    want = _reference_pool(x, got.shape, [2, 3, 2], [2, 1, 3], [2, 1, 3], [1, 1, 0], "sum",
                           "valid")
    tol = 1e-3 if dtype == "float16" else 1e-6  # float16 sums in float32, rounded once
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_float16_avg_pool_accumulates_in_float32() -> None:
    # 2048 + 1 + 1 + ... rounds to 2048 at every step in float16, not in float32.
    x = np.ones((1, 1, 1, 9), dtype=np.float16)
    x[0, 0, 0, 0] = 2048
    (got,) = run_op("avg_pool2d", [x], {"pool_size": (1, 9)})
    assert got.item() == np.float16(2056 / 9)


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_chunked_window_reduce_equals_one_pass(kind: Any, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    x = RNG.standard_normal((3, 5, 10, 11)).astype(np.float32)
    windows = [(3, 2, 1, 1), (2, 2, 2, 0)]
    whole, chunked = np.empty((3, 5, 5, 5), np.float32), np.empty((3, 5, 5, 5), np.float32)
    window_reduce(np, x, whole, windows, kind)
    monkeypatch.setattr(reference_pooling, "CHUNK_BYTES", x[0, 0].nbytes * 4)  # 4 planes a chunk
    window_reduce(np, x, chunked, windows, kind)
    np.testing.assert_array_equal(whole, chunked)
    strided = np.empty((3, 5, 5, 10), np.float32)[..., ::2]  # not contiguous: one pass
    window_reduce(np, x, strided, windows, kind)
    np.testing.assert_array_equal(whole, strided)


COMPILED_MAX = [  # x shape, windows per axis (kernel, stride, dilation, pad begin), out size
    ((1, 64, 112, 112), [(3, 2, 1, 1), (3, 2, 1, 1)], (56, 56)),  # ResNet's: on every core
    ((2, 3, 40, 37), [(3, 1, 1, 1), (3, 1, 1, 1)], (40, 37)),  # stride 1; planes in bands
    ((1, 2, 13, 17), [(2, 3, 1, 0), (4, 3, 1, 2)], (4, 6)),  # stride 3: the general loops
    ((1, 3, 9, 11), [(3, 1, 3, 2), (2, 2, 4, 1)], (5, 4)),  # dilated rows and columns
    ((2, 2, 6, 5), [(1, 1, 1, 0), (3, 2, 1, 1)], (6, 3)),  # one row, strided columns
    ((2, 2, 6, 5), [(4, 2, 1, 3), (1, 1, 1, 0)], (3, 5)),  # one column, a window of 4 rows
    ((1, 1, 5, 5), [(3, 2, 1, 1), (3, 2, 1, 1)], (3, 3)),  # ceil mode's last window
]


@pytest.mark.parametrize("case", COMPILED_MAX, ids=str)
def test_the_compiled_max_pool_gives_the_bits_of_the_separable_one(case: Any) -> None:
    pytest.importorskip("numba")
    shape, windows, size = case
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::97] = np.nan  # NaN wins wherever it is in a window, as np.maximum
    x.reshape(-1)[5::89] = -np.inf
    want = np.empty((*shape[:2], *size), np.float32)
    window_reduce(np, x, want, windows, "max")
    got = np.full_like(want, 7.0)
    pooling.window_max(np, x, got, windows)
    np.testing.assert_array_equal(got, want)
    kernel, stride, dilation, begin = (list(v) for v in zip(*windows, strict=True))
    reference = _reference_pool(x, want.shape, kernel, stride, dilation, begin, "max")
    np.testing.assert_array_equal(got, reference.astype(np.float32))


@pytest.mark.parametrize("case", COMPILED_MAX, ids=str)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_the_compiled_max_pool_of_8_bit_data_equals_the_reference(case: Any, dtype: str
                                                                  ) -> None:
    """8-bit data (a QDQ model's max pool) pools in its own dtype, the padding its lowest
    value: the reference's window by window, on the compiled kernel."""
    pytest.importorskip("numba")
    shape, windows, size = case
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    x.reshape(-1)[::7] = info.min  # the lowest value, as the padding is
    want = np.empty((*shape[:2], *size), dtype)
    window_reduce(np, x, want, windows, "max")
    got = np.full_like(want, 7)
    pooling.window_max(np, x, got, windows)
    np.testing.assert_array_equal(got, want)
    kernel, stride, dilation, begin = (list(v) for v in zip(*windows, strict=True))
    reference = _reference_pool(x.astype(np.float64), want.shape, kernel, stride, dilation,
                                begin, "max")
    np.testing.assert_array_equal(got, reference.astype(dtype))
    assert pooling.max_pool_call(TensorType(shape, dtype), TensorType(want.shape, dtype),
                                 windows, dynamic=False) is not None


def test_a_window_of_padding_only_is_minus_infinity_on_both_paths() -> None:
    pytest.importorskip("numba")
    x = RNG.standard_normal((1, 1, 2, 3)).astype(np.float32)
    windows = [(2, 1, 3, 1), (1, 1, 1, 0)]  # rows -1 and 2 of 2: both padding
    want = np.empty((1, 1, 1, 3), np.float32)
    window_reduce(np, x, want, windows, "max")
    got = np.empty_like(want)
    pooling.window_max(np, x, got, windows)
    np.testing.assert_array_equal(got, want)
    assert (got == -np.inf).all()


def test_the_max_pool_takes_the_numpy_path_where_the_kernel_does_not_apply(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    windows = [(3, 2, 1, 1), (3, 2, 1, 1)]
    want = np.empty((2, 3, 4, 4), np.float32)
    window_reduce(np, x, want, windows, "max")
    called: list[bool] = []
    real = pooling.window_reduce

    def spy(*args: Any) -> None:
        called.append(True)
        real(*args)

    monkeypatch.setattr(pooling, "window_reduce", spy)
    empty = np.empty((0, 3, 4, 4), np.float32)  # no planes: nothing to do on either path
    pooling.window_max(np, x[:0], empty, windows)
    assert called
    called.clear()
    strided = np.empty((2, 3, 4, 8), np.float32)[..., ::2]  # an output not contiguous
    pooling.window_max(np, x, strided, windows)
    np.testing.assert_array_equal(strided, want)
    assert called
    called.clear()
    monkeypatch.setattr(pooling.jit, "pool_kernels", lambda: None)  # no numba
    got = np.empty_like(want)
    pooling.window_max(np, x, got, windows)
    np.testing.assert_array_equal(got, want)
    assert called


@pytest.mark.parametrize("shape", [(1, 1280, 7, 7), (3, 5, 1, 1), (2, 9, 13, 11)])
def test_the_compiled_global_average_pool_matches_float64(shape: tuple[int, ...]) -> None:
    """One compiled sum per plane (by vector lanes) on cpu, the numpy mean on sim: both
    within float32 rounding of the float64 mean, NaN and infinity kept, whatever the output's
    strides."""
    op = get_op("global_avg_pool2d")
    out_type = TensorType((*shape[:2], 1, 1), "float32")
    prepared = chain("cpu", np).prepare(op, op.attrs(), [TensorType(shape, "float32")],
                                        [out_type])
    if pooling.jit.pool_kernels() is None:
        assert prepared is None
        pytest.skip("the compiled kernels are off")
    assert prepared is not None and prepared.provider == "cpu"
    x = (RNG.standard_normal(shape) * 100 + 1000).astype(np.float32)
    x.reshape(-1)[0], x.reshape(-1)[-1] = np.nan, np.inf
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    out = np.empty(out_type.shape, np.float32)
    prepared.call(x, out)
    np.testing.assert_allclose(out, want, rtol=2e-6)
    strided = np.empty((shape[0], 2 * shape[1], 1, 1), np.float32)[:, ::2]
    prepared.call(x, strided)
    np.testing.assert_array_equal(strided, out)
    (got,) = run_op("global_avg_pool2d", [x], None, graphrt.device("sim:0"))  # the reference
    np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("shape", [(2, 16, 7, 7), (1, 8, 1, 1), (3, 24, 5, 9)])
def test_the_global_average_pool_of_blocked_data(shape: tuple[int, ...]) -> None:
    """NCHW8c data ([N, C/8, H, W, 8]), as the cpu's chains of convolutions leave it: the
    compiled kernel sums a block's eight lanes side by side, the reference (sim) means over H
    and W; both give the NCHW [N, C, 1, 1] mean."""
    op = get_op("global_avg_pool2d")
    attrs = op.attrs(layout="NCHW8c")
    n, c = shape[:2]
    x = (RNG.standard_normal(shape) * 100 + 1000).astype(np.float32)
    data = blocked(x)
    out_type = TensorType((n, c, 1, 1), "float32")
    prepared = chain("cpu", np).prepare(op, attrs, [TensorType(data.shape, "float32")],
                                        [out_type])
    if pooling.jit.pool_kernels() is None:
        pytest.skip("the compiled kernels are off")
    assert prepared is not None and prepared.provider == "cpu"
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    out = np.empty(out_type.shape, np.float32)
    prepared.call(data, out)
    np.testing.assert_allclose(out, want, rtol=2e-6)
    (got,) = run_op("global_avg_pool2d", [data], {"layout": "NCHW8c"},
                    graphrt.device("sim:0"))
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_the_global_average_pool_of_other_types_takes_the_reference() -> None:
    op = get_op("global_avg_pool2d")
    for x in (TensorType((1, 4, 3, 3), "float64"), TensorType((1, 4, 0, 3), "float32")):
        out = TensorType((1, 4, 1, 1), x.dtype)
        prepared = chain("cpu", np).prepare(op, op.attrs(), [x], [out])
        assert prepared is not None and prepared.provider == "reference"


@pytest.mark.parametrize("op", ["max_pool2d", "max_pool"])
def test_the_compiled_max_pool_is_loaded_at_create_not_on_the_first_run(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    real = pooling.jit.pool_kernels
    monkeypatch.setattr(pooling.jit, "pool_kernels", lambda: loads.append(op) or real())
    attrs = {"pool_size": [2, 2]} if op == "max_pool2d" else {"kernel": [2, 2],
                                                               "strides": [2, 2]}
    types = [TensorType((1, 2, 4, 4), "float32")], [TensorType((1, 2, 2, 2), "float32")]
    prepared = chain("cpu", np).prepare(get_op(op), get_op(op).attrs(**attrs), *types)
    assert loads == [op] and prepared is not None
    kernel = prepared.call
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    out = np.empty((1, 2, 2, 2), np.float32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)))


@pytest.mark.parametrize("length", [1, 7, 256, ROW_SUM_MAX, ROW_SUM_MAX + 1, 5000])
def test_row_sums_match_float64(length: int) -> None:
    rows = RNG.standard_normal((6, length)).astype(np.float32)
    out = np.empty(6, np.float32)
    for square in (False, True):
        row_sums(np, rows, out, square=square)
        wide = rows.astype(np.float64)
        want = (wide * wide if square else wide).sum(axis=1)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(length))


REDUCE_CASES = [  # kind, shape, axes, keepdims, dtype
    ("mean", (2, 3, 40), [-1], True, "float32"),
    ("mean", (2, 3, 40), [1, 2], False, "float16"),
    ("sum", (4, 5, 6), [0], False, "float32"),
    ("sum", (4, 5, 6), [0, 2], True, "int8"),
    ("sum", (3, 2000), [1], False, "float32"),
    ("mean", (5, 7), None, False, "int32"),
    ("max", (4, 5, 6), [1], True, "float16"),
    ("min", (4, 5, 6), [2], False, "int16"),
    ("sum", (4, 5), [], False, "float32"),
]


@pytest.mark.parametrize("case", REDUCE_CASES, ids=str)
def test_reduce_writes_its_output_in_one_pass(case: Any) -> None:
    kind, shape, axes, keepdims, dtype = case
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    attrs = {"kind": kind, "axes": axes, "keepdims": keepdims}
    (got,) = run_op("reduce", [x], attrs)
    (sim,) = run_op("reduce", [x], attrs, graphrt.sim(0))
    np.testing.assert_array_equal(got, sim)
    over = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    wide = x.astype(np.float64)
    if kind in ("max", "min"):
        want = getattr(wide, kind)(axis=over, keepdims=keepdims)
    else:
        want = wide.sum(axis=over, keepdims=keepdims)
        if kind == "mean":
            want = want / max(1, int(np.prod([x.shape[a] for a in over])))
    if np.dtype(dtype).kind in "iu":
        if kind == "sum":  # wraps around in the input dtype
            want = x.sum(axis=over, keepdims=keepdims, dtype=dtype)
        np.testing.assert_array_equal(got, np.trunc(want).astype(dtype))
        return
    tol = 1e-3 if dtype == "float16" else 2e-6
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_reduce_into_a_non_contiguous_output() -> None:
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    op = get_op("reduce")
    for kind in ("mean", "max"):
        out = np.zeros((4, 2), np.float32)[:, :1]
        op.compute(np, [x], [out], op.attrs(kind=kind, axes=[1], keepdims=True))
        want = x.mean(axis=1, keepdims=True) if kind == "mean" else x.max(axis=1, keepdims=True)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_softmax_family_on_any_axis(name: str, axis: int, dtype: str) -> None:
    x = (RNG.standard_normal((2, 5, 33)) * 5).astype(dtype)
    (got,) = run_op(name, [x], {"axis": axis})
    (sim,) = run_op(name, [x], {"axis": axis}, graphrt.sim(0))
    np.testing.assert_array_equal(got, sim)
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=axis, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    want = shifted - log_total if name == "log_softmax" else np.exp(shifted - log_total)
    tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


NORMALIZE_CASES = [  # shape, axes, center, epsilon_outside, with scale/bias
    ((2, 3, 64), [-1], True, False, True),
    ((2, 3, 4, 5), [2, 3], True, False, True),
    ((2, 6, 5), [1], True, False, False),
    ((3, 2000), [1], True, False, True),
    ((2, 40), [1], False, False, True),
    ((2, 40), [1], True, True, False),
]


@pytest.mark.parametrize("case", NORMALIZE_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_normalize_matches_float64(case: Any, dtype: str) -> None:
    shape, axes, center, outside, affine = case
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    shape_p = tuple(shape[a] for a in sorted(a % len(shape) for a in axes))
    pad = (1,) * (len(shape) - len(shape_p) - min(axes) % len(shape))
    scale = RNG.standard_normal(shape_p + pad).astype(dtype)
    bias = RNG.standard_normal(shape_p + pad).astype(dtype)
    inputs = [x, scale, bias] if affine else [x]
    attrs = {"axes": axes, "epsilon": 1e-5, "center": center, "epsilon_outside": outside,
             "stats": True}
    got, mean, inverse = run_op("normalize", inputs, attrs)
    sim = run_op("normalize", inputs, attrs, graphrt.sim(0))
    for a, b in zip((got, mean, inverse), sim, strict=True):
        np.testing.assert_array_equal(a, b)
    over = tuple(a % x.ndim for a in axes)
    wide = x.astype(np.float64)
    mu = wide.mean(axis=over, keepdims=True) if center else np.zeros(1)
    spread = ((wide - mu) ** 2).mean(axis=over, keepdims=True)
    std = np.sqrt(spread) + 1e-5 if outside else np.sqrt(spread + 1e-5)
    want = (wide - mu) / std
    if affine:
        want = want * scale.astype(np.float64) + bias.astype(np.float64)
    tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(inverse, 1 / std, rtol=1e-5)
    if center:
        np.testing.assert_allclose(mean, mu, rtol=1e-6, atol=1e-6)


def test_normalize_of_data_far_from_zero_keeps_the_mean_exact() -> None:
    # D-N3: float32 data 40 + U(-1, 1); the mean rounded to float32 alone costs ~5e-6.
    x = (40 + RNG.uniform(-1, 1, (2, 1024))).astype(np.float32)
    out = np.empty_like(x)
    normalize(np, [x], [out], NormalizeAttrs(axes=[1]))
    wide = x.astype(np.float64)
    centered = wide - wide.mean(axis=1, keepdims=True)
    want = centered / np.sqrt((centered ** 2).mean(axis=1, keepdims=True) + 1e-5)
    assert np.abs(out - want).max() < 2e-6


def test_layer_norm_equals_normalize_on_cpu_and_sim() -> None:
    x = RNG.standard_normal((2, 16, 48)).astype(np.float32)
    gamma, beta = RNG.standard_normal(48).astype(np.float32), np.ones(48, np.float32)
    (cpu,) = run_op("layer_norm", [x, gamma, beta], {"axis": -1})
    (sim,) = run_op("layer_norm", [x, gamma, beta], {"axis": -1}, graphrt.sim(0))
    (ref,) = run_op("normalize", [x, gamma, beta], {"axes": [-1]})
    np.testing.assert_array_equal(cpu, sim)
    np.testing.assert_array_equal(cpu, ref)
