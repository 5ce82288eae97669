"""ONNX converters: the ``Reduce*`` family and ``ArgMax``/``ArgMin``.

Every ``Reduce*`` op becomes the standard op ``reduce`` with its ``kind``. The axes are an
attribute up to opset 12 (``ReduceSum``) or 17 (the others) and an optional input after, where
``noop_with_empty_axes`` makes omitted or empty axes reduce nothing instead of everything.
"""

from __future__ import annotations

from ..builder import Builder
from ..model import OnnxNode
from ..registry import ConvertFn, converter
from .common import const_ints

_KINDS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sum_square",
    "ReduceLogSum": "log_sum", "ReduceLogSumExp": "log_sum_exp",
}
"""ONNX op → ``reduce`` kind."""

_AXES_INPUT_SINCE = {op: 18 for op in _KINDS} | {"ReduceSum": 13}
"""The opset from which each op takes its axes as an input."""


def _check_axes(n: OnnxNode, axes: list[int], ndim: int) -> list[int]:
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise n.fail(f"axis {axis} is out of range for a {ndim}-D input")
    if len({a % ndim for a in axes}) != len(axes):
        raise n.fail(f"axes {axes} name an axis more than once")
    return axes


def _keepdims(n: OnnxNode) -> bool:
    value = n.attr("keepdims", 1)
    if value not in (0, 1):
        raise n.fail(f"keepdims must be 0 or 1, given {value}")
    return bool(value)


def _reduce(b: Builder, n: OnnxNode, axes: list[int] | None) -> list[str]:
    data = n.inputs[0]
    if axes is not None:
        axes = _check_axes(n, axes, len(b.shape(data)))
    return b.op("reduce", [data], {"kind": _KINDS[n.op_type], "axes": axes,
                                   "keepdims": _keepdims(n)})


def _reduce_axes_attribute(b: Builder, n: OnnxNode) -> list[str]:
    """Axes as an attribute; absent or empty reduces every axis."""
    axes = [int(a) for a in n.attr("axes", [])]
    return _reduce(b, n, axes or None)


def _reduce_axes_input(b: Builder, n: OnnxNode) -> list[str]:
    """Axes as an optional input; ``noop_with_empty_axes`` says what none means."""
    noop = n.attr("noop_with_empty_axes", 0)
    if noop not in (0, 1):
        raise n.fail(f"noop_with_empty_axes must be 0 or 1, given {noop}")
    name = n.input(1)
    axes = const_ints(b, name, "axes") if name is not None else []
    if not axes:
        return _reduce(b, n, [] if noop else None)
    return _reduce(b, n, axes)


for _op, _since in _AXES_INPUT_SINCE.items():
    converter(_op, until=_since - 1)(_reduce_axes_attribute)
    converter(_op, since=_since)(_reduce_axes_input)


def _arg(kind: str) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        data = n.inputs[0]
        ndim = len(b.shape(data))
        axis = int(n.attr("axis", 0))
        if not -ndim <= axis < ndim:
            raise n.fail(f"axis {axis} is out of range for a {ndim}-D input")
        last = n.attr("select_last_index", 0)
        if last not in (0, 1):
            raise n.fail(f"select_last_index must be 0 or 1, given {last}")
        if b.shape(data)[axis] == 0:
            raise n.fail(f"Arg{kind.capitalize()} over axis {axis} of length 0 has no value")
        return b.op("arg_reduce", [data], {"kind": kind, "axis": axis,
                                           "keepdims": _keepdims(n),
                                           "select_last_index": bool(last)})

    return convert


converter("ArgMax")(_arg("max"))
converter("ArgMin")(_arg("min"))
