"""Scratch: the intermediates of lowered functions, planned as device memory (pure).

A lowered declarative function needs memory for its intermediates only while its node runs, so
all nodes on one device share one *arena*, sized for the node that needs most. Within a node,
an intermediate's bytes are reused once its last reader has run (first fit by offset, every
offset aligned to :data:`graphrt.devices.ALIGNMENT`).

Example:
    >>> import graphrt
    >>> cpu = graphrt.cpu(0)
    >>> plan = plan_scratch({3: [ScratchNeed(100, 0, 1), ScratchNeed(100, 1, 2),
    ...                          ScratchNeed(100, 2, 3)]}, [cpu] * 4)
    >>> plan.arena[cpu], plan.offsets[3]
    (256, (0, 128, 0))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ..devices import ALIGNMENT, Device

__all__ = ["ScratchNeed", "ScratchPlan", "plan_scratch"]


@dataclass(frozen=True)
class ScratchNeed:
    """One intermediate of a node: its bytes, and the calls that write it first and read it
    last (it is live from ``first`` through ``last``)."""

    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class ScratchPlan:
    """Where every intermediate lives.

    Attributes:
        arena: bytes of scratch per device (devices without any are absent).
        offsets: per node id, each intermediate's byte offset in its device's arena.
        peak_node: per device, the node that needs the whole arena.
    """

    arena: Mapping[Device, int] = field(default_factory=lambda: MappingProxyType({}))
    offsets: Mapping[int, tuple[int, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    peak_node: Mapping[Device, int] = field(default_factory=lambda: MappingProxyType({}))


def _align(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def _layout(needs: Sequence[ScratchNeed]) -> tuple[tuple[int, ...], int]:
    """Offsets of one node's intermediates, reusing bytes whose last reader has run, and the
    bytes the node needs."""
    order = sorted(range(len(needs)), key=lambda i: (needs[i].first, -needs[i].nbytes))
    offsets = [0] * len(needs)
    live: list[tuple[int, int, int]] = []  # (offset, aligned size, last) sorted by offset
    peak = 0
    for i in order:
        need = needs[i]
        live = [block for block in live if block[2] >= need.first]
        size = _align(need.nbytes)
        offset = 0
        for start, length, _ in live:  # the first gap that fits
            if start - offset >= size:
                break
            offset = max(offset, start + length)
        offsets[i] = offset
        live.append((offset, size, need.last))
        live.sort()
        peak = max(peak, offset + size)
    return tuple(offsets), peak


def plan_scratch(needs: Mapping[int, Sequence[ScratchNeed]],
                 node_device: Sequence[Device]) -> ScratchPlan:
    """Lay out every node's intermediates in one arena per device.

    Args:
        needs: per node id, its intermediates (nodes without any may be absent).
        node_device: the device each node runs on, by node id.
    """
    arena: dict[Device, int] = {}
    peak_node: dict[Device, int] = {}
    offsets: dict[int, tuple[int, ...]] = {}
    for nid, node_needs in sorted(needs.items()):
        if not node_needs:
            continue
        offsets[nid], peak = _layout(node_needs)
        dev = node_device[nid]
        if peak > arena.get(dev, -1):
            arena[dev], peak_node[dev] = peak, nid
    return ScratchPlan(MappingProxyType(arena), MappingProxyType(offsets),
                       MappingProxyType(peak_node))
