"""``GraphModule``: a graph ready to run, with TVM's graph-executor API."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from ..devices import Array, Device, backend_for, copier, cpu, device, locate
from ..errors import ExecutionError, InputError
from ..lib import LibrarySource, as_library
from ..params import iter_params
from ..schema import COPY, Graph, GraphSource, load_graph
from ..storage import PlacementReport, StoragePlan, placement_report, plan_storage
from .benchmark import BenchmarkResult, time_calls
from .build import allocate_pool, entry_views, resolve_kernels, resolve_shape_functions
from .dynamic import DynamicRunner, TransferLog, tally
from .memory import MemoryReport
from .profiling import ProfileReport, profile_steps
from .shapes import ShapePlan
from .steps import AliasGroups, Step, StepTable

__all__ = ["GraphModule", "create"]

logger = logging.getLogger("graphrt")

_Transfer = tuple[Any, Array, Array]  # (copy function, source array, destination array)


@dataclass(frozen=True)
class _Binding:
    """Caller memory bound zero-copy to an input or output."""

    given: Any  # the object the caller passed
    native: Array  # the same memory as its device's array
    device: Device
    address: int
    nbytes: int


def create(graph_json: GraphSource, lib: LibrarySource, *devices: Device | str,
           strict_placement: bool = False) -> GraphModule:
    """Load a graph, plan its storage over ``devices`` and prepare it to run.

    Everything costly happens here: parsing and checking the graph, placing and allocating
    storage, resolving every kernel and binding every step to its arrays.

    Args:
        graph_json: graph JSON as text, bytes, a path or a dict.
        lib: a :class:`graphrt.Library`, or a mapping of func_name to kernel.
        *devices: where to run (``graphrt.cpu(0)``, ``"cuda:0"``, ...). ``devices[0]`` is the
            fallback for entries placed on a device type not given. Defaults to ``cpu:0``.
        strict_placement: raise :class:`PlacementError` instead of falling back.

    Raises:
        GraphFormatError, PlacementError, KernelNotFoundError, DeviceError.

    Example:
        >>> import numpy as np, graphrt
        >>> lib = {"elemwise_add": lambda a, b, out: np.add(a, b, out=out),
        ...        "elemwise_sub": lambda a, b, out: np.subtract(a, b, out=out)}
        >>> mod = graphrt.create("examples/graphs/simplex.json", lib,  # doctest: +SKIP
        ...                      graphrt.cpu(0), graphrt.sim(0))
    """
    graph = load_graph(graph_json)
    library = as_library(lib)
    devs = tuple(device(d) for d in devices) or (device("cpu:0"),)
    capacity = {dev: backend_for(dev).capacity() for dev in devs}
    plan = plan_storage(graph, devs, strict=strict_placement, capacity=capacity)
    kernels = resolve_kernels(graph, plan, library)
    shape_functions = resolve_shape_functions(graph, library)
    shapes = ShapePlan(graph, shape_functions) if graph.is_dynamic or shape_functions else None
    return GraphModule(graph, plan, kernels, shapes)


class GraphModule:
    """A graph with its storage allocated and its steps prepared; ``run()`` is a flat loop.

    Create one with :func:`graphrt.create`. Inputs and params are set by name or index and copied
    into the module's storage (from any device). Outputs are returned as arrays on the device
    that holds them and stay valid until the next run overwrites them.

    Example:
        >>> import numpy as np, graphrt
        >>> mod = graphrt.create("examples/graphs/simplex.json", LIB)  # doctest: +SKIP
        >>> mod.run(A=a, B=b, C=c)  # doctest: +SKIP
        >>> mod.get_output(0)  # doctest: +SKIP
    """

    def __init__(self, graph: Graph, plan: StoragePlan, kernels: tuple[Any, ...],
                 shapes: ShapePlan | None = None) -> None:
        self.graph = graph
        self.plan = plan
        pool = allocate_pool(plan)
        self._table = StepTable(graph, plan, kernels, entry_views(graph, plan, pool))
        self._groups = AliasGroups(graph)
        self._dynamic = (None if shapes is None else
                         DynamicRunner(graph, plan, self._table, shapes, self._groups, pool))
        self._static_transfers = TransferLog(tally([
            (plan.entry_device[n.inputs[0]], plan.entry_device[n.outputs[0]],
             graph.entries[n.inputs[0]].nbytes) for n in graph.nodes if n.func_name == COPY]))
        self._input_eids = tuple(graph.nodes[nid].outputs[0] for nid in graph.arg_nodes)
        self._input_of_entry = {eid: i for i, eid in enumerate(self._input_eids)}
        self._input_index = {name: i for i, name in enumerate(graph.input_names)}
        self._output_index: dict[str, int] = {}
        for i, name in enumerate(graph.output_names):
            self._output_index.setdefault(name, i)
        self._bound_inputs: dict[int, _Binding] = {}
        self._bound_outputs: dict[int, _Binding] = {}
        self._copy_outs: dict[int, tuple[Step, ...]] = {}
        self._copy_out_steps: tuple[Step, ...] = ()
        self._slot_shapes = [graph.entries[eid].shape for eid in self._input_eids]
        if plan.fallbacks:
            kinds = sorted({f.reason.partition(";")[0] for f in plan.fallbacks})
            logger.warning("%d of %d entries fell back to %s (%s); see GraphModule.placement()",
                           len(plan.fallbacks), len(graph.entries), plan.devices[0],
                           ", ".join(kinds))

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices the module runs on; ``devices[0]`` is the fallback."""
        return self.plan.devices

    def placement(self) -> PlacementReport:
        """Nodes and bytes per device, every ``__copy`` with its direction and bytes, and every
        entry that fell back to ``devices[0]`` with the reason.

        Example:
            >>> print(mod.placement().table())  # doctest: +SKIP
        """
        return placement_report(self.graph, self.plan)

    def __repr__(self) -> str:
        devs = ", ".join(map(str, self.devices))
        return (f"<GraphModule {len(self.graph.nodes)} nodes, {len(self._table.steps)} steps, "
                f"{self.get_num_inputs()} inputs, {self.get_num_outputs()} outputs on {devs}>")

    # -- running ---------------------------------------------------------------------------

    def run(self, **inputs: Any) -> None:
        """Set any inputs given by name, then execute every step in order.

        On cuda the kernels and copies are queued on cupy's current stream of the device (run
        inside ``with stream:`` to use your own); what you bound must be ready in that
        stream's order, and the outputs are ready in it afterwards. ``get_output(i, out)`` into
        host memory waits for them.

        Raises:
            InputError: an input given here does not fit (nothing is set then).
            ExecutionError: a kernel raised; it names the node and chains the original. The
                module stays usable.
        """
        if inputs:
            self._set_inputs(inputs)
        if self._dynamic is not None:
            self._run_steps(self._iter_steps())
            return
        nid = -1
        try:
            for kernel, args, nid in self._table.steps:  # noqa: B007 (nid names a failing step)
                kernel(*args)
            for move, args, nid in self._copy_out_steps:  # noqa: B007
                move(*args)
        except Exception as err:
            raise self._execution_error(nid, err) from err

    def _iter_steps(self) -> Iterator[Step]:
        """Every step of one run in order, copies into bound outputs last. On a dynamic graph
        each shape function runs (and the views it sizes are set) as the iteration reaches it."""
        if self._dynamic is None:
            return chain(self._table.steps, self._copy_out_steps)
        shapes = [binding.native.shape if (binding := self._bound_inputs.get(p)) else shape
                  for p, shape in enumerate(self._slot_shapes)]
        return self._dynamic.steps(shapes, self._copy_out_steps)

    def _run_steps(self, steps: Iterator[Step], stop_after: int | None = None) -> None:
        """Run ``steps`` (all, or up to and including the last step of node ``stop_after``)."""
        nid = -1
        try:
            for kernel, args, nid in steps:
                if stop_after is not None and nid > stop_after:
                    return
                kernel(*args)
        except (InputError, ExecutionError):
            raise
        except Exception as err:
            raise self._execution_error(nid, err) from err

    def last_run_transfers(self) -> TransferLog:
        """Copies between devices in the last run and their bytes, split into the graph's
        ``__copy`` nodes and the inputs shape functions read on the host.

        Example:
            >>> mod.run(x=x)  # doctest: +SKIP
            >>> mod.last_run_transfers().shape_functions.to_host_bytes  # doctest: +SKIP
            24
        """
        return self._static_transfers if self._dynamic is None else self._dynamic.transfers

    def memory(self) -> MemoryReport:
        """Storage per device as planned (at the shape bounds) and as used by the last run.

        Example:
            >>> print(mod.memory().table())  # doctest: +SKIP
        """
        planned = self.plan.bytes_per_device()
        used = planned if self._dynamic is None else self._dynamic.used_bytes()
        return MemoryReport(planned, used)

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
        if not isinstance(outputs, Sequence) or len(outputs) != self.get_num_outputs():
            count = len(outputs) if isinstance(outputs, Sequence) else type(outputs).__name__
            raise InputError(f"outputs must be a sequence of {self.get_num_outputs()} arrays "
                             f"(one per graph output), given {count}")
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must be a mapping of names or indexes to arrays, given "
                             f"{type(inputs).__name__}")
        saved = dict(self._bound_inputs), dict(self._bound_outputs)
        self._bind({self._input_position(key): value for key, value in inputs.items()},
                   {i: value for i, value in enumerate(outputs) if value is not None})
        try:
            self.run()
        finally:
            self._restore(*saved)
        return outputs

    def __call__(self, **inputs: Any) -> tuple[Any, ...]:
        """Run and return the outputs as fresh arrays the caller owns.

        Inputs given here are set as by :meth:`set_input` (copied; they persist). Each output
        is a new array on its device that the kernels write directly; the next run does not
        touch it.

        Example:
            >>> (y,) = mod(A=a, B=b, C=c)  # doctest: +SKIP
        """
        if inputs:
            self._set_inputs(inputs)
        if self._dynamic is not None and any(eid in self._dynamic.dynamic_eids
                                             for eid in self.graph.heads):
            self.run()  # the outputs' shapes are known only now
            return tuple(self._read(eid, self._fresh_array(eid), "output")
                         for eid in self.graph.heads)
        fresh = tuple(self._fresh_array(eid) for eid in self.graph.heads)
        self.invoke_with_outputs({}, fresh)
        return fresh

    def _execution_error(self, nid: int, err: Exception) -> ExecutionError:
        node = self.graph.nodes[nid]
        dev = self.plan.node_device[nid]
        func_name = node.func_name or ""
        return ExecutionError(
            f"{node.label} (func_name {func_name!r}) failed on {dev}: "
            f"{type(err).__name__}: {err}",
            node_id=nid, node_name=node.name, func_name=func_name, device=str(dev))

    # -- measuring and debugging -----------------------------------------------------------

    def profile(self, repeat: int = 10, *, warmup: int = 1) -> ProfileReport:
        """Run ``warmup`` + ``repeat`` times and return per-node timings (``run()`` is untouched).

        Each kernel and copy is timed: wall clock on host devices, CUDA events on cuda.

        Raises:
            InputError: ``repeat`` < 1 or ``warmup`` < 0.
            ExecutionError: as :meth:`run`.

        Example:
            >>> print(mod.profile(repeat=20).table(top=10))  # doctest: +SKIP
        """
        _check_count("repeat", repeat, 1)
        _check_count("warmup", warmup, 0)
        for _ in range(warmup if self._dynamic is None else max(warmup, 1)):
            self.run()  # a dynamic graph's views take the last run's shapes
        steps = [*self._table.steps, *self._copy_out_steps]
        is_copy = [self.graph.nodes[nid].func_name == COPY for _, _, nid in self._table.steps]
        is_copy += [True] * len(self._copy_out_steps)
        return profile_steps(self.graph, self.plan, steps, is_copy, repeat,
                             self._execution_error, self._table.views)

    def benchmark(self, repeat: int = 5, number: int = 5, min_repeat_ms: float | None = None,
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
        if not 0 <= index < len(outputs):
            raise InputError(f"{self.graph.nodes[nid].label} has {len(outputs)} output(s), "
                             f"given index {index}")
        self._run_steps(self._iter_steps(), stop_after=nid)
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
        arrays: dict[str, np.ndarray[Any, Any]] = {}
        nodes = self.graph.nodes
        done = 0  # nodes whose outputs are saved

        def save_until(nid: int) -> None:
            nonlocal done
            while done < len(nodes) and nodes[done].nid < nid:
                for k, eid in enumerate(nodes[done].outputs):
                    arrays[f"{nodes[done].name}:{nodes[done].nid}:{k}"] = self._to_host(eid)
                done += 1

        nid = -1
        try:
            for kernel, args, nid in self._iter_steps():
                save_until(nid)
                kernel(*args)
        except (InputError, ExecutionError):
            raise
        except Exception as err:
            raise self._execution_error(nid, err) from err
        save_until(len(nodes))
        target = Path(path)
        with target.open("wb") as handle:
            np.savez(handle, **arrays)  # type: ignore[arg-type]  # keys never clash: "a:1:0"
        return target

    def _node_id(self, node: int | str) -> int:
        if isinstance(node, str):
            matches = [n.nid for n in self.graph.nodes if n.name == node]
            if len(matches) != 1:
                raise InputError(f"no node is called {node!r}" if not matches else
                                 f"{len(matches)} nodes are called {node!r} (ids {matches}); "
                                 "give the node id")
            return matches[0]
        return _position(node, len(self.graph.nodes), "node")

    def _to_host(self, eid: int) -> np.ndarray[Any, Any]:
        view = self._table.views[eid]
        host = np.empty(view.shape, dtype=self.graph.entries[eid].dtype.numpy)
        copier(self.plan.entry_device[eid], cpu(0))(view, host)
        return host

    def _synchronize(self) -> None:
        for dev in self.devices:
            backend_for(dev).synchronize()

    # -- inputs ----------------------------------------------------------------------------

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Copy values into inputs, by name or index: ``set_input("A", a)``, ``set_input(A=a)``.

        Values may be numpy, cupy or sim arrays, or anything with ``__dlpack__`` or
        ``__array__``; a value on another device than its input is copied across. Shape and
        dtype must match exactly: graphrt never casts or reshapes an input (TVM did silently).
        All values are checked before any is copied, so a bad one leaves every input as it was.

        Raises:
            InputError: an unknown name or index, or a shape or dtype that does not match.
        """
        pending: dict[Any, Any] = dict(params)
        if key is not None:
            pending[key] = value
        self._set_inputs(pending)

    def _set_inputs(self, values: Mapping[Any, Any]) -> None:
        positions = [self._input_position(key) for key in values]
        transfers = [self._transfer_in(position, value)
                     for position, value in zip(positions, values.values(), strict=True)]
        if any(position in self._bound_inputs for position in positions):
            self._bind(dict.fromkeys(positions), {})  # back to module-owned storage
        for position, (move, src, dst) in zip(positions, transfers, strict=True):
            move(src, dst)
            if self._dynamic is not None:
                self._slot_shapes[position] = tuple(dst.shape)
                self._dynamic.set_input_shape(self._input_eids[position], tuple(dst.shape))

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

    def load_params(self, params: bytes | bytearray | memoryview | Mapping[str, Any]) -> None:
        """Set parameters from a TVM params blob or a mapping of name to array.

        Every name must be an input of the graph (TVM ignored unknown names; graphrt refuses
        them). Nothing is set unless everything fits.

        Raises:
            GraphFormatError: the blob is corrupt.
            InputError: an unknown name, or a shape or dtype that does not match.
        """
        items = iter_params(params) if isinstance(params, bytes | bytearray | memoryview) else (
            _mapping_items(params))
        values = dict(items)
        unknown = [name for name in values if name not in self._input_index]
        if unknown:
            raise InputError(f"params {unknown[:10]} are not inputs of the graph (its inputs "
                             f"are: {_listing(self.graph.input_names)})")
        self._set_inputs(values)

    def get_input(self, key: int | str, out: Any = None) -> Any:
        """The input's array on its device, or a copy of it in ``out`` (checked)."""
        position = self._input_position(key)
        return self._read(self._input_eids[position], out,
                          f"input {self.graph.input_names[position]!r}")

    def get_num_inputs(self) -> int:
        """Number of inputs, params included (TVM counts both)."""
        return len(self._input_eids)

    def get_input_index(self, name: str) -> int:
        """Position of the input called ``name``, or -1 if there is none."""
        return self._input_index.get(name, -1)

    def get_input_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {name: shape}, "dtype": {name: dtype}}`` of every input."""
        return self._info(self.graph.input_names, self._input_eids)

    # -- outputs ---------------------------------------------------------------------------

    def get_output(self, index: int | str, out: Any = None) -> Any:
        """Output ``index`` (a position or an output name).

        Without ``out``: the array bound with :meth:`set_output_zero_copy` if there is one,
        else the module's own array on its device, which the next run overwrites (copy it to
        keep it). With ``out`` (numpy, cupy, sim or DLPack; any device): the output is
        copied into it after checking shape and dtype, and ``out`` is returned.

        Raises:
            InputError: no such output, or ``out`` does not fit.
        """
        position = self._output_position(index)
        bound = self._bound_outputs.get(position)
        if bound is not None and out is None:
            return bound.given
        return self._read(self.graph.heads[position], out,
                          f"output {position} ({self.graph.output_names[position]!r})")

    def get_num_outputs(self) -> int:
        """Number of outputs (heads) of the graph."""
        return len(self.graph.heads)

    def get_output_index(self, name: str) -> int:
        """Position of the first output called ``name``, or -1 if there is none.

        An output is named after its node, or ``name:index`` when its node has several outputs.
        """
        return self._output_index.get(name, -1)

    def get_output_info(self) -> dict[str, dict[str, Any]]:
        """``{"shape": {name: shape}, "dtype": {name: dtype}}`` of every output entry."""
        return self._info(self.graph.output_names, self.graph.heads)

    # -- helpers ---------------------------------------------------------------------------

    def _info(self, names: tuple[str, ...], eids: tuple[int, ...]) -> dict[str, dict[str, Any]]:
        entries = [self.graph.entries[eid] for eid in eids]
        return {"shape": {name: e.shape_text for name, e in zip(names, entries, strict=True)},
                "dtype": {name: e.dtype.name for name, e in zip(names, entries, strict=True)}}

    def _input_position(self, key: int | str) -> int:
        return _named_position(key, self._input_index, self.graph.input_names, "input")

    def _output_position(self, key: int | str) -> int:
        return _named_position(key, self._output_index, self.graph.output_names, "output")

    def _transfer_in(self, position: int, value: Any) -> _Transfer:
        eid = self._input_eids[position]
        what = f"input {self.graph.input_names[position]!r} (node {self.graph.arg_nodes[position]})"
        src_dev, src = _locate(value, what)
        self._check_input(eid, src, what)
        dst = self._table.slot_views[eid]
        if self._dynamic is not None and eid in self._dynamic.dynamic_eids:
            dst = self._dynamic.slot_view(eid, tuple(src.shape))
        return copier(src_dev, self.plan.entry_device[eid]), src, dst

    def _read(self, eid: int, out: Any, what: str) -> Any:
        view = self._table.views[eid]
        if out is None:
            return view
        out_dev, target = _locate(out, f"out buffer for {what}")
        self._check_fits(eid, target, f"out buffer for {what}")
        if not _writable(target):
            raise InputError(f"out buffer for {what} is read-only")
        copier(self.plan.entry_device[eid], out_dev)(view, target)
        return out

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
        for position, value in inputs.items():
            new_inputs.pop(position, None)
            if value is not None:
                eid = self._input_eids[position]
                new_inputs[position] = self._binding(
                    eid, value, f"zero-copy input {self.graph.input_names[position]!r}",
                    writable=False)
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
        changed = {self._input_eids[p] for p in inputs.keys() ^ self._bound_inputs.keys()}
        changed |= {self._input_eids[p] for p in inputs.keys() & self._bound_inputs.keys()
                    if inputs[p] is not self._bound_inputs[p]}
        changed |= {self.graph.heads[p] for p in outputs.keys() ^ self._bound_outputs.keys()}
        changed |= {self.graph.heads[p] for p in outputs.keys() & self._bound_outputs.keys()
                    if outputs[p] is not self._bound_outputs[p]}
        self._bound_inputs, self._bound_outputs = inputs, outputs
        arrays: dict[int, Array] = {}
        for root in {self._groups.root[eid] for eid in changed}:
            self._copy_outs[root] = self._rebind_group(root, arrays)
        self._table.rebind(arrays)
        self._copy_out_steps = tuple(chain.from_iterable(self._copy_outs.values()))

    def _rebind_group(self, root: int, arrays: dict[int, Array]) -> tuple[Step, ...]:
        """Point one alias group at its bound memory; return the copies it needs after a run."""
        heads = self.graph.heads
        bound = sorted(p for p in self._bound_outputs if self._groups.root[heads[p]] == root)
        memory: _Binding | None = None
        memory_eid = root
        if root in self._input_of_entry:  # no kernel writes this group: outputs get copies
            memory = self._bound_inputs.get(self._input_of_entry[root])
        elif bound:
            memory_eid, memory = heads[bound[0]], self._bound_outputs[bound[0]]
            bound = bound[1:]
        dynamic = self._dynamic.dynamic_eids if self._dynamic is not None else frozenset()
        for eid in self._groups.members[root]:
            if memory is None or (eid in dynamic and eid != memory_eid):
                arrays[eid] = self._table.slot_views[eid]  # a dynamic one: re-viewed at run
            elif eid == memory_eid:
                arrays[eid] = memory.native
            else:
                arrays[eid] = memory.native.reshape(self.graph.entries[eid].shape)
        if self._dynamic is not None:
            self._dynamic.bind_memory(root, None if memory is None else memory.native)
        return tuple(
            (copier(self.plan.entry_device[heads[p]], self._bound_outputs[p].device),
             (arrays[heads[p]], self._bound_outputs[p].native), self.graph.entries[heads[p]].nid)
            for p in bound)

    def _binding(self, eid: int, value: Any, what: str, *, writable: bool) -> _Binding:
        dev, native = _locate(value, what)
        expected = self.plan.entry_device[eid]
        if dev != expected:
            raise InputError(f"{what}: zero-copy needs an array on {expected}, given one on "
                             f"{dev} (set_input and get_output(out=) copy across devices)")
        if writable:
            if self._dynamic is not None and eid in self._dynamic.dynamic_eids:
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
        named = [(f"input {self.graph.input_names[p]!r}", self._input_eids[p], b)
                 for p, b in inputs.items()]
        named += [(f"output {p}", self.graph.heads[p], b) for p, b in outputs.items()]
        for i, (what, eid, a) in enumerate(named):
            for other, other_eid, b in named[i + 1:]:
                if (a.device != b.device or not a.nbytes or not b.nbytes
                        or a.address >= b.address + b.nbytes
                        or b.address >= a.address + a.nbytes):
                    continue
                if (self._groups.root[eid] == self._groups.root[other_eid]
                        and (a.address, a.nbytes) == (b.address, b.nbytes)):
                    continue
                raise InputError(f"zero-copy {what} and {other} overlap in memory; each bound "
                                 "tensor needs its own buffer")

    def _fresh_array(self, eid: int) -> Array:
        view, dev = self._table.views[eid], self.plan.entry_device[eid]
        backend = backend_for(dev)
        return backend.view(backend.allocate(view.nbytes), tuple(view.shape), view.dtype)


def _locate(value: Any, what: str) -> tuple[Device, Array]:
    try:
        return locate(value)
    except InputError as err:
        raise InputError(f"{what}: {err}") from None


def _writable(array: Array) -> bool:
    flags = getattr(array, "flags", None)
    return bool(getattr(flags, "writeable", True))


def _named_position(key: object, index: Mapping[str, int], names: tuple[str, ...],
                    kind: str) -> int:
    """The position of an input or output given by name or position."""
    if isinstance(key, str):
        position = index.get(key)
        if position is None:
            raise InputError(f"unknown {kind} {key!r}; the graph's {kind}s are: "
                             f"{_listing(names)}")
        return position
    return _position(key, len(names), kind)


def _position(key: object, count: int, kind: str) -> int:
    if isinstance(key, bool) or not isinstance(key, int):
        raise InputError(f"{kind} key must be a name (str) or a position (int), given {key!r}")
    if not 0 <= key < count:
        raise InputError(f"{kind} index {key} is out of range: the graph has {count} {kind}s")
    return key


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an int >= {minimum}, given {value!r}")


def _mapping_items(params: object) -> Any:
    if not isinstance(params, Mapping):
        raise InputError(f"params must be a TVM params blob (bytes) or a mapping of names to "
                         f"arrays, given {type(params).__name__}")
    return params.items()


def _listing(names: tuple[str, ...], limit: int = 20) -> str:
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
