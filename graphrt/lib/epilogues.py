"""Finding where an op can take the elementwise steps after it as its epilogue.

A convolution followed by ``add`` of an array of its own type (a residual) and/or ``relu``
(the conv -> add -> relu of every ResNet block) can apply them as it stores its results
(:data:`graphrt.lib.ops.base.EpilogueFactory`), with no pass of their own over memory.
:func:`epilogue_runs` finds those patterns in a declarative function's steps; the names
between the steps must be used nowhere else.

Example:
    >>> from graphrt.lib.ops import TensorType
    >>> f32 = TensorType((1, 8, 4, 4), "float32")
    >>> steps = [("conv2d", ("x", "w"), ("t",)), ("add", ("r", "t"), ("u",)),
    ...          ("relu", ("u",), ("y",))]
    >>> epilogue_runs(steps, {"y"}, dict(t=f32, r=f32), lambda index: index == 0)
    [EpilogueRun(first=0, last=2, residual='r', relu=True, output='y')]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .ops import TensorType

__all__ = ["EpilogueRun", "epilogue_runs"]


@dataclass(frozen=True)
class EpilogueRun:
    """Steps ``first..last`` (inclusive): the op at ``first``, then ``+ residual`` (None:
    no add) and relu (or not), exporting ``output``."""

    first: int
    last: int
    residual: str | None
    relu: bool
    output: str


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
        (_, _, outs), (op, ins, after) = steps[index], steps[index + 1]
        if len(outs) != 1 or not internal(outs[0]) or outs[0] not in ins:
            index += 1
            continue
        value, last, residual = outs[0], index + 1, None
        if op == "add" and len(ins) == 2 and ins[0] != ins[1]:
            residual = ins[1] if ins[0] == value else ins[0]
            if types[residual] != types[value]:
                index += 1
                continue
            if (last + 1 < len(steps) and steps[last + 1][0] == "relu"
                    and steps[last + 1][1] == after and internal(after[0])):
                last += 1
        elif op != "relu":
            index += 1
            continue
        if not anchor(index):
            index += 1
            continue
        runs.append(EpilogueRun(index, last, residual, steps[last][0] == "relu",
                                steps[last][2][0]))
        index = last + 1
    return runs
