"""What crossed between devices in a run, counted by cause."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..devices import Device

__all__ = ["TransferLog", "TransferStats", "tally"]


@dataclass(frozen=True)
class TransferStats:
    """Copies of one kind in one run: how many, bytes in all, and bytes by direction."""

    count: int = 0
    bytes: int = 0
    to_host_bytes: int = 0
    to_device_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "bytes": self.bytes, "to_host_bytes": self.to_host_bytes,
                "to_device_bytes": self.to_device_bytes}


@dataclass(frozen=True)
class TransferLog:
    """What crossed between devices in the last run, split by cause.

    Attributes:
        copy_nodes: the graph's ``__copy`` nodes.
        shape_functions: inputs of shape functions copied to the host (only those declared
            data-dependent, and only from devices other than the host).
    """

    copy_nodes: TransferStats = field(default_factory=TransferStats)
    shape_functions: TransferStats = field(default_factory=TransferStats)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"copy_nodes": self.copy_nodes.to_dict(),
                "shape_functions": self.shape_functions.to_dict()}


def tally(moves: Sequence[tuple[Device, Device, int]]) -> TransferStats:
    """Count ``(source, destination, bytes)`` moves."""
    to_host = sum(n for src, dst, n in moves if dst.kind == "cpu" and src.kind != "cpu")
    to_device = sum(n for src, dst, n in moves if dst.kind != "cpu")
    return TransferStats(len(moves), sum(n for _, _, n in moves), to_host, to_device)
