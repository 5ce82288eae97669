"""ONNX converters: ``ConvInteger``, ``MatMulInteger``, ``QLinearConv``, ``QLinearMatMul``
(opset 10; QLinearMatMul-21 adds float16 and bfloat16 scales and float8 types, which graphrt
lacks and refuses by name).

Each becomes one integer op (:mod:`graphrt.ops.integer_linear`): 8-bit operands, exact int32
sums, and for the QLinear ops requantization as ONNX's reference does it. Convolution
attributes (``auto_pad``, ``pads``, ``strides``, ``dilations``, ``group``, ``kernel_shape``)
are read as ``Conv``'s. An omitted (optional) zero point of ConvInteger and MatMulInteger is
0; the QLinear ops' are required.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper, numpy_helper
    >>> import graphrt
    >>> node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    >>> graph = helper.make_graph(
    ...     [node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 2])],
    ...     [numpy_helper.from_array(np.array([[1, 4], [2, 5], [3, 6]], np.uint8), "b"),
    ...      numpy_helper.from_array(np.array(12, np.uint8), "az")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    >>> module = graphrt.from_onnx(model).create(graphrt.cpu(0))
    >>> module(a=np.array([[11, 7, 3], [10, 6, 2]], np.uint8))[0]
    array([[-38, -83],
           [-44, -98]], dtype=int32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import ConvertFn, converter
from .nn import _auto_pads, _conv_window

_INTS = ("int8", "uint8")


def _required(n: OnnxNode, index: int, what: str) -> str:
    name = n.input(index)
    if name is None:
        raise n.fail(f"input {index} ({what}) is required")
    return name


def _integer(b: Builder, n: OnnxNode, name: str, what: str) -> str:
    dtype = b.dtype(name)
    if dtype not in _INTS:
        raise n.fail(f"{what} must be int8 or uint8, given {dtype}")
    return dtype


def _zero(b: Builder, n: OnnxNode, index: int, dtype: str, what: str,
          required: bool = False) -> str:
    """Zero point input ``index`` (of ``dtype``), or a constant 0 where an optional one is
    omitted."""
    name = n.input(index)
    if name is None:
        if required:
            raise n.fail(f"input {index} ({what}) is required")
        return b.constant(np.zeros((), dtype))
    if b.dtype(name) != dtype:
        raise n.fail(f"{what} must be {dtype}, given {b.dtype(name)}")
    return name


def _scales(b: Builder, n: OnnxNode, names: list[str], allowed: tuple[str, ...]) -> None:
    dtypes = [b.dtype(name) for name in names]
    if dtypes[0] not in allowed or any(d != dtypes[0] for d in dtypes):
        raise n.fail(f"{n.op_type}-{n.opset} takes scales of one type among "
                     f"{', '.join(allowed)}, given {', '.join(dtypes)}")


def _conv_attrs(b: Builder, n: OnnxNode, x: str, w: str) -> dict[str, Any]:
    """``conv``'s attributes from a QLinearConv/ConvInteger node (data ``x``, weight ``w``)."""
    space, kernel, strides, dilations, group = _conv_window(b, n, x, w)
    pads = _auto_pads(n, space, kernel, strides, dilations)
    return {"strides": strides, "padding": pads, "dilation": dilations, "groups": group}


@converter("ConvInteger", since=10)
def conv_integer(b: Builder, n: OnnxNode) -> list[str]:
    """ConvInteger: int32 output; zero points optional (per tensor for x, per tensor or per
    output channel for w)."""
    x, w = _required(n, 0, "x"), _required(n, 1, "w")
    x_type, w_type = _integer(b, n, x, "x"), _integer(b, n, w, "w")
    attrs = _conv_attrs(b, n, x, w)
    zeros = [_zero(b, n, 2, x_type, "x_zero_point"), _zero(b, n, 3, w_type, "w_zero_point")]
    return b.op("conv_integer", [x, w, *zeros], attrs)


@converter("QLinearConv", since=10)
def qlinear_conv(b: Builder, n: OnnxNode) -> list[str]:
    """QLinearConv: float32 scales; the optional bias is int32 (scale ``x_scale *
    w_scale``, zero point 0)."""
    x, w = _required(n, 0, "x"), _required(n, 3, "w")
    scales = [_required(n, 1, "x_scale"), _required(n, 4, "w_scale"),
              _required(n, 6, "y_scale")]
    x_type, w_type = _integer(b, n, x, "x"), _integer(b, n, w, "w")
    _scales(b, n, scales, ("float32",))
    y_zero = _required(n, 7, "y_zero_point")
    _integer(b, n, y_zero, "y_zero_point")
    attrs = _conv_attrs(b, n, x, w)
    inputs = [x, scales[0], _zero(b, n, 2, x_type, "x_zero_point", True), w, scales[1],
              _zero(b, n, 5, w_type, "w_zero_point", True), scales[2], y_zero]
    bias = n.input(8)
    if bias is not None:
        if b.dtype(bias) != "int32":
            raise n.fail(f"the bias B must be int32, given {b.dtype(bias)}")
        inputs.append(bias)
    return b.op("qlinear_conv", inputs, attrs)


@converter("MatMulInteger", since=10)
def matmul_integer(b: Builder, n: OnnxNode) -> list[str]:
    """MatMulInteger: numpy matmul of the differences, int32 output."""
    a, w = _required(n, 0, "A"), _required(n, 1, "B")
    a_type, w_type = _integer(b, n, a, "A"), _integer(b, n, w, "B")
    zeros = [_zero(b, n, 2, a_type, "a_zero_point"), _zero(b, n, 3, w_type, "b_zero_point")]
    return b.op("matmul_integer", [a, w, *zeros])


def _qlinear_matmul(allowed: tuple[str, ...]) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        a, w = _required(n, 0, "a"), _required(n, 3, "b")
        scales = [_required(n, 1, "a_scale"), _required(n, 4, "b_scale"),
                  _required(n, 6, "y_scale")]
        a_type, w_type = _integer(b, n, a, "a"), _integer(b, n, w, "b")
        _scales(b, n, scales, allowed)
        y_zero = _required(n, 7, "y_zero_point")
        _integer(b, n, y_zero, "y_zero_point")
        inputs = [a, scales[0], _zero(b, n, 2, a_type, "a_zero_point", True), w, scales[1],
                  _zero(b, n, 5, w_type, "b_zero_point", True), scales[2], y_zero]
        return b.op("qlinear_matmul", inputs)

    return convert


converter("QLinearMatMul", since=10, until=20)(_qlinear_matmul(("float32",)))
converter("QLinearMatMul", since=21)(_qlinear_matmul(("float32", "float16", "bfloat16")))
