"""A run context's memory: the slot per storage id it allocates (:class:`SlotPool`), and the
report of memory per device: what a run uses, what one context holds, and the params held once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..devices import Array, Device, allocate, allocate_host, backend_for
from .compiled import CompiledGraph

__all__ = ["MemoryReport", "SlotPool", "copy_partners"]


class SlotPool:
    """A context's byte buffer per storage id, allocated when first needed (at ``create()``,
    or for the slot of a param a run context stopped reading from the params, when its input
    is set again: a failure then is a :class:`PlacementError` from that ``set_input``).

    A host slot that a ``__copy`` node moves to or from another device is that device's
    host memory (:meth:`Backend.allocate_host`: pinned on cuda), so the copy runs at the bus's
    speed instead of through the driver's pageable staging."""

    def __init__(self, compiled: CompiledGraph, skip: set[int]) -> None:
        self._slots = compiled.plan.pool
        self._label = compiled.graph.entry_label
        self._entries, self._devices = compiled.graph.entries, compiled.plan.entry_device
        self._copied_with = copy_partners(compiled)
        self.buffers: dict[int, Array] = {}
        for sid in self._slots:
            if sid not in skip:
                self(sid)

    def __call__(self, sid: int) -> Array:
        buffer = self.buffers.get(sid)
        if buffer is None:
            slot = self._slots[sid]
            what = f"storage_id {sid} ({self._label(slot.entries[0])})"
            partner = self._copied_with.get(sid)
            buffer = self.buffers[sid] = (
                allocate(slot.device, slot.nbytes, what) if partner is None
                else allocate_host(partner, slot.nbytes, what))
        return buffer

    def view(self, eid: int) -> Array:
        """Entry ``eid`` as a typed view of its slot, at its planned shape."""
        entry = self._entries[eid]
        backend = backend_for(self._devices[eid])
        return backend.view(self(entry.sid), entry.shape, entry.dtype.numpy)

    def release(self, sid: int) -> None:
        self.buffers.pop(sid, None)


def copy_partners(compiled: CompiledGraph) -> dict[int, Device]:
    """The host storage ids that ``__copy`` nodes move to or from another device, each with
    that device (the first one met, if several)."""
    partners: dict[int, Device] = {}
    devices, entries = compiled.plan.entry_device, compiled.graph.entries
    for program in compiled.programs:
        if not program.is_copy:
            continue
        ends = [(devices[eid], entries[eid].sid) for eid in program.eids[:2]]
        for (here, sid), (there, _) in (ends, ends[::-1]):
            if here.kind == "cpu" and there.kind != "cpu":
                partners.setdefault(sid, there)
    return partners


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per device.

    Attributes:
        planned: what a run reads and writes as planned at ``create()`` (every shape variable
            at its upper bound): every storage slot, params included, and the scratch of
            lowered functions.
        used: what the last run's shapes occupied of it (equal for a static graph).
        params: the params, held once by the compiled graph however many contexts read them.
        context: what the calling thread's run context allocated for itself: its activation
            slots (and the slots of inputs not loaded as params) and its scratch.
        staging: host bytes the context holds to stage copies and shape functions.
        contexts: run contexts alive over the compiled graph (threads that ran the module and
            its clones).

    Example:
        >>> report = MemoryReport({graphrt.cpu(0): 4096}, {graphrt.cpu(0): 512})  # doctest: +SKIP
        >>> report.used_fraction(graphrt.cpu(0))  # doctest: +SKIP
        0.125
    """

    planned: Mapping[Device, int]
    used: Mapping[Device, int]
    params: Mapping[Device, int] = field(default_factory=dict)
    context: Mapping[Device, int] = field(default_factory=dict)
    staging: int = 0
    contexts: int = 1

    def used_fraction(self, device: Device) -> float:
        """``used / planned`` on one device (1.0 when nothing was planned)."""
        planned = self.planned[device]
        return self.used[device] / planned if planned else 1.0

    def total(self, device: Device) -> int:
        """What the process holds on ``device`` for this graph: the params once, plus one
        context's memory per live context."""
        return self.params.get(device, 0) + self.contexts * self.context.get(device, 0)

    def table(self) -> str:
        """One line per device: planned and used bytes, params, per-context bytes, total."""
        lines = [f"{'device':<10} {'planned':>14} {'used (last run)':>16} {'used':>7} "
                 f"{'params':>14} {'per context':>14} {'total':>14}"]
        for dev, planned in self.planned.items():
            lines.append(f"{dev!s:<10} {planned:>14,} {self.used[dev]:>16,} "
                         f"{self.used_fraction(dev):>7.1%} {self.params.get(dev, 0):>14,} "
                         f"{self.context.get(dev, 0):>14,} {self.total(dev):>14,}")
        lines.append(f"{self.contexts} context(s); host staging per context: "
                     f"{self.staging:,} bytes")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {str(dev): {"planned": planned, "used": self.used[dev],
                           "params": self.params.get(dev, 0),
                           "context": self.context.get(dev, 0), "total": self.total(dev)}
                for dev, planned in self.planned.items()}
