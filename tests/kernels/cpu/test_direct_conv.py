"""The compiled direct convolution on the host (graphrt.kernels.cpu.conv, direct_conv): every
geometry against a float64 reference and the im2col + GEMM path, channel and pixel tails,
packed weights prepared once per loaded param (graphrt.devices.frozen), concurrent calls, and the
GEMM path without numba."""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.kernels import bind_call
from graphrt.kernels.cpu import jit as host_jit
from graphrt.kernels.cpu.conv import DirectPlan, PointwisePlan, conv_epilogue, conv_plan, run_conv
from graphrt.kernels.cpu.crew import JobCall
from graphrt.lib import Library, derived, freeze, is_frozen
from graphrt.ops import TensorType
from tests.kernels.cpu.test_conv_fast import reference

pytest.importorskip("numba")

from graphrt.kernels.cpu import direct_conv

RNG = np.random.default_rng(41)

# (x shape, w shape, strides, pads (begins then ends), dilation)
GEOMETRIES = [
    ((1, 3, 9, 9), (16, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # one block, tiles span rows
    ((2, 5, 8, 11), (17, 5, 3, 2), (1, 1), (0, 0, 0, 0), (1, 1)),  # no padding: read in place
    ((3, 4, 10, 9), (33, 4, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # channel tail, batch
    ((1, 2, 13, 12), (5, 2, 7, 5), (2, 3), (3, 2, 1, 0), (1, 1)),  # asymmetric everything
    ((2, 3, 9, 10), (8, 3, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    ((1, 4, 4, 4), (16, 4, 3, 3), (1, 1), (3, 0, 0, 3), (1, 1)),  # pad larger than data side
    ((2, 1, 5, 5), (40, 1, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),  # one output pixel per image
    ((1, 6, 7, 7), (24, 6, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),  # strided 1x1, in place
    ((1, 8, 6, 6), (16, 8, 1, 1), (1, 1), (0, 0, 1, 1), (1, 1)),  # 1x1 with end padding
    ((2, 3, 12, 12), (16, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),  # windows cut before end
    ((1, 2, 4, 1), (16, 2, 1, 1), (1, 3), (0, 2, 0, 0), (1, 1)),  # only padding: left > row
    # blocked padded copies ([N, C/8, Hp, Wp, 8]: a multiple of 8 channels, padded)
    ((2, 16, 9, 10), (20, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # two channel blocks
    ((1, 8, 11, 9), (17, 8, 3, 2), (2, 1), (2, 1, 0, 1), (2, 1)),  # strided, dilated, uneven
    ((1, 24, 3, 2), (16, 24, 3, 3), (1, 1), (2, 0, 0, 2), (1, 1)),  # pads wider than the data
    ((1, 12, 5, 6), (16, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 12 channels: planes
    # pointwise (1x1, no padding, more than SMALL_PLANE pixels): 6 channels x 16 pixels a tile
    ((2, 7, 15, 15), (13, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # channel and pixel tails
    ((1, 40, 16, 16), (12, 40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # whole tiles only
    ((2, 7, 5, 7), (13, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # a small plane: direct
    ((3, 9, 9, 10), (20, 9, 1, 1), (2, 3), (0, 0, 0, 0), (1, 1)),  # strided: copied
    ((1, 3, 2, 2), (1, 3, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # less than a tile
]


def _case_id(case: tuple[Any, ...]) -> str:
    x, w, s, p, d = case
    return f"x{list(x)}-w{list(w)}-s{list(s)}-p{list(p)}-d{list(d)}"


def _run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, ...],
         pads: tuple[int, ...], dilation: tuple[int, ...]) -> np.ndarray:
    out_space = [(x.shape[2 + a] + pads[a] + pads[2 + a] - dilation[a] * (w.shape[2 + a] - 1)
                  - 1) // strides[a] + 1 for a in range(2)]
    out = np.full((x.shape[0], w.shape[0], *out_space), np.nan, np.float32)
    run_conv(np, [x, w] if b is None else [x, w, b], [out], 1, strides, dilation, pads[:2])
    return out


@pytest.mark.parametrize("case", GEOMETRIES, ids=_case_id)
@pytest.mark.parametrize("bias", [True, False])
def test_matches_the_float64_reference_and_the_gemm_path(
        case: tuple[Any, ...], bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    xs, ws, strides, pads, dilation = case
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    plan = conv_plan(xs, ws, tuple(_run(x, w, b, strides, pads, dilation).shape), "float32",
                     "float32", True, 1, strides, dilation, pads[:2], True)
    assert plan.direct is not None
    got = _run(x, w, b, strides, pads, dilation)
    want = reference(x, w, b, strides, pads, dilation, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    np.testing.assert_allclose(got, _run(x, w, b, strides, pads, dilation), rtol=1e-5,
                               atol=1e-5)


def test_strips_of_tiles_cover_the_output_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphrt.kernels.cpu import conv as host_conv

    x = RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)
    w = RNG.standard_normal((20, 3, 3, 3)).astype(np.float32)
    tiles = -(-100 // 6)
    # A small image is one strip; a large one (here: 12 padded columns) is cut into strips.
    assert host_conv.direct_plan(x.shape, w.shape, (2, 20, 10, 10), (1, 1), (1, 1),
                                 (1, 1)).strip == tiles
    assert host_conv.direct_plan((1, 64, 100, 10), (20, 64, 3, 3), (1, 20, 100, 10), (1, 1),
                                 (1, 1), (1, 1)).strip < -(-1000 // 6)
    monkeypatch.setattr(host_conv, "_STRIP_BYTES", 4 * 3 * 12 * 5)  # 3 output rows a strip
    monkeypatch.setattr(host_conv, "_WHOLE_BYTES", 0)
    monkeypatch.setattr(host_conv, "_CACHE_BYTES", 0)  # its weights outweigh its data
    host_conv.direct_plan.cache_clear()
    conv_plan.cache_clear()
    try:
        plan = host_conv.direct_plan(x.shape, w.shape, (2, 20, 10, 10), (1, 1), (1, 1), (1, 1))
        assert 1 < plan.strip < tiles and tiles % plan.strip  # several, the last one shorter
        got = _run(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1))
    finally:
        host_conv.direct_plan.cache_clear()
        conv_plan.cache_clear()
    np.testing.assert_allclose(got, reference(x, w, None, (1, 1), (1,) * 4, (1, 1), 1),
                               rtol=1e-5, atol=1e-5)


def test_an_image_is_one_strip_where_its_weights_outweigh_the_data_it_reads() -> None:
    from graphrt.kernels.cpu import conv as host_conv

    def strip(c: int, o: int, k: int, stride: int, hw: int) -> tuple[int, int]:
        out = (hw + 2 * (k // 2) - k) // stride + 1
        plan = host_conv.direct_plan((1, c, hw, hw), (o, c, k, k), (1, o, out, out),
                                     (stride, stride), (1, 1), (k // 2, k // 2), True, True)
        return plan.strip, -(-out * out // 6)

    # ResNet-50's last stage: 9.4 and 8 MB of weights over 0.45 and 0.39 MB read (the
    # strided 1x1 reads every second row of its 0.8 MB)
    for layer in [(512, 512, 3, 2, 14), (1024, 2048, 1, 2, 14), (2048, 512, 1, 1, 7)]:
        got, tiles = strip(*layer)
        assert got == tiles, layer
    # 0.8 MB read does not stay in a core's L2: strips, though the weights outweigh it
    got, tiles = strip(1024, 256, 1, 1, 14)
    assert got < tiles
    # the data outweighs the weights: strips
    got, tiles = strip(128, 128, 3, 2, 56)
    assert got < tiles


def test_a_padded_copy_of_whole_channel_blocks_is_blocked_and_packs_its_weight_so() -> None:
    from graphrt.kernels.cpu import conv as host_conv

    def plan(c: int, pads: tuple[int, int]) -> DirectPlan:
        return host_conv.direct_plan((1, c, 6, 6), (16, c, 3, 3), (1, 16, 6 - 2 + 2 * pads[0],
                                     6 - 2 + 2 * pads[1]), (1, 1), (1, 1), pads)

    assert plan(16, (1, 1)).blocked
    assert not plan(12, (1, 1)).blocked  # not whole blocks: planes
    assert not plan(16, (0, 0)).blocked  # read in place: no copy to block
    blocked = plan(16, (1, 1))
    # Channel block, kernel row, kernel column, then the 8 channels of the block side by side.
    assert list(blocked.taps[:10]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert blocked.taps[72] == 8 * 8 * 8  # the second block: after 8 planes of 8x8
    x = RNG.standard_normal((1, 16, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32)
    freeze(w)
    got = _run(x, w, None, (1, 1), (1,) * 4, (1, 1))
    np.testing.assert_allclose(got, reference(x, w, None, (1, 1), (1,) * 4, (1, 1), 1),
                               rtol=1e-5, atol=1e-5)  # the weight packed in the taps' order
    # The same frozen weight read in place (no copy, planes) is packed again, its own way.
    np.testing.assert_allclose(_run(x, w, None, (1, 1), (0,) * 4, (1, 1)),
                               reference(x, w, None, (1, 1), (0,) * 4, (1, 1), 1),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("helper_first", [True, False])
def test_the_padded_copy_and_the_tiles_are_shared_whichever_thread_comes_first(
        helper_first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphrt.kernels.cpu import conv as host_conv
    from graphrt.kernels.cpu import crew

    calls: list[tuple[bool, bool]] = []

    def in_turn(jobs: Any, parallel: bool, args: tuple[Any, ...]) -> None:
        """A helper that joins before the caller (and does everything) or after it (and
        finds nothing left)."""
        bell = np.zeros(1, np.int64)
        turns = [(False, 1), (True, 0)] if helper_first else [(True, 0), (False, 1)]
        for caller, call in turns:
            calls.append((caller, jobs(*args, bell, caller, call, 0)))

    x = RNG.standard_normal((2, 40, 9, 9)).astype(np.float32)  # 80 planes: 2 copy jobs
    w = RNG.standard_normal((20, 40, 3, 3)).astype(np.float32)
    plan = host_conv.direct_plan(x.shape, w.shape, (2, 20, 9, 9), (1, 1), (1, 1), (1, 1))
    assert plan.blocked and plan.padding[0] == 80 and plan.padding[7] < 10  # 2 copy jobs
    want = _run(x, w, None, (1, 1), (1,) * 4, (1, 1))  # the tiles' sums do not depend on who
    np.testing.assert_allclose(want, reference(x, w, None, (1, 1), (1,) * 4, (1, 1), 1),
                               rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(crew, "run_jobs", in_turn)
    np.testing.assert_array_equal(_run(x, w, None, (1, 1), (1,) * 4, (1, 1)), want)
    # The caller returns once all is done; a helper given no spins reports no next call.
    assert sorted(calls) == [(False, False), (True, True)]


def test_strided_data_and_a_strided_output_give_the_same_bits() -> None:
    x = RNG.standard_normal((2, 6, 10, 12)).astype(np.float32)
    w = RNG.standard_normal((20, 3, 3, 3)).astype(np.float32)
    strided = x[:, ::2]  # not contiguous, read in place
    plain = _run(np.ascontiguousarray(strided), w, None, (1, 1), (0,) * 4, (1, 1))
    np.testing.assert_array_equal(_run(strided, w, None, (1, 1), (0,) * 4, (1, 1)), plain)
    out = np.empty((2, 40, 8, 10), np.float32)[:, ::2]
    run_conv(np, [strided, w], [out], 1, (1, 1), (1, 1), (0, 0))
    np.testing.assert_array_equal(out, plain)


def test_the_plan_uses_the_gemm_path_where_the_direct_kernel_does_not_apply() -> None:
    def plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], dtype: str = "float32",
             groups: int = 1, host: bool = True, direct: bool = True) -> Any:
        return conv_plan(x, w, out, dtype, "float32", host, groups, (1, 1), (1, 1), (0, 0),
                         direct)

    assert isinstance(plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4)).direct, DirectPlan)
    assert isinstance(plan((1, 4, 16, 16), (16, 4, 1, 1), (1, 16, 16, 16)).direct,
                      PointwisePlan)
    # a 1x1 of stride 1 onto a small plane: the direct kernel's tiles fit it better
    assert isinstance(plan((1, 4, 6, 6), (16, 4, 1, 1), (1, 16, 6, 6)).direct, DirectPlan)
    assert isinstance(plan((1, 4, 6, 6), (16, 4, 1, 1), (1, 16, 8, 8), direct=True).direct,
                      DirectPlan)  # padded 1x1 (the begin pads are 0 here: ends only)
    assert plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), direct=False).direct is None
    assert plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), host=False).direct is None
    assert plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), dtype="float16").direct is None
    assert plan((1, 4, 6, 6), (16, 2, 3, 3), (1, 16, 4, 4), groups=2).direct is None
    assert plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), dtype="float64").direct is None


def test_without_numba_the_gemm_path_is_taken_and_logged_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    monkeypatch.setattr(host_jit, "_LOGGED", set())
    with caplog.at_level(logging.INFO, logger="graphrt.kernels.cpu.jit"):
        x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
        w = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
        for _ in range(2):
            got = _run(x, w, None, (1, 1), (1,) * 4, (1, 1))
    np.testing.assert_allclose(got, reference(x, w, None, (1, 1), (1,) * 4, (1, 1), 1),
                               rtol=1e-5, atol=1e-5)
    lines = [r.getMessage() for r in caplog.records if "im2col" in r.getMessage()]
    assert lines == ["graphrt: float32 convolutions on cpu take the im2col + GEMM path: "
                     "GRAPHRT_JIT=0"]


# -- packed weights, once per loaded param -------------------------------------------------


def test_frozen_arrays_and_their_views_derive_once_others_every_call() -> None:
    weight = np.arange(12.0).reshape(3, 4)
    calls: list[int] = []

    def make() -> np.ndarray:
        calls.append(1)
        return weight * 2

    assert not is_frozen(weight)
    derived(weight, "k", make)
    derived(weight, "k", make)
    assert len(calls) == 2  # not frozen: every call
    freeze(weight)
    assert is_frozen(weight) and is_frozen(weight.reshape(4, 3)) and is_frozen(weight[1:])
    assert not weight.flags.writeable
    first = derived(weight, "k", make)
    assert derived(weight, "k", make) is first and len(calls) == 3
    assert derived(weight[1:], "k", make) is not first  # another view, its own value
    assert derived(weight, "other", make) is not first
    copy = weight.copy()  # writable, not frozen memory
    assert not is_frozen(copy)
    copy.flags.writeable = False
    assert not is_frozen(copy)  # read-only is not enough: the memory must be frozen


def test_a_view_found_by_identity_leaves_no_entry_behind() -> None:
    """derived() finds a view it saw before by identity; the entry must go with the view, or
    kernels that make a fresh view per call would grow the cache without end."""
    from graphrt.devices import frozen

    weight = np.ones((4, 4))
    freeze(weight)
    values = frozen._values(weight)
    assert values is not None
    view = weight.reshape(16)
    first = derived(view, "k", lambda: [1])
    assert derived(view, "k", lambda: [2]) is first  # by identity
    assert (id(view), "k") in values
    ident = id(view)
    del view
    gc.collect()
    assert (ident, "k") not in values
    assert derived(weight.reshape(16), "k", lambda: [3]) is first  # the same memory: by value


def test_a_frozen_array_is_forgotten_when_collected() -> None:
    from graphrt.devices import frozen

    weight = np.ones(8)
    freeze(weight)
    derived(weight, "k", lambda: 1)
    ident = id(weight)
    del weight
    gc.collect()
    assert ident not in frozen._frozen  # and its derived values with it


def _conv_module(device: Any = None) -> tuple[Any, Any]:
    g = GraphBuilder()
    ix, iw, ib = g.input("x", [2, 16, 20, 20]), g.input("w", [40, 16, 3, 3]), g.input("b", [40])
    y = g.op("conv", "conv", [ix, iw, ib], shape=[2, 40, 20, 20])
    lib = Library()
    lib.define("conv", {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
        {"op": "conv2d", "inputs": ["x", "w", "b"], "outputs": ["y"],
         "attrs": {"padding": [1, 1, 1, 1]}}]})
    return graphrt.create(g.build(heads=[y]), lib, device or graphrt.cpu(0)), lib


def test_a_lone_convolution_is_planned_at_create_not_per_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A conv2d with no epilogue after it binds its plan once, as one with an epilogue does:
    runs never look the plan up again."""
    if host_jit.direct_conv() is None:
        pytest.skip("numba is not installed")
    from graphrt.kernels.cpu import conv as convolution

    mod, _ = _conv_module()
    x, w, b = (RNG.standard_normal(s).astype(np.float32)
               for s in ((2, 16, 20, 20), (40, 16, 3, 3), (40,)))
    mod.run(x=x, w=w, b=b)
    want = mod.get_output(0).copy()

    def planned_again(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("conv_plan called during a run")

    monkeypatch.setattr(convolution, "conv_plan", planned_again)
    monkeypatch.setattr(convolution, "run_conv", planned_again)
    mod.run(x=x, w=w, b=b)
    np.testing.assert_array_equal(mod.get_output(0), want)
    np.testing.assert_allclose(want, reference(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1),
                               rtol=1e-4, atol=1e-4)


def test_loaded_weights_are_packed_once_and_again_after_a_new_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = _conv_module()
    packs: list[int] = []
    pack = direct_conv.pack_weights
    monkeypatch.setattr(direct_conv, "pack_weights",
                        lambda w, block: packs.append(1) or pack(w, block))
    x = RNG.standard_normal((2, 16, 20, 20)).astype(np.float32)
    for scale in (1.0, -2.0):
        w = (RNG.standard_normal((40, 16, 3, 3)) * scale).astype(np.float32)
        b = RNG.standard_normal(40).astype(np.float32)
        mod.load_params({"w": w, "b": b})
        for _ in range(3):
            mod.set_input("x", x)
            mod.run()
            np.testing.assert_allclose(
                mod.get_output(0), reference(x, w, b, (1, 1), (1,) * 4, (1, 1), 1),
                rtol=1e-5, atol=1e-4)
    assert len(packs) == 2  # once per load, not once per run
    w2 = RNG.standard_normal((40, 16, 3, 3)).astype(np.float32)
    for _ in range(2):  # set_input of a param: the context's own, writable memory
        w2 *= -1
        mod.set_input("w", w2)
        mod.run()
        np.testing.assert_allclose(mod.get_output(0),
                                   reference(x, w2, b, (1, 1), (1,) * 4, (1, 1), 1),
                                   rtol=1e-5, atol=1e-4)
    assert len(packs) == 4  # packed on every call


def test_switching_the_jit_off_after_create_still_runs_right(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod, _ = _conv_module()  # its workspace planned for the direct kernel
    x = RNG.standard_normal((2, 16, 20, 20)).astype(np.float32)
    w = RNG.standard_normal((40, 16, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    mod.load_params({"w": w, "b": b})
    monkeypatch.setenv("GRAPHRT_JIT", "0")  # the im2col path, whose workspace differs
    (got,) = mod(x=x)
    np.testing.assert_allclose(got, reference(x, w, b, (1, 1), (1,) * 4, (1, 1), 1),
                               rtol=1e-5, atol=1e-4)


def test_concurrent_runs_from_threads_give_each_its_own_result() -> None:
    mod, _ = _conv_module()
    from graphrt.kernels.cpu.conv import direct_plan

    assert direct_plan((2, 16, 20, 20), (40, 16, 3, 3), (2, 40, 20, 20), (1, 1), (1, 1),
                       (1, 1)).parallel  # on the pool
    w = RNG.standard_normal((40, 16, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    mod.load_params({"w": w, "b": b})
    inputs = [RNG.standard_normal((2, 16, 20, 20)).astype(np.float32) for _ in range(4)]
    want = [mod(x=x)[0].copy() for x in inputs]  # one at a time
    for x, one in zip(inputs, want, strict=True):
        np.testing.assert_allclose(one, reference(x, w, b, (1, 1), (1,) * 4, (1, 1), 1),
                                   rtol=1e-4, atol=1e-4)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for _ in range(20):
                (got,) = mod(x=inputs[k])
                np.testing.assert_array_equal(got, want[k])  # the same bits as alone
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_sim_gives_the_values_of_cpu() -> None:
    """sim runs the reference (im2col + GEMM), not the compiled kernel: the same values,
    summed in another order."""
    x = RNG.standard_normal((2, 16, 20, 20)).astype(np.float32)
    params = {"w": RNG.standard_normal((40, 16, 3, 3)).astype(np.float32),
              "b": RNG.standard_normal(40).astype(np.float32)}
    results = []
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        mod, _ = _conv_module(device)
        mod.load_params(params)
        mod.set_input("x", x)
        mod.run()
        results.append(mod.get_output(0, np.empty((2, 40, 20, 20), np.float32)))
    np.testing.assert_allclose(*results, rtol=1e-5, atol=1e-4)


def _child_conv(queue: Any) -> None:
    x = np.ones((2, 16, 20, 20), np.float32)
    w = np.ones((40, 16, 3, 3), np.float32)
    queue.put(float(_run(x, w, None, (1, 1), (0,) * 4, (1, 1)).sum()))


def test_a_forked_child_runs_parallel_convolutions_with_helpers_of_its_own() -> None:
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    x = np.ones((2, 16, 20, 20), np.float32)
    w = np.ones((40, 16, 3, 3), np.float32)
    want = float(_run(x, w, None, (1, 1), (0,) * 4, (1, 1)).sum())  # the parent's helpers
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child_conv, args=(results,))
    child.start()
    assert results.get(timeout=60) == want
    child.join(timeout=60)
    assert child.exitcode == 0


@pytest.mark.parametrize("frozen", [True, False])
def test_a_step_binds_the_job_call_of_frozen_weights(frozen: bool) -> None:
    """Bound to a step's arrays, a convolution whose weight and bias are frozen params is its
    prepared job call (no wrapper, no check of the arrays per call); else the kernel."""
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    w = RNG.standard_normal((24, 8, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    if frozen:
        freeze(w)
        freeze(b)
    types = [TensorType(a.shape, "float32") for a in (x, w, b)]
    kernel = conv_epilogue(np, types, TensorType((1, 24, 9, 9), "float32"), 1, (1, 1), (1, 1),
                           (1, 1), False, True)
    assert kernel is not None
    out = np.empty((1, 24, 9, 9), np.float32)
    (space,) = conv_plan(x.shape, w.shape, out.shape, "float32", "float32", True, 1, (1, 1),
                         (1, 1), (1, 1), True).workspace()  # the padded copy
    with pytest.raises(ValueError, match="workspace holds 1 floats; its plan copies"):
        kernel(x, w, b, out, np.empty(1, np.float32))  # never past the workspace's end
    arrays = (x, w, b, out, np.empty(space.shape, np.float32))
    fn, args = bind_call(kernel, arrays)
    assert isinstance(fn, JobCall) == frozen and args == (() if frozen else arrays)
    x[...] = RNG.standard_normal(x.shape)  # read where it is, as it is at the call
    fn(*args)
    expected = np.maximum(reference(x, w, b, (1, 1), (1,) * 4, (1, 1), 1), 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
