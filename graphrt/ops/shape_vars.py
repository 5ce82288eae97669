"""Standard ops for shapes that follow the graph's shape variables: ``reshape_symbolic`` and
``broadcast_to_symbolic`` (a target written in the variables), ``with_shape_vars`` (any op
whose attributes are written in them: a ``topk`` of ``k = min(300, count)``), ``shape_of``
(a tensor's shape as data) and ``arange`` (``Range`` with tensor bounds, whose length is data
dependent).

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

import numpy as np

from ..schema.symbolic import Expr, parse_dim
from .base import OPS, Attrs, OpDef, OpError, TensorType, broadcast, register_op

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


class ShapeOfAttrs(Attrs):
    """``start``, ``end``: the axes whose sizes are returned (ONNX ``Shape``'s slice)."""

    start: int = 0
    end: int | None = None


def _shape_of_infer(types: Sequence[TensorType], attrs: ShapeOfAttrs,
                    data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"shape_of: expected 1 input, given {len(types)}")
    return [TensorType((len(range(types[0].ndim)[attrs.start:attrs.end]),), "int64")]


def _shape_of_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: ShapeOfAttrs) -> None:
    sizes = inputs[0].shape[attrs.start:attrs.end]
    if sizes:
        outputs[0][...] = sizes


class ArangeAttrs(Attrs):
    """No attributes: ``arange(start, limit, delta)`` with 0-d tensors, ONNX ``Range``."""


def _arange_infer(types: Sequence[TensorType], attrs: ArangeAttrs,
                  data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 3:
        raise OpError(f"arange: expected start, limit and delta, given {len(types)} inputs")
    for t, role in zip(types, ("start", "limit", "delta"), strict=True):
        if t.shape not in ((), (1,)) or np.dtype(t.dtype).kind not in "iu":
            raise OpError(f"arange: {role} must be one integer, given {t.dtype}"
                          f"{list(t.shape)}")
    if any(d is None for d in data):
        raise OpError("arange: infer needs the values of start, limit and delta; none given")
    start, limit, delta = (int(np.asarray(d).reshape(-1)[0]) for d in data)
    if delta == 0:
        raise OpError("arange: delta is 0")
    return [TensorType((max(-(-(limit - start) // delta), 0),), types[0].dtype)]


def _arange_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: ArangeAttrs) -> None:
    out = outputs[0]
    if out.size:  # start + delta * i, made in place on the device where the bounds live
        out.fill(1)
        xp.cumsum(out, out=out)
        xp.subtract(out, 1, out=out)
        xp.multiply(out, inputs[2].reshape(()), out=out)
        xp.add(out, inputs[0].reshape(()), out=out)


class WithShapeVarsAttrs(Attrs):
    """``op`` with attributes ``attrs`` in which some ints are dimension expressions, written
    ``{"dim": text}`` (``{"k": {"dim": "min(300, count)"}}``), resolved from the shapes of
    the inputs after the op's own ``inputs`` (``dims``: variable → ``(input, axis)``);
    ``outputs``: the op's output count."""

    op: str
    attrs: dict[str, Any]
    dims: dict[str, tuple[int, int]]
    inputs: int
    outputs: int


def _resolve(value: Any, env: dict[str, int]) -> Any:
    """``{"dim": expression}`` evaluated, in lists too; any other value as it is."""
    if isinstance(value, dict) and set(value) == {"dim"}:
        return _parse(value["dim"]).evaluate(env)
    if isinstance(value, list):
        return [_resolve(v, env) for v in value]
    return value


_RESOLVED: dict[tuple[int, tuple[tuple[int, ...], ...]],
                tuple[WithShapeVarsAttrs, OpDef, Any]] = {}
"""Resolved attributes per (attrs object, input shapes): a run at shapes seen before
validates nothing again (bounded: cleared when full)."""


def _resolved(types_or_shapes: Sequence[tuple[int, ...]], attrs: WithShapeVarsAttrs
              ) -> tuple[OpDef, Any]:
    """The wrapped op and its attributes with every expression evaluated."""
    key = (id(attrs), tuple(tuple(shape) for shape in types_or_shapes))
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is attrs:
        return hit[1], hit[2]
    op, resolved = _resolve_attrs(types_or_shapes, attrs)
    if len(_RESOLVED) >= 4096:
        _RESOLVED.clear()
    _RESOLVED[key] = (attrs, op, resolved)  # holding attrs keeps its id from being reused
    return op, resolved


def _resolve_attrs(types_or_shapes: Sequence[tuple[int, ...]], attrs: WithShapeVarsAttrs
                   ) -> tuple[OpDef, Any]:
    op = OPS.get(attrs.op)
    if op is None:
        raise OpError(f"with_shape_vars: unknown op {attrs.op!r}")
    env = {}
    for var, (index, axis) in attrs.dims.items():
        if not attrs.inputs <= index < len(types_or_shapes) or not (
                -len(types_or_shapes[index]) <= axis < len(types_or_shapes[index])):
            raise OpError(f"with_shape_vars: variable {var!r} reads axis {axis} of input "
                          f"{index}, which does not exist")
        env[var] = types_or_shapes[index][axis]
    try:
        values = {key: _resolve(value, env) for key, value in attrs.attrs.items()}
        return op, op.attrs.model_validate(values)
    except (KeyError, ValueError, ZeroDivisionError) as err:
        raise OpError(f"with_shape_vars: the attributes {attrs.attrs} of {attrs.op!r} cannot "
                      f"be evaluated at {env}: {err}") from None


def _with_vars_infer(types: Sequence[TensorType], attrs: WithShapeVarsAttrs,
                     data: Sequence[Any]) -> list[TensorType]:
    op, resolved = _resolved([t.shape for t in types], attrs)
    return op.infer(types[:attrs.inputs], resolved, data[:attrs.inputs])


def _with_vars_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: WithShapeVarsAttrs) -> None:
    op, resolved = _resolved([x.shape for x in inputs], attrs)
    op.compute(xp, inputs[:attrs.inputs], outputs, resolved)


register_op(OpDef(name="with_shape_vars", attrs=WithShapeVarsAttrs, arity=None,
                  infer=_with_vars_infer, compute=_with_vars_compute,
                  num_outputs=lambda attrs: attrs.outputs))
register_op(OpDef(name="shape_of", attrs=ShapeOfAttrs, arity=1, infer=_shape_of_infer,
                  compute=_shape_of_compute))
register_op(OpDef(name="arange", attrs=ArangeAttrs, arity=3, infer=_arange_infer,
                  compute=_arange_compute, data_dependent=(True, True, True)))
register_op(OpDef(name="reshape_symbolic", attrs=SymbolicShapeAttrs, arity=None,
                  infer=_reshape_infer, compute=_reshape_compute))
register_op(OpDef(name="broadcast_to_symbolic", attrs=SymbolicShapeAttrs, arity=None,
                  infer=_broadcast_infer, compute=_broadcast_compute))

