"""A strict reader and writer of the safetensors format: tensors as plain bytes, no pickle.

Layout: an unsigned 64-bit little-endian length ``N``, then ``N`` bytes of a UTF-8 JSON header,
then the data. The header maps each tensor name to ``{"dtype", "shape", "data_offsets"}`` (the
offsets are relative to the start of the data) and may hold ``"__metadata__"``, a str → str
map. The reader checks everything before it returns a single array: the header length against
the buffer, the JSON (no duplicate keys), every dtype, that ``prod(shape) * itemsize`` is the
byte length, and that the tensors tile the data exactly (sorted by offset, no gap, no overlap,
nothing after the last). Arrays are read-only zero-copy views of the buffer (an ``mmap`` of
the file, when a bundle is loaded). Errors are :class:`~graphrt.errors.BundleError` naming the
member and the tensor.

Example:
    >>> import io, numpy as np
    >>> stream = io.BytesIO()
    >>> _ = write_safetensors(stream, {"w": np.arange(3, dtype="float32")})
    >>> read_safetensors(memoryview(stream.getvalue()))["w"]
    array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import Any, Protocol

import numpy as np

from ..errors import BundleError, describe
from ..schema import DType, dtype_of, parse_dtype, shape_problem
from ..schema.dtypes import LOW_PRECISION

__all__ = [
    "MAX_HEADER_BYTES",
    "BinaryWriter",
    "TensorInfo",
    "read_safetensors",
    "read_safetensors_header",
    "safetensors_dtype",
    "write_safetensors",
]

MAX_HEADER_BYTES = 100 * 1000 * 1000
"""The largest header accepted (the reference implementation's limit)."""

DATA_ALIGNMENT = 64
"""The writer pads the header so the data starts at a multiple of this many bytes."""

_MAX_DIGITS = 20
_CODES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
          "F16": "float16", "BF16": "bfloat16", "U32": "uint32", "I32": "int32",
          "F32": "float32", "U64": "uint64", "I64": "int64", "F64": "float64",
          **{code: name for code, name in {
              "F8_E4M3": "float8_e4m3fn", "F8_E4M3FNUZ": "float8_e4m3fnuz",
              "F8_E5M2": "float8_e5m2", "F8_E5M2FNUZ": "float8_e5m2fnuz",
              "F8_E8M0": "float8_e8m0fnu",
              # graphrt's own codes: safetensors' F4 packs two values a byte, and it has no
              # 4-bit or 2-bit integers; these hold one value a byte, as graphrt does in memory.
              "F4_E2M1FN_U8": "float4_e2m1fn", "I4_U8": "int4", "U4_U8": "uint4",
              "I2_U8": "int2", "U2_U8": "uint2"}.items() if name in LOW_PRECISION}}
_NAMES = {name: code for code, name in _CODES.items()}
_LENGTH = struct.Struct("<Q")
_METADATA = "__metadata__"

Array = np.ndarray[Any, Any]


class BinaryWriter(Protocol):
    """Where :func:`write_safetensors` writes: anything with a binary ``write``."""

    def write(self, data: bytes | memoryview, /) -> int: ...


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header; ``start`` and ``end`` are offsets in the buffer."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    start: int
    end: int


def safetensors_dtype(dtype: DType) -> str:
    """The safetensors code of a graph dtype (``float32`` → ``"F32"``).

    Example:
        >>> safetensors_dtype(parse_dtype("bfloat16"))
        'BF16'
    """
    return _NAMES[dtype.name]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key[:100]!r} appears twice")
        result[key] = value
    return result


def _header_int(text: str) -> int:
    """An integer of the header: 64-bit values have at most 20 digits (a longer one is refused
    before Python converts it)."""
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _decode_header(raw: bytes, where: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        if not text.startswith("{"):
            raise ValueError("it does not start with '{'")
        header = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_header_int)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise BundleError(f"{where}: the header is not valid JSON: {err}") from None
    if not isinstance(header, dict):
        raise BundleError(f"{where}: the header is not a JSON object")
    return header


def _check_metadata(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise BundleError(f"{where}: '__metadata__' must map str to str")
    return value


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _tensor_info(name: str, value: object, base: int, where: str) -> TensorInfo:
    label = f"{where}: tensor {name[:100]!r}"
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data_offsets"}:
        raise BundleError(f"{label} must have exactly 'dtype', 'shape' and 'data_offsets'")
    code, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(code, str) or code not in _CODES:
        raise BundleError(f"{label} has dtype {describe(code, 20)}, which graphrt does not "
                          f"support (supported: {', '.join(_CODES)})")
    if not isinstance(shape, list):
        raise BundleError(f"{label} has shape {describe(shape, 60)}, which is not a list")
    dtype = parse_dtype(_CODES[code])
    problem = shape_problem(shape, dtype.itemsize)
    if problem is not None:
        raise BundleError(f"{label} has shape {describe(shape, 60)}: {problem}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets))
            or offsets[0] > offsets[1]):
        raise BundleError(f"{label} has data_offsets {describe(offsets, 60)}, which are not "
                          "[begin, end] with 0 <= begin <= end < 2**63")
    nbytes = prod(shape) * dtype.itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise BundleError(f"{label} is {dtype}{shape}, which is {nbytes} bytes, but its "
                          f"data_offsets {offsets} span {offsets[1] - offsets[0]} bytes")
    return TensorInfo(name, dtype, tuple(shape), base + offsets[0], base + offsets[1])


def read_safetensors_header(buffer: memoryview, where: str = "safetensors"
                            ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Check a safetensors buffer's header and layout; return its tensors and metadata.

    Args:
        buffer: the whole file's bytes (an ``mmap`` view, or bytes).
        where: how errors name the buffer (a bundle passes its member name).

    Raises:
        BundleError: truncation, a header that lies about lengths or offsets, bad JSON, an
            unsupported dtype, a shape that does not match the byte length, gaps or overlaps.

    Example:
        >>> import io, numpy as np
        >>> stream = io.BytesIO()
        >>> _ = write_safetensors(stream, {"b": np.zeros(2, "int8")}, {"source": "doc"})
        >>> tensors, metadata = read_safetensors_header(memoryview(stream.getvalue()))
        >>> tensors["b"].shape, metadata
        ((2,), {'source': 'doc'})
    """
    size = len(buffer)
    if size < _LENGTH.size:
        raise BundleError(f"{where} is truncated: {size} bytes, but the header length alone "
                          f"takes {_LENGTH.size}")
    (length,) = _LENGTH.unpack(buffer[: _LENGTH.size])
    if length > MAX_HEADER_BYTES:
        raise BundleError(f"{where}: the header claims {length:,} bytes, more than the "
                          f"{MAX_HEADER_BYTES:,} allowed")
    base = _LENGTH.size + length
    if base > size:
        raise BundleError(f"{where} is truncated: the header claims {length:,} bytes but only "
                          f"{size - _LENGTH.size:,} follow the length")
    header = _decode_header(bytes(buffer[_LENGTH.size : base]), where)
    metadata = _check_metadata(header.pop(_METADATA, {}), where)
    tensors = {name: _tensor_info(name, value, base, where) for name, value in header.items()}
    cursor = base
    for info in sorted(tensors.values(), key=lambda t: (t.start, t.end)):
        if info.start != cursor:
            problem = "overlaps the tensor before it" if info.start < cursor else (
                f"leaves a gap of {info.start - cursor} bytes before it")
            raise BundleError(f"{where}: tensor {info.name[:100]!r} (data_offsets "
                              f"[{info.start - base}, {info.end - base}]) {problem}")
        cursor = info.end
    if cursor != size:
        problem = "is truncated" if cursor > size else "has trailing bytes"
        raise BundleError(f"{where} {problem}: the tensors end at byte {cursor:,} but the file "
                          f"has {size:,}")
    return tensors, metadata


def tensor_view(buffer: memoryview, info: TensorInfo) -> Array:
    """A read-only zero-copy array of one tensor (checked by :func:`read_safetensors_header`)."""
    native = info.dtype.numpy
    dtype = native if sys.byteorder == "little" else native.newbyteorder("<")
    count = prod(info.shape)
    array = np.frombuffer(buffer, dtype=dtype, count=count, offset=info.start) if count else (
        np.empty(0, dtype=dtype))
    array = array.reshape(info.shape)
    array.flags.writeable = False
    return array


def read_safetensors(buffer: memoryview, where: str = "safetensors") -> dict[str, Array]:
    """Every tensor of a safetensors buffer as a read-only view, in file order.

    The views keep ``buffer`` (and an ``mmap`` behind it) alive; nothing is copied.

    Raises:
        BundleError: as :func:`read_safetensors_header`.

    Example:
        >>> import io, numpy as np
        >>> stream = io.BytesIO()
        >>> _ = write_safetensors(stream, {"w": np.ones((2, 2), "float16")})
        >>> read_safetensors(memoryview(stream.getvalue()))["w"].dtype
        dtype('float16')
    """
    tensors, _ = read_safetensors_header(buffer, where)
    ordered = sorted(tensors.values(), key=lambda t: t.start)
    return {info.name: tensor_view(buffer, info) for info in ordered}


def _layout(tensors: Mapping[str, Array], metadata: Mapping[str, str] | None
            ) -> tuple[bytes, list[tuple[str, Array]]]:
    """The padded header and the tensors in data order (largest itemsize first, then name)."""
    if _METADATA in tensors:
        raise BundleError(f"a tensor cannot be named {_METADATA!r}: safetensors reserves the name")
    order = sorted(tensors.items(), key=lambda item: (-item[1].dtype.itemsize, item[0]))
    header: dict[str, Any] = {}
    if metadata:
        header[_METADATA] = dict(metadata)
    offset = 0
    for name, array in order:
        dtype = dtype_of(array.dtype.newbyteorder("="))
        if dtype is None:
            raise BundleError(f"tensor {name!r} has dtype {array.dtype}, which safetensors "
                              "bundles cannot hold")
        header[name] = {"dtype": safetensors_dtype(dtype), "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    padding = -(_LENGTH.size + len(text)) % DATA_ALIGNMENT
    return text + b" " * padding, order


def write_safetensors(stream: BinaryWriter, tensors: Mapping[str, Array],
                      metadata: Mapping[str, str] | None = None) -> int:
    """Write host arrays as safetensors to a binary stream; returns the bytes written.

    The header is padded with spaces so the data starts 64-byte aligned, and tensors are laid
    out largest itemsize first, so each starts aligned to its itemsize (as the reference
    writer does). Files interoperate with the ``safetensors`` package.

    Raises:
        BundleError: a dtype safetensors bundles cannot hold.

    Example:
        >>> import io, numpy as np
        >>> write_safetensors(io.BytesIO(), {"x": np.zeros(4, "float32")})
        80
    """
    header, order = _layout(tensors, metadata)
    written = stream.write(_LENGTH.pack(len(header))) + stream.write(header)
    for _, array in order:
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        written += stream.write(data.reshape(-1).view(np.uint8).data)
    return written
