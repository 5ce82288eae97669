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

from typing import NoReturn

__all__ = [
    "ArgumentError",
    "BundleError",
    "ConversionError",
    "DeviceError",
    "ExecutionError",
    "GraphFormatError",
    "GraphrtError",
    "InputError",
    "KernelNotFoundError",
    "PlacementError",
    "RequestError",
    "abridge",
    "describe",
    "expect_type",
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


class RequestError(GraphrtError):
    """A request to ``graphrt serve`` that the server refuses, with the HTTP status to answer.

    The message names what was wrong (the input, the field, expected versus given); the server
    answers ``{"error": message}`` with ``status`` and goes on serving.

    Attributes:
        status: the HTTP status code (4xx for a bad request, 503 when the queue is full, 504
            when the request timed out waiting).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ArgumentError(InputError, TypeError):
    """A public API call got an argument of the wrong kind; the message names the parameter,
    what it expects and what it was given. It is also a ``TypeError``, as Python code expects.

    Example:
        >>> try:
        ...     expect_type(None, dict, name="create(lib=...)", expected="a graphrt.Library")
        ... except TypeError as err:
        ...     print(type(err).__name__, err)
        ArgumentError create(lib=...): expected a graphrt.Library, given None
    """


_MAX_INT_BITS = 128
_MAX_TEXT = 80


def abridge(text: str, limit: int = 1000) -> str:
    """``text`` cut in the middle to about ``limit`` characters, its head and end kept (a
    message quoting thousands of attribute values stays readable).

    Example:
        >>> abridge("x" * 2000 + "end", 100)[70:]
        'xxxxx ... (1903 chars) ... xxxxxxxxxxxxxxxxxxxxxxend'
    """
    if len(text) <= limit:
        return text
    tail = min(300, limit // 4)
    return f"{text[:limit - tail]} ... ({len(text) - limit} chars) ... {text[-tail:]}"


def describe(value: object, limit: int = _MAX_TEXT) -> str:
    """A short description of a user-supplied value that is always safe to put in a message.

    Huge integers (beyond Python's int-to-str limit, or just unreadable) are described by their
    size; long texts are cut; a ``repr`` that raises is replaced by the type's name.

    Example:
        >>> describe(10 ** 5000)
        'an integer of 16610 bits'
        >>> describe("x" * 200)[-17:]
        'xx... (200 chars)'
        >>> describe(None), describe(3)
        ('None', '3')
    """
    if isinstance(value, int) and not isinstance(value, bool) and \
            value.bit_length() > _MAX_INT_BITS:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a user object whose __repr__ raises (or is too big to format)
        return f"a {type(value).__name__}"
    if len(text) > limit:
        size = f"{len(value)} {'bytes' if isinstance(value, bytes) else 'chars'}" \
            if isinstance(value, str | bytes) else f"a {type(value).__name__}"
        return f"{text[:limit]}... ({size})"
    return text


def expect_type(value: object, types: type | tuple[type, ...], *, name: str,
                expected: str) -> None:
    """Raise :class:`ArgumentError` unless ``value`` is an instance of ``types``.

    ``name`` says where (``"create(lib=...)"``); ``expected`` says what in words.

    Example:
        >>> expect_type(3, int, name="benchmark(repeat=...)", expected="an int")
        >>> expect_type("3", int, name="benchmark(repeat=...)", expected="a positive int")
        Traceback (most recent call last):
        ...
        graphrt.errors.ArgumentError: benchmark(repeat=...): expected a positive int, given '3'
    """
    if not isinstance(value, types):
        argument_error(name, expected, value)


def argument_error(name: str, expected: str, given: object) -> NoReturn:
    """Raise :class:`ArgumentError` saying ``name`` expected ``expected`` and was ``given``."""
    shown = describe(given)
    if not isinstance(given, str | bytes | int | float | type(None) | list | tuple | dict):
        shown = f"{type(given).__name__} {shown}" if len(shown) < 40 else type(given).__name__
    raise ArgumentError(f"{name}: expected {expected}, given {shown}")
