"""Checks of what a caller hands a run context: positions by name, arrays, shapes and dtypes.

Stateless, and shared by the context's feeds (:mod:`graphrt.executor.feeds`), its zero-copy
bindings (:mod:`graphrt.executor.bindings`) and the params it publishes. Each check raises at the
boundary, saying what was expected and what was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..devices import Array, Device, is_array, locate
from ..errors import ArgumentError, InputError, argument_error, describe
from ..schema import Graph
from .compiled import CompiledGraph

__all__ = ["check_array", "check_fits", "check_input", "input_position", "is_writable", "listing",
           "locate_as", "output_position", "position_of"]


def input_position(compiled: CompiledGraph, key: int | str) -> int:
    """The position of an input given by name or position."""
    return _named_position(key, compiled.input_index, compiled.graph.input_names, "input")


def output_position(compiled: CompiledGraph, key: int | str) -> int:
    """The position of an output given by name or position (a name several outputs share is
    refused, listing them)."""
    graph = compiled.graph
    candidates = graph.output_aliases.get(key) if isinstance(key, str) else None
    if candidates:
        raise InputError(f"output name {describe(key)} is ambiguous: {len(candidates)} "
                         f"outputs come from nodes of that name; give one of "
                         f"{listing(candidates)} (or the position)")
    return _named_position(key, compiled.output_index, graph.output_names, "output")


def check_input(compiled: CompiledGraph, eid: int, array: Array, what: str) -> None:
    """``array`` can be the input: its dtype, and its shape within the graph's bounds."""
    entry = compiled.graph.entries[eid]
    shapes = compiled.shapes
    if shapes is None or entry.dims is None:
        if tuple(array.shape) != entry.shape or array.dtype != entry.dtype.numpy:
            raise InputError(f"{what}: expected shape {entry.shape} {entry.dtype}, given "
                             f"shape {tuple(array.shape)} {array.dtype}")
        return
    if array.dtype != entry.dtype.numpy:
        raise InputError(f"{what}: expected dtype {entry.dtype} (shape "
                         f"{list(entry.shape_text)}), given {array.dtype}")
    shapes.check_input(eid, tuple(array.shape), what)


def check_fits(graph: Graph, views: Sequence[Array], eid: int, array: Array, what: str) -> None:
    """``array`` has the entry's current shape (its last run's, when dynamic: the shape of its
    view in ``views``) and dtype."""
    entry = graph.entries[eid]
    expected = tuple(views[eid].shape)
    shape, dtype = tuple(array.shape), array.dtype
    if shape != expected or dtype != entry.dtype.numpy:
        raise InputError(f"{what}: expected shape {expected} {entry.dtype}, given "
                         f"shape {shape} {dtype}")


def locate_as(value: Any, what: str) -> tuple[Device, Array]:
    """``value``'s device and its native array there (see :func:`graphrt.devices.locate`),
    an error naming ``what``."""
    try:
        return locate(value)
    except InputError as err:
        raise type(err)(f"{what}: {err}") from None


def check_array(value: Any, what: str) -> None:
    """Memory graphrt writes into or binds must be an array, not a list it would copy."""
    if not is_array(value):
        argument_error(what, "an array (numpy, cupy, sim, or a DLPack tensor such as torch's)",
                       value)


def is_writable(array: Array) -> bool:
    """Whether graphrt may write into ``array``: not where its flags say it is read-only."""
    flags = getattr(array, "flags", None)
    return bool(getattr(flags, "writeable", True))


def _named_position(key: object, index: Mapping[str, int], names: tuple[str, ...],
                    kind: str) -> int:
    """The position of an input or output given by name or position."""
    if isinstance(key, str):
        position = index.get(key)
        if position is None:
            raise InputError(f"unknown {kind} {describe(key)}; the graph's {kind}s are: "
                             f"{listing(names)}")
        return position
    return position_of(key, len(names), kind)


def position_of(key: object, count: int, kind: str) -> int:
    """``key`` as a position among ``count`` (inputs, outputs, nodes, ...)."""
    if isinstance(key, bool) or not isinstance(key, int):
        raise ArgumentError(f"{kind} key must be a name (str) or a position (int), given "
                            f"{describe(key)}")
    if not 0 <= key < count:
        raise InputError(f"{kind} index {describe(key)} is out of range: the graph has {count} "
                         f"{kind}s")
    return key


def listing(names: tuple[str, ...], limit: int = 20) -> str:
    """Names as ``'a', 'b', ...`` (the first ``limit``, then how many in all)."""
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
