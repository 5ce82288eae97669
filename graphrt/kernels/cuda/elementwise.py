"""Fusing runs of elementwise ops into one cupy ElementwiseKernel (one launch on cuda).

The runs are the ones :func:`graphrt.ops.patterns.elementwise_runs` finds (pure, tested
without a GPU); :func:`kernel_source` writes the CUDA body of one run. :func:`compile_run`
builds (and caches by signature) the ``cupy.ElementwiseKernel``; it is the only part that
needs cupy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...ops import ElementwiseRun, TensorType

__all__ = ["compile_run", "kernel_source"]

_C_TYPES = {
    "bool": "bool", "float32": "float", "float64": "double",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long",
}
_COMPUTE = {"float16": "float"}
"""Dtypes a run computes in a wider C type: float16 is read as float, every intermediate is
float, and the result is rounded to float16 once, as it is stored (CuPy's ``float16``)."""
_STORE = {"float16": "float16"}
_OPERAND = re.compile(r"\bin(\d+)\b")
_CACHE: dict[tuple[str, str, str], Any] = {}


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
        if dtype in _COMPUTE:
            return _COMPUTE[dtype]
        if dtype not in _C_TYPES:
            raise ValueError(f"no CUDA type for {dtype}")
        return _C_TYPES[dtype]

    variables = {name: f"(({_COMPUTE[types[name].dtype]})x{i})"
                 if types[name].dtype in _COMPUTE else f"x{i}"
                 for i, name in enumerate(run.inputs)}
    lines = []
    for k in range(run.first, run.last + 1):
        expression, ins, outs = steps[k]
        assert expression is not None
        body = _substitute(expression, [variables[name] for name in ins])
        if k == run.last:
            store = _STORE.get(types[outs[0]].dtype) or c_type(outs[0])
            lines.append(f"y = ({store})({body});")
        else:
            variables[outs[0]] = f"t{k}"
            lines.append(f"{c_type(outs[0])} t{k} = ({c_type(outs[0])})({body});")
    in_params = ", ".join(f"{types[n].dtype} x{i}" for i, n in enumerate(run.inputs))
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
