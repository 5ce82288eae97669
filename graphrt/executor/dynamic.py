"""Running a graph whose shapes change from run to run, in storage planned once at the bounds.

Every run binds the shape variables from the inputs' shapes, re-views the entries whose shape
changed (views of the same slots: nothing is allocated), and, before each shape node, copies to
the host exactly the inputs its shape function reads, runs it, binds the variables it gives and
re-views the entries that depend on them. :class:`TransferLog` keeps what crossed to the host.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from ..devices import Array, Device, allocate_host, backend_for, copier, cpu
from ..errors import ExecutionError, GraphrtError, InputError
from ..lib import TensorType
from .compiled import CompiledGraph
from .shapes import ShapeNode
from .steps import FixedRecipe, StepRecipe, StepTable
from .transfers import TransferLog, tally

__all__ = ["DynamicRunner", "ShapeStage"]

_HOST = cpu(0)


@dataclass
class _Staging:
    """One data-dependent input of a shape node: where it is and its host buffer."""

    position: int  # input position in the node
    eid: int
    device: Device
    host: np.ndarray[Any, Any] | None  # planned-size bytes; None when already on the host


class ShapeStage:
    """A step that runs one shape node's shape function before the node's kernel, copying to
    the host the inputs it reads; ``moved`` is what it copied in the last run."""

    def __init__(self, runner: DynamicRunner, node: ShapeNode) -> None:
        self._runner = weakref.ref(runner)  # no cycle: a dropped context frees at once
        self._shape_node = node
        self.moved: list[tuple[Device, Device, int]] = []

    def __call__(self) -> None:
        self.moved = []
        runner = self._runner()
        assert runner is not None
        runner.run_stage(self._shape_node, self.moved)


class DynamicRunner:
    """The per-run shape machinery of one run context (absent from static graphs).

    Args:
        compiled: the compiled graph (its shape program is not None).
        buffer: a storage id's byte buffer in the context.
    """

    def __init__(self, compiled: CompiledGraph, buffer: Callable[[int], Array]) -> None:
        assert compiled.shapes is not None
        self.graph, self.plan, self.shapes = compiled.graph, compiled.plan, compiled.shapes
        self.groups = compiled.groups
        self.buffer = buffer
        self.dynamic_eids = compiled.dynamic_eids
        self.table: StepTable | None = None  # set by attach()
        self._actual: dict[int, tuple[int, ...] | None] = {
            eid: self.graph.entries[eid].shape for eid in self.dynamic_eids}
        self._memory: dict[int, Array] = {}  # alias group root -> caller's array (inputs)
        self._entry_stage = {eid: stage for stage, eids in
                             enumerate(self.shapes.stage_entries) for eid in eids}
        self.staging = {node.nid: self._stage(node) for node in self.shapes.nodes}
        self.stages = {node.nid: ShapeStage(self, node) for node in self.shapes.nodes}
        self._copies = [(p.eids[0], self.plan.entry_device[p.eids[0]],
                         self.plan.entry_device[p.eids[1]])
                        for p in compiled.programs if p.is_copy]
        self.env: dict[str, int] = {}
        self.input_shapes = [self.graph.entries[eid].shape for eid in compiled.input_eids]
        """The shape of each input's data: a zero-copy binding's, else its own slot's."""
        self.slot_shapes = list(self.input_shapes)
        """The shape of the data in each input's own slot (what ``set_input`` copied)."""
        self._last_inputs: tuple[tuple[int, ...], ...] | None = None

    def with_stages(self, specs: Sequence[StepRecipe]) -> list[StepRecipe]:
        """``specs`` with each shape node's stage just before the node's first step."""
        result: list[StepRecipe] = []
        for spec in specs:
            stage = self.stages.get(spec.nid)
            if stage is not None and spec.kind != "shape":
                result.append(FixedRecipe(spec.nid, "shape", stage))
            result.append(spec)
        return result

    def _stage(self, node: ShapeNode) -> list[_Staging]:
        staged = []
        inputs = self.graph.nodes[node.nid].inputs
        for position, (eid, needed) in enumerate(zip(inputs, node.function.data_dependent,
                                                     strict=True)):
            if needed:
                dev = self.plan.entry_device[eid]
                host = None if dev.kind == "cpu" else allocate_host(
                    dev, self.graph.entries[eid].nbytes, self.graph.entry_label(eid))
                staged.append(_Staging(position, eid, dev, host))
        return staged

    # -- views -----------------------------------------------------------------------------

    def slot_view(self, eid: int, shape: tuple[int, ...]) -> Array:
        """The entry's own slot viewed at ``shape`` (which must fit what was planned)."""
        dtype = self.graph.entries[eid].dtype.numpy
        buffer = self.buffer(self.graph.entries[eid].sid)
        return backend_for(self.plan.entry_device[eid]).view(buffer, shape, dtype)

    def set_input_shape(self, position: int, eid: int, shape: tuple[int, ...]) -> None:
        """An input's slot now holds data of ``shape``: view it so (and its aliases later)."""
        self.slot_shapes[position] = shape
        self.input_shapes[position] = shape
        if eid in self.dynamic_eids and self._actual[eid] != shape:
            assert self.table is not None
            self._last_inputs = None
            self.table.rebind({eid: self.slot_view(eid, shape)}, defer=True)
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
        assert self.table is not None
        self.table.rebind(arrays, defer=True)
        # a step is prepared once every entry it reads or writes has this run's shape: a
        # node after two data-dependent ones waits for the second
        self.table.flush(lambda eids: all(self._entry_stage.get(e, 0) <= stage for e in eids))

    # -- running ---------------------------------------------------------------------------

    def prologue(self) -> None:
        """Bind the variables the inputs' shapes give and view what they size (stage 0).

        Raises:
            InputError: the inputs' shapes disagree or do not fit the graph (before anything
                runs).
        """
        key = tuple(self.input_shapes)
        assert self.table is not None
        if key != self._last_inputs or self.shapes.nodes:
            self._last_inputs = None  # until the inputs' stage is applied
            self.env = self.shapes.bind_inputs(key, self.graph.input_names)
            try:
                self._apply(0)  # (the steps rebinding deferred, at this run's shapes)
            except GraphrtError:  # the input's own errors, or graphrt's planning failing
                raise
            except Exception as err:
                raise InputError(f"the inputs' shapes do not fit the graph: {err}") from err
            self._last_inputs = key
        else:
            self.table.flush()  # steps bound to other memory since the last run

    @property
    def transfers(self) -> TransferLog:
        """What the last run copied (``__copy`` nodes sized by the shapes it ran with)."""
        assert self.table is not None
        views = self.table.views
        moved = [move for stage in self.stages.values() for move in stage.moved]
        return TransferLog(tally([(src, dst, views[eid].nbytes)
                                  for eid, src, dst in self._copies]), tally(moved))

    def run_stage(self, node: ShapeNode, moved: list[tuple[Device, Device, int]]) -> None:
        """Run ``node``'s shape function, bind what it gives and view what that sizes.

        Raises:
            ExecutionError: the shape function failed or gave shapes the plan cannot hold.
        """
        try:
            self.shapes.bind_outputs(node, self._shape_function(node, moved), self.env)
            self._apply(node.stage)
        except (InputError, ExecutionError):
            raise
        except Exception as err:
            graph_node = self.graph.nodes[node.nid]
            dev = self.plan.node_device[node.nid]
            raise ExecutionError(
                f"{graph_node.label} (func_name {graph_node.func_name!r}): shape function on "
                f"the host failed: {type(err).__name__}: {err}", node_id=node.nid,
                node_name=graph_node.name, func_name=graph_node.func_name or "",
                device=str(dev)) from err

    def _shape_function(self, node: ShapeNode,
                        moved: list[tuple[Device, Device, int]]) -> list[tuple[int, ...]]:
        inputs = self.graph.nodes[node.nid].inputs
        assert self.table is not None
        views = self.table.views
        types = [TensorType(tuple(views[eid].shape), self.graph.entries[eid].dtype.numpy.name)
                 for eid in inputs]
        data: list[Any] = [None] * len(inputs)
        for staged in self.staging[node.nid]:
            view = views[staged.eid]
            if staged.host is None:
                data[staged.position] = np.asarray(view)
                continue
            host = staged.host[:view.nbytes].view(view.dtype).reshape(view.shape)
            copier(staged.device, _HOST)(view, host)
            moved.append((staged.device, _HOST, view.nbytes))
            data[staged.position] = host
        return node.function.shapes(types, data)

    # -- reporting -------------------------------------------------------------------------

    def used_bytes(self) -> dict[Device, int]:
        """Bytes of each device's slots that the last run's shapes used, and its scratch
        arena (counted whole: intermediates live only while their node runs)."""
        used = dict.fromkeys(self.plan.devices, 0)
        for slot in self.plan.pool.values():
            used[slot.device] += max(
                (prod(self._actual.get(eid) or self.graph.entries[eid].shape)
                 * self.graph.entries[eid].dtype.itemsize for eid in slot.entries), default=0)
        for dev, nbytes in self.plan.scratch.arena.items():
            used[dev] += nbytes
        return used
