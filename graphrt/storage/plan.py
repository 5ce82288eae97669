"""Storage planning: a pure function from (graph, devices) to a device-tagged pool.

Nothing here allocates. The executor allocates one buffer per :class:`PoolEntry` and makes every
entry an offset-0 typed view of its slot.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..devices import Device
from ..devices.base import KIND_NAMES
from ..errors import PlacementError
from ..schema import COPY, Graph
from .scratch import ScratchNeed, ScratchPlan, plan_scratch

__all__ = ["Fallback", "Placement", "PoolEntry", "StoragePlan", "assign_storage",
           "check_capacity", "place", "plan_storage", "with_scratch"]


@dataclass(frozen=True)
class PoolEntry:
    """One storage slot: its id, device, size (the largest entry sharing it) and entries."""

    sid: int
    device: Device
    nbytes: int
    entries: tuple[int, ...]


@dataclass(frozen=True)
class Fallback:
    """An entry the graph wanted on device type ``requested`` that went to devices[0]."""

    eid: int
    requested: int
    device: Device

    @property
    def reason(self) -> str:
        """Why it fell back, in words."""
        kind = KIND_NAMES.get(self.requested, f"type {self.requested}")
        return f"no {kind} device (type {self.requested}) was given; fell back to {self.device}"


@dataclass(frozen=True)
class StoragePlan:
    """Where every entry lives and how big every slot is.

    Attributes:
        devices: the devices given, devices[0] being the fallback.
        pool: the slots by storage id, in id order (ids need not be dense).
        entry_device: the device of each entry, by entry id.
        node_device: the device each node runs on, by node id.
        fallbacks: every entry that fell back to devices[0].
        scratch: the intermediates of lowered functions (see :func:`with_scratch`).
        device_map: graph device type codes placed on another device than TVM's rule would
            choose, by the caller's request (``create(..., device_map=...)``).
    """

    devices: tuple[Device, ...]
    pool: Mapping[int, PoolEntry]
    entry_device: tuple[Device, ...]
    node_device: tuple[Device, ...]
    fallbacks: tuple[Fallback, ...]
    scratch: ScratchPlan = field(default_factory=ScratchPlan)
    device_map: Mapping[int, Device] = field(default_factory=lambda: MappingProxyType({}))

    def bytes_per_device(self) -> dict[Device, int]:
        """Bytes of storage each device holds, scratch included (every device given appears,
        maybe with 0)."""
        totals = dict.fromkeys(self.devices, 0)
        for slot in self.pool.values():
            totals[slot.device] += slot.nbytes
        for dev, nbytes in self.scratch.arena.items():
            totals[dev] += nbytes
        return totals


def _placer(devices: tuple[Device, ...]) -> dict[int, Device]:
    first: dict[int, Device] = {}
    for dev in devices:
        first.setdefault(dev.type_code, dev)
    return first


def _check_devices(devices: Sequence[Device]) -> tuple[Device, ...]:
    if not devices:
        raise PlacementError("at least one device is needed; devices[0] is the fallback")
    seen = set()
    for dev in devices:
        if not isinstance(dev, Device):
            raise PlacementError(f"devices must be graphrt devices (graphrt.cpu(0), ...), "
                                 f"given {dev!r}")
        if dev in seen:
            raise PlacementError(f"device {dev} is given twice")
        seen.add(dev)
    return tuple(devices)


@dataclass(frozen=True)
class Placement:
    """Where every entry lives and every node runs, before any storage is sized.

    Attributes:
        devices: the devices given, devices[0] being the fallback.
        entry_device: the device of each entry, by entry id.
        node_device: the device each node runs on, by node id.
        fallbacks: every entry that fell back to devices[0].
        device_map: graph device type codes placed on another device than TVM's rule would
            choose, by the caller's request.
    """

    devices: tuple[Device, ...]
    entry_device: tuple[Device, ...]
    node_device: tuple[Device, ...]
    fallbacks: tuple[Fallback, ...]
    device_map: Mapping[int, Device] = field(default_factory=lambda: MappingProxyType({}))


def place(graph: Graph, devices: Sequence[Device], *, strict: bool = False,
          device_map: Mapping[int, Device] | None = None) -> Placement:
    """Place every entry and node on a device (the first half of :func:`plan_storage`).

    An entry whose ``device_index`` code is T goes on ``device_map[T]`` when the caller
    remapped T, else on the first device of type T, else on ``devices[0]`` (a fallback,
    reported in :attr:`Placement.fallbacks`).

    Raises:
        PlacementError: as :func:`plan_storage`, for everything but capacity.
    """
    devices = _check_devices(devices)
    by_type = _placer(devices)
    remap = dict(device_map or {})
    for mapped, dev in remap.items():
        if dev not in devices:
            raise PlacementError(f"device_map sends device type {mapped} to {dev}, which is not "
                                 f"among the devices given ({', '.join(map(str, devices))})")
    by_type.update(remap)
    entry_device: list[Device] = []
    fallbacks: list[Fallback] = []
    for entry in graph.entries:
        code = entry.device_type
        dev = devices[0] if code is None else by_type.get(code, devices[0])
        if code is not None and code not in by_type:
            fallbacks.append(Fallback(entry.eid, code, dev))
        entry_device.append(dev)
    if strict and fallbacks:
        listed = "; ".join(f"{graph.entry_label(f.eid)}: {f.reason}" for f in fallbacks[:5])
        more = f" (and {len(fallbacks) - 5} more)" if len(fallbacks) > 5 else ""
        raise PlacementError(f"strict placement: {len(fallbacks)} entries would fall back to "
                             f"{devices[0]}: {listed}{more}")
    node_device = tuple(_node_device(graph, nid, entry_device, devices[0])
                        for nid in range(len(graph.nodes)))
    return Placement(devices, tuple(entry_device), node_device, tuple(fallbacks),
                     MappingProxyType(remap))


def assign_storage(graph: Graph, placement: Placement) -> StoragePlan:
    """One slot per storage id of ``graph``, on the device of its entries (the second half
    of :func:`plan_storage`).

    Raises:
        PlacementError: a storage id used on two devices.
    """
    pool = _plan_pool(graph, list(placement.entry_device))
    return StoragePlan(placement.devices, MappingProxyType(pool), placement.entry_device,
                       placement.node_device, placement.fallbacks,
                       device_map=placement.device_map)


def plan_storage(graph: Graph, devices: Sequence[Device], *, strict: bool = False,
                 capacity: Mapping[Device, int | None] | None = None,
                 device_map: Mapping[int, Device] | None = None) -> StoragePlan:
    """Place every entry on a device and size one slot per storage id.

    An entry whose ``device_index`` code is T goes on ``device_map[T]`` when the caller
    remapped T, else on the first device of type T, else on ``devices[0]`` (a fallback,
    reported in :attr:`StoragePlan.fallbacks`).

    Args:
        graph: the validated graph.
        devices: the devices to run on; ``devices[0]`` is the fallback.
        strict: refuse to fall back (raise instead).
        capacity: bytes each device can hold, to refuse a plan that cannot be allocated.
        device_map: device type code -> one of ``devices``, overriding TVM's rule for that
            type (run a CUDA graph on ``sim`` or ``cpu`` without editing its JSON).

    Raises:
        PlacementError: a storage id on two devices, a node whose inputs sit on another device
            than it runs on (with no ``__copy`` between), an unsupported storage scope, a fallback
            under ``strict``, or storage beyond a device's capacity.

    Example:
        >>> import graphrt
        >>> from graphrt.schema import load_graph
        >>> plan = plan_storage(load_graph("examples/graphs/simplex.json"),  # doctest: +SKIP
        ...                     [graphrt.cpu(0), graphrt.sim(0)])
    """
    plan = assign_storage(graph, place(graph, devices, strict=strict, device_map=device_map))
    if capacity is not None:
        check_capacity(graph, plan, capacity)
    return plan


def with_scratch(plan: StoragePlan, needs: Mapping[int, Sequence[ScratchNeed]]) -> StoragePlan:
    """``plan`` with the intermediates of lowered functions laid out (see
    :func:`graphrt.storage.plan_scratch`); ``needs`` are per node id."""
    return replace(plan, scratch=plan_scratch(needs, plan.node_device))


def _plan_pool(graph: Graph, entry_device: list[Device]) -> dict[int, PoolEntry]:
    slots: dict[int, tuple[Device, int, list[int]]] = {}
    for entry in graph.entries:
        if entry.scope:
            raise PlacementError(f"{graph.entry_label(entry.eid)} has storage scope "
                                 f"{entry.scope!r}; graphrt supports only global memory")
        dev = entry_device[entry.eid]
        slot = slots.get(entry.sid)
        if slot is None:
            slots[entry.sid] = (dev, entry.nbytes, [entry.eid])
            continue
        if slot[0] != dev:
            raise PlacementError(
                f"storage_id {entry.sid} is used on two devices: by "
                f"{graph.entry_label(slot[2][0])} on {slot[0]} and by "
                f"{graph.entry_label(entry.eid)} on {dev}")
        slot[2].append(entry.eid)
        if entry.nbytes > slot[1]:
            slots[entry.sid] = (dev, entry.nbytes, slot[2])
    return {sid: PoolEntry(sid, dev, nbytes, tuple(eids))
            for sid, (dev, nbytes, eids) in sorted(slots.items())}


def check_capacity(graph: Graph, plan: StoragePlan,
                   capacity: Mapping[Device, int | None]) -> None:
    """Refuse a plan that a device cannot hold: one slot or arena too big, or the total.

    Args:
        capacity: bytes each device can hold (None or absent: unknown, only the address
            space limits it).

    Raises:
        PlacementError: naming the entry (or the node whose intermediates need the scratch
            arena), the bytes and the device.
    """
    parts: list[tuple[Device, int, str, str]] = []  # device, bytes, what, which storage
    for slot in plan.pool.values():
        eid = max(slot.entries, key=lambda e: graph.entries[e].nbytes)
        parts.append((slot.device, slot.nbytes, graph.entry_label(eid),
                      f"storage_id {slot.sid}"))
    for dev, nbytes in plan.scratch.arena.items():
        node = graph.nodes[plan.scratch.peak_node[dev]]
        parts.append((dev, nbytes, f"the intermediates of {node.label} (func_name "
                                   f"{node.func_name!r})", "scratch"))
    totals: dict[Device, int] = {}
    largest: dict[Device, tuple[int, str, str]] = {}
    for dev, nbytes, what, storage in parts:
        limit = capacity.get(dev)
        if nbytes > sys.maxsize or (limit is not None and nbytes > limit):
            shown = "the address space" if limit is None else f"{limit} bytes"
            raise PlacementError(f"{what} needs {nbytes} bytes ({storage}) on {dev}, beyond "
                                 f"{shown}")
        totals[dev] = totals.get(dev, 0) + nbytes
        if nbytes > largest.get(dev, (-1, "", ""))[0]:
            largest[dev] = (nbytes, what, storage)
    for dev, total in totals.items():
        limit = capacity.get(dev)
        if limit is not None and total > limit:
            nbytes, what, storage = largest[dev]
            raise PlacementError(f"the graph needs {total} bytes on {dev}, which holds {limit}; "
                                 f"the largest slot is {storage} ({nbytes} bytes, {what})")


def _node_device(graph: Graph, nid: int, entry_device: list[Device], fallback: Device) -> Device:
    node = graph.nodes[nid]
    if not node.outputs:
        return fallback
    dev = entry_device[node.outputs[0]]
    for eid in node.outputs[1:]:
        if entry_device[eid] != dev:
            raise PlacementError(f"{node.label} has outputs on two devices: {dev} and "
                                 f"{entry_device[eid]} ({graph.entry_label(eid)})")
    if node.func_name != COPY:
        for eid in node.inputs:
            if entry_device[eid] != dev:
                raise PlacementError(
                    f"{node.label} runs on {dev} but its input {graph.entry_label(eid)} is on "
                    f"{entry_device[eid]}; a __copy node must move it first")
    return dev
