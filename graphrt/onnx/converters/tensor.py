"""ONNX converters: tensor and shape ops.

Shapes are concrete while converting, so ``Shape``, ``Size``, ``Range``, ``Constant``,
``ConstantOfShape`` and ``EyeLike``'s shape become constants, and every input that decides an
output shape (Reshape's shape, Slice's starts, Pad's pads, axes, repeats, k, ...) is read with
:func:`_value` (the ONNX backend freezes the graph input it is computed from). Attributes that
became inputs are read per opset: each converter is registered for the opset range whose
semantics it implements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from ...ops import OpError, broadcast
from ...schema.dtypes import parse_dtype
from ...schema.symbolic import parse_dim
from ..builder import Builder, ConvertedStep, TensorType
from ..model import OnnxNode, dtype_name
from ..registry import ConvertFn, converter
from ..symint import SymInt, has_symbols, sym_max, sym_min
from .common import const_floats, const_ints

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------
# helpers


def _size(shape: Sequence[int]) -> int:
    # exact (declared dims may overflow int64), and a symbolic size keeps its expression
    return math.prod(d if isinstance(d, int) else int(d) for d in shape)


def _axis(n: OnnxNode, axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative axis, or a ConversionError."""
    if not -ndim <= axis < ndim:
        raise n.fail(f"{what} {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _axes(n: OnnxNode, axes: Sequence[int], ndim: int) -> list[int]:
    """Distinct axes in ``[-ndim, ndim)`` as non-negative axes."""
    result = [_axis(n, a, ndim) for a in axes]
    if len(set(result)) != len(result):
        raise n.fail(f"axes {list(axes)} name an axis more than once")
    return result


def _flag(n: OnnxNode, key: str, default: int) -> bool:
    value = n.attr(key, default)
    if value not in (0, 1):
        raise n.fail(f"{key} must be 0 or 1, given {value}")
    return bool(value)


def _reshape_to(b: Builder, x: str, shape: Sequence[int]) -> str:
    """``x`` with exactly ``shape`` (same number of elements).

    The standard ``reshape`` reads a 0 in its target as "copy the input's dim"; a zero-size
    result has no data to move, so it becomes an empty constant instead.
    """
    shape = [d if isinstance(d, int) else int(d) for d in shape]
    if _size(shape) == 0:
        return b.constant(np.empty(shape, b.dtype(x)))
    return b.op("reshape", [x], {"newshape": shape})[0]


def _input_or_attr_ints(b: Builder, n: OnnxNode, index: int, what: str) -> list[int] | None:
    name = n.input(index)
    return None if name is None else const_ints(b, name, what)


def _since(ranges: Sequence[tuple[int, int | None]], op_type: str,
           make: Callable[[int], ConvertFn]) -> None:
    """Register ``make(since)`` for each ``(since, until)`` range of ``op_type``."""
    for since, until in ranges:
        converter(op_type, since=since, until=until)(make(since))


# ---------------------------------------------------------------------------------------------
# Reshape, Transpose, Squeeze, Unsqueeze, Expand, Tile


def _onnx_reshape(n: OnnxNode, src: tuple[int, ...], spec: list[int],
                  allowzero: bool) -> list[int]:
    shape: list[int] = []
    infer_at = None
    for i, dim in enumerate(spec):
        if dim == 0 and not allowzero:
            if i >= len(src):
                raise n.fail(f"shape {spec} copies dim {i} (0), but the input has only "
                             f"{len(src)} dims (shape {list(src)})")
            shape.append(src[i])
        elif dim == -1:
            if infer_at is not None:
                raise n.fail(f"shape {spec} has more than one -1")
            infer_at = i
            shape.append(1)
        elif dim < -1:
            raise n.fail(f"shape {spec} has {dim}; expected dims >= 0 or a single -1")
        else:
            shape.append(dim)
    total = _size(src)
    if infer_at is not None:
        known = _size(shape)
        if known == 0 or total % known:
            raise n.fail(f"cannot infer the -1 of shape {spec} for an input of shape "
                         f"{list(src)} ({total} elements)")
        shape[infer_at] = total // known
    if _size(shape) != total:
        raise n.fail(f"shape {spec} gives {shape} ({_size(shape)} elements); the input has "
                     f"shape {list(src)} ({total} elements)")
    return shape


def _reshape(allowzero_attr: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        spec = const_ints(b, n.inputs[1], "the target shape")
        allowzero = _flag(n, "allowzero", 0) if allowzero_attr else False
        if allowzero and 0 in spec and -1 in spec:
            raise n.fail(f"shape {spec} has both 0 and -1, which allowzero=1 forbids")
        shape = _onnx_reshape(n, b.shape(x), spec, allowzero)
        if _size(shape) == 0:
            return [_reshape_to(b, x, shape)]
        # keep ONNX's copy (0) and infer (-1) markers where they agree with the result, so a
        # symbolic dimension stays symbolic
        newshape = [d if d in (0, -1) and not allowzero else s for d, s in zip(spec, shape,
                                                                             strict=True)]
        return b.op("reshape", [x], {"newshape": newshape})

    return convert


converter("Reshape", until=13)(_reshape(False))
converter("Reshape", since=14)(_reshape(True))


@converter("Transpose")
def _transpose(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    ndim = len(b.shape(x))
    perm = n.attr("perm", None)
    if perm is not None and sorted(int(p) for p in perm) != list(range(ndim)):
        raise n.fail(f"perm {list(perm)} is not a permutation of the {ndim} axes")
    return b.op("transpose", [x], {"axes": None if perm is None else [int(p) for p in perm]})


def _squeeze(axes_input: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        axes = (_input_or_attr_ints(b, n, 1, "axes") if axes_input
                else n.attr("axes", None))
        if axes is None:
            return b.op("squeeze", [x], {"axis": None})
        axes = _axes(n, [int(a) for a in axes], len(shape))
        for a in axes:
            if shape[a] != 1:
                raise n.fail(f"axis {a} has size {shape[a]}, expected 1 (input shape "
                             f"{list(shape)})")
        return b.op("squeeze", [x], {"axis": axes})

    return convert


converter("Squeeze", until=12)(_squeeze(False))
converter("Squeeze", since=13)(_squeeze(True))


def _unsqueeze(axes_input: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        if axes_input:
            axes = const_ints(b, n.inputs[1], "axes")
        else:
            axes = [int(a) for a in n.attr("axes")]
        rank = len(shape) + len(axes)
        inserted = set(_axes(n, axes, rank))
        rest = iter(shape)
        out = [1 if i in inserted else next(rest) for i in range(rank)]
        if len(axes) == 1:
            return b.op("expand_dims", [x], {"axis": next(iter(inserted))})
        return [_reshape_to(b, x, out)]

    return convert


converter("Unsqueeze", until=12)(_unsqueeze(False))
converter("Unsqueeze", since=13)(_unsqueeze(True))


@converter("Expand", since=8)
def _expand(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    target = const_ints(b, n.inputs[1], "the target shape")
    try:
        shape = list(broadcast(b.shape(x), tuple(target)))
    except OpError:
        raise n.fail(f"input shape {list(b.shape(x))} and shape {target} do not "
                     "broadcast") from None
    return b.op("broadcast_to", [x], {"shape": shape})


@converter("Tile")
def _tile(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    reps = const_ints(b, n.inputs[1], "repeats")
    if len(reps) != len(b.shape(x)) or any(r < 0 for r in reps):
        raise n.fail(f"repeats {reps} must be one non-negative value per axis of the "
                     f"{len(b.shape(x))}-D input")
    return b.op("tile", [x], {"reps": reps})


# ---------------------------------------------------------------------------------------------
# Concat, Split, Slice


@converter("Concat")
def _concat(b: Builder, n: OnnxNode) -> list[str]:
    inputs = [name for name in n.inputs if name]
    if not inputs:
        raise n.fail("Concat needs at least one input")
    ndim = len(b.shape(inputs[0]))
    if ndim == 0:
        raise n.fail("Concat of 0-D tensors is not defined")
    axis = _axis(n, int(n.attr("axis")), ndim)
    return b.op("concatenate", inputs, {"axis": axis})


def _split_points(n: OnnxNode, dim: int, sizes: list[int]) -> list[int]:
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise n.fail(f"split sizes {sizes} must be non-negative and add up to {dim} (the "
                     "split axis)")
    if len(sizes) != len(n.outputs):
        raise n.fail(f"split sizes {sizes} give {len(sizes)} outputs, the node has "
                     f"{len(n.outputs)}")
    return [int(v) for v in np.cumsum(sizes[:-1])]


def _equal_split(n: OnnxNode, dim: int, parts: int) -> list[int]:
    if parts < 1 or dim % parts:
        raise n.fail(f"cannot split an axis of size {dim} into {parts} equal parts")
    return [dim // parts] * parts


def _split(since: int) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        if not shape:
            raise n.fail("a 0-D input cannot be split")
        axis = _axis(n, int(n.attr("axis", 0)), len(shape))
        dim = shape[axis]
        sizes = (_input_or_attr_ints(b, n, 1, "split") if since >= 13
                 else [int(s) for s in n.attr("split", [])] or None)
        count = n.attr("num_outputs", None) if since >= 18 else None
        if sizes is not None and count is not None:
            raise n.fail("give either the split input or num_outputs, not both")
        if count is not None:
            if count < 1 or count != len(n.outputs):
                raise n.fail(f"num_outputs {count} must be >= 1 and match the node's "
                             f"{len(n.outputs)} outputs")
            chunk = -(-dim // count)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
        elif sizes is None:
            sizes = _equal_split(n, dim, len(n.outputs))
        points = _split_points(n, dim, sizes)
        return b.op("split", [x], {"indices_or_sections": points, "axis": axis})

    return convert


_since([(7, 12), (13, 17), (18, None)], "Split", _split)


def _slice_args(n: OnnxNode, shape: tuple[int, ...], starts: list[int], ends: list[int],
                axes: list[int] | None, steps: list[int] | None) -> dict[str, Any]:
    """``strided_slice`` attributes with ONNX's clamping (Python's slice semantics, except
    that a start before the beginning with a negative step clamps to the first element)."""
    k = len(starts)
    if len(ends) != k:
        raise n.fail(f"starts {starts} and ends {ends} must have the same length")
    axes = list(range(k)) if axes is None else _axes(n, axes, len(shape))
    if len(axes) != k:
        raise n.fail(f"axes {axes} must have one value per start ({k})")
    steps = [1] * k if steps is None else steps
    if len(steps) != k:
        raise n.fail(f"steps {steps} must have one value per start ({k})")
    if k > len(shape):
        raise n.fail(f"{k} starts for a {len(shape)}-D input")
    begin = []
    for start, step, axis in zip(starts, steps, axes, strict=True):
        if step == 0:
            raise n.fail(f"step of axis {axis} is 0")
        if step < 0 and start < -shape[axis]:
            start = 0
        begin.append(start)
    return {"begin": begin, "end": ends, "strides": steps, "axes": axes}


def _range_of(b: Builder, value: int) -> tuple[int, int] | None:
    """The values a traced size takes over its variables' ranges, or None if unknown."""
    if not isinstance(value, SymInt):
        return int(value), int(value)
    try:
        return parse_dim(value.text).bounds(b.var_ranges)
    except (KeyError, ValueError):
        return None


def _clamp(b: Builder, value: int, low: int, high: int) -> int:
    """``value`` clamped to ``[low, high]``, traced; a bound the value's range already
    respects is left out (``table[:seq]`` of a table as long as seq's bound is ``seq``)."""
    if not isinstance(value, SymInt) and not isinstance(high, SymInt):
        return min(max(value, low), high)
    if not isinstance(value, SymInt) and value >= high:
        return high  # a plain bound past a traced size, which is at its largest now
    if not isinstance(value, SymInt) and value <= low:
        return low
    span, top = _range_of(b, value), _range_of(b, high)
    if span is None or span[0] < low:
        value = sym_max(value, low)
    if span is None or top is None or span[1] > top[0]:
        value = sym_min(value, high)
    return value


def _traced_slice(b: Builder, n: OnnxNode, x: str, args: dict[str, Any]) -> list[str]:
    """``strided_slice`` of ``x``, its output sizes traced through ONNX's clamping (the op's
    shape function clamps with plain ints: ``x[:300]`` of ``count`` rows is
    ``min(300, count)``)."""
    (out,) = b.op("strided_slice", [x], args)
    shape = list(b.shape(x))
    if not has_symbols(shape) and not has_symbols(args["begin"]) and not has_symbols(
            args["end"]):
        return [out]
    for start, end, step, axis in zip(args["begin"], args["end"], args["strides"],
                                      args["axes"], strict=True):
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            first, last = _clamp(b, start, 0, dim), _clamp(b, end, 0, dim)
            length = last - first if step == 1 else -((first - last) // step)
        else:
            first, last = _clamp(b, start, -1, dim - 1), _clamp(b, end, -1, dim - 1)
            length = -((last - first) // -step)
        from_start = not isinstance(first, SymInt) and first == 0 and step == 1
        if isinstance(length, SymInt) and not from_start:  # x[:k] is never negative
            length = sym_max(length, 0)
        shape[axis] = length if int(length) >= 0 else 0
    if [int(d) for d in shape] == [int(d) for d in b.shape(out)]:
        b.types[out] = TensorType(tuple(shape), b.dtype(out))
    return [out]


@converter("Slice", until=9)
def _slice_attrs(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    axes = n.attr("axes", None)
    args = _slice_args(n, b.shape(x), [int(v) for v in n.attr("starts")],
                       [int(v) for v in n.attr("ends")],
                       None if axes is None else [int(a) for a in axes], None)
    return b.op("strided_slice", [x], args)


@converter("Slice", since=10)
def _slice_inputs(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    args = _slice_args(n, b.shape(x), const_ints(b, n.inputs[1], "starts"),
                       const_ints(b, n.inputs[2], "ends"),
                       _input_or_attr_ints(b, n, 3, "axes"),
                       _input_or_attr_ints(b, n, 4, "steps"))
    return _traced_slice(b, n, x, args)


# ---------------------------------------------------------------------------------------------
# Gather, GatherElements, GatherND, Compress


@converter("Gather")
def _gather(b: Builder, n: OnnxNode) -> list[str]:
    data, indices = n.inputs[0], n.inputs[1]
    axis = _axis(n, int(n.attr("axis", 0)), len(b.shape(data)))
    return b.op("take", [data, indices], {"axis": axis, "mode": "raise"})


@converter("GatherElements", since=11)
def _gather_elements(b: Builder, n: OnnxNode) -> list[str]:
    data, indices = n.inputs[0], n.inputs[1]
    axis = _axis(n, int(n.attr("axis", 0)), len(b.shape(data)))
    return b.op("gather", [data, indices], {"axis": axis})


@converter("GatherND", since=11)
def _gather_nd(b: Builder, n: OnnxNode) -> list[str]:
    return b.op("gather_nd", [n.inputs[0], n.inputs[1]],
                {"batch_dims": int(n.attr("batch_dims", 0))})


@converter("Compress", since=9)
def _compress(b: Builder, n: OnnxNode) -> list[str]:
    data = n.inputs[0]
    shape = b.shape(data)
    axis = n.attr("axis", None)
    if not b.is_constant(n.inputs[1]):  # chosen at run time: the length is data dependent
        condition_1d = n.inputs[1]
        if len(b.shape(condition_1d)) != 1:
            raise n.fail(f"the condition must be 1-D, given shape {list(b.shape(condition_1d))}")
        return b.op("compress", [data, condition_1d],
                    {"axis": None if axis is None else _axis(n, int(axis), len(shape))})
    condition = np.asarray(b.constant_value(n.inputs[1], "the condition")).reshape(-1)
    length = _size(shape) if axis is None else shape[_axis(n, int(axis), len(shape))]
    chosen = np.flatnonzero(condition.astype(bool))
    if chosen.size and chosen[-1] >= length:
        raise n.fail(f"the condition selects index {int(chosen[-1])}, beyond the "
                     f"{length} elements it chooses from")
    indices = b.constant(chosen.astype(np.int64))
    attrs = {"axis": None if axis is None else _axis(n, int(axis), len(shape)),
             "mode": "raise"}
    return b.op("take", [data, indices], attrs)


# ---------------------------------------------------------------------------------------------
# Scatter, ScatterElements, ScatterND


def _reductions(since: int) -> tuple[str, ...]:
    if since >= 18:
        return ("none", "add", "mul", "max", "min")
    if since >= 16:
        return ("none", "add", "mul")
    return ("none",)


def _scatter_elements(since: int) -> ConvertFn:
    allowed = _reductions(since)

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        data = n.inputs[0]
        reduction = n.attr("reduction", "none")
        if reduction not in allowed:
            raise n.fail(f"reduction {reduction!r} is not one of {', '.join(allowed)} at "
                         f"opset {n.opset}")
        axis = _axis(n, int(n.attr("axis", 0)), len(b.shape(data)))
        return b.op("scatter_elements", [data, n.inputs[1], n.inputs[2]],
                    {"axis": axis, "reduction": reduction})

    return convert


def _scatter_nd(since: int) -> ConvertFn:
    allowed = _reductions(since)

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        reduction = n.attr("reduction", "none")
        if reduction not in allowed:
            raise n.fail(f"reduction {reduction!r} is not one of {', '.join(allowed)} at "
                         f"opset {n.opset}")
        return b.op("scatter_nd", [n.inputs[0], n.inputs[1], n.inputs[2]],
                    {"reduction": reduction})

    return convert


converter("Scatter", since=9, until=10)(_scatter_elements(9))
_since([(11, 15), (16, 17), (18, None)], "ScatterElements", _scatter_elements)
_since([(11, 15), (16, 17), (18, None)], "ScatterND", _scatter_nd)


# ---------------------------------------------------------------------------------------------
# Pad, CenterCropPad


def _pad_value(b: Builder, n: OnnxNode, x: str, index: int) -> np.ndarray[Any, Any]:
    """The constant_value input (0 when omitted) as a 0-d array of ``x``'s dtype."""
    name = n.input(index)
    if name is None:
        return np.zeros((), b.dtype(x))
    value = np.asarray(b.constant_value(name, "constant_value"))
    if value.size != 1:
        raise n.fail(f"constant_value must be one value, given {value.size}")
    return value.reshape(()).astype(b.dtype(x))


def _emit_pad(b: Builder, n: OnnxNode, x: str, widths: list[tuple[int, int]], mode: str,
              value: np.ndarray[Any, Any]) -> str:
    """``x`` padded by ``widths`` in ONNX ``mode``.

    Negative widths crop: output index ``i`` of an axis reads input index ``i - before``, so
    the input is first cut to the part the output reads (possibly nothing) and then padded.
    """
    shape = b.shape(x)
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        begin, end, padding = [], [], []
        for dim, (lo, hi) in zip(shape, widths, strict=True):
            if dim + lo + hi < 0:
                raise n.fail(f"pads {widths} crop more than the input shape {list(shape)} "
                             "has")
            first, last = max(-lo, 0), min(dim, dim + hi)
            if last <= first:  # the output reads no input element: all padding
                first = last = 0
                padding.append((dim + lo + hi, 0))
            else:
                padding.append((max(lo, 0), max(hi, 0)))
            begin.append(first)
            end.append(last)
        x = b.op("strided_slice", [x], {"begin": begin, "end": end})[0]
        widths, shape = padding, b.shape(x)
    if mode == "wrap" and any(lo or hi for lo, hi in widths):
        # one gather per padded axis, of indices that wrap around it
        for axis, (lo, hi) in enumerate(widths):
            if not (lo or hi):
                continue
            if shape[axis] == 0:
                raise n.fail(f"wrap mode cannot pad axis {axis} of size 0")
            where = b.computed((shape[axis] + lo + hi,), "int64",
                               f"the wrap indices of axis {axis}",
                               partial(_wrap_indices, shape[axis], lo, hi))
            x = b.op("take", [x, where], {"axis": axis, "mode": "clip"})[0]
        return x
    if mode == "wrap":
        mode = "constant"  # nothing to pad: a copy
    for axis, (lo, hi) in enumerate(widths):
        if mode == "edge" and shape[axis] == 0 and (lo or hi):
            raise n.fail(f"edge mode cannot pad axis {axis} of size 0")
        if mode == "reflect" and max(lo, hi) > shape[axis] - 1:
            raise n.fail(f"reflect mode pads axis {axis} of size {shape[axis]} by at most "
                         f"{max(shape[axis] - 1, 0)} per side, given ({lo}, {hi})")
    fill = float(value) if value.dtype.kind in "fiub" else None
    if mode == "constant" and (fill is None or not np.isfinite(fill)
                               or np.asarray(fill).astype(value.dtype) != value):
        # a value a float attribute cannot carry exactly: given as a tensor
        return b.op("pad_fill", [x, b.constant(value)], {"pad_width": widths})[0]
    return b.op("pad", [x], {"pad_width": widths, "pad_value": fill or 0.0, "mode": mode})[0]


def _pad_widths(n: OnnxNode, pads: list[int], ndim: int,
                axes: list[int] | None) -> list[tuple[int, int]]:
    axes = list(range(ndim)) if axes is None else _axes(n, axes, ndim)
    if len(pads) != 2 * len(axes):
        raise n.fail(f"pads {pads} must have 2 values per padded axis ({len(axes)})")
    widths = [(0, 0)] * ndim
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[len(axes) + i])
    return widths


def _wrap_indices(size: int, lo: int, hi: int) -> Any:
    """The input positions that ``lo`` and ``hi`` elements of wrap padding read."""
    return np.arange(-lo, size + hi, dtype=np.int64) % size


def _pad(since: int) -> ConvertFn:
    modes = ("constant", "reflect", "edge", "wrap") if since >= 19 else (
        "constant", "reflect", "edge")

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        mode = n.attr("mode", "constant")
        if mode not in modes:
            raise n.fail(f"mode {mode!r} is not one of {', '.join(modes)} at opset {n.opset}")
        ndim = len(b.shape(x))
        if since < 11:
            pads = [int(p) for p in n.attr("pads")]
            value = np.asarray(float(n.attr("value", 0.0))).astype(b.dtype(x))
            axes = None
        else:
            pads = const_ints(b, n.inputs[1], "pads")
            value = _pad_value(b, n, x, 2)
            axes = _input_or_attr_ints(b, n, 3, "axes") if since >= 18 else None
        return [_emit_pad(b, n, x, _pad_widths(n, pads, ndim, axes), mode, value)]

    return convert


_since([(7, 10), (11, 17), (18, 18), (19, None)], "Pad", _pad)


@converter("CenterCropPad", since=18)
def _center_crop_pad(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    shape = b.shape(x)
    target = const_ints(b, n.inputs[1], "the target shape")
    axes_attr = n.attr("axes", None)
    axes = (list(range(len(shape))) if axes_attr is None
            else _axes(n, [int(a) for a in axes_attr], len(shape)))
    if len(target) != len(axes):
        raise n.fail(f"shape {target} must have one value per axis of {axes}")
    widths = [(0, 0)] * len(shape)
    for axis, size in zip(axes, target, strict=True):
        if size < 0:
            raise n.fail(f"shape {target} has a negative size")
        diff = size - shape[axis]
        # ONNX centres with the smaller half first, padding or cropping
        lo = diff // 2 if diff >= 0 else -((-diff) // 2)
        widths[axis] = (lo, diff - lo)
    return [_emit_pad(b, n, x, widths, "constant", np.zeros((), b.dtype(x)))]


# ---------------------------------------------------------------------------------------------
# DepthToSpace, SpaceToDepth, ReverseSequence


def _blocks(op: str) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        mode = n.attr("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise n.fail(f"mode {mode!r} is not 'DCR' or 'CRD'")
        blocksize = int(n.attr("blocksize"))
        if blocksize < 1:
            raise n.fail(f"blocksize must be >= 1, given {blocksize}")
        return b.op(op, [n.inputs[0]], {"blocksize": blocksize, "mode": mode})

    return convert


converter("DepthToSpace", until=10)(_blocks("depth_to_space"))  # DCR only; no mode attr
converter("DepthToSpace", since=11)(_blocks("depth_to_space"))
converter("SpaceToDepth", until=27)(_blocks("space_to_depth"))  # DCR only; no mode attr
converter("SpaceToDepth", since=28)(_blocks("space_to_depth"))


@converter("ReverseSequence", since=10)
def _reverse_sequence(b: Builder, n: OnnxNode) -> list[str]:
    batch, time = int(n.attr("batch_axis", 1)), int(n.attr("time_axis", 0))
    if {batch, time} != {0, 1}:
        raise n.fail(f"batch_axis {batch} and time_axis {time} must be 0 and 1")
    return b.op("reverse_sequence", [n.inputs[0], n.inputs[1]],
                {"batch_axis": batch, "time_axis": time})


# ---------------------------------------------------------------------------------------------
# Shape, Size, Range, Constant, ConstantOfShape, EyeLike, OneHot


@converter("Shape", until=14)
def _shape(b: Builder, n: OnnxNode) -> list[str]:
    return [b.shape_constant(n.inputs[0])]


@converter("Shape", since=15)
def _shape_range(b: Builder, n: OnnxNode) -> list[str]:
    shape = b.shape(n.inputs[0])
    rank = len(shape)
    start, end = int(n.attr("start", 0)), n.attr("end", None)
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [b.shape_constant(n.inputs[0], start, end)]


@converter("Size")
def _size_op(b: Builder, n: OnnxNode) -> list[str]:
    return [b.constant(_size(b.shape(n.inputs[0])), "int64")]


def _range(since: int) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        values = [np.asarray(b.constant_value(name, what)) for name, what in
                  zip(n.inputs[:3], ("start", "limit", "delta"), strict=True)]
        for value, what in zip(values, ("start", "limit", "delta"), strict=True):
            if value.size != 1:
                raise n.fail(f"{what} must be a scalar, given shape {list(value.shape)}")
        dtype = values[0].dtype
        start, limit, delta = (v.reshape(()).item() for v in values)
        if delta == 0:
            raise n.fail("delta is 0")
        if dtype.kind in "iu":
            count = max(-(-(limit - start) // delta), 0)
            table = b.computed((count,), dtype.name, "Range's output", lambda: (
                start + delta * np.arange(count, dtype=np.int64)))
            traced = [b.symbolic_ints(name) for name in n.inputs[:3]]
            if any(t is not None for t in traced):  # a length that follows the variables
                first, last, step = (t[0] if t is not None else v for t, v in
                                     zip(traced, (start, limit, delta), strict=True))
                b.types[table] = TensorType((max(-(-(last - first) // step), 0),), dtype.name)
                b.record(ConvertedStep("arange", list(n.inputs[:3]), [table], {}, b.source))
            return [table]
        if not all(np.isfinite(v) for v in (start, limit, delta)):
            raise n.fail(f"start, limit and delta must be finite, given {start}, {limit}, "
                         f"{delta}")
        work = np.float64
        if since >= 27 and dtype.itemsize < 4:
            stash = int(n.attr("stash_type", 1))
            if stash not in (1, 11):
                raise n.fail(f"stash_type {stash} is not FLOAT (1) or DOUBLE (11)")
            work = np.float32 if stash == 1 else np.float64
        first, stop, step = work(start), work(limit), work(delta)
        span = (float(stop) - float(first)) / float(step)
        if not np.isfinite(span):
            raise n.fail(f"(limit - start) / delta is not finite for {start}, {limit}, {delta}")
        count = max(int(np.ceil(span)), 0)
        # start + i * delta, as ONNX says (np.arange would size itself by its own division)
        return [b.computed((count,), dtype.name, "Range's output", lambda: (
            first + step * np.arange(count, dtype=work)))]

    return convert


_since([(11, 26), (27, None)], "Range", _range)


@converter("Constant")
def _constant(b: Builder, n: OnnxNode) -> list[str]:
    given = [key for key in n.attrs if key in (
        "value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
        "value_string", "value_strings")]
    if len(given) != 1:
        raise n.fail(f"a Constant needs exactly one value attribute, given {given or 'none'}")
    key = given[0]
    value = n.attrs[key]
    if key == "sparse_value":
        raise n.fail("a sparse constant (sparse_value) is not supported")
    if key.startswith("value_string"):
        raise n.fail(f"a string constant ({key}) is not supported: graphrt has no string "
                     "tensors")
    if key in ("value_float", "value_floats"):
        return [b.constant(np.asarray(value, np.float32))]
    if key in ("value_int", "value_ints"):
        return [b.constant(np.asarray(value, np.int64))]
    return [b.constant(np.asarray(value))]


@converter("ConstantOfShape", since=9)
def _constant_of_shape(b: Builder, n: OnnxNode) -> list[str]:
    shape = const_ints(b, n.inputs[0], "the shape")
    if any(d < 0 for d in shape):
        raise n.fail(f"shape {shape} has a negative dim")
    value = n.attr("value", None)
    fill = np.zeros((), np.float32) if value is None else np.asarray(value)
    if fill.size != 1:
        raise n.fail(f"value must hold one element, given shape {list(fill.shape)}")
    scalar = b.constant(fill.reshape(()))
    return b.op("broadcast_to", [scalar], {"shape": shape})


@converter("EyeLike", since=9)
def _eye_like(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    if len(b.shape(x)) != 2:
        raise n.fail(f"the input must be 2-D, given shape {list(b.shape(x))}")
    elem = n.attr("dtype", None)
    dtype = b.dtype(x) if elem is None else dtype_name(int(elem), n.label)
    return b.op("eye_like", [x], {"k": int(n.attr("k", 0)), "dtype": dtype})


def _one_hot(since: int) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        indices, depth_name, values = n.inputs[0], n.inputs[1], n.inputs[2]
        depth = const_floats(b, depth_name, "depth")
        if len(depth) != 1 or depth[0] < 1:
            raise n.fail(f"depth must be one positive value, given {depth}")
        axis = int(n.attr("axis", -1))
        ndim = len(b.shape(indices))
        if not -ndim - 1 <= axis <= ndim:
            raise n.fail(f"axis {axis} is out of range for {ndim}-D indices")
        if b.shape(values) != (2,):
            raise n.fail(f"values must hold 2 elements (off, on), given shape "
                         f"{list(b.shape(values))}")
        return b.op("one_hot", [indices, values],
                    {"depth": int(depth[0]), "axis": axis, "wrap_negative": since >= 11})

    return convert


_since([(9, 10), (11, None)], "OneHot", _one_hot)


# ---------------------------------------------------------------------------------------------
# CumSum, CumProd, TopK


def _scan(b: Builder, n: OnnxNode, op: str) -> list[str]:
    """CumSum or CumProd as standard op ``op``: the axis input must be a constant."""
    if len(n.inputs) < 2 or not n.inputs[1]:
        raise n.fail("the axis input is required (inputs: x, axis)")
    x = n.inputs[0]
    axis = const_ints(b, n.inputs[1], "axis")
    if len(axis) != 1:
        raise n.fail(f"axis must be one value, given {axis}")
    ndim = len(b.shape(x))
    if ndim == 0:
        raise n.fail(f"{n.op_type} of a 0-D tensor is not defined")
    return b.op(op, [x], {"axis": _axis(n, axis[0], ndim),
                          "exclusive": _flag(n, "exclusive", 0),
                          "reverse": _flag(n, "reverse", 0)})


@converter("CumSum", since=11)
def _cumsum(b: Builder, n: OnnxNode) -> list[str]:
    return _scan(b, n, "cumsum")


@converter("CumProd", since=26)
def _cumprod(b: Builder, n: OnnxNode) -> list[str]:
    return _scan(b, n, "cumprod")


def _topk(since: int) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        if not shape:
            raise n.fail("TopK of a 0-D tensor is not defined")
        if since < 10:
            k = int(n.attr("k"))
        elif not b.is_constant(n.inputs[1]):  # k computed at run time
            if since >= 11:
                _flag(n, "sorted", 1)
            largest = _flag(n, "largest", 1) if since >= 11 else True
            axis = _axis(n, int(n.attr("axis", -1)), len(shape))
            return b.op("dynamic_topk", [x, n.inputs[1]], {"axis": axis, "largest": largest},
                        num_outputs=2)
        else:
            ks = const_ints(b, n.inputs[1], "k")
            if len(ks) != 1:
                raise n.fail(f"k must be one value, given {ks}")
            k = ks[0]
        axis = _axis(n, int(n.attr("axis", -1)), len(shape))
        if not 0 <= k <= shape[axis]:
            raise n.fail(f"k {k} must lie in [0, {shape[axis]}] (axis {axis} of shape "
                         f"{list(shape)})")
        largest = _flag(n, "largest", 1) if since >= 11 else True
        if since >= 11:
            _flag(n, "sorted", 1)  # always sorted: an unsorted result may be in any order
        return b.op("topk", [x], {"k": k, "axis": axis, "largest": largest}, num_outputs=2)

    return convert


_since([(7, 9), (10, 10), (11, None)], "TopK", _topk)


# ---------------------------------------------------------------------------------------------
# BitCast


@converter("BitCast", since=26)
def _bitcast(b: Builder, n: OnnxNode) -> list[str]:
    """The input's bytes read as type ``to`` (of the same width: the shape stays)."""
    x = n.inputs[0]
    target = dtype_name(int(n.attr("to")), f"{n.label}: attribute 'to'")
    given = b.dtype(x)
    size, target_size = parse_dtype(given).itemsize, parse_dtype(target).itemsize
    if size != target_size:
        raise n.fail(f"BitCast needs types of one bit width: the input is {given} "
                     f"({8 * size} bits), 'to' is {target} ({8 * target_size} bits)")
    return b.op("bitcast", [x], {"dtype": target})
