"""The compiled row kernels of layer_norm and softmax on the host (graphrt.kernels.cpu.jit,
row_kernels): accuracy against float64 references, special values, any layout giving the same
bits, and the numpy path without numba."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from graphrt.kernels import chain
from graphrt.kernels.cpu import jit as host_jit
from graphrt.ops import TensorType, get_op

pytest.importorskip("numba")

from graphrt.kernels.cpu import row_kernels

RNG = np.random.default_rng(7)


def _op(name: str, **attrs: Any) -> Any:
    """The op as the cpu runs it: prepared by the cpu's provider chain at its call's types,
    as create() prepares it for a node of those types."""
    op = get_op(name)
    parsed = op.attrs(**attrs)
    count = 1 if name == "softmax" else 3

    def kernel(*arrays: np.ndarray) -> None:
        types = [TensorType(a.shape, str(a.dtype)) for a in arrays]
        prepared = chain("cpu", np).prepare(op, parsed, types[:count], types[count:])
        assert prepared is not None
        prepared.call(*arrays)

    return kernel


def _softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    return float((np.abs(got - want) / np.spacing(want.astype(got.dtype))).max())


def test_exp32_is_within_one_ulp_and_zero_under_float32_range() -> None:
    x = np.linspace(-87, 0, 100_003, dtype=np.float32)
    got = np.array([row_kernels.exp32(v) for v in x[::97]], dtype=np.float32)
    assert _ulps(got, np.exp(x[::97].astype(np.float64))) <= 1.0
    assert row_kernels.exp32(np.float32(-88.0)) == 0.0
    assert row_kernels.exp32(np.float32(-np.inf)) == 0.0
    assert np.isnan(row_kernels.exp32(np.float32(np.nan)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_rows_match_a_float64_reference(dtype: str) -> None:
    x = (RNG.standard_normal((64, 97)) * 4).astype(dtype)
    out = np.empty_like(x)
    _op("softmax", axis=-1)(x, out)
    want = _softmax64(x)
    # float32: x - max is rounded to float32 first (as numpy's path and ONNX Runtime do)
    np.testing.assert_allclose(out, want, rtol=2e-6 if dtype == "float32" else 1e-14)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)


def test_softmax_special_values_as_numpy() -> None:
    x = np.array([[0, np.nan, 1], [-np.inf, 0, 1], [np.inf, 0, 1], [-1e30, -1e30, -1e30],
                  [-1e4, 0, -1e4]], dtype=np.float32)
    out = np.empty_like(x)
    _op("softmax", axis=1)(x, out)
    assert np.isnan(out[0]).all() and np.isnan(out[2]).all()
    assert out[1, 0] == 0.0 and out[4, 0] == 0.0 and out[4, 2] == 0.0  # masked: exactly 0
    np.testing.assert_allclose(out[1, 1:], _softmax64(x[1:2, 1:])[0], rtol=1e-6)
    np.testing.assert_allclose(out[3], 1 / 3, rtol=1e-6)
    assert out[4, 1] == 1.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_rows_match_a_float64_reference_far_from_zero(dtype: str) -> None:
    x = (RNG.standard_normal((16, 8, 256)) + 1e4).astype(dtype)
    gamma, beta = RNG.standard_normal((2, 256)).astype(dtype)
    out = np.empty_like(x)
    _op("layer_norm", axis=-1, epsilon=1e-5)(x, gamma, beta, out)
    wide = x.astype(np.float64)
    mean = wide.mean(-1, keepdims=True)
    norm = (wide - mean) / np.sqrt(((wide - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = norm * gamma + beta
    np.testing.assert_allclose(out, want, atol=2e-6 if dtype == "float32" else 1e-12)


def test_any_layout_gives_the_same_bits() -> None:
    base = RNG.standard_normal((6, 40, 2)).astype(np.float32)
    strided = base[:, :, 0]  # not contiguous
    gamma = RNG.standard_normal(80).astype(np.float32)[::2]
    beta = np.ascontiguousarray(RNG.standard_normal(40).astype(np.float32))
    for name, args in (("softmax", ()), ("layer_norm", (gamma, beta))):
        attrs = {"axis": -1} if name == "softmax" else {"axis": -1, "epsilon": 1e-5}
        kernel = _op(name, **attrs)
        plain = np.empty((6, 40), np.float32)
        kernel(np.ascontiguousarray(strided), *(np.ascontiguousarray(a) for a in args), plain)
        holder = np.zeros((6, 40, 2), np.float32)
        kernel(strided, *args, holder[:, :, 1])  # strided in, strided out
        assert holder[:, :, 1].tobytes() == plain.tobytes(), name
        assert not holder[:, :, 0].any(), name


def test_other_axes_and_dtypes_keep_the_numpy_path() -> None:
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    out = np.empty_like(x)
    _op("softmax", axis=0)(x, out)
    np.testing.assert_allclose(out, _softmax64(x.T).T, rtol=2e-6)
    half = x.astype(np.float16)
    out16 = np.empty_like(half)
    _op("softmax", axis=1)(half, out16)
    np.testing.assert_allclose(out16, _softmax64(half), rtol=2e-3)


def test_without_numba_the_numpy_path_is_taken_and_logged(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    monkeypatch.setattr(host_jit, "_LOGGED", set())
    with caplog.at_level(logging.INFO, logger="graphrt.kernels.cpu.jit"):
        assert host_jit.row_kernels() is None
        kernel = _op("softmax", axis=-1)
    assert "GRAPHRT_JIT=0" in caplog.text
    x = RNG.standard_normal((3, 9)).astype(np.float32)
    out = np.empty_like(x)
    kernel(x, out)
    np.testing.assert_allclose(out, _softmax64(x), rtol=2e-6)


@pytest.mark.parametrize("name", ["softmax_rows", "layer_norm_rows"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_on_the_helper_threads_the_rows_are_the_same_bits(
        name: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From :data:`~graphrt.kernels.cpu.jit.PARALLEL_ELEMENTS` elements, where the graph lets
    it (``parallel()``), blocks of rows run on the helper threads: the same bits as on the
    calling thread alone."""
    x = (RNG.standard_normal((301, 130)) * 3).astype(dtype)
    assert x.size >= host_jit.PARALLEL_ELEMENTS
    vectors = [] if name == "softmax_rows" else [
        RNG.standard_normal(130).astype(dtype) for _ in range(2)]
    extra = () if name == "softmax_rows" else (1e-5,)
    spread: list[bool] = []
    real = host_jit.run_jobs

    def spy(jobs: Any, parallel: bool, args: tuple[Any, ...]) -> None:
        spread.append(parallel)
        real(jobs, parallel, args)

    monkeypatch.setattr(host_jit, "run_jobs", spy)
    outs = []
    for parallel in (False, True):
        kernel = host_jit.rows_call(name, -1, TensorType(x.shape, dtype),
                                    [TensorType(v.shape, dtype) for v in vectors],
                                    lambda *a: None, extra, dynamic=False,
                                    parallel=lambda parallel=parallel: parallel)
        assert kernel is not None
        out = np.full_like(x, np.nan)
        kernel(x, *vectors, out)
        outs.append(out)
    assert spread == [True]  # only where parallel() said so
    assert np.array_equal(outs[0], outs[1])
    small = host_jit.rows_call(name, -1, TensorType((4, 130), dtype),
                               [TensorType(v.shape, dtype) for v in vectors], lambda *a: None,
                               extra, dynamic=False, parallel=lambda: True)
    assert small is not None
    small(x[:4], *vectors, np.empty_like(x[:4]))
    assert spread == [True]  # too small to share: on the caller
