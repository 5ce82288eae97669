"""Converters of ops whose output shape follows their input values: NonZero, Unique and
NonMaxSuppression (Compress and TopK with a computed ``k`` live with their families).

With constant inputs they fold like any op. Otherwise the step's outputs are planned at the
op's bound (NonZero: the input's size; NonMaxSuppression: batches * classes * boxes) with a
shape variable for each length the data decides, bound by the shape function on every run.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter

__all__: list[str] = []


@converter("NonZero", since=9)
def _nonzero(b: Builder, n: OnnxNode) -> list[str]:
    return b.op("nonzero", [n.inputs[0]])


@converter("Unique", since=11)
def _unique(b: Builder, n: OnnxNode) -> list[str]:
    axis = n.attr("axis", None)
    return b.op("unique", [n.inputs[0]], {"sorted": bool(int(n.attr("sorted", 1))),
                                          "axis": None if axis is None else int(axis)})


@converter("NonMaxSuppression", since=10)
def _non_max_suppression(b: Builder, n: OnnxNode) -> list[str]:
    center = int(n.attr("center_point_box", 0))
    if center not in (0, 1):
        raise n.fail(f"center_point_box must be 0 or 1, given {center}")
    inputs = list(n.inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    for index, name in enumerate(inputs):  # omitted before a given one: an empty tensor,
        if not name:                         # which the op reads as omitted
            inputs[index] = b.constant(np.zeros(0, "int64" if index == 2 else "float32"))
    return b.op("non_max_suppression", inputs, {"center_point_box": bool(center)})
