"""Stacks of matrix products of two activations (attention's ``Q @ K^T`` and ``P @ V``) on
the compiled micro-kernel, so that a model whose products all run here never wakes
OpenBLAS's threads.

``matmul`` and ``batch_matmul`` of two float32 operands of the same rank (3 or more) and
the same leading dimensions run here: 6 rows of the left operand at a time by every
16-column panel of the right one, both read in place
(:func:`graphrt.kernels.cpu.direct_conv.batch_jobs`), adding a residual and applying relu or
a clip as it stores. Nothing is packed (packing 6 rows cost as much as their product by 64
columns), so nothing needs to be a param. It runs only
while no product of the graph runs on BLAS (``packing()``, as for
:mod:`graphrt.kernels.cpu.dense`): OpenBLAS's workers spin for about 0.1 s after a threaded
call and the helper threads would take each other's cores. Otherwise, and for a transposed
operand or broadcast leading dimensions, the reference (numpy's matmul on BLAS) runs.

Example:
    >>> import numpy as np
    >>> from graphrt.kernels.base import NO_EPILOGUE
    >>> from graphrt.ops import TensorType
    >>> a, b = np.ones((2, 3, 4), np.float32), np.full((2, 4, 5), 0.5, np.float32)
    >>> types = [TensorType(a.shape, "float32"), TensorType(b.shape, "float32")]
    >>> prepared = batch_product_call("batch_matmul", None, types,
    ...                               TensorType((2, 3, 5), "float32"), NO_EPILOGUE,
    ...                               lambda a, b, out: None)
    >>> out = np.empty((2, 3, 5), np.float32)
    >>> prepared.call(a, b, out)
    >>> out[1, 2].tolist()
    [2.0, 2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from ...ops import TensorType
from ..base import Epilogue, Prepared
from .blas_threads import lanes_running
from .crew import run_jobs
from .dense import epilogue_after
from .jit import direct_conv

__all__ = ["batch_product_call"]

_ROWS = 6  # the micro-kernel's rows (direct_conv.ROWS)
_MIN_WORK = 1 << 21
"""Multiply-adds below which a stack runs on the calling thread alone."""
_JOBS = 16
"""Jobs a stack is cut into at least (chunks of rows), where it has fewer matrices."""


def batch_product_call(op: str, attrs: Any, inputs: Sequence[TensorType], out: TensorType,
                       epilogue: Epilogue, reference: Callable[..., None],
                       packing: Callable[[], bool] = lambda: True) -> Prepared | None:
    """The kernel of ``op`` (``matmul``, ``batch_matmul``) of two activations at these static
    types, or None where it cannot apply (another dtype, a transposed operand, ranks under 3
    or unequal, broadcast leading dimensions, no numba); it runs the reference on a call
    where ``packing()`` is false (see the module docstring)."""
    kernels = direct_conv()
    if (kernels is None or op not in ("matmul", "batch_matmul") or len(inputs) != 2
            or any(t.dtype != "float32" for t in (*inputs, out))
            or getattr(attrs, "transpose_a", False) or getattr(attrs, "transpose_b", False)):
        return None
    a, b = inputs[0].shape, inputs[1].shape
    if len(a) < 3 or len(a) != len(b) or a[:-2] != b[:-2] or 0 in out.shape:
        return None
    batches, m, k, n = prod(a[:-2]), a[-2], a[-1], b[-1]
    if out.shape != (*a[:-1], n) or k == 0:
        return None
    blocks = -(-m // _ROWS)
    chunk = max(1, min(blocks, -(-batches * blocks // _JOBS)))
    parallel = batches * m * n * k >= _MIN_WORK
    flags = ((kernels.RELU if epilogue.relu else 0) | (kernels.CLIP if epilogue.clip else 0)
             | (kernels.RESIDUAL if epilogue.residual else 0))
    bounds = np.asarray(epilogue.clip or (0.0, 0.0), np.float32)
    zeros = np.zeros(16, np.float32)  # the micro-kernel's bias
    residual_at = epilogue.residual

    def call(*arrays: Any) -> None:
        residual = arrays[2] if residual_at else None
        result = arrays[-1]
        if not packing():
            reference(arrays[0], arrays[1], result)
            epilogue_after(result, residual, epilogue)
            return
        flat = result.reshape(-1)
        extra = (np.ascontiguousarray(residual).reshape(-1) if residual is not None
                 else flat[:0])
        run_jobs(kernels.batch_jobs, parallel and not lanes_running(), (
            np.ascontiguousarray(arrays[0]).reshape(-1),
            np.ascontiguousarray(arrays[1]).reshape(-1), batches, m, k, n, flat, zeros, extra,
            flags, bounds, chunk, np.zeros(2, np.int64), 1))

    return Prepared(call, capturable=False, provider="cpu")
