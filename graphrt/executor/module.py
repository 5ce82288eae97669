"""``GraphModule``: TVM's graph-executor API over a compiled graph, one run context per thread.

Thread safety: every thread that calls a module gets a :class:`RunContext` of its own (made on
its first call, freed when the thread ends), so ``set_input`` / ``run`` / ``get_output`` of one
thread never see another's data, and concurrent ``mod(**inputs)`` or ``invoke_with_outputs``
calls are safe. Per-thread rather than pooled contexts, because TVM's API is a conversation:
what ``set_input`` set, the same caller's ``run`` reads and its ``get_output`` returns, and only
the calling thread says which conversation a call belongs to. The params live once, in the
compiled graph, and every context reads them.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..devices import Device, backend_for, device, parse_device_map
from ..errors import ArgumentError, InputError, argument_error, describe, expect_type
from ..kernels.cpu.crew import environment_threads
from ..lib import LibrarySource, as_library
from ..params import iter_params
from ..schema import Graph, GraphSource, load_graph
from ..storage import PlacementReport, StoragePlan, placement_report
from . import instruments
from .bindings import Bindings
from .checks import listing
from .compiled import CompiledGraph, compile_graph
from .context import RunContext
from .feeds import Feeds
from .memory import MemoryReport
from .parallel import MAX_THREADS

__all__ = ["GraphModule", "create"]

P = ParamSpec("P")
R = TypeVar("R")


def create(graph_json: GraphSource, lib: LibrarySource, *devices: Device | str,
           strict_placement: bool = False,
           device_map: Mapping[str | int, Device | str] | None = None,
           require_inputs: bool = False,
           inter_op_threads: int | None = None,
           cuda_graph: bool = False,
           threads: int | None = None) -> GraphModule:
    """Load a graph, plan its storage over ``devices`` and prepare it to run.

    Everything costly happens here: parsing and checking the graph, placing storage, resolving
    every kernel, lowering declarative functions and planning their scratch, checking it all
    fits the devices, then allocating the calling thread's run context and binding every step
    to its arrays.

    Args:
        graph_json: graph JSON as text, bytes, a path or a dict.
        lib: a :class:`graphrt.Library`, or a mapping of func_name to kernel.
        *devices: where to run (``graphrt.cpu(0)``, ``"cuda:0"``, ...). ``devices[0]`` is the
            fallback for entries placed on a device type not given. Defaults to ``cpu:0``.
        strict_placement: raise :class:`PlacementError` instead of falling back.
        device_map: place the entries of a device type on another device, e.g.
            ``{"cuda": "sim:0"}`` runs a CUDA graph on the simulated accelerator without
            editing its JSON. A mapped device not among ``devices`` is added after them. The
            placement report lists every remapped type.
        require_inputs: refuse to run (``InputError``) while an input or param was never set.
            Without it, the first run of each thread that has one logs a warning naming them:
            they hold zeros (TVM ran them silently).
        inter_op_threads: run independent nodes of a cpu graph at once on this many threads,
            with BLAS held to ``cores // inter_op_threads`` threads meanwhile (0 or 1:
            one node at a time). None (the default) decides per graph from the flops of its
            matmuls and convolutions that could run at once (see
            :mod:`graphrt.executor.parallel`); ``mod.compiled.parallel`` is the plan, or None.
            Profiling, dumps and ``debug_get_output`` always run one node at a time.
        cuda_graph: record each run context's GPU work as CUDA graphs (on the second run with
            the same memory and shapes) and replay them, one launch per run of consecutive GPU
            kernels, nodes on other devices and copies running between them; at most 8
            recordings per context (zero-copy bindings and dynamic shapes each need their
            own). A graph that cannot be recorded runs node by node with the reason logged and
            in ``capture_report()``. The sim device simulates capture. Not with
            ``inter_op_threads`` > 1. See :mod:`graphrt.executor.capture`.
        threads: the most threads a run of this module uses on the cpu, all together: the
            calling thread and graphrt's helper threads for its compiled kernels, numpy's
            BLAS (held to this count while the run lasts) and the inter-op lanes (which share
            it out). None (the default): the ``GRAPHRT_THREADS`` environment variable where
            set, else every core this process may run on; more than those counts as those.
            ``mod.compiled.threads`` is the count decided.

    Raises:
        ArgumentError: an argument of the wrong kind (a lib that is not a Library or a mapping
            of names to callables, an option that is not a bool); it says what was expected.
        GraphFormatError, KernelNotFoundError, DeviceError.
        PlacementError: also when the devices cannot hold the graph: the capacity of a host
            device is what this process may still allocate (see
            :func:`graphrt.devices.host_memory.host_memory_limit`), and an allocation that
            fails anyway names the storage id, the bytes and the device.

    Example:
        >>> import numpy as np, graphrt
        >>> lib = {"elemwise_add": lambda a, b, out: np.add(a, b, out=out),
        ...        "elemwise_sub": lambda a, b, out: np.subtract(a, b, out=out)}
        >>> mod = graphrt.create("examples/graphs/simplex.json", lib,  # doctest: +SKIP
        ...                      graphrt.cpu(0), graphrt.sim(0))
    """
    for option, value in (("strict_placement", strict_placement),
                          ("require_inputs", require_inputs), ("cuda_graph", cuda_graph)):
        expect_type(value, bool, name=f"create({option}=...)", expected="True or False")
    if inter_op_threads is not None and (
            isinstance(inter_op_threads, bool) or not isinstance(inter_op_threads, int)
            or not 0 <= inter_op_threads <= MAX_THREADS):
        argument_error("create(inter_op_threads=...)",
                       f"None (automatic) or a number of threads from 0 to {MAX_THREADS}",
                       inter_op_threads)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        argument_error("create(threads=...)",
                       f"None (GRAPHRT_THREADS, else every core) or a number of threads from 1 "
                       f"to {MAX_THREADS}", threads)
    if threads is None:
        try:
            threads = environment_threads()
        except ValueError as err:
            raise ArgumentError(f"create: {err}") from None
    if cuda_graph and inter_op_threads not in (None, 0, 1):
        raise ArgumentError(f"create: cuda_graph=True replays a run's device work in order; it "
                            f"cannot be combined with inter_op_threads={inter_op_threads}")
    graph = load_graph(graph_json)
    library = as_library(lib)
    devs = tuple(device(d) for d in devices) or (device("cpu:0"),)
    remap = parse_device_map(device_map or {})
    devs += tuple(dict.fromkeys(dev for dev in remap.values() if dev not in devs))
    capacity = {dev: backend_for(dev).capacity() for dev in devs}
    return GraphModule(compile_graph(graph, library, devs, strict=strict_placement,
                                     capacity=capacity, device_map=remap,
                                     require_inputs=require_inputs,
                                     inter_op_threads=1 if cuda_graph else inter_op_threads,
                                     cuda_graph=cuda_graph, threads=threads))


def _per_thread(method: Callable[Concatenate[RunContext, P], R]
                ) -> Callable[Concatenate[GraphModule, P], R]:
    """``method`` of the calling thread's run context (or a function over it), as a method of
    the module."""
    @functools.wraps(method)
    def call(self: GraphModule, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.context, *args, **kwargs)

    return call


def _per_thread_feeds(method: Callable[Concatenate[Feeds, P], R]
                      ) -> Callable[Concatenate[GraphModule, P], R]:
    """``method`` of the calling thread's feeds (its inputs and outputs), as a method of the
    module."""
    @functools.wraps(method)
    def call(self: GraphModule, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.context.feeds, *args, **kwargs)

    return call


def _per_thread_bindings(method: Callable[Concatenate[Bindings, P], R]
                         ) -> Callable[Concatenate[GraphModule, P], R]:
    """``method`` of the calling thread's zero-copy bindings, as a method of the module."""
    @functools.wraps(method)
    def call(self: GraphModule, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.context.bindings, *args, **kwargs)

    return call


class GraphModule:
    """A compiled graph and its run contexts, with TVM's graph-executor API.

    Create one with :func:`graphrt.create`. Inputs are set by name or index and copied into the
    calling thread's context (from any device); params (:meth:`load_params`) are held once and
    read by every thread. Outputs are returned as arrays on the device that holds them and stay
    valid until the same thread's next run overwrites them.

    Example:
        >>> import numpy as np, graphrt
        >>> mod = graphrt.create("examples/graphs/simplex.json", LIB)  # doctest: +SKIP
        >>> mod.run(A=a, B=b, C=c)  # doctest: +SKIP
        >>> mod.get_output(0)  # doctest: +SKIP
    """

    def __init__(self, compiled: CompiledGraph,
                 contexts: weakref.WeakSet[RunContext] | None = None) -> None:
        self.compiled = compiled
        self._local = threading.local()
        self._contexts: weakref.WeakSet[RunContext] = (
            weakref.WeakSet() if contexts is None else contexts)
        self.context  # noqa: B018 (the creating thread's context: allocate at create())

    @property
    def context(self) -> RunContext:
        """The calling thread's run context (made on the thread's first call)."""
        context: RunContext | None = getattr(self._local, "context", None)
        if context is None:
            context = self._local.context = RunContext(self.compiled)
            self._contexts.add(context)
        return context

    @property
    def graph(self) -> Graph:
        return self.compiled.graph

    @property
    def plan(self) -> StoragePlan:
        return self.compiled.plan

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices the module runs on; ``devices[0]`` is the fallback."""
        return self.compiled.devices

    def placement(self) -> PlacementReport:
        """Nodes and bytes per device (scratch included), every ``__copy`` with its direction
        and bytes, and every entry that fell back to ``devices[0]`` with the reason.

        Example:
            >>> print(mod.placement().table())  # doctest: +SKIP
        """
        return placement_report(self.graph, self.plan)

    def __repr__(self) -> str:
        devs = ", ".join(map(str, self.devices))
        steps = len(self.compiled.programs)
        return (f"<GraphModule {len(self.graph.nodes)} nodes, {steps} steps, "
                f"{self.get_num_inputs()} inputs, {self.get_num_outputs()} outputs on {devs}>")

    # -- contexts and params ---------------------------------------------------------------

    def clone(self) -> GraphModule:
        """Another module over the same compiled graph and the same params (not copied): its
        own contexts, for a caller that wants state apart from this module's.

        Example:
            >>> worker = mod.clone()  # doctest: +SKIP
        """
        return GraphModule(self.compiled, self._contexts)

    def memory(self) -> MemoryReport:
        """Memory per device: as planned and as used by the calling thread's last run, the
        params (held once), what one context holds, and how many contexts are alive.

        Example:
            >>> print(mod.memory().table())  # doctest: +SKIP
        """
        report = self.context.memory()
        return MemoryReport(report.planned, report.used, report.params, report.context,
                            report.staging, len(self._contexts))

    def load_params(self, params: bytes | bytearray | memoryview | Mapping[str, Any]) -> None:
        """Set params from a TVM params blob or a mapping of name to array, for every thread.

        The values are copied once into memory the compiled graph owns; every run context
        (every thread, every :meth:`clone`) reads that one copy. Loading publishes new arrays:
        runs already under way finish with the old ones, and each context takes the new ones
        at its next run, so params may be loaded while other threads run. A later
        :meth:`set_input` of a param name overrides it in the calling thread only.

        Every name must be an input of the graph (TVM ignored unknown names; graphrt refuses
        them). Nothing is set unless everything fits.

        Raises:
            GraphFormatError: the blob is corrupt.
            InputError: an unknown name, or a shape or dtype that does not match.
        """
        items = iter_params(params) if isinstance(params, bytes | bytearray | memoryview) else (
            _mapping_items(params))
        items = list(items)
        for name, _ in items:
            if not isinstance(name, str):
                argument_error("load_params(params)", "a mapping whose keys are param names "
                               "(str)", name)
        self.context.publish_params(dict(items))

    def share_params(self, other: GraphModule,
                     params_bytes: bytes | bytearray | memoryview) -> None:
        """Read the params named in ``params_bytes`` from ``other``'s memory (TVM's
        ``share_params``): the weights are not copied, so two modules of one model hold them
        once.

        Args:
            other: a module whose params include every name in the blob.
            params_bytes: a TVM params blob; only its names are used.

        Raises:
            InputError: a name that is not an input of this graph, that ``other`` has not
                loaded, or whose shape, dtype or device differs between the two.
        """
        if not isinstance(other, GraphModule):
            raise ArgumentError(f"share_params needs a GraphModule to share from, given "
                                f"{type(other).__name__}")
        names = [name for name, _ in iter_params(params_bytes)]
        theirs = other.compiled.params.current
        shared = {}
        for name in names:
            position = other.compiled.input_index.get(name)
            if position is None or position not in theirs:
                raise InputError(f"share_params: the other module has no param {describe(name)} "
                                 f"loaded (its loaded params: "
                                 f"{listing(tuple(other.graph.input_names[p] for p in theirs))})")
            shared[name] = theirs[position]
        self.context.publish_params({name: param.array for name, param in shared.items()},
                                    copy=False)

    # -- running and I/O: the calling thread's context -------------------------------------

    run = _per_thread(RunContext.run)
    __call__ = _per_thread(RunContext.__call__)
    invoke_with_outputs = _per_thread(RunContext.invoke_with_outputs)
    set_input = _per_thread_feeds(Feeds.set_input)
    set_input_zero_copy = _per_thread_bindings(Bindings.set_input_zero_copy)
    set_output_zero_copy = _per_thread_bindings(Bindings.set_output_zero_copy)
    get_input = _per_thread_feeds(Feeds.get_input)
    get_output = _per_thread_feeds(Feeds.get_output)
    capture_report = _per_thread(RunContext.capture_report)
    last_run_transfers = _per_thread(RunContext.last_run_transfers)
    profile = _per_thread(instruments.profile)
    benchmark = _per_thread(instruments.benchmark)
    debug_get_output = _per_thread(instruments.debug_get_output)
    dump_outputs = _per_thread(instruments.dump_outputs)

    # -- information -----------------------------------------------------------------------

    def get_num_inputs(self) -> int:
        """Number of inputs, params included (TVM counts both)."""
        return len(self.compiled.input_eids)

    def get_input_index(self, name: str) -> int:
        """Position of the input called ``name``, or -1 if there is none.

        Raises:
            InputError: ``name`` is not a str.
        """
        return self.compiled.input_index.get(_name(name, "input"), -1)

    def get_input_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {name: shape}, "dtype": {name: dtype}}`` of every input."""
        return self._info(self.graph.input_names, self.compiled.input_eids)

    def get_num_outputs(self) -> int:
        """Number of outputs (heads) of the graph."""
        return len(self.graph.heads)

    def get_output_index(self, name: str) -> int:
        """Position of the output called ``name``, or -1 if there is none.

        An output is named after its node, or ``name:index`` when its node has several outputs;
        names several outputs would share get ``#<position>`` (see :attr:`Graph.output_names`).

        Raises:
            InputError: ``name`` is such a shared name (the message lists the candidates), or
                not a str.
        """
        candidates = self.graph.output_aliases.get(_name(name, "output"))
        if candidates:
            raise InputError(f"output name {describe(name)} is ambiguous; give one of "
                             f"{listing(candidates)}")
        return self.compiled.output_index.get(name, -1)

    def get_output_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {name: shape}, "dtype": {name: dtype}}`` of every output entry."""
        return self._info(self.graph.output_names, self.graph.heads)

    def _info(self, names: tuple[str, ...], eids: tuple[int, ...]) -> dict[str, dict[str, Any]]:
        entries = [self.graph.entries[eid] for eid in eids]
        return {"shape": {name: e.shape_text for name, e in zip(names, entries, strict=True)},
                "dtype": {name: e.dtype.name for name, e in zip(names, entries, strict=True)}}


def _name(name: object, kind: str) -> str:
    if not isinstance(name, str):
        raise ArgumentError(f"an {kind} name is a str, given {type(name).__name__} "
                            f"{describe(name, 60)}")
    return name


def _mapping_items(params: object) -> Any:
    if not isinstance(params, Mapping):
        raise ArgumentError(f"params must be a TVM params blob (bytes) or a mapping of names to "
                            f"arrays, given {type(params).__name__}")
    return params.items()
