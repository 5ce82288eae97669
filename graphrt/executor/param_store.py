"""The params of a compiled graph, held once and read by every run context.

Loading params publishes new arrays (copy-on-write): a run already under way keeps reading the
arrays it started with, and every context takes the new ones at its next run. So params can be
loaded while other threads run, and no context ever holds a copy of its own. The store is the
one way params change: :meth:`ParamStore.load` copies checked values into memory it owns and
publishes them, and each context follows the store with a :class:`ParamReader` of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from ..devices import Array, Device, allocate, backend_for, copier
from ..lib import freeze

__all__ = ["Param", "ParamReader", "ParamStore"]


@dataclass(frozen=True)
class Param:
    """One published param: its array (on the input's device) and when it was published."""

    array: Array
    device: Device
    version: int


class ParamStore:
    """Params by input position, replaced as a whole mapping on every publish.

    Example:
        >>> store = ParamStore()
        >>> store.publish({0: (np.zeros(4, "float32"), graphrt.cpu(0))})  # doctest: +SKIP
        >>> store.version, list(store.current)  # doctest: +SKIP
        (1, [0])
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: Mapping[int, Param] = MappingProxyType({})
        self.version = 0

    def publish(self, arrays: Mapping[int, tuple[Array, Device]]) -> None:
        """Make these the params of their positions (others stay as they were)."""
        with self._lock:
            version = self.version + 1
            current = dict(self.current)
            current.update({position: Param(array, dev, version)
                            for position, (array, dev) in arrays.items()})
            self.current = MappingProxyType(current)
            self.version = version

    def load(self, values: Mapping[int, tuple[str, Device, Array, Device]], *,
             copy: bool = True) -> None:
        """Publish checked params, each ``position: (its name, its device, its array, the
        input's device)``.

        Args:
            values: the params, checked against their inputs (shape, dtype; without ``copy``,
                already on the input's device).
            copy: copy each value into new memory on its input's device, read-only from then
                on; without it, each value is published as it is (``share_params``).

        Raises:
            PlacementError: a device could not give the memory of a copy (nothing is
                published then).
        """
        arrays = {}
        for position, (name, src_dev, src, dev) in values.items():
            array = src
            if copy:
                buffer = allocate(dev, src.nbytes, f"param {name!r}")
                array = backend_for(dev).view(buffer, tuple(src.shape), src.dtype)
                copier(src_dev, dev)(src, array)
                if isinstance(array, np.ndarray):
                    freeze(array)  # only read from now on: kernels may prepare it once
            arrays[position] = (array, dev)
        for dev in {dev for _, dev in arrays.values()}:
            backend_for(dev).synchronize()  # every context's stream may read them next
        self.publish(arrays)

    def bytes_per_device(self) -> dict[Device, int]:
        """Bytes the params hold on each device (once, however many contexts read them)."""
        totals: dict[Device, int] = {}
        for param in self.current.values():
            totals[param.device] = totals.get(param.device, 0) + int(param.array.nbytes)
        return totals


class ParamReader:
    """One run context's place in a :class:`ParamStore`: which published params it has taken.

    Example:
        >>> reader = ParamReader(store)  # doctest: +SKIP
        >>> reader.seen != store.version or reader.take()  # doctest: +SKIP
    """

    def __init__(self, store: ParamStore) -> None:
        self.store = store
        self.seen = store.version  # before current: a publish between is seen
        self.initial = store.current
        self._versions = {position: param.version for position, param in self.initial.items()}

    def take(self) -> dict[int, Param]:
        """The params published since this reader last looked (latest write wins: a param
        published after the context's own ``set_input`` of it replaces that value)."""
        version = self.store.version
        changed = {p: param for p, param in self.store.current.items()
                   if param.version > self._versions.get(p, 0)}
        self.seen = version
        for position, param in changed.items():
            self._versions[position] = param.version
        return changed
