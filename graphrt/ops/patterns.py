"""Fusion patterns: which steps of a declarative function can run as one kernel.

Two patterns, found by pure functions over a function's steps (the names between the steps
must be used nowhere else); whether a device has a kernel for a pattern is the kernels'
business (:mod:`graphrt.kernels`):

* :func:`elementwise_runs`: runs of consecutive elementwise steps (one compiled loop on cpu,
  one ``cupy.ElementwiseKernel`` on cuda).
* :func:`epilogue_runs`: an op followed by the elementwise steps it can apply as its epilogue.
  An op followed by ``add`` of a vector along its last axis (a bias: ONNX's MatMul -> Add),
  ``add`` of an array of its own type (a residual) and/or ``relu`` or ``clip`` (the
  conv -> add -> relu of every ResNet block, MobileNet's ReLU6), in that order, can apply them
  as it stores its results (:class:`graphrt.kernels.Epilogue`), with no pass of their own
  over memory.

Example:
    >>> from graphrt.ops import TensorType
    >>> f32 = TensorType((1, 8, 4, 4), "float32")
    >>> steps = [("conv2d", ("x", "w"), ("t",)), ("add", ("r", "t"), ("u",)),
    ...          ("relu", ("u",), ("y",))]
    >>> epilogue_runs(steps, {"y"}, dict(t=f32, r=f32), lambda index: index == 0)
    [EpilogueRun(first=0, last=2, residual='r', relu=True, output='y', clip=False, bias=None)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .base import TensorType

__all__ = ["ElementwiseRun", "EpilogueRun", "elementwise_runs", "epilogue_runs"]


ACTIVATIONS = ("relu", "clip")
"""The ops an epilogue may end with (``clip`` with its attributes' bounds)."""


@dataclass(frozen=True)
class EpilogueRun:
    """Steps ``first..last`` (inclusive): the op at ``first``, then ``+ bias`` (a vector along
    the last axis; None: no such add), ``+ residual`` (None: no add) and relu (or not),
    exporting ``output``; ``clip``: the last step is a ``clip`` instead (its bounds are its
    attributes)."""

    first: int
    last: int
    residual: str | None
    relu: bool
    output: str
    clip: bool = False
    bias: str | None = None


def epilogue_runs(steps: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]]],
                  exported: set[str], types: Mapping[str, TensorType],
                  anchor: Callable[[int], bool]) -> list[EpilogueRun]:
    """The epilogue runs of ``steps`` (per step: op name, input names, output names).

    Args:
        exported: names read outside the function body (its outputs).
        types: the type of every name.
        anchor: whether step ``index`` is an op that can take an epilogue (asked only for
            steps followed by one).
    """
    uses = Counter(name for _, ins, _ in steps for name in ins)

    def internal(name: str) -> bool:  # read once, by the next step, and not exported
        return uses[name] == 1 and name not in exported

    runs = []
    index = 0
    while index < len(steps) - 1:
        value, last = steps[index][2], index
        bias = residual = None
        if len(value) != 1 or not internal(value[0]):
            index += 1
            continue
        added = _added(steps, last + 1, value[0])  # + bias, then + residual
        if added is not None and _is_bias(types[added], types[value[0]]):
            bias, last, value = added, last + 1, steps[last + 1][2]
            added = _added(steps, last + 1, value[0]) if internal(value[0]) else None
        if added is not None:
            if types[added] != types[value[0]]:
                index += 1
                continue
            residual, last, value = added, last + 1, steps[last + 1][2]
        if (last + 1 < len(steps) and steps[last + 1][0] in ACTIVATIONS
                and steps[last + 1][1] == value and (last == index or internal(value[0]))):
            last += 1
        if last == index or not anchor(index):
            index += 1
            continue
        runs.append(EpilogueRun(index, last, residual, steps[last][0] == "relu",
                                steps[last][2][0], steps[last][0] == "clip", bias))
        index = last + 1
    return runs


def _added(steps: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]]], index: int,
           value: str) -> str | None:
    """What step ``index`` adds to ``value`` when it is ``add(value, other)`` (either order,
    ``other`` another name), else None."""
    if index >= len(steps):
        return None
    op, ins, outs = steps[index]
    if op != "add" or len(ins) != 2 or ins[0] == ins[1] or value not in ins or len(outs) != 1:
        return None
    return ins[1] if ins[0] == value else ins[0]


def _is_bias(vector: TensorType, of: TensorType) -> bool:
    """Whether ``vector`` is a bias of ``of``: 1-D over its last axis, of its dtype."""
    return (len(of.shape) >= 2 and vector.shape == of.shape[-1:]
            and vector.dtype == of.dtype)


@dataclass(frozen=True)
class ElementwiseRun:
    """Steps ``first..last`` (inclusive) of a function, computed as one kernel.

    ``inputs`` are the names the run reads from outside it, in order of first use; ``output``
    is the one name it exports (the last step's output).
    """

    first: int
    last: int
    inputs: tuple[str, ...]
    output: str


def elementwise_runs(steps: Sequence[tuple[str | None, tuple[str, ...], tuple[str, ...]]],
                     exported: set[str]) -> list[ElementwiseRun]:
    """Find fusable runs (of two or more steps).

    Args:
        steps: per step, its elementwise expression (None if not elementwise), input names and
            output names.
        exported: names read outside the function body (the function's outputs).
    """
    uses: dict[str, list[int]] = {}
    for index, (_, ins, _) in enumerate(steps):
        for name in ins:
            uses.setdefault(name, []).append(index)
    runs = []
    start = 0
    while start < len(steps):
        end = start
        while end < len(steps) and steps[end][0] is not None and len(steps[end][2]) == 1:
            end += 1
        # steps[start:end] are elementwise; keep the longest prefix whose inner results stay
        # inside it.
        best = start
        for last in range(start + 1, end):
            inner = [steps[k][2][0] for k in range(start, last)]
            if all(name not in exported and all(start < use <= last for use in uses.get(name, []))
                   for name in inner):
                best = last
        if best > start:
            produced = {steps[k][2][0] for k in range(start, best + 1)}
            inputs: list[str] = []
            for k in range(start, best + 1):
                inputs += [n for n in dict.fromkeys(steps[k][1])  # x * x reads x once
                           if n not in produced and n not in inputs]
            runs.append(ElementwiseRun(start, best, tuple(inputs), steps[best][2][0]))
            start = best + 1
        else:
            start += 1
    return runs
