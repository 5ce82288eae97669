"""Standard ops whose target shape is written in shape variables: ``reshape_symbolic`` and
``broadcast_to_symbolic``.

A model with symbolic input dimensions computes shapes from them (``batch * heads``, a mask of
``[batch, 1, seq, seq]``). ``reshape`` and ``broadcast_to`` take a fixed target, so they cannot
say "batch rows of seq"; these two take the target as dimension expressions (the grammar of
graph JSON: ints, names, ``+ - * //``) and read each variable's value from the *shape* of one
of their extra inputs (``dims``: variable → ``[input, axis]``). Only shapes are read, never
data, so the shape function needs nothing from the device and the ops fuse like their fixed
twins.

Example:
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("reshape_symbolic")
    >>> attrs = op.attrs(shape=["batch", 1, 1, "seq"], dims={"batch": (1, 0), "seq": (1, 1)})
    >>> x, ids = TensorType((6,), "float32"), TensorType((2, 3), "int64")
    >>> op.infer([x, ids], attrs, [None, None])[0].shape
    (2, 1, 1, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..schema.symbolic import Expr, parse_dim
from .base import Attrs, OpDef, OpError, TensorType, broadcast, register_op

__all__: list[str] = []


class SymbolicShapeAttrs(Attrs):
    """``shape``: the target, each dimension an int or an expression in the variables;
    ``dims``: for each variable, the ``(input, axis)`` whose size it is (input 0 is the
    tensor being reshaped or broadcast; the others are read for their shapes only)."""

    shape: list[int | str]
    dims: dict[str, tuple[int, int]]


@lru_cache(maxsize=1024)
def _parse(text: str) -> Expr:
    return parse_dim(text)


def _target(name: str, types: Sequence[TensorType], attrs: SymbolicShapeAttrs
            ) -> tuple[int, ...]:
    if not types:
        raise OpError(f"{name}: expected the input and the inputs giving the variables, "
                      "given none")
    env = {}
    for var, (index, axis) in attrs.dims.items():
        if not 1 <= index < len(types) or not -types[index].ndim <= axis < types[index].ndim:
            raise OpError(f"{name}: variable {var!r} reads axis {axis} of input {index}, which "
                          f"does not exist ({len(types)} inputs)")
        env[var] = types[index].shape[axis]
    shape = []
    for dim in attrs.shape:
        if isinstance(dim, int):
            shape.append(dim)
            continue
        try:
            expr = _parse(dim)
            shape.append(expr.evaluate(env))
        except ValueError as err:
            raise OpError(f"{name}: dimension {dim!r}: {err}") from None
        except KeyError:
            missing = sorted(expr.variables - env.keys())
            raise OpError(f"{name}: dimension {dim!r} uses {missing}, which dims does not "
                          "give") from None
        except ZeroDivisionError:
            raise OpError(f"{name}: dimension {dim!r} divides by 0 at {env}") from None
    if any(d < 0 for d in shape):
        raise OpError(f"{name}: shape {attrs.shape} is {shape}, with a negative dimension")
    return tuple(shape)


def _reshape_infer(types: Sequence[TensorType], attrs: SymbolicShapeAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    shape = _target("reshape_symbolic", types, attrs)
    size, want = 1, 1
    for d in types[0].shape:
        size *= d
    for d in shape:
        want *= d
    if size != want:
        raise OpError(f"reshape_symbolic: shape {attrs.shape} is {list(shape)} ({want} "
                      f"elements); the input has shape {list(types[0].shape)} ({size} "
                      "elements)")
    return [TensorType(shape, types[0].dtype)]


def _reshape_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     attrs: SymbolicShapeAttrs) -> None:
    xp.copyto(outputs[0], inputs[0].reshape(outputs[0].shape))


def _broadcast_infer(types: Sequence[TensorType], attrs: SymbolicShapeAttrs,
                     data: Sequence[Any]) -> list[TensorType]:
    shape = _target("broadcast_to_symbolic", types, attrs)
    try:
        ok = broadcast(types[0].shape, shape) == shape
    except OpError:
        ok = False
    if not ok:
        raise OpError(f"broadcast_to_symbolic: an input of shape {list(types[0].shape)} does "
                      f"not broadcast to shape {attrs.shape} = {list(shape)}")
    return [TensorType(shape, types[0].dtype)]


def _broadcast_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: SymbolicShapeAttrs) -> None:
    if outputs[0].size:
        xp.copyto(outputs[0], inputs[0])


register_op(OpDef(name="reshape_symbolic", attrs=SymbolicShapeAttrs, arity=None,
                  infer=_reshape_infer, compute=_reshape_compute))
register_op(OpDef(name="broadcast_to_symbolic", attrs=SymbolicShapeAttrs, arity=None,
                  infer=_broadcast_infer, compute=_broadcast_compute))

