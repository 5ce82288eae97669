"""The params of a compiled graph, held once and read by every run context.

Loading params publishes new arrays (copy-on-write): a run already under way keeps reading the
arrays it started with, and every context takes the new ones at its next run. So params can be
loaded while other threads run, and no context ever holds a copy of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..devices import Array, Device

__all__ = ["Param", "ParamStore"]


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

    def bytes_per_device(self) -> dict[Device, int]:
        """Bytes the params hold on each device (once, however many contexts read them)."""
        totals: dict[Device, int] = {}
        for param in self.current.values():
            totals[param.device] = totals.get(param.device, 0) + int(param.array.nbytes)
        return totals
