"""Fusing runs of elementwise ops into one cupy ElementwiseKernel (one launch on cuda).

Planning is pure (and tested without a GPU): :func:`elementwise_runs` finds runs of consecutive
elementwise steps whose intermediate results are used only inside the run, and
:func:`kernel_source` writes the CUDA body of one run. :func:`compile_run` builds (and caches by
signature) the ``cupy.ElementwiseKernel``; it is the only part that needs cupy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ops import TensorType

__all__ = ["ElementwiseRun", "compile_run", "elementwise_runs", "kernel_source"]

_C_TYPES = {
    "bool": "bool", "float32": "float", "float64": "double",  # float16: left unfused
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long",
}
_OPERAND = re.compile(r"\bin(\d+)\b")
_CACHE: dict[tuple[str, str, str], Any] = {}


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


def kernel_source(run: ElementwiseRun,
                  steps: Sequence[tuple[str | None, tuple[str, ...], tuple[str, ...]]],
                  types: dict[str, TensorType]) -> tuple[str, str, str]:
    """``(in_params, out_params, operation)`` of the ElementwiseKernel computing ``run``.

    Raises:
        KeyError: never for checked functions (every name has a type).
        ValueError: a dtype CUDA code cannot name.
    """
    def c_type(name: str) -> str:
        dtype = types[name].dtype
        if dtype not in _C_TYPES:
            raise ValueError(f"no CUDA type for {dtype}")
        return _C_TYPES[dtype]

    variables = {name: f"x{i}" for i, name in enumerate(run.inputs)}
    lines = []
    for k in range(run.first, run.last + 1):
        expression, ins, outs = steps[k]
        assert expression is not None
        body = _substitute(expression, [variables[name] for name in ins])
        if k == run.last:
            lines.append(f"y = ({c_type(outs[0])})({body});")
        else:
            variables[outs[0]] = f"t{k}"
            lines.append(f"{c_type(outs[0])} t{k} = ({c_type(outs[0])})({body});")
    in_params = ", ".join(f"{types[n].dtype} {variables[n]}" for n in run.inputs)
    out_params = f"{types[run.output].dtype} y"
    return in_params, out_params, "\n".join(lines)


def _substitute(expression: str, operands: list[str]) -> str:
    """``expression`` with ``in0, in1, ...`` replaced by the operands' variable names."""
    return _OPERAND.sub(lambda match: operands[int(match.group(1))], expression)


def compile_run(xp: Any, source: tuple[str, str, str]) -> Any:
    """The ``cupy.ElementwiseKernel`` for ``source``, built once per signature."""
    kernel = _CACHE.get(source)
    if kernel is None:
        in_params, out_params, operation = source
        kernel = xp.ElementwiseKernel(in_params, out_params, operation,
                                      f"graphrt_fused_{len(_CACHE)}")
        _CACHE[source] = kernel
    return kernel
