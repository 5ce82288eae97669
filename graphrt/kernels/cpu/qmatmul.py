"""The quantized matrix product (``qlinear_matmul``) on the host: one float32 BLAS product,
exact, then one compiled requantization.

As for the quantized convolution (:mod:`graphrt.kernels.cpu.qconv`), 8-bit integers minus
their zero points are exact in float32, and so is every partial sum below 2**24: where
``sum_k |b[k, n] - b_zero| * max |a - a_zero|`` stays below it for every column (checked once
per loaded weight, or from the sizes alone, ``K * 255 * 255``, for a product of two
activations), one float32 GEMM gives the int32 sums exactly. The reference
(:mod:`graphrt.ops.integer_linear`) instead sums 258-term slices into float64 and requantizes
in numpy passes; it still runs every other case (1-D operands, per-row ``a`` parameters,
sums that could pass 2**24).

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("qlinear_matmul")
    >>> one = lambda dtype: TensorType((), dtype)
    >>> types = [TensorType((2, 8, 16), "uint8"), one("float32"), one("uint8"),
    ...          TensorType((16, 4), "int8"), one("float32"), one("int8"), one("float32"),
    ...          one("uint8")]
    >>> call = qmatmul_call(types, TensorType((2, 8, 4), "uint8"), op.positional(np, None, 8))
    >>> call is None or [t.shape for t in call.workspace]
    [(2, 8, 16), (16, 4), (2, 8, 4)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from ...devices.frozen import derived, is_frozen
from ...ops import TensorType
from ...ops.quantize import int_range
from .crew import run_jobs
from .jit import quantized_kernels
from .qconv import EXACT, span

__all__ = ["QMatmulCall", "qmatmul_call"]


@dataclass(frozen=True)
class QMatmulCall:
    """A prepared quantized product: ``run(*inputs, out, *workspace)`` and its workspace
    (``a`` and ``b`` minus their zero points as float32, the float32 sums)."""

    run: Callable[..., None]
    workspace: tuple[TensorType, ...]


def _weight(b: np.ndarray[Any, Any], zero: np.ndarray[Any, Any], reach: int
            ) -> np.ndarray[Any, Any] | None:
    """``b - zero`` as float32 where every column's sums stay exact for data within ``reach``
    of its zero point; None where one could pass 2**24."""
    centered = b.astype(np.int32) - zero.astype(np.int32)
    sums = np.abs(centered).sum(axis=-2, dtype=np.int64)
    if int(sums.max(initial=0)) * reach >= EXACT:
        return None
    floats: np.ndarray[Any, Any] = centered.astype(np.float32)
    return floats


def qmatmul_call(inputs: Sequence[TensorType], out: TensorType,
                 reference: Callable[..., None]) -> QMatmulCall | None:
    """The compiled quantized product of these static types, or None where it does not
    apply (numba missing, a 1-D operand, per-row parameters of ``a``, an empty output).
    ``reference`` (the op's own kernel) runs the calls whose sums could pass 2**24."""
    passes = quantized_kernels()
    a, a_scale, a_zero, b = inputs[:4]
    columns = out.shape[-1] if out.shape else 0
    if (passes is None or a.ndim < 2 or b.ndim < 2 or 0 in out.shape
            or prod(a_scale.shape) != 1 or prod(a_zero.shape) != 1
            or any(prod(t.shape) not in (1, columns) for t in inputs[4:6])):
        return None
    work = out.shape
    workspace = (TensorType(a.shape, "float32"), TensorType(b.shape, "float32"),
                 TensorType(work, "float32"))
    depth = a.shape[-1]
    low, high = (float(v) for v in int_range(out.dtype))

    def run(*arrays: Any) -> None:
        aq, as_, az, bq, bs, bz, ys, yz, target, a_float, b_float, part = arrays
        reach = span(az)
        if is_frozen(bq):
            weight = derived(bq, ("qlinear_matmul", bz.tobytes(), bz.shape, reach),
                             lambda: _weight(np.asarray(bq), np.asarray(bz), reach))
        elif depth * reach * span(bz) < EXACT:
            np.subtract(bq, bz, out=b_float, dtype=np.float32)  # exact: 8-bit integers
            weight = b_float
        else:
            weight = None
        if weight is None or not target.flags.c_contiguous:  # (a plain call's output)
            reference(*arrays[:8], target)
            return
        np.subtract(aq, az, out=a_float, dtype=np.float32)
        if weight.ndim == 2:  # one GEMM over every row of every batch
            np.matmul(a_float.reshape(-1, depth), weight, out=part.reshape(-1, columns))
        else:
            np.matmul(a_float, weight, out=part)
        multiplier = np.asarray(np.divide(np.multiply(as_.reshape(()), bs), ys.reshape(())),
                                np.float64).reshape(-1)
        # on the calling thread: helper threads spinning after it would take the cores the
        # next product's BLAS threads need (a quantized BERT ran its products 3x slower)
        run_jobs(passes.requantize_columns, False, (
            part.reshape(-1), multiplier, float(yz.reshape(-1)[0]), low, high, columns,
            target.reshape(-1), np.zeros(2, np.int64), part.size // columns))

    return QMatmulCall(run, workspace)
