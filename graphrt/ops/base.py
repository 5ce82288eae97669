"""What an op is: attributes, type inference (shape function), data dependence, and a
reference implementation.

Every op has one reference, written against an array namespace ``xp`` (numpy on cpu and sim,
cupy on cuda), destination-passing: ``compute(xp, inputs, outputs, attrs)`` writes
``outputs``. How a device runs an op faster (numba kernels, vendor libraries) is not said
here: :mod:`graphrt.kernels` prepares a kernel per device at ``create()`` and falls back to
this reference.

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

from ..errors import describe

__all__ = [
    "OPS",
    "Attrs",
    "Direct",
    "OpDef",
    "OpError",
    "TensorType",
    "Workspace",
    "accumulator",
    "broadcast",
    "check_fill",
    "gemm_dtype",
    "get_op",
    "host_values",
    "matmul",
    "normalize_axis",
    "numpy_api",
    "register_op",
    "result_dtype",
    "window_attrs",
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

@dataclass(frozen=True)
class Direct:
    """An op that is exactly one array function of the namespace: ``getattr(xp,
    function)(*inputs, *constants, out)`` (``out=out`` where ``out_keyword``), so its
    reference kernel calls that function with nothing in between (a ufunc takes its output
    positionally)."""

    function: str
    constants: tuple[Any, ...] = ()
    out_keyword: bool = False


ElementwiseOf = Callable[[Any, Sequence[TensorType]], str | None]
"""``elementwise_of(attrs, input_types)``: the elementwise expression of one step of an op
that is elementwise only for some attributes and input types (a per-tensor ``quantize``), in
the form of :attr:`OpDef.elementwise`; None where that step is not."""

Bound = Callable[[Sequence[TensorType], Any], list[tuple[TensorType, dict[int, str]]]]
"""``bound(input_types, attrs)``: per output, its largest type and ``{axis: key}`` for each axis
the input values decide (axes with one key have one length: ``unique``'s values, first indices
and counts). A converter plans such an output at the bound, with a shape variable per key."""


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
        elementwise_of: for an op elementwise only for some attributes and input types, the
            expression of one step (see :data:`ElementwiseOf`); ask :meth:`expression`, which
            both fusers (conversion grouping and the providers' runs) use, so they agree.
        direct: the op as one array function of ``xp`` (see :class:`Direct`), or None.
        workspace: the scratch arrays of the reference (see :data:`Workspace`), or None for
            none.
        bound: for an op whose output shapes follow its input values, the largest each output
            can be from the input types alone, and the axes the values decide (see
            :data:`Bound`); None for the others.
        random: the op draws random numbers, so it is not a pure function of its inputs
            (unless seeded): it is never computed at conversion, even on constant inputs.
    """

    name: str
    attrs: type[Attrs]
    arity: int | None
    infer: Infer
    compute: Compute
    data_dependent: tuple[bool, ...] = ()
    num_outputs: int | Callable[[Any], int] = 1
    elementwise: str | None = None
    elementwise_of: ElementwiseOf | None = None
    direct: Direct | None = None
    workspace: Workspace | None = None
    bound: Bound | None = None
    random: bool = False

    def positional(self, xp: Any, attrs: Any, n_inputs: int) -> Callable[..., None]:
        """The reference as ``kernel(*inputs, *outputs)`` for namespace ``xp`` and ``attrs``
        (``kernel(*inputs, *outputs, *workspace)`` where the caller planned a workspace)."""
        direct = self.direct
        if direct is not None:
            function: Callable[..., None] = getattr(xp, direct.function)
            return _direct_call(function, direct, n_inputs)
        compute = self.compute

        def call(*arrays: Any) -> None:
            compute(xp, arrays[:n_inputs], arrays[n_inputs:], attrs)

        return call

    def expression(self, attrs: Any, inputs: Sequence[TensorType]) -> str | None:
        """The elementwise expression of a step of this op with ``attrs`` and input types
        ``inputs``: :attr:`elementwise`, else what :attr:`elementwise_of` says for this step
        (None: the step is not elementwise and fuses with nothing)."""
        if self.elementwise is not None or self.elementwise_of is None:
            return self.elementwise
        return self.elementwise_of(attrs, inputs)

    def outputs_for(self, attrs: Any) -> int:
        """How many outputs the op makes with these attrs."""
        return self.num_outputs(attrs) if callable(self.num_outputs) else self.num_outputs

    def needs_data(self, n_inputs: int) -> tuple[bool, ...]:
        """The data dependence of each of ``n_inputs`` inputs."""
        if self.arity is None:
            flag = self.data_dependent[0] if self.data_dependent else False
            return (flag,) * n_inputs
        return self.data_dependent or (False,) * n_inputs


def _direct_call(function: Callable[..., None], direct: Direct, n_inputs: int
                 ) -> Callable[..., None]:
    """``function`` called as :class:`Direct` says, with no generic wrapper in between (a
    call through ``*args`` costs as much again as a ufunc on a small array)."""
    constants, keyword = direct.constants, direct.out_keyword
    if not constants and not keyword:
        return function  # a ufunc takes its output positionally: ufunc(*ins, out)
    if n_inputs == 1 and len(constants) == 1 and keyword:
        constant = constants[0]

        def unary_with(x: Any, out: Any) -> None:
            function(x, constant, out=out)

        return unary_with
    if n_inputs == 2 and not constants and keyword:
        def binary(a: Any, b: Any, out: Any) -> None:
            function(a, b, out=out)

        return binary

    def call(*arrays: Any) -> None:
        if keyword:
            function(*arrays[:-1], *constants, out=arrays[-1])
        else:
            function(*arrays[:-1], *constants, arrays[-1])

    return call


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
    """numpy broadcasting of shapes, in exact integers and for any rank (numpy's own
    ``broadcast_shapes`` stops at 32 dimensions and at int64).

    Raises:
        OpError: the shapes do not broadcast.

    Example:
        >>> broadcast((3, 1), (4,), ())
        (3, 4)
    """
    ndim = max((len(shape) for shape in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        sizes = [shape[axis] for shape in shapes if len(shape) >= -axis and shape[axis] != 1]
        if len({int(size) for size in sizes}) > 1:
            raise OpError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        # the caller's own int object (an int subclass that carries more survives)
        carried = [size for size in sizes if isinstance(size, int) and type(size) is not int]
        result.append(carried[0] if carried else int(sizes[0]) if sizes else 1)
    return tuple(result)


def window_attrs(strides: Sequence[int] | None, dilations: Sequence[int] | None,
                 pads: Sequence[int] | None, dims: int, op: str = ""
                 ) -> tuple[list[int], list[int], list[int]]:
    """A window op's strides and dilations (1 per spatial axis where not given) and pads
    (begins then ends; 0 where not given), checked.

    Raises:
        OpError: not one value per axis (two for pads), or a stride or dilation below 1, or a
            negative pad (the message starts with ``op``).

    Example:
        >>> window_attrs(None, [2, 2], None, 2)
        ([1, 1], [2, 2], [0, 0, 0, 0])
    """
    where = f"{op}: " if op else ""
    s, d = list(strides or [1] * dims), list(dilations or [1] * dims)
    p = list(pads or [0] * (2 * dims))
    if len(s) != dims or len(d) != dims or len(p) != 2 * dims:
        raise OpError(f"{where}strides {s}, dilations {d} and pads {p} must have {dims}, {dims} "
                      f"and {2 * dims} values for {dims} spatial axes")
    if min(s, default=1) < 1 or min(d, default=1) < 1 or min(p, default=0) < 0:
        raise OpError(f"{where}strides {s} and dilations {d} must be >= 1 and pads {p} >= 0")
    return s, d, p


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


def numpy_api(xp: Any) -> bool:
    """Whether the array namespace ``xp`` is numpy's (cpu and sim) rather than a device
    library's (cupy): the references adapt to what the namespace's API offers (numpy's BLAS
    has no float16 GEMM; ``numpy.einsum`` sums short rows in one pass; reading a value back
    costs nothing in host memory). Which kernel runs an op is never decided here but in
    :mod:`graphrt.kernels`."""
    return xp is np


def host_values(xp: Any, array: Any) -> np.ndarray[Any, Any]:
    """``array``'s values as a plain host numpy array: a view on cpu and sim, a copy read back
    from a device library's array (cupy), for a reference that must see values on the host."""
    if isinstance(array, np.ndarray):
        return array.view(np.ndarray)
    return np.asarray(xp.asnumpy(array))


@lru_cache(maxsize=128)
def gemm_dtype(xp: Any, dtype: Any) -> np.dtype[Any]:
    """The dtype a matrix product of ``dtype`` operands runs in.

    float32 for bfloat16 (cupy has none) and, where ``xp`` is numpy, for float16 (numpy's
    float16 matmul skips BLAS, see docs/robustness.md, and float32 is at least as accurate);
    cupy keeps float16, whose GEMMs use tensor cores and accumulate in float32.
    """
    given: np.dtype[Any] = np.dtype(dtype)
    if given.name == "bfloat16" or (given.name == "float16" and numpy_api(xp)):
        return np.dtype(np.float32)
    return given


def matmul(xp: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` computed in :func:`gemm_dtype` and, with ``out``, cast into it once.

    Returns ``out``, or the product in the GEMM dtype.
    """
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
