"""The compiled quantized convolution (graphrt.kernels.cpu.qconv): equal, integer for integer,
to the op's exact reference over every geometry the float kernels take (direct, blocked,
pointwise, strided pointwise, depthwise), the 8-bit type pairs, per-tensor and per-channel
weights, with and without bias, weights that need several exact chunks, weights no chunking
keeps exact (the reference runs), and the cpu provider choosing it for a converted model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qconv_harness import integers, run_both

import graphrt
from graphrt.devices.frozen import freeze
from graphrt.kernels import chain
from graphrt.kernels.cpu.jit import direct_conv, quantized_kernels
from graphrt.kernels.cpu.qconv import EXACT, qconv_call
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.skipif(direct_conv() is None or quantized_kernels() is None,
                                reason="the compiled kernels are off")
OP = get_op("qlinear_conv")

# (x shape, weight shape, strides, dilation, pads (begins, ends), groups)
GEOMETRIES = [
    ((1, 8, 6, 6), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # blocked padded copy
    ((2, 5, 9, 11), (7, 5, 3, 2), (1, 2), (2, 1), (0, 1, 1, 0), 1),  # odd channels, tile edges
    ((1, 3, 23, 23), (20, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),  # a stem
    ((2, 16, 8, 8), (24, 16, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # pointwise in place
    ((1, 16, 9, 9), (8, 16, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),  # pointwise, strided
    ((1, 16, 8, 8), (8, 16, 1, 1), (2, 2), (1, 1), (0, 0, 1, 1), 1),  # 1x1 with end pads
    ((1, 4, 6, 6), (6, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # direct, read in place
    ((2, 12, 10, 10), (12, 1, 3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 12),  # depthwise
]


def _inputs(x_shape: tuple[int, ...], w_shape: tuple[int, ...], x_dtype: Any, w_dtype: Any,
            per_channel: bool, bias: bool, rng: np.random.Generator,
            weight: np.ndarray | None = None) -> list[np.ndarray]:
    o = w_shape[0]
    w = integers(w_dtype, w_shape, rng) if weight is None else weight
    freeze(w)  # a loaded param: packed once
    zeros = (rng.integers(0, 4, o) if per_channel else rng.integers(0, 4, ())).astype(w_dtype)
    scales = (rng.random(o) * 0.01 + 0.001 if per_channel else np.array(0.004)
              ).astype(np.float32)
    inputs = [integers(x_dtype, x_shape, rng), np.array(0.05, np.float32),
              np.array(rng.integers(-3, 9), x_dtype), w, scales, zeros,
              np.array(rng.random() * 2 + 0.5, np.float32), np.array(rng.integers(0, 50),
                                                                       np.uint8)]
    if bias:
        inputs.append(rng.integers(-20000, 20000, o).astype(np.int32))
    return inputs


def _run_both(inputs: list[np.ndarray], strides: tuple[int, ...], dilation: tuple[int, ...],
              pads: tuple[int, ...], groups: int) -> tuple[np.ndarray, np.ndarray]:
    got, want, _ = run_both(inputs, strides, dilation, pads, groups)
    return got, want


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(np.uint8, np.int8), (np.int8, np.int8),
                                                  (np.uint8, np.uint8), (np.int8, np.uint8)])
def test_equals_the_reference_exactly(geometry: Any, x_dtype: Any, w_dtype: Any) -> None:
    x_shape, w_shape, strides, dilation, pads, groups = geometry
    rng = np.random.default_rng(abs(hash((x_shape, x_dtype, w_dtype))) % 2**32)
    for per_channel, bias in ((True, True), (False, False)):
        got, want = _run_both(_inputs(x_shape, w_shape, x_dtype, w_dtype, per_channel, bias,
                                      rng), strides, dilation, pads, groups)
        np.testing.assert_array_equal(got, want)


def test_weights_past_the_float32_bound_run_in_exact_chunks() -> None:
    """Extreme weights over 512 channels break 2**24 in one chunk: the sums are split by
    input channels, each exact, and added in int32; still equal to the reference."""
    rng = np.random.default_rng(3)
    weight = np.where(rng.random((32, 512, 3, 3)) < 0.5, -127, 127).astype(np.int8)
    inputs = _inputs((1, 512, 5, 5), weight.shape, np.uint8, np.int8, False, True, rng, weight)
    inputs[2] = np.array(0, np.uint8)
    inputs[0] = np.full((1, 512, 5, 5), 255, np.uint8)  # every product at its extreme
    assert EXACT < 512 * 9 * 127 * 255
    got, want = _run_both(inputs, (1, 1), (1, 1), (1, 1, 1, 1), 1)
    np.testing.assert_array_equal(got, want)


def test_weights_no_chunking_keeps_exact_take_the_reference() -> None:
    """One input channel of 17x17 taps of 255 breaks the bound alone: the reference runs."""
    rng = np.random.default_rng(4)
    weight = np.full((2, 1, 17, 17), 255, np.uint8)
    inputs = _inputs((1, 1, 20, 20), weight.shape, np.uint8, np.uint8, False, False, rng,
                     weight)
    inputs[5] = np.array(0, np.uint8)
    assert EXACT < 17 * 17 * 255 * 255
    got, want = _run_both(inputs, (1, 1), (1, 1), (0, 0, 0, 0), 1)
    np.testing.assert_array_equal(got, want)


def test_unsupported_forms_are_left_to_the_reference() -> None:
    """Grouped but not depthwise, and 1-D: no compiled call."""
    rng = np.random.default_rng(5)
    grouped = _inputs((1, 8, 6, 6), (8, 4, 3, 3), np.uint8, np.int8, False, False, rng)
    attrs = OP.attrs(groups=2)
    types = [TensorType(a.shape, str(a.dtype)) for a in grouped]
    (out,) = OP.infer(types, attrs, [None] * len(types))
    assert qconv_call(attrs, types, out, OP.positional(np, attrs, 8)) is None
    flat = _inputs((1, 4, 9), (5, 4, 3), np.uint8, np.int8, False, False, rng)
    types = [TensorType(a.shape, str(a.dtype)) for a in flat]
    (out,) = OP.infer(types, OP.attrs(), [None] * len(types))
    assert qconv_call(OP.attrs(), types, out, OP.positional(np, OP.attrs(), 8)) is None


def test_the_cpu_provider_runs_it_and_sim_the_reference() -> None:
    rng = np.random.default_rng(6)
    inputs = _inputs((2, 16, 10, 10), (32, 16, 3, 3), np.uint8, np.int8, True, True, rng)
    attrs = OP.attrs(padding=[1, 1, 1, 1])
    types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
    out = OP.infer(types, attrs, [None] * len(types))
    prepared = chain("cpu", np).prepare(OP, attrs, types, out)
    assert prepared is not None and prepared.provider == "cpu"
    assert [t.dtype for t in prepared.workspace] == ["float32", "float32", "float32", "int32",
                                                    "uint32"]
    assert chain("sim", np).prepare(OP, attrs, types, out).provider != "cpu"


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_a_converted_qlinear_conv_matches_the_reference(device: graphrt.Device) -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    inputs = _inputs((2, 16, 10, 10), (32, 16, 3, 3), np.uint8, np.int8, True, True, rng)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 16, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 32, 10, 10])],
        [numpy_helper.from_array(a, n) for n, a in zip(names[1:], inputs[1:], strict=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod = graphrt.from_onnx(model).create(device)
    want = np.empty((2, 32, 10, 10), np.uint8)
    OP.positional(np, OP.attrs(padding=[1, 1, 1, 1]), 9)(*inputs, want)
    for _ in range(2):
        (got,) = mod(x=inputs[0])
        np.testing.assert_array_equal(np.asarray(got), want)
