"""Storage per device: as planned at ``create()`` and as used by the last run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..devices import Device

__all__ = ["MemoryReport"]


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per device: ``planned`` is what ``create()`` allocated (every shape variable at its
    upper bound); ``used`` is what the last run's shapes occupied of it (equal for a static
    graph). Nothing is allocated or freed between runs.

    Example:
        >>> report = MemoryReport({graphrt.cpu(0): 4096}, {graphrt.cpu(0): 512})  # doctest: +SKIP
        >>> report.used_fraction(graphrt.cpu(0))  # doctest: +SKIP
        0.125
    """

    planned: Mapping[Device, int]
    used: Mapping[Device, int]

    def used_fraction(self, device: Device) -> float:
        """``used / planned`` on one device (1.0 when nothing was planned)."""
        planned = self.planned[device]
        return self.used[device] / planned if planned else 1.0

    def table(self) -> str:
        """One line per device: planned bytes, used bytes and the fraction."""
        lines = [f"{'device':<10} {'planned':>14} {'used (last run)':>16} {'used':>7}"]
        for dev, planned in self.planned.items():
            lines.append(f"{dev!s:<10} {planned:>14,} {self.used[dev]:>16,} "
                         f"{self.used_fraction(dev):>7.1%}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {str(dev): {"planned": planned, "used": self.used[dev]}
                for dev, planned in self.planned.items()}
