"""The one loop that runs steps, for every kind of run.

A plain run is the flat loop ``for fn, args in steps: fn(*args)`` over a list prepared once:
nothing else happens per step, so a run costs what its kernels cost. Profiling, dumping every
node's outputs and stopping after a node are *hooks* called around each step; shape-function
stages of a dynamic graph are steps like any other. Whatever a step raises is handed to
``fail`` with the id of its node, which turns it into the error to raise (an
:class:`~graphrt.ExecutionError` naming the node, the cause chained).

A run context picks its :data:`Runner` once, when it is made: :func:`in_order`, the lanes of a
:class:`~graphrt.executor.parallel.ParallelRunner`, or the recordings of a
:class:`~graphrt.executor.capture.CaptureRunner`. A hooked run is an instrument's choice
(:func:`with_hook`), always in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..schema import Graph
from .steps import Step, StepTable

__all__ = ["Dumper", "Failure", "Runner", "StepHook", "StopAfter", "execute", "in_order",
           "with_hook"]


class Failure(Protocol):
    """``fail(node_id, error)``: the exception to raise for a step of ``node_id`` that raised.

    A parallel run also passes ``unfinished``, the lowest node whose outputs it may not have
    written (nodes of later waves may come before the failed one in node order).
    """

    def __call__(self, nid: int, err: Exception, unfinished: int | None = None, /
                 ) -> Exception: ...


Runner = Callable[[StepTable, Failure], None]
"""``run(table, fail)``: one run of a table's steps, by some strategy (see the module)."""


class StepHook(Protocol):
    """Called around every step of a hooked run."""

    def before(self, index: int, nid: int) -> bool:
        """Return False to stop the run before step ``index`` (of node ``nid``)."""
        ...

    def after(self, index: int, nid: int) -> None:
        """Step ``index`` has returned."""
        ...


def execute(steps: Sequence[Step], nids: Sequence[int], fail: Failure,
            hook: StepHook | None = None) -> None:
    """Run ``steps`` in order (with ``hook`` around each one when given); ``nids[i]`` is the
    node of step i.

    Raises:
        Exception: what ``fail`` returns for a step that raised; the step's own error is its
            cause unless ``fail`` returns it unchanged.
    """
    fn: object = None
    args: object = None
    try:
        if hook is None:
            for fn, args in steps:
                fn(*args)
            return
        for index, (fn, args) in enumerate(steps):
            if not hook.before(index, nids[index]):
                return
            fn(*args)
            hook.after(index, nids[index])
    except Exception as err:
        error = fail(_node_of(steps, nids, fn, args), err)
        if error is err:
            raise
        raise error from err


def in_order(table: StepTable, fail: Failure) -> None:
    """The sequential :data:`Runner`: every step of ``table`` in order."""
    execute(table.steps, table.nids, fail)


def with_hook(hook: StepHook) -> Runner:
    """A :data:`Runner` that runs every step in order with ``hook`` around each one."""
    def run(table: StepTable, fail: Failure) -> None:
        execute(table.steps, table.nids, fail, hook)

    return run


def _node_of(steps: Sequence[Step], nids: Sequence[int], fn: object, args: object) -> int:
    """The node of the step ``(fn, args)`` (found only when a step fails), or -1."""
    for index, step in enumerate(steps):
        if step[0] is fn and step[1] is args:
            return nids[index]
    return -1


class StopAfter:
    """A hook that stops the run after the last step of node ``nid``."""

    def __init__(self, nid: int) -> None:
        self._nid = nid

    def before(self, index: int, nid: int) -> bool:
        return nid <= self._nid

    def after(self, index: int, nid: int) -> None:
        pass


class Dumper:
    """A hook that saves every node's outputs to host memory as soon as the node is done.

    Args:
        graph: the graph being run.
        to_host: an entry id's array, copied to the host as it is now.
    """

    def __init__(self, graph: Graph, to_host: Callable[[int], np.ndarray[Any, Any]]) -> None:
        self._graph, self._to_host = graph, to_host
        self.arrays: dict[str, np.ndarray[Any, Any]] = {}
        self._done = 0  # nodes whose outputs are saved

    def save_until(self, nid: int) -> None:
        """Save the outputs of every node before ``nid`` not saved yet."""
        nodes = self._graph.nodes
        while self._done < len(nodes) and nodes[self._done].nid < nid:
            node = nodes[self._done]
            for k, eid in enumerate(node.outputs):
                self.arrays[f"{node.name}:{node.nid}:{k}"] = self._to_host(eid)
            self._done += 1

    def before(self, index: int, nid: int) -> bool:
        self.save_until(nid)
        return True

    def after(self, index: int, nid: int) -> None:
        pass
