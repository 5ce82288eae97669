"""A run context: the memory and bindings one run at a time mutates.

A :class:`RunContext` is made from a :class:`~graphrt.executor.compiled.CompiledGraph` and owns
what a run writes: the activation slots, the scratch arenas of lowered functions, the host
staging buffers of copies and shape functions, the prepared steps, the zero-copy bindings and,
on cuda, a stream. It reads the params from the compiled graph's
:class:`~graphrt.executor.param_store.ParamStore` (it never copies them), so a context costs its
activations and scratch, not the weights. A context is used by one thread at a time;
:class:`~graphrt.executor.module.GraphModule` gives each thread its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..devices import (
    CPU,
    Array,
    Backend,
    Device,
    allocate,
    backend_for,
    copier,
    cpu,
    is_array,
    locate,
)
from ..errors import (
    ArgumentError,
    ExecutionError,
    GraphrtError,
    InputError,
    argument_error,
    describe,
    expect_type,
)
from ..lib import freeze
from .benchmark import BenchmarkResult, check_count, time_calls
from .capture import CaptureReport, CaptureRunner
from .compiled import CompiledGraph
from .dynamic import DynamicRunner
from .memory import MemoryReport
from .parallel import ParallelRunner
from .profiling import ProfileHook, ProfileReport, profile_report
from .runner import Dumper, StepHook, StopAfter, execute
from .steps import KernelSpec, LoweredSpec, Step, StepSpec, StepTable
from .transfers import TransferLog

__all__ = ["RunContext"]

logger = logging.getLogger("graphrt")

_UNFINISHED = (-1, "it is running, or it stopped before running any node")


@dataclass(frozen=True)
class _Binding:
    """Memory bound zero-copy to an input or output: caller memory, or a shared param."""

    given: Any  # the object the caller passed
    native: Array  # the same memory as its device's array
    device: Device
    address: int
    nbytes: int
    shared: bool = False  # a param of the compiled graph (not the caller's memory)


class SlotPool:
    """A context's byte buffer per storage id, allocated when first needed (at ``create()``,
    or for the slot of a param a run context stopped reading from the params, when its input
    is set again: a failure then is a :class:`PlacementError` from that ``set_input``)."""

    def __init__(self, compiled: CompiledGraph, skip: set[int]) -> None:
        self._slots = compiled.plan.pool
        self._label = compiled.graph.entry_label
        self.buffers: dict[int, Array] = {}
        for sid in self._slots:
            if sid not in skip:
                self(sid)

    def __call__(self, sid: int) -> Array:
        buffer = self.buffers.get(sid)
        if buffer is None:
            slot = self._slots[sid]
            what = f"storage_id {sid} ({self._label(slot.entries[0])})"
            buffer = self.buffers[sid] = allocate(slot.device, slot.nbytes, what)
        return buffer

    def release(self, sid: int) -> None:
        self.buffers.pop(sid, None)


class RunContext:
    """One set of run state over a compiled graph; use one from one thread at a time.

    :class:`~graphrt.GraphModule` wraps one per thread and documents each method; a context
    offers the same run-state methods.
    """

    def __init__(self, compiled: CompiledGraph) -> None:
        self.compiled = compiled
        self.graph = graph = compiled.graph
        self.plan = plan = compiled.plan
        self._store = compiled.params
        self._params_seen = self._store.version  # before current: a publish between is seen
        params = self._store.current
        self._param_versions = {position: param.version for position, param in params.items()}
        private = {compiled.private_sids[p] for p in params} - {None}
        self._pool = SlotPool(compiled, {sid for sid in private if sid is not None})
        self._arenas = {dev: allocate(dev, nbytes, "the scratch arena of lowered functions")
                        for dev, nbytes in plan.scratch.arena.items()}
        parallel = compiled.parallel
        self._parallel = None if parallel is None else ParallelRunner(parallel, [
            program.nid for program in compiled.programs])
        lanes = 1 if parallel is None else 1 + max(parallel.lane_of, default=0)
        self._lane_arenas = [self._arenas, *(  # one scratch arena per lane of a parallel run
            {dev: allocate(dev, nbytes, f"the scratch arena of inter-op lane {lane}")
             for dev, nbytes in plan.scratch.arena.items()} for lane in range(1, lanes))]
        self._staging_bytes = 0
        self._dynamic = (None if compiled.shapes is None else
                         DynamicRunner(compiled, self._pool))
        self._bound_inputs: dict[int, _Binding] = {
            p: self._param_binding(param.array, param.device) for p, param in params.items()}
        self._bound_outputs: dict[int, _Binding] = {}
        self._slot_shapes = [graph.entries[eid].shape for eid in compiled.input_eids]
        self._host_slots = {} if self._dynamic is not None else _host_slots(compiled)
        self._head_nids = tuple(graph.entries[eid].nid for eid in graph.heads)
        views: list[Array] = [None] * len(graph.entries)
        self._copy_outs: dict[int, tuple[tuple[Step, int], ...]] = {}
        for root in compiled.groups.members:
            arrays: dict[int, Array] = {}
            self._copy_outs[root] = self._rebind_group(root, arrays)
            for eid, array in arrays.items():
                views[eid] = array
        specs = self._specs()
        if self._dynamic is not None:
            specs = self._dynamic.with_stages(specs)
        self._table = StepTable(specs, views)
        if self._dynamic is not None:
            self._dynamic.table = self._table
        scopes = (backend_for(dev).run_scope() for dev in plan.devices)
        self._scopes: tuple[AbstractContextManager[object], ...] = tuple(
            scope for scope in scopes if scope is not None)
        self._failure: tuple[int, str] | None = None
        self._capture = (CaptureRunner(self._recording_device, self._capture_off())
                         if compiled.cuda_graph else None)
        self._unset = set(range(len(compiled.input_eids))) - set(params)
        # Outputs whose memory holds no result of the last run, which wrote them into the
        # caller's arrays instead (a call, invoke_with_outputs). Before the first run every
        # output holds zeros, as in TVM (inputs never set hold zeros too, with a warning).
        self._unwritten: set[int] = set()

    def _specs(self) -> list[StepSpec]:
        specs: list[StepSpec] = []
        parallel = self.compiled.parallel
        for index, program in enumerate(self.compiled.programs):
            nid = program.nid
            if program.is_copy:
                src, dst = (self.plan.entry_device[eid] for eid in program.eids)
                nbytes = self.graph.entries[program.eids[0]].nbytes
                staged = src.kind != dst.kind and "cpu" not in (src.kind, dst.kind)
                move = copier(src, dst, staging=nbytes if staged else 0)
                self._staging_bytes += nbytes if staged else 0
                specs.append(KernelSpec(nid, "copy", move, program.eids, False))
            elif program.lowering is not None:
                assert program.kernel is not None
                dev = self.plan.node_device[nid]
                lane = 0 if parallel is None else parallel.lane_of[index]
                specs.append(LoweredSpec(nid, program.kernel, program.eids, program.flatten,
                                         program.lowering, self._lane_arenas[lane].get(dev),
                                         program.scratch, backend_for(dev),
                                         self.graph.nodes[nid].label))
            else:
                assert program.kernel is not None
                specs.append(KernelSpec(nid, "op", program.kernel, program.eids,
                                        program.flatten))
        if self._dynamic is not None:
            self._staging_bytes += sum(
                int(staged.host.nbytes) for stage in self._dynamic.staging.values()
                for staged in stage if staged.host is not None)
        return specs

    def _recording_device(self, kind: str, nid: int) -> Device | None:
        """The device that records a step under graph capture, or None (run it alone)."""
        if kind != "op":
            return None
        dev = self.plan.node_device[nid]
        return dev if type(backend_for(dev)).capture is not Backend.capture else None

    def _capture_off(self) -> str | None:
        """Why this graph records nothing under ``cuda_graph=True``, or None."""
        shapes = self.compiled.shapes
        if shapes is not None and shapes.nodes:
            return ("its shape functions read tensor values on the host, so later shapes are "
                    "known only while it runs")
        if not any(self._recording_device("op", p.nid) for p in self.compiled.programs
                   if not p.is_copy):
            return ("none of its kernels runs on a device that records work (cpu kernels are "
                    "plain calls)")
        return None

    def capture_report(self) -> CaptureReport | None:
        """How this thread's runs use graph capture (``create(..., cuda_graph=True)``), or
        None without it: recordings made and replayed, and why runs go node by node if they
        do (see :mod:`graphrt.executor.capture`).

        Example:
            >>> mod.capture_report().replays  # doctest: +SKIP
            12
        """
        return None if self._capture is None else self._capture.report()

    def _slot_view(self, eid: int) -> Array:
        entry = self.graph.entries[eid]
        backend = backend_for(self.plan.entry_device[eid])
        return backend.view(self._pool(entry.sid), entry.shape, entry.dtype.numpy)

    # -- running ---------------------------------------------------------------------------

    def run(self, /, **inputs: Any) -> None:
        """Set any inputs given by name, then execute every step in order.

        On cuda the kernels and copies run on the context's own stream, ordered after cupy's
        current stream of the device (run inside ``with stream:`` to use your own) and before
        it again: what you bound must be ready in that stream's order, and the outputs are
        ready in it afterwards. ``get_output(i, out)`` into host memory waits for them.

        Raises:
            InputError: an input given here does not fit (nothing is set then).
            ExecutionError: a kernel raised; it names the node and chains the original. The
                module stays usable; outputs that run did not finish raise on
                :meth:`get_output` until a run completes.
        """
        if inputs:
            self._set_inputs(inputs)
        self._execute(None)

    def _execute(self, hook: StepHook | None) -> None:
        """One run: take newly published params, run the steps (under the context's streams),
        and remember how far it got."""
        if self._params_seen != self._store.version:
            self._sync_params()
        if self._unset:
            self._check_unset()
        self._failure = _UNFINISHED
        if self._scopes:
            with ExitStack() as stack:
                for scope in self._scopes:
                    stack.enter_context(scope)
                self._run_steps(hook)
        else:
            self._run_steps(hook)
        self._failure = None
        self._unwritten.clear()

    def _check_unset(self) -> None:
        """Inputs and params never set run as zeros: say so once, or refuse."""
        self._unset -= set(self._store.current)
        if not self._unset:
            return
        names = listing(tuple(self.graph.input_names[p] for p in sorted(self._unset)))
        if self.compiled.require_inputs:
            raise InputError(f"inputs never set: {names}; set them (set_input, load_params, "
                             "or the run's keyword arguments) before running")
        logger.warning("running with inputs never set, which hold zeros: %s (set them with "
                       "set_input or load_params; create(..., require_inputs=True) makes this "
                       "an error)", names)
        self._unset = set()  # warned once

    def _run_steps(self, hook: StepHook | None) -> None:
        if self._dynamic is not None:
            self._dynamic.prologue()
        if hook is None and self._capture is not None:
            self._capture.run(self._table, self._fail)
            return
        if hook is None and self._parallel is not None:
            try:
                self._parallel.run(self._table.steps, self._table.nids, self._fail)
            except Exception:
                if self._failure is not None and self._failure is not _UNFINISHED:
                    # nodes of later waves may come before the failed one in node order
                    nid, reason = self._failure
                    self._failure = (min(nid, self._parallel.first_unfinished), reason)
                raise
            return
        execute(self._table.steps, self._table.nids, self._fail, hook)

    def _fail(self, nid: int, err: Exception) -> Exception:
        if isinstance(err, GraphrtError):
            where = err.node_id if isinstance(err, ExecutionError) else nid
            self._failure = (where, str(err))
            return err
        error = self._execution_error(nid, err)
        self._failure = (nid, str(error))
        return error

    def _execution_error(self, nid: int, err: Exception) -> ExecutionError:
        node = self.graph.nodes[nid]
        dev = self.plan.node_device[nid]
        func_name = node.func_name or ""
        return ExecutionError(
            f"{node.label} (func_name {func_name!r}) failed on {dev}: "
            f"{type(err).__name__}: {err}",
            node_id=nid, node_name=node.name, func_name=func_name, device=str(dev))

    def last_run_transfers(self) -> TransferLog:
        """Copies between devices in the last run and their bytes, split into the graph's
        ``__copy`` nodes and the inputs shape functions read on the host.

        Example:
            >>> mod.run(x=x)  # doctest: +SKIP
            >>> mod.last_run_transfers().shape_functions.to_host_bytes  # doctest: +SKIP
            24
        """
        if self._dynamic is None:
            return self.compiled.static_transfers
        return self._dynamic.transfers

    def memory(self) -> MemoryReport:
        planned = self.plan.bytes_per_device()
        used = planned if self._dynamic is None else self._dynamic.used_bytes()
        params = self._store.bytes_per_device()
        own = dict.fromkeys(self.plan.devices, 0)
        for sid, buffer in self._pool.buffers.items():
            own[self.plan.pool[sid].device] += int(buffer.nbytes)
        for arenas in self._lane_arenas:
            for dev, arena in arenas.items():
                own[dev] += int(arena.nbytes)
        return MemoryReport(planned, used, {dev: params.get(dev, 0) for dev in own}, own,
                            self._staging_bytes)

    def invoke_with_outputs(self, inputs: Mapping[int | str, Any],
                            outputs: Sequence[Any]) -> Sequence[Any]:
        """Run once reading ``inputs`` and writing ``outputs`` in place, all bound zero-copy.

        The bindings hold for this call only: afterwards every input and output is bound as it
        was before. ``outputs`` has one array per graph output, in order (``None`` leaves that
        output unbound). The same checks as :meth:`set_input_zero_copy` and
        :meth:`set_output_zero_copy` apply.

        Returns:
            ``outputs``, now holding the results.

        Example:
            >>> y = np.empty(4, "float32")  # doctest: +SKIP
            >>> mod.invoke_with_outputs({"A": a, "B": b, "C": c}, [y])  # doctest: +SKIP
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
        if self._params_seen != self._store.version:
            self._sync_params()
        saved = dict(self._bound_inputs), dict(self._bound_outputs)
        bound = {i: value for i, value in enumerate(outputs) if value is not None}
        self._bind({self._input_position(key): value for key, value in inputs.items()}, bound)
        try:
            self._execute(None)
            self._unwritten.update(bound)  # the results are in the caller's arrays only
        finally:
            self._restore(*saved)
        return outputs

    def __call__(self, /, **inputs: Any) -> tuple[Any, ...]:
        """Run and return the outputs as fresh arrays the caller owns.

        Inputs given here are set as by :meth:`set_input` (copied; they persist). Each output
        is a new array on its device that the kernels write directly; the next run does not
        touch it.

        Example:
            >>> (y,) = mod(A=a, B=b, C=c)  # doctest: +SKIP
        """
        if inputs:
            self._set_inputs(inputs)
        heads = self.graph.heads
        if self._dynamic is not None and any(eid in self._dynamic.dynamic_eids
                                             for eid in heads):
            self._execute(None)  # the outputs' shapes are known only now
            return tuple(self._read(eid, self._fresh_array(eid), "output") for eid in heads)
        fresh = tuple(self._fresh_array(eid) for eid in heads)
        self.invoke_with_outputs({}, fresh)
        return fresh

    # -- measuring and debugging -----------------------------------------------------------

    def profile(self, repeat: int = 10, *, warmup: int = 1) -> ProfileReport:
        """Run ``warmup`` + ``repeat`` times and return per-step timings (``run()`` is untouched).

        Each kernel, copy and shape function (with the bytes it copied to the host) is timed:
        wall clock on host devices, CUDA events on cuda.

        Raises:
            InputError: ``repeat`` < 1 or ``warmup`` < 0.
            ExecutionError: as :meth:`run`.

        Example:
            >>> print(mod.profile(repeat=20).table(top=10))  # doctest: +SKIP
        """
        check_count("repeat", repeat, 1)
        check_count("warmup", warmup, 0)
        for _ in range(warmup):
            self._execute(None)
        table = self._table
        hook = ProfileHook(self.plan, table.nids, repeat)
        for r in range(repeat):
            hook.start_run(r)
            self._execute(hook)
            self._synchronize()
            hook.end_run()
        return profile_report(self.graph, self.plan, list(table.steps), list(table.nids),
                              list(table.kinds), hook, table.views)

    def benchmark(self, /, repeat: int = 5, number: int = 5, min_repeat_ms: float | None = None,
                  end_to_end: bool = False, **inputs: Any) -> BenchmarkResult:
        """Time whole runs, waiting for every device to finish (TVM's cuda ``run()`` did not).

        Args:
            repeat: samples to take.
            number: runs per sample (each sample is their mean).
            min_repeat_ms: double ``number`` until one sample takes at least this long.
            end_to_end: also time copying ``inputs`` in and every output out to host memory.
            **inputs: set once before timing (or copied in on every run with ``end_to_end``).

        Example:
            >>> result = mod.benchmark(repeat=10, min_repeat_ms=100)  # doctest: +SKIP
            >>> result.median, result.std  # doctest: +SKIP
        """
        if not end_to_end:
            if inputs:
                self._set_inputs(inputs)
            return time_calls(self.run, self._synchronize, repeat=repeat, number=number,
                              min_repeat_ms=min_repeat_ms)
        if inputs:
            self._set_inputs(inputs)  # checks them, and unbinds zero-copy inputs named here
        moves_in = [self._transfer_in(self._input_position(key), value)
                    for key, value in inputs.items()]
        if self._dynamic is not None:
            self.run()  # the outputs take these inputs' shapes
        moves_out = []
        for position, eid in enumerate(self.graph.heads):
            if position not in self._bound_outputs:
                host = np.empty(self._table.views[eid].shape, self.graph.entries[eid].dtype.numpy)
                moves_out.append((copier(self.plan.entry_device[eid], cpu(0)), eid, host))

        def end_to_end_call() -> None:
            for move, src, dst in moves_in:
                move(src, dst)
            self.run()
            views = self._table.views
            for move, eid, host in moves_out:
                move(views[eid], host)

        return time_calls(end_to_end_call, self._synchronize, repeat=repeat, number=number,
                          min_repeat_ms=min_repeat_ms)

    def debug_get_output(self, node: int | str, index: int = 0, out: Any = None) -> Any:
        """Output ``index`` of any node, as it is right after that node runs.

        Runs the graph up to and including ``node`` (by id, or by name when the name is
        unique) and returns a copy of its output (or copies it into ``out``), before any later
        node can reuse its storage. Needs no special build.

        Example:
            >>> mod.debug_get_output("conv2d_0")  # doctest: +SKIP
        """
        nid = self._node_id(node)
        outputs = self.graph.nodes[nid].outputs
        check_count("debug_get_output(index=...)", index, 0)
        if not 0 <= index < len(outputs):
            raise InputError(f"{self.graph.nodes[nid].label} has {len(outputs)} output(s), "
                             f"given index {index}")
        self._execute(StopAfter(nid))
        self._failure = (nid + 1, f"debug_get_output ran the graph only up to node {nid}")
        eid = outputs[index]
        target = self._fresh_array(eid) if out is None else out
        self._read(eid, target, f"output {index} of {self.graph.nodes[nid].label}")
        return target

    def dump_outputs(self, path: str | os.PathLike[str]) -> Path:
        """Run once and save every node's outputs, as each node finishes, to an ``.npz`` file.

        Keys are ``"<node name>:<node id>:<output index>"`` (inputs and ``__nop`` views
        included); values are host (numpy) copies.

        Example:
            >>> mod.dump_outputs("outputs.npz")  # doctest: +SKIP
            >>> np.load("outputs.npz")["conv2d_0:12:0"]  # doctest: +SKIP
        """
        expect_type(path, (str, os.PathLike), name="dump_outputs(path)",
                    expected="a path (str or os.PathLike)")
        dumper = Dumper(self.graph, self.to_host)
        self._execute(dumper)
        dumper.save_until(len(self.graph.nodes))
        target = Path(path)
        with target.open("wb") as handle:
            np.savez(handle, **dumper.arrays)  # type: ignore[arg-type]  # keys never clash
        return target

    def _node_id(self, node: int | str) -> int:
        if isinstance(node, str):
            matches = [n.nid for n in self.graph.nodes if n.name == node]
            if len(matches) != 1:
                raise InputError(f"no node is called {describe(node)}" if not matches else
                                 f"{len(matches)} nodes are called {describe(node)} (ids "
                                 f"{matches[:20]}); "
                                 "give the node id")
            return matches[0]
        return _position(node, len(self.graph.nodes), "node")

    def to_host(self, eid: int) -> np.ndarray[Any, Any]:
        """A host copy of an entry as it is now."""
        view = self._table.views[eid]
        host = np.empty(view.shape, dtype=self.graph.entries[eid].dtype.numpy)
        copier(self.plan.entry_device[eid], cpu(0))(view, host)
        return host

    def _synchronize(self) -> None:
        for dev in self.plan.devices:
            backend_for(dev).synchronize()

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
        self._set_inputs(pending)

    def _set_inputs(self, values: Mapping[Any, Any]) -> None:
        if self._copy_host_inputs(values):
            return
        positions = [self._input_position(key) for key in values]
        transfers = [self._transfer_in(position, value)
                     for position, value in zip(positions, values.values(), strict=True)]
        self._unset.difference_update(positions)
        if any(position in self._bound_inputs for position in positions):
            self._bind(dict.fromkeys(positions), {})  # back to the context's own storage
        input_eids = self.compiled.input_eids
        for position, (move, src, dst) in zip(positions, transfers, strict=True):
            move(src, dst)
            if self._dynamic is not None:
                self._slot_shapes[position] = tuple(dst.shape)
                self._dynamic.set_input_shape(position, input_eids[position], tuple(dst.shape))

    def _copy_host_inputs(self, values: Mapping[Any, Any]) -> bool:
        """The common case of :meth:`_set_inputs` at a few bytecodes per input: every value a
        numpy array of its static host input's exact shape and dtype, keyed by name or
        position, and none of those inputs bound. Copies them and returns True, or returns
        False having done nothing (the general path then checks, copies or refuses)."""
        slots = self._host_slots
        bound = self._bound_inputs
        found: list[tuple[_HostSlot, np.ndarray[Any, Any]]] = []
        for key, value in values.items():
            slot = slots.get(key) if type(key) is str or type(key) is int else None
            if (slot is None or type(value) is not np.ndarray or value.shape != slot[2]
                    or value.dtype != slot[3] or slot[0] in bound):
                return False
            found.append((slot, value))
        views = self._table.views
        for (position, eid, _, _), value in found:
            np.copyto(views[eid], value, casting="no")
            self._unset.discard(position)
        return True

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
        self._bind({self._input_position(key): value}, {})

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
        self._bind({}, {self._output_position(key): value})

    def get_input(self, key: int | str, out: Any = None) -> Any:
        """The input's array on its device, or a copy of it in ``out`` (checked)."""
        if self._params_seen != self._store.version:
            self._sync_params()
        position = self._input_position(key)
        bound = self._bound_inputs.get(position)
        if bound is not None and not bound.shared and out is None:
            return bound.given
        return self._read(self.compiled.input_eids[position], out,
                          f"input {self.graph.input_names[position]!r}")

    # -- params ----------------------------------------------------------------------------

    def publish_params(self, values: Mapping[str, Any], *, copy: bool = True) -> None:
        """Check params by name and publish them to the compiled graph's store, where every
        context reads them (see :meth:`GraphModule.load_params`).

        Args:
            values: param name to array (any device).
            copy: copy each value into new memory on its input's device; without it, each
                value must already be there and is published as it is (``share_params``).

        Raises:
            InputError: an unknown name, a shape or dtype that does not match, or (without
                ``copy``) an array on another device; nothing is published then.
        """
        index, input_eids = self.compiled.input_index, self.compiled.input_eids
        unknown = [name for name in values if name not in index]
        if unknown:
            raise InputError(f"params {unknown[:10]} are not inputs of the graph (its inputs "
                             f"are: {listing(self.graph.input_names)})")
        checked = []
        for name, value in values.items():
            position = index[name]
            eid = input_eids[position]
            what = f"input {name!r} (node {self.graph.arg_nodes[position]})"
            src_dev, src = _locate(value, what)
            self._check_input(eid, src, what)
            if not copy and src_dev != self.plan.entry_device[eid]:
                raise InputError(f"{what}: the shared param is on {src_dev}, this graph holds "
                                 f"it on {self.plan.entry_device[eid]}")
            checked.append((position, src_dev, src))
        arrays = {}
        for position, src_dev, src in checked:
            dev = self.plan.entry_device[input_eids[position]]
            array = src
            if copy:
                buffer = allocate(dev, src.nbytes, f"param {self.graph.input_names[position]!r}")
                array = backend_for(dev).view(buffer, tuple(src.shape), src.dtype)
                copier(src_dev, dev)(src, array)
                if isinstance(array, np.ndarray):
                    freeze(array)  # only read from now on: kernels may prepare it once
            arrays[position] = (array, dev)
        for dev in {dev for _, dev in arrays.values()}:
            backend_for(dev).synchronize()  # every context's stream may read them next
        self._store.publish(arrays)
        self._sync_params()  # this context frees its own slots for them now

    def _param_binding(self, array: Array, dev: Device) -> _Binding:
        return _Binding(array, array, dev, backend_for(dev).data_ptr(array), int(array.nbytes),
                        shared=True)

    def _sync_params(self) -> None:
        """Read the params published since this context last looked (latest write wins: a
        param published after this context's own ``set_input`` of it replaces that value)."""
        version = self._store.version
        changed = {p: param for p, param in self._store.current.items()
                   if param.version > self._param_versions.get(p, 0)}
        self._params_seen = version
        if not changed:
            return
        inputs = dict(self._bound_inputs)
        for position, param in changed.items():
            self._param_versions[position] = param.version
            inputs[position] = self._param_binding(param.array, param.device)
        self._restore(inputs, dict(self._bound_outputs))
        for position in changed:
            sid = self.compiled.private_sids[position]
            if sid is not None:
                self._pool.release(sid)  # nothing of the context views it any more

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
        position = self._output_position(index)
        what = f"output {position} ({self.graph.output_names[position]!r})"
        # the arguments first, then whether there is anything to read
        target = None if out is None else self._out_buffer(self.graph.heads[position], out, what)
        if self._failure is not None and self._head_nids[position] >= self._failure[0]:
            nid, reason = self._failure
            raise ExecutionError(
                f"{what} was not computed by the last run ({reason}); run again", node_id=nid,
                node_name=self.graph.nodes[nid].name if nid >= 0 else "",
                func_name=(self.graph.nodes[nid].func_name or "") if nid >= 0 else "",
                device=str(self.plan.node_device[nid]) if nid >= 0 else "")
        bound = self._bound_outputs.get(position)
        if bound is not None and out is None:
            return bound.given  # the caller's own array, as bound
        if position in self._unwritten:
            raise InputError(
                f"{what}: the last run wrote it into the arrays the caller passed or got back "
                "(calling the module, invoke_with_outputs), not into the module's memory, which "
                "holds an older result; use those arrays, or call run() and then get_output")
        return self._read(self.graph.heads[position], out, what, target)

    # -- helpers ---------------------------------------------------------------------------

    def _input_position(self, key: int | str) -> int:
        return _named_position(key, self.compiled.input_index, self.graph.input_names, "input")

    def _output_position(self, key: int | str) -> int:
        candidates = self.graph.output_aliases.get(key) if isinstance(key, str) else None
        if candidates:
            raise InputError(f"output name {describe(key)} is ambiguous: {len(candidates)} "
                             f"outputs come from nodes of that name; give one of "
                             f"{listing(candidates)} (or the position)")
        return _named_position(key, self.compiled.output_index, self.graph.output_names,
                               "output")

    def _transfer_in(self, position: int, value: Any) -> tuple[Any, Array, Array]:
        eid = self.compiled.input_eids[position]
        what = f"input {self.graph.input_names[position]!r} (node {self.graph.arg_nodes[position]})"
        src_dev, src = _locate(value, what)
        self._check_input(eid, src, what)
        if self._dynamic is not None and eid in self._dynamic.dynamic_eids:
            dst = self._dynamic.slot_view(eid, tuple(src.shape))
        else:
            dst = self._slot_view(eid)
        return copier(src_dev, self.plan.entry_device[eid]), src, dst

    def _read(self, eid: int, out: Any, what: str,
              checked: tuple[Device, Array] | None = None) -> Any:
        """Entry ``eid`` as a view, or copied into ``out`` (``checked``: what
        :meth:`_out_buffer` already returned for it)."""
        view = self._table.views[eid]
        if out is None:
            return view.view()  # the caller may reshape it without touching ours
        out_dev, target = checked or self._out_buffer(eid, out, what)
        copier(self.plan.entry_device[eid], out_dev)(view, target)
        return out

    def _out_buffer(self, eid: int, out: Any, what: str) -> tuple[Device, Array]:
        """``out`` checked as a buffer to copy the entry into: an array of its shape and
        dtype (on any device), writable."""
        _check_array(out, f"out buffer for {what}")
        out_dev, target = _locate(out, f"out buffer for {what}")
        self._check_fits(eid, target, f"out buffer for {what}")
        if not _writable(target):
            raise InputError(f"out buffer for {what} is read-only")
        return out_dev, target

    def _check_fits(self, eid: int, array: Array, what: str) -> None:
        """``array`` has the entry's current shape (its last run's, when dynamic) and dtype."""
        entry = self.graph.entries[eid]
        expected = tuple(self._table.views[eid].shape)
        shape, dtype = tuple(array.shape), array.dtype
        if shape != expected or dtype != entry.dtype.numpy:
            raise InputError(f"{what}: expected shape {expected} {entry.dtype}, given "
                             f"shape {shape} {dtype}")

    def _check_input(self, eid: int, array: Array, what: str) -> None:
        """``array`` can be the input: its dtype, and its shape within the graph's bounds."""
        entry = self.graph.entries[eid]
        if self._dynamic is None or entry.dims is None:
            if tuple(array.shape) != entry.shape or array.dtype != entry.dtype.numpy:
                raise InputError(f"{what}: expected shape {entry.shape} {entry.dtype}, given "
                                 f"shape {tuple(array.shape)} {array.dtype}")
            return
        if array.dtype != entry.dtype.numpy:
            raise InputError(f"{what}: expected dtype {entry.dtype} (shape "
                             f"{list(entry.shape_text)}), given {array.dtype}")
        self._dynamic.shapes.check_input(eid, tuple(array.shape), what)

    # -- zero-copy binding -----------------------------------------------------------------

    def _bind(self, inputs: Mapping[int, Any], outputs: Mapping[int, Any]) -> None:
        """Validate bindings (None unbinds), then apply them all, or none."""
        new_inputs, new_outputs = dict(self._bound_inputs), dict(self._bound_outputs)
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
        self._restore(new_inputs, new_outputs)

    def _restore(self, inputs: dict[int, _Binding], outputs: dict[int, _Binding]) -> None:
        """Make these the bindings and rebind every alias group whose bindings changed."""
        input_eids, heads = self.compiled.input_eids, self.graph.heads
        changed = {input_eids[p] for p in inputs.keys() ^ self._bound_inputs.keys()}
        changed |= {input_eids[p] for p in inputs.keys() & self._bound_inputs.keys()
                    if inputs[p] is not self._bound_inputs[p]}
        changed |= {heads[p] for p in outputs.keys() ^ self._bound_outputs.keys()}
        changed |= {heads[p] for p in outputs.keys() & self._bound_outputs.keys()
                    if outputs[p] is not self._bound_outputs[p]}
        self._bound_inputs, self._bound_outputs = inputs, outputs
        arrays: dict[int, Array] = {}
        for root in {self.compiled.groups.root[eid] for eid in changed}:
            self._copy_outs[root] = self._rebind_group(root, arrays)
        self._table.rebind(arrays)
        self._table.set_tail([step for steps in self._copy_outs.values() for step in steps])
        if self._dynamic is not None:
            for position, eid in enumerate(input_eids):
                if eid in changed:
                    bound = inputs.get(position)
                    self._dynamic.input_shapes[position] = (
                        tuple(bound.native.shape) if bound is not None
                        else self._slot_shapes[position])

    def _rebind_group(self, root: int,
                      arrays: dict[int, Array]) -> tuple[tuple[Step, int], ...]:
        """Point one alias group at its bound memory; return the copies it needs after a run."""
        compiled, heads = self.compiled, self.graph.heads
        bound = sorted(p for p in self._bound_outputs if compiled.groups.root[heads[p]] == root)
        memory: _Binding | None = None
        memory_eid = root
        if root in compiled.input_of_entry:  # no kernel writes this group: outputs get copies
            memory = self._bound_inputs.get(compiled.input_of_entry[root])
        elif bound:
            memory_eid, memory = heads[bound[0]], self._bound_outputs[bound[0]]
            bound = bound[1:]
        dynamic = compiled.dynamic_eids
        for eid in compiled.groups.members[root]:
            if memory is None or (eid in dynamic and eid != memory_eid):
                arrays[eid] = self._slot_view(eid)  # a dynamic one: re-viewed at run
            elif eid == memory_eid:
                arrays[eid] = memory.native
            else:
                arrays[eid] = memory.native.reshape(self.graph.entries[eid].shape)
        if self._dynamic is not None:
            self._dynamic.bind_memory(root, None if memory is None else memory.native)
        return tuple(
            ((copier(self.plan.entry_device[heads[p]], self._bound_outputs[p].device),
              (arrays[heads[p]], self._bound_outputs[p].native)), self.graph.entries[heads[p]].nid)
            for p in bound)

    def _binding(self, eid: int, value: Any, what: str, *, writable: bool) -> _Binding:
        _check_array(value, what)
        dev, native = _locate(value, what)
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
            self._check_fits(eid, native, what)
        else:
            self._check_input(eid, native, what)
        if not native.flags.c_contiguous:
            raise InputError(f"{what}: zero-copy needs C-contiguous memory, given strides "
                             f"{native.strides}")
        if writable and not _writable(native):
            raise InputError(f"{what}: the array is read-only")
        address = backend_for(dev).data_ptr(native)
        itemsize = native.dtype.itemsize
        if native.nbytes and address % itemsize:
            raise InputError(f"{what}: address {address:#x} is not aligned to {itemsize} bytes, "
                             f"the size of {native.dtype}, which kernels need")
        return _Binding(value, native, dev, address, native.nbytes)

    def _check_overlaps(self, inputs: dict[int, _Binding], outputs: dict[int, _Binding]) -> None:
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

    def _fresh_array(self, eid: int) -> Array:
        view, dev = self._table.views[eid], self.plan.entry_device[eid]
        buffer = allocate(dev, view.nbytes, f"a fresh output ({self.graph.entry_label(eid)})")
        return backend_for(dev).view(buffer, tuple(view.shape), view.dtype)


_HostSlot = tuple[int, int, tuple[int, ...], "np.dtype[Any]"]
"""A host input's position, entry, shape and dtype."""


def _host_slots(compiled: CompiledGraph) -> dict[str | int, _HostSlot]:
    """Each host input of a graph with static shapes, by name and by position, for
    :meth:`RunContext._copy_host_inputs`."""
    graph = compiled.graph
    slots: dict[str | int, _HostSlot] = {}
    for position, eid in enumerate(compiled.input_eids):
        if compiled.plan.entry_device[eid].type_code == CPU:
            entry = graph.entries[eid]
            slot = (position, eid, tuple(entry.shape), np.dtype(entry.dtype.numpy))
            slots[position] = slots[graph.input_names[position]] = slot
    return slots


def _locate(value: Any, what: str) -> tuple[Device, Array]:
    try:
        return locate(value)
    except InputError as err:
        raise type(err)(f"{what}: {err}") from None


def _check_array(value: Any, what: str) -> None:
    """Memory graphrt writes into or binds must be an array, not a list it would copy."""
    if not is_array(value):
        argument_error(what, "an array (numpy, cupy, sim, or a DLPack tensor such as torch's)",
                       value)


def _writable(array: Array) -> bool:
    flags = getattr(array, "flags", None)
    return bool(getattr(flags, "writeable", True))


def _named_position(key: object, index: Mapping[str, int], names: tuple[str, ...],
                    kind: str) -> int:
    """The position of an input or output given by name or position."""
    if isinstance(key, str):
        position = index.get(key)
        if position is None:
            raise InputError(f"unknown {kind} {describe(key)}; the graph's {kind}s are: "
                             f"{listing(names)}")
        return position
    return _position(key, len(names), kind)


def _position(key: object, count: int, kind: str) -> int:
    if isinstance(key, bool) or not isinstance(key, int):
        raise ArgumentError(f"{kind} key must be a name (str) or a position (int), given "
                            f"{describe(key)}")
    if not 0 <= key < count:
        raise InputError(f"{kind} index {describe(key)} is out of range: the graph has {count} "
                         f"{kind}s")
    return key


def listing(names: tuple[str, ...], limit: int = 20) -> str:
    """Names as ``'a', 'b', ...`` (the first ``limit``, then how many in all)."""
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
