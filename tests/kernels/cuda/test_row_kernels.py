"""Softmax, layer norm and reductions over trailing axes as one CUDA kernel per op on a real
GPU (skipped cleanly without one): against numpy in float64, every row length from one column
to more than a block's threads, float32 and float16; a strided operand and a reduction over
leading axes take the reference."""

from __future__ import annotations

import numpy as np
import pytest

from graphrt.kernels import chain
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.cuda
cupy = pytest.importorskip("cupy")


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(4, 1), (3, 7), (2, 4, 128), (5, 256), (2, 1000),
                                   (1, 5000)], ids=str)
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_one_kernel_per_row_matches_numpy(name: str, shape: tuple[int, ...],
                                          dtype: str) -> None:
    op = get_op(name)
    attrs = op.attrs.model_validate({"epsilon": 1e-5} if name == "layer_norm" else {})
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    host = [(rng.standard_normal(shape) * 3).astype(dtype)]
    if name == "layer_norm":
        host += [rng.standard_normal(shape[-1:]).astype(dtype) for _ in range(2)]
    types = [TensorType(h.shape, dtype) for h in host]
    prepared = chain("cuda", cupy).prepare(op, attrs, types, [types[0]])
    assert prepared is not None and prepared.provider == "cuda" and prepared.capturable
    wide = [h.astype(np.float64) for h in host]
    want = _softmax(wide[0]) if name == "softmax" else _layer_norm(*wide, 1e-5)
    got = cupy.full(shape, 7, dtype)
    prepared.call(*map(cupy.asarray, host), got)
    tolerance = 1e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(got.get().astype(np.float64), want, rtol=tolerance * 4,
                               atol=tolerance)


def test_a_strided_operand_takes_the_reference() -> None:
    op = get_op("softmax")
    attrs = op.attrs.model_validate({})
    prepared = chain("cuda", cupy).prepare(op, attrs, [TensorType((4, 6), "float32")],
                                           [TensorType((4, 6), "float32")])
    assert prepared is not None
    x = cupy.asarray(np.random.default_rng(1).standard_normal((6, 4)).astype("float32")).T
    out = cupy.empty((4, 6), "float32")
    prepared.call(x, out)
    np.testing.assert_allclose(out.get(), _softmax(x.get().astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("name", "raw", "shape", "axes"), [
    ("reduce", {"kind": "mean", "axes": [2, 3], "keepdims": True}, (4, 32, 7, 7), (2, 3)),
    ("reduce", {"kind": "sum", "axes": [-1]}, (3, 5, 300), (2,)),
    ("reduce", {"kind": "mean", "axes": [1, 2]}, (2, 6, 9), (1, 2)),
    ("global_avg_pool2d", {}, (2, 64, 14, 14), (2, 3)),
], ids=["global-mean", "sum-last", "mean-two", "global-avg-pool"])
def test_reductions_over_trailing_axes_are_one_kernel(name: str, raw: dict, shape: tuple,
                                                      axes: tuple, dtype: str) -> None:
    op = get_op(name)
    attrs = op.attrs.model_validate(raw)
    x = TensorType(shape, dtype)
    (out,) = op.infer([x], attrs, [None])
    prepared = chain("cuda", cupy).prepare(op, attrs, [x], [out])
    assert prepared is not None and prepared.provider == "cuda"
    host = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    total = host.astype(np.float64).sum(axis=axes)
    want = total if raw.get("kind") == "sum" else total / np.prod([shape[a] for a in axes])
    got = cupy.full(out.shape, 7, dtype)
    prepared.call(cupy.asarray(host), got)
    tolerance = 1e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(got.get().astype(np.float64).reshape(want.shape), want,
                               rtol=tolerance * 4, atol=tolerance * 4)


def test_a_reduction_over_leading_axes_takes_the_reference() -> None:
    op = get_op("reduce")
    attrs = op.attrs.model_validate({"kind": "mean", "axes": [0]})
    x = TensorType((4, 6), "float32")
    prepared = chain("cuda", cupy).prepare(op, attrs, [x], op.infer([x], attrs, [None]))
    assert prepared is not None and prepared.provider == "reference"
