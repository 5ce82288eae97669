"""The Open Inference Protocol's tensor datatypes and graphrt's dtypes, both ways.

The protocol names datatypes ``BOOL``, ``UINT8`` ... ``FP64``, ``BF16`` and ``BYTES``; graphrt's
tensors are the ``dltype`` names of its graphs. ``BYTES`` (strings) has no graphrt dtype, so a
request that sends it for a numeric input is refused like any other mismatch.

Example:
    >>> protocol_datatype("float32"), graphrt_dtype("FP16")
    ('FP32', 'float16')
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["DATATYPES", "graphrt_dtype", "protocol_datatype"]

DATATYPES = MappingProxyType({
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "bfloat16": "BF16",
})
"""graphrt dtype → the protocol's datatype, for every dtype a graph may hold."""

_BY_DATATYPE = MappingProxyType({datatype: dtype for dtype, datatype in DATATYPES.items()})


def protocol_datatype(dtype: str) -> str:
    """The protocol's name of a graphrt dtype (``"float32"`` → ``"FP32"``).

    Raises:
        KeyError: not a dtype a graph may hold (a bundle's manifest checks this when loaded).
    """
    return DATATYPES[dtype]


def graphrt_dtype(datatype: str) -> str | None:
    """The graphrt dtype of a protocol datatype, or None for one graphrt has no tensor of
    (``BYTES``, or a name the protocol does not define).

    Example:
        >>> graphrt_dtype("BYTES") is None
        True
    """
    return _BY_DATATYPE.get(datatype)
