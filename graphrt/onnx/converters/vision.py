"""ONNX converters: RoiAlign and DeformConv.

``RoiAlign`` (opsets 10, 16, 22) becomes the standard op ``roi_align``: opset 10 has no
``coordinate_transformation_mode`` and samples as ``output_half_pixel`` does (no half-pixel
shift, regions at least 1x1); from 16 the default is ``half_pixel``; 22 adds bfloat16. The
output's shape follows the inputs' shapes (``num_rois`` is the rois' first axis).

``DeformConv`` (opsets 19, 22) becomes ``deform_conv`` over any number of spatial axes; 22 adds
bfloat16. ``kernel_shape``, when given, must be the weight's.

Example:
    >>> import numpy as np, graphrt
    >>> from onnx import TensorProto, helper
    >>> node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=2,
    ...                         output_width=2, sampling_ratio=2)
    >>> graph = helper.make_graph([node], "g", [
    ...     helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
    ...     helper.make_tensor_value_info("rois", TensorProto.FLOAT, [3, 4]),
    ...     helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1, 2, 2])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    >>> module = graphrt.from_onnx(model).create("cpu")
    >>> x = np.ones((1, 1, 4, 4), np.float32)
    >>> rois = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [0, 0, 4, 4]], np.float32)
    >>> module(x=x, rois=rois, idx=np.zeros(3, np.int64))[0].shape
    (3, 1, 2, 2)
"""

from __future__ import annotations

from typing import Any

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter

_FLOATS = ("float16", "float32", "float64")


def _ints(n: OnnxNode, key: str, count: int, low: int) -> list[int] | None:
    """Attribute ``key``: ``count`` ints >= ``low``, or None when it is absent."""
    values = n.attr(key, None)
    if values is None:
        return None
    values = [int(v) for v in values]
    if len(values) != count:
        raise n.fail(f"{key} must have {count} values (one per spatial axis"
                     f"{', begins then ends' if key == 'pads' else ''}), given {values}")
    if any(v < low for v in values):
        raise n.fail(f"{key} must be >= {low}, given {values}")
    return values


def _dtype(b: Builder, n: OnnxNode, x: str, bfloat16: bool) -> str:
    dtype = b.dtype(x)
    allowed = (*_FLOATS, "bfloat16") if bfloat16 else _FLOATS
    if dtype not in allowed:
        since = "" if bfloat16 else " (bfloat16 from opset 22)"
        raise n.fail(f"X must be one of {', '.join(allowed)}{since}, given {dtype}")
    return dtype


# --------------------------------------------------------------------------------------------
# RoiAlign
# --------------------------------------------------------------------------------------------

_COORDINATE_MODES = {"half_pixel": True, "output_half_pixel": False}


def _roi_align(b: Builder, n: OnnxNode, modes: bool, bfloat16: bool) -> list[str]:
    x, rois, indices = n.inputs[0], n.inputs[1], n.inputs[2]
    dtype = _dtype(b, n, x, bfloat16)
    if modes:
        given = n.attr("coordinate_transformation_mode", "half_pixel")
        if str(given).lower() not in _COORDINATE_MODES:
            raise n.fail("coordinate_transformation_mode must be 'half_pixel' or "
                         f"'output_half_pixel', given {given!r}")
        half_pixel = _COORDINATE_MODES[str(given).lower()]
    else:
        if "coordinate_transformation_mode" in n.attrs:
            raise n.fail("coordinate_transformation_mode is an attribute of RoiAlign from "
                         f"opset 16; this model imports opset {n.opset}")
        half_pixel = False
    mode = str(n.attr("mode", "avg"))
    if mode.lower() not in ("avg", "max"):
        raise n.fail(f"mode must be 'avg' or 'max', given {mode!r}")
    height, width = int(n.attr("output_height", 1)), int(n.attr("output_width", 1))
    if height < 1 or width < 1:
        raise n.fail(f"output_height and output_width must be >= 1, given {height} and "
                     f"{width}")
    ratio = int(n.attr("sampling_ratio", 0))
    if ratio < 0:
        raise n.fail(f"sampling_ratio must be >= 0, given {ratio}")
    if len(b.shape(x)) != 4:
        raise n.fail(f"X must be 4-D ([N, C, H, W]), given {list(b.shape(x))}")
    if b.dtype(rois) != dtype or len(b.shape(rois)) != 2 or b.shape(rois)[1] != 4:
        raise n.fail(f"rois must be {dtype}[num_rois, 4], given {b.dtype(rois)}"
                     f"{list(b.shape(rois))}")
    count = b.shape(rois)[0]
    if b.dtype(indices) != "int64" or b.shape(indices) != (count,):
        raise n.fail(f"batch_indices must be int64[{count}] (one per region), given "
                     f"{b.dtype(indices)}{list(b.shape(indices))}")
    return b.op("roi_align", [x, rois, indices], {
        "mode": mode.lower(), "output_height": height, "output_width": width,
        "sampling_ratio": ratio, "spatial_scale": float(n.attr("spatial_scale", 1.0)),
        "half_pixel": half_pixel})


@converter("RoiAlign", since=10, until=15)
def roi_align_10(b: Builder, n: OnnxNode) -> list[str]:
    """RoiAlign-10: no coordinate_transformation_mode (no half-pixel shift)."""
    return _roi_align(b, n, modes=False, bfloat16=False)


@converter("RoiAlign", since=16, until=21)
def roi_align_16(b: Builder, n: OnnxNode) -> list[str]:
    """RoiAlign-16: coordinate_transformation_mode, ``half_pixel`` by default."""
    return _roi_align(b, n, modes=True, bfloat16=False)


@converter("RoiAlign", since=22)
def roi_align_22(b: Builder, n: OnnxNode) -> list[str]:
    """RoiAlign-22: adds bfloat16."""
    return _roi_align(b, n, modes=True, bfloat16=True)


# --------------------------------------------------------------------------------------------
# DeformConv
# --------------------------------------------------------------------------------------------


def _deform_conv(b: Builder, n: OnnxNode, bfloat16: bool) -> list[str]:
    x, w, offset = n.inputs[0], n.inputs[1], n.inputs[2]
    bias, mask = n.input(3), n.input(4)
    dtype = _dtype(b, n, x, bfloat16)
    rank = len(b.shape(x))
    if rank < 3:
        raise n.fail(f"X must be [N, C, *spatial] with at least one spatial axis, given "
                     f"{list(b.shape(x))}")
    for name, value in (("W", w), ("offset", offset), ("B", bias), ("mask", mask)):
        if value is not None and b.dtype(value) != dtype:
            raise n.fail(f"{name} must have X's dtype {dtype}, given {b.dtype(value)}")
    if len(b.shape(w)) != rank:
        raise n.fail(f"W must be {rank}-D ([oC, C/group, *kernel]) like X, given "
                     f"{list(b.shape(w))}")
    dims = rank - 2
    kernel = _ints(n, "kernel_shape", dims, 1)
    if kernel is not None and tuple(kernel) != b.shape(w)[2:]:
        raise n.fail(f"kernel_shape {kernel} differs from W's kernel {list(b.shape(w)[2:])}")
    group, offset_group = int(n.attr("group", 1)), int(n.attr("offset_group", 1))
    if group < 1 or offset_group < 1:
        raise n.fail(f"group and offset_group must be >= 1, given {group} and {offset_group}")
    attrs: dict[str, Any] = {"group": group, "offset_group": offset_group,
                             "bias": bias is not None, "mask": mask is not None}
    for key, count, low in (("strides", dims, 1), ("dilations", dims, 1),
                            ("pads", 2 * dims, 0)):
        values = _ints(n, key, count, low)
        if values is not None:
            attrs[key] = values
    inputs = [x, w, offset] + [v for v in (bias, mask) if v is not None]
    return b.op("deform_conv", inputs, attrs)


@converter("DeformConv", since=19, until=21)
def deform_conv_19(b: Builder, n: OnnxNode) -> list[str]:
    """DeformConv-19: float16, float and double."""
    return _deform_conv(b, n, bfloat16=False)


@converter("DeformConv", since=22)
def deform_conv_22(b: Builder, n: OnnxNode) -> list[str]:
    """DeformConv-22: adds bfloat16."""
    return _deform_conv(b, n, bfloat16=True)
