"""ONNX converters: ``QuantizeLinear``, ``DequantizeLinear``, ``DynamicQuantizeLinear``.

What each opset adds: 10 per-tensor only; 13 the ``axis`` attribute (per-axis); 19 float16 and
bfloat16 scales, float8 types and ``saturate`` (float8 only); 21 ``block_size`` (blocked),
``output_dtype`` (QuantizeLinear), int16/uint16/int4/uint4; 23 ``precision``
(QuantizeLinear), ``output_dtype`` (DequantizeLinear), float4e2m1, float8e8m0 scales; 25
int2/uint2. graphrt has every one of these types (through ml_dtypes) except float6.

A float8 or float4 zero point only names the output type ("usually not used", says the spec):
ONNX's reference ignores a float8 one's value (and refuses one that is not 0 where it
dequantizes), adds a float4 one where it quantizes but ignores it where it dequantizes. So that
graphrt never silently departs from it, a constant one that is not 0 is refused here.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..model import OnnxNode, dtype_name
from ..registry import ConvertFn, converter

_QUANT_TYPES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2",
                "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float4_e2m1fn")
"""Quantized types graphrt has (ONNX also has float6 ones)."""

_FLOAT_QUANT = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float4_e2m1fn")


def _onnx_type(n: OnnxNode, key: str, elem_type: int) -> str:
    """The graphrt dtype of ONNX element type ``elem_type`` given by attribute ``key``; a type
    graphrt lacks (float8, int4, ...) is a ConversionError naming it and the node."""
    return dtype_name(elem_type, f"{n.label}: attribute {key!r}")


def _axis(n: OnnxNode, per_axis: bool) -> int:
    return int(n.attr("axis", 1)) if per_axis else 1


def _block_size(n: OnnxNode, blocked: bool) -> int:
    if not blocked:
        return 0
    size = int(n.attr("block_size", 0))
    if size < 0:
        raise n.fail(f"block_size must be >= 0, given {size}")
    return size


def _check_float_zero(b: Builder, n: OnnxNode, zero: str | None) -> None:
    """Refuse a constant float8 or float4 zero point that is not 0 (see the module's
    docstring)."""
    if zero is None or b.dtype(zero) not in _FLOAT_QUANT or not b.is_constant(zero):
        return
    values = np.asarray(b.constant_value(zero)).astype(np.float32)
    if np.any(values != 0):
        raise n.fail(f"a {b.dtype(zero)} zero point must be 0 (float8 and float4 quantization "
                     "use none), given one that is not")


def _check_scale(b: Builder, n: OnnxNode, per_axis: bool) -> None:
    scale = n.inputs[1]
    size = 1
    for d in b.shape(scale):
        size *= d
    if not per_axis and size != 1:
        raise n.fail(f"{n.op_type}-{n.opset} takes a per-tensor scale (one element), given "
                     f"shape {list(b.shape(scale))}; per-axis scales need opset 13")


def _quantize(per_axis: bool, blocked: bool, out_dtype: bool, precision: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        _check_scale(b, n, per_axis)
        zero = n.input(2)
        dtype = "uint8"  # unless the zero point or output_dtype says otherwise
        if out_dtype and n.attr("output_dtype", 0):
            dtype = _onnx_type(n, "output_dtype", int(n.attr("output_dtype")))
            if zero is not None and b.dtype(zero) != dtype:
                raise n.fail(f"output_dtype {dtype} differs from the zero point's type "
                             f"{b.dtype(zero)}")
        if zero is not None:
            dtype = b.dtype(zero)
        if dtype not in _QUANT_TYPES:
            raise n.fail(f"quantizing to {dtype} is not supported (graphrt quantizes to "
                         f"{', '.join(_QUANT_TYPES)})")
        _check_float_zero(b, n, zero)
        attrs: dict[str, object] = {"dtype": dtype, "axis": _axis(n, per_axis),
                                    "block_size": _block_size(n, blocked),
                                    "saturate": bool(int(n.attr("saturate", 1)))}
        if precision and n.attr("precision", 0):
            attrs["precision"] = _onnx_type(n, "precision", int(n.attr("precision")))
        inputs = [n.inputs[0], n.inputs[1]] + ([zero] if zero is not None else [])
        return b.op("quantize", inputs, attrs)

    return convert


def _dequantize(per_axis: bool, blocked: bool, out_dtype: bool, scale_dtype: bool
                ) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        _check_scale(b, n, per_axis)
        scale = n.inputs[1]
        dtype = b.dtype(scale) if scale_dtype else "float32"
        if out_dtype and n.attr("output_dtype", 0):
            dtype = _onnx_type(n, "output_dtype", int(n.attr("output_dtype")))
        if not scale_dtype and b.dtype(scale) != "float32":
            raise n.fail(f"{n.op_type}-{n.opset} takes a float32 scale, given "
                         f"{b.dtype(scale)}")
        if dtype == "float8_e8m0fnu":
            raise n.fail("a float8e8m0 scale needs output_dtype (float, float16 or bfloat16): "
                         "the output cannot be float8e8m0")
        zero = n.input(2)
        _check_float_zero(b, n, zero)
        inputs = [n.inputs[0], scale] + ([zero] if zero is not None else [])
        return b.op("dequantize", inputs, {"dtype": dtype, "axis": _axis(n, per_axis),
                                           "block_size": _block_size(n, blocked)})

    return convert


converter("QuantizeLinear", since=10, until=12)(_quantize(False, False, False, False))
converter("QuantizeLinear", since=13, until=20)(_quantize(True, False, False, False))
converter("QuantizeLinear", since=21, until=22)(_quantize(True, True, True, False))
converter("QuantizeLinear", since=23)(_quantize(True, True, True, True))

converter("DequantizeLinear", since=10, until=12)(_dequantize(False, False, False, False))
converter("DequantizeLinear", since=13, until=18)(_dequantize(True, False, False, False))
converter("DequantizeLinear", since=19, until=20)(_dequantize(True, False, False, True))
converter("DequantizeLinear", since=21, until=22)(_dequantize(True, True, False, True))
converter("DequantizeLinear", since=23)(_dequantize(True, True, True, True))


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(b: Builder, n: OnnxNode) -> list[str]:
    """uint8 data, float32 scale and uint8 zero point from the data's range."""
    return b.op("dynamic_quantize", [n.inputs[0]], num_outputs=3)
