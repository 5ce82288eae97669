"""The placement report: where nodes and bytes went, every copy, and every fallback."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..devices import Device
from ..devices.base import KIND_NAMES
from ..schema import COPY, Graph
from .plan import StoragePlan

__all__ = ["CopyInfo", "DeviceUsage", "FallbackInfo", "PlacementReport", "RemapInfo",
           "placement_report"]


@dataclass(frozen=True)
class DeviceUsage:
    """What one device holds: op nodes that run there (``nodes``), entries, bytes of storage
    (``scratch`` of them: the intermediates of lowered functions, one arena per device)."""

    device: str
    nodes: int
    entries: int
    bytes: int
    scratch: int = 0


@dataclass(frozen=True)
class CopyInfo:
    """One ``__copy`` node: its direction and how many bytes it moves per run."""

    node_id: int
    node_name: str
    src: str
    dst: str
    bytes: int

    @property
    def direction(self) -> str:
        """``"sim:0 -> cpu:0"``."""
        return f"{self.src} -> {self.dst}"


@dataclass(frozen=True)
class FallbackInfo:
    """One entry placed on devices[0] because its device type was not given."""

    entry_id: int
    node_id: int
    node_name: str
    requested_type: int
    device: str
    reason: str


@dataclass(frozen=True)
class RemapInfo:
    """A device type the caller sent to another device (``device_map``), and its entries."""

    requested_type: int
    requested_kind: str
    device: str
    entries: int


@dataclass(frozen=True)
class PlacementReport:
    """Nodes and bytes per device, every copy, and every fallback of a storage plan.

    Example:
        >>> report = mod.placement()  # doctest: +SKIP
        >>> print(report.table())  # doctest: +SKIP
    """

    devices: tuple[DeviceUsage, ...]
    copies: tuple[CopyInfo, ...]
    fallbacks: tuple[FallbackInfo, ...]
    remapped: tuple[RemapInfo, ...] = ()

    @property
    def copy_bytes(self) -> int:
        """Bytes all ``__copy`` nodes move per run."""
        return sum(copy.bytes for copy in self.copies)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return {"devices": [asdict(d) for d in self.devices],
                "copies": [{**asdict(c), "direction": c.direction} for c in self.copies],
                "fallbacks": [asdict(f) for f in self.fallbacks],
                "remapped": [asdict(r) for r in self.remapped]}

    def table(self) -> str:
        """The report as text for humans."""
        lines = [f"{'device':<10} {'ops':>6} {'entries':>8} {'bytes':>14}"]
        lines += [f"{d.device:<10} {d.nodes:>6} {d.entries:>8} {d.bytes:>14,}"
                  for d in self.devices]
        scratch = [f"{d.device} {d.scratch:,} bytes" for d in self.devices if d.scratch]
        if scratch:
            lines.append(f"of it scratch (intermediates of lowered functions): "
                         f"{', '.join(scratch)}")
        lines.append(f"copies: {len(self.copies)} ({self.copy_bytes:,} bytes per run)")
        lines += [f"  node {c.node_id} {c.node_name!r}: {c.direction}, {c.bytes:,} bytes"
                  for c in self.copies]
        if self.remapped:
            lines.append(f"remapped by device_map: {len(self.remapped)}")
            lines += [f"  device type {r.requested_type} ({r.requested_kind}) -> {r.device}: "
                      f"{r.entries} entries" for r in self.remapped]
        lines.append(f"fallbacks: {len(self.fallbacks)}")
        lines += [f"  entry {f.entry_id} (node {f.node_id} {f.node_name!r}): {f.reason}"
                  for f in self.fallbacks]
        return "\n".join(lines)


def placement_report(graph: Graph, plan: StoragePlan) -> PlacementReport:
    """Summarize where a plan put the graph (pure; for ``mod.placement()`` and the CLI)."""
    usage: dict[Device, list[int]] = {dev: [0, 0, 0, 0] for dev in plan.devices}
    for node in graph.nodes:
        if node.op != "null":
            usage[plan.node_device[node.nid]][0] += 1
    for dev in plan.entry_device:
        usage[dev][1] += 1
    for dev, nbytes in plan.bytes_per_device().items():
        usage[dev][2] = nbytes
    for dev, nbytes in plan.scratch.arena.items():
        usage[dev][3] = nbytes
    copies = tuple(
        CopyInfo(node.nid, node.name, str(plan.entry_device[node.inputs[0]]),
                 str(plan.entry_device[node.outputs[0]]), graph.entries[node.outputs[0]].nbytes)
        for node in graph.nodes if node.func_name == COPY)
    fallbacks = tuple(
        FallbackInfo(f.eid, graph.entries[f.eid].nid, graph.nodes[graph.entries[f.eid].nid].name,
                     f.requested, str(f.device), f.reason)
        for f in plan.fallbacks)
    remapped = tuple(
        RemapInfo(code, KIND_NAMES.get(code, f"type{code}"), str(dev),
                  sum(entry.device_type == code for entry in graph.entries))
        for code, dev in sorted(plan.device_map.items()))
    return PlacementReport(
        tuple(DeviceUsage(str(dev), *counts) for dev, counts in usage.items()), copies,
        fallbacks, remapped)
