"""``loop``: a while loop whose body is a nested program of standard ops, run by the op itself.

Loops whose trip count is known when the model is converted are unrolled there (ONNX
converters); ``loop`` is for the others: a trip count or a condition only the data decide (a
``while`` with no count, a count read from an input), or more iterations than unrolling
should make. Its inputs are the trip count ``M`` (int64, one element), the initial condition
(bool, one element), the carried values, then the values the body reads from outside (weights,
constants, outer activations). Its outputs are the carried values after the last iteration,
which keep their types from iteration to iteration, so they are planned like any other
storage.

The body is a list of steps over numbered slots: slot 0 is the iteration number, slot 1 the
condition, then the carried values and the outside values in input order, then each step's
outputs. ``results`` names the slots of the next condition and of the next carried values.
Each iteration runs the steps in order with each op's own shape function and reference
(``infer`` and ``compute``), in the device's array namespace; the loop reads its condition on
the host between iterations, so it runs outside recorded device graphs.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("loop")
    >>> attrs = op.attrs(n_carried=1, n_slots=5, results=(1, 4),
    ...                  body=({"op": "add", "inputs": (2, 3), "outputs": (4,)},))
    >>> x, step = np.zeros(2, "float32"), np.ones(2, "float32")
    >>> types = [TensorType((), "int64"), TensorType((), "bool"), TensorType((2,), "float32"),
    ...          TensorType((2,), "float32")]
    >>> op.infer(types, attrs, [None] * 4)
    [TensorType(shape=(2,), dtype='float32')]
    >>> out = np.empty(2, "float32")
    >>> op.compute(np, [np.array(3), np.array(True), x, step], [out], attrs)
    >>> out.tolist()
    [3.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field, PrivateAttr

from ..schema import parse_dtype
from .base import Attrs, OpDef, OpError, TensorType, get_op, host_values, register_op

__all__: list[str] = []

_SLOTS = Field(ge=0, le=1 << 20)


class LoopStep(Attrs):
    """One step of a loop body: a standard op over numbered slots."""

    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: dict[str, Any] = Field(default_factory=dict)


class LoopAttrs(Attrs):
    """A loop's body and how its slots are laid out (see the module docstring)."""

    body: tuple[LoopStep, ...]
    n_carried: int = Field(ge=0)
    n_slots: int = _SLOTS
    results: tuple[int, ...]
    _program: list[tuple[OpDef, Any, LoopStep, tuple[bool, ...]]] | None = PrivateAttr(None)

    def program(self) -> list[tuple[OpDef, Any, LoopStep, tuple[bool, ...]]]:
        """Each step's op, parsed attributes, step and data dependence (parsed once)."""
        if self._program is None:
            program = []
            for index, step in enumerate(self.body):
                try:
                    op = get_op(step.op)
                    parsed = op.attrs.model_validate(step.attrs)
                except (OpError, ValueError) as err:  # an unknown op, bad attributes
                    raise OpError(f"loop: body step {index} ({step.op!r}): {err}") from None
                arity, made = op.arity, op.outputs_for(parsed)
                if (arity is not None and len(step.inputs) != arity) or (
                        not step.inputs and arity != 0) or len(step.outputs) != made:
                    raise OpError(f"loop: body step {index} ({step.op!r}) has "
                                  f"{len(step.inputs)} inputs and {len(step.outputs)} "
                                  f"outputs; the op takes {arity or 'one or more'} and "
                                  f"makes {made}")
                program.append((op, parsed, step, op.needs_data(len(step.inputs))))
            self._program = program
        return self._program


def _check_layout(attrs: LoopAttrs, n_inputs: int) -> None:
    if n_inputs < 2 + attrs.n_carried:
        raise OpError(f"loop: needs the trip count, the condition and {attrs.n_carried} "
                      f"carried values, given {n_inputs} inputs")
    if len(attrs.results) != 1 + attrs.n_carried:
        raise OpError(f"loop: results names {len(attrs.results)} slots, expected the "
                      f"condition and {attrs.n_carried} carried values")
    defined = set(range(n_inputs))
    for index, step in enumerate(attrs.body):
        unset = [slot for slot in step.inputs if slot not in defined]
        if unset or any(slot >= attrs.n_slots for slot in step.outputs):
            raise OpError(f"loop: body step {index} ({step.op!r}) reads slot "
                          f"{unset[0] if unset else step.inputs} before it is set, or writes "
                          f"past the {attrs.n_slots} slots")
        defined.update(step.outputs)
    missing = [slot for slot in attrs.results if slot not in defined]
    if missing:
        raise OpError(f"loop: result slot {missing[0]} is never set")


def _loop_infer(types: Sequence[TensorType], attrs: LoopAttrs, data: Sequence[Any]
                ) -> list[TensorType]:
    _check_layout(attrs, len(types))
    attrs.program()
    return list(types[2:2 + attrs.n_carried])


def _flag(xp: Any, array: Any, what: str) -> Any:
    values = host_values(xp, array).reshape(-1)
    if values.size != 1:
        raise OpError(f"loop: {what} must have one element, it has {values.size}")
    return values[0]


def _loop_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: LoopAttrs) -> None:
    program, n = attrs.program(), attrs.n_carried
    trips, running = int(_flag(xp, inputs[0], "the trip count")), bool(
        _flag(xp, inputs[1], "the condition"))
    slots: list[Any] = [None] * attrs.n_slots
    slots[:len(inputs)] = inputs
    carried = list(inputs[2:2 + n])
    # on the device, like every other value: the condition, and a fresh iteration number
    # each time (the body may carry it on)
    slots[1] = xp.empty_like(inputs[0], dtype=np.bool_, shape=())
    slots[1][...] = True
    iteration = 0
    while running and iteration < trips:
        number = xp.empty_like(inputs[0], dtype=np.int64, shape=())
        number[...] = iteration
        slots[0] = number
        slots[2:2 + n] = carried
        for op, parsed, step, needs in program:
            arrays = [slots[slot] for slot in step.inputs]
            types = [TensorType(tuple(a.shape), a.dtype.name) for a in arrays]
            data = [host_values(xp, a) if need else None for a, need in zip(arrays, needs,
                                                                       strict=True)]
            results = [xp.empty_like(inputs[0], dtype=parse_dtype(t.dtype).numpy, shape=t.shape)
                       for t in op.infer(types, parsed, data)]
            op.compute(xp, arrays, results, parsed)
            for slot, result in zip(step.outputs, results, strict=True):
                slots[slot] = result
        running = bool(_flag(xp, slots[attrs.results[0]], "the body's condition"))
        carried = [slots[slot] for slot in attrs.results[1:]]
        for k, (value, out) in enumerate(zip(carried, outputs, strict=True)):
            if value.shape != out.shape or value.dtype != out.dtype:
                raise OpError(f"loop: iteration {iteration} gives carried value {k} as "
                              f"{value.dtype}{list(value.shape)}, but it is "
                              f"{out.dtype}{list(out.shape)}: a loop's state keeps its type")
        iteration += 1
    for value, out in zip(carried, outputs, strict=True):
        out[...] = value


def _carried(attrs: LoopAttrs) -> int:
    return attrs.n_carried


register_op(OpDef("loop", LoopAttrs, None, _loop_infer, _loop_compute, num_outputs=_carried))
