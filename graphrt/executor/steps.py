"""The steps a run makes, and rebinding them to other memory without rebuilding them all.

Entries joined by ``__nop`` nodes form an *alias group*: one tensor seen through several shapes.
Zero-copy binding hands a whole group to caller memory at once (so a ``__nop`` view of a bound
input reads the caller's data); other entries that merely reuse the group's storage id later
keep the context's own slot, so binding never lets the graph scribble over a caller's array.

Every step gets array objects of its own (views of the same memory), so a kernel that reshapes
an argument in place cannot change what the context or another step sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..devices import Array, Backend
from ..errors import GraphrtError
from ..kernels import bind_call
from ..lib import Lowering, TensorType
from ..schema import NOP, Graph

__all__ = ["AliasGroups", "FixedRecipe", "KernelRecipe", "LoweredRecipe", "Step", "StepRecipe",
           "StepTable"]

Step = tuple[Callable[..., Any], tuple[Any, ...]]
"""``(callable, args)``: a kernel and its arrays, a copy and its (src, dst), or a
shape-function stage and no arguments. Which node a step belongs to is in
:attr:`StepTable.nids`, so a run's loop is exactly ``for fn, args in steps: fn(*args)``."""


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


class StepRecipe(Protocol):
    """How to make one step from the entries' current arrays."""

    @property
    def nid(self) -> int: ...

    @property
    def kind(self) -> str:
        """``"op"``, ``"copy"`` or ``"shape"``."""
        ...

    @property
    def eids(self) -> tuple[int, ...]: ...

    def prepare(self, views: Sequence[Array]) -> Step: ...


def _own(view: Array, flatten: bool) -> Array:
    """A new array object over ``view``'s memory (1-D under ``flatten``)."""
    return view.reshape(-1) if flatten else view.view()


@dataclass(frozen=True)
class KernelRecipe:
    """A kernel (or a copy) over entries: ``fn(*arrays of eids)``."""

    nid: int
    kind: str
    fn: Callable[..., Any]
    eids: tuple[int, ...]
    flatten: bool

    def prepare(self, views: Sequence[Array]) -> Step:
        return self.fn, tuple(_own(views[eid], self.flatten) for eid in self.eids)


@dataclass(frozen=True)
class FixedRecipe:
    """A step that takes no entries (a shape-function stage)."""

    nid: int
    kind: str
    fn: Callable[[], Any]
    eids: tuple[int, ...] = ()

    def prepare(self, views: Sequence[Array]) -> Step:
        return self.fn, ()


class LoweredRecipe:
    """A lowered declarative function over entries and the scratch arena of its device."""

    kind = "op"

    def __init__(self, nid: int, kernel: Callable[..., Any], eids: tuple[int, ...],
                 flatten: bool, lowering: Lowering, arena: Array | None,
                 offsets: tuple[int, ...], backend: Backend, where: str) -> None:
        self.nid, self.kernel, self.eids, self.flatten = nid, kernel, eids, flatten
        self.lowering, self._backend, self._where = lowering, backend, where
        sizes = zip(offsets, lowering.nbytes(), strict=True)
        self._regions = () if arena is None else tuple(arena[offset:offset + nbytes]
                                                       for offset, nbytes in sizes)
        self._planned = tuple(self._view(region, tensor) for region, tensor in
                              zip(self._regions, lowering.intermediates, strict=True))

    def _view(self, region: Array, tensor: TensorType) -> Array:
        dtype = np.dtype(tensor.dtype)
        return self._backend.view(region, tensor.shape, dtype)

    def _intermediates(self, arrays: tuple[Array, ...]) -> tuple[Array, ...]:
        resize = self.lowering.resize
        if resize is None:
            return tuple(view.view() for view in self._planned)
        types = resize(tuple(TensorType(tuple(a.shape), str(a.dtype)) for a in arrays))
        views = []
        for name_index, (region, tensor) in enumerate(zip(self._regions, types, strict=True)):
            nbytes = int(np.prod(tensor.shape)) * np.dtype(tensor.dtype).itemsize
            if nbytes > region.nbytes:  # create() sized it for every admissible shape
                raise GraphrtError(f"{self._where}: intermediate {name_index} needs {nbytes} "
                                   f"bytes at shape {list(tensor.shape)}, more than the "
                                   f"{region.nbytes} graphrt planned for it; the inputs are "
                                   f"within the graph's bounds, so this is graphrt's planning "
                                   f"failing (please report it)")
            views.append(self._view(region, tensor))
        return tuple(views)

    def prepare(self, views: Sequence[Array]) -> Step:
        arrays = tuple(_own(views[eid], self.flatten) for eid in self.eids)
        if self.lowering.direct:
            return bind_call(self.kernel, arrays)
        env = (*arrays, *self._intermediates(arrays))
        calls = tuple(bind_call(call.kernel, tuple(env[i] for i in call.args))
                      for call in self.lowering.calls)
        return self.kernel, (calls,)


class StepTable:
    """The prepared steps of one run context and the array every entry is bound to now.

    ``steps`` is the body (every node's steps, in order) followed by the *tail* (copies into
    bound outputs, see :meth:`set_tail`); ``nids`` and ``kinds`` say whose each step is and
    what it is. :meth:`rebind` points entries at other arrays and re-prepares only the steps
    that use them.
    """

    def __init__(self, specs: Sequence[StepRecipe], views: list[Array]) -> None:
        self.views = views
        self._specs = tuple(specs)
        self._users: dict[int, list[int]] = {}
        for index, spec in enumerate(self._specs):
            for eid in spec.eids:
                self._users.setdefault(eid, []).append(index)
        self.steps: list[Step] = [spec.prepare(views) for spec in self._specs]
        self._stale: set[int] = set()
        self.nids: list[int] = [spec.nid for spec in self._specs]
        self.kinds: list[str] = [spec.kind for spec in self._specs]
        self.version = 0
        """Counts the changes to ``steps``: a recording of them holds while it stays."""

    def rebind(self, arrays: Mapping[int, Array], *, defer: bool = False) -> None:
        """Bind entries to arrays and re-prepare their steps, or with ``defer`` only mark them
        for :meth:`flush` (a dynamic graph's inputs change shape one by one, and a step that
        reads two of them is prepared once all are set, never for a mix of old and new)."""
        touched: set[int] = set()
        for eid, array in arrays.items():
            if self.views[eid] is not array:
                self.views[eid] = array
                touched.update(self._users.get(eid, ()))
        if defer:
            self._stale.update(touched)
            return
        self._stale.difference_update(touched)
        for index in touched:
            self.steps[index] = self._specs[index].prepare(self.views)
        self.version += bool(touched)

    def flush(self, ready: Callable[[tuple[int, ...]], bool] | None = None) -> None:
        """Re-prepare the steps :meth:`rebind` deferred; with ``ready``, only those whose
        entries it accepts (the others stay deferred: a dynamic graph's entries take their
        shapes stage by stage, and a step is prepared once all of its have theirs)."""
        chosen = [index for index in self._stale
                  if ready is None or ready(self._specs[index].eids)]
        for index in chosen:
            self.steps[index] = self._specs[index].prepare(self.views)
        self.version += bool(chosen)
        self._stale.difference_update(chosen)

    def set_tail(self, tail: Sequence[tuple[Step, int]]) -> None:
        """Make ``tail`` the steps that run after the body (copies into bound outputs), each
        with the id of the node whose output it copies."""
        body = len(self._specs)
        self.steps[body:] = [step for step, _ in tail]
        self.nids[body:] = [nid for _, nid in tail]
        self.kinds[body:] = ["copy"] * len(tail)
        self.version += 1
