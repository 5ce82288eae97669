"""2-D max pooling as one CUDA kernel on a real GPU (skipped cleanly without one): every
geometry against the reference on the host (padding skipped, strides, dilation, ceil mode,
NaN kept), float32 and float16, NCHW and NHWC; a strided operand takes the reference."""

from __future__ import annotations

import numpy as np
import pytest

from graphrt.kernels import chain
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.cuda
cupy = pytest.importorskip("cupy")

CASES = [  # (op, attrs, x shape)
    ("max_pool2d", {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)},
     (2, 8, 17, 16)),
    ("max_pool2d", {"pool_size": (2, 2)}, (1, 3, 8, 8)),
    ("max_pool2d", {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0, 1, 1),
                    "ceil_mode": True}, (1, 2, 9, 7)),
    ("max_pool", {"kernel": [3, 3], "strides": [1, 2], "dilation": [2, 1],
                  "padding": [1, 1, 1, 1]}, (2, 4, 11, 10)),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_max_pool_matches_the_reference(case: int, dtype: str, layout: str) -> None:
    name, raw, (n, c, h, w) = CASES[case]
    if layout == "NHWC" and name != "max_pool2d":
        pytest.skip("the N-d max_pool has no layout")
    op = get_op(name)
    attrs = op.attrs.model_validate({**raw, **({"layout": layout} if layout == "NHWC" else {})})
    x = TensorType((n, h, w, c) if layout == "NHWC" else (n, c, h, w), dtype)
    (out,) = op.infer([x], attrs, [None])
    prepared = chain("cuda", cupy).prepare(op, attrs, [x], [out])
    assert prepared is not None and prepared.provider == "cuda" and prepared.capturable
    host = np.random.default_rng(case).standard_normal(x.shape).astype(dtype)
    host[0, 0, 1, 1] = np.nan
    want = np.empty(out.shape, dtype)
    op.positional(np, attrs, 1)(host, want)
    got = cupy.full(out.shape, 7, dtype)
    prepared.call(cupy.asarray(host), got)
    np.testing.assert_array_equal(got.get(), want)


def test_a_strided_input_takes_the_reference() -> None:
    op = get_op("max_pool2d")
    attrs = op.attrs.model_validate({"pool_size": (2, 2)})
    x = TensorType((1, 2, 4, 4), "float32")
    (out,) = op.infer([x], attrs, [None])
    prepared = chain("cuda", cupy).prepare(op, attrs, [x], [out])
    assert prepared is not None
    host = np.random.default_rng(9).standard_normal((1, 2, 4, 4)).astype("float32")
    strided = cupy.asarray(host).transpose(0, 1, 3, 2)
    got = cupy.empty(out.shape, "float32")
    prepared.call(strided, got)
    want = np.empty(out.shape, "float32")
    op.positional(np, attrs, 1)(host.transpose(0, 1, 3, 2), want)
    np.testing.assert_array_equal(got.get(), want)

