"""A run context's inputs and outputs: values copied in, results read out, each checked.

:class:`Feeds` copies what ``set_input`` and ``run(**inputs)`` are given into the context's own
slots (from any device), and reads outputs and inputs back, as the context's own arrays or
copied into the caller's. It knows which inputs were never set and which outputs hold no result
of the last run. Zero-copy binding is :mod:`graphrt.executor.bindings`' job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..devices import CPU, Array, Copier, Device, allocate, backend_for, copier
from ..errors import ExecutionError, InputError, argument_error
from .bindings import Bindings
from .checks import (
    check_array,
    check_fits,
    check_input,
    input_position,
    is_writable,
    listing,
    locate_as,
    output_position,
)
from .compiled import CompiledGraph
from .dynamic import DynamicRunner
from .memory import SlotPool

__all__ = ["Feeds"]

logger = logging.getLogger("graphrt")

_HostSlot = tuple[int, int, tuple[int, ...], "np.dtype[Any]"]
"""A host input's position, entry, shape and dtype."""


class Feeds:
    """The inputs and outputs of one run context (see :class:`~graphrt.GraphModule`).

    Args:
        compiled: the compiled graph.
        pool: the context's slots, which inputs are copied into.
        dynamic: the context's shape machinery (None for a static graph).
        bindings: the context's zero-copy bindings (and the steps' arrays).
        unset: the positions of inputs never set, shared with ``bindings``.

    Attributes:
        unset: the positions of inputs never set (they hold zeros).
        unwritten: outputs whose memory holds no result of the last run, which wrote them into
            the caller's arrays instead (a call, ``invoke_with_outputs``). Before the first run
            every output holds zeros, as in TVM (inputs never set hold zeros too, with a
            warning).
        failure: how far the last run got when it failed: the first node whose outputs it may
            not have written, and why; None after a run that completed.
    """

    def __init__(self, compiled: CompiledGraph, pool: SlotPool, dynamic: DynamicRunner | None,
                 bindings: Bindings, unset: set[int]) -> None:
        self.compiled, self.graph, self.plan = compiled, compiled.graph, compiled.plan
        self._pool, self._dynamic, self._bindings = pool, dynamic, bindings
        self._views = bindings.table.views
        self._host_slots = {} if dynamic is not None else _host_slots(compiled)
        self._head_nids = tuple(self.graph.entries[eid].nid for eid in self.graph.heads)
        self.unset = unset
        self.unwritten: set[int] = set()
        self.failure: tuple[int, str] | None = None

    # -- inputs ----------------------------------------------------------------------------

    def set_input(self, key: int | str | None = None, value: Any = None, /,
                  **params: Any) -> None:
        """Copy values into inputs, by name or index: ``set_input("A", a)``, ``set_input(A=a)``.

        Values may be numpy, cupy or sim arrays, or anything with ``__dlpack__`` or
        ``__array__``; a value on another device than its input is copied across. Shape and
        dtype must match exactly: graphrt never casts or reshapes an input (TVM did silently).
        All values are checked before any is copied, so a bad one leaves every input as it was.

        Raises:
            ArgumentError: a key that is not a name or position, a value that is not an array.
            InputError: an unknown name or index, or a shape or dtype that does not match.
            PlacementError: the input's storage had to be allocated again (it was read from
                the params) and the device could not give it.
        """
        pending: dict[Any, Any] = dict(params)
        if key is not None:
            pending[key] = value
        elif value is not None:
            argument_error("set_input(key, value)", "the input's name (str) or position (int) "
                           "as the key", key)
        self.set_inputs(pending)

    def set_inputs(self, values: Mapping[Any, Any]) -> None:
        """Copy values into inputs by name or position (see :meth:`set_input`)."""
        if self._copy_host_inputs(values):
            return
        positions = [input_position(self.compiled, key) for key in values]
        transfers = [self.transfer_in(position, value)
                     for position, value in zip(positions, values.values(), strict=True)]
        self.unset.difference_update(positions)
        if any(position in self._bindings.inputs for position in positions):
            self._bindings.bind(dict.fromkeys(positions), {})  # back to the context's storage
        input_eids = self.compiled.input_eids
        for position, (move, src, dst) in zip(positions, transfers, strict=True):
            move(src, dst)
            if self._dynamic is not None:
                self._dynamic.set_input_shape(position, input_eids[position], tuple(dst.shape))

    def _copy_host_inputs(self, values: Mapping[Any, Any]) -> bool:
        """The common case of :meth:`set_inputs` at a few bytecodes per input: every value a
        numpy array of its static host input's exact shape and dtype, keyed by name or
        position, and none of those inputs bound. Copies them and returns True, or returns
        False having done nothing (the general path then checks, copies or refuses)."""
        slots = self._host_slots
        bound = self._bindings.inputs
        found: list[tuple[_HostSlot, np.ndarray[Any, Any]]] = []
        for key, value in values.items():
            slot = slots.get(key) if type(key) is str or type(key) is int else None
            if (slot is None or type(value) is not np.ndarray or value.shape != slot[2]
                    or value.dtype != slot[3] or slot[0] in bound):
                return False
            found.append((slot, value))
        views = self._views
        for (position, eid, _, _), value in found:
            np.copyto(views[eid], value, casting="no")
            self.unset.discard(position)
        return True

    def transfer_in(self, position: int, value: Any) -> tuple[Copier, Array, Array]:
        """The copy of ``value`` into input ``position``'s own slot, checked, not made yet:
        ``(copy, source, destination)``."""
        eid = self.compiled.input_eids[position]
        what = f"input {self.graph.input_names[position]!r} (node {self.graph.arg_nodes[position]})"
        src_dev, src = locate_as(value, what)
        check_input(self.compiled, eid, src, what)
        if self._dynamic is not None and eid in self._dynamic.dynamic_eids:
            dst = self._dynamic.slot_view(eid, tuple(src.shape))
        else:
            dst = self._pool.view(eid)
        return copier(src_dev, self.plan.entry_device[eid]), src, dst

    def get_input(self, key: int | str, out: Any = None) -> Any:
        """The input's array on its device, or a copy of it in ``out`` (checked)."""
        self._bindings.sync_params()
        position = input_position(self.compiled, key)
        bound = self._bindings.inputs.get(position)
        if bound is not None and not bound.shared and out is None:
            return bound.given
        return self.read(self.compiled.input_eids[position], out,
                         f"input {self.graph.input_names[position]!r}")

    def check_unset(self, params: Mapping[int, object]) -> None:
        """Inputs and params never set run as zeros: say so once, or refuse (``params``: the
        params published now, which count as set)."""
        self.unset -= set(params)
        if not self.unset:
            return
        names = listing(tuple(self.graph.input_names[p] for p in sorted(self.unset)))
        if self.compiled.require_inputs:
            raise InputError(f"inputs never set: {names}; set them (set_input, load_params, "
                             "or the run's keyword arguments) before running")
        logger.warning("running with inputs never set, which hold zeros: %s (set them with "
                       "set_input or load_params; create(..., require_inputs=True) makes this "
                       "an error)", names)
        self.unset.clear()  # warned once

    def check_params(self, values: Mapping[str, Any], *, copy: bool
                     ) -> dict[int, tuple[str, Device, Array, Device]]:
        """Params by name, checked against their inputs, as :meth:`ParamStore.load` takes them.

        Raises:
            InputError: an unknown name, a shape or dtype that does not match, or (without
                ``copy``) an array on another device than its input.
        """
        index, input_eids = self.compiled.input_index, self.compiled.input_eids
        unknown = [name for name in values if name not in index]
        if unknown:
            raise InputError(f"params {unknown[:10]} are not inputs of the graph (its inputs "
                             f"are: {listing(self.graph.input_names)})")
        checked = {}
        for name, value in values.items():
            position = index[name]
            eid = input_eids[position]
            what = f"input {name!r} (node {self.graph.arg_nodes[position]})"
            src_dev, src = locate_as(value, what)
            check_input(self.compiled, eid, src, what)
            dev = self.plan.entry_device[eid]
            if not copy and src_dev != dev:
                raise InputError(f"{what}: the shared param is on {src_dev}, this graph holds "
                                 f"it on {dev}")
            checked[position] = (self.graph.input_names[position], src_dev, src, dev)
        return checked

    # -- outputs ---------------------------------------------------------------------------

    def get_output(self, index: int | str, out: Any = None) -> Any:
        """Output ``index`` (a position or an output name).

        Without ``out``: the array bound with :meth:`set_output_zero_copy` if there is one,
        else the module's own array on its device, which the next run overwrites (copy it to
        keep it). With ``out`` (numpy, cupy, sim or DLPack; any device): the output is
        copied into it after checking shape and dtype, and ``out`` is returned.

        Raises:
            ArgumentError: ``index`` is not a name or position, ``out`` is not an array.
            InputError: no such output, or ``out`` does not fit; or the last run wrote the
                output into the caller's arrays only (calling the module,
                :meth:`invoke_with_outputs`), so the module's memory holds an older result.
                (Before the first run, an output holds zeros, as in TVM.)
            ExecutionError: the last run failed (or ``debug_get_output`` stopped it) before
                this output was computed: its memory holds no result of that run.
        """
        position = output_position(self.compiled, index)
        what = f"output {position} ({self.graph.output_names[position]!r})"
        # the arguments first, then whether there is anything to read
        target = None if out is None else self.out_buffer(self.graph.heads[position], out, what)
        if self.failure is not None and self._head_nids[position] >= self.failure[0]:
            nid, reason = self.failure
            raise ExecutionError(
                f"{what} was not computed by the last run ({reason}); run again", node_id=nid,
                node_name=self.graph.nodes[nid].name if nid >= 0 else "",
                func_name=(self.graph.nodes[nid].func_name or "") if nid >= 0 else "",
                device=str(self.plan.node_device[nid]) if nid >= 0 else "")
        bound = self._bindings.outputs.get(position)
        if bound is not None and out is None:
            return bound.given  # the caller's own array, as bound
        if position in self.unwritten:
            raise InputError(
                f"{what}: the last run wrote it into the arrays the caller passed or got back "
                "(calling the module, invoke_with_outputs), not into the module's memory, which "
                "holds an older result; use those arrays, or call run() and then get_output")
        return self.read(self.graph.heads[position], out, what, target)

    def read(self, eid: int, out: Any, what: str,
             checked: tuple[Device, Array] | None = None) -> Any:
        """Entry ``eid`` as a view, or copied into ``out`` (``checked``: what
        :meth:`out_buffer` already returned for it)."""
        view = self._views[eid]
        if out is None:
            return view.view()  # the caller may reshape it without touching ours
        out_dev, target = checked or self.out_buffer(eid, out, what)
        copier(self.plan.entry_device[eid], out_dev)(view, target)
        return out

    def out_buffer(self, eid: int, out: Any, what: str) -> tuple[Device, Array]:
        """``out`` checked as a buffer to copy the entry into: an array of its shape and
        dtype (on any device), writable."""
        check_array(out, f"out buffer for {what}")
        out_dev, target = locate_as(out, f"out buffer for {what}")
        check_fits(self.graph, self._views, eid, target, f"out buffer for {what}")
        if not is_writable(target):
            raise InputError(f"out buffer for {what} is read-only")
        return out_dev, target

    def fresh_array(self, eid: int) -> Array:
        """A new array of the entry's current shape and dtype on its device, the caller's."""
        view, dev = self._views[eid], self.plan.entry_device[eid]
        buffer = allocate(dev, view.nbytes, f"a fresh output ({self.graph.entry_label(eid)})")
        return backend_for(dev).view(buffer, tuple(view.shape), view.dtype)


def _host_slots(compiled: CompiledGraph) -> dict[str | int, _HostSlot]:
    """Each host input of a graph with static shapes, by name and by position, for
    :meth:`Feeds._copy_host_inputs`."""
    graph = compiled.graph
    slots: dict[str | int, _HostSlot] = {}
    for position, eid in enumerate(compiled.input_eids):
        if compiled.plan.entry_device[eid].type_code == CPU:
            entry = graph.entries[eid]
            slot = (position, eid, tuple(entry.shape), np.dtype(entry.dtype.numpy))
            slots[position] = slots[graph.input_names[position]] = slot
    return slots
