"""Liveness of a graph's entries: one analysis, used to assign storage ids and to check them.

Time is counted in node indices (node ids are the execution order). An entry is *live* from
the node that writes it to the last node that reads it, both included. Two positions lie
outside the nodes:

- :data:`BEFORE_RUN` (``-1``): graph inputs and params are set by the caller before the first
  node runs, so they are live from ``-1``.
- ``len(graph.nodes)``: graph outputs are read by the caller after the last node has run, so
  they are live to ``len(graph.nodes)``.

Because both ends are included, a node's outputs are live at the same time as its inputs: a
node never writes its output into the storage of its own input. That is what TVM's planner
produced (``graph_plan_memory`` allocates a node's outputs *before* it releases its inputs).
The one exception is ``__nop``: its output *is* its input under another shape (an alias), so an
entry and its ``__nop`` aliases are one value, live from the first one's start to the last
one's end.

:func:`check_storage_ids` refuses a graph whose storage ids would make one tensor overwrite
another that is still to be read (there, inputs and params are live through the whole run:
they are set once and read by every run). :func:`assign_storage_ids` (and
:func:`plan_storage_ids` for a :class:`~graphrt.schema.Graph`) give storage ids by the same
liveness. Nothing here depends on the entries' sizes except the assignment's slot sizes, so
dynamic graphs (sizes at their bounds) are handled alike.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from ..errors import GraphFormatError
from ..schema import NOP, Graph

__all__ = ["BEFORE_RUN", "StorageAssignment", "alias_roots", "assign_storage_ids",
           "check_storage_ids", "live_ranges", "plan_storage_ids"]

BEFORE_RUN = -1
"""The position of graph inputs and params: set by the caller before node 0 runs."""

D = TypeVar("D", bound=Hashable)


def live_ranges(graph: Graph) -> list[tuple[int, int]]:
    """The live range of every entry: ``(defined, last_read)`` in node indices, by entry id.

    ``defined`` is the id of the node that writes the entry, or :data:`BEFORE_RUN` (``-1``) for
    a graph input or param. ``last_read`` is the id of the last node that reads it,
    ``len(graph.nodes)`` for a graph output (the caller reads it after the run), and
    ``defined`` itself for an entry nobody reads. Each entry is reported on its own: a
    ``__nop`` output starts at the ``__nop`` node (see :func:`alias_roots` for the groups).

    Example:
        >>> from graphrt.schema import load_graph
        >>> live_ranges(load_graph("examples/graphs/simplex.json"))
        [(-1, 2), (-1, 2), (2, 3), (3, 5), (-1, 5), (5, 6)]
    """
    inputs = {graph.nodes[nid].outputs[0] for nid in graph.arg_nodes}
    starts = [BEFORE_RUN if entry.eid in inputs else entry.nid for entry in graph.entries]
    ends = list(starts)
    for node in graph.nodes:
        for eid in node.inputs:
            ends[eid] = max(ends[eid], node.nid)
    for eid in graph.heads:
        ends[eid] = len(graph.nodes)
    return list(zip(starts, ends, strict=True))


def alias_roots(graph: Graph) -> list[int]:
    """For every entry, the entry whose storage it is: itself, or for a ``__nop`` output the
    root of its input (``__nop`` chains followed back to the entry a real node wrote).

    Example:
        >>> from graphrt.schema import load_graph
        >>> alias_roots(load_graph("examples/graphs/simplex.json"))  # no __nop here
        [0, 1, 2, 3, 4, 5]
    """
    root = list(range(len(graph.entries)))
    for node in graph.nodes:  # topological order: a __nop's input already has its root
        if node.func_name == NOP:
            root[node.outputs[0]] = root[node.inputs[0]]
    return root


# -- checking ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    """An alias group as one value: its root entry and where it is live."""

    root: int
    start: int
    end: int
    aliases: tuple[int, ...] = ()


def _values(graph: Graph) -> list[_Value]:
    """Every alias group with its live range; inputs and params live through the whole run."""
    ranges = live_ranges(graph)
    roots = alias_roots(graph)
    after = len(graph.nodes)
    inputs = {graph.nodes[nid].outputs[0] for nid in graph.arg_nodes}
    span: dict[int, list[int]] = {}
    members: dict[int, list[int]] = {}
    for eid, (start, end) in enumerate(ranges):
        if eid in inputs:
            end = after  # set once, read by every run: the value must survive each run
        got = span.setdefault(roots[eid], [start, end])
        got[0], got[1] = min(got[0], start), max(got[1], end)
        members.setdefault(roots[eid], []).append(eid)
    return [_Value(root, start, end, tuple(members[root][1:]))
            for root, (start, end) in span.items()]


def _where(graph: Graph, value: _Value) -> str:
    after = len(graph.nodes)
    if value.start == BEFORE_RUN:
        begin = "set before the run (an input or param)"
    else:
        begin = f"written by {graph.nodes[value.start].label}"
    if value.end == after:
        finish = "kept after the run (inputs, params and outputs must survive it)"
    elif value.end == value.start:
        finish = "never read"
    else:
        finish = f"last read by {graph.nodes[value.end].label}"
    return f"{begin}, {finish}"


def _describe(graph: Graph, value: _Value) -> str:
    entry = graph.entries[value.root]
    shape = list(entry.shape_text)
    aliases = ""
    if value.aliases:
        listed = ", ".join(str(eid) for eid in value.aliases[:5])
        more = ", ..." if len(value.aliases) > 5 else ""
        aliases = f" with its __nop alias entries {listed}{more}"
    return (f"{graph.entry_label(value.root)} {entry.dtype}{shape}{aliases} "
            f"({_where(graph, value)})")


def check_storage_ids(graph: Graph) -> None:
    """Refuse a graph in which two entries that are live at the same time share a storage id.

    Such a graph would silently compute a wrong answer: the later entry overwrites the earlier
    one before its last reader has run. Inputs and params count as live through the whole run
    (they are set once and read by every run), outputs from the node that writes them to the
    end; a node's output may not share its own input's storage, except that a ``__nop`` output
    is its input (see the module's notes). Storage ids are checked alone: devices are checked
    by :func:`graphrt.storage.plan_storage`.

    Raises:
        GraphFormatError: naming the storage id and both entries (entry id, producing node id
            and name, dtype and shape, where each is written and last read).

    Example:
        >>> from graphrt.schema import load_graph
        >>> check_storage_ids(load_graph("examples/graphs/duplex.json"))  # sid 0 reused: fine
    """
    by_sid: dict[int, list[_Value]] = {}
    for value in _values(graph):
        by_sid.setdefault(graph.entries[value.root].sid, []).append(value)
    clashes: list[tuple[int, int, _Value, _Value]] = []  # (when, sid, earlier, later)
    for sid, values in by_sid.items():
        values.sort(key=lambda v: (v.start, v.root))
        holder = values[0]
        for value in values[1:]:
            if value.start <= holder.end:
                clashes.append((value.start, sid, holder, value))
                break
            if value.end > holder.end:
                holder = value
    if not clashes:
        return
    _, sid, first, second = min(clashes, key=lambda c: (c[0], c[1]))
    more = (f" ({len(clashes) - 1} other storage ids are shared the same way)"
            if len(clashes) > 1 else "")
    raise GraphFormatError(
        f"storage_id {sid} is shared by two entries live at the same time, so one would "
        f"overwrite the other: {_describe(graph, first)} and {_describe(graph, second)}; "
        f"give one of them a storage_id of its own{more}")


# -- assigning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageAssignment(Generic[D]):
    """Storage ids given by liveness, and what the pool costs.

    Attributes:
        storage_ids: the storage id of every entry (ids are dense: ``0..len(slot_bytes)-1``).
        slot_bytes: the size of every slot, by storage id: the largest entry it holds.
        slot_devices: the device of every slot, by storage id.
        naive_bytes: bytes if every value had a buffer of its own (an alias group is one value).
        lower_bound_per_device: on each device, the bytes live at its busiest step, pinned
            values counted throughout (they never share): no assignment can use less.
    """

    storage_ids: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    slot_devices: tuple[D, ...]
    naive_bytes: int
    lower_bound_per_device: Mapping[D, int]

    @property
    def pool_bytes(self) -> int:
        """Bytes of the whole pool: the sum of the slot sizes."""
        return sum(self.slot_bytes)

    @property
    def pool_bytes_per_device(self) -> dict[D, int]:
        """Bytes of the pool on each device."""
        totals: dict[D, int] = {}
        for nbytes, device in zip(self.slot_bytes, self.slot_devices, strict=True):
            totals[device] = totals.get(device, 0) + nbytes
        return totals

    @property
    def lower_bound_bytes(self) -> int:
        """The sum of the per-device lower bounds (each device's pool holds its own peak)."""
        return sum(self.lower_bound_per_device.values())


@dataclass
class _Group(Generic[D]):
    """Values joined by aliasing, planned as one."""

    first: int  # smallest entry id, for a stable order
    start: int
    end: int
    nbytes: int
    device: D
    pinned: bool
    sid: int = -1


def _groups(sizes: Sequence[int], devices: Sequence[D], defined_at: Sequence[int],
            last_use: Sequence[int], pinned: set[int], aliases: Mapping[int, int]
            ) -> tuple[list[int], dict[int, _Group[D]]]:
    n = len(sizes)
    parent = list(range(n))

    def find(eid: int) -> int:
        while parent[eid] != eid:
            parent[eid] = parent[parent[eid]]
            eid = parent[eid]
        return eid

    for eid, target in aliases.items():
        if not (0 <= eid < n and 0 <= target < n):
            raise ValueError(f"aliases: {eid} -> {target} names an entry outside 0..{n - 1}")
        a, b = find(eid), find(target)
        if a != b:
            parent[max(a, b)] = min(a, b)
    root = [find(eid) for eid in range(n)]
    groups: dict[int, _Group[D]] = {}
    for eid in range(n):
        if sizes[eid] < 0:
            raise ValueError(f"entry {eid} has a negative size ({sizes[eid]} bytes)")
        start = defined_at[eid]
        end = max(start, last_use[eid])
        group = groups.get(root[eid])
        if group is None:
            groups[root[eid]] = _Group(eid, start, end, sizes[eid], devices[eid], eid in pinned)
            continue
        if devices[eid] != group.device:
            raise ValueError(f"entry {eid} aliases entry {group.first} but is on device "
                             f"{devices[eid]!r}, not {group.device!r}")
        group.start, group.end = min(group.start, start), max(group.end, end)
        group.nbytes = max(group.nbytes, sizes[eid])
        group.pinned = group.pinned or eid in pinned
    return root, groups


def _lower_bounds(groups: Iterable[_Group[D]]) -> dict[D, int]:
    """Per device: pinned bytes plus the peak of the other values' live bytes."""
    pinned: dict[D, int] = {}
    events: dict[D, list[tuple[int, int]]] = {}
    for group in groups:
        pinned.setdefault(group.device, 0)
        if group.pinned:
            pinned[group.device] += group.nbytes
        else:  # live on [start, end]: gone at end + 1 (a removal sorts before an add)
            events.setdefault(group.device, []).extend(
                [(group.start, group.nbytes), (group.end + 1, -group.nbytes)])
    bounds = {}
    for device, base in pinned.items():
        live = peak = 0
        for _, delta in sorted(events.get(device, []), key=lambda ev: (ev[0], ev[1])):
            live += delta
            peak = max(peak, live)
        bounds[device] = base + peak
    return bounds


def _pinned_ids(pinned: Iterable[int], n: int) -> set[int]:
    """Pinned entry ids from ids or from a per-entry mask of bools."""
    given = list(pinned)
    if given and all(isinstance(flag, bool) for flag in given):
        if len(given) != n:
            raise ValueError(f"pinned is a mask of {len(given)} bools; it needs one per entry "
                             f"({n})")
        return {eid for eid, flag in enumerate(given) if flag}
    return set(given)


def assign_storage_ids(sizes: Sequence[int], devices: Sequence[D], defined_at: Sequence[int],
                       last_use: Sequence[int], pinned: Iterable[int], *,
                       aliases: Mapping[int, int] | None = None) -> StorageAssignment[D]:
    """Give every entry a storage id by liveness; independent of any graph class.

    Entries are taken in definition order (ties by entry id). A pinned entry (a graph input,
    param or output) gets a slot of its own that nothing else ever uses. Any other entry takes
    a free slot of its device: the smallest free slot at least as big as it needs (ties: the
    lowest storage id); if no free slot is big enough, the largest free slot, grown to fit
    (growing costs less than a new slot); if the device has no free slot, a new one. A slot
    becomes free after the last node reading its entry has run, so before a node's outputs are
    placed only the entries whose last reader ran *earlier* are freed: a node's outputs never
    share storage with its own inputs.

    Args:
        sizes: bytes of every entry, by entry id.
        devices: the device of every entry (any hashable: a device type code, a Device);
            slots are never shared across devices.
        defined_at: the step (node index) writing each entry; :data:`BEFORE_RUN` (``-1``) for
            the graph's inputs and params.
        last_use: the last step reading each entry (a value below ``defined_at``, or equal to
            it, means never read: live at its defining step only).
        pinned: the entries that get a slot of their own (inputs, params, outputs): their
            ids, or one bool per entry (a mask; told apart by its items being ``bool``).
        aliases: entry -> the entry whose storage it is (a ``__nop`` output -> its input):
            such entries are one value, live from the first definition to the last use, sized
            to the largest, pinned if any of them is, and they share one storage id.

    Returns:
        The storage ids, the slots and the pool's costs.

    Raises:
        ValueError: sequences of different lengths (a pinned mask included), a negative
            size, a pinned or aliased id outside the entries, or aliased entries on two devices.

    Example:
        >>> # a chain x -> a -> b -> y: b is written while a is read, so they cannot share
        >>> plan = assign_storage_ids(sizes=[16, 16, 16, 16], devices=[1, 1, 1, 1],
        ...                           defined_at=[-1, 0, 1, 2], last_use=[0, 1, 2, 3],
        ...                           pinned=[0, 3])
        >>> plan.storage_ids, plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes
        ((0, 1, 2, 3), 64, 64, 64)
        >>> plan = assign_storage_ids([16] * 5, [1] * 5, [-1, 0, 1, 2, 3], [0, 1, 2, 3, 4],
        ...                           pinned=[0, 4])
        >>> plan.storage_ids  # entry 3, written at step 2, reuses entry 1's slot (last read at 1)
        (0, 1, 2, 1, 3)
        >>> plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes
        (64, 64, 80)
        >>> mask = [True, False, False, False, True]  # pinned as one bool per entry
        >>> assign_storage_ids([16] * 5, [1] * 5, [-1, 0, 1, 2, 3], [0, 1, 2, 3, 4],
        ...                    mask).storage_ids
        (0, 1, 2, 1, 3)
    """
    n = len(sizes)
    if not len(devices) == len(defined_at) == len(last_use) == n:
        raise ValueError(f"sizes, devices, defined_at and last_use must have one value per "
                         f"entry; given {n}, {len(devices)}, {len(defined_at)} and "
                         f"{len(last_use)}")
    pinned_ids = _pinned_ids(pinned, n)
    outside = sorted(eid for eid in pinned_ids if not 0 <= eid < n)
    if outside:
        raise ValueError(f"pinned names entries outside 0..{n - 1}: {outside[:10]}")
    root, groups = _groups(sizes, devices, defined_at, last_use, pinned_ids, aliases or {})

    slot_bytes: list[int] = []
    slot_devices: list[D] = []
    free: dict[D, list[tuple[int, int]]] = {}  # device -> sorted (size, sid)
    dying: list[tuple[int, int]] = []  # heap of (last step, sid) of slots in use
    for group in sorted(groups.values(), key=lambda g: (g.start, g.first)):
        while dying and dying[0][0] < group.start:
            _, sid = heapq.heappop(dying)
            insort(free.setdefault(slot_devices[sid], []), (slot_bytes[sid], sid))
        slots = free.get(group.device, [])
        if group.pinned or not slots:
            group.sid = len(slot_bytes)
            slot_bytes.append(group.nbytes)
            slot_devices.append(group.device)
        else:
            at = bisect_left(slots, (group.nbytes, -1))
            _, group.sid = slots.pop(at if at < len(slots) else -1)
            slot_bytes[group.sid] = max(slot_bytes[group.sid], group.nbytes)
        if not group.pinned:
            heapq.heappush(dying, (group.end, group.sid))
    return StorageAssignment(
        storage_ids=tuple(groups[root[eid]].sid for eid in range(n)),
        slot_bytes=tuple(slot_bytes), slot_devices=tuple(slot_devices),
        naive_bytes=sum(group.nbytes for group in groups.values()),
        lower_bound_per_device=MappingProxyType(_lower_bounds(groups.values())))


def plan_storage_ids(graph: Graph) -> StorageAssignment[int | None]:
    """Storage ids for ``graph`` by liveness, ignoring the ones it has (for an importer, or to
    see how much a graph's own ids cost against :attr:`StorageAssignment.lower_bound_bytes`).

    Devices are the entries' ``device_index`` codes (None without that column); sizes are the
    entries' bytes (at their bounds when dynamic); inputs, params and outputs are pinned; a
    ``__nop`` output shares its input's id.

    Example:
        >>> from graphrt.schema import load_graph
        >>> plan = plan_storage_ids(load_graph("examples/graphs/duplex.json"))
        >>> plan.storage_ids  # node 6's copy reuses the slot of node 2's output, as TVM did
        (0, 1, 4, 5, 2, 6, 4, 3, 7)
        >>> plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes
        (128, 128, 144)
    """
    ranges = live_ranges(graph)
    roots = alias_roots(graph)
    pinned = {graph.nodes[nid].outputs[0] for nid in graph.arg_nodes} | set(graph.heads)
    return assign_storage_ids(
        [entry.nbytes for entry in graph.entries],
        [entry.device_type for entry in graph.entries],
        [start for start, _ in ranges], [end for _, end in ranges], pinned,
        aliases={eid: root for eid, root in enumerate(roots) if root != eid})
