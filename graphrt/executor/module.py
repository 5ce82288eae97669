"""``GraphModule``: a graph ready to run, with TVM's graph-executor API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..devices import Array, Device, backend_for, copier, device, locate
from ..errors import ExecutionError, InputError
from ..lib import LibrarySource, as_library
from ..params import iter_params
from ..schema import Graph, GraphSource, load_graph
from ..storage import StoragePlan, plan_storage
from .build import allocate_views, build_steps, resolve_kernels

__all__ = ["GraphModule", "create"]

_Transfer = tuple[Any, Array, Array]  # (copy function, source array, destination array)


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
    return GraphModule(graph, plan, kernels)


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

    def __init__(self, graph: Graph, plan: StoragePlan, kernels: tuple[Any, ...]) -> None:
        self.graph = graph
        self.plan = plan
        self._views = allocate_views(graph, plan)
        self._steps = build_steps(graph, plan, kernels, self._views)
        self._input_eids = tuple(graph.nodes[nid].outputs[0] for nid in graph.arg_nodes)
        self._input_index = {name: i for i, name in enumerate(graph.input_names)}
        self._output_index: dict[str, int] = {}
        for i, name in enumerate(graph.output_names):
            self._output_index.setdefault(name, i)

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices the module runs on; ``devices[0]`` is the fallback."""
        return self.plan.devices

    def __repr__(self) -> str:
        devs = ", ".join(map(str, self.devices))
        return (f"<GraphModule {len(self.graph.nodes)} nodes, {len(self._steps)} steps, "
                f"{self.get_num_inputs()} inputs, {self.get_num_outputs()} outputs on {devs}>")

    # -- running ---------------------------------------------------------------------------

    def run(self, **inputs: Any) -> None:
        """Set any inputs given by name, then execute every step in order.

        On cuda the kernels and copies are queued on the current stream; ``get_output(i, out)``
        into host memory waits for them.

        Raises:
            InputError: an input given here does not fit (nothing is set then).
            ExecutionError: a kernel raised; it names the node and chains the original. The
                module stays usable.
        """
        if inputs:
            self._set_inputs(inputs)
        nid = -1
        try:
            for kernel, args, nid in self._steps:  # noqa: B007 (nid names a failing step)
                kernel(*args)
        except Exception as err:
            raise self._execution_error(nid, err) from err

    def _execution_error(self, nid: int, err: Exception) -> ExecutionError:
        node = self.graph.nodes[nid]
        dev = self.plan.node_device[nid]
        func_name = node.func_name or ""
        return ExecutionError(
            f"{node.label} (func_name {func_name!r}) failed on {dev}: "
            f"{type(err).__name__}: {err}",
            node_id=nid, node_name=node.name, func_name=func_name, device=str(dev))

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
        transfers = [self._transfer_in(self._input_position(key), value)
                     for key, value in values.items()]
        for move, src, dst in transfers:
            move(src, dst)

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

        Without ``out``: the output's array on its device, which the next run overwrites (copy
        it to keep it). With ``out`` (numpy, cupy, sim or DLPack; any device): the output is
        copied into it after checking shape and dtype, and ``out`` is returned.

        Raises:
            InputError: no such output, or ``out`` does not fit.
        """
        position = self._output_position(index)
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
        return {"shape": {name: e.shape for name, e in zip(names, entries, strict=True)},
                "dtype": {name: e.dtype.name for name, e in zip(names, entries, strict=True)}}

    def _input_position(self, key: int | str) -> int:
        names = self.graph.input_names
        if isinstance(key, str):
            position = self._input_index.get(key)
            if position is None:
                raise InputError(f"unknown input {key!r}; the graph's inputs are: "
                                 f"{_listing(names)}")
            return position
        return _position(key, len(names), "input")

    def _output_position(self, key: int | str) -> int:
        if isinstance(key, str):
            position = self._output_index.get(key)
            if position is None:
                raise InputError(f"unknown output {key!r}; the graph's outputs are: "
                                 f"{_listing(self.graph.output_names)}")
            return position
        return _position(key, len(self.graph.heads), "output")

    def _transfer_in(self, position: int, value: Any) -> _Transfer:
        eid = self._input_eids[position]
        what = f"input {self.graph.input_names[position]!r} (node {self.graph.arg_nodes[position]})"
        src_dev, src = _locate(value, what)
        self._check_fits(eid, src, what)
        return copier(src_dev, self.plan.entry_device[eid]), src, self._views[eid]

    def _read(self, eid: int, out: Any, what: str) -> Any:
        view = self._views[eid]
        if out is None:
            return view
        out_dev, target = _locate(out, f"out buffer for {what}")
        self._check_fits(eid, target, f"out buffer for {what}")
        if not _writable(target):
            raise InputError(f"out buffer for {what} is read-only")
        copier(self.plan.entry_device[eid], out_dev)(view, target)
        return out

    def _check_fits(self, eid: int, array: Array, what: str) -> None:
        entry = self.graph.entries[eid]
        shape, dtype = tuple(array.shape), array.dtype
        if shape != entry.shape or dtype != entry.dtype.numpy:
            raise InputError(f"{what}: expected shape {entry.shape} {entry.dtype}, given "
                             f"shape {shape} {dtype}")


def _locate(value: Any, what: str) -> tuple[Device, Array]:
    try:
        return locate(value)
    except InputError as err:
        raise InputError(f"{what}: {err}") from None


def _writable(array: Array) -> bool:
    flags = getattr(array, "flags", None)
    return bool(getattr(flags, "writeable", True))


def _position(key: object, count: int, kind: str) -> int:
    if isinstance(key, bool) or not isinstance(key, int):
        raise InputError(f"{kind} key must be a name (str) or a position (int), given {key!r}")
    if not 0 <= key < count:
        raise InputError(f"{kind} index {key} is out of range: the graph has {count} {kind}s")
    return key


def _mapping_items(params: object) -> Any:
    if not isinstance(params, Mapping):
        raise InputError(f"params must be a TVM params blob (bytes) or a mapping of names to "
                         f"arrays, given {type(params).__name__}")
    return params.items()


def _listing(names: tuple[str, ...], limit: int = 20) -> str:
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
