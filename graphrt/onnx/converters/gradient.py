"""ONNX's ``Gradient`` (ai.onnx.preview.training), by reverse-mode differentiation at
conversion.

The gradient of ``y`` (seeded with ones) with respect to each of ``xs`` is built from the steps
that compute ``y``, with one rule per standard op; a step on the path that has no rule is a
:class:`ConversionError` naming it. Broadcasting is undone by summing over the broadcast axes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..builder import Builder, ConvertedStep
from ..model import OnnxNode
from ..registry import converter

__all__: list[str] = []

Rule = Callable[[Builder, ConvertedStep, str], list[str | None]]


def _mul(b: Builder, x: str, y: str) -> str:
    return b.op("multiply", [x, y])[0]


def _rules() -> dict[str, Rule]:
    def add(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        return [g, g]

    def subtract(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        return [g, b.op("negative", [g])[0]]

    def multiply(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        return [_mul(b, g, s.inputs[1]), _mul(b, g, s.inputs[0])]

    def divide(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        d = s.inputs[1]
        quotient = b.op("divide", [g, d])[0]
        return [quotient, b.op("negative", [_mul(b, quotient, s.outputs[0])])[0]]

    def negative(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        return [b.op("negative", [g])[0]]

    def relu(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        zero = b.constant(np.zeros((), b.dtype(s.inputs[0])))
        positive = b.op("greater", [s.inputs[0], zero])[0]
        return [_mul(b, g, b.op("cast", [positive], {"dtype": b.dtype(g)})[0])]

    def exp(b: Builder, s: ConvertedStep, g: str) -> list[str | None]:
        return [_mul(b, g, s.outputs[0])]

    return {"add": add, "subtract": subtract, "multiply": multiply, "divide": divide,
            "negative": negative, "relu": relu, "exp": exp}


_RULES = _rules()


def _unbroadcast(b: Builder, g: str, shape: tuple[int, ...]) -> str:
    have = b.shape(g)
    if have == shape:
        return g
    lead = len(have) - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and
                                have[lead + i] != 1]
    if axes:
        g = b.op("sum", [g], {"axis": axes, "keepdims": False})[0]
    return b.op("reshape", [g], {"newshape": list(shape)})[0]


@converter("ai.onnx.preview.training.Gradient", since=1, until=1)
def gradient(b: Builder, n: OnnxNode) -> list[str]:
    xs, y = list(n.attr("xs")), str(n.attr("y"))
    for name in [*xs, y]:
        if name not in b.names:
            raise n.fail(f"{name!r} is not a value computed before this node")
    target = b.names[y]
    grads = {target: b.filled(1, b.shape(target), b.dtype(target))}
    for step in reversed(b.steps):
        g = next((grads[out] for out in step.outputs if out in grads), None)
        if g is None:
            continue
        rule = _RULES.get(step.op)
        if rule is None or len(step.outputs) != 1:
            raise n.fail(f"cannot differentiate op {step.op!r} (made by {step.source}); "
                         f"supported: {', '.join(sorted(_RULES))}")
        for value, contribution in zip(step.inputs, rule(b, step, g), strict=True):
            if contribution is None or value in b.constants:
                continue
            part = _unbroadcast(b, contribution, b.shape(value))
            grads[value] = part if value not in grads else b.op("add", [grads[value], part])[0]
    results = []
    for x in xs:
        value = b.names[x]
        results.append(grads.get(value) or b.filled(0, b.shape(value), b.dtype(value)))
    return results
