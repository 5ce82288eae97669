"""TVM's params blob (``save_param_dict`` format): name → array, little-endian, no pickle.

Example:
    >>> import numpy as np, graphrt
    >>> blob = graphrt.save_params({"w": np.arange(3, dtype="float32")})
    >>> graphrt.load_params(blob)["w"]
    array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from math import prod
from typing import Any

import numpy as np

from .devices import backend_for, locate
from .devices.base import CPU
from .errors import GraphFormatError, InputError, argument_error, describe, expect_type
from .schema import MAX_NDIM, dtype_from_code, dtype_of, shape_problem

__all__ = ["iter_params", "load_params", "save_params", "to_host"]

LIST_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F


class _Reader:
    def __init__(self, blob: memoryview) -> None:
        self.blob = blob
        self.pos = 0

    def take(self, size: int, what: str) -> memoryview:
        if size < 0 or self.pos + size > len(self.blob):
            raise GraphFormatError(f"params blob is truncated: {what} needs {size} bytes at "
                                   f"offset {self.pos}, but the blob has {len(self.blob)} bytes")
        chunk = self.blob[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def iter_params(blob: bytes | bytearray | memoryview) -> Iterator[tuple[str, np.ndarray[Any, Any]]]:
    """Yield ``(name, array)`` pairs from a params blob; arrays are read-only views of ``blob``.

    The whole blob is checked before the first pair is yielded, so a corrupt blob yields nothing.

    Raises:
        GraphFormatError: a wrong magic, truncation, an unsupported dtype, inconsistent sizes,
            duplicate names or trailing bytes; the message gives the offset or the param name.
    """
    expect_type(blob, (bytes, bytearray, memoryview), name="load_params(blob)",
                expected="bytes (a params blob is bytes, bytearray or memoryview)")
    view = memoryview(blob)
    reader = _Reader((view if view.c_contiguous else memoryview(view.tobytes())).cast("B"))
    magic, _reserved = reader.unpack("QQ", "header")
    if magic != LIST_MAGIC:
        raise GraphFormatError(f"not a params blob: magic is {magic:#018x}, expected "
                               f"{LIST_MAGIC:#018x}")
    (count,) = reader.unpack("Q", "name count")
    names = []
    for i in range(count):
        (length,) = reader.unpack("Q", f"length of name {i}")
        raw = reader.take(length, f"name {i}")
        try:
            names.append(bytes(raw).decode("utf-8"))
        except UnicodeDecodeError:
            raise GraphFormatError(f"params blob: name {i} is not UTF-8") from None
    (array_count,) = reader.unpack("Q", "array count")
    if array_count != count:
        raise GraphFormatError(f"params blob has {count} names but {array_count} arrays")
    if len(set(names)) != len(names):
        raise GraphFormatError("params blob names a param twice")
    arrays = [_read_array(reader, name) for name in names]
    if reader.pos != len(reader.blob):
        raise GraphFormatError(f"params blob has {len(reader.blob) - reader.pos} trailing bytes "
                               f"after its last array (offset {reader.pos})")
    yield from zip(names, arrays, strict=True)


def _read_array(reader: _Reader, name: str) -> np.ndarray[Any, Any]:
    what = f"param {describe(name)}"
    magic, _reserved, _dev_type, _dev_id, ndim = reader.unpack("QQiii", what)
    if magic != ARRAY_MAGIC:
        raise GraphFormatError(f"params blob: {what} has array magic {magic:#018x}, expected "
                               f"{ARRAY_MAGIC:#018x}")
    if not 0 <= ndim <= MAX_NDIM:
        raise GraphFormatError(f"params blob: {what} has ndim {ndim}")
    code, bits, lanes = reader.unpack("BBH", what)
    try:
        dtype = dtype_from_code(code, bits, lanes)
    except ValueError as err:
        raise GraphFormatError(f"params blob: {what}: {err}") from None
    shape = reader.unpack(f"{ndim}q", f"shape of {what}")
    (nbytes,) = reader.unpack("q", f"size of {what}")
    problem = shape_problem(shape, dtype.itemsize)
    if problem is not None:
        raise GraphFormatError(f"params blob: {what}: {problem}")
    if nbytes != prod(shape) * dtype.itemsize:
        raise GraphFormatError(f"params blob: {what} is {dtype}{list(shape)}, which is "
                               f"{prod(shape) * dtype.itemsize} bytes, but says {nbytes}")
    data = reader.take(nbytes, f"data of {what}")
    return np.frombuffer(data, dtype=dtype.numpy.newbyteorder("<")).reshape(shape)


def load_params(blob: bytes | bytearray | memoryview) -> dict[str, np.ndarray[Any, Any]]:
    """Read a params blob into a dict of numpy arrays (copies the blob owns nothing of).

    Raises:
        GraphFormatError: the blob is truncated or corrupt.
    """
    return {name: array.copy() for name, array in iter_params(blob)}


def save_params(params: Mapping[str, Any]) -> bytes:
    """Write arrays (numpy, cupy, sim, DLPack) as a params blob TVM can read.

    Raises:
        InputError: a value is not an array, or has a dtype the format cannot hold.
    """
    expect_type(params, Mapping, name="save_params(params)",
                expected="a mapping of param names (str) to arrays")
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(params))]
    arrays = []
    for name, value in params.items():
        expect_type(name, str, name="save_params(params)", expected="param names that are str")
        encoded = name.encode("utf-8")
        out.append(struct.pack("<Q", len(encoded)) + encoded)
        arrays.append((name, to_host(name, value)))
    out.append(struct.pack("<Q", len(arrays)))
    for name, array in arrays:
        dtype = dtype_of(array.dtype.newbyteorder("="))
        if dtype is None:
            raise InputError(f"param {describe(name)} has dtype {array.dtype}, which the params "
                             "format cannot hold")
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        out.append(struct.pack("<QQiii", ARRAY_MAGIC, 0, CPU, 0, array.ndim))
        out.append(struct.pack(f"<BBH{array.ndim}qq", dtype.code, dtype.bits, 1, *array.shape,
                               data.nbytes))
        out.append(data.tobytes())
    return b"".join(out)


def to_host(name: str, value: Any) -> np.ndarray[Any, Any]:
    """A param's value as a host numpy array (copied from a device; numpy passes through).

    Raises:
        ArgumentError: text, bytes, None or a mapping instead of an array, naming the param.
        InputError: the value is not an array, naming the param.

    Example:
        >>> to_host("w", [1.0, 2.0]).dtype
        dtype('float64')
    """
    if value is None or isinstance(value, str | bytes | bytearray | Mapping):
        argument_error(f"param {describe(name)}", "an array (numpy, cupy, anything with "
                       "__dlpack__, or nested lists of numbers)", value)
    try:
        dev, array = locate(value)
    except InputError as err:
        raise InputError(f"param {describe(name)}: {err}") from None
    if dev.type_code == CPU:
        return np.asarray(array)
    host = np.empty(array.shape, dtype=array.dtype)
    backend_for(dev).download(array, host)
    return host
