"""ONNX converters: random numbers (``RandomUniform``, ``RandomNormal``, ``RandomUniformLike``,
``RandomNormalLike``, ``Bernoulli``, ``Multinomial``), as the standard ops of
:mod:`graphrt.ops.random`.

With a ``seed`` attribute a node gives the same values on every run (graphrt's own values:
ONNX leaves seeded outputs to the runtime); without one, every run draws fresh values. Either
way the step stays a step: it is never computed at conversion, even on a constant input.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> import graphrt
    >>> node = helper.make_node("RandomNormal", [], ["y"], shape=[2, 3], seed=1.0)
    >>> graph = helper.make_graph(
    ...     [node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> module = graphrt.from_onnx(model).create(graphrt.cpu(0))
    >>> (a,), (b,) = module(), module()
    >>> a.shape, a.dtype, bool((a == b).all())
    ((2, 3), dtype('float32'), True)
"""

from __future__ import annotations

import math
from typing import Any

from ..builder import Builder
from ..model import OnnxNode, dtype_name
from ..registry import converter

__all__: list[str] = []

_FLOATS = ("float16", "float32", "float64", "bfloat16")


def _integer(n: OnnxNode, key: str, default: int | None) -> int | None:
    """Attribute ``key`` (an int), or ``default``."""
    value = n.attr(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise n.fail(f"{key} must be an integer, given {value!r:.60}")
    return value


def _number(n: OnnxNode, key: str, default: float | None) -> float | None:
    """Attribute ``key`` (a finite number), or ``default``."""
    value = n.attr(key, default)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(
            value):
        raise n.fail(f"{key} must be a finite number, given {value!r:.60}")
    return float(value)


def _dtype(n: OnnxNode, allowed: tuple[str, ...], default: str | None) -> str | None:
    """The ``dtype`` attribute as a graphrt dtype in ``allowed``, or ``default``."""
    code = _integer(n, "dtype", None)
    if code is None:
        return default
    dtype = dtype_name(code, f"{n.label}: attribute 'dtype'")
    if dtype not in allowed:
        raise n.fail(f"dtype {dtype} is not supported ({n.op_type} makes {', '.join(allowed)})")
    return dtype


def _common(n: OnnxNode) -> dict[str, Any]:
    """The seed, checked: a finite number, or absent."""
    seed = _number(n, "seed", None)
    return {} if seed is None else {"seed": seed}


def _params(n: OnnxNode) -> dict[str, Any]:
    """The distribution's parameters: ``low`` and ``high``, or ``mean`` and ``scale``."""
    if n.op_type.startswith("RandomUniform"):
        return {"low": _number(n, "low", 0.0), "high": _number(n, "high", 1.0)}
    return {"mean": _number(n, "mean", 0.0), "scale": _number(n, "scale", 1.0)}


def _input(n: OnnxNode) -> str:
    """The node's one input, which it needs."""
    name = n.input(0)
    if name is None:
        raise n.fail("input 0 is required")
    return name


@converter("RandomUniform", "RandomNormal")
def _random(b: Builder, n: OnnxNode) -> list[str]:
    shape = n.attr("shape")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise n.fail(f"shape must be a list of integers, given {shape!r:.60}")
    if any(d < 0 for d in shape):
        raise n.fail(f"shape {shape} has a negative dimension")
    op = "random_uniform" if n.op_type == "RandomUniform" else "random_normal"
    return b.op(op, [], {"shape": shape, "dtype": _dtype(n, _FLOATS, "float32"), **_params(n),
                         **_common(n)})


@converter("RandomUniformLike", "RandomNormalLike")
def _random_like(b: Builder, n: OnnxNode) -> list[str]:
    op = "random_uniform_like" if n.op_type == "RandomUniformLike" else "random_normal_like"
    return b.op(op, [_input(n)], {"dtype": _dtype(n, _FLOATS, None), **_params(n),
                                  **_common(n)})


@converter("Bernoulli", since=15)
def _bernoulli(b: Builder, n: OnnxNode) -> list[str]:
    numeric = (*_FLOATS, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "bool")
    return b.op("bernoulli", [_input(n)], {"dtype": _dtype(n, numeric, None), **_common(n)})


@converter("Multinomial")
def _multinomial(b: Builder, n: OnnxNode) -> list[str]:
    size = _integer(n, "sample_size", 1)
    if size is None or size < 0:
        raise n.fail(f"sample_size must be >= 0, given {size}")
    return b.op("multinomial", [_input(n)], {
        "sample_size": size, "dtype": _dtype(n, ("int32", "int64"), "int32"), **_common(n)})
