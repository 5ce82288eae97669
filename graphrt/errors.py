"""graphrt's one exception hierarchy.

Every error that user input can cause is a :class:`GraphrtError`; messages name what was wrong
and where (node id and name, entry id, func_name, device, expected versus given).

Example:
    >>> import graphrt
    >>> try:
    ...     graphrt.create("{}", {})
    ... except graphrt.GraphFormatError as err:
    ...     print(type(err).__name__)
    GraphFormatError
"""

from __future__ import annotations

__all__ = [
    "BundleError",
    "ConversionError",
    "DeviceError",
    "ExecutionError",
    "GraphFormatError",
    "GraphrtError",
    "InputError",
    "KernelNotFoundError",
    "PlacementError",
]


class GraphrtError(Exception):
    """Base class of every error graphrt raises on purpose."""


class GraphFormatError(GraphrtError):
    """The graph JSON (or a params blob) is malformed or inconsistent."""


class PlacementError(GraphrtError):
    """Storage or a node cannot be placed on the devices given (or would not fit)."""


class DeviceError(GraphrtError):
    """A device cannot be created or used (unknown kind, missing backend, no GPU)."""


class KernelNotFoundError(GraphrtError):
    """The lib has no kernel for a node's func_name on the node's device type."""


class InputError(GraphrtError):
    """An input, output buffer or parameter given by the caller does not fit the graph."""


class ExecutionError(GraphrtError):
    """A kernel raised while the graph ran; the original exception is chained.

    Attributes:
        node_id: id of the node whose kernel raised.
        node_name: that node's name.
        func_name: the kernel's func_name.
        device: the device the node ran on, as text (``"cpu:0"``).
    """

    def __init__(self, message: str, *, node_id: int, node_name: str, func_name: str,
                 device: str) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.node_name = node_name
        self.func_name = func_name
        self.device = device


class ConversionError(GraphrtError):
    """A model cannot be converted: an ONNX model that is malformed, or uses an op, opset or
    dtype graphrt does not support (every such node is listed at once), or needs a value to be
    constant that is not."""


class BundleError(GraphrtError):
    """A bundle on disk is malformed, tampered with or unsafe."""
