"""A wide blocked 1x1 convolution reads its data from panels (graphrt.kernels.cpu.conv's
``_PANEL_OUTPUTS``; direct_conv._pack): which plans take them, and that a copy of each tile's
6 pixels per block of channels, at the strides, computes the convolution (against float64)
with every epilogue, a last tile short of pixels, a batch, and on one thread or two."""

from __future__ import annotations

import numpy as np
import pytest
from ops_harness import blocked, with_epilogue

from graphrt.kernels.cpu import conv, crew
from graphrt.kernels.cpu.conv import conv_epilogue, direct_plan
from graphrt.lib import TensorType

pytest.importorskip("numba")


def _plan(c: int, o: int, hw: int, stride: int = 1, k: int = 1) -> conv.DirectPlan:
    out = (hw + 2 * (k // 2) - k) // stride + 1
    return direct_plan((2, c, hw, hw), (o, c, k, k), (2, o, out, out), (stride, stride),
                       (1, 1), (k // 2, k // 2), True, True)


def test_panels_are_for_wide_blocked_pointwise_convolutions_of_many_channels() -> None:
    panels = _plan(1024, 256, 14)
    assert panels.workspace == (2 * 33 * 1024 * 6,)  # 33 tiles of 6 pixels per image
    assert panels.padding[10] == 1 and panels.image == 33 * 1024 * 6
    assert _plan(512, 2048, 14, stride=2).padding[10] == 1  # at the strides
    assert _plan(1024, 128, 14).workspace is None  # narrow: read in place (in passes)
    assert _plan(64, 256, 56).workspace is None  # few channels: one stream per 8 of them
    assert _plan(256, 256, 14, k=3).padding[10] == 0  # a 3x3: a padded copy, no panels
    nchw = direct_plan((2, 256, 14, 14), (256, 256, 1, 1), (2, 256, 14, 14), (1, 1), (1, 1),
                       (0, 0))
    assert nchw.workspace is None


@pytest.mark.parametrize(("residual", "relu", "clip"),
                         [(False, False, None), (True, True, None), (True, False, (0.0, 6.0))])
@pytest.mark.parametrize(("hw", "stride"), [(12, 1), (13, 1), (13, 2), (7, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_panels_compute_the_convolution_and_its_epilogue(
        residual: bool, relu: bool, clip: tuple[float, float] | None, hw: int, stride: int,
        threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # 13x13 and 7x7 end in a tile short of pixels; 264 = 16 * 16 + 8 output channels
    monkeypatch.setattr(conv, "_PANEL_OUTPUTS", 256)
    n, c, o = 2, 136, 264
    out = (hw - 1) // stride + 1
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((o, c, 1, 1)) * 0.2).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    r = rng.standard_normal((n, o, out, out)).astype(np.float32)
    strided = x[:, :, ::stride, ::stride].astype(np.float64)
    want = np.einsum("nchw,oc->nohw", strided, w[:, :, 0, 0].astype(np.float64))
    want += b.astype(np.float64)[:, None, None]
    want = with_epilogue(want, r if residual else None, relu, clip)
    types = [TensorType(blocked(x).shape, "float32"), TensorType(w.shape, "float32"),
             TensorType(b.shape, "float32")]
    out_type = TensorType((n, o // 8, out, out, 8), "float32")
    plan = conv.direct_plan((n, c, hw, hw), (o, c, 1, 1), (n, o, out, out), (stride, stride),
                            (1, 1), (0, 0), True, True)
    assert plan.padding[10] == 1
    kernel = conv_epilogue(np, types, out_type, 1, (stride, stride), (1, 1), (0, 0), residual,
                           relu, clip, (True, True))
    assert kernel is not None
    space = np.full(plan.workspace or (0,), np.nan, np.float32)  # every value read is written
    with crew.threads_held(threads):
        for _ in range(2):  # the second call packs again: the panels follow the data
            got = np.full(out_type.shape, 7.0, np.float32)
            kernel(blocked(x), w, b, *([blocked(r)] if residual else []), got, space)
            np.testing.assert_allclose(got, blocked(want.astype(np.float32)), rtol=2e-5,
                                       atol=2e-5)
            x += 1.0
            strided += 1.0
            want = np.einsum("nchw,oc->nohw", strided, w[:, :, 0, 0].astype(np.float64))
            want = with_epilogue(want + b.astype(np.float64)[:, None, None],
                                 r if residual else None, relu, clip)
