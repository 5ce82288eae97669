"""What ``create()`` prepares once before steps are bound: kernels resolved, storage allocated."""

from __future__ import annotations

from math import prod

from ..devices import Array, backend_for
from ..errors import GraphFormatError, KernelNotFoundError, PlacementError
from ..lib import FusedFunction, Kernel, Library, ShapeFunction, TensorType
from ..schema import COPY, NOP, Graph, Node
from ..storage import StoragePlan

__all__ = ["allocate_pool", "entry_views", "resolve_kernels", "resolve_shape_functions"]


def resolve_kernels(graph: Graph, plan: StoragePlan, lib: Library) -> tuple[Kernel | None, ...]:
    """The kernel of every node (None for inputs and built-ins), bound to its device's context.

    Raises:
        KernelNotFoundError: naming each missing func_name with the first node and device type
            that needs it.
    """
    kernels: list[Kernel | None] = []
    missing: dict[str, str] = {}
    for node in graph.nodes:
        kernel = None
        if node.func_name is not None and node.func_name not in (NOP, COPY):
            dev = plan.node_device[node.nid]
            found = lib.resolve(node.func_name, dev.type_code)
            if found is None:
                missing.setdefault(node.func_name, f"{node.label} on {dev} "
                                   f"(device type {dev.type_code})")
            else:
                if isinstance(found, FusedFunction):
                    found = found.bind(_types(graph, node.inputs, node.flatten_data),
                                       _types(graph, node.outputs, node.flatten_data),
                                       backend_for(dev), node.label,
                                       dynamic=_is_dynamic(graph, node))
                kernel = backend_for(dev).bind_kernel(found)
        kernels.append(kernel)
    if missing:
        listed = "; ".join(f"{name!r} needed by {where}" for name, where in
                           list(missing.items())[:5])
        more = f" (and {len(missing) - 5} more func_names)" if len(missing) > 5 else ""
        raise KernelNotFoundError(f"the lib has no kernel for {listed}{more}")
    return tuple(kernels)


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


def allocate_pool(plan: StoragePlan) -> dict[int, Array]:
    """One zeroed byte buffer per slot, by storage id, on the slot's device."""
    return {sid: backend_for(slot.device).allocate(slot.nbytes)
            for sid, slot in plan.pool.items()}


def entry_views(graph: Graph, plan: StoragePlan, pool: dict[int, Array]) -> list[Array]:
    """Every entry's typed view of its slot, at its planned shape.

    Raises:
        PlacementError: a device cannot represent an entry's dtype.
    """
    views = []
    for entry in graph.entries:
        dev = plan.entry_device[entry.eid]
        try:
            views.append(backend_for(dev).view(pool[entry.sid], entry.shape, entry.dtype.numpy))
        except (TypeError, ValueError) as err:
            raise PlacementError(f"{graph.entry_label(entry.eid)}: {dev} cannot hold "
                                 f"{entry.dtype}{list(entry.shape)}: {err}") from None
    return views


def _is_dynamic(graph: Graph, node: Node) -> bool:
    return any(graph.entries[eid].dims is not None for eid in (*node.inputs, *node.outputs))


def _types(graph: Graph, eids: tuple[int, ...], flatten: bool) -> list[TensorType]:
    """The entries' types as a kernel sees them (1-D under ``flatten_data``)."""
    entries = [graph.entries[eid] for eid in eids]
    return [TensorType((prod(e.shape),) if flatten else e.shape, e.dtype.numpy.name)
            for e in entries]
