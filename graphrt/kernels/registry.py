"""The provider chain of each device kind, and which ops a device kind supports.

========  ============================================================================
kind      chain (asked in order; the first kernel prepared wins)
========  ============================================================================
``cpu``   compiled numba kernels (:mod:`graphrt.kernels.cpu`), then the reference
``cuda``  CuPy kernels (:mod:`graphrt.kernels.cuda`), then the reference (minus the ops
          CuPy cannot run)
``sim``   the reference only: the simulated accelerator has none of the cpu's kernels
========  ============================================================================

A chain is made per compiled graph (:func:`chain`): what its providers decide for one graph
(the cpu's BLAS thread policy) stays with it.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> supports("cuda", get_op("cast_bfloat16")), supports("sim", get_op("cast_bfloat16"))
    (False, True)
    >>> [p.name for p in chain("cpu", np).providers]
    ['cpu', 'reference']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import KernelNotFoundError, describe
from ..ops import OpDef, TensorType
from .base import NO_EPILOGUE, ElementwiseStep, Epilogue, FusedRun, Prepared, Provider
from .cpu import CpuProvider
from .cuda import CudaProvider
from .reference import ReferenceProvider

__all__ = ["KernelChain", "chain", "supports"]


class KernelChain:
    """The providers of one device kind, asked in order.

    Attributes:
        kind: the device kind (``"cpu"``, ``"cuda"``, ``"sim"``).
        providers: the providers, the reference last.
        xp: the kind's array namespace.
    """

    def __init__(self, kind: str, providers: Sequence[Provider], xp: Any) -> None:
        self.kind = kind
        self.providers = tuple(providers)
        self.xp = xp

    def supports(self, op: OpDef) -> bool:
        """Whether ``op`` runs on this kind at all."""
        return any(provider.supports(op) for provider in self.providers)

    def takes_epilogue(self, op: OpDef) -> bool:
        """Whether some provider may run ``op`` with an epilogue."""
        return any(provider.takes_epilogue(op) for provider in self.providers)

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue = NO_EPILOGUE, *,
                dynamic: bool = False) -> Prepared | None:
        """The first kernel a provider prepares for ``op`` at these types; None only for a
        non-empty ``epilogue`` that no provider takes (the steps then run one by one).

        Raises:
            OpError: the reference's workspace refuses the types (as its shape function).
            KernelNotFoundError: no provider of this kind runs ``op`` (the ONNX importer's
                placement never puts it here; a hand-written graph may).
        """
        for provider in self.providers:
            if not provider.supports(op):
                continue
            prepared = provider.prepare(op, attrs, inputs, outputs, epilogue,
                                        dynamic=dynamic, xp=self.xp)
            if prepared is not None:
                return prepared
        if epilogue:
            return None
        raise KernelNotFoundError(f"no {self.kind} kernel runs op {describe(op.name)}")

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool) -> list[FusedRun]:
        """The runs of elementwise ``steps`` computed as one kernel each, by the first
        provider that fuses any."""
        for provider in self.providers:
            runs = provider.fuse(steps, exported, types, dynamic=dynamic, xp=self.xp)
            if runs:
                return runs
        return []


def chain(kind: str, xp: Any) -> KernelChain:
    """A new chain for device kind ``kind`` (a fresh one per compiled graph), over the
    kind's array namespace ``xp``."""
    if kind == "cpu":
        return KernelChain(kind, (CpuProvider(), ReferenceProvider()), xp)
    if kind == "cuda":
        return KernelChain(kind, (CudaProvider(), ReferenceProvider(
            CudaProvider.UNSUPPORTED, CudaProvider.CUBLAS)), xp)
    return KernelChain(kind, (ReferenceProvider(),), xp)


def supports(kind: str, op: OpDef) -> bool:
    """Whether ``op`` runs on device kind ``kind`` (``"cpu"``, ``"cuda"``, ``"sim"``)."""
    return chain(kind, None).supports(op)
