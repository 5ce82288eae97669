"""Running a graph whose shapes change from run to run, in storage planned once at the bounds.

Every run binds the shape variables from the inputs' shapes, re-views the entries whose shape
changed (views of the same slots: nothing is allocated), and, before each shape node, copies to
the host exactly the inputs its shape function reads, runs it, binds the variables it gives and
re-views the entries that depend on them. :class:`TransferLog` keeps what crossed to the host.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from ..devices import Array, Device, backend_for, copier, cpu
from ..errors import ExecutionError, InputError
from ..lib import TensorType
from ..schema import COPY, Graph
from ..storage import StoragePlan
from .shapes import ShapeNode, ShapePlan
from .steps import AliasGroups, Step, StepTable

__all__ = ["DynamicRunner", "TransferLog", "TransferStats"]

_HOST = cpu(0)


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


@dataclass
class _Staging:
    """One data-dependent input of a shape node: where it is and its host buffer."""

    position: int  # input position in the node
    eid: int
    device: Device
    host: np.ndarray[Any, Any] | None  # planned-size bytes; None when already on the host


class DynamicRunner:
    """The per-run shape machinery of one module (absent from static modules)."""

    def __init__(self, graph: Graph, plan: StoragePlan, table: StepTable, shapes: ShapePlan,
                 groups: AliasGroups, pool: Mapping[int, Array]) -> None:
        self.graph, self.plan, self.table, self.shapes = graph, plan, table, shapes
        self.groups = groups
        self.pool = pool  # the slots' byte buffers, by storage id
        self.dynamic_eids = frozenset(e.eid for e in graph.entries if e.dims is not None)
        self._actual: dict[int, tuple[int, ...] | None] = {
            eid: graph.entries[eid].shape for eid in self.dynamic_eids}
        self._memory: dict[int, Array] = {}  # alias group root -> caller's array (inputs)
        step_nids = [nid for _, _, nid in table.steps]
        self._points = [(step_nids.index(node.nid), node) for node in shapes.nodes]
        self._staging = {node.nid: self._stage(node) for node in shapes.nodes}
        self._copies = [(node.inputs[0], plan.entry_device[node.inputs[0]],
                         plan.entry_device[node.outputs[0]])
                        for node in graph.nodes if node.func_name == COPY]
        self.env: dict[str, int] = {}
        self._last_inputs: tuple[tuple[int, ...], ...] | None = None
        self._shape_moves: list[tuple[Device, Device, int]] = []

    def _stage(self, node: ShapeNode) -> list[_Staging]:
        staged = []
        inputs = self.graph.nodes[node.nid].inputs
        for position, (eid, needed) in enumerate(zip(inputs, node.function.data_dependent,
                                                     strict=True)):
            if needed:
                dev = self.plan.entry_device[eid]
                host = None if dev.kind == "cpu" else np.empty(self.graph.entries[eid].nbytes,
                                                               np.uint8)
                staged.append(_Staging(position, eid, dev, host))
        return staged

    # -- views -----------------------------------------------------------------------------

    def slot_view(self, eid: int, shape: tuple[int, ...]) -> Array:
        """The entry's own slot viewed at ``shape`` (which must fit what was planned)."""
        dtype = self.graph.entries[eid].dtype.numpy
        pool = self.pool[self.graph.entries[eid].sid]
        return backend_for(self.plan.entry_device[eid]).view(pool, shape, dtype)

    def set_input_shape(self, eid: int, shape: tuple[int, ...]) -> None:
        """An input's slot now holds data of ``shape``: view it so (and its aliases later)."""
        if eid in self.dynamic_eids and self._actual[eid] != shape:
            self._last_inputs = None
            self.table.rebind({eid: self.slot_view(eid, shape)})
            self._actual[eid] = shape
            for member in self.groups.members[self.groups.root[eid]]:
                if member != eid and member in self._actual:
                    self._actual[member] = None

    def bind_memory(self, root: int, memory: Array | None) -> None:
        """A zero-copy input bound to (or released from) ``root``'s alias group."""
        self._last_inputs = None
        if memory is None:
            self._memory.pop(root, None)
        else:
            self._memory[root] = memory
        for eid in self.groups.members[root]:
            if eid in self._actual:
                self._actual[eid] = None

    def _apply(self, stage: int) -> None:
        arrays: dict[int, Array] = {}
        for eid in self.shapes.stage_entries[stage]:
            shape = self.shapes.shape(eid, self.env)
            if self._actual[eid] == shape:
                continue
            root = self.groups.root[eid]
            memory = self._memory.get(root)
            if memory is None:
                arrays[eid] = self.slot_view(eid, shape)
            elif eid == root:
                arrays[eid] = memory
            else:
                arrays[eid] = memory.reshape(shape)
            self._actual[eid] = shape
        self.table.rebind(arrays)

    # -- running ---------------------------------------------------------------------------

    def steps(self, input_shapes: Sequence[tuple[int, ...]],
              extra: Sequence[Step]) -> Iterator[Step]:
        """Bind the inputs' variables, then yield every step in order, running each shape
        function (and re-viewing what it sizes) just before its node's step, then ``extra``.

        Raises:
            InputError: the inputs' shapes disagree (before anything runs).
            ExecutionError: a shape function failed or gave shapes the plan cannot hold.
        """
        key = tuple(input_shapes)
        if key != self._last_inputs or self.shapes.nodes:
            self._last_inputs = None  # until the inputs' stage is applied
            self.env = self.shapes.bind_inputs(input_shapes, self.graph.input_names)
            self._run_stage(0, -1)
            self._last_inputs = key
        self._shape_moves = []
        start = 0
        for index, node in self._points:
            yield from self.table.steps[start:index]
            self._run_stage(node.stage, node.nid, node)
            start = index
        yield from self.table.steps[start:]
        yield from extra

    @property
    def transfers(self) -> TransferLog:
        """What the last run copied (``__copy`` nodes sized by the shapes it ran with)."""
        return TransferLog(tally([(src, dst, self.table.views[eid].nbytes)
                                  for eid, src, dst in self._copies]), tally(self._shape_moves))

    def _run_stage(self, stage: int, nid: int, node: ShapeNode | None = None) -> None:
        try:
            if node is not None:
                self.shapes.bind_outputs(node, self._shape_function(node), self.env)
            self._apply(stage)
        except (InputError, ExecutionError):
            raise
        except Exception as err:
            if node is None:  # the inputs' shapes make a dimension impossible
                raise InputError(f"the inputs' shapes do not fit the graph: {err}") from err
            graph_node = self.graph.nodes[nid]
            dev = self.plan.node_device[nid]
            raise ExecutionError(
                f"{graph_node.label} (func_name {graph_node.func_name!r}): shape function on "
                f"the host failed: {type(err).__name__}: {err}", node_id=nid,
                node_name=graph_node.name, func_name=graph_node.func_name or "",
                device=str(dev)) from err

    def _shape_function(self, node: ShapeNode) -> list[tuple[int, ...]]:
        inputs = self.graph.nodes[node.nid].inputs
        views = self.table.views
        types = [TensorType(tuple(views[eid].shape), self.graph.entries[eid].dtype.numpy.name)
                 for eid in inputs]
        data: list[Any] = [None] * len(inputs)
        for staged in self._staging[node.nid]:
            view = views[staged.eid]
            if staged.host is None:
                data[staged.position] = np.asarray(view)
                continue
            host = staged.host[:view.nbytes].view(view.dtype).reshape(view.shape)
            copier(staged.device, _HOST)(view, host)
            self._shape_moves.append((staged.device, _HOST, view.nbytes))
            data[staged.position] = host
        return node.function.shapes(types, data)

    # -- reporting -------------------------------------------------------------------------

    def used_bytes(self) -> dict[Device, int]:
        """Bytes of each device's slots that the last run's shapes used."""
        used = dict.fromkeys(self.plan.devices, 0)
        for slot in self.plan.pool.values():
            used[slot.device] += max(
                (prod(self._actual.get(eid) or self.graph.entries[eid].shape)
                 * self.graph.entries[eid].dtype.itemsize for eid in slot.entries), default=0)
        return used
