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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = [
    "OPS",
    "Attrs",
    "KernelFactory",
    "OpDef",
    "OpError",
    "TensorType",
    "broadcast",
    "get_op",
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

KernelFactory = Callable[[Any, Any], Callable[..., None]]
"""``factory(xp, attrs)``: a kernel called as ``kernel(*inputs, *outputs)``, specialized once
for its namespace and attributes, so a call costs what a hand-written kernel costs."""


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

    def positional(self, xp: Any, attrs: Any, n_inputs: int) -> Callable[..., None]:
        """This op as ``kernel(*inputs, *outputs)`` for namespace ``xp`` and ``attrs``."""
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
        raise OpError(f"unknown op {name!r} (known: {', '.join(sorted(OPS))})")
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
