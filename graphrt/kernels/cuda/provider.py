"""The cuda kernels behind the provider interface (:mod:`graphrt.kernels.base`): runs of
elementwise steps fused into one ``cupy.ElementwiseKernel`` each
(:mod:`graphrt.kernels.cuda.elementwise`); every op runs its reference on cupy otherwise.

cupy is imported by the device backend, never here: :meth:`CudaProvider.fuse` compiles
through the namespace it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...ops import OpDef, TensorType, elementwise_runs
from ..base import ElementwiseStep, Epilogue, FusedRun, Prepared
from .elementwise import compile_run, kernel_source

__all__ = ["CudaProvider"]


class CudaProvider:
    """Elementwise fusion on cuda; no kernel of its own for a single op yet."""

    name = "cuda"

    UNSUPPORTED = frozenset({"cast_bfloat16"})
    """Ops whose reference cupy cannot run (it has no bfloat16): placement keeps them on a
    host device."""

    def supports(self, op: OpDef) -> bool:
        return False

    def takes_epilogue(self, op: OpDef) -> bool:
        return False

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue, *, dynamic: bool,
                xp: Any) -> Prepared | None:
        return None

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool, xp: Any) -> list[FusedRun]:
        runs = []
        for run in elementwise_runs(steps, exported):
            try:
                source = kernel_source(run, steps, types)
            except ValueError:  # a dtype CUDA code cannot name: leave these steps unfused
                continue
            runs.append((run, compile_run(xp, source)))
        return runs
