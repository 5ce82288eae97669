"""Host arrays that never change while they live (published params), and values derived from
them once: a kernel that prepares a weight (packs it for a micro-kernel) does so once per
loaded weight instead of on every run.

The executor freezes every param it publishes on a host device (its own copy, which it then
only reads: loading params publishes new arrays, never writes old ones). A kernel asks
:func:`derived` for its prepared form of an input: computed once for a frozen array (and its
views), kept while the array lives, and computed on every call for anything else, since that
memory may be written between runs (activations, a ``set_input`` of a param name, caller
memory bound with zero copy).

Example:
    >>> import numpy as np
    >>> weight = np.arange(4.0)
    >>> freeze(weight)
    >>> first = derived(weight, "doubled", lambda: weight * 2)
    >>> first is derived(weight, "doubled", lambda: weight * 2)  # computed once
    True
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

__all__ = ["derived", "freeze", "is_frozen"]

_lock = threading.Lock()
# id of a frozen memory's owner -> (the owner, weakly; its derived values by (view, key))
_frozen: dict[int, tuple[weakref.ref[np.ndarray[Any, Any]], dict[Hashable, Any]]] = {}


def _root(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The array that owns ``array``'s memory (the last array of its ``base`` chain)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _forget(ident: int) -> None:
    """Drop the entry of a frozen memory that died (a weakref finalizer). It takes no lock:
    the garbage collector may run it on a thread that holds ``_lock`` already (an
    allocation inside :func:`freeze`), which deadlocked; one dict operation is atomic, and
    an entry whose owner lives (the id reused) is kept."""
    entry = _frozen.get(ident)
    if entry is not None and entry[0]() is None:
        _frozen.pop(ident, None)


def freeze(array: np.ndarray[Any, Any]) -> None:
    """Make ``array`` read-only and promise that its memory never changes while it lives.

    Only for memory graphrt owns and no one else can reach writable (a param's own copy).
    """
    array.flags.writeable = False
    root = _root(array)
    with _lock:
        entry = _frozen.get(id(root))
        if entry is not None and entry[0]() is root:
            return
        _frozen[id(root)] = (weakref.ref(root), {})  # new, or the id of a dead owner reused
    weakref.finalize(root, _forget, id(root))


def _values(array: Any) -> dict[Hashable, Any] | None:
    """The derived values of the frozen memory ``array`` views; None if it is not frozen."""
    if not isinstance(array, np.ndarray) or array.flags.writeable:
        return None
    root = _root(array)
    entry = _frozen.get(id(root))
    return entry[1] if entry is not None and entry[0]() is root else None


def is_frozen(array: Any) -> bool:
    """Whether ``array`` is a view of memory :func:`freeze` was given (and still read-only)."""
    return _values(array) is not None


def derived(array: Any, key: Hashable, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per frozen ``array`` and ``key`` (then kept while the array
    lives), or on every call when ``array`` is not frozen."""
    values = _values(array)
    if values is None:
        return make()
    # Kernels are handed the same view object on every run: found by identity first, through
    # an entry that leaves with the view (a weak reference; the id is never a stale one).
    seen = values.get((id(array), key))
    if seen is not None and seen[0]() is array:
        return seen[1]
    view = (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str,
            key)
    value = values.get(view)
    if value is None:
        value = values[view] = make()  # forgotten with the memory's owner
    ident = (id(array), key)
    values[ident] = (weakref.ref(array, lambda _: values.pop(ident, None)), value)
    return value
