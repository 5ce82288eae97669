"""A run context: the memory one run at a time mutates, and the run itself.

A :class:`RunContext` is made from a :class:`~graphrt.executor.compiled.CompiledGraph` and owns
what a run writes: the activation slots, the scratch arenas of lowered functions, the host
staging buffers of copies and shape functions, the prepared steps and, on cuda, a stream. It
reads the params from the compiled graph's :class:`~graphrt.executor.param_store.ParamStore`
(it never copies them), so a context costs its activations and scratch, not the weights. A
context is used by one thread at a time; :class:`~graphrt.executor.module.GraphModule` gives
each thread its own.

The other jobs on a context are done apart, as ONNX Runtime keeps IOBinding apart from the
session and TVM its debug executor apart from the graph executor: :attr:`RunContext.feeds`
(inputs and outputs, :mod:`graphrt.executor.feeds`), :attr:`RunContext.bindings` (zero copy,
:mod:`graphrt.executor.bindings`), and :mod:`graphrt.executor.instruments` (profile, benchmark,
debug outputs and dumps, as functions over a context). How a plain run executes its steps (in
order, in parallel lanes, or replayed from graph captures) is picked once, when the context is
made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from ..devices import allocate, backend_for, copier
from ..errors import ExecutionError
from ..kernels.cpu.crew import available_cores, threads_held
from .bindings import Bindings
from .capture import CaptureReport, capture_runner
from .compiled import CompiledGraph
from .dynamic import DynamicRunner
from .feeds import Feeds
from .memory import MemoryReport, SlotPool
from .parallel import ParallelRunner
from .param_store import ParamReader
from .runner import Runner, in_order
from .steps import KernelRecipe, LoweredRecipe, StepRecipe
from .transfers import TransferLog

__all__ = ["RunContext"]

_UNFINISHED = (-1, "it is running, or it stopped before running any node")


class RunContext:
    """One set of run state over a compiled graph; use one from one thread at a time.

    :class:`~graphrt.GraphModule` wraps one per thread and documents each method; a context
    offers the same run-state methods (its :attr:`feeds` and :attr:`bindings` do the work of
    the input and output ones).

    Attributes:
        feeds: its inputs and outputs (:class:`~graphrt.executor.feeds.Feeds`).
        bindings: the memory its entries are bound to
            (:class:`~graphrt.executor.bindings.Bindings`).
    """

    def __init__(self, compiled: CompiledGraph) -> None:
        self.compiled = compiled
        self.graph = compiled.graph
        self.plan = plan = compiled.plan
        self._store = compiled.params
        self._params = ParamReader(self._store)
        params = self._params.initial
        private = {compiled.private_sids[p] for p in params} - {None}
        self._pool = SlotPool(compiled, {sid for sid in private if sid is not None})
        self._arenas = {dev: allocate(dev, nbytes, "the scratch arena of lowered functions")
                        for dev, nbytes in plan.scratch.arena.items()}
        parallel = compiled.parallel
        lanes = 1 if parallel is None else 1 + max(parallel.lane_of, default=0)
        self._lane_arenas = [self._arenas, *(  # one scratch arena per lane of a parallel run
            {dev: allocate(dev, nbytes, f"the scratch arena of inter-op lane {lane}")
             for dev, nbytes in plan.scratch.arena.items()} for lane in range(1, lanes))]
        self._staging_bytes = 0
        self._dynamic = (None if compiled.shapes is None else
                         DynamicRunner(compiled, self._pool))
        specs = self._specs()
        if self._dynamic is not None:
            specs = self._dynamic.with_stages(specs)
        unset = set(range(len(compiled.input_eids))) - set(params)
        self.bindings = Bindings(compiled, self._pool, self._dynamic, specs, unset, self._params)
        self._table = self.bindings.table
        if self._dynamic is not None:
            self._dynamic.table = self._table
        self.feeds = Feeds(compiled, self._pool, self._dynamic, self.bindings, unset)
        scopes = [backend_for(dev).run_scope() for dev in plan.devices]
        if compiled.threads < available_cores():  # create(threads=...) holds the cpu's down
            scopes.append(threads_held(compiled.threads))
        self._scopes: tuple[AbstractContextManager[object], ...] = tuple(
            scope for scope in scopes if scope is not None)
        self._capture = capture_runner(compiled) if compiled.cuda_graph else None
        # how every plain run executes the steps, picked once: replayed, in lanes, or in order
        self._runner: Runner = in_order
        if self._capture is not None:
            self._runner = self._capture.run
        elif parallel is not None:
            self._runner = ParallelRunner(parallel, [p.nid for p in compiled.programs]).run

    def _specs(self) -> list[StepRecipe]:
        specs: list[StepRecipe] = []
        parallel = self.compiled.parallel
        for index, program in enumerate(self.compiled.programs):
            nid = program.nid
            if program.is_copy:
                src, dst = (self.plan.entry_device[eid] for eid in program.eids)
                nbytes = self.graph.entries[program.eids[0]].nbytes
                staged = src.kind != dst.kind and "cpu" not in (src.kind, dst.kind)
                move = copier(src, dst, staging=nbytes if staged else 0)
                self._staging_bytes += nbytes if staged else 0
                specs.append(KernelRecipe(nid, "copy", move, program.eids, program.flatten))
            elif program.lowering is not None:
                assert program.kernel is not None
                dev = self.plan.node_device[nid]
                lane = 0 if parallel is None else parallel.lane_of[index]
                specs.append(LoweredRecipe(nid, program.kernel, program.eids, program.flatten,
                                         program.lowering, self._lane_arenas[lane].get(dev),
                                         program.scratch, backend_for(dev),
                                         self.graph.nodes[nid].label))
            else:
                assert program.kernel is not None
                specs.append(KernelRecipe(nid, "op", program.kernel, program.eids,
                                        program.flatten))
        if self._dynamic is not None:
            self._staging_bytes += sum(
                int(staged.host.nbytes) for stage in self._dynamic.staging.values()
                for staged in stage if staged.host is not None)
        return specs

    def capture_report(self) -> CaptureReport | None:
        """How this thread's runs use graph capture (``create(..., cuda_graph=True)``), or
        None without it: recordings made and replayed, and why runs go node by node if they
        do (see :mod:`graphrt.executor.capture`).

        Example:
            >>> mod.capture_report().replays  # doctest: +SKIP
            12
        """
        return None if self._capture is None else self._capture.report()

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
            self.feeds.set_inputs(inputs)
        self.execute(self._runner)

    def execute(self, run: Runner) -> None:
        """One run: take newly published params, run the steps with ``run`` (the strategy
        picked when the context was made, or an instrument's hooked loop) under the context's
        streams, and remember how far it got."""
        if self._params.seen != self._store.version:
            self.bindings.sync_params()
        feeds = self.feeds
        if feeds.unset:
            feeds.check_unset(self._store.current)
        feeds.failure = _UNFINISHED
        if self._scopes or self._dynamic is not None:
            with ExitStack() as stack:
                for scope in self._scopes:
                    stack.enter_context(scope)
                if self._dynamic is not None:
                    self._dynamic.prologue()
                run(self._table, self._fail)
        else:
            run(self._table, self._fail)
        feeds.failure = None
        feeds.unwritten.clear()

    def _fail(self, nid: int, err: Exception, unfinished: int | None = None) -> Exception:
        """The error to raise for a step of node ``nid`` that raised ``err``, remembering how
        far the run got (``unfinished``: a lower node a parallel run may not have finished)."""
        # Any error of a step that does not name its node yet (graphrt's own ones included: a
        # kernel may raise an InputError) gets the node, func_name and device, its cause kept.
        error = err if isinstance(err, ExecutionError) else self._execution_error(nid, err)
        where = error.node_id
        self.feeds.failure = (where if unfinished is None else min(where, unfinished),
                              str(error))
        return error

    def _execution_error(self, nid: int, err: Exception) -> ExecutionError:
        node = self.graph.nodes[nid]
        dev = self.plan.node_device[nid]
        func_name = node.func_name or ""
        return ExecutionError(
            f"{node.label} (func_name {func_name!r}) failed on {dev}: "
            f"{type(err).__name__}: {err}",
            node_id=nid, node_name=node.name, func_name=func_name, device=str(dev))

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
        saved = self.bindings.bind_call(inputs, outputs)
        try:
            self.execute(self._runner)
            # the results are in the caller's arrays only
            self.feeds.unwritten.update(i for i, out in enumerate(outputs) if out is not None)
        finally:
            self.bindings.restore(*saved)
        return outputs

    def __call__(self, /, **inputs: Any) -> tuple[Any, ...]:
        """Run and return the outputs as fresh arrays the caller owns.

        Inputs given here are set as by :meth:`set_input` (copied; they persist). Each output
        is a new array on its device that the kernels write directly; the next run does not
        touch it.

        Example:
            >>> (y,) = mod(A=a, B=b, C=c)  # doctest: +SKIP
        """
        feeds = self.feeds
        if inputs:
            feeds.set_inputs(inputs)
        heads = self.graph.heads
        if self._dynamic is not None and any(eid in self._dynamic.dynamic_eids
                                             for eid in heads):
            self.execute(self._runner)  # the outputs' shapes are known only now
            return tuple(feeds.read(eid, feeds.fresh_array(eid), "output") for eid in heads)
        fresh = tuple(feeds.fresh_array(eid) for eid in heads)
        self.invoke_with_outputs({}, fresh)
        return fresh

    # -- memory and params -----------------------------------------------------------------

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

    def publish_params(self, values: Mapping[str, Any], *, copy: bool = True) -> None:
        """Check params by name and publish them to the compiled graph's store, where every
        context reads them (see :meth:`GraphModule.load_params`); this context takes them at
        once, freeing its own slots for them.

        Args:
            values: param name to array (any device).
            copy: copy each value into new memory on its input's device; without it, each
                value must already be there and is published as it is (``share_params``).

        Raises:
            InputError: an unknown name, a shape or dtype that does not match, or (without
                ``copy``) an array on another device; nothing is published then.
        """
        self._store.load(self.feeds.check_params(values, copy=copy), copy=copy)
        self.bindings.sync_params()

    # -- inputs and outputs, as before the split (GraphModule calls feeds and bindings) ---

    def set_input(self, key: int | str | None = None, value: Any = None, /,
                  **params: Any) -> None:
        self.feeds.set_input(key, value, **params)

    def get_input(self, key: int | str, out: Any = None) -> Any:
        return self.feeds.get_input(key, out)

    def get_output(self, index: int | str, out: Any = None) -> Any:
        return self.feeds.get_output(index, out)

    def set_input_zero_copy(self, key: int | str, value: Any) -> None:
        self.bindings.set_input_zero_copy(key, value)

    def set_output_zero_copy(self, key: int | str, value: Any) -> None:
        self.bindings.set_output_zero_copy(key, value)
