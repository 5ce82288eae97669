"""Everything ``create()`` prepares once: kernels resolved, storage allocated, steps bound.

A step is ``(callable, args, node_id)``: a kernel with its node's arrays (inputs then outputs,
1-D views when ``flatten_data`` is set), or a cross-device copy for a ``__copy`` node. ``__nop``
nodes become no step at all: their output is a view of their input's slot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..devices import Array, backend_for, copier
from ..errors import KernelNotFoundError, PlacementError
from ..lib import Kernel, Library
from ..schema import COPY, NOP, Graph
from ..storage import StoragePlan

__all__ = ["Step", "allocate_views", "build_steps", "resolve_kernels"]

Step = tuple[Callable[..., Any], tuple[Array, ...], int]


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
            kernel = lib.resolve(node.func_name, dev.type_code)
            if kernel is None:
                missing.setdefault(node.func_name, f"{node.label} on {dev} "
                                   f"(device type {dev.type_code})")
            else:
                kernel = backend_for(dev).bind_kernel(kernel)
        kernels.append(kernel)
    if missing:
        listed = "; ".join(f"{name!r} needed by {where}" for name, where in
                           list(missing.items())[:5])
        more = f" (and {len(missing) - 5} more func_names)" if len(missing) > 5 else ""
        raise KernelNotFoundError(f"the lib has no kernel for {listed}{more}")
    return tuple(kernels)


def allocate_views(graph: Graph, plan: StoragePlan) -> list[Array]:
    """Allocate one buffer per slot and return every entry's typed view of its slot.

    Raises:
        PlacementError: a device cannot represent an entry's dtype.
    """
    buffers = {sid: backend_for(slot.device).allocate(slot.nbytes)
               for sid, slot in plan.pool.items()}
    views = []
    for entry in graph.entries:
        dev = plan.entry_device[entry.eid]
        try:
            views.append(backend_for(dev).view(buffers[entry.sid], entry.shape,
                                               entry.dtype.numpy))
        except (TypeError, ValueError) as err:
            raise PlacementError(f"{graph.entry_label(entry.eid)}: {dev} cannot hold "
                                 f"{entry.dtype}{list(entry.shape)}: {err}") from None
    return views


def build_steps(graph: Graph, plan: StoragePlan, kernels: tuple[Kernel | None, ...],
                views: list[Array]) -> tuple[Step, ...]:
    """The flat list of calls a run makes, in node order."""
    steps: list[Step] = []
    for node in graph.nodes:
        if node.op == "null" or node.func_name == NOP:
            continue
        if node.func_name == COPY:
            src, dst = node.inputs[0], node.outputs[0]
            move = copier(plan.entry_device[src], plan.entry_device[dst])
            steps.append((move, (views[src], views[dst]), node.nid))
            continue
        kernel = kernels[node.nid]
        assert kernel is not None  # resolve_kernels raised otherwise
        args = tuple(views[eid] for eid in (*node.inputs, *node.outputs))
        if node.flatten_data:
            args = tuple(arg.reshape(-1) for arg in args)
        steps.append((kernel, args, node.nid))
    return tuple(steps)
