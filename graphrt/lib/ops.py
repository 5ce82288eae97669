"""Deprecated: the standard op set moved to :mod:`graphrt.ops` (what each op means) and
:mod:`graphrt.kernels` (how each device runs it). This module re-exports :mod:`graphrt.ops`'
public names for one release."""

from ..ops import (
    OPS,
    Attrs,
    OpDef,
    OpError,
    TensorType,
    broadcast,
    get_op,
    normalize_axis,
    register_op,
    result_dtype,
)

__all__ = [
    "OPS",
    "Attrs",
    "OpDef",
    "OpError",
    "TensorType",
    "broadcast",
    "get_op",
    "normalize_axis",
    "register_op",
    "result_dtype",
]
