"""Blocked layouts between the cpu's convolutions (graphrt.onnx.layout): which values of a
converted model become ``NCHW8c`` and which stay NCHW (graph outputs, values a pool or a
non-blocked step reads, channels that are no whole blocks, other devices, dynamic shapes,
the compiled kernels switched off), and that blocked models compute what ONNX Runtime
computes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.onnx import convert as convert_module
from graphrt.onnx.builder import Builder, TensorType
from graphrt.onnx.layout import block_layouts

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_harness import run_ort  # noqa: E402

COMPILED = convert_module.direct_conv() is not None
CONV = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}


def _conv_layouts(bundle: graphrt.Bundle) -> list[tuple[str, str]]:
    """(data_layout, out_layout) of every conv2d the graph's nodes run, node by node."""
    functions = bundle.lib.spec().functions
    return [(step.attrs.get("data_layout", "NCHW"), step.attrs.get("out_layout", "NCHW"))
            for node in bundle.graph.nodes if node.func_name in functions
            for step in functions[node.func_name].body if step.op == "conv2d"]


def inverted_residual(channels: int = 16, expand: int = 48, *, batch: int | str = 1,
                      pool_after: bool = False, seed: int = 0) -> Any:
    """x → 3x3 conv → h → 1x1 expand, clip → 3x3 depthwise, clip → 1x1 project, + h →
    3x3 conv, relu → y: MobileNetV2's block between two convolutions (or, after it, a global
    pool reading its sum)."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    inits = [weight("w0", (channels, channels, 3, 3)),
             weight("w1", (expand, channels, 1, 1)), weight("b1", (expand,)),
             weight("w2", (expand, 1, 3, 3)), weight("b2", (expand,)),
             weight("w3", (channels, expand, 1, 1)), weight("b3", (channels,)),
             weight("w4", (channels, channels, 3, 3)),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "w1", "b1"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "w2", "b2"], ["d"], group=expand,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "w3", "b3"], ["p"]),
             helper.make_node("Add", ["p", "h"], ["s"])]
    if pool_after:
        nodes.append(helper.make_node("GlobalAveragePool", ["s"], ["y"]))
        out_shape: list[Any] = [batch, channels, 1, 1]
    else:
        nodes += [helper.make_node("Conv", ["s", "w4"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["y"])]
        out_shape = [batch, channels, 10, 10]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [batch, channels, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _check_against_ort(model: Any, module: graphrt.GraphModule) -> None:
    x = np.random.default_rng(1).standard_normal((1, 16, 10, 10)).astype(np.float32)
    got = [np.array(out) for out in module(x=x)]
    np.testing.assert_allclose(got[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not COMPILED, reason="the compiled kernels are off")
def test_a_chain_of_convolutions_runs_blocked_and_matches_onnx_runtime() -> None:
    model = inverted_residual()
    bundle = graphrt.from_onnx(model)
    # in by the first convolution (NCHW data), out by the last (NCHW output); between them
    # every value is blocked, the block's residual sum too
    assert _conv_layouts(bundle) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW8c"),
                                     ("NCHW8c", "NCHW8c"), ("NCHW8c", "NCHW8c"),
                                     ("NCHW8c", "NCHW")]
    shapes = [entry.shape for entry in bundle.graph.entries]
    assert (1, 6, 10, 10, 8) in shapes  # the expansion, 48 channels in 6 blocks
    _check_against_ort(model, bundle.create(graphrt.cpu(0)))


def resnet_stem(seed: int = 0) -> Any:
    """x → 7x7/2 conv, relu → 3x3/2 max pool (pad 1) → p → 3x3 conv, relu, + p → relu → 1x1
    conv → y: ResNet's stem and the start of its first stage."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32),
                                       name)

    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["b", "p"], ["s"]),
             helper.make_node("Relu", ["s"], ["t"]),
             helper.make_node("Conv", ["t", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 23, 23])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        [weight("w0", (16, 3, 7, 7)), weight("w1", (16, 16, 3, 3)), weight("w2", (8, 16, 1, 1))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.skipif(not COMPILED, reason="the compiled kernels are off")
@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)])
def test_a_max_pool_between_convolutions_pools_them_blocked(device: graphrt.Device) -> None:
    """ResNet's stem pool reads the stem's output blocked and writes its own blocked, so the
    stem stores vectors and the first stage's residual sums stay blocked (with an NCHW pool
    between them, the stem and the first stage's convolutions stored NCHW, one float at a
    time)."""
    model = resnet_stem()
    bundle = graphrt.from_onnx(model)
    assert _conv_layouts(bundle) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW8c"),
                                     ("NCHW8c", "NCHW")]
    functions = bundle.lib.spec().functions
    pools = [step.attrs.get("layout") for node in bundle.graph.nodes
             if node.func_name in functions
             for step in functions[node.func_name].body if step.op == "max_pool2d"]
    assert pools == ["NCHW8c"]
    x = np.random.default_rng(2).standard_normal((1, 3, 23, 23)).astype(np.float32)
    got = np.array(bundle.create(device)(x=x)[0])
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not COMPILED, reason="the compiled kernels are off")
def test_a_global_pool_reads_the_blocked_sum_as_it_is() -> None:
    """Its [N, C, 1, 1] output is the same bytes from NCHW8c data: the block's sum, and so h
    and the projection, stay blocked (ResNet's last stage and MobileNetV2's last
    convolution had gone NCHW for the pool at their end)."""
    model = inverted_residual(pool_after=True)
    bundle = graphrt.from_onnx(model)
    assert _conv_layouts(bundle) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW8c"),
                                     ("NCHW8c", "NCHW8c"), ("NCHW8c", "NCHW8c")]
    functions = bundle.lib.spec().functions
    pools = [step.attrs for node in bundle.graph.nodes if node.func_name in functions
             for step in functions[node.func_name].body if step.op == "global_avg_pool2d"]
    assert pools == [{"layout": "NCHW8c"}]
    _check_against_ort(model, bundle.create(graphrt.cpu(0)))
    _check_against_ort(model, bundle.create(graphrt.sim(0)))


def test_other_devices_dynamic_shapes_and_the_reference_keep_nchw(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = inverted_residual()
    assert all(layouts == ("NCHW", "NCHW") for layouts in
               _conv_layouts(graphrt.from_onnx(model, devices=["sim"])))
    assert all(layouts == ("NCHW", "NCHW") for layouts in
               _conv_layouts(graphrt.from_onnx(inverted_residual(batch="n"),
                                               dim_bounds={"n": 4})))
    assert all(layouts == ("NCHW", "NCHW") for layouts in
               _conv_layouts(graphrt.from_onnx(model, fuse=False)))
    monkeypatch.setattr(convert_module, "direct_conv", lambda: None)  # GRAPHRT_JIT=0
    assert all(layouts == ("NCHW", "NCHW") for layouts in
               _conv_layouts(graphrt.from_onnx(model)))


@pytest.mark.skipif(not COMPILED, reason="the compiled kernels are off")
@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_a_blocked_graph_runs_on_the_reference_too(device: graphrt.Device) -> None:
    """Converted for the cpu, created on sim (the reference unblocks around NCHW): equal."""
    model = inverted_residual()
    bundle = graphrt.from_onnx(model)
    assert ("NCHW8c", "NCHW8c") in _conv_layouts(bundle)
    _check_against_ort(model, bundle.create(device))


def _steps(*, channels: int = 8, out: int = 16, read_by: str = "conv") -> tuple[Builder, str]:
    """x → conv(3x3, ``out`` channels) → y → reader; the steps on the cpu."""
    b = Builder()
    x = b.input("x", TensorType((1, channels, 6, 6), "float32"))
    w = b.constant(np.ones((out, channels, 3, 3), np.float32))
    (y,) = b.op("conv2d", [x, w], CONV)
    if read_by == "conv":
        (z,) = b.op("conv2d", [y, b.constant(np.ones((8, out, 3, 3), np.float32))], CONV)
    elif read_by == "add_nchw":  # a sum with a value of its own layout: the input
        (z,) = b.op("add", [y, b.input("r", TensorType((1, out, 6, 6), "float32"))])
    else:
        (z,) = b.op("global_avg_pool2d", [y])
    for step in b.steps:
        step.device = "cpu"
    return b, z


def test_what_stays_nchw() -> None:
    b, z = _steps()
    block_layouts(b, [z])
    assert b.shape(b.steps[0].outputs[0]) == (1, 2, 6, 6, 8)
    b, z = _steps(out=12)  # 12 channels: no whole blocks
    block_layouts(b, [z])
    assert b.shape(b.steps[0].outputs[0]) == (1, 12, 6, 6)
    b, z = _steps(read_by="add_nchw")
    block_layouts(b, [z])
    assert all("out_layout" not in step.attrs for step in b.steps)
    b, z = _steps(read_by="pool")  # a global pool reads blocked data as it is
    block_layouts(b, [z])
    assert [step.attrs.get("out_layout") for step in b.steps] == ["NCHW8c", None]
    assert b.steps[1].attrs == {"layout": "NCHW8c"} and b.shape(z) == (1, 16, 1, 1)
    b, z = _steps()
    block_layouts(b, [z, b.steps[0].outputs[0]])  # a graph output
    assert all("out_layout" not in step.attrs for step in b.steps)
    b, z = _steps()
    b.steps[1].device = "sim"  # the reader runs elsewhere
    block_layouts(b, [z])
    assert all("out_layout" not in step.attrs for step in b.steps)
