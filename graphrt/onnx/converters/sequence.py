"""ONNX sequence ops, resolved while converting.

A sequence exists only at conversion: it is the list of its tensor values, and every position,
length and split is known then (positions that are graph inputs are frozen to their values,
as shapes are). What reaches the graph are the tensor ops: splits, concatenations. A sequence
that is a graph input or output is one graph input or output per item (``convert.py``).
"""

from __future__ import annotations

import itertools

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from .common import const_ints

__all__: list[str] = []


def _position(b: Builder, n: OnnxNode, index: int, length: int, default: int,
              inserting: bool = False) -> int:
    name = n.input(index)
    position = default if name is None else const_ints(b, name, "the position")[0]
    high = length if inserting else length - 1
    if not -length <= position <= high:
        raise n.fail(f"position {position} is out of range for a sequence of {length} "
                     f"tensors (allowed {-length}..{high})")
    return position + length if position < 0 else position


@converter("SequenceEmpty", since=11)
def sequence_empty(b: Builder, n: OnnxNode) -> list[str]:
    return [b.sequence([])]


@converter("SequenceConstruct", since=11)
def sequence_construct(b: Builder, n: OnnxNode) -> list[str]:
    return [b.sequence([name for name in n.inputs if name])]


@converter("SequenceInsert", since=11)
def sequence_insert(b: Builder, n: OnnxNode) -> list[str]:
    items = b.sequence_items(n.inputs[0])
    at = _position(b, n, 2, len(items), len(items), inserting=True)
    return [b.sequence([*items[:at], n.inputs[1], *items[at:]])]


@converter("SequenceErase", since=11)
def sequence_erase(b: Builder, n: OnnxNode) -> list[str]:
    items = b.sequence_items(n.inputs[0])
    if not items:
        raise n.fail("cannot erase from an empty sequence")
    at = _position(b, n, 1, len(items), len(items) - 1)
    return [b.sequence(items[:at] + items[at + 1:])]


@converter("SequenceAt", since=11)
def sequence_at(b: Builder, n: OnnxNode) -> list[str]:
    items = b.sequence_items(n.inputs[0])
    if not items:
        raise n.fail("cannot index an empty sequence")
    return [items[_position(b, n, 1, len(items), 0)]]


@converter("SequenceLength", since=11)
def sequence_length(b: Builder, n: OnnxNode) -> list[str]:
    return [b.constant(len(b.sequence_items(n.inputs[0])), "int64")]


MAX_SEQUENCE_ITEMS = 1 << 17
"""Most tensors one sequence may hold: each is a value of the converted graph."""


def _check_items(n: OnnxNode, count: int) -> None:
    if count > MAX_SEQUENCE_ITEMS:
        raise n.fail(f"the sequence would hold {count:,} tensors, more than the "
                     f"{MAX_SEQUENCE_ITEMS:,} graphrt converts")


@converter("SplitToSequence", since=11)
def split_to_sequence(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    shape = b.shape(x)
    axis = int(n.attr("axis", 0))
    if not -len(shape) <= axis < len(shape):
        raise n.fail(f"axis {axis} is out of range for a {len(shape)}-D input")
    axis %= len(shape)
    size = shape[axis]
    split = n.input(1)
    if split is None:
        _check_items(n, size)
        lengths = [1] * size
    else:
        values = const_ints(b, split, "split")
        if len(b.shape(split)) == 0:
            if values[0] <= 0:
                raise n.fail(f"split must be positive, given {values[0]}")
            _check_items(n, -(-size // values[0]))
            lengths = [values[0]] * (size // values[0]) + (
                [size % values[0]] if size % values[0] else [])
        else:
            lengths = values
        if sum(lengths) != size or any(v < 0 for v in lengths):
            raise n.fail(f"split {lengths} does not add up to dimension {axis} ({size})")
    bounds = list(itertools.accumulate(lengths[:-1]))  # where each part ends (linear)
    parts = b.op("split", [x], {"indices_or_sections": bounds, "axis": axis}) if bounds else [x]
    if split is None and not n.attr("keepdims", 1):
        parts = [b.op("squeeze", [part], {"axis": [axis]})[0] for part in parts]
    return [b.sequence(parts)]


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(b: Builder, n: OnnxNode) -> list[str]:
    items = b.sequence_items(n.inputs[0])
    if not items:
        raise n.fail("cannot concatenate an empty sequence")
    axis, new_axis = int(n.attr("axis")), bool(n.attr("new_axis", 0))
    rank = len(b.shape(items[0])) + new_axis
    if not -rank <= axis < rank:
        raise n.fail(f"axis {axis} is out of range for {rank}-D results")
    axis %= rank
    if new_axis:
        items = [b.op("expand_dims", [item], {"axis": axis})[0] for item in items]
    return b.op("concatenate", items, {"axis": axis})
