"""The one loop that runs steps, for every kind of run.

A plain run is the flat loop ``for fn, args in steps: fn(*args)`` over a list prepared once:
nothing else happens per step, so a run costs what its kernels cost. Profiling, dumping every
node's outputs and stopping after a node are *hooks* called around each step; shape-function
stages of a dynamic graph are steps like any other. Whatever a step raises is handed to
``fail`` with the id of its node, which turns it into the error to raise (an
:class:`~graphrt.ExecutionError` naming the node, the cause chained).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from .steps import Step

__all__ = ["Failure", "StepHook", "execute"]

Failure = Callable[[int, Exception], Exception]
"""``fail(node_id, error)``: the exception to raise for a step of ``node_id`` that raised."""


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


def _node_of(steps: Sequence[Step], nids: Sequence[int], fn: object, args: object) -> int:
    """The node of the step ``(fn, args)`` (found only when a step fails), or -1."""
    for index, step in enumerate(steps):
        if step[0] is fn and step[1] is args:
            return nids[index]
    return -1
