"""The quantized convolution's integer kernel (graphrt.kernels.cpu.integer_conv, AVX2):
equal, integer for integer, to the op's exact reference over the geometries it takes
(padded, strided, dilated, 1x1, a stem of 3 channels, channel counts off its tiles), the
8-bit type pairs, per-tensor and per-channel weights with zero points, with and without a
bias; the weights it declines (a pair of taps past vpmaddubsw's exact range, values past
int8) run on the float kernels, still exact; and the check of the CPU numba compiles for."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from qconv_harness import integers, run_both

from graphrt.devices.frozen import freeze
from graphrt.kernels import chain
from graphrt.kernels.cpu import jit
from graphrt.kernels.cpu.integer_plan import integer_plan, pack_integer
from graphrt.kernels.cpu.qconv import conv_integer_call
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.skipif(jit.integer_conv() is None or jit.direct_conv() is None,
                                reason="the compiled kernels are off, or no AVX2")
OP = get_op("qlinear_conv")

# (x shape, weight shape, strides, dilation, pads (begins, ends))
GEOMETRIES = [
    ((1, 8, 6, 6), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # padded
    ((2, 5, 9, 11), (7, 5, 3, 2), (1, 2), (2, 1), (0, 1, 1, 0)),  # odd channels, tile edges
    ((1, 3, 23, 23), (20, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # a stem
    ((2, 16, 8, 8), (24, 16, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),  # 1x1, a half tile
    ((1, 16, 9, 9), (40, 16, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),  # 1x1, strided
    ((1, 16, 8, 8), (8, 16, 1, 1), (2, 2), (1, 1), (0, 0, 1, 1)),  # 1x1 with end pads
    ((1, 64, 14, 14), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # many tiles, threads
]


def _inputs(x_shape: tuple[int, ...], weight: np.ndarray, x_dtype: Any, zeros: np.ndarray,
            bias: bool, rng: np.random.Generator) -> list[np.ndarray]:
    o = weight.shape[0]
    freeze(weight)  # a loaded param: packed once
    scales = (rng.random(zeros.shape) * 0.01 + 0.001).astype(np.float32)
    inputs = [integers(x_dtype, x_shape, rng), np.array(0.05, np.float32),
              np.array(rng.integers(-3, 9), x_dtype), weight, scales, zeros,
              np.array(rng.random() * 2 + 0.5, np.float32),
              np.array(rng.integers(0, 50), np.uint8)]
    if bias:
        inputs.append(rng.integers(-20000, 20000, o).astype(np.int32))
    return inputs


def _seven_bit(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator
               ) -> tuple[np.ndarray, int]:
    """Weights as ONNX Runtime's ``reduce_range`` gives them (7 bits about the zero point;
    2 less, so that zero points 2 off it keep them 7-bit), and that zero point."""
    zero = 0 if dtype == np.int8 else 128
    return (rng.integers(-62, 62, shape) + zero).astype(dtype), zero


def _run(inputs: list[np.ndarray], strides: tuple[int, ...], dilation: tuple[int, ...],
         pads: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
    """The compiled call's result, the reference's, and whether the integer kernel ran (it
    alone writes the last workspace, its padded copy)."""
    got, want, spaces = run_both(inputs, strides, dilation, pads)
    return got, want, bool((spaces[-1] != 3).any())


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(np.uint8, np.int8), (np.int8, np.int8),
                                                  (np.uint8, np.uint8), (np.int8, np.uint8)])
def test_equals_the_reference_exactly(geometry: Any, x_dtype: Any, w_dtype: Any) -> None:
    x_shape, w_shape, strides, dilation, pads = geometry
    rng = np.random.default_rng(abs(hash((x_shape, x_dtype, w_dtype))) % 2**32)
    for per_channel, bias in ((True, True), (False, False)):
        weight, zero = _seven_bit(w_shape, w_dtype, rng)
        offsets = rng.integers(-2, 3, w_shape[0] if per_channel else ())
        zeros = np.asarray(zero + offsets).astype(w_dtype)  # each channel's values stay 7-bit
        inputs = _inputs(x_shape, weight, x_dtype, zeros, bias, rng)
        got, want, integer = _run(inputs, strides, dilation, pads)
        np.testing.assert_array_equal(got, want)
        assert integer


def test_the_output_may_be_signed() -> None:
    rng = np.random.default_rng(1)
    weight, _ = _seven_bit((16, 8, 3, 3), np.int8, rng)
    inputs = _inputs((1, 8, 7, 7), weight, np.int8, np.zeros(16, np.int8), True, rng)
    inputs[6] = np.array(0.002, np.float32)  # a small output scale: both bounds reached
    inputs[7] = np.array(-5, np.int8)
    got, want, integer = _run(inputs, (1, 1), (1, 1), (1, 1, 1, 1))
    np.testing.assert_array_equal(got, want)
    assert integer and got.dtype == np.int8 and got.min() == -128 and got.max() == 127


@pytest.mark.parametrize(("pair", "integer"), [((64, 64), True), ((-128, 0), True),
                                               ((-64, -64), True), ((65, 64), False),
                                               ((-128, 1), False)])
def test_the_pair_limit_is_exact_at_its_edge(pair: tuple[int, int], integer: bool) -> None:
    """Every product at its extreme (data 255, zero point 0): a pair of adjacent taps of
    |w0| + |w1| = 128 sums to 32640 in int16 and runs in integers; one past it would
    saturate, so the float kernels run it. Both equal the reference."""
    rng = np.random.default_rng(2)
    weight = np.resize(np.array(pair, np.int8), (16, 8, 3, 3)).copy()
    inputs = _inputs((1, 8, 6, 6), weight, np.uint8, np.zeros(16, np.int8), True, rng)
    inputs[0] = np.full((1, 8, 6, 6), 255, np.uint8)
    inputs[2] = np.array(0, np.uint8)
    got, want, ran = _run(inputs, (1, 1), (1, 1), (1, 1, 1, 1))
    np.testing.assert_array_equal(got, want)
    assert ran == integer


def test_pack_integer_declines_values_past_int8() -> None:
    weight = np.full((16, 4, 1, 1), 200, np.uint8)
    assert pack_integer(weight, np.zeros(16, np.uint8)) is None  # 200 - 0 leaves int8
    packed = pack_integer(weight, np.full(16, 200, np.uint8))
    assert packed is not None and not packed.weights.any() and not packed.sums.any()


def test_pack_integer_orders_words_of_four_channels() -> None:
    """``[O/8, taps, 8, 4]``: the 4 bytes of a word are 4 input channels at one kernel
    offset; channels past C and output channels past O are zeros."""
    weight = np.arange(2 * 5 * 1 * 2, dtype=np.int8).reshape(2, 5, 1, 2)
    packed = pack_integer(weight, np.zeros(2, np.int8))
    assert packed is not None
    words = packed.weights.reshape(1, 4, 8, 4)  # 2 words of channels x 2 kernel columns
    np.testing.assert_array_equal(words[0, 0, 0], weight[0, 0:4, 0, 0])
    np.testing.assert_array_equal(words[0, 1, 1], weight[1, 0:4, 0, 1])
    np.testing.assert_array_equal(words[0, 2, 0], [weight[0, 4, 0, 0], 0, 0, 0])
    assert not words[0, :, 2:].any()
    np.testing.assert_array_equal(packed.sums, weight.reshape(2, -1).sum(axis=1))


def test_plan_reads_only_the_pixels_the_windows_reach() -> None:
    plan = integer_plan((1, 6, 9, 9), (8, 6, 3, 3), (1, 8, 4, 4), (2, 2), (1, 1), (0, 0))
    assert plan.workspace == 2 * 9 * 9  # 2 words of channels, rows and columns 0..8
    assert plan.pixels[:5].tolist() == [0, 2, 4, 6, 18]
    assert plan.taps.tolist()[:4] == [0, 1, 2, 9] and plan.taps[9] == 81


@pytest.mark.parametrize(("name", "features", "host", "expected"), [
    (None, None, True, True), (None, None, False, False), ("host", None, True, True),
    ("generic", None, True, False), ("generic", "+sse2,+avx2", False, True),
    ("haswell", "+avx,-avx2", True, False)])
def test_avx2_is_what_numba_compiles_for(monkeypatch: pytest.MonkeyPatch, name: str | None,
                                         features: str | None, host: bool,
                                         expected: bool) -> None:
    """``NUMBA_CPU_NAME`` naming another CPU (a cache shared between machines) decides by
    its ``NUMBA_CPU_FEATURES``; otherwise this CPU's features do."""
    import llvmlite.binding as llvm

    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: {"avx2": host})
    fake = SimpleNamespace(config=SimpleNamespace(CPU_NAME=name, CPU_FEATURES=features))
    assert jit._compiles_avx2(fake) is expected


def test_switched_off_with_the_other_compiled_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GRAPHRT_JIT=0`` turns the integer kernel off too (its convolutions take the float
    path's numpy fallback), without asking which CPU numba compiles for."""
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    monkeypatch.setattr(jit, "_AVX2", {})
    monkeypatch.setattr(jit, "_compiles_avx2", lambda numba: pytest.fail("asked for AVX2"))
    assert jit.integer_conv() is None
    assert jit._AVX2 == {}


CONV_INTEGER = [
    ((2, 8, 9, 9), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((1, 3, 23, 23), (20, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # a stem, a spilled block
    ((1, 16, 9, 9), (40, 16, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("geometry", CONV_INTEGER, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_conv_integer_sums_equal_the_reference(geometry: Any, x_dtype: Any, w_dtype: Any
                                               ) -> None:
    """``conv_integer`` (ONNX's ``ConvInteger``) stores the int32 sums themselves: the same
    kernel, its data's zero point folded in as an integer bias."""
    x_shape, w_shape, strides, dilation, pads = geometry
    rng = np.random.default_rng(abs(hash((x_shape, x_dtype))) % 2**32)
    op = get_op("conv_integer")
    weight, zero = _seven_bit(w_shape, w_dtype, rng)
    freeze(weight)
    for w_zero in (np.array(zero, w_dtype), (zero + rng.integers(-2, 3, w_shape[0])).astype(
            w_dtype)):
        inputs = [integers(x_dtype, x_shape, rng), weight,
                  np.array(rng.integers(0, 9), x_dtype), w_zero]
        attrs = op.attrs(strides=list(strides), dilation=list(dilation), padding=list(pads))
        types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
        (out,) = op.infer(types, attrs, [None] * len(types))
        reference = op.positional(np, attrs, 4)
        want = np.empty(out.shape, np.int32)
        reference(*inputs, want)
        call = conv_integer_call(attrs, types, out, reference)
        assert call is not None
        (words,) = (np.full(t.shape, 3, t.dtype) for t in call.workspace)
        got = np.full(out.shape, 7, np.int32)
        call.run(*inputs, got, words)
        np.testing.assert_array_equal(got, want)
        assert (words != 3).any()  # the integer kernel's copy: it ran


def test_conv_integer_of_full_range_weights_takes_the_reference() -> None:
    rng = np.random.default_rng(9)
    op = get_op("conv_integer")
    inputs = [integers(np.uint8, (1, 4, 6, 6), rng), np.full((8, 4, 3, 3), -128, np.int8),
              np.array(3, np.uint8), np.array(0, np.int8)]
    types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
    (out,) = op.infer(types, op.attrs(), [None] * len(types))
    want = np.empty(out.shape, np.int32)
    op.positional(np, op.attrs(), 4)(*inputs, want)
    call = conv_integer_call(op.attrs(), types, out, op.positional(np, op.attrs(), 4))
    assert call is not None
    (words,) = (np.full(t.shape, 3, t.dtype) for t in call.workspace)
    got = np.empty(out.shape, np.int32)
    call.run(*inputs, got, words)
    np.testing.assert_array_equal(got, want)
    assert (words == 3).all()


def test_the_cpu_provider_runs_conv_integer_and_sim_the_reference() -> None:
    op = get_op("conv_integer")
    types = [TensorType((1, 8, 6, 6), "uint8"), TensorType((16, 8, 3, 3), "int8"),
             TensorType((), "uint8"), TensorType((), "int8")]
    out = op.infer(types, op.attrs(), [None] * 4)
    prepared = chain("cpu", np).prepare(op, op.attrs(), types, out)
    assert prepared is not None and prepared.provider == "cpu"
    assert chain("sim", np).prepare(op, op.attrs(), types, out).provider != "cpu"


def _padded_reference(x: np.ndarray, geometry: np.ndarray) -> np.ndarray:
    """The padded copy of words as :data:`~graphrt.kernels.cpu.integer_conv.GEOMETRY` says,
    one byte at a time."""
    n, c, h, w, hp, wp, top, left, _, flip, fill, down, across = (int(v) for v in geometry)
    words = -(-c // 4)
    out = np.full((n, words, hp, wp, 4), fill, np.uint8)
    rows = max(0, min(-(-h // down), hp - top))
    cols = max(0, min(-(-w // across), wp - min(left, wp)))
    picked = x[:, :, ::down, ::across][:, :, :rows, :cols] ^ np.uint8(flip)
    for ch in range(c):
        out[:, ch // 4, top:top + rows, left:left + cols, ch % 4] = picked[:, ch]
    return out.view(np.uint32).reshape(-1)


@pytest.mark.parametrize(("shape", "pads", "steps"), [
    ((1, 8, 6, 6), (1, 1), (1, 1)),
    ((2, 7, 5, 17), (0, 2), (1, 1)),  # a short word of channels, a span and one pixel
    ((1, 4, 3, 16), (1, 0), (1, 1)),  # one whole span a line
    ((1, 12, 9, 33), (0, 0), (2, 2)),  # strided: every other pixel
    ((1, 4, 2, 1), (3, 3), (1, 1)),  # one pixel a line, mostly border
    ((2, 16, 14, 14), (1, 1), (1, 1)),  # short lines, their last bytes at the data's end
])
def test_the_padded_copy_equals_its_reference(shape: tuple[int, ...], pads: tuple[int, int],
                                              steps: tuple[int, int]) -> None:
    kernels = jit.integer_conv()
    n, c, h, w = shape
    kh = 3 if steps == (1, 1) else 1
    out_h = (h + 2 * pads[0] - kh) // steps[0] + 1
    out_w = (w + 2 * pads[1] - kh) // steps[1] + 1
    plan = integer_plan(shape, (8, c, kh, kh), (n, 8, out_h, out_w), steps, (1, 1), pads)
    rng = np.random.default_rng(len(shape) + h * w)
    x = rng.integers(0, 256, shape).astype(np.uint8)
    for flip, fill in ((0, 7), (128, 200)):
        geometry = plan.geometry.copy()
        geometry[9:11] = (flip, fill)
        padded = np.full(plan.workspace, 0xDEADBEEF, np.uint32)
        kernels._interleave(x.reshape(-1), padded, geometry, 0, n * -(-c // 4))
        np.testing.assert_array_equal(padded, _padded_reference(x, geometry))
