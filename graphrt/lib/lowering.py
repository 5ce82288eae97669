"""A declarative function lowered for one node: op calls and the intermediates they need.

The lib never allocates. :meth:`FusedFunction.lower` returns a :class:`Lowering`: the calls
(each a positional kernel and the indices of the arrays it takes), the types of the
intermediates, and when each intermediate is first written and last read. An op's workspace
(:attr:`graphrt.kernels.Prepared.workspace`, e.g. a convolution's im2col) is an intermediate written
and last read by its one call, passed after that call's outputs. The executor plans
the intermediates as scratch memory (reused across nodes, and within a node by those
lifetimes), binds the calls to its arrays once, and counts the scratch in ``memory()``, the
placement report and the capacity check.

Array indices count the node's inputs, then its outputs, then the intermediates.

Example:
    >>> import numpy as np
    >>> from graphrt.kernels import chain
    >>> from graphrt.lib import Library, TensorType
    >>> lib = Library()
    >>> fn = lib.define("add_relu", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
    ...     {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
    ...     {"op": "relu", "inputs": ["t"], "outputs": ["y"]}]})
    >>> f32 = TensorType((4,), "float32")
    >>> lowering = fn.lower([f32, f32], [f32], kernels=chain("sim", np), where="node 2")
    >>> lowering.intermediates, [call.args for call in lowering.calls]
    ((TensorType(shape=(4,), dtype='float32'),), [(0, 1, 3), (3, 2)])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np

from ..ops import TensorType

__all__ = ["LoweredCall", "Lowering", "Resize"]

Resize = Callable[[tuple[TensorType, ...]], tuple[TensorType, ...]]
"""``resize(types of the node's inputs and outputs at one run's shapes)``: the
intermediates' types at those shapes (a node with dynamic shapes only)."""


@dataclass(frozen=True)
class LoweredCall:
    """One kernel call: ``kernel(*arrays[i] for i in args)``; ``capturable``: its kernel's
    work may be recorded into a device graph (:attr:`graphrt.kernels.Prepared.capturable`)."""

    kernel: Callable[..., None]
    args: tuple[int, ...]
    capturable: bool = True


@dataclass(frozen=True)
class Lowering:
    """What a declarative function is at one node.

    Attributes:
        calls: the kernel calls, in order.
        arity: the node's inputs plus outputs (the first indices of every call's ``args``).
        intermediates: the intermediates' types at the planned shapes.
        lifetimes: per intermediate, the index of the call that writes it and of the last
            call that reads it.
        resize: for a node whose shapes change between runs, the intermediates' types at a
            run's shapes; None for a static node.
    """

    calls: tuple[LoweredCall, ...]
    arity: int
    intermediates: tuple[TensorType, ...]
    lifetimes: tuple[tuple[int, int], ...]
    resize: Resize | None = None

    @property
    def capturable(self) -> bool:
        """Every call's kernel may be recorded into a device graph."""
        return all(call.capturable for call in self.calls)

    @property
    def direct(self) -> bool:
        """One call over exactly the node's arrays, in order: it runs as a plain kernel."""
        return len(self.calls) == 1 and self.calls[0].args == tuple(range(self.arity))

    def nbytes(self) -> tuple[int, ...]:
        """Bytes of each intermediate at the planned shapes."""
        return tuple(prod(t.shape) * np.dtype(t.dtype).itemsize for t in self.intermediates)
