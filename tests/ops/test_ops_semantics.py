"""Kernel semantics against exact references: float16 accumulation, exact resize coordinates,
slices, fill values, integer powers and float16 matrix products (issue 13)."""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from math import ceil, floor
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_harness import run_op

import graphrt
from graphrt.ops import OpError

DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
F16 = np.float16
RNG = np.random.default_rng(13)


def assert_f16_ulp(got: np.ndarray, ref64: np.ndarray) -> None:
    """``got`` (float16) is the float64 reference rounded to float16, within 1 ulp (an ulp of
    the rounded reference); infinities and NaN must match exactly."""
    want = np.asarray(ref64, dtype=np.float64).astype(F16)
    assert got.dtype == F16 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    diff = np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64))
    ulp = np.spacing(np.abs(want[finite])).astype(np.float64)
    assert np.all(diff <= ulp), (got[finite][diff > ulp][:5], want[finite][diff > ulp][:5])


# --------------------------------------------------------------------------------------------
# 1. float16 reductions accumulate in float32 (inputs chosen to break float16 accumulation:
#    4096 ones, sums above 65504, squares that overflow, epsilons float16 cannot hold).

Case = tuple[str, list[np.ndarray], dict[str, Any], Callable[..., np.ndarray]]


def _f64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [a.astype(np.float64) for a in arrays]


def _norm_ref(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    centered = x - x.mean(axis=axes, keepdims=True)
    return centered / np.sqrt((centered ** 2).mean(axis=axes, keepdims=True) + eps)


ONES = np.ones((4096, 3), F16)
THOUSANDS = np.full((4096, 3), 1000, F16)
BIG = np.full((16, 3), 300, F16)
SPREAD = np.array([[300, -300, 150, -150]], F16)
TINY = np.array([[1e-4, -1e-4, 2e-4, -2e-4]], F16)

CASES: list[Case] = [
    ("sum", [ONES], {"axis": 0}, lambda x: x.sum(0)),
    ("mean", [THOUSANDS], {"axis": 0}, lambda x: x.mean(0)),
    ("mean", [THOUSANDS], {}, lambda x: x.mean()),
    ("reduce", [ONES], {"kind": "sum", "axes": [0]}, lambda x: x.sum(0)),
    ("reduce", [THOUSANDS], {"kind": "mean", "axes": [0]}, lambda x: x.mean(0)),
    ("reduce", [-ONES], {"kind": "l1", "axes": [0]}, lambda x: np.abs(x).sum(0)),
    ("reduce", [BIG], {"kind": "l2", "axes": [0]}, lambda x: np.sqrt((x * x).sum(0))),
    ("reduce", [ONES], {"kind": "sum_square", "axes": [0]}, lambda x: (x * x).sum(0)),
    ("reduce", [ONES * F16(10)], {"kind": "log_sum_exp", "axes": [0]},
     lambda x: np.log(np.exp(x).sum(0))),
    ("reduce", [np.full((64, 3), 1.1, F16)], {"kind": "prod", "axes": [0]},
     lambda x: x.prod(0)),
    ("global_avg_pool2d", [np.full((1, 2, 64, 64), 1000, F16)], {},
     lambda x: x.mean((2, 3), keepdims=True)),
    ("avg_pool2d", [np.full((1, 2, 64, 64), 1000, F16)], {"pool_size": (64, 64)},
     lambda x: x.mean((2, 3), keepdims=True)),
    ("avg_pool", [np.full((1, 2, 64, 64), 1000, F16)], {"kernel": [64, 64]},
     lambda x: x.mean((2, 3), keepdims=True)),
    ("lp_pool", [np.full((1, 1, 4, 4), 300, F16)], {"kernel": [4, 4]},
     lambda x: np.sqrt((x * x).sum((2, 3), keepdims=True))),
    ("softmax", [RNG.standard_normal((4096, 2)).astype(F16)], {"axis": 0},
     lambda x: np.exp(x) / np.exp(x).sum(0)),
    ("log_softmax", [RNG.standard_normal((4096, 2)).astype(F16)], {"axis": 0},
     lambda x: x - np.log(np.exp(x).sum(0))),
    ("layer_norm", [SPREAD, np.ones(4, F16), np.zeros(4, F16)], {"epsilon": 1e-12},
     lambda x, g, b: _norm_ref(x, (1,), 1e-12)),
    ("layer_norm", [TINY, np.ones(4, F16), np.zeros(4, F16)], {"epsilon": 1e-12},
     lambda x, g, b: _norm_ref(x, (1,), 1e-12)),
    ("normalize", [SPREAD], {"axes": [1], "epsilon": 1e-12},
     lambda x: _norm_ref(x, (1,), 1e-12)),
    ("group_norm", [SPREAD.reshape(1, 2, 2), np.ones(2, F16), np.zeros(2, F16)],
     {"num_groups": 1, "epsilon": 1e-12}, lambda x, g, b: _norm_ref(x, (1, 2), 1e-12)),
    ("batch_norm", [np.full((1, 1, 2, 2), 1e-5, F16), np.ones(1, F16), np.zeros(1, F16),
                    np.zeros(1, F16), np.zeros(1, F16)], {"epsilon": 1e-9},
     lambda x, g, b, m, v: x / np.sqrt(1e-9)),
    ("lrn", [np.full((1, 4, 1, 1), 300, F16)], {"size": 3},
     lambda x: x / (1 + 1e-4 / 3 * np.array([2, 3, 3, 2]).reshape(1, 4, 1, 1) * x * x)
     ** 0.75),
    ("cumsum", [ONES[:, 0].copy()], {}, lambda x: np.cumsum(x)),
    ("cumsum", [ONES[:, 0].copy()], {"exclusive": True, "reverse": True},
     lambda x: np.cumsum(x[::-1])[::-1] - x),
    ("einsum", [ONES, ONES], {"equation": "ij,ij->j"}, lambda a, b: (a * b).sum(0)),
    ("nll_loss", [np.full((4096, 2), -1000, F16), np.zeros(4096, np.int64), np.ones(2, F16)],
     {"weight": True}, lambda x, t, w: np.array(1000.0)),
    ("nll_loss", [np.full((4096, 2), -10, F16), np.zeros(4096, np.int64)],
     {"reduction": "sum"}, lambda x, t: np.array(40960.0)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "inputs", "attrs", "reference"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_float16_accumulates_in_float32(device: graphrt.Device, name: str,
                                        inputs: list[np.ndarray], attrs: dict[str, Any],
                                        reference: Callable[..., np.ndarray]) -> None:
    got = run_op(name, inputs, attrs, device)[0]
    assert_f16_ulp(got, reference(*_f64(*inputs)).reshape(got.shape))


@pytest.mark.parametrize("device", DEVICES)
def test_float16_attention_softmax_over_many_keys(device: graphrt.Device) -> None:
    q = np.zeros((1, 1, 1, 8), F16)
    k = np.zeros((1, 1, 4096, 8), F16)
    v = np.full((1, 1, 4096, 8), 1000, F16)
    got = run_op("attention", [q, k, v], {"scale": 1.0}, device)[0]
    assert_f16_ulp(got, np.full((1, 1, 1, 8), 1000.0))


# --------------------------------------------------------------------------------------------
# 2. resize2d nearest: exact source pixels for every size pair and mode


def _exact_source(n_in: int, n_out: int, mode: str, rounding: str) -> list[int]:
    """The ONNX source index of every output index, in exact rational arithmetic."""
    result = []
    for y in range(n_out):
        if mode == "half_pixel":
            c = (y + Fraction(1, 2)) * Fraction(n_in, n_out) - Fraction(1, 2)
        elif mode == "align_corners":
            c = Fraction(y * (n_in - 1), n_out - 1) if n_out > 1 else Fraction(0)
        else:
            c = y * Fraction(n_in, n_out)
        index = {"round_prefer_floor": ceil(c - Fraction(1, 2)),
                 "round_prefer_ceil": floor(c + Fraction(1, 2)),
                 "floor": floor(c), "ceil": ceil(c)}[rounding]
        result.append(min(max(index, 0), n_in - 1))
    return result


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                      "ceil"])
def test_resize2d_nearest_is_exact_for_all_sizes(mode: str, rounding: str) -> None:
    sizes = range(1, 41)
    for n_in in sizes:
        # rows index the input along H, columns along W: the output names its sources
        x = (np.arange(n_in)[:, None] * 100 + np.arange(n_in)[None, :]).astype(np.float32)
        for n_out in sizes:
            attrs = {"size": (n_out, n_out), "method": "nearest",
                     "coordinate_transformation_mode": mode, "nearest_mode": rounding}
            got = run_op("resize2d", [x.reshape(1, 1, n_in, n_in)], attrs)[0][0, 0]
            src = np.array(_exact_source(n_in, n_out, mode, rounding))
            want = src[:, None] * 100 + src[None, :]
            assert np.array_equal(got, want), (n_in, n_out, mode, rounding)


@pytest.mark.parametrize("device", DEVICES)
def test_resize2d_nearest_matches_onnxruntime(device: graphrt.Device) -> None:
    pytest.importorskip("onnxruntime")
    from onnx_harness import node_model, run_ort

    for n_in, n_out in [(3, 5), (5, 3), (7, 12), (12, 7), (10, 25), (25, 10), (33, 40)]:
        x = np.arange(n_in * n_in, dtype=np.float32).reshape(1, 1, n_in, n_in)
        sizes = np.array([1, 1, n_out, n_out], np.int64)
        model = node_model("Resize", {"X": x}, {"roi": None, "scales": None, "sizes": sizes},
                           13, mode="nearest")
        want = run_ort(model, {"X": x})[0]
        got = run_op("resize2d", [x], {"size": (n_out, n_out), "method": "nearest"},
                     device)[0]
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# 3. strided_slice: compute agrees with infer for every begin/end/stride (Python semantics);
#    dynamic_strided_slice takes every integer index dtype.

bounds = st.one_of(st.integers(-12, 12), st.integers(-2**63, 2**63 - 1))
steps = st.integers(-4, 4).filter(bool) | st.sampled_from([-2**63, 2**63 - 1])


@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(0, 6), min_size=1, max_size=3), data=st.data())
def test_strided_slice_is_python_slicing(shape: list[int], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(shape)))
    begin = data.draw(st.lists(bounds, min_size=k, max_size=k))
    end = data.draw(st.lists(bounds, min_size=k, max_size=k))
    strides = data.draw(st.lists(steps, min_size=k, max_size=k))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    want = x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides, strict=True))]
    attrs = {"begin": begin, "end": end, "strides": strides}
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        got = run_op("strided_slice", [x], attrs, device)[0]
        assert got.shape == want.shape and np.array_equal(got, want)


def test_strided_slice_negative_stride_begin_before_start_is_empty() -> None:
    x = np.arange(5, dtype=np.float32)
    got = run_op("strided_slice", [x], {"begin": [-10], "end": [0], "strides": [-1]})[0]
    assert got.shape == (0,)


INDEX_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_dynamic_strided_slice_takes_every_index_dtype(device: graphrt.Device,
                                                       dtype: str) -> None:
    info = np.iinfo(dtype)
    x = np.arange(300, dtype=np.float32)
    signed = info.min < 0
    cases = [(info.min, info.max, 1), (info.max, info.min, -1 if signed else 1),
             (5, 100, 3), (0, info.max, info.max), (info.max, 0, 1)]
    if signed:
        cases += [(-100, -3, 7), (info.min, info.min, -1), (-1, info.min, -2)]
    for b, e, s in cases:
        inputs = [x, *(np.array([v], dtype) for v in (b, e, s))]
        got = run_op("dynamic_strided_slice", inputs, {}, device)[0]
        np.testing.assert_array_equal(got, x[int(b):int(e):int(s)], err_msg=f"{b}:{e}:{s}")


# --------------------------------------------------------------------------------------------
# 4. fill values the dtype cannot hold are refused by the shape function


@pytest.mark.parametrize(("dtype", "value"), [
    ("uint8", 300.0), ("uint16", -1.0), ("int32", 0.5), ("float16", 1e6), ("int8", np.nan),
    ("int64", np.inf), ("bool", 2.0), ("float32", 1e39)])
def test_pad_value_the_dtype_cannot_hold_is_refused(dtype: str, value: float) -> None:
    with pytest.raises(OpError, match=re.escape(f"pad: pad_value {value!r} does not fit {dtype}")):
        run_op("pad", [np.zeros(3, dtype)], {"pad_width": [(1, 1)], "pad_value": value})
    # the op still works with a value that fits
    assert run_op("pad", [np.zeros(3, dtype)], {"pad_width": [(1, 0)],
                                                "pad_value": 1.0})[0][0] == 1


@pytest.mark.parametrize(("dtype", "value"), [
    ("float16", np.inf), ("float16", -np.inf), ("float32", np.nan), ("uint8", 255.0),
    ("int8", -128.0), ("float16", 65504.0), ("bool", 1.0)])
def test_pad_value_the_dtype_holds_is_written(dtype: str, value: float) -> None:
    got = run_op("pad", [np.zeros(2, dtype)], {"pad_width": [(1, 0)], "pad_value": value})[0]
    np.testing.assert_array_equal(got[:1], np.array([value]).astype(dtype))


def test_pad_value_refused_when_creating_a_module() -> None:
    lib = graphrt.Library()
    lib.define("pad_u8", {"inputs": ["x"], "outputs": ["y"], "body": [
        {"op": "pad", "inputs": ["x"], "outputs": ["y"],
         "attrs": {"pad_width": [[1, 1]], "pad_value": 300}}]})
    g = GraphBuilder()
    x = g.input("x", [2], "uint8")
    y = g.op("padded", "pad_u8", [x], shape=[4], dtype="uint8")
    with pytest.raises(graphrt.GraphFormatError, match=r"pad_value 300\.0 does not fit uint8"):
        graphrt.create(g.build(heads=[y]), lib, graphrt.cpu(0))


@pytest.mark.parametrize(("dtype", "value"), [("uint8", 300.0), ("int16", 0.5),
                                            ("float16", -1e5)])
def test_resize_extrapolation_value_the_dtype_cannot_hold_is_refused(dtype: str,
                                                                     value: float) -> None:
    attrs = {"size": (4,), "coordinate_transformation_mode": "tf_crop_and_resize",
             "roi": (0.0, 2.0), "extrapolation_value": value}
    with pytest.raises(OpError, match=re.escape(
            f"resize: extrapolation_value {value!r} does not fit {dtype}")):
        run_op("resize", [np.zeros(3, dtype)], attrs)
    attrs["extrapolation_value"] = 7.0
    np.testing.assert_array_equal(run_op("resize", [np.zeros(3, dtype)], attrs)[0][-1], 7)


def test_eye_like_refuses_a_dtype_that_is_not_numeric() -> None:
    with pytest.raises(OpError, match="eye_like: unknown dtype 'object'"):
        run_op("eye_like", [np.zeros((2, 2), np.float32)], {"dtype": "object"})


# --------------------------------------------------------------------------------------------
# 5. integer power with a negative exponent: ONNX Runtime's Pow

# ONNX Runtime 1.x Pow, bases -3..3 (rows) to exponents -3..3 (columns), int32 and int64;
# 0 ** negative is the dtype's minimum (C's conversion of inf on x86).
ORT_POW = [[0, 0, 0, 1, -3, 9, -27], [0, 0, 0, 1, -2, 4, -8], [-1, 1, -1, 1, -1, 1, -1],
           [None, None, None, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 2, 4, 8],
           [0, 0, 0, 1, 3, 9, 27]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_power_negative_exponent_matches_onnxruntime(device: graphrt.Device,
                                                             dtype: str) -> None:
    base = np.repeat(np.arange(-3, 4), 7).astype(dtype)
    exponent = np.tile(np.arange(-3, 4), 7).astype(dtype)
    got = run_op("power", [base, exponent], {}, device)[0].reshape(7, 7)
    low = int(np.iinfo(dtype).min)
    want = np.array([[low if v is None else v for v in row] for row in ORT_POW], dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_power_table_is_onnxruntime(dtype: str) -> None:
    pytest.importorskip("onnxruntime")
    from onnx_harness import node_model, run_ort

    base = np.repeat(np.arange(-3, 4), 7).astype(dtype)
    exponent = np.tile(np.arange(-3, 4), 7).astype(dtype)
    want = run_ort(node_model("Pow", {"X": base, "Y": exponent}, {}, 17),
                   {"X": base, "Y": exponent})[0]
    np.testing.assert_array_equal(run_op("power", [base, exponent])[0], want)


def test_integer_power_broadcasts_a_negative_exponent() -> None:
    base = np.array([[2], [1], [-1], [0]], np.int32)
    got = run_op("power", [base, np.array([-1, -2, 3], np.int32)])[0]
    np.testing.assert_array_equal(got, [[0, 0, 8], [1, 1, 1], [-1, 1, -1],
                                        [-2**31, -2**31, 0]])


# --------------------------------------------------------------------------------------------
# 6. float16 matrix products: float32 GEMM on numpy, one rounding, same bits on cpu and sim


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + out.shape[2], j:j + out.shape[3]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def _conv_transpose_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, _, h, wd = x.shape
    _, o, kh, kw = w.shape
    out = np.zeros((n, o, h + kh - 1, wd + kw - 1))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + h, j:j + wd] += np.einsum("nchw,co->nohw", x, w[:, :, i, j])
    return out


X4 = RNG.random((2, 8, 6, 6)).astype(F16)
W4 = RNG.random((4, 8, 3, 3)).astype(F16)
WT = RNG.random((8, 4, 3, 3)).astype(F16)
A = RNG.random((3, 5, 64)).astype(F16)
B = RNG.random((3, 64, 7)).astype(F16)
Q = RNG.random((1, 2, 5, 16)).astype(F16)
BIAS4, BIAS7 = RNG.random(4).astype(F16) * F16(100), RNG.random(7).astype(F16) * F16(100)
GEMM_CASES: list[Case] = [
    ("dense", [A[0], B[0].T.copy()], {}, lambda a, b: a @ b.T),
    ("dense", [A[0], B[0].T.copy(), BIAS7], {}, lambda a, b, c: a @ b.T + c),
    ("conv2d", [X4, W4, BIAS4], {}, lambda x, w, c: _conv_ref(x, w) + c[:, None, None]),
    ("conv", [X4, W4, BIAS4], {}, lambda x, w, c: _conv_ref(x, w) + c[:, None, None]),
    ("conv2d_transpose", [X4, WT, BIAS4], {},
     lambda x, w, c: _conv_transpose_ref(x, w) + c[:, None, None]),
    ("conv_transpose", [X4, WT, BIAS4], {},
     lambda x, w, c: _conv_transpose_ref(x, w) + c[:, None, None]),
    ("matmul", [A, B], {}, lambda a, b: a @ b),
    ("batch_matmul", [A, B], {}, lambda a, b: a @ b),
    ("einsum", [A, B], {"equation": "bik,bkj->bij"}, lambda a, b: a @ b),
    ("conv2d", [X4, W4], {}, _conv_ref),
    ("conv", [X4, W4], {}, _conv_ref),
    ("conv2d_transpose", [X4, WT], {}, _conv_transpose_ref),
    ("conv_transpose", [X4, WT], {}, _conv_transpose_ref),
]


@pytest.mark.parametrize(("name", "inputs", "attrs", "reference"), GEMM_CASES,
                         ids=[f"{c[0]}-{len(c[1])}" for c in GEMM_CASES])
def test_float16_matrix_products_round_once(name: str, inputs: list[np.ndarray],
                                            attrs: dict[str, Any],
                                            reference: Callable[..., np.ndarray]) -> None:
    on_cpu = run_op(name, inputs, attrs, graphrt.cpu(0))[0]
    on_sim = run_op(name, inputs, attrs, graphrt.sim(0))[0]
    assert on_cpu.tobytes() == on_sim.tobytes()
    assert_f16_ulp(on_cpu, reference(*_f64(*inputs)))


def test_float16_attention_matches_float64_reference() -> None:
    k, v = Q[:, :, ::-1].copy(), (Q * F16(3)).astype(F16)
    on_cpu = run_op("attention", [Q, k, v], {"scale": 0.25}, graphrt.cpu(0))[0]
    on_sim = run_op("attention", [Q, k, v], {"scale": 0.25}, graphrt.sim(0))[0]
    assert on_cpu.tobytes() == on_sim.tobytes()
    q64, k64, v64 = _f64(Q, k, v)
    scores = q64 @ k64.swapaxes(-1, -2) * 0.25
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = probs @ v64
    # ONNX rounds the scores and probabilities to float16 on the way: a few ulp
    np.testing.assert_allclose(on_cpu.astype(np.float64), want, rtol=4e-3, atol=1e-3)


# --------------------------------------------------------------------------------------------
# 7. quantize of float16: divided in float32 (as ONNX Runtime), saturated exactly


@pytest.mark.parametrize("device", DEVICES)
def test_float16_quantize_divides_in_float32_and_saturates(device: graphrt.Device) -> None:
    x = np.array([30000, -40000, 10000, -9999, 3.5, 60000], F16)
    scale, zero = np.array(0.3, F16), np.array(0, np.int16)
    got = run_op("quantize", [x, scale, zero], {"dtype": "int16"}, device)[0]
    exact = np.rint(x.astype(np.float32) / scale.astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(got, np.clip(exact, -32768, 32767))
    assert got[1] == -32768 and got[0] == 32767


# --------------------------------------------------------------------------------------------
# 8. differential findings (D-E1..3): ONNX's formulas at the edges


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_of_minus_infinity_is_nan(device: graphrt.Device, approximate: bool) -> None:
    for x in (np.array([-np.inf, np.inf, 0.0], np.float32), np.array(-np.inf, np.float32)):
        got = run_op("gelu", [x], {"approximate": approximate}, device)[0]
        assert np.isnan(got.ravel()[0]) and got.shape == x.shape
        np.testing.assert_array_equal(got.ravel()[1:], x.ravel()[1:])


@pytest.mark.parametrize("device", DEVICES)
def test_elu_keeps_negative_zero(device: graphrt.Device) -> None:
    got = run_op("elu", [np.array([-0.0, 0.0], np.float32)], {"alpha": 0.5}, device)[0]
    assert np.signbit(got[0]) and not np.signbit(got[1])


@pytest.mark.parametrize("device", DEVICES)
def test_integer_shrink_with_an_integer_bias_is_exact(device: graphrt.Device) -> None:
    x = np.array([2**53 + 1, 2**63 - 1, -2**63, 5, -5, 1], np.int64)
    got = run_op("shrink", [x], {"bias": 1.0, "lambd": 2.0}, device)[0]
    np.testing.assert_array_equal(got, [2**53, 2**63 - 2, -2**63 + 1, 4, -4, 0])
    wrapped = run_op("shrink", [np.array([3, 250], np.uint8)], {"bias": -300.0, "lambd": 2.0},
                     device)[0]
    np.testing.assert_array_equal(wrapped, [(3 + 300) % 256, (250 + 300) % 256])
