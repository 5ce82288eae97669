"""Helpers shared by the converters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ConversionError
from ..builder import Builder
from ..model import OnnxNode
from ..registry import ConvertFn, converter

__all__ = ["const_floats", "const_ints", "optional_const", "same_as", "simple", "unary"]


def const_ints(b: Builder, name: str, what: str) -> list[int]:
    """The values of constant input ``name`` as a list of ints (sizes computed from the
    model's symbolic dimensions come as :class:`~graphrt.onnx.symint.SymInt`, which keep
    their expressions).

    Raises:
        ConversionError: a value is NaN or infinite (no integer stands for it).
    """
    values = np.asarray(b.constant_value(name, what)).reshape(-1)
    symbolic = b.symbolic_ints(name)
    if symbolic is not None:
        return symbolic
    if values.dtype.kind not in "iub" and not np.isfinite(values.astype(np.float64)).all():
        bad = values[~np.isfinite(values.astype(np.float64))][0]
        raise ConversionError(f"{b.source}: {what} must be integers, given {bad} (input "
                              f"{name!r})")
    return [int(v) for v in values]


def const_floats(b: Builder, name: str, what: str) -> list[float]:
    """The values of constant input ``name`` as a list of floats."""
    return [float(v) for v in np.asarray(b.constant_value(name, what)).reshape(-1)]


def optional_const(b: Builder, n: OnnxNode, index: int, what: str) -> Any:
    """Input ``index``'s constant value, or None when the input is omitted."""
    name = n.input(index)
    return None if name is None else b.constant_value(name, what)


def same_as(b: Builder, value: str, like: str) -> str:
    """``value`` cast to ``like``'s dtype (no step when it already has it)."""
    if b.dtype(value) == b.dtype(like):
        return value
    return b.op("cast", [value], {"dtype": b.dtype(like)})[0]


def simple(op_type: str, op: str, *, since: int = 1, until: int | None = None,
           attrs: Callable[[OnnxNode], dict[str, Any]] | None = None) -> ConvertFn:
    """Register ``op_type`` as standard op ``op`` over all its inputs."""

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        inputs = [name for name in n.inputs if name]
        return b.op(op, inputs, attrs(n) if attrs else {})

    return converter(op_type, since=since, until=until)(convert)


def unary(op_type: str, op: str, **kwargs: Any) -> ConvertFn:
    """Register a one-input ONNX op as a one-input standard op."""
    return simple(op_type, op, **kwargs)
