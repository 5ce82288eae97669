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

import bisect
import heapq
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
    """Offsets of one node's intermediates, reusing bytes whose last reader has run (first
    fit by offset), and the bytes the node needs.

    Near-linear in the number of intermediates: expired blocks leave through a heap, and the
    gaps between live blocks are only scanned when one of them may fit (a known bound on the
    largest gap), so a node with thousands of intermediates live at once (a split into a
    sequence) places each at the end in constant time.
    """
    order = sorted(range(len(needs)), key=lambda i: (needs[i].first, -needs[i].nbytes))
    offsets = [0] * len(needs)
    sizes = [_align(need.nbytes) for need in needs]
    live: list[tuple[int, int]] = []  # (offset, index) of the live blocks, sorted
    expiry: list[tuple[int, int, int]] = []  # (last, offset, index) of the live blocks
    widest = 0  # no gap between live blocks is wider than this
    peak = 0
    for i in order:
        need = needs[i]
        while expiry and expiry[0][0] < need.first:  # gone once its last reader has run
            _, start, index = heapq.heappop(expiry)
            at = bisect.bisect_left(live, (start, index))
            del live[at]
            # the gap it leaves between its neighbours that take space (blocks of size 0,
            # always at offset 0, bound no gap)
            after = at
            while after < len(live) and not sizes[live[after][1]]:
                after += 1
            if after < len(live):
                before = at - 1
                while before >= 0 and not sizes[live[before][1]]:
                    before -= 1
                end = live[before][0] + sizes[live[before][1]] if before >= 0 else 0
                widest = max(widest, live[after][0] - end)
        size = sizes[i]
        end = 0  # where the live blocks end (a block of size 0 ends where it starts)
        if widest >= size:  # a gap may fit: the first that does, by offset
            found, gaps = None, 0
            for start, index in live:
                gap = start - end
                if found is None and gap >= size:
                    found, gaps = end, max(gaps, gap - size)  # what stays of the gap taken
                else:
                    gaps = max(gaps, gap)
                end = max(end, start + sizes[index])
            widest = gaps
            offset = end if found is None else found
        elif live:  # after the blocks at the last offset (one, or size-0 ones at 0 too)
            group = bisect.bisect_left(live, (live[-1][0], -1))
            offset = max(o + sizes[j] for o, j in live[group:])
        else:
            offset = 0
        offsets[i] = offset
        bisect.insort(live, (offset, i))
        heapq.heappush(expiry, (need.last, offset, i))
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
