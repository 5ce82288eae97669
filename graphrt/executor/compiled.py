"""The compiled graph: everything ``create()`` works out once and no run ever changes.

A :class:`CompiledGraph` holds the graph, its storage plan (scratch for lowered functions
included), one :class:`NodeProgram` per executable node (its kernel, or its lowered function,
and the entries it reads and writes), the shape program of a dynamic graph, and the params,
held once for every run context made from it. :func:`compile_graph` builds one by a line of
passes and allocates nothing; a :class:`~graphrt.executor.context.RunContext` allocates a
run's memory.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from ..devices import Device, backend_for
from ..errors import GraphFormatError, KernelNotFoundError
from ..kernels import KernelChain, chain
from ..kernels.cpu.crew import available_cores
from ..lib import FusedFunction, Kernel, Library, Lowering, ShapeFunction, TensorType
from ..schema import COPY, NOP, Graph, Node
from ..storage import (
    Placement,
    ScratchNeed,
    StoragePlan,
    assign_storage,
    check_capacity,
    check_storage_ids,
    place,
    with_scratch,
)
from .parallel import ParallelPlan, function_flops, plan_parallel, resolve_threads
from .param_store import ParamStore
from .shapes import ShapePlan
from .steps import AliasGroups
from .transfers import TransferLog, tally
from .workspace_bounds import widest_scratch

__all__ = ["CompiledGraph", "NodeProgram", "compile_graph", "run_calls", "scratch_needs"]

logger = logging.getLogger("graphrt")


@dataclass(frozen=True)
class NodeProgram:
    """What one executable node does at every run.

    Attributes:
        nid: the node id.
        eids: the entries it takes, inputs then outputs (a copy: source, destination).
        flatten: kernels see 1-D views (``flatten_data``); a copy sees both entries 1-D when
            their shapes differ.
        kernel: the kernel (a Python kernel, or a lowered function's runner); None for a copy.
        lowering: the node's lowered declarative function, if it has one.
        scratch: byte offsets of the lowering's intermediates in its device's scratch arena.
    """

    nid: int
    eids: tuple[int, ...]
    flatten: bool
    kernel: Kernel | None = None
    lowering: Lowering | None = None
    scratch: tuple[int, ...] = ()

    @property
    def is_copy(self) -> bool:
        return self.kernel is None

    @property
    def capturable(self) -> bool:
        """Whether its kernels' work may be recorded into a device graph: every prepared
        kernel of its lowering says so (:attr:`graphrt.kernels.Prepared.capturable`); a
        Python kernel is recorded like any other kernel of its device."""
        return self.lowering is None or self.lowering.capturable


def run_calls(calls: Sequence[tuple[Kernel, tuple[Any, ...]]]) -> None:
    """Run a lowered function's prepared calls: each ``kernel(*arrays)``, in order."""
    for kernel, arrays in calls:
        kernel(*arrays)


class CompiledGraph:
    """A graph ready to run: plan, programs, shape program and params, made once.

    Nothing here changes after :func:`compile_graph` except the params, which
    :class:`ParamStore` replaces copy-on-write, so any number of run contexts may read it from
    any number of threads.

    Example:
        >>> compiled = compile_graph(load_graph("examples/graphs/simplex.json"),  # doctest: +SKIP
        ...                          lib, (graphrt.cpu(0), graphrt.sim(0)))
        >>> context = RunContext(compiled)  # doctest: +SKIP
    """

    def __init__(self, graph: Graph, plan: StoragePlan, programs: tuple[NodeProgram, ...],
                 shapes: ShapePlan | None, *, require_inputs: bool = False,
                 parallel: ParallelPlan | None = None, cuda_graph: bool = False,
                 threads: int | None = None) -> None:
        self.graph = graph
        self.threads = available_cores() if threads is None else threads
        """The most threads a run uses on the cpu (``create(threads=...)``)."""
        self.cuda_graph = cuda_graph
        self.parallel = parallel
        self.require_inputs = require_inputs
        self.plan = plan
        self.programs = programs
        self.shapes = shapes
        self.params = ParamStore()
        self.groups = AliasGroups(graph)
        self.input_eids = tuple(graph.nodes[nid].outputs[0] for nid in graph.arg_nodes)
        self.input_of_entry = {eid: i for i, eid in enumerate(self.input_eids)}
        self.input_index = {name: i for i, name in enumerate(graph.input_names)}
        self.output_index = {name: i for i, name in enumerate(graph.output_names)}
        self.dynamic_eids = frozenset(e.eid for e in graph.entries if e.dims is not None)
        self.static_transfers = TransferLog(tally([
            (plan.entry_device[p.eids[0]], plan.entry_device[p.eids[1]],
             graph.entries[p.eids[0]].nbytes) for p in programs if p.is_copy]))
        self.private_sids = tuple(self._private_sid(eid) for eid in self.input_eids)
        self.capturable = frozenset(p.nid for p in programs if not p.is_copy and p.capturable)
        """The nodes whose work may be recorded into a device graph (``cuda_graph``)."""

    def _private_sid(self, eid: int) -> int | None:
        """The input's storage id if only its alias group uses it (so a context that reads
        the input from the params needs no slot of its own), else None."""
        sid = self.graph.entries[eid].sid
        group = set(self.groups.members[self.groups.root[eid]])
        return sid if set(self.plan.pool[sid].entries) <= group else None

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.plan.devices


def compile_graph(graph: Graph, library: Library, devices: Sequence[Device], *,
                  strict: bool = False,
                  capacity: Mapping[Device, int | None] | None = None,
                  device_map: Mapping[int, Device] | None = None,
                  require_inputs: bool = False,
                  inter_op_threads: int | None = 1,
                  cuda_graph: bool = False, threads: int | None = None) -> CompiledGraph:
    """Plan, resolve and lower everything a run needs, allocating nothing.

    A straight line of passes, each returning a new frozen :class:`Compilation`: place every
    entry on a device, lower (resolve kernels, lower declarative functions), decide a parallel
    run (which may give entries storage ids of their own), assign storage, lay out scratch,
    then check it all fits the devices.

    Args:
        graph: the validated graph.
        library: its kernels and declarative functions.
        devices: where to run; ``devices[0]`` is the fallback.
        strict: refuse to fall back to ``devices[0]``.
        capacity: bytes each device can hold; storage and scratch beyond it are refused before
            anything is allocated.
        device_map: device type code -> one of ``devices`` (see :func:`graphrt.create`).
        require_inputs: a run with an input or param never set is an ``InputError`` (else a
            warning, once per run context).
        inter_op_threads: run independent nodes at once on this many threads (0 or 1:
            sequentially; None: where :mod:`graphrt.executor.parallel` estimates it pays). The
            storage ids of a parallel graph may differ from the ones it was given.
        cuda_graph: run contexts record their device work and replay it
            (:mod:`graphrt.executor.capture`).
        threads: the most threads a run uses on the cpu, kernels' helpers, BLAS and inter-op
            lanes together (see :func:`graphrt.create`); None: every core this process may
            run on. More than those counts as those.

    Raises:
        PlacementError, KernelNotFoundError, GraphFormatError (among others: two entries live
            at the same time on one storage id, see :func:`graphrt.storage.check_storage_ids`).
    """
    placed = _place(graph, devices, strict=strict, device_map=device_map)
    check_capacity(graph, placed.plan, capacity or {})  # before kernels plan for the sizes
    lowered = _lower(placed, library)
    cores = None if threads is None else min(threads, available_cores())
    decided = _parallelize(lowered, library, inter_op_threads, cores)
    stored = _assign_storage(decided)
    done = _plan_scratch(stored)
    check_capacity(done.graph, done.plan, capacity or {})
    return _finish(done, library, require_inputs=require_inputs, cuda_graph=cuda_graph,
                   threads=cores)


@dataclass(frozen=True)
class Compilation:
    """What the passes of :func:`compile_graph` have decided so far; each returns a new one.

    Attributes:
        graph: the graph (the parallel pass may give it other storage ids).
        placement: the device of every entry and node, decided once.
        plan: the pool of the graph's storage ids on those devices, then the scratch of
            lowered functions.
        programs: each executable node's program (empty until lowered).
        parallel: how a parallel run goes, or None (sequential, or not decided yet).
    """

    graph: Graph
    placement: Placement
    plan: StoragePlan
    programs: tuple[NodeProgram, ...] = ()
    parallel: ParallelPlan | None = None


def _place(graph: Graph, devices: Sequence[Device], *, strict: bool,
           device_map: Mapping[int, Device] | None) -> Compilation:
    """Place every entry and node on a device, and check the storage ids the graph brings
    (one device each, no two entries live at once on one id)."""
    placement = place(graph, devices, strict=strict, device_map=device_map)
    plan = assign_storage(graph, placement)
    check_storage_ids(graph)
    return Compilation(graph, placement, plan)


def _lower(placed: Compilation, library: Library) -> Compilation:
    """Resolve every node's kernel, or lower its declarative function, for its device."""
    return replace(placed, programs=_programs(placed.graph, placed.plan, library))


def _parallelize(lowered: Compilation, library: Library, inter_op_threads: int | None,
                 cores: int | None) -> Compilation:
    """Decide which nodes run at once (see :mod:`graphrt.executor.parallel`): the plan, and
    the graph with the storage ids a parallel run needs."""
    graph, plan, programs = lowered.graph, lowered.plan, lowered.programs
    planned = plan_parallel(graph, plan, programs,
                            lambda: _flops(graph, plan, library, programs),
                            resolve_threads(inter_op_threads, cores=cores),
                            auto=inter_op_threads is None, cores=cores)
    return lowered if planned is None else replace(lowered, graph=planned[1],
                                                   parallel=planned[0])


def _assign_storage(decided: Compilation) -> Compilation:
    """The storage pool of the graph as decided: the one sized when it was placed, unless the
    parallel pass gave it other storage ids (the placement stays: only ids changed)."""
    if decided.parallel is None:
        return decided
    return replace(decided, plan=assign_storage(decided.graph, decided.placement))


def _plan_scratch(stored: Compilation) -> Compilation:
    """Lay out the intermediates of lowered functions in one scratch arena per device, and
    tell each program its offsets."""
    plan = with_scratch(stored.plan, scratch_needs(stored.programs))
    return replace(stored, plan=plan,
                   programs=tuple(_with_offsets(p, plan) for p in stored.programs))


def _finish(done: Compilation, library: Library, *, require_inputs: bool,
            cuda_graph: bool, threads: int | None) -> CompiledGraph:
    """The compiled graph, with the shape program a dynamic graph needs; fallbacks logged."""
    graph, plan = done.graph, done.plan
    shape_functions = resolve_shape_functions(graph, library)
    shapes = ShapePlan(graph, shape_functions) if graph.is_dynamic or shape_functions else None
    if plan.fallbacks:
        kinds = sorted({f.reason.partition(";")[0] for f in plan.fallbacks})
        logger.warning("%d of %d entries fell back to %s (%s); see GraphModule.placement()",
                       len(plan.fallbacks), len(graph.entries), plan.devices[0],
                       ", ".join(kinds))
    return CompiledGraph(graph, plan, done.programs, shapes, require_inputs=require_inputs,
                         parallel=done.parallel, cuda_graph=cuda_graph, threads=threads)


def _flops(graph: Graph, plan: StoragePlan, library: Library,
           programs: Sequence[NodeProgram]) -> list[int]:
    """Per program, the flops of its declarative function's matmuls and convolutions (0 for a
    Python kernel or a copy: graphrt cannot see inside)."""
    counts = []
    for program in programs:
        node = graph.nodes[program.nid]
        found = None if program.lowering is None or node.func_name is None else library.resolve(
            node.func_name, plan.node_device[node.nid].type_code)
        counts.append(0 if not isinstance(found, FusedFunction) else function_flops(
            found, _types(graph, node.inputs, node.flatten_data),
            _types(graph, node.outputs, node.flatten_data)))
    return counts


def scratch_needs(programs: Sequence[NodeProgram]) -> dict[int, list[ScratchNeed]]:
    """The intermediates of every lowered function, by node id, for the scratch planner."""
    return {p.nid: [ScratchNeed(n, *life) for n, life in
                    zip(p.lowering.nbytes(), p.lowering.lifetimes, strict=True)]
            for p in programs if p.lowering is not None}


def _with_offsets(program: NodeProgram, plan: StoragePlan) -> NodeProgram:
    offsets = plan.scratch.offsets.get(program.nid, ())
    if not offsets:
        return program
    return NodeProgram(program.nid, program.eids, program.flatten, program.kernel,
                       program.lowering, offsets)


def _programs(graph: Graph, plan: StoragePlan, lib: Library) -> tuple[NodeProgram, ...]:
    """Every executable node's program, its kernel resolved (or its function lowered) for
    the device it runs on.

    Raises:
        KernelNotFoundError: naming each missing func_name with the first node and device type
            that needs it.
        GraphFormatError: a declarative function that does not fit its node.
    """
    programs: list[NodeProgram] = []
    missing: dict[str, str] = {}
    chains: dict[str, KernelChain] = {}
    swept: dict[str, dict[Hashable, list[int]]] = {}  # scratch sizes, per device kind
    for node in graph.nodes:
        if node.op == "null" or node.func_name == NOP:
            continue
        if node.func_name == COPY:
            # The two entries hold the same bytes, maybe in other shapes ([] and [1], [2, 3]
            # and [6]): the copy then sees both flat, as the backends need one shape.
            src, dst = (graph.entries[eid] for eid in (node.inputs[0], node.outputs[0]))
            programs.append(NodeProgram(node.nid, (src.eid, dst.eid),
                                        src.shape_text != dst.shape_text))
            continue
        assert node.func_name is not None
        dev = plan.node_device[node.nid]
        found = lib.resolve(node.func_name, dev.type_code)
        if found is None:
            missing.setdefault(node.func_name, f"{node.label} on {dev} "
                               f"(device type {dev.type_code})")
            continue
        eids = (*node.inputs, *node.outputs)
        backend = backend_for(dev)
        if isinstance(found, FusedFunction):
            kernels = chains.get(dev.kind)
            if kernels is None:  # one chain per device kind of this graph
                kernels = chains[dev.kind] = chain(dev.kind, backend.xp)
            lowering = widest_scratch(graph, node, found.lower(
                _types(graph, node.inputs, node.flatten_data),
                _types(graph, node.outputs, node.flatten_data), kernels=kernels,
                where=node.label, fuse=True, dynamic=_is_dynamic(graph, node)),
                swept.setdefault(dev.kind, {}))
            kernel = lowering.calls[0].kernel if lowering.direct else run_calls
            programs.append(NodeProgram(node.nid, eids, node.flatten_data,
                                        backend.bind_kernel(kernel), lowering))
        else:
            programs.append(NodeProgram(node.nid, eids, node.flatten_data,
                                        backend.bind_kernel(found)))
    if missing:
        listed = "; ".join(f"{name!r} needed by {where}" for name, where in
                           list(missing.items())[:5])
        more = f" (and {len(missing) - 5} more func_names)" if len(missing) > 5 else ""
        raise KernelNotFoundError(f"the lib has no kernel for {listed}{more}")
    return tuple(programs)


def resolve_shape_functions(graph: Graph, lib: Library) -> dict[int, ShapeFunction]:
    """The nodes whose shape function must run before their kernel, on every run.

    Those are the nodes whose shape function reads data (their output shape follows their
    inputs' values) and the nodes that bind a shape variable no input binds.

    Raises:
        GraphFormatError: a node binds a variable but its kernel has no shape function, or a
            shape function declares data dependence for another number of inputs.
    """
    binds = {nid: var for var, nid in graph.var_binders.items()}
    found: dict[int, ShapeFunction] = {}
    for node in graph.nodes:
        if node.func_name is None:
            continue
        function = None if node.func_name in (NOP, COPY) else lib.shape_function(
            node.func_name)
        if function is None or not (function.needs_data or node.nid in binds):
            if node.nid in binds:
                raise GraphFormatError(
                    f"{node.label} binds shape variable {binds[node.nid]!r} (a bare output "
                    f"dimension no input binds), so its kernel {node.func_name!r} needs a shape "
                    "function (Library.register_shape_func), and it has none")
            continue
        if len(function.data_dependent) != len(node.inputs):
            raise GraphFormatError(
                f"{node.label}: the shape function of {node.func_name!r} declares data "
                f"dependence for {len(function.data_dependent)} inputs, the node has "
                f"{len(node.inputs)}")
        found[node.nid] = function
    return found


def _is_dynamic(graph: Graph, node: Node) -> bool:
    return any(graph.entries[eid].dims is not None for eid in (*node.inputs, *node.outputs))


def _types(graph: Graph, eids: tuple[int, ...], flatten: bool) -> list[TensorType]:
    """The entries' types as a kernel sees them (1-D under ``flatten_data``)."""
    entries = [graph.entries[eid] for eid in eids]
    return [TensorType((prod(e.shape),) if flatten else e.shape, e.dtype.numpy.name)
            for e in entries]
