"""QDQ-format convolutions (graphrt.onnx.qdq): DequantizeLinear → Conv → [Relu →]
QuantizeLinear becomes ``qlinear_conv`` (and a max pool between a Q/DQ pair of one scale
pools the 8-bit values), equal to ONNX Runtime's fused QDQ kernels and to
graphrt's own float path within one quantization step, on cpu and sim; the forms that must
stay as they are (a conv output read twice, a float bias, per-axis activations, a graph
output) do; and ONNX Runtime's ``quantize_static`` ResNet-style model fuses every
convolution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.onnx.builder import Builder, TensorType
from graphrt.onnx.qdq import fuse_qdq

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_harness import run_ort  # noqa: E402

DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
Y_SCALE = 0.05


def _ops(bundle: graphrt.Bundle) -> list[str]:
    """The standard ops the graph's nodes run, node by node (nodes share functions)."""
    functions = bundle.lib.spec().functions
    return [step.op for node in bundle.graph.nodes if node.func_name in functions
            for step in functions[node.func_name].body]


def qdq_conv(*, channels: int = 8, out_channels: int = 16, kernel: int = 3, stride: int = 1,
             group: int = 1, per_channel: bool = True, bias: str = "int32", relu: bool = False,
             activation: int = TensorProto.UINT8, read_twice: bool = False,
             per_axis_input: bool = False, seed: int = 0) -> Any:
    """x (float) → Q → DQ → Conv(DQ(w), DQ(b)) → [Relu] → Q → DQ → y (float)."""
    rng = np.random.default_rng(seed)
    act = np.uint8 if activation == TensorProto.UINT8 else np.int8
    x_zero = np.array(7 if act == np.uint8 else -3, act)
    # 7-bit weights: ONNX Runtime adds uint8 x int8 products in saturating int16 on AVX2
    w = rng.integers(-63, 64, (out_channels, channels // group, kernel, kernel)).astype(
        np.int8)
    w_scale = (rng.random(out_channels) * 0.01 + 0.002 if per_channel else np.array(0.006)
               ).astype(np.float32)
    x_scale = np.array(0.03, np.float32)
    inits: dict[str, np.ndarray] = {
        "x_scale": x_scale, "x_zero": x_zero, "w_q": w, "w_scale": w_scale,
        "w_zero": np.zeros(w_scale.shape, np.int8), "y_scale": np.array(Y_SCALE, np.float32),
        "y_zero": np.array(128 if act == np.uint8 else 0, act)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_f"], axis=0)]
    if per_axis_input:
        inits["x_scale_c"] = np.full(channels, 0.03, np.float32)
        inits["x_zero_c"] = np.full(channels, x_zero, act)
        nodes.append(helper.make_node("DequantizeLinear", ["x_q", "x_scale_c", "x_zero_c"],
                                      ["x_f"], axis=1))
    else:
        nodes.append(helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"],
                                      ["x_f"]))
    conv_inputs = ["x_f", "w_f"]
    if bias == "int32":
        inits["b_q"] = rng.integers(-3000, 3000, out_channels).astype(np.int32)
        inits["b_scale"] = (x_scale * w_scale).astype(np.float32)
        inits["b_zero"] = np.zeros(inits["b_scale"].shape, np.int32)
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b_f"],
                                      axis=0))
        conv_inputs.append("b_f")
    elif bias == "float":
        inits["b_f"] = rng.standard_normal(out_channels).astype(np.float32)
        conv_inputs.append("b_f")
    nodes.append(helper.make_node("Conv", conv_inputs, ["c"], pads=[kernel // 2] * 4,
                                  strides=[stride] * 2, group=group))
    summed = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        summed = "r"
    nodes += [helper.make_node("QuantizeLinear", [summed, "y_scale", "y_zero"], ["y_q"]),
              helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"])]
    side = (9 + 2 * (kernel // 2) - kernel) // stride + 1
    shape = [2, out_channels, side, side]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    if read_twice:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, shape))
    graph = helper.make_graph(
        nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [2, channels, 9, 9])],
        outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=8)


def _feeds(seed: int = 1, channels: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((2, channels, 9, 9)) * 2).astype(np.float32)}


FUSED = [
    dict(),
    dict(per_channel=False),
    dict(bias="none"),
    dict(relu=True),
    dict(activation=TensorProto.INT8),
    dict(kernel=1, stride=2),
    dict(channels=8, out_channels=8, group=8),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FUSED, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items())
                         or "default")
def test_fused_and_within_one_step_of_onnxruntime(form: dict[str, Any],
                                                  device: graphrt.Device) -> None:
    model = qdq_conv(**form)
    fused = graphrt.from_onnx(model)
    assert "qlinear_conv" in _ops(fused) and "conv2d" not in _ops(fused)
    feeds = _feeds()
    (got,) = fused.create(device)(**feeds)
    (unfused,) = graphrt.from_onnx(model, fuse=False).create(device)(**feeds)
    (want,) = run_ort(model, feeds)
    step = Y_SCALE * 1.001
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=step)
    np.testing.assert_allclose(np.asarray(got), np.asarray(unfused), rtol=0, atol=step)
    # ties are rare: nearly every output equals ONNX Runtime's exactly
    assert np.mean(np.asarray(got) == want) > 0.99


@pytest.mark.parametrize("form", [dict(read_twice=True), dict(bias="float"),
                                  dict(per_axis_input=True)],
                         ids=["read-twice", "float-bias", "per-axis-input"])
def test_forms_that_must_stay_float_do(form: dict[str, Any]) -> None:
    model = qdq_conv(**form)
    bundle = graphrt.from_onnx(model)
    assert "qlinear_conv" not in _ops(bundle) and "conv2d" in _ops(bundle)
    feeds = _feeds()
    got = bundle.create("cpu")(**feeds)
    want = run_ort(model, feeds)
    np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=0, atol=Y_SCALE * 1.001)


def test_a_conv_output_that_is_a_graph_output_is_kept() -> None:
    b = Builder()
    x = b.input("x", TensorType((1, 2, 4, 4), "uint8"))

    def one(value: float, dtype: str) -> str:
        return b.constant(np.array(value, dtype))

    (xf,) = b.op("dequantize", [x, one(0.1, "float32"), one(3, "uint8")])
    (wf,) = b.op("dequantize", [b.constant(np.ones((3, 2, 1, 1), np.int8)),
                                one(0.5, "float32"), one(0, "int8")])
    (yf,) = b.op("conv2d", [xf, wf], {"strides": [1, 1], "padding": [0, 0, 0, 0],
                                      "dilation": [1, 1], "groups": 1})
    (yq,) = b.op("quantize", [yf, one(0.2, "float32"), one(5, "uint8")])
    fuse_qdq(b, [yq, yf])
    assert [step.op for step in b.steps] == ["dequantize", "conv2d", "quantize"]
    fuse_qdq(b, [yq])
    assert [step.op for step in b.steps] == ["qlinear_conv"]


def test_a_bias_with_another_scale_is_not_fused() -> None:
    """A bias whose scale is not x_scale * w_scale would be added on another scale."""
    model = qdq_conv()
    for init in model.graph.initializer:
        if init.name == "b_scale":
            init.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(init) * np.float32(2), "b_scale"))
    assert "qlinear_conv" not in _ops(graphrt.from_onnx(model))


def test_a_model_quantized_by_onnxruntime_fuses_every_convolution(tmp_path: Any) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
                                     "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2,
                                     "w2"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, 8, 12, 12])],
                              inits)
    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                ir_version=8), str(source))
    batches = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
                    for _ in range(4)])

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, reduce_range=True)
    model = onnx.load(str(target))
    ops = _ops(graphrt.from_onnx(model))
    assert ops.count("qlinear_conv") == 2 and "conv2d" not in ops
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = next(n for n in model.graph.node if n.output[0] == "y")
    step = float(scales[last.input[1]])
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    (want,) = run_ort(model, feeds)
    for device in ("cpu", "sim"):
        (got,) = graphrt.from_onnx(model).create(device)(**feeds)
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=step * 2.001)


def qdq_matmul(*, weight: bool = True, per_column: bool = True, relu: bool = False) -> Any:
    """x (float) → Q → DQ → MatMul(·, DQ(w) or DQ(Q(x2))) → [Relu] → Q → DQ → y."""
    rng = np.random.default_rng(3)
    inits: dict[str, np.ndarray] = {
        "s": np.array(0.04, np.float32), "z": np.array(120, np.uint8),
        "y_scale": np.array(Y_SCALE, np.float32), "y_zero": np.array(100, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_f"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 40])]
    if weight:
        columns = (24,) if per_column else ()
        inits["w_q"] = rng.integers(-63, 64, (40, 24)).astype(np.int8)
        inits["w_scale"] = (rng.random(columns) * 0.01 + 0.002).astype(np.float32)
        inits["w_zero"] = np.zeros(columns, np.int8)
        nodes.append(helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_f"],
                                      axis=1))
        out_shape = [2, 6, 24]
    else:
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 40, 6]))
        nodes += [helper.make_node("QuantizeLinear", ["x2", "s", "z"], ["x2_q"]),
                  helper.make_node("DequantizeLinear", ["x2_q", "s", "z"], ["w_f"])]
        out_shape = [2, 6, 6]
    nodes.append(helper.make_node("MatMul", ["x_f", "w_f"], ["m"]))
    last = "m"
    if relu:
        nodes.append(helper.make_node("Relu", ["m"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "y_scale", "y_zero"], ["y_q"]),
              helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_matmul", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", [dict(), dict(per_column=False), dict(weight=False)],
                         ids=["per-column", "per-tensor", "two-activations"])
def test_a_matmul_between_qdq_pairs_is_qlinear_matmul(form: dict[str, Any],
                                                      device: graphrt.Device) -> None:
    model = qdq_matmul(**form)
    bundle = graphrt.from_onnx(model)
    assert "qlinear_matmul" in _ops(bundle) and "matmul" not in _ops(bundle)
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((2, 6, 40)).astype(np.float32)}
    if not form.get("weight", True):
        feeds["x2"] = rng.standard_normal((2, 40, 6)).astype(np.float32)
    (got,) = bundle.create(device)(**feeds)
    (unfused,) = graphrt.from_onnx(model, fuse=False).create(device)(**feeds)
    (want,) = run_ort(model, feeds)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=Y_SCALE * 1.001)
    np.testing.assert_allclose(np.asarray(got), np.asarray(unfused), rtol=0,
                               atol=Y_SCALE * 1.001)


def test_a_matmul_with_a_relu_before_its_quantize_stays_float() -> None:
    assert "qlinear_matmul" not in _ops(graphrt.from_onnx(qdq_matmul(relu=True)))


def test_scalar_constants_quantize_and_dequantize_at_conversion() -> None:
    """ONNX Runtime's quantizer wraps scalar constants (a division by sqrt(d)) in a Q/DQ
    pair: folding them took numpy's 0-d results as arrays and failed."""
    inits = [numpy_helper.from_array(np.array(8.0, np.float32), "c"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["c", "s", "z"], ["c_q"]),
             helper.make_node("DequantizeLinear", ["c_q", "s", "z"], ["c_f"]),
             helper.make_node("Div", ["x", "c_f"], ["y"])]
    graph = helper.make_graph(nodes, "scalar", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = np.array([1.0, 2.0, 4.0], np.float32)
    (got,) = graphrt.from_onnx(model).create("cpu")(x=x)
    np.testing.assert_allclose(np.asarray(got), x / 8.0, rtol=1e-6)


def test_a_model_converted_for_cuda_keeps_its_float_convolutions() -> None:
    """The integer ops have no cuda kernel but their reference; cuDNN's float
    convolutions are the fast path there."""
    model = qdq_conv()
    assert "qlinear_conv" in _ops(graphrt.from_onnx(model, devices=["cpu"]))
    bundle = graphrt.from_onnx(model, devices=["cuda", "cpu"])
    assert "qlinear_conv" not in _ops(bundle) and "conv2d" in _ops(bundle)


def qdq_max_pool(*, out_scale: float = 0.04, out_zero: int = 9, signed: bool = False,
                 pads: int = 1) -> Any:
    """x (float) → Q → DQ → MaxPool(3, stride 2) → Q → DQ → y."""
    act = np.int8 if signed else np.uint8
    inits = [numpy_helper.from_array(np.array(0.04, np.float32), "s"),
             numpy_helper.from_array(np.array(9, act), "z"),
             numpy_helper.from_array(np.array(out_scale, np.float32), "s2"),
             numpy_helper.from_array(np.array(out_zero, act), "z2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_f"]),
             helper.make_node("MaxPool", ["x_f"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[pads] * 4),
             helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["p_q"]),
             helper.make_node("DequantizeLinear", ["p_q", "s2", "z2"], ["y"])]
    side = (11 + 2 * pads - 3) // 2 + 1
    graph = helper.make_graph(
        nodes, "qdq_max_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [2, 5, 11, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, side, side])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("signed", [False, True], ids=["uint8", "int8"])
def test_a_max_pool_between_a_qdq_pair_pools_the_8_bit_values(device: graphrt.Device,
                                                                signed: bool) -> None:
    """The pool reads the 8-bit data (no float copy, no dequantize before it), and its result
    is the float path's exactly, and ONNX Runtime's."""
    model = qdq_max_pool(signed=signed)
    bundle = graphrt.from_onnx(model)
    ops = _ops(bundle)
    assert "max_pool2d" in ops and ops.index("max_pool2d") < ops.index("dequantize")
    assert ops.count("quantize") == 1  # the input's; the pool's own went away
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 5, 11, 11)) * 3).astype(np.float32)
    x[0, 0, :2, :2] = -100.0  # saturates: the window holds the lowest value
    (got,) = bundle.create(device)(x=x)
    plain = graphrt.from_onnx(model, fuse=False).create("cpu")
    (want,) = plain(x=x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    (theirs,) = run_ort(model, {"x": x})
    np.testing.assert_array_equal(np.asarray(got), theirs)


@pytest.mark.parametrize("form", [dict(out_scale=0.05), dict(out_zero=10)],
                         ids=["scale", "zero"])
def test_a_max_pool_requantized_to_other_parameters_stays_float(form: dict[str, Any]) -> None:
    ops = _ops(graphrt.from_onnx(qdq_max_pool(**form)))
    assert ops.index("max_pool2d") > ops.index("dequantize")
    assert ops.count("quantize") == 2
