"""A large blocked 1x1 convolution whose jobs run their tiles in passes over the input
channels (graphrt.kernels.cpu.conv.pass_channels): which plans take them, and that the
passes, each adding into the sums of the ones before with the bias and residual on the first
and relu and clip on the last, compute the convolution (against float64) as one pass does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import blocked, with_epilogue

from graphrt.kernels.cpu import conv
from graphrt.kernels.cpu.conv import conv_epilogue, direct_plan
from graphrt.lib import TensorType

pytest.importorskip("numba")


def _plan(n: int, c: int, o: int, hw: int, **kwargs: Any) -> conv.DirectPlan:
    return direct_plan((n, c, hw, hw), (o, c, 1, 1), (n, o, hw, hw), (1, 1), (1, 1), (0, 0),
                       True, True, **kwargs)


def _bytes(n: int, c: int, hw: int) -> int:
    return n * c * hw * hw * 4


def test_passes_are_for_blocked_pointwise_convolutions_of_many_channels_only() -> None:
    big = conv._PASS_BYTES  # data past the caches
    assert conv.pass_channels(_plan(8, 192, 32, 28), 32, 192, big) == 64  # narrow: short passes
    assert conv.pass_channels(_plan(1, 144, 24, 56), 24, 144, big) == 64
    assert conv.pass_channels(_plan(8, 1024, 160, 14), 160, 1024, big) == 128
    assert conv.pass_channels(_plan(8, 1024, 256, 14), 256, 1024, big) is None  # panels
    assert conv.pass_channels(_plan(8, 96, 24, 56), 24, 96, big) is None  # under two passes
    assert conv.pass_channels(_plan(8, 192, 256, 28), 256, 192, big) is None
    assert conv.pass_channels(_plan(8, 960, 160, 7), 160, 960, big) is None  # 7x7: read whole
    nchw = direct_plan((8, 192, 28, 28), (32, 192, 1, 1), (8, 32, 28, 28), (1, 1), (1, 1),
                       (0, 0))
    assert conv.pass_channels(nchw, 32, 192, big) is None
    three = direct_plan((8, 192, 28, 28), (32, 192, 3, 3), (8, 32, 28, 28), (1, 1), (1, 1),
                        (1, 1), True, True)
    assert conv.pass_channels(three, 32, 192, big) is None


def test_data_still_in_cache_takes_one_pass() -> None:
    """MobileNetV2's projection at batch 1 (1.8 MiB) in one pass; ResNet-50's 256 -> 64 at
    56x56 and batch 8 (25 MiB) in passes."""
    assert conv.pass_channels(_plan(1, 144, 24, 56), 24, 144, _bytes(1, 144, 56)) is None
    assert conv.pass_channels(_plan(8, 256, 64, 56), 64, 256, _bytes(8, 256, 56)) == 64


@pytest.mark.parametrize(("residual", "relu", "clip"),
                         [(False, False, None), (True, True, None), (True, False, (0.0, 6.0)),
                          (False, True, None)])
@pytest.mark.parametrize("hw", [14, 15])  # whole tiles; a last tile short of pixels
def test_the_passes_compute_the_convolution_and_its_epilogue(
        residual: bool, relu: bool, clip: tuple[float, float] | None, hw: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    n, c, o = 2, 144, 24  # 3 passes, the last of 16 channels; 24 = 16 + 8 channels
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
    monkeypatch.setattr(conv, "_PASS_BYTES", 0)
    for pixels in (1, 1 << 30):  # in passes, then in one
        monkeypatch.setattr(conv, "_PASS_PIXELS", pixels)
        conv.direct_plan.cache_clear()
        kernel = conv_epilogue(np, types, out_type, 1, (1, 1), (1, 1), (0, 0), residual, relu,
                               clip, (True, True))
        assert kernel is not None
        got = np.full(out_type.shape, 7.0, np.float32)
        kernel(blocked(x), w, b, *([blocked(r)] if residual else []), got)
        results.append(got)
        np.testing.assert_allclose(got, blocked(want.astype(np.float32)), rtol=2e-5,
                                   atol=2e-5)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)  # float32 sums


def test_a_pass_call_runs_in_passes_and_again_the_same(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(conv, "_PASS_PIXELS", 1)
    monkeypatch.setattr(conv, "_PASS_BYTES", 0)
    plan = _plan(1, 128, 16, 6)
    x = np.ones((1, 16, 6, 6, 8), np.float32)
    w = np.ones((16, 128, 1, 1), np.float32)
    out = np.empty((1, 2, 6, 6, 8), np.float32)
    call = conv._call(conv.direct_kernels(), plan, x, w, None, out, None, None, False)
    assert isinstance(call, conv.JobCall) and call.args[-1] == 64  # two passes of 64
    for _ in range(2):  # the second call starts again from the bias, not the stored sums
        call()
        assert np.all(out == 128.0)


def test_a_convolution_of_no_input_channels_stores_its_bias_and_epilogue() -> None:
    """No taps, so no pass to run: the job still stores every tile (the bias, then relu)."""
    types = [TensorType((1, 0, 5, 5), "float32"), TensorType((8, 0, 3, 3), "float32"),
             TensorType((8,), "float32")]
    kernel = conv_epilogue(np, types, TensorType((1, 8, 5, 5), "float32"), 1, (1, 1), (1, 1),
                           (1, 1), False, True)
    assert kernel is not None
    bias = np.arange(8, dtype=np.float32) - 3
    out = np.full((1, 8, 5, 5), np.nan, np.float32)
    kernel(np.zeros((1, 0, 5, 5), np.float32), np.zeros((8, 0, 3, 3), np.float32), bias, out,
           np.zeros(0, np.float32))
    np.testing.assert_array_equal(out, np.broadcast_to(np.maximum(bias, 0)[None, :, None, None],
                                                       out.shape))
