"""The reference provider: every op's own implementation (:attr:`graphrt.ops.OpDef.compute`)
in the device's array namespace. Last in every chain, and the only provider of ``sim``, which
so stands for a device that has none of the cpu's compiled kernels.

Example:
    >>> import numpy as np
    >>> from graphrt.kernels import NO_EPILOGUE
    >>> from graphrt.ops import TensorType, get_op
    >>> f32 = TensorType((2,), "float32")
    >>> ReferenceProvider().prepare(get_op("add"), get_op("add").attrs(), [f32, f32], [f32],
    ...                             NO_EPILOGUE, dynamic=False, xp=np).call is np.add
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ops import OpDef, TensorType
from .base import ElementwiseStep, Epilogue, FusedRun, Prepared

__all__ = ["ReferenceProvider"]


class ReferenceProvider:
    """``OpDef.positional`` (the reference, or the one array function it is) with the
    reference's workspace; no epilogue, no fusion.

    Args:
        excluded: names of ops whose reference the device's namespace cannot run (cupy has
            no bfloat16).
        uncapturable: names of ops whose reference calls a library that refuses to be
            recorded into a device graph (cuBLAS through CuPy): their steps run between the
            recorded segments.
    """

    name = "reference"

    def __init__(self, excluded: frozenset[str] = frozenset(),
                 uncapturable: frozenset[str] = frozenset()) -> None:
        self.excluded = excluded
        self.uncapturable = uncapturable

    def supports(self, op: OpDef) -> bool:
        return op.name not in self.excluded

    def takes_epilogue(self, op: OpDef) -> bool:
        return False

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue, *, dynamic: bool,
                xp: Any) -> Prepared | None:
        if epilogue:
            return None
        workspace = () if op.workspace is None else tuple(op.workspace(xp, inputs, attrs))
        return Prepared(op.positional(xp, attrs, len(inputs)), workspace,
                        capturable=op.name not in self.uncapturable)

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool, xp: Any) -> list[FusedRun]:
        return []
