"""The one interface every device's kernels sit behind, asked once per op at ``create()``.

A :class:`Provider` looks at an op, its attributes and its types (and the elementwise steps a
declarative function wants after it, its :class:`Epilogue`) and returns a :class:`Prepared`
kernel, or None where it has none for that case; :mod:`graphrt.kernels.registry` asks the
providers of a device kind in order, the reference last (:mod:`graphrt.kernels.reference`,
which always answers for an empty epilogue). Everything a kernel can decide from the types
(its algorithm, its plan, its workspace, its thread policy) is decided in ``prepare``, so a
call does only the work.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> from graphrt.kernels import ReferenceProvider
    >>> f32 = TensorType((4,), "float32")
    >>> op = get_op("relu")
    >>> prepared = ReferenceProvider().prepare(op, op.attrs(), [f32], [f32], NO_EPILOGUE,
    ...                                        dynamic=False, xp=np)
    >>> x, out = np.array([-1, 2, -3, 4], np.float32), np.empty(4, np.float32)
    >>> prepared.call(x, out)
    >>> out.tolist(), prepared.workspace, prepared.capturable
    ([0.0, 2.0, 0.0, 4.0], (), True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..ops import ElementwiseRun, OpDef, TensorType

__all__ = ["NO_EPILOGUE", "Binding", "BindsArrays", "ElementwiseStep", "Epilogue", "FusedRun",
           "Prepared", "Provider", "bind_call"]

@dataclass(frozen=True)
class Epilogue:
    """What a kernel applies as it stores its output: ``+ bias`` (a vector along the
    output's last axis, passed after the op's inputs), ``+ residual`` (an array of the
    output's type, passed after them), then relu or a clip to ``(low, high)`` (ReLU6 is
    ``(0, 6)``)."""

    residual: bool = False
    relu: bool = False
    clip: tuple[float, float] | None = None
    bias: bool = False

    def __bool__(self) -> bool:
        return self.residual or self.relu or self.clip is not None or self.bias


NO_EPILOGUE = Epilogue()
"""The op alone."""


@dataclass(frozen=True)
class Prepared:
    """A kernel ready for one op at given types.

    Attributes:
        call: ``call(*inputs, bias?, residual?, *outputs, *workspace)``; it writes the
            outputs.
        workspace: the scratch arrays it needs after its outputs, planned by the executor
            like any intermediate (holding garbage when the call starts).
        capturable: whether its work may be recorded into a device graph (CUDA graphs) and
            replayed: no host synchronization, no allocation, no host-side decision on data.
        provider: the name of the provider that made it (``"cpu"``, ``"reference"``, ...).
    """

    call: Callable[..., None]
    workspace: tuple[TensorType, ...] = ()
    capturable: bool = True
    provider: str = "reference"


ElementwiseStep = tuple[str | None, tuple[str, ...], tuple[str, ...]]
"""A step of a function as elementwise fusion sees it: its elementwise expression (None if
the op has none), its input names, its output names."""

FusedRun = tuple[ElementwiseRun, Callable[..., None]]
"""A run of elementwise steps and the kernel computing it: ``kernel(*inputs, out)``."""


class BindsArrays(Protocol):
    """A kernel that does per step, once, what a call would do every time: the executor
    binds it to a step's arrays when it prepares the step (and again when they change), and
    runs ``call(*args)`` of what ``bind_arrays`` returns. A small compiled loop reads its
    arrays through their addresses this way (:class:`graphrt.kernels.cpu.loops.BoundLoop`).
    The arrays' memory stays where it is while the step lives; their contents change."""

    def __call__(self, *arrays: Any) -> None: ...

    def bind_arrays(self, arrays: tuple[Any, ...]) -> tuple[Callable[..., None], tuple[Any, ...]]:
        ...


@dataclass(frozen=True)
class Binding:
    """A kernel (``call``) that :class:`BindsArrays` through ``bind``.

    Example:
        >>> kernel = Binding(print, lambda arrays: (print, ("bound", *arrays)))
        >>> fn, args = bind_call(kernel, (1,))
        >>> fn(*args)
        bound 1
    """

    call: Callable[..., None]
    bind: Callable[[tuple[Any, ...]], tuple[Callable[..., None], tuple[Any, ...]]]

    def __call__(self, *arrays: Any) -> None:
        self.call(*arrays)

    def bind_arrays(self, arrays: tuple[Any, ...]) -> tuple[Callable[..., None], tuple[Any, ...]]:
        return self.bind(arrays)


def bind_call(kernel: Callable[..., None], arrays: tuple[Any, ...]
              ) -> tuple[Callable[..., None], tuple[Any, ...]]:
    """The call that runs ``kernel`` on ``arrays`` in a prepared step: what a kernel that
    :class:`BindsArrays` makes of them, else the kernel and the arrays as they are.

    Example:
        >>> bind_call(max, (1, 2))
        (<built-in function max>, (1, 2))
    """
    binder = getattr(kernel, "bind_arrays", None)
    return (kernel, arrays) if binder is None else binder(arrays)


class Provider(Protocol):
    """The kernels of one library for one device kind.

    ``prepare`` is asked at ``create()`` (and, for a node whose shapes change between runs,
    once per new shape to size its workspace); it returns None where it has no kernel for
    the case, and the next provider of the chain is asked.
    """

    name: str

    def supports(self, op: OpDef) -> bool:
        """Whether some call of ``op`` may run here (placement asks, as ONNX Runtime's
        GetCapability)."""
        ...

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue, *, dynamic: bool,
                xp: Any) -> Prepared | None:
        """A kernel for ``op`` at these types with ``epilogue``, or None.

        Args:
            dynamic: the node's shapes change between runs, up to the ones given: the call
                must accept any smaller shapes (deciding per shape, cached).
            xp: the device's array namespace.
        """
        ...

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool, xp: Any) -> list[FusedRun]:
        """Runs of elementwise ``steps`` this provider computes as one kernel each (none:
        the steps run one by one). ``exported``: names read outside the steps."""
        ...

    def takes_epilogue(self, op: OpDef) -> bool:
        """Whether ``prepare`` may accept a non-empty epilogue for ``op``."""
        ...
