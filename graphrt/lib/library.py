"""``Library``: the kernels a graph's ``func_name``s refer to."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import orjson

from ..devices import Device, device
from ..devices.base import KIND_CODES
from ..errors import argument_error, describe
from .declarative import FunctionSpec, FusedFunction, LibrarySpec, parse_library_spec
from .shape_functions import ShapeFunction, ShapeFunctionFn

__all__ = ["Kernel", "Library", "LibrarySource"]

Kernel = Callable[..., Any]
"""A kernel: called with its node's input arrays, then its output arrays (destination-passing
style); it writes the outputs and its return value is ignored."""

K = TypeVar("K", bound=Kernel)

RESERVED = ("__nop", "__copy")


def _type_code(spec: str | int | Device) -> int:
    if isinstance(spec, Device):
        return spec.type_code
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    if isinstance(spec, str) and spec in KIND_CODES:
        return KIND_CODES[spec]
    if isinstance(spec, str):
        return device(spec).type_code
    argument_error("register(device=...)", "a kind ('cpu', 'cuda', 'sim'), a type code or a "
                   "Device", spec)


def _check_name(name: object, what: str) -> str:
    """A kernel or function name: a non-empty str that is not a built-in.

    Raises:
        ArgumentError: not a str.
        ValueError: empty, or a built-in (``__nop``, ``__copy``).
    """
    if not isinstance(name, str):
        argument_error(f"a {what} name", "a non-empty str", name)
    if not name or name in RESERVED:
        raise ValueError(f"a {what} name must be a non-empty str other than the built-ins "
                         f"{RESERVED}, given {describe(name)}")
    return name


def _check_kernel(name: str, kernel: object) -> None:
    if not callable(kernel):
        argument_error(f"kernel {describe(name)}", "a callable", kernel)


class Library:
    """Kernels by ``func_name``: Python kernels (generic or for one device type) and
    declarative fused functions (data: safe to load, serializable, run on every device).

    A generic kernel receives the arrays of whatever device its node runs on (write it against
    ``numpy`` ufuncs and it runs on numpy, sim and cupy arrays alike). A kernel registered for a
    device type wins over the generic one on that device type.

    Example:
        >>> import numpy as np
        >>> lib = Library({"add": lambda a, b, out: np.add(a, b, out=out)})
        >>> @lib.register("sub", device="cpu")
        ... def sub(a, b, out):
        ...     np.subtract(a, b, out=out)
        >>> sorted(lib)
        ['add', 'sub']
        >>> _ = lib.define("add_relu", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        ...     {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
        ...     {"op": "relu", "inputs": ["t"], "outputs": ["y"]}]})
        >>> Library.from_json(lib.to_json()).spec() == lib.spec()
        True

    Resolution for a node: a kernel registered for its device type, else a generic Python
    kernel, else a declarative function.
    """

    def __init__(self, kernels: Mapping[str, Kernel] | None = None) -> None:
        self._generic: dict[str, Kernel] = {}
        self._by_device: dict[tuple[str, int], Kernel] = {}
        self._functions: dict[str, FusedFunction] = {}
        self._shape_functions: dict[str, ShapeFunction] = {}
        if kernels is not None and not isinstance(kernels, Mapping):
            argument_error("Library(kernels)", "a mapping of func_name to kernel", kernels)
        for name, kernel in (kernels or {}).items():
            self.register(name, kernel)

    @overload
    def register(self, name: str, fn: K, *, device: str | int | Device | None = None) -> K: ...

    @overload
    def register(self, name: str, fn: None = None, *,
                 device: str | int | Device | None = None) -> Callable[[K], K]: ...

    def register(self, name: str, fn: K | None = None, *,
                 device: str | int | Device | None = None) -> K | Callable[[K], K]:
        """Register ``fn`` as ``name`` (for one device type if ``device`` is given).

        Without ``fn`` it returns a decorator. Registering a name again replaces the kernel.

        Raises:
            ValueError: ``name`` is a built-in (``__nop``, ``__copy``) or empty.
            ArgumentError: (a ``TypeError``) ``name`` is not a str, ``fn`` is not callable,
                or ``device`` is not a device description.
        """
        _check_name(name, "kernel")
        type_code = None if device is None else _type_code(device)

        def add(kernel: K) -> K:
            _check_kernel(name, kernel)
            if type_code is None:
                self._generic[name] = kernel
            else:
                self._by_device[(name, type_code)] = kernel
            return kernel

        return add if fn is None else add(fn)

    def register_shape_func(self, name: str, fn: ShapeFunctionFn,
                            data_dependent: Sequence[bool]) -> ShapeFunction:
        """Give the Python kernel ``name`` a shape function, run on the host before the kernel
        wherever a node's output shape cannot be known from the graph alone.

        ``fn(input_types, data)`` returns the output shapes; ``data[i]`` holds input i's values
        as a host numpy array when ``data_dependent[i]`` is True, else None. Only those inputs
        are copied to the host. (Declarative functions derive theirs from their body.)

        Example:
            >>> lib = Library()
            >>> _ = lib.register_shape_func(
            ...     "my_nonzero", lambda types, data: [(int((data[0] != 0).sum()),)], [True])
            >>> lib.shape_function("my_nonzero").data_dependent
            (True,)
        """
        _check_name(name, "kernel")
        if not callable(fn):
            argument_error(f"the shape function of {describe(name)}", "a callable", fn)
        if isinstance(data_dependent, str | bytes) or not isinstance(data_dependent, Sequence) \
                or not all(isinstance(flag, bool) for flag in data_dependent):
            argument_error(f"data_dependent of {describe(name)}", "a sequence of bools, one per "
                           "input", data_dependent)
        flags = tuple(data_dependent)
        function = ShapeFunction(fn, flags)
        self._shape_functions[name] = function
        return function

    def shape_function(self, name: str) -> ShapeFunction | None:
        """The shape function of ``name``: registered, else its declarative function's."""
        registered = self._shape_functions.get(name)
        if registered is not None:
            return registered
        fused = self._functions.get(name)
        return None if fused is None else fused.shape_function

    def define(self, name: str, function: FunctionSpec | Mapping[str, Any]) -> FusedFunction:
        """Add a declarative fused function (replacing one of that name).

        Raises:
            GraphFormatError: the function is malformed (unknown op, bad attributes, arity,
                dataflow), naming the function, step and op.
        """
        _check_name(name, "function")
        spec = parse_library_spec({"functions": {name: function}})
        fused = FusedFunction(name, spec.functions[name])
        self._functions[name] = fused
        return fused

    @classmethod
    def from_json(cls, source: str | bytes | os.PathLike[str] | dict[str, Any]) -> Library:
        """A library of the declarative functions in a lib document (JSON, bytes, path, dict).

        Loading never executes code from the document.

        Raises:
            GraphFormatError: the document or a function in it is malformed.
        """
        lib = cls()
        lib.load_functions(source)
        return lib

    def load_functions(self, source: str | bytes | os.PathLike[str] | dict[str, Any]) -> None:
        """Add every function of a lib document; nothing is added if one is malformed."""
        spec = parse_library_spec(source)
        functions = {name: FusedFunction(name, fn) for name, fn in spec.functions.items()}
        self._functions.update(functions)

    def merged(self, other: LibrarySource) -> Library:
        """A new library holding this one's kernels and functions, then ``other``'s on top.

        Where both have an entry of the same kind for a name (a generic kernel, a kernel for
        one device type, or a declarative function), ``other``'s wins. Resolution then works
        as usual, so a Python kernel in either still wins over a declarative function. Neither
        library is changed.

        Raises:
            ArgumentError: ``other`` is neither a Library nor a mapping of kernels.

        Example:
            >>> base = Library.from_json({"functions": {"relu1": {"inputs": ["x"],
            ...     "outputs": ["y"], "body": [{"op": "relu", "inputs": ["x"],
            ...     "outputs": ["y"]}]}}})
            >>> sorted(base.merged({"custom": print}))
            ['custom', 'relu1']
        """
        extra = as_library(other)
        result = Library()
        for source in (self, extra):
            result._generic.update(source._generic)
            result._by_device.update(source._by_device)
            result._functions.update(source._functions)
            result._shape_functions.update(source._shape_functions)
        return result

    def spec(self) -> LibrarySpec:
        """The declarative part as a document (Python kernels cannot be serialized)."""
        return LibrarySpec(functions={name: fn.spec for name, fn in self._functions.items()})

    def to_json(self) -> bytes:
        """The declarative part as JSON; ``Library.from_json`` reads it back without loss."""
        return orjson.dumps(self.spec().model_dump(mode="json"), option=orjson.OPT_INDENT_2)

    def resolve(self, name: str, device_type: int) -> Kernel | FusedFunction | None:
        """What runs ``name`` on ``device_type``: a kernel registered for that device type,
        else a generic kernel, else a declarative function (bound to its node at create())."""
        kernel = self._by_device.get((name, device_type))
        if kernel is None:
            kernel = self._generic.get(name)
        return self._functions.get(name) if kernel is None else kernel

    def __contains__(self, name: object) -> bool:
        return (name in self._generic or name in self._functions
                or any(key[0] == name for key in self._by_device))

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._generic) | set(self._functions)
                           | {key[0] for key in self._by_device}))

    def __len__(self) -> int:
        return len(set(self))

    def __repr__(self) -> str:
        return f"Library({len(self)} kernels)"


LibrarySource = Library | Mapping[str, Kernel]
"""What ``graphrt.create`` accepts as a lib: a :class:`Library` or a mapping of callables."""


def as_library(lib: LibrarySource) -> Library:
    """``lib`` as a :class:`Library` (a mapping is wrapped, each kernel checked).

    Raises:
        ArgumentError: not a Library or a mapping; a name that is not a str, or a kernel that
            is not callable (naming it).
        ValueError: a name that is empty or a built-in (``__nop``, ``__copy``).
    """
    if isinstance(lib, Library):
        return lib
    if isinstance(lib, Mapping):
        return Library(lib)
    argument_error("lib", "a graphrt.Library or a mapping of names to kernels", lib)
