"""What an op is: attributes, type inference (shape function), data dependence, compute.

Every op is implemented once against an array namespace ``xp`` (numpy on cpu and sim, cupy on
cuda), destination-passing: ``compute(xp, inputs, outputs, attrs)`` writes ``outputs``.

Example (how an op is defined):
    >>> class NoAttrs(Attrs):
    ...     pass
    >>> register_op(OpDef(
    ...     name="example_negate", attrs=NoAttrs, arity=1,
    ...     infer=lambda types, attrs, data: [types[0]],
    ...     compute=lambda xp, ins, outs, attrs: xp.negative(ins[0], out=outs[0]),
    ...     elementwise="-in0"))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from ...errors import describe
from .blas_threads import blas_held
from .host_crew import quiet_helpers

__all__ = [
    "OPS",
    "Attrs",
    "EpilogueFactory",
    "KernelFactory",
    "OpDef",
    "OpError",
    "TensorType",
    "Workspace",
    "accumulator",
    "broadcast",
    "check_fill",
    "gemm_dtype",
    "get_op",
    "matmul",
    "normalize_axis",
    "register_op",
    "result_dtype",
]


class OpError(ValueError):
    """An op cannot take these inputs or attributes; the message says what and why.

    Raised by shape functions and attribute checks; the declarative layer adds which function
    and step it came from and turns it into a :class:`graphrt.GraphFormatError`.
    """


class Attrs(BaseModel):
    """Base of every op's attributes: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype (a numpy dtype name, e.g. ``"float32"``) of a tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)


Infer = Callable[[Sequence[TensorType], Any, Sequence[Any]], list[TensorType]]
"""``infer(input_types, attrs, data)``: the output types. ``data[i]`` is input i's values as a
host numpy array when the op declares that input data-dependent, else None."""

Compute = Callable[[Any, Sequence[Any], Sequence[Any], Any], None]
"""``compute(xp, inputs, outputs, attrs)``: write the outputs (destination-passing)."""

Workspace = Callable[[Any, Sequence[TensorType], Any], list[TensorType]]
"""``workspace(xp, input_types, attrs)``: the scratch arrays one call of the op needs in
namespace ``xp`` (their types follow from the inputs' types and the attributes).

The executor plans them as intermediates that live only for that call and passes them after
the outputs: ``compute`` then finds them in ``outputs[n_outputs:]``, holding garbage. A plain
call (:meth:`OpDef.positional` over inputs and outputs only) passes none: the op allocates."""

KernelFactory = Callable[[Any, Any], Callable[..., None]]
"""``factory(xp, attrs)``: a kernel called as ``kernel(*inputs, *outputs)``, specialized once
for its namespace and attributes, so a call costs what a hand-written kernel costs."""

EpilogueFactory = Callable[[Any, Any, Sequence[TensorType], bool, bool],
                           Callable[..., None] | None]
"""``factory(xp, attrs, input_types, residual, relu)``: the op followed by ``+ residual``
(an array of the output's type) and/or relu, as one kernel
``kernel(*inputs, residual?, out, *workspace)`` that applies them as it stores its results,
with whatever it can decide from the types (a plan) decided here, once; with neither, the op
alone so prepared. None where the op cannot at these types (the steps then run one by one)."""


@dataclass(frozen=True)
class OpDef:
    """One op of the standard set.

    Attributes:
        name: the op's name in declarative functions (``"conv2d"``).
        attrs: the pydantic model of its attributes.
        arity: number of inputs, or None for any number >= 1 (``concatenate``).
        infer: the shape function (see :data:`Infer`); raises :class:`OpError`.
        compute: the implementation (see :data:`Compute`).
        data_dependent: per input, whether ``infer`` needs its values (True) or only its
            shape and dtype (False); e.g. strided_slice with tensor begin/end/strides:
            ``(False, True, True, True)``. Variadic ops use the first entry for every input.
        num_outputs: outputs the op makes, or a function of its attrs (``split``).
        elementwise: for elementwise ops, the body of a cupy ElementwiseKernel over inputs
            ``in0, in1, ...`` producing ``out0`` (e.g. ``"in0 + in1"``), so chains of them fuse
            into one launch on cuda. None for other ops.
        kernel: an optional :data:`KernelFactory` that calls the array function directly;
            without one, :meth:`positional` wraps ``compute``.
        devices: the device types (``"cpu"``, ``"cuda"``, ``"sim"``) that implement the op,
            or None for every device; the ONNX frontend places a step on the first preferred
            device type listed here.
        workspace: the op's scratch arrays (see :data:`Workspace`), or None for none.
        epilogue: where the op can add a residual and apply relu as it stores its output
            (see :data:`EpilogueFactory`), the factory of that fused kernel; a declarative
            function fuses ``op -> add -> relu`` (or ``op -> add``, ``op -> relu``) into it,
            and on cpu runs the op alone through it too (its call prepared at ``create()``).
    """

    name: str
    attrs: type[Attrs]
    arity: int | None
    infer: Infer
    compute: Compute
    data_dependent: tuple[bool, ...] = ()
    num_outputs: int | Callable[[Any], int] = 1
    elementwise: str | None = None
    kernel: KernelFactory | None = None
    devices: frozenset[str] | None = None
    workspace: Workspace | None = None
    epilogue: EpilogueFactory | None = None

    def positional(self, xp: Any, attrs: Any, n_inputs: int) -> Callable[..., None]:
        """This op as ``kernel(*inputs, *outputs)`` for namespace ``xp`` and ``attrs``
        (``kernel(*inputs, *outputs, *workspace)`` where the caller planned a workspace)."""
        if self.kernel is not None:
            return self.kernel(xp, attrs)
        compute = self.compute

        def call(*arrays: Any) -> None:
            compute(xp, arrays[:n_inputs], arrays[n_inputs:], attrs)

        return call

    def outputs_for(self, attrs: Any) -> int:
        """How many outputs the op makes with these attrs."""
        return self.num_outputs(attrs) if callable(self.num_outputs) else self.num_outputs

    def needs_data(self, n_inputs: int) -> tuple[bool, ...]:
        """The data dependence of each of ``n_inputs`` inputs."""
        if self.arity is None:
            flag = self.data_dependent[0] if self.data_dependent else False
            return (flag,) * n_inputs
        return self.data_dependent or (False,) * n_inputs


OPS: dict[str, OpDef] = {}
"""Every registered op by name."""


def register_op(op: OpDef) -> OpDef:
    """Add ``op`` to :data:`OPS` (a name may be registered once)."""
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is registered twice")
    if op.arity is not None and op.data_dependent and len(op.data_dependent) != op.arity:
        raise ValueError(f"op {op.name!r}: data_dependent needs one flag per input")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    """The op called ``name``.

    Raises:
        OpError: no such op; the message lists the known ones.
    """
    op = OPS.get(name)
    if op is None:
        raise OpError(f"unknown op {describe(name)} (known: {', '.join(sorted(OPS))})")
    return op


def result_dtype(*dtypes: str) -> str:
    """numpy's promotion of several dtype names."""
    return str(np.result_type(*[np.dtype(d) for d in dtypes]))


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes.

    Raises:
        OpError: the shapes do not broadcast.
    """
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast"
                      ) from None


def normalize_axis(axis: int, ndim: int) -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative axis.

    Raises:
        OpError: out of range.
    """
    if not -ndim <= axis < ndim:
        raise OpError(f"axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim if ndim else 0


# --------------------------------------------------------------------------------------------
# Precision and fill values shared by the ops

_HALF = frozenset({"float16", "bfloat16"})


@lru_cache(maxsize=128)
def accumulator(dtype: Any) -> np.dtype[Any]:
    """The dtype sums over ``dtype`` accumulate in: float32 for float16 and bfloat16 (whose
    sums lose precision and overflow), else ``dtype`` itself. Results are cast back once.

    Cached: kernels call it on every run, and numpy computes a dtype's name in Python."""
    return np.dtype(np.float32) if np.dtype(dtype).name in _HALF else np.dtype(dtype)


@lru_cache(maxsize=128)
def gemm_dtype(xp: Any, dtype: Any) -> np.dtype[Any]:
    """The dtype a matrix product of ``dtype`` operands runs in.

    float32 for bfloat16 (cupy has none) and, where ``xp`` is numpy, for float16 (numpy's
    float16 matmul skips BLAS and is 60-160x slower than float32, and float32 is at least as
    accurate); cupy keeps float16, whose GEMMs use tensor cores and accumulate in float32.
    """
    given: np.dtype[Any] = np.dtype(dtype)
    if given.name == "bfloat16" or (given.name == "float16" and xp is np):
        return np.dtype(np.float32)
    return given


def matmul(xp: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` computed in :func:`gemm_dtype` and, with ``out``, cast into it once.

    Returns ``out``, or the product in the GEMM dtype.
    """
    if xp is np and quiet_helpers() and a.size * b.shape[-1] < _SMALL_GEMM:
        with blas_held(1):  # OpenBLAS's spinning workers would slow the next convolutions
            return _matmul(xp, a, b, out)
    return _matmul(xp, a, b, out)


_SMALL_GEMM = 1 << 24
"""Multiply-adds below which a host GEMM runs on one BLAS thread while the direct
convolution's helpers are busy (:mod:`graphrt.lib.ops.blas_threads` says why)."""


def _matmul(xp: Any, a: Any, b: Any, out: Any) -> Any:
    work = gemm_dtype(xp, a.dtype)
    if a.dtype != work:
        a = a.astype(work)
    if b.dtype != work:
        b = b.astype(work)
    if out is None:
        return xp.matmul(a, b)
    if out.dtype == work:
        xp.matmul(a, b, out=out)
    else:
        out[...] = xp.matmul(a, b)
    return out


def check_fill(value: float, dtype: str, what: str) -> None:
    """Refuse a fill ``value`` that ``dtype`` cannot hold.

    Integers (and bool) take integral values in their range; floats take any value inside
    their finite range, or an infinity or NaN.

    Raises:
        OpError: names ``what``, the value and the dtype's range.
    """
    kind = np.dtype(dtype).kind if dtype != "bfloat16" else "f"
    if kind in "iub":
        low, high = (0, 1) if kind == "b" else (int(np.iinfo(dtype).min),
                                                 int(np.iinfo(dtype).max))
        if math.isfinite(value) and value == int(value) and low <= int(value) <= high:
            return
        raise OpError(f"{what} {value!r} does not fit {dtype}: expected an integer in "
                      f"[{low}, {high}]")
    if kind == "f" and math.isfinite(value):
        top = float(_float_max(dtype))
        if abs(value) > top:
            raise OpError(f"{what} {value!r} does not fit {dtype}: expected a value in "
                          f"[{-top}, {top}], an infinity or nan")


def _float_max(dtype: str) -> float:
    """The largest finite value of a float dtype (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)  # type: ignore[no-untyped-call]
    return float(np.finfo(np.dtype(dtype)).max)
