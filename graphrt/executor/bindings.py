"""Zero-copy binding: which memory every entry of a run context reads and writes.

An entry reads and writes the context's own slot, caller memory bound to an input or output
(:meth:`Bindings.set_input_zero_copy`, :meth:`Bindings.set_output_zero_copy`, a call's
arrays), or a param of the compiled graph, which every context reads in place. Binding hands a
whole alias group to that memory (see :mod:`graphrt.executor.steps`) and re-prepares only the
steps that use it; outputs no kernel writes get a copy at the end of each run instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..devices import Array, Device, backend_for, copier
from ..errors import ArgumentError, InputError
from .checks import (
    check_array,
    check_fits,
    check_input,
    input_position,
    is_writable,
    locate_as,
    output_position,
)
from .compiled import CompiledGraph
from .dynamic import DynamicRunner
from .memory import SlotPool
from .param_store import ParamReader
from .steps import Step, StepRecipe, StepTable

__all__ = ["Binding", "Bindings"]


@dataclass(frozen=True)
class Binding:
    """Memory bound zero-copy to an input or output: caller memory, or a shared param."""

    given: Any  # the object the caller passed
    native: Array  # the same memory as its device's array
    device: Device
    address: int
    nbytes: int
    shared: bool = False  # a param of the compiled graph (not the caller's memory)


class Bindings:
    """The memory every entry of one run context is bound to, and the steps that use it.

    Args:
        compiled: the compiled graph.
        pool: the context's slots.
        dynamic: the context's shape machinery (None for a static graph).
        specs: the context's steps, which :attr:`table` prepares over the bound arrays.
        unset: the positions of inputs never set, shared with the context's feeds (binding an
            input sets it).
        params: the context's reader of the compiled graph's params (bound as they are).

    Attributes:
        inputs: the binding of each bound input, by position (params included).
        outputs: the binding of each bound output, by position.
        table: the steps, prepared over the arrays every entry is bound to.
    """

    def __init__(self, compiled: CompiledGraph, pool: SlotPool, dynamic: DynamicRunner | None,
                 specs: Sequence[StepRecipe], unset: set[int], params: ParamReader) -> None:
        self.compiled, self.graph, self.plan = compiled, compiled.graph, compiled.plan
        self._pool, self._dynamic, self._unset, self._params = pool, dynamic, unset, params
        self.inputs: dict[int, Binding] = {
            p: _param_binding(param.array, param.device) for p, param in params.initial.items()}
        self.outputs: dict[int, Binding] = {}
        views: list[Array] = [None] * len(self.graph.entries)
        self._copy_outs: dict[int, tuple[tuple[Step, int], ...]] = {}
        for root in compiled.groups.members:
            arrays: dict[int, Array] = {}
            self._copy_outs[root] = self._rebind_group(root, arrays)
            for eid, array in arrays.items():
                views[eid] = array
        self.table = StepTable(specs, views)

    def set_input_zero_copy(self, key: int | str, value: Any) -> None:
        """Bind caller memory as an input: the graph reads ``value`` itself, with no copy.

        The binding persists for later runs until the input is bound again, set with
        :meth:`set_input` (which copies into module-owned storage again), or cleared with
        ``value=None``. Every entry that aliases the input (``__nop`` views of it) reads the
        caller's memory; the caller must not free or resize it while bound, and its contents
        at run time are what the graph sees.

        The array must be on the input's device, have its exact shape and dtype, be
        C-contiguous, and be aligned to its dtype's size (what numpy and cupy kernels need;
        graphrt's own buffers are 64-byte aligned, but any valid device pointer is accepted).
        A failed bind leaves the previous binding in place.

        Raises:
            InputError: an unknown input, or a value that cannot be bound (says which check).

        Example:
            >>> mod.set_input_zero_copy("A", a)  # doctest: +SKIP
        """
        self.bind({input_position(self.compiled, key): value}, {})

    def set_output_zero_copy(self, key: int | str, value: Any) -> None:
        """Bind caller memory as an output: the producing kernel writes straight into it.

        Persists for later runs until bound again or cleared with ``value=None``;
        :meth:`get_output` returns ``value`` while bound. Checks as in
        :meth:`set_input_zero_copy`, and the array must be writable. An output that no kernel
        writes (an input, or a ``__nop`` view of one), or a second output aliasing the same
        tensor, is copied into its buffer at the end of each run instead.

        Raises:
            InputError: an unknown output, or a value that cannot be bound.
        """
        self.bind({}, {output_position(self.compiled, key): value})

    def bind_call(self, inputs: Mapping[int | str, Any], outputs: Sequence[Any]
                  ) -> tuple[dict[int, Binding], dict[int, Binding]]:
        """Bind ``inputs`` and ``outputs`` for one call (see
        :meth:`RunContext.invoke_with_outputs`); return the bindings to :meth:`restore`
        after it.

        Raises:
            ArgumentError, InputError: as :meth:`RunContext.invoke_with_outputs` (nothing is
                bound then).
        """
        n_outputs = len(self.graph.heads)
        if not isinstance(outputs, Sequence) or isinstance(outputs, str | bytes):
            raise ArgumentError(f"outputs must be a sequence of {n_outputs} arrays (one per "
                                f"graph output), given {type(outputs).__name__}")
        if len(outputs) != n_outputs:
            raise InputError(f"outputs must be a sequence of {n_outputs} arrays "
                             f"(one per graph output), given {len(outputs)}")
        if not isinstance(inputs, Mapping):
            raise ArgumentError(f"inputs must be a mapping of names or indexes to arrays, given "
                                f"{type(inputs).__name__}")
        self.sync_params()
        saved = dict(self.inputs), dict(self.outputs)
        self.bind({input_position(self.compiled, key): value for key, value in inputs.items()},
                  {i: value for i, value in enumerate(outputs) if value is not None})
        return saved

    def bind(self, inputs: Mapping[int, Any], outputs: Mapping[int, Any]) -> None:
        """Validate bindings (None unbinds), then apply them all, or none."""
        new_inputs, new_outputs = dict(self.inputs), dict(self.outputs)
        input_eids = self.compiled.input_eids
        for position, value in inputs.items():
            new_inputs.pop(position, None)
            self._unset.discard(position)
            if value is not None:
                new_inputs[position] = self._binding(
                    input_eids[position], value,
                    f"zero-copy input {self.graph.input_names[position]!r}", writable=False)
        for position, value in outputs.items():
            new_outputs.pop(position, None)
            if value is not None:
                new_outputs[position] = self._binding(
                    self.graph.heads[position], value,
                    f"zero-copy output {position} ({self.graph.output_names[position]!r})",
                    writable=True)
        self._check_overlaps(new_inputs, new_outputs)
        self.restore(new_inputs, new_outputs)

    def restore(self, inputs: dict[int, Binding], outputs: dict[int, Binding]) -> None:
        """Make these the bindings and rebind every alias group whose bindings changed."""
        input_eids, heads = self.compiled.input_eids, self.graph.heads
        changed = {input_eids[p] for p in inputs.keys() ^ self.inputs.keys()}
        changed |= {input_eids[p] for p in inputs.keys() & self.inputs.keys()
                    if inputs[p] is not self.inputs[p]}
        changed |= {heads[p] for p in outputs.keys() ^ self.outputs.keys()}
        changed |= {heads[p] for p in outputs.keys() & self.outputs.keys()
                    if outputs[p] is not self.outputs[p]}
        self.inputs, self.outputs = inputs, outputs
        arrays: dict[int, Array] = {}
        for root in {self.compiled.groups.root[eid] for eid in changed}:
            self._copy_outs[root] = self._rebind_group(root, arrays)
        # A dynamic graph's steps are prepared again once the run's shapes are known (its
        # prologue): bound now, an input of a new shape would meet the others' old ones.
        self.table.rebind(arrays, defer=self._dynamic is not None)
        self.table.set_tail([step for steps in self._copy_outs.values() for step in steps])
        if self._dynamic is not None:
            for position, eid in enumerate(input_eids):
                if eid in changed:
                    bound = inputs.get(position)
                    self._dynamic.input_shapes[position] = (
                        tuple(bound.native.shape) if bound is not None
                        else self._dynamic.slot_shapes[position])

    def sync_params(self) -> None:
        """Bind the params published since this context last looked, and free the slots of
        its own that nothing views any more."""
        if self._params.seen == self._params.store.version:
            return
        changed = self._params.take()
        if not changed:
            return
        inputs = dict(self.inputs)
        for position, param in changed.items():
            inputs[position] = _param_binding(param.array, param.device)
        self.restore(inputs, dict(self.outputs))
        for position in changed:
            sid = self.compiled.private_sids[position]
            if sid is not None:
                self._pool.release(sid)  # nothing of the context views it any more

    def _rebind_group(self, root: int,
                      arrays: dict[int, Array]) -> tuple[tuple[Step, int], ...]:
        """Point one alias group at its bound memory; return the copies it needs after a run."""
        compiled, heads = self.compiled, self.graph.heads
        bound = sorted(p for p in self.outputs if compiled.groups.root[heads[p]] == root)
        memory: Binding | None = None
        memory_eid = root
        if root in compiled.input_of_entry:  # no kernel writes this group: outputs get copies
            memory = self.inputs.get(compiled.input_of_entry[root])
        elif bound:
            memory_eid, memory = heads[bound[0]], self.outputs[bound[0]]
            bound = bound[1:]
        dynamic = compiled.dynamic_eids
        for eid in compiled.groups.members[root]:
            if memory is None or (eid in dynamic and eid != memory_eid):
                arrays[eid] = self._pool.view(eid)  # a dynamic one: re-viewed at run
            elif eid == memory_eid:
                arrays[eid] = memory.native
            else:
                arrays[eid] = memory.native.reshape(self.graph.entries[eid].shape)
        if self._dynamic is not None:
            self._dynamic.bind_memory(root, None if memory is None else memory.native)
        return tuple(
            ((copier(self.plan.entry_device[heads[p]], self.outputs[p].device),
              (arrays[heads[p]], self.outputs[p].native)), self.graph.entries[heads[p]].nid)
            for p in bound)

    def _binding(self, eid: int, value: Any, what: str, *, writable: bool) -> Binding:
        check_array(value, what)
        dev, native = locate_as(value, what)
        expected = self.plan.entry_device[eid]
        if dev != expected:
            raise InputError(f"{what}: zero-copy needs an array on {expected}, given one on "
                             f"{dev} (set_input and get_output(out=) copy across devices)")
        if writable:
            if eid in self.compiled.dynamic_eids:
                shape = list(self.graph.entries[eid].shape_text)
                raise InputError(f"{what}: the output's shape {shape} changes from run to run, "
                                 "so it cannot be bound; read it with get_output(i, out=...) "
                                 "or call the module")
            check_fits(self.graph, self.table.views, eid, native, what)
        else:
            check_input(self.compiled, eid, native, what)
        if not native.flags.c_contiguous:
            raise InputError(f"{what}: zero-copy needs C-contiguous memory, given strides "
                             f"{native.strides}")
        if writable and not is_writable(native):
            raise InputError(f"{what}: the array is read-only")
        address = backend_for(dev).data_ptr(native)
        itemsize = native.dtype.itemsize
        if native.nbytes and address % itemsize:
            raise InputError(f"{what}: address {address:#x} is not aligned to {itemsize} bytes, "
                             f"the size of {native.dtype}, which kernels need")
        return Binding(value, native, dev, address, native.nbytes)

    def _check_overlaps(self, inputs: dict[int, Binding], outputs: dict[int, Binding]) -> None:
        """Refuse two bindings sharing memory, unless they are one tensor bound twice."""
        groups, input_eids = self.compiled.groups, self.compiled.input_eids
        named = [(f"input {self.graph.input_names[p]!r}", input_eids[p], b)
                 for p, b in inputs.items()]
        named += [(f"output {p}", self.graph.heads[p], b) for p, b in outputs.items()]
        for i, (what, eid, a) in enumerate(named):
            for other, other_eid, b in named[i + 1:]:
                if (a.device != b.device or not a.nbytes or not b.nbytes
                        or a.address >= b.address + b.nbytes
                        or b.address >= a.address + a.nbytes):
                    continue
                if (groups.root[eid] == groups.root[other_eid]
                        and (a.address, a.nbytes) == (b.address, b.nbytes)):
                    continue
                raise InputError(f"zero-copy {what} and {other} overlap in memory; each bound "
                                 "tensor needs its own buffer")


def _param_binding(array: Array, dev: Device) -> Binding:
    """A param of the compiled graph, read in place (never the caller's memory)."""
    return Binding(array, array, dev, backend_for(dev).data_ptr(array), int(array.nbytes),
                   shared=True)
