"""Scratch that holds for every admissible shape, not only at the bounds.

A node with symbolic dimensions is lowered at its planned (largest) shapes, and its
intermediates are resized at each run's shapes. A kernel's workspace need not grow with the
shapes: the reference depthwise convolution blocks its accumulator by ``block // batch``
images' worth, so batch 3 of a MobileNetV2 bounded at 8 needs more than batch 8 does. Planning
at the bounds alone then failed runs inside the bounds. Here every intermediate is sized to the
largest it becomes over the node's admissible shapes, found at ``create()`` (and so by
``validate``): every assignment of the node's shape variables when there are at most
:data:`EXHAUSTIVE` of them, else every value of each variable with the others at their bounds
(a variable of more than :data:`SWEPT` values, such as a count a data-dependent op finds, at
its first and last 64 values and the powers of two between).

Example:
    >>> EXHAUSTIVE
    4096
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import replace
from math import prod

import numpy as np

from ..errors import GraphrtError
from ..lib import Lowering, TensorType
from ..ops import OpError
from ..schema import Graph, Node
from ..schema.symbolic import Expr, ShapeVar

__all__ = ["EXHAUSTIVE", "SWEPT", "widest_scratch"]

EXHAUSTIVE = 4096
"""The most assignments of a node's shape variables tried one by one."""


SWEPT = 256
"""A variable with more values than this (a data-dependent count up to thousands, say) is
swept at its first and last 64 values and the powers of two between, not at every value."""


def _values(var: ShapeVar) -> list[int]:
    low, high = max(var.min, 0), var.max
    if high - low < SWEPT:
        return list(range(low, high + 1))
    chosen = {*range(low, low + 64), *range(high - 63, high + 1)}
    power = 1
    while power < high:
        if power > low:
            chosen.add(power)
        power *= 2
    return sorted(chosen)


def _assignments(variables: list[ShapeVar]) -> Iterator[dict[str, int]]:
    ranges = [_values(var) for var in variables]
    if prod(len(r) for r in ranges) <= EXHAUSTIVE:
        for values in itertools.product(*ranges):
            yield dict(zip((var.name for var in variables), values, strict=True))
        return
    corners = [(r[0], r[-1]) for r in ranges]
    for values in itertools.product(*corners):
        yield dict(zip((var.name for var in variables), values, strict=True))
    for i, var in enumerate(variables):
        for others in itertools.product(*(c for j, c in enumerate(corners) if j != i)):
            for value in ranges[i]:
                env = dict(zip((v.name for j, v in enumerate(variables) if j != i), others,
                               strict=True))
                env[var.name] = value
                yield env


def _types(graph: Graph, node: Node, env: Mapping[str, int]) -> tuple[TensorType, ...] | None:
    """The node's entry types under ``env``, or None where a dimension leaves its range."""
    types = []
    for eid in (*node.inputs, *node.outputs):
        entry = graph.entries[eid]
        dims = entry.dims if entry.dims is not None else entry.shape
        shape = tuple(d.evaluate(env) if isinstance(d, Expr) else int(d) for d in dims)
        if any(not 0 <= size <= planned for size, planned in zip(shape, entry.shape,
                                                                   strict=True)):
            return None
        types.append(TensorType((prod(shape),) if node.flatten_data else shape,
                                entry.dtype.numpy.name))
    return tuple(types)


def widest_scratch(graph: Graph, node: Node, lowering: Lowering,
                   memo: dict[Hashable, list[int]] | None = None) -> Lowering:
    """``lowering`` with each intermediate as large as it becomes at any admissible shape of
    ``node`` (flat, of its dtype, where that is more than at the planned shapes).

    Assignments at which the node's own function refuses the shapes (dimensions that only
    agree at run time through other variables) cannot run and are skipped. ``memo`` keeps
    the sizes per function and symbolic signature, so that the repeated layers of a model
    are swept once (give one dict per device kind).
    """
    if lowering.resize is None:
        return lowering
    key = (node.func_name, node.flatten_data,
           tuple((tuple(str(d) for d in (graph.entries[eid].dims or ())),
                  graph.entries[eid].shape, graph.entries[eid].dtype.name)
                 for eid in (*node.inputs, *node.outputs)))
    widest = None if memo is None else memo.get(key)
    if widest is None:
        widest = _sweep(graph, node, lowering)
        if memo is not None:
            memo[key] = widest
    if list(lowering.nbytes()) == widest:
        return lowering
    intermediates = tuple(
        tensor if nbytes == planned else
        TensorType((-(-nbytes // np.dtype(tensor.dtype).itemsize),), tensor.dtype)
        for tensor, nbytes, planned in zip(lowering.intermediates, widest, lowering.nbytes(),
                                           strict=True))
    return replace(lowering, intermediates=intermediates)


def _sweep(graph: Graph, node: Node, lowering: Lowering) -> list[int]:
    """Each intermediate's largest size in bytes over the node's admissible shapes."""
    assert lowering.resize is not None
    names: set[str] = set()
    for eid in (*node.inputs, *node.outputs):
        for dim in graph.entries[eid].dims or ():
            if isinstance(dim, Expr):
                names |= dim.variables
    variables = [graph.shape_vars[name] for name in sorted(names) if name in graph.shape_vars]
    widest = list(lowering.nbytes())
    for env in _assignments(variables):
        types = _types(graph, node, env)
        if types is None:
            continue
        try:
            sized = lowering.resize(types)
        except (GraphrtError, OpError, ValueError):
            continue
        for i, tensor in enumerate(sized):
            widest[i] = max(widest[i], prod(tensor.shape) * np.dtype(tensor.dtype).itemsize)
    return widest
