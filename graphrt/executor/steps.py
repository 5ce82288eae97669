"""The steps a run makes, and rebinding them to other memory without rebuilding them all.

Entries joined by ``__nop`` nodes form an *alias group*: one tensor seen through several shapes.
Zero-copy binding hands a whole group to caller memory at once (so a ``__nop`` view of a bound
input reads the caller's data); other entries that merely reuse the group's storage id later
keep the module's own slot, so binding never lets the graph scribble over a caller's array.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..devices import Array, copier
from ..schema import COPY, NOP, Graph
from ..storage import StoragePlan

__all__ = ["AliasGroups", "Step", "StepTable"]

_Spec = tuple[Callable[..., Any], tuple[int, ...], bool, int]  # fn, entry ids, flatten, node id

Step = tuple[Callable[..., Any], tuple[Array, ...], int]
"""``(callable, args, node_id)``: a kernel and its arrays, or a copy and its (src, dst)."""


class AliasGroups:
    """Entries joined by ``__nop`` nodes, each group keyed by its root (the non-``__nop`` entry).

    Example:
        >>> groups = AliasGroups(graph)  # doctest: +SKIP
        >>> groups.members[groups.root[eid]]  # doctest: +SKIP
    """

    def __init__(self, graph: Graph) -> None:
        root = list(range(len(graph.entries)))
        for node in graph.nodes:  # topological order: a __nop's input already has its root
            if node.func_name == NOP:
                root[node.outputs[0]] = root[node.inputs[0]]
        members: dict[int, list[int]] = {}
        for eid, group in enumerate(root):
            members.setdefault(group, []).append(eid)
        self.root: tuple[int, ...] = tuple(root)
        self.members: dict[int, tuple[int, ...]] = {r: tuple(m) for r, m in members.items()}


class StepTable:
    """The prepared steps of a module and the array every entry is currently bound to.

    ``views[eid]`` starts as the entry's view of its pool slot. :meth:`rebind` points entries at
    other arrays and re-prepares only the steps that use them.
    """

    def __init__(self, graph: Graph, plan: StoragePlan, kernels: tuple[Any, ...],
                 slot_views: list[Array]) -> None:
        self.slot_views = tuple(slot_views)
        self.views = list(slot_views)
        self._specs: list[_Spec] = []
        self._users: dict[int, list[int]] = {}
        for node in graph.nodes:
            if node.op == "null" or node.func_name == NOP:
                continue
            spec: _Spec
            if node.func_name == COPY:
                src, dst = node.inputs[0], node.outputs[0]
                fn = copier(plan.entry_device[src], plan.entry_device[dst])
                spec = (fn, (src, dst), False, node.nid)
            else:
                spec = (kernels[node.nid], (*node.inputs, *node.outputs), node.flatten_data,
                        node.nid)
            for eid in spec[1]:
                self._users.setdefault(eid, []).append(len(self._specs))
            self._specs.append(spec)
        self.steps: list[Step] = [self._prepare(i) for i in range(len(self._specs))]

    def _prepare(self, index: int) -> Step:
        fn, eids, flatten, nid = self._specs[index]
        args = tuple(self.views[eid] for eid in eids)
        if flatten:
            args = tuple(arg.reshape(-1) for arg in args)
        return fn, args, nid

    def rebind(self, arrays: Mapping[int, Array]) -> None:
        """Bind entries to arrays (their slot views to unbind) and re-prepare their steps."""
        touched: set[int] = set()
        for eid, array in arrays.items():
            if self.views[eid] is not array:
                self.views[eid] = array
                touched.update(self._users.get(eid, ()))
        for index in touched:
            self.steps[index] = self._prepare(index)
