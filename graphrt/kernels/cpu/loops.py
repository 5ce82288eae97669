"""Fusing runs of elementwise steps into one compiled loop on cpu (numba).

The runs are the ones :func:`graphrt.ops.patterns.elementwise_runs` finds for cuda. Each run
becomes the Python source of one loop over the flat output (:func:`loop_source`), which numba
compiles at ``create()``. The source is written to a cache directory (``$GRAPHRT_CACHE_DIR``,
else ``$XDG_CACHE_HOME/graphrt``, else ``~/.cache/graphrt``) under a name hashing the source,
numba's version and the signature, and compiled from there with ``cache=True``: a second
process loads the machine code instead of compiling it.

Operands are read as the output's flat index (same shape), one value (size 1), or one index
of a two-level loop (a trailing or a leading block of the output's axes); other broadcasts
leave the run unfused. Every step's result is cast to its dtype, so ``+ - * /`` in float32
are bitwise what numpy computes; the transcendental functions compute in float64 and round
once, except erf of float32: a rational approximation in float32 within 5.2 ulps, eight
lanes a vector, where libm's erf is a call per element (docs/performance.md). float16
and bfloat16 runs stay on the numpy path. A long stretch of steps that each combine the
previous result with one value (a chain of Add/Mul with constants) runs as an inner loop over
a table of operations, so it compiles in constant time.

Per-tensor ``quantize`` (float32 to int8, uint8, int16, uint16) and ``dequantize`` (from
those and int32 to float32) steps have expressions too (:mod:`graphrt.ops.quantize`), so the
``dequantize, dequantize, add, quantize`` of a QDQ model's residual add is one loop, bitwise
the references: the division, rounding half to even (``rint``), zero point and clip in
float32, NaN made 0 as numpy's cast makes it; the difference ``x - zero_point`` in int64.
Such a step is a loop of its own even alone: numpy takes a pass over memory per operation
(a 64x56x56 uint8 dequantize: 2 ms on numpy, 44 µs compiled, on a 2-core test machine).

A loop of :data:`~graphrt.kernels.cpu.jit.PARALLEL_ELEMENTS` elements or more is compiled
as a job function (:mod:`graphrt.kernels.cpu.job_protocol`) over blocks of about 8K elements
(or of whole rows, where an input is read along a block of axes), which the helper threads
share in a graph that runs no product on BLAS (:class:`FusedLoop`), with the same bits
either way (docs/performance.md gives what that saves the BERT-style encoder's GELU). A
smaller one is compiled whole, over its arrays' addresses: the executor binds it to a step's
arrays once (:class:`BoundLoop`), so a call passes one array of integers, however many
arrays the run reads (a 1000-node chain of Add/Mul ran 5.5x as fast as with an array
argument each).

Without numba (or with ``GRAPHRT_JIT=0``) every run stays on the numpy path; the reason is
logged once per process.

Example:
    >>> from graphrt.ops import ElementwiseRun
    >>> from graphrt.ops import TensorType
    >>> steps = [("in0 + in1", ("a", "b"), ("t",)), ("in0 * in1", ("t", "b"), ("y",))]
    >>> f32 = TensorType((4,), "float32")
    >>> run = ElementwiseRun(0, 1, ("a", "b"), "y")
    >>> source = loop_source(run, python_steps(steps, dict(a=f32, b=f32, t=f32, y=f32)),
    ...                      dict(a=f32, b=f32, t=f32, y=f32))
    >>> print(source.kernel.splitlines()[-1].strip())
    yv[i] = t1
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from ...ops import ElementwiseRun, TensorType, elementwise_runs
from ...ops.quantize import FUSED_RANGES, dequantize_expression, quantize_expression
from ..base import ElementwiseStep
from .blas_threads import lanes_running
from .crew import Jobs, run_jobs
from .jit import JOB_ELEMENTS, PARALLEL_ELEMENTS, compiled_path_lost, load_numba

__all__ = ["BoundLoop", "CpuLoop", "FusedLoop", "cache_dir", "compile_loop", "fused_runs",
           "loop_source", "python_steps"]

logger = logging.getLogger(__name__)

Kernel = Callable[..., None]

_DTYPES = frozenset({"bool", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                     "uint16", "uint32", "uint64"})
_FLOATS = frozenset({"float32", "float64"})
_MATH = ("exp", "log", "sqrt", "tanh", "erf", "sin", "cos")
_PYTHON: dict[str, str] = {
    "in0 + in1": "({0} + {1})",
    "in0 - in1": "({0} - {1})",
    "in0 * in1": "({0} * {1})",
    "in0 / in1": "({0} / {1})",
    "(in0 > in1 || in0 != in0) ? in0 : in1": "({0} if ({0} > {1} or {0} != {0}) else {1})",
    "(in0 < in1 || in0 != in0) ? in0 : in1": "({0} if ({0} < {1} or {0} != {0}) else {1})",
    "in0 == in1": "({0} == {1})", "in0 != in1": "({0} != {1})",
    "in0 < in1": "({0} < {1})", "in0 <= in1": "({0} <= {1})",
    "in0 > in1": "({0} > {1})", "in0 >= in1": "({0} >= {1})",
    "in0 && in1": "({0} and {1})", "in0 || in1": "({0} or {1})", "!in0": "(not {0})",
    "in0 < 0 ? 0 : in0": "(0 if {0} < 0 else {0})",
    "-in0": "(-{0})",
    "in0 > 0 ? in0 : -in0": "({0} if {0} > 0 else -{0})",
    "in0 ? in1 : in2": "({1} if {0} else {2})",
    "in0": "{0}",
    "1 / sqrt(in0)": "(1.0 / _math.sqrt(_f64({0})))",
    "1 / in0": "(1.0 / _f64({0}))",
    "1 / (1 + exp(-in0))": "(1.0 / (1.0 + _math.exp(-_f64({0}))))",
    **{f"{name}(in0)": f"_math.{name}(_f64({{0}}))" for name in _MATH},
}
"""numba (Python) forms of the ops' C expressions that it computes as numpy does."""


def _quantize_form(zero: bool, low: int, high: int) -> str:
    """The numba form of a quantize expression: the generated module's ``_quantize32`` of
    x, the scale, the zero point (0 without one) and the output dtype's range."""
    point = "{2}" if zero else "0"
    return "_quantize32({0}, {1}, " + f"{point}, {low}, {high})"


_QUANT: dict[str, str] = {
    **{quantize_expression(dtype, zero): _quantize_form(zero, low, high)
       for dtype, (low, high) in FUSED_RANGES.items() for zero in (False, True)},
    dequantize_expression(False): "(_float32({0}) * _float32({1}))",
    dequantize_expression(True): "((_float32({0}) - _float32({2})) * _float32({1}))",
    dequantize_expression(True, wide=True):
        "(_float32(_int64({0}) - _int64({2})) * _float32({1}))",
}
"""Per-tensor quantize and dequantize (:mod:`graphrt.ops.quantize`): quantize through the
generated module's ``_quantize32``; dequantize's difference in float32 for 8- and 16-bit
inputs (both exact there, and so their difference: numba would compute ``uint8 - uint8``
in uint8 and wrap around, and ``int32 - int32`` in int64, which AVX2 converts to float32
a lane at a time: a QDQ GELU ran 4x slower in int64, a residual add 1.4x in int32) and in
int64 for int32 inputs, rounded once to float32, times the scale."""
_PYTHON.update(_QUANT)
_QUANTIZING = frozenset(_QUANT.values())
_QUANTIZING_FORMS = frozenset(form for form in _QUANTIZING if form.startswith("_quantize32"))
_FROM_QUANTIZED = {
    _QUANT[dequantize_expression(False)]: "(_float32({0}) * _float32({1}))",
    _QUANT[dequantize_expression(True)]: "((_float32({0}) - _float32({2})) * _float32({1}))",
}
"""Dequantize forms reading a quantize of the same loop through its float32 value: an exact
integer in the dtype's range, so ``value - zero`` in float32 is the exact difference, as the
integer round trip gives it, without two conversions per element (a QDQ GELU, five
quantize-dequantize pairs, ran 1.5 ns an element slower for each)."""

_ERF32 = "_erf32(_np.float32({0}))"
"""erf of a float32 step: a rational approximation in float32, within 5.2 ulps (the generated
module's ``_erf32``), several times faster than libm's float64 erf, which the numpy path
matches."""

_CHAIN = {"in0 + in1": (0, 0), "in0 * in1": (1, 1), "in0 - in1": (2, 3), "in0 / in1": (4, 5)}
"""Chainable ops: opcode when the carried value is the first input, and when the second."""
_CHAIN_MIN = 8
"""Steps from which a chain runs as a table of operations rather than straight-line code."""
_CHAIN_DTYPES = frozenset({"float32", "float64", "int32", "int64"})


def python_steps(steps: Sequence[ElementwiseStep], types: dict[str, TensorType]
                 ) -> list[ElementwiseStep]:
    """``steps`` with each expression in its numba form, or None where the cpu loop cannot
    compute the step as numpy does (no form, float16, a float-to-integer cast).

    Example:
        >>> f16 = TensorType((2,), "float16")
        >>> python_steps([("in0 + in1", ("a", "b"), ("y",))], dict(a=f16, b=f16, y=f16))
        [(None, ('a', 'b'), ('y',))]
    """
    found: list[ElementwiseStep] = []
    for expression, ins, outs in steps:
        form = None if expression is None else _PYTHON.get(expression)
        if expression == "erf(in0)" and types[outs[0]].dtype == "float32":
            form = _ERF32
        dtypes = {types[name].dtype for name in (*ins, *outs)}
        if not dtypes <= _DTYPES or (expression == "in0" and types[ins[0]].dtype in _FLOATS
                                      and types[outs[0]].dtype not in _FLOATS | {"bool"}):
            form = None  # C's float-to-integer conversion of NaN or out-of-range is undefined
        found.append((form, ins, outs))
    return found


@dataclass(frozen=True)
class CpuLoop:
    """The generated source of one run: the numba kernel (over units ``lo`` to ``hi``: the
    output's elements, or its rows where an input is read along a trailing or leading block
    of axes), the job function that runs it over blocks of units on the helper threads,
    and, when some inputs are gathered into one array, the plain Python wrapper that gathers
    them (else None)."""

    kernel: str
    wrapper: str | None
    arguments: tuple[TensorType, ...]
    """Types of the kernel's arguments, in order (its signature): inputs, then the output."""
    entries: str = ""
    """The source of the entry points (:data:`_ENTRIES`, :func:`_bound`)."""
    operands: tuple[TensorType, ...] = ()
    """Types of the call's arrays: the run's inputs, then its output."""


def _padded(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + shape


def _layout(inputs: Sequence[TensorType], out: tuple[int, ...]) -> tuple[int, list[str]] | None:
    """A split axis and, per input, how the loop reads it: ``full`` (flat index), ``one``
    (size 1), ``inner`` (axes from the split on), ``outer`` (axes before it); None if no
    split fits every input."""
    ndim = len(out)
    for split in range(ndim + 1):
        kinds = []
        for tensor in inputs:
            shape = _padded(tensor.shape, ndim)
            ones = [d for d in range(ndim) if shape[d] == 1 and out[d] != 1]
            if shape == out:
                kinds.append("full")
            elif all(shape[d] == 1 for d in range(ndim)):
                kinds.append("one")
            elif shape[split:] == out[split:] and all(d < split for d in ones) and all(
                    shape[d] == 1 for d in range(split)):
                kinds.append("inner")
            elif shape[:split] == out[:split] and all(shape[d] == 1 for d in range(split, ndim)):
                kinds.append("outer")
            else:
                break
        else:
            return split, kinds
    return None


@dataclass(frozen=True)
class _Chain:
    """Steps ``first..last`` of a run, each combining the previous result with one value."""

    first: int
    last: int
    head: str  # what the first step carries in
    opcodes: tuple[int, ...]
    values: tuple[str, ...]  # the size-1 inputs, one per step


def _chains(run: ElementwiseRun, steps: Sequence[ElementwiseStep], types: dict[str, TensorType],
            kinds: dict[str, str]) -> list[_Chain]:
    """The stretches of the run in which every step combines the previous step's result (read
    nowhere else) with the value of a size-1 input, all in one dtype."""
    uses: dict[str, int] = {}
    for _, ins, _ in steps[run.first : run.last + 1]:
        for name in ins:
            uses[name] = uses.get(name, 0) + 1
    found = []
    k = run.first
    while k <= run.last:
        opcodes: list[int] = []
        values: list[str] = []
        head = ""
        j = k
        while j <= run.last:
            expression, ins, outs = steps[j]
            raw = _RAW.get(expression or "")
            dtype = types[outs[0]].dtype
            if raw is None or dtype not in _CHAIN_DTYPES or any(types[n].dtype != dtype
                                                                 for n in ins):
                break
            carried = steps[j - 1][2][0] if j > k else None
            position = _carried_position(ins, carried, kinds, uses)
            if position is None:
                break
            if j == k:
                head = ins[position]
            opcodes.append(_CHAIN[raw][position])
            values.append(ins[1 - position])
            j += 1
        if j - k >= _CHAIN_MIN:
            found.append(_Chain(k, j - 1, head, tuple(opcodes), tuple(values)))
            k = j
        else:
            k += 1
    return found


def _carried_position(ins: tuple[str, ...], carried: str | None, kinds: dict[str, str],
                      uses: dict[str, int]) -> int | None:
    """Which input (0 or 1) carries the chain's value; the other must be a size-1 input."""
    if len(ins) != 2:
        return None
    if carried is None:  # the first step: either input may carry, the other is the value
        return 0 if kinds.get(ins[1]) == "one" else 1 if kinds.get(ins[0]) == "one" else None
    if uses.get(carried) != 1:
        return None
    for position in (0, 1):
        if ins[position] == carried and kinds.get(ins[1 - position]) == "one":
            return position
    return None


_RAW = {python: raw for raw, python in _PYTHON.items() if raw in _CHAIN}


def loop_source(run: ElementwiseRun, steps: Sequence[ElementwiseStep], types: dict[str, TensorType]
                ) -> CpuLoop | None:
    """The source of the loop computing ``run`` (``steps`` in numba form, from
    :func:`python_steps`); None if an input broadcasts in a way the loop does not read."""
    out = types[run.output]
    found = _layout([types[n] for n in run.inputs], out.shape)
    if found is None:
        return None
    split, kind_list = found
    kinds = dict(zip(run.inputs, kind_list, strict=True))
    chains = _chains(run, steps, types, kinds)
    inside = {k for chain in chains for k in range(chain.first, chain.last + 1)}
    read = {chain.head for chain in chains}
    read.update(n for k in range(run.first, run.last + 1) if k not in inside
                for n in steps[k][1])
    direct = [n for n in run.inputs if n in read]
    variable = {name: f"x{i}" for i, name in enumerate(direct)}
    arguments = [*variable.values(), *(f"g{c}" for c in range(len(chains))), "y"]
    # The arrays read along the loop are sliced to its range, so that their indices count
    # from 0: numba wraps negative indices around, and over ``range(lo, hi)`` LLVM cannot
    # rule them out, so every load became a select and a scalar insert (no vectors: a QDQ
    # residual add ran 1.7 ns an element).
    nested = any(kinds[n] in ("inner", "outer") for n in direct)
    cols = " * ".join(f"y.shape[{d}]" for d in range(split, out.ndim)) or "1"
    span = "[lo * cols:hi * cols]" if nested else "[lo:hi]"
    head = [f"def kernel({', '.join(arguments)}, lo, hi):", "    n = y.size",
            *([f"    cols = {cols}"] if nested else []), f"    yv = y.reshape(n){span}"]
    for name, var in variable.items():
        part = {"full": span, "outer": "[lo:hi]"}.get(kinds[name], "")
        head.append(f"    {var}v = {var}.reshape({var}.size){part}")
        if kinds[name] == "one":
            head.append(f"    {var}s = {var}v[0]")
    head += [f"    g{c}v = g{c}.reshape(g{c}.size)" for c in range(len(chains))]
    index = {"full": "[i]", "inner": "[j]", "outer": "[r]"}
    operand = {name: f"{var}s" if kinds[name] == "one" else f"{var}v{index[kinds[name]]}"
               for name, var in variable.items()}
    elements = prod(out.shape)
    if nested:
        head += ["    for r in range(hi - lo):",
                 "        for j in range(cols):", "            i = r * cols + j"]
        pad = " " * 12
        width = prod(out.shape[split:])
        units = elements // width if width else 0
        block = max(1, JOB_ELEMENTS // max(width, 1))
    else:
        head.append("    for i in range(hi - lo):")
        pad = " " * 8
        units, block = elements, JOB_ELEMENTS
    body = _body(run, steps, types, operand, chains, pad)
    tables = [f"_ops{c} = _np.array({list(chain.opcodes)}, _np.int8)"
              for c, chain in enumerate(chains)]
    kernel = "\n".join([*tables, *head, *body, f"{pad}yv[i] = t{run.last}", ""])
    argument_types = [types[n] for n in direct]
    argument_types += [TensorType((len(chain.values),), types[steps[chain.first][2][0]].dtype)
                       for chain in chains]
    entries = _ENTRIES.format(", ".join(arguments), units, block)
    return CpuLoop(kernel, _wrapper(run, direct, chains, types), (*argument_types, out),
                   entries + _bound(run, direct, chains, types, arguments, units),
                   tuple(types[n] for n in (*run.inputs, run.output)))


_ENTRIES = """

_range = _numba.njit(cache=True, nogil=True, error_model="numpy")(kernel)


def jobs({0}, counters, grain, bell, caller, call, spins):
    if caller:
        _ring(bell)
    total = ({1} + {2} - 1) // {2}
    mine = 0
    while True:
        first, last = _claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        _range({0}, first * {2}, min({1}, last * {2}))
        mine += last - first
    _done(counters, 0, mine)
    return _finish(counters, total, bell, caller, call, spins)
"""
"""A large loop's entry point: ``jobs``, its job function
(:mod:`graphrt.kernels.cpu.job_protocol`) over blocks of units (the units and the block
filled in: the shapes are static). A loop too small to share has ``bound`` instead
(:func:`_bound`): the job protocol's arguments cost a 1000-node chain of small loops half
its time."""


def _bound(run: ElementwiseRun, direct: list[str], chains: list[_Chain],
           types: dict[str, TensorType], arguments: list[str], units: int) -> str:
    """The source of a small loop's entry point: ``bound(addresses)`` runs every unit over
    arrays it makes from their addresses (the run's inputs, then its output: see
    :class:`BoundLoop`), each chain's values gathered from theirs."""
    position = {name: k for k, name in enumerate((*run.inputs, run.output))}

    def array(name: str, variable: str) -> str:
        tensor = types[name]
        shape = tuple(tensor.shape) or (1,)
        return (f"    {variable} = _carray(_pointer(addresses[{position[name]}], "
                f"_{tensor.dtype}), {shape})")

    tables, gathers = [], []  # per chain: its values' places in ``addresses``, their loads
    for c, chain in enumerate(chains):
        dtype = types[chain.values[0]].dtype
        at = [position[name] for name in chain.values]
        tables.append(f"_at{c} = _np.array({at}, _np.int64)")
        gathers += [f"    g{c} = _np.empty({len(at)}, _{dtype})",
                    f"    for q in range({len(at)}):",
                    f"        g{c}[q] = _pointer(addresses[_at{c}[q]], _{dtype})[0]"]
    return "\n".join(["", "", *tables, "", "", "def bound(addresses):",
                      *(array(name, f"x{i}") for i, name in enumerate(direct)), *gathers,
                      array(run.output, "y"), f"    _range({', '.join(arguments)}, 0, {units})",
                      ""])


def _wrapper(run: ElementwiseRun, direct: list[str], chains: list[_Chain],
             types: dict[str, TensorType]) -> str | None:
    """The Python function that gathers each chain's values into one array for the kernel."""
    if not chains:
        return None
    param = {name: f"a{i}" for i, name in enumerate(run.inputs)}
    # bytes.join reads each (contiguous) array's buffer: the fastest gather from Python.
    gathers = [f"_frombuffer(b''.join(({''.join(param[v] + ', ' for v in chain.values)})), "
               f"_{types[chain.values[0]].dtype})" for chain in chains]
    call = [param[n] for n in direct] + gathers + ["y"]
    return "\n".join([f"def call(_run, {', '.join([*param.values(), 'y'])}):",
                      f"    _run({', '.join(call)})", ""])


def _body(run: ElementwiseRun, steps: Sequence[ElementwiseStep], types: dict[str, TensorType],
          operand: dict[str, str], chains: list[_Chain], pad: str) -> list[str]:
    """The loop body: one line per step, one inner loop over its table per chain."""
    starts = {chain.first: (c, chain) for c, chain in enumerate(chains)}
    lines = []
    quantized: dict[str, str] = {}  # a quantize's output -> its float32 value (an integer)
    k = run.first
    while k <= run.last:
        if k in starts:
            c, chain = starts[k]
            cast = f"_{types[steps[chain.last][2][0]].dtype}"
            lines += [f"{pad}a = {cast}({operand[chain.head]})",
                      f"{pad}for q in range({len(chain.opcodes)}):",
                      f"{pad}    v = g{c}v[q]", f"{pad}    o = _ops{c}[q]"]
            for opcode, form in enumerate(("a + v", "a * v", "a - v", "v - a", "a / v")):
                lines += [f"{pad}    {'if' if opcode == 0 else 'elif'} o == {opcode}:",
                          f"{pad}        a = {cast}({form})"]
            lines += [f"{pad}    else:", f"{pad}        a = {cast}(v / a)",
                      f"{pad}t{chain.last} = a"]
            operand[steps[chain.last][2][0]] = f"t{chain.last}"
            k = chain.last + 1
            continue
        expression, ins, outs = steps[k]
        assert expression is not None
        if expression in _FROM_QUANTIZED and ins[0] in quantized:  # no integer round trip
            value = _FROM_QUANTIZED[expression].format(
                quantized[ins[0]], *(operand[name] for name in ins[1:]))
        else:
            value = expression.format(*(operand[name] for name in ins))
        if expression in _QUANTIZING_FORMS:
            lines.append(f"{pad}t{k}f = {value}")
            quantized[outs[0]] = f"t{k}f"
            value = f"t{k}f"
        lines.append(f"{pad}t{k} = _{types[outs[0]].dtype}({value})")
        operand[outs[0]] = f"t{k}"
        k += 1
    return lines


def cache_dir() -> Path:
    """Where generated loops and numba's compiled code are kept: ``$GRAPHRT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/graphrt``, else ``~/.cache/graphrt``.

    Example:
        >>> explicit = os.environ.get("GRAPHRT_CACHE_DIR")
        >>> cache_dir() == Path(explicit) if explicit else cache_dir().name == "graphrt"
        True
    """
    explicit = os.environ.get("GRAPHRT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphrt"


_HEADER = """# Generated by graphrt.kernels.cpu.loops: one fused elementwise loop, compiled by numba
import math as _math

import numba as _numba
import numpy as _np

from graphrt.kernels.cpu.fused_math import muladd as _muladd, pointer as _pointer
from graphrt.kernels.cpu.job_protocol import claim as _claim, done as _done, finish as _finish
from graphrt.kernels.cpu.job_protocol import ring as _ring

_carray = _numba.carray
_frombuffer = _np.frombuffer
_f64 = _np.float64


@_numba.njit(inline="always", cache=True)
def _erf32(x):
    # erf of float32 within 5.2 float32 ulps: Eigen's rational approximation in float32,
    # its polynomials in fused multiply-adds, +-1 from where erf rounds to it (3.8325...,
    # which also covers the infinities; NaN stays NaN: the selects compare false). Eight
    # lanes a vector; libm's erf is a call per element, and this in float64 (1.6 ulps)
    # took twice as long.
    f = _np.float32
    x2 = x * x
    p = _muladd(x2, f(-2.72614225801306e-10), f(2.77068142495902e-08))
    p = _muladd(x2, p, f(-2.10102402082508e-06))
    p = _muladd(x2, p, f(-5.69250639462346e-05))
    p = _muladd(x2, p, f(-7.34990630326855e-04))
    p = _muladd(x2, p, f(-2.95459980854025e-03))
    p = _muladd(x2, p, f(-1.60960333262415e-02))
    q = _muladd(x2, f(-1.45660718464996e-05), f(-2.13374055278905e-04))
    q = _muladd(x2, q, f(-1.68282697438203e-03))
    q = _muladd(x2, q, f(-7.37332916720468e-03))
    q = _muladd(x2, q, f(-1.42647390514189e-02))
    r = x * p / q
    r = f(1.0) if x >= f(3.832506856900711) else r
    return f(-1.0) if x <= f(-3.832506856900711) else r


@_numba.njit(inline="always", cache=True)
def _quantize32(x, scale, zero, low, high):
    # graphrt.ops.quantize's per-tensor quantize to an integer, bitwise: x / scale rounded
    # half to even, plus the zero point, clipped, all in float32; NaN becomes 0 as numpy's
    # cast makes it (selects, no branches: the loop vectorizes)
    q = _np.float32(x) / _np.float32(scale)
    r = _np.float32(_np.rint(q) + _np.float32(zero))
    lo = _np.float32(low)
    hi = _np.float32(high)
    r = lo if r < lo else r
    r = hi if r > hi else r
    return r if q == q else _np.float32(0.0)
"""


_LOADED: dict[tuple[str, bool], tuple[Any, Kernel | None]] = {}
"""Compiled loops by module name and whether the loop is large enough to share: its job
function or its loop over addresses, and the gathering wrapper (or None)."""
_LOGGED: set[str] = set()  # the reasons the numpy path was taken, each logged once


def _numpy_path(reason: str) -> None:
    """Log (once per process and reason) why fused runs take the numpy path."""
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        logger.info("graphrt: fused elementwise runs on cpu take the numpy path: %s", reason)


def _numba() -> Any:
    """The numba module, or None (the reason logged once per process)."""
    return load_numba(_numpy_path)


def compile_loop(loop: CpuLoop, parallel: Callable[[], bool] = lambda: False
                 ) -> Kernel | None:
    """The compiled kernel of ``loop`` (positional: the run's inputs, then its output),
    run on the helper threads where the output has :data:`PARALLEL_ELEMENTS` elements or
    more and ``parallel()`` says so on that call (a smaller one is a :class:`BoundLoop`);
    None where numba is missing or cannot compile it (the reason logged once)."""
    numba = _numba()
    if numba is None:
        return None
    last = len(loop.arguments) - 1  # the output; inputs may be read-only (frozen params)
    signature = tuple(numba.types.Array(numba.from_dtype(np.dtype(t.dtype)), t.ndim, "C",
                                        readonly=k != last)
                      for k, t in enumerate(loop.arguments))
    counters, i64 = numba.types.Array(numba.types.int64, 1, "C"), numba.types.int64
    addresses = numba.types.Array(numba.types.int64, 1, "C", readonly=True)
    dtypes = sorted({t.dtype for t in loop.arguments} | set(_DTYPES))
    text = _HEADER + "".join(f"_{d} = _np.{d}_\n" if d == "bool" else f"_{d} = _np.{d}\n"
                             for d in dtypes)
    text += "\n\n" + loop.kernel + loop.entries + ("\n\n" + loop.wrapper if loop.wrapper else "")
    key = hashlib.sha256("\0".join([text, numba.__version__, str(signature)]).encode())
    name = f"graphrt_fused_{key.hexdigest()[:24]}"
    wide = prod(loop.arguments[-1].shape) >= PARALLEL_ELEMENTS
    loaded = _LOADED.get((name, wide))  # the module is the same, its compiled entry is not
    if loaded is None:
        try:
            module = _load(name, text)
            compiled = (numba.njit(numba.types.boolean(*signature, counters, i64, counters,
                                                       numba.types.boolean, i64, i64),
                                   cache=True, nogil=True)(module.jobs) if wide else
                        numba.njit(numba.types.void(addresses), cache=True, nogil=True)(
                            module.bound))
        except (OSError, numba.core.errors.NumbaError) as err:
            reason = f"numba could not compile a run ({type(err).__name__}: {err})"
            _numpy_path(reason)
            compiled_path_lost(reason)
            return None
        loaded = _LOADED[name, wide] = (compiled, module.call if loop.wrapper else None)
    entry, gather = loaded
    if not wide:
        return BoundLoop(entry, loop.operands)
    run = FusedLoop(entry, parallel)
    return run if gather is None else partial(gather, run)


@dataclass(frozen=True)
class FusedLoop:
    """A large compiled loop's call: its job function (``jobs``, numba's dispatcher), on the
    helper threads where ``parallel()`` on that call (and no inter-op lanes hold the cores),
    else on the caller."""

    jobs: Jobs
    parallel: Callable[[], bool]

    def __call__(self, *arrays: Any) -> None:
        run_jobs(self.jobs, self.parallel() and not lanes_running(),
                 (*arrays, np.zeros(2, np.int64), 1))


@dataclass(frozen=True)
class BoundLoop:
    """A small compiled loop (under :data:`PARALLEL_ELEMENTS` elements), reading its arrays
    through their addresses: :meth:`bind_arrays` works them out once per step (an array of
    integers, the run's inputs then its output), so a call unboxes one argument where it
    took one per array (a 1000-node chain of Add/Mul ran 32 loops of 33 arrays each, and
    numba's dispatcher took about 4.7 us a call to unbox them, 0.4 us for 3). A plain call
    works the addresses out every time (:class:`~graphrt.kernels.BindsArrays`)."""

    bound: Callable[[np.ndarray[Any, Any]], None]
    operands: tuple[TensorType, ...]

    def __call__(self, *arrays: Any) -> None:
        call, args = self.bind_arrays(arrays)
        call(*args)

    def bind_arrays(self, arrays: tuple[Any, ...]) -> tuple[Callable[..., None], tuple[Any, ...]]:
        """``(call, ())``: the loop over these arrays, which it keeps alive.

        Raises:
            TypeError: an array is not of its operand's dtype and size, C-contiguous (and
                the output writeable).
        """
        last = len(self.operands) - 1
        if len(arrays) != len(self.operands):
            raise TypeError(f"a fused loop takes {len(self.operands)} arrays, given "
                            f"{len(arrays)}")
        for k, (array, tensor) in enumerate(zip(arrays, self.operands, strict=True)):
            if not (isinstance(array, np.ndarray) and array.dtype == tensor.dtype
                    and array.size == prod(tensor.shape) and array.flags.c_contiguous
                    and (k < last or array.flags.writeable)):
                given = (f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray)
                         else type(array).__name__)
                raise TypeError(f"fused loop array {k}: expected a C-contiguous "
                                f"{'writeable ' if k == last else ''}{tensor.dtype} array of "
                                f"{prod(tensor.shape)} elements, given {given}")
        addresses = np.array([array.ctypes.data for array in arrays], np.int64)
        addresses.flags.writeable = False
        call = _Pinned(self.bound, addresses)
        call.arrays = arrays
        return call, ()


class _Pinned(partial[None]):
    """``loop(addresses)``, holding the arrays those addresses point into."""

    arrays: tuple[Any, ...]


def _load(name: str, text: str) -> Any:
    """Import the generated module ``name`` from the cache directory (written if missing)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        partial = folder / f".{name}.{os.getpid()}.tmp"
        partial.write_text(text)
        os.replace(partial, path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fused_runs(steps: Sequence[ElementwiseStep], exported: set[str], types: dict[str, TensorType],
               parallel: Callable[[], bool] = lambda: False
               ) -> list[tuple[ElementwiseRun, Kernel]]:
    """The runs of ``steps`` (C expressions, as for cuda) that run as one compiled loop on
    cpu, each with its kernel (on the helper threads where large and ``parallel()``, see
    :func:`compile_loop`); runs the loop cannot read, or all runs without numba, are left
    out (they run step by step on numpy).

    Example:
        >>> f32 = TensorType((3,), "float32")
        >>> runs = fused_runs([("in0 + in1", ("a", "b"), ("t",)),
        ...                    ("in0 * in1", ("t", "b"), ("y",))], {"y"},
        ...                   dict(a=f32, b=f32, t=f32, y=f32))
        >>> [(run.first, run.last) for run, _ in runs] in ([(0, 1)], [])  # [] without numba
        True
    """
    python = python_steps(steps, types)
    found = []
    for run in _runs(python, exported):
        if not _worth_compiling(run, python, types):
            continue
        loop = loop_source(run, python, types)
        kernel = None if loop is None else compile_loop(loop, parallel)
        if kernel is not None:
            found.append((run, kernel))
    return found


def _runs(steps: Sequence[ElementwiseStep], exported: set[str]) -> list[ElementwiseRun]:
    """The runs of :func:`~graphrt.ops.elementwise_runs`, and each quantize or dequantize step
    in none as a run of its own: numpy computes one in a pass per operation (divide, rint,
    add, clip, cast), the loop in one."""
    runs = elementwise_runs(steps, exported)
    covered = {k for run in runs for k in range(run.first, run.last + 1)}
    runs += [ElementwiseRun(k, k, tuple(dict.fromkeys(ins)), outs[0])
             for k, (form, ins, outs) in enumerate(steps)
             if k not in covered and form in _QUANTIZING and len(outs) == 1]
    return sorted(runs, key=lambda run: run.first)


def _worth_compiling(run: ElementwiseRun, steps: Sequence[ElementwiseStep],
                     types: dict[str, TensorType]) -> bool:
    """Three steps or more, two over :data:`PARALLEL_ELEMENTS` elements or more (one pass
    over memory, shared by the helper threads, where numpy takes two on one thread: an
    attention's scale and mask), or one the numpy path computes in many passes (erf,
    sigmoid, a quantize or dequantize): shorter runs (a small residual add and relu) gain
    little and would make ``create()`` import numba (about a second)."""
    if run.last - run.first >= 2 or (
            run.last > run.first and prod(types[run.output].shape) >= PARALLEL_ELEMENTS):
        return True
    return any("_math." in (steps[k][0] or "") or steps[k][0] == _ERF32
               or steps[k][0] in _QUANTIZING for k in range(run.first, run.last + 1))
