"""Data types of graph entries: TVM's ``dltype`` strings and DLPack type codes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from math import prod

import ml_dtypes
import numpy as np

from ..errors import describe

__all__ = ["LOW_PRECISION", "MAX_NDIM", "DType", "dims_problem", "dtype_from_code", "dtype_of",
           "parse_dtype", "shape_problem"]

MAX_NDIM = 64
"""The most dimensions a numpy array (and so a tensor) may have."""
_INTP_MAX = 2**63 - 1

# DLPack type codes.
INT, UINT, FLOAT, BFLOAT, BOOL = 0, 1, 2, 4, 6
# DLPack 1.1's codes of the low-precision floats (each its own code, bits 8 or 4).
FLOAT8_E4M3FN, FLOAT8_E4M3FNUZ, FLOAT8_E5M2, FLOAT8_E5M2FNUZ, FLOAT8_E8M0FNU = 10, 11, 12, 13, 14
FLOAT4_E2M1FN = 17

LOW_PRECISION: tuple[str, ...] = tuple(name for name in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn", "int4", "uint4", "int2", "uint2") if hasattr(ml_dtypes, name))
"""The float8, float4, 4-bit and 2-bit integer types (ONNX's FLOAT8E4M3FN ... INT2), whose
numpy dtypes come from ml_dtypes; numpy itself cannot compute in them. Those the installed
ml_dtypes has: float8_e8m0fnu, float4_e2m1fn, int2 and uint2 need ml_dtypes 0.5."""

_ML_DTYPES = frozenset({"bfloat16", *LOW_PRECISION})


@dataclass(frozen=True)
class DType:
    """One scalar data type, as graphs, params blobs and DLPack describe it.

    Attributes:
        name: the ``dltype`` string (``"float32"``, ``"bool"``, ``"float8_e4m3fn"``, ...).
        code: DLPack type code (0 int, 1 uint, 2 float, 4 bfloat, 10 to 14 the float8
            types, 17 float4_e2m1fn); bool is uint with 1 bit, as TVM writes it, and
            int4/uint4/int2/uint2 are int or uint with 4 or 2 bits.
        bits: bits per element as DLPack counts them (1 for bool, 4 for int4, uint4 and
            float4_e2m1fn, 2 for int2 and uint2).

    Sub-byte types (bool, the 4-bit and the 2-bit ones) take one whole byte per element in
    memory, in params blobs and in bundles: ml_dtypes' numpy representation, unpacked (an
    ONNX tensor's packed nibbles are unpacked when the model is read).
    """

    name: str
    code: int
    bits: int

    @property
    def itemsize(self) -> int:
        """Bytes one element occupies in memory (a bool, an int4 or a float4 takes a whole
        byte)."""
        return (self.bits + 7) // 8

    @cached_property
    def numpy(self) -> np.dtype[np.generic]:
        """The numpy dtype of this type (bfloat16 and the low-precision types come from
        ml_dtypes)."""
        if self.name in _ML_DTYPES:
            return np.dtype(getattr(ml_dtypes, self.name))  # type: ignore[no-any-return]
        return np.dtype(self.name)

    def __str__(self) -> str:
        return self.name


_DTYPES: dict[str, DType] = {
    "bool": DType("bool", UINT, 1),
    "bfloat16": DType("bfloat16", BFLOAT, 16),
    **{f"float{b}": DType(f"float{b}", FLOAT, b) for b in (16, 32, 64)},
    **{f"int{b}": DType(f"int{b}", INT, b) for b in (8, 16, 32, 64)},
    **{f"uint{b}": DType(f"uint{b}", UINT, b) for b in (8, 16, 32, 64)},
    **{d.name: d for d in (
        DType("float8_e4m3fn", FLOAT8_E4M3FN, 8), DType("float8_e4m3fnuz", FLOAT8_E4M3FNUZ, 8),
        DType("float8_e5m2", FLOAT8_E5M2, 8), DType("float8_e5m2fnuz", FLOAT8_E5M2FNUZ, 8),
        DType("float8_e8m0fnu", FLOAT8_E8M0FNU, 8), DType("float4_e2m1fn", FLOAT4_E2M1FN, 4),
        DType("int4", INT, 4), DType("uint4", UINT, 4), DType("int2", INT, 2),
        DType("uint2", UINT, 2)) if d.name in LOW_PRECISION},
}
_BY_CODE: dict[tuple[int, int], DType] = {(d.code, d.bits): d for d in _DTYPES.values()}
_BY_CODE[(BOOL, 8)] = _DTYPES["bool"]  # DLPack >= 0.8 spells bool as kDLBool, 8 bits
_BY_NUMPY: dict[np.dtype[np.generic], DType] = {d.numpy: d for d in _DTYPES.values()}

SUPPORTED = ", ".join(_DTYPES)


def parse_dtype(text: str) -> DType:
    """Parse a ``dltype`` string such as ``"float32"``.

    Raises:
        ValueError: the string names no supported type; the message lists the supported ones.

    Example:
        >>> parse_dtype("int8").itemsize
        1
    """
    dtype = _DTYPES.get(text)
    if dtype is None:
        raise ValueError(f"unsupported dtype {text[:40]!r} (supported: {SUPPORTED})")
    return dtype


def dtype_from_code(code: int, bits: int, lanes: int) -> DType:
    """The type a DLPack ``(code, bits, lanes)`` triple describes.

    Raises:
        ValueError: vector types (lanes != 1) or an unknown code/bits pair.
    """
    dtype = _BY_CODE.get((code, bits))
    if dtype is None or lanes != 1:
        raise ValueError(f"unsupported DLPack type (code {code}, bits {bits}, lanes {lanes})")
    return dtype


def dtype_of(np_dtype: np.dtype[np.generic]) -> DType | None:
    """The graph type of a numpy dtype, or None when graphs have no such type."""
    return _BY_NUMPY.get(np_dtype)


def dims_problem(shape: Sequence[object]) -> str | None:
    """Why ``shape`` cannot be a numpy shape at all (too many dimensions, a dimension that is
    not an integer in ``[0, 2**63)``), or None; :func:`shape_problem` also checks the size."""
    if len(shape) > MAX_NDIM:
        return f"shape has {len(shape)} dimensions, more than the {MAX_NDIM} numpy allows"
    for axis, dim in enumerate(shape):
        if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= _INTP_MAX:
            return f"dimension {axis} is {describe(dim)}, not an integer in [0, 2**63)"
    return None


def shape_problem(shape: Sequence[object], itemsize: int) -> str | None:
    """Why numpy could not hold a tensor of this shape and item size, or None when it can.

    numpy's rule: at most :data:`MAX_NDIM` dimensions, each an integer in ``[0, 2**63)``, and
    the product of the non-zero dimensions times the item size below ``2**63`` (so a
    ``(0, 2**62)`` float32 tensor, empty as it is, cannot exist either). Callers raise their
    own error class with the tensor's name in front.

    Example:
        >>> shape_problem((0, 2**62), 4)[-64:]
        'bytes ignoring its zero dimensions; numpy allows less than 2**63'
        >>> shape_problem([2, 3], 4) is None
        True
    """
    problem = dims_problem(shape)
    if problem is not None:
        return problem
    span = itemsize * prod(dim for dim in shape if isinstance(dim, int) and dim)
    if span > _INTP_MAX:
        return (f"shape {describe(tuple(shape), 120)} would span {describe(span)} bytes "
                "ignoring its zero dimensions; numpy allows less than 2**63")
    return None
