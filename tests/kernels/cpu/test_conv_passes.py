"""A large blocked 1x1 convolution in passes over 64 input channels
(graphrt.kernels.cpu.conv._passes): which plans take them, and that the passes, chained
through the residual epilogue with the bias, relu and clip on the last, compute the
convolution (against float64) with any residual, as the one-pass kernel does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import blocked, with_epilogue

from graphrt.kernels.cpu import conv
from graphrt.kernels.cpu.conv import Passes, conv_epilogue, direct_plan
from graphrt.lib import TensorType

pytest.importorskip("numba")


def _plan(n: int, c: int, o: int, hw: int, **kwargs: Any) -> conv.DirectPlan:
    return direct_plan((n, c, hw, hw), (o, c, 1, 1), (n, o, hw, hw), (1, 1), (1, 1), (0, 0),
                       True, True, **kwargs)


def test_passes_are_for_large_blocked_pointwise_convolutions_only() -> None:
    assert conv._passes(_plan(8, 192, 32, 28), (32, 192, 1, 1), 8) == [(0, 64), (64, 128),
                                                                  (128, 192)]
    assert conv._passes(_plan(8, 144, 24, 56), (24, 144, 1, 1), 8) == [(0, 64), (64, 128),
                                                                  (128, 144)]
    assert conv._passes(_plan(8, 96, 24, 56), (24, 96, 1, 1), 8) is None  # under two passes
    assert conv._passes(_plan(1, 576, 96, 14), (96, 576, 1, 1), 1) is None  # too little work
    assert conv._passes(_plan(8, 960, 160, 7), (160, 960, 1, 1), 8) is None
    nchw = direct_plan((8, 192, 28, 28), (32, 192, 1, 1), (8, 32, 28, 28), (1, 1), (1, 1),
                       (0, 0))
    assert conv._passes(nchw, (32, 192, 1, 1), 8) is None
    three = direct_plan((8, 192, 28, 28), (32, 192, 3, 3), (8, 32, 28, 28), (1, 1), (1, 1),
                        (1, 1), True, True)
    assert conv._passes(three, (32, 192, 3, 3), 8) is None


@pytest.mark.parametrize(("residual", "relu", "clip"),
                         [(False, False, None), (True, True, None), (True, False, (0.0, 6.0)),
                          (False, True, None)])
def test_the_passes_compute_the_convolution_and_its_epilogue(
        residual: bool, relu: bool, clip: tuple[float, float] | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    n, c, o, hw = 2, 144, 24, 14  # 3 passes, the last of 16 channels; 24 = 16 + 8 channels
    monkeypatch.setattr(conv, "_PASS_WORK", 1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((o, c, 1, 1)) * 0.2).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    r = rng.standard_normal((n, o, hw, hw)).astype(np.float32)
    want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    want += b.astype(np.float64)[:, None, None]
    want = with_epilogue(want, r if residual else None, relu, clip)
    types = [TensorType(blocked(x).shape, "float32"), TensorType(w.shape, "float32"),
             TensorType(b.shape, "float32")]
    out_type = TensorType((n, o // 8, hw, hw, 8), "float32")
    results = []
    for work in (1, 1 << 62):  # in passes, then in one
        monkeypatch.setattr(conv, "_PASS_WORK", work)
        kernel = conv_epilogue(np, types, out_type, 1, (1, 1), (1, 1), (0, 0), residual, relu,
                               clip, (True, True))
        assert kernel is not None
        got = np.full(out_type.shape, 7.0, np.float32)
        kernel(blocked(x), w, b, *([blocked(r)] if residual else []), got)
        results.append(got)
        np.testing.assert_allclose(got, blocked(want.astype(np.float32)), rtol=2e-5,
                                   atol=2e-5)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)  # float32 sums


def test_a_pass_call_is_prepared_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conv, "_PASS_WORK", 1)
    plan = _plan(1, 128, 16, 6)
    x = np.ones((1, 16, 6, 6, 8), np.float32)
    w = np.ones((16, 128, 1, 1), np.float32)
    out = np.empty((1, 2, 6, 6, 8), np.float32)
    call = conv._call(conv.direct_kernels(), plan, x, w, None, out, None, None, False)
    assert isinstance(call, Passes) and len(call.calls) == 2
    call()
    assert np.all(out == 128.0)
