"""The one loop that runs steps, for every kind of run.

A plain run is the flat loop ``for fn, args, nid in steps: fn(*args)`` over a list prepared
once. Profiling, dumping every node's outputs and stopping after a node are *hooks* called
around each step; shape-function stages of a dynamic graph are steps like any other. Whatever a
step raises is handed to ``fail`` with the id of its node, which turns it into the error to
raise (an :class:`~graphrt.ExecutionError` naming the node, the cause chained).
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


def execute(steps: Sequence[Step], fail: Failure, hook: StepHook | None = None) -> None:
    """Run ``steps`` in order (with ``hook`` around each one when given).

    Raises:
        Exception: what ``fail`` returns for a step that raised; the step's own error is its
            cause unless ``fail`` returns it unchanged.
    """
    nid = -1
    try:
        if hook is None:
            for fn, args, nid in steps:  # noqa: B007 (nid names a failing step)
                fn(*args)
            return
        for index, (fn, args, nid) in enumerate(steps):
            if not hook.before(index, nid):
                return
            fn(*args)
            hook.after(index, nid)
    except Exception as err:
        error = fail(nid, err)
        if error is err:
            raise
        raise error from err
