"""ONNX nn converters (conv, pools, norms, Gemm/MatMul/Einsum, softmax family, Flatten, Trilu)
against ONNX Runtime, and the N-d standard ops they added on cpu and sim."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import run_op
from ort_compat import for_ort, ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

import graphrt.onnx.backend as backend  # noqa: E402
from graphrt.onnx.builder import Builder  # noqa: E402
from graphrt.onnx.model import OnnxNode  # noqa: E402
from graphrt.onnx.registry import find_converter  # noqa: E402

RNG = np.random.default_rng(7)
DEVICES = ["CPU", "SIM"]


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def model(op: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 17,
          constants: dict[str, np.ndarray] | None = None, outputs: list[str] | None = None,
          **attrs: Any) -> Any:
    """One ``op`` node; ``inputs`` become graph inputs, ``constants`` initializers; an input
    named ``""`` is omitted."""
    constants = constants or {}
    names = list(inputs) + list(constants)
    outs = outputs or [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    inputs_info = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                 v.shape) for k, v in inputs.items() if k]
    initializers = [onnx.numpy_helper.from_array(v, k) for k, v in constants.items()]
    opsets = [helper.make_opsetid("", opset)]
    # The output types as ONNX infers them (a graph without outputs, inferred once).
    bare = helper.make_model(helper.make_graph([node], "g", inputs_info, [], initializers),
                             opset_imports=opsets)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(bare).graph.value_info}
    fallback = inputs_info[0]  # where ONNX infers nothing: the first input's type
    graph = helper.make_graph(
        [node], "g", inputs_info,
        [inferred[o] if o in inferred and inferred[o].type.tensor_type.HasField("shape")
         else helper.make_tensor_value_info(o, fallback.type.tensor_type.elem_type,
                                            inputs[next(iter(inputs))].shape)
         for o in outs if o], initializers)
    proto = helper.make_model(graph, opset_imports=opsets)
    proto.ir_version = ort_ir_version()
    return proto


def check(proto: Any, feeds: dict[str, np.ndarray], device: str = "CPU", tol: float = 1e-5
          ) -> list[np.ndarray]:
    """graphrt's outputs equal ONNX Runtime's; returns graphrt's."""
    feeds = {k: v for k, v in feeds.items() if k}
    session = ort.InferenceSession(for_ort(proto).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    actual = backend.run_model(proto, list(feeds.values()), device)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=tol,
                                   atol=tol)
    return list(actual)


def run_case(op: str, inputs: dict[str, np.ndarray], opset: int, device: str = "CPU",
             tol: float = 1e-5, n_outputs: int = 1, **attrs: Any) -> list[np.ndarray]:
    return check(model(op, inputs, n_outputs, opset, **attrs), inputs, device, tol)


# --------------------------------------------------------------------------------------------
# Conv, ConvTranspose

CONV_CASES = [
    ("1d", (2, 4, 9), (6, 2, 3), dict(group=2, strides=[2], pads=[1, 2], dilations=[2])),
    ("2d", (1, 3, 7, 8), (4, 3, 3, 2), dict(strides=[2, 1], pads=[1, 0, 2, 1])),
    ("2d_same_upper", (1, 3, 7, 8), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ("2d_same_lower", (1, 3, 7, 8), (4, 3, 2, 2), dict(auto_pad="SAME_LOWER", strides=[1, 3])),
    ("2d_valid", (2, 2, 6, 5), (3, 2, 3, 3), dict(auto_pad="VALID")),
    ("2d_depthwise", (1, 3, 6, 6), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
    ("3d", (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 0],
                                                  dilations=[2, 1, 1])),
]


@pytest.mark.parametrize("opset", [7, 11, 22])
@pytest.mark.parametrize(("name", "x", "w", "attrs"), CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_matches_onnxruntime(name: str, x: tuple[int, ...], w: tuple[int, ...],
                                  attrs: dict[str, Any], opset: int) -> None:
    inputs = {"x": rand(*x), "w": rand(*w), "b": rand(w[0])}
    run_case("Conv", inputs, opset, **attrs)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_float16_without_bias_and_on_sim(device: str) -> None:
    inputs = {"x": rand(1, 4, 9, 7, dtype="float16"), "w": rand(6, 2, 3, 3, dtype="float16")}
    run_case("Conv", inputs, 13, device, tol=2e-2, group=2, pads=[1, 1, 1, 1])
    inputs = {"x": rand(2, 3, 11), "w": rand(4, 3, 4), "b": rand(4)}
    run_case("Conv", inputs, 13, device, strides=[3], pads=[2, 1])


TRANSPOSE_CASES = [
    ("1d", (1, 2, 5), (2, 3, 3), dict(strides=[2], output_padding=[1], pads=[1, 0])),
    ("1d_group", (2, 4, 5), (4, 2, 3), dict(group=2, strides=[3], dilations=[2])),
    ("2d", (1, 2, 4, 3), (2, 3, 3, 2), dict(strides=[2, 3], pads=[1, 0, 0, 1])),
    ("2d_group_dilated", (1, 4, 3, 3), (4, 1, 2, 3), dict(group=4, dilations=[2, 2])),
    ("2d_output_padding", (1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2],
                                                           output_padding=[2, 1])),
    ("2d_output_shape", (1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2],
                                                         output_shape=[10, 8])),
    ("2d_output_shape_cropped", (1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[2, 2],
                                                                 output_shape=[6, 5])),
    ("2d_same_upper", (1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ("3d", (1, 2, 3, 4, 2), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1])),
]


@pytest.mark.parametrize("opset", [7, 11, 22])
@pytest.mark.parametrize(("name", "x", "w", "attrs"), TRANSPOSE_CASES,
                         ids=[c[0] for c in TRANSPOSE_CASES])
def test_conv_transpose_matches_onnxruntime(name: str, x: tuple[int, ...], w: tuple[int, ...],
                                            attrs: dict[str, Any], opset: int) -> None:
    inputs = {"x": rand(*x), "w": rand(*w), "b": rand(w[1] * attrs.get("group", 1))}
    run_case("ConvTranspose", inputs, opset, **attrs)


def test_conv_transpose_float16_on_sim() -> None:
    inputs = {"x": rand(1, 2, 4, 4, dtype="float16"), "w": rand(2, 3, 3, 3, dtype="float16")}
    run_case("ConvTranspose", inputs, 13, "SIM", tol=2e-2, strides=[2, 2], pads=[1, 1, 0, 0])


def test_conv_bad_auto_pad_names_the_node() -> None:
    proto = model("Conv", {"x": rand(1, 1, 4, 4), "w": rand(1, 1, 3, 3)}, auto_pad="FOO")
    with pytest.raises(ConversionError, match=r"node 0 .*Conv.*auto_pad 'FOO'"):
        backend.prepare(proto)


# --------------------------------------------------------------------------------------------
# Gemm, MatMul, Einsum


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize(("ta", "tb", "alpha", "beta", "c_shape"), [
    (0, 0, 1.0, 1.0, (3, 5)), (0, 1, 1.0, 1.0, (5,)), (1, 0, 0.5, 2.0, (3, 1)),
    (1, 1, 2.0, 0.25, ()), (0, 1, 1.0, 1.0, (1, 5)),
])
def test_gemm_matches_onnxruntime(ta: int, tb: int, alpha: float, beta: float,
                                  c_shape: tuple[int, ...], opset: int) -> None:
    a = rand(4, 3) if ta else rand(3, 4)
    b = rand(5, 4) if tb else rand(4, 5)
    run_case("Gemm", {"a": a, "b": b, "c": rand(*c_shape)}, opset, transA=ta, transB=tb,
             alpha=alpha, beta=beta)


@pytest.mark.parametrize("device", DEVICES)
def test_gemm_without_c_from_opset_11(device: str) -> None:
    run_case("Gemm", {"a": rand(3, 4), "b": rand(5, 4)}, 11, device, transB=1)
    run_case("Gemm", {"a": rand(4, 3), "b": rand(4, 5)}, 13, device, transA=1, alpha=3.0)


@pytest.mark.parametrize(("a", "b"), [
    ((3,), (3,)), ((3,), (3, 4)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)), ((3, 4), (4, 2)),
])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_matmul_matches_onnxruntime(a: tuple[int, ...], b: tuple[int, ...], dtype: str) -> None:
    if dtype.startswith("int"):
        x, y = (RNG.integers(-5, 5, s).astype(dtype) for s in (a, b))
    else:
        x, y = rand(*a, dtype=dtype), rand(*b, dtype=dtype)
    run_case("MatMul", {"a": x, "b": y}, 13, tol=2e-2 if dtype == "float16" else 1e-5)


def test_matmul_of_bfloat16_computes_in_float32() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = rand(2, 3, 4).astype(ml_dtypes.bfloat16), rand(4, 5).astype(ml_dtypes.bfloat16)
    (y,) = backend.run_model(model("MatMul", {"a": a, "b": b}, opset=13), [a, b])
    assert y.dtype == ml_dtypes.bfloat16
    expected = a.astype("float32") @ b.astype("float32")
    np.testing.assert_allclose(y.astype("float32"), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("...ii->...i", [(2, 3, 3)]), ("ij->", [(3, 4)]), ("i,i", [(5,), (5,)]),
    ("ij,jk", [(3, 4), (4, 2)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ji", [(2, 3)]), ("...j,j->...", [(2, 3, 4), (4,)]),
])
def test_einsum_matches_onnxruntime(equation: str, shapes: list[tuple[int, ...]]) -> None:
    inputs = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    run_case("Einsum", inputs, 12, equation=equation)


def test_einsum_of_integers_on_sim() -> None:
    inputs = {"a": RNG.integers(-4, 4, (2, 3)).astype("int64"),
              "b": RNG.integers(-4, 4, (3, 2)).astype("int64")}
    run_case("Einsum", inputs, 12, "SIM", equation="ij,jk->ki")


# --------------------------------------------------------------------------------------------
# Normalizations


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5), (1, 3, 2, 2, 2)])
def test_batch_norm_inference_matches_onnxruntime(shape: tuple[int, ...], opset: int) -> None:
    c = shape[1]
    inputs = {"x": rand(*shape), "s": rand(c), "b": rand(c), "m": rand(c),
              "v": np.abs(rand(c)) + 0.5}
    run_case("BatchNormalization", inputs, opset, epsilon=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_training_mode_outputs_running_stats(device: str) -> None:
    inputs = {"x": rand(3, 2, 4, 5), "s": rand(2), "b": rand(2), "m": rand(2),
              "v": np.abs(rand(2)) + 0.5}
    run_case("BatchNormalization", inputs, 15, device, n_outputs=3, training_mode=1,
             momentum=0.8)


def test_batch_norm_used_training_outputs_before_14_are_refused() -> None:
    inputs = {"x": rand(2, 3, 4), "s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3)}
    with pytest.raises(ConversionError, match=r"node 0 .*training-mode outputs"):
        backend.prepare(model("BatchNormalization", inputs, 5, opset=9))


@pytest.mark.parametrize("opset", [7, 22])
@pytest.mark.parametrize("device", DEVICES)
def test_instance_norm_matches_onnxruntime(opset: int, device: str) -> None:
    for shape in [(2, 3, 5), (1, 4, 3, 3), (2, 2, 2, 3, 2)]:
        c = shape[1]
        inputs = {"x": rand(*shape), "s": rand(c), "b": rand(c)}
        run_case("InstanceNormalization", inputs, opset, device, tol=1e-4, epsilon=1e-2)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_with_statistics_matches_onnxruntime(axis: int, device: str) -> None:
    x = rand(2, 3, 4)
    shape = x.shape[axis:]
    run_case("LayerNormalization", {"x": x, "s": rand(*shape), "b": rand(*shape)}, 17, device,
             tol=1e-4, n_outputs=3, axis=axis)
    run_case("LayerNormalization", {"x": x, "s": rand(*shape)}, 17, device, tol=1e-4,
             axis=axis, epsilon=0.1)


def test_layer_norm_float16_accumulates_in_float32() -> None:
    x = (rand(2, 64) * 10 + 100).astype("float16")
    run_case("LayerNormalization", {"x": x, "s": rand(64, dtype="float16"),
                                    "b": rand(64, dtype="float16")}, 17, tol=2e-2)


def _group_norm_reference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int,
                          eps: float) -> np.ndarray:
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps))
    shape = (c,) + (1,) * (x.ndim - 2)
    result: np.ndarray = y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)
    return result.astype(x.dtype)


def test_group_norm_18_scales_per_group() -> None:
    """ONNX's checker refuses the deprecated GroupNormalization-18 in models, so its converter
    runs on constants here (folded by the builder)."""
    x, scale, bias = rand(2, 6, 3, 2), rand(3), rand(3)
    b = Builder()
    names = tuple(b.constant(v) for v in (x, scale, bias))
    node = OnnxNode("GroupNormalization", "gn", names, ("y",),
                    {"num_groups": 3, "epsilon": 1e-3}, 18, 0)
    entry = find_converter(node)
    assert entry is not None
    (y,) = entry.fn(b, node)
    expected = _group_norm_reference(x, np.repeat(scale, 2), np.repeat(bias, 2), 3, 1e-3)
    np.testing.assert_allclose(b.constant_value(y), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_21_scales_per_channel(device: str) -> None:
    x, scale, bias = rand(2, 6, 3, 2), rand(6), rand(6)
    (y,) = backend.run_model(model("GroupNormalization", {"x": x, "s": scale, "b": bias},
                                   opset=21, num_groups=2), [x, scale, bias], device)
    np.testing.assert_allclose(y, _group_norm_reference(x, scale, bias, 2, 1e-5), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size: int) -> None:
    run_case("LRN", {"x": rand(2, 5, 3, 3)}, 13, size=size, alpha=0.01, beta=0.6, bias=2.0)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mean_variance_norm_matches_onnxruntime(axes: list[int] | None) -> None:
    attrs: dict[str, Any] = {} if axes is None else {"axes": axes}
    run_case("MeanVarianceNormalization", {"x": rand(2, 3, 4, 2)}, 13, tol=1e-4, **attrs)


@pytest.mark.parametrize(("p", "axis"), [(1, 0), (2, -1), (2, 1)])
def test_lp_norm_matches_onnxruntime(p: int, axis: int) -> None:
    run_case("LpNormalization", {"x": rand(3, 4, 2)}, 7, p=p, axis=axis)


def test_lp_norm_of_zeros_is_zero_and_bad_p_is_refused() -> None:
    x = np.zeros((2, 3), "float32")
    (y,) = backend.run_model(model("LpNormalization", {"x": x}, opset=13), [x])
    assert np.array_equal(y, x)
    with pytest.raises(ConversionError, match=r"node 0 .*p must be 1 or 2, given 3"):
        backend.prepare(model("LpNormalization", {"x": x}, opset=13, p=3))


@pytest.mark.skipif(onnx.defs.onnx_opset_version() < 23, reason="RMSNormalization is opset 23")
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_rms_norm_matches_a_reference(axis: int) -> None:
    x = rand(2, 3, 4)
    scale = rand(*x.shape[axis:])
    (y,) = backend.run_model(model("RMSNormalization", {"x": x, "s": scale}, opset=23,
                                   axis=axis, epsilon=1e-3), [x, scale])
    axes = tuple(range(axis % 3, 3))
    expected = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + 1e-3) * scale
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Pools

POOL_CASES = [
    ("1d", (2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("2d", (1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 2, 1])),
    ("2d_same_lower", (1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 1],
                                         auto_pad="SAME_LOWER")),
    ("2d_same_upper", (1, 2, 6, 5), dict(kernel_shape=[2, 3], strides=[2, 2],
                                         auto_pad="SAME_UPPER")),
    ("3d", (1, 2, 5, 4, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                 pads=[1, 0, 1, 0, 1, 1])),
]
CEIL_CASES = [
    ("2d_ceil", (1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 1, 1, 1],
                                   ceil_mode=1)),
    ("2d_dilated", (1, 2, 9, 8), dict(kernel_shape=[2, 3], dilations=[2, 2], strides=[1, 2],
                                      pads=[1, 2, 0, 1])),
    ("3d_dilated_ceil", (1, 1, 7, 6, 8), dict(kernel_shape=[2, 2, 3], dilations=[2, 3, 1],
                                              strides=[2, 2, 2], ceil_mode=1,
                                              pads=[1, 0, 1, 0, 1, 1])),
]


@pytest.mark.parametrize("opset", [7, 12])
@pytest.mark.parametrize(("name", "shape", "attrs"), POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_max_and_average_pool_match_onnxruntime(name: str, shape: tuple[int, ...],
                                                attrs: dict[str, Any], opset: int) -> None:
    x = rand(*shape)
    run_case("MaxPool", {"x": x}, opset, **attrs)
    run_case("AveragePool", {"x": x}, opset, **attrs)
    run_case("AveragePool", {"x": x}, opset, count_include_pad=1, **attrs)
    run_case("LpPool", {"x": x}, max(opset, 11), p=3, **attrs)


@pytest.mark.parametrize(("name", "shape", "attrs"), CEIL_CASES, ids=[c[0] for c in CEIL_CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_pools_with_ceil_mode_and_dilations_match_onnxruntime(
        name: str, shape: tuple[int, ...], attrs: dict[str, Any], device: str) -> None:
    x = rand(*shape)
    run_case("MaxPool", {"x": x}, 12, device, **attrs)
    run_case("AveragePool", {"x": x}, 19, device, **attrs)
    run_case("AveragePool", {"x": x}, 19, device, count_include_pad=1, **attrs)
    run_case("LpPool", {"x": x}, 18, device, p=2, **attrs)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("device", DEVICES)
def test_max_pool_indices_match_onnxruntime(storage_order: int, device: str) -> None:
    x = rand(2, 3, 6, 7)
    run_case("MaxPool", {"x": x}, 12, device, n_outputs=2, kernel_shape=[3, 2],
             strides=[2, 2], pads=[1, 0, 1, 1], storage_order=storage_order)
    run_case("MaxPool", {"x": rand(1, 2, 9)}, 8, device, n_outputs=2, kernel_shape=[3],
             strides=[2])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "float64"])
def test_max_pool_of_other_dtypes(dtype: str) -> None:
    x = RNG.integers(0, 100, (1, 2, 5, 5)).astype(dtype)
    run_case("MaxPool", {"x": x}, 12, kernel_shape=[2, 2], pads=[1, 1, 0, 0])
    if dtype == "float16":
        run_case("AveragePool", {"x": x}, 19, tol=2e-2, kernel_shape=[2, 3], strides=[2, 1])


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 4, 3), (1, 2, 3, 2, 4)])
@pytest.mark.parametrize("device", DEVICES)
def test_global_pools_match_onnxruntime(shape: tuple[int, ...], device: str) -> None:
    x = rand(*shape)
    run_case("GlobalAveragePool", {"x": x}, 7, device)
    run_case("GlobalMaxPool", {"x": x}, 7, device)
    run_case("GlobalLpPool", {"x": x}, 7, device, tol=1e-4, p=3)
    run_case("GlobalAveragePool", {"x": x.astype("float16")}, 22, device, tol=2e-2)


# --------------------------------------------------------------------------------------------
# Softmax, LogSoftmax, Hardmax, Flatten, Trilu


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("opset", "axis"), [(7, None), (7, 0), (7, -1), (11, -2), (11, 3),
                                             (13, None), (13, 1), (13, -3)])
def test_softmax_family_matches_onnxruntime(op: str, opset: int, axis: int | None) -> None:
    x = rand(2, 3, 4, 2)
    x[0, 0, 0, 0] = x[0, 0, 1, 0]  # a tie: Hardmax keeps the first
    attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
    run_case(op, {"x": x}, opset, **attrs)


def test_flatten_negative_axis_before_11_is_refused() -> None:
    proto = model("Flatten", {"x": rand(2, 3)}, opset=13, axis=-1)
    proto.opset_import[0].version = 9
    with pytest.raises(ConversionError, match=r"node 0 .*axis -1 is out of range"):
        backend.prepare(proto)


def test_softmax_axis_out_of_range_is_refused() -> None:
    proto = model("Softmax", {"x": rand(2, 3)}, opset=9, axis=1)
    proto.graph.node[0].attribute[0].i = 2
    with pytest.raises(ConversionError, match=r"node 0 .*axis 2 is out of range"):
        backend.prepare(proto)


@pytest.mark.parametrize(("opset", "axis"), [(7, 0), (9, 3), (11, -2), (13, 4), (21, -4)])
def test_flatten_matches_onnxruntime(opset: int, axis: int) -> None:
    run_case("Flatten", {"x": rand(2, 3, 4, 2)}, opset, axis=axis)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2, 7])
@pytest.mark.parametrize("device", DEVICES)
def test_trilu_matches_onnxruntime(upper: int, k: int | None, device: str) -> None:
    x = rand(2, 4, 5)
    constants = {} if k is None else {"k": np.array(k, "int64")}
    proto = model("Trilu", {"x": x}, opset=14, constants=constants, upper=upper)
    check(proto, {"x": x}, device)


# --------------------------------------------------------------------------------------------
# The new standard ops themselves, on cpu and sim

OP_DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]


def _ort(op: str, inputs: list[np.ndarray], n_outputs: int = 1, opset: int = 19,
         **attrs: Any) -> list[np.ndarray]:
    proto = model(op, {f"i{k}": v for k, v in enumerate(inputs)}, n_outputs, opset, **attrs)
    session = ort.InferenceSession(for_ort(proto).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, {f"i{k}": v for k, v in enumerate(inputs)}))


def _close(actual: list[np.ndarray], expected: list[np.ndarray], tol: float = 1e-5) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", OP_DEVICES)
def test_conv_and_conv_transpose_ops(device: graphrt.Device) -> None:
    x, w, b = rand(1, 4, 6, 5, 3), rand(2, 2, 3, 2, 2), rand(2)
    attrs = {"strides": [2, 1, 1], "padding": [1, 0, 1, 0, 1, 0], "dilation": [1, 2, 1],
             "groups": 2}
    _close(run_op("conv", [x, w, b], attrs, device),
           _ort("Conv", [x, w, b], strides=[2, 1, 1], pads=[1, 0, 1, 0, 1, 0],
                dilations=[1, 2, 1], group=2))
    wt = rand(4, 3, 2, 3, 2)
    attrs = {"strides": [2, 1, 3], "padding": [0, 1, 1, 1, 0, 0], "groups": 2,
             "output_padding": [1, 0, 2]}
    _close(run_op("conv_transpose", [x, wt], attrs, device),
           _ort("ConvTranspose", [x, wt], strides=[2, 1, 3], pads=[0, 1, 1, 1, 0, 0], group=2,
                output_padding=[1, 0, 2]))


@pytest.mark.parametrize("device", OP_DEVICES)
def test_pool_ops(device: graphrt.Device) -> None:
    x = rand(2, 3, 7, 6)
    window: dict[str, Any] = {"kernel": [3, 2], "strides": [2, 2], "padding": [1, 1, 1, 0],
                              "ceil_mode": True}
    onnx_window: dict[str, Any] = {"kernel_shape": [3, 2], "strides": [2, 2],
                                   "pads": [1, 1, 1, 0], "ceil_mode": 1}
    _close(run_op("max_pool", [x], {**window, "indices": True}, device),
           _ort("MaxPool", [x], 2, 12, **onnx_window))
    _close(run_op("avg_pool", [x], {**window, "count_include_pad": True}, device),
           _ort("AveragePool", [x], count_include_pad=1, **onnx_window))
    _close(run_op("lp_pool", [x], {**window, "p": 1.0}, device),
           _ort("LpPool", [x], p=1, **onnx_window))
    ints = RNG.integers(-100, 100, (1, 2, 5)).astype("int8")
    _close(run_op("max_pool", [ints], {"kernel": [2], "padding": [1, 1]}, device),
           _ort("MaxPool", [ints], 1, 12, kernel_shape=[2], pads=[1, 1]))


@pytest.mark.parametrize("device", OP_DEVICES)
def test_norm_ops(device: graphrt.Device) -> None:
    x, s, b = rand(2, 4, 3), rand(3), rand(3)
    _close(run_op("normalize", [x, s, b], {"axes": [-1], "stats": True}, device),
           _ort("LayerNormalization", [x, s, b], 3, 17), tol=1e-4)
    x4 = rand(2, 4, 3, 2)
    _close(run_op("group_norm", [x4, rand(4) * 0 + 1, np.zeros(4, "float32")],
                  {"num_groups": 4}, device),
           _ort("InstanceNormalization", [x4, np.ones(4, "float32"), np.zeros(4, "float32")]),
           tol=1e-4)
    _close(run_op("lrn", [x4], {"size": 3, "alpha": 0.1}, device),
           _ort("LRN", [x4], size=3, alpha=0.1))
    a, c = rand(2, 3, 4), rand(4, 5)
    _close(run_op("einsum", [a, c], {"equation": "bij,jk->bki"}, device),
           [np.einsum("bij,jk->bki", a, c)])


@pytest.mark.parametrize(("op", "inputs", "attrs", "match"), [
    ("conv", [(1, 3, 5, 5), (2, 2, 3, 3)], {}, "C/groups = 3"),
    ("conv", [(1, 2, 3), (2, 2, 5)], {}, "larger than the padded input"),
    ("conv", [(1, 2, 5, 5), (2, 2, 3, 3)], {"strides": [1]}, "strides needs 2 values"),
    ("conv_transpose", [(1, 2, 3), (3, 2, 3)], {}, "C = 2"),
    ("max_pool", [(1, 2, 5)], {"kernel": [2, 2]}, "needs 1 values"),
    ("avg_pool", [(1, 2, 5)], {"kernel": [2], "padding": [2, 0]}, "smaller than the kernel"),
    ("normalize", [(2, 3), (4,)], {"axes": [1]}, "must broadcast"),
    ("normalize", [(2, 3)], {"axes": [2]}, "out of range"),
    ("group_norm", [(2, 6, 3), (6,), (6,)], {"num_groups": 4}, "divisible by num_groups"),
    ("einsum", [(2, 3), (4, 5)], {"equation": "ij,jk->ik"}, "sizes 3 and 4"),
    ("einsum", [(2, 3)], {"equation": "ijk->i"}, "does not fit"),
])
def test_new_ops_refuse_bad_inputs(op: str, inputs: list[tuple[int, ...]],
                                   attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(OpError, match=match):
        run_op(op, [rand(*s) for s in inputs], attrs)
