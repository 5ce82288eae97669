"""Matrix products through nvmath-python's cuBLASLt (``nvmath.linalg.advanced.Matmul``,
pip ``nvmath-python``), with their bias, residual and relu epilogues, capturable into CUDA
graphs.

CuPy refuses every cuBLAS call while a stream captures, so a model whose products ran on
CuPy split its CUDA graph at each of them. cuBLASLt through nvmath is capturable (verified
on an H200: ``../shared/gpu-notes.md``): a stateful ``Matmul`` is planned once (its
algorithm and workspace chosen) and ``execute`` only launches.

How the ops map onto ``D = epilog(A @ B + beta * C + bias)``, D written in place of C:

- ``dense`` (``x @ w.T + bias``) is computed transposed, ``out.T = w @ x.T``, so that the
  bias runs along D's rows as cuBLASLt's bias epilogue wants; ``x.T`` and ``out.T`` are
  column-major views, cuBLASLt's own layout, so nothing is copied.
- ``matmul`` and ``batch_matmul``: ``A @ B`` with the transposes as views; a batch on one
  side only broadcasts the other, and a contiguous batched ``A`` times a 2-D ``B`` is one
  product of all the rows. A bias after it (ONNX's MatMul -> Add, :class:`Epilogue` ``bias``)
  is the bias epilogue of the transposed product, as for ``dense``, where ``B`` is 2-D.
- a residual is copied into the output first and added as ``beta * C`` with ``beta = 1``
  (after the bias: cuBLASLt computes ``epilog(A @ B + beta * C + bias)``);
  relu is cuBLASLt's epilogue. A clip, dtypes other than float32 and float16, a dynamic node
  and batch shapes that broadcast both ways go to the next provider.

float32 computes in float32 (no TF32), float16 with float32 accumulation. Each thread keeps
its own ``Matmul`` per prepared node (a run context belongs to one thread) and moves it onto
new operand addresses with ``reset_operands_unchecked`` (pointers only), so zero-copy inputs
cost no new plan.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from functools import cache
from math import prod
from typing import Any

from ...ops import TensorType
from ..base import Epilogue, Prepared

__all__ = ["GEMMS", "nvmath_matmul", "prepare_gemm"]

log = logging.getLogger("graphrt")

GEMMS = frozenset({"dense", "matmul", "batch_matmul"})
_DTYPES = frozenset({"float32", "float16"})

_PLANNABLE: dict[tuple[Any, ...], bool] = {}  # whether cuBLASLt plans a case, per process
_LOCK = threading.Lock()

Operands = tuple[Any, Any, Any, Any]
"""``(A, B, C, bias or None)``: cupy views of one call's arrays."""
Views = Callable[[Sequence[Any], Any, Any], Operands]
"""``views(inputs, out, bias vector of the epilogue or None) -> Operands``."""


@cache
def nvmath_matmul() -> Any:
    """``nvmath.linalg.advanced``, or None when nvmath-python is not installed (or cuBLASLt
    does not load); said once in the log."""
    try:
        from nvmath.linalg import advanced
    except Exception as err:  # ImportError, or a missing CUDA library
        log.info("graphrt: nvmath-python is not available (%s: %s); matrix products on cuda "
                 "run CuPy's cuBLAS and cannot be captured into CUDA graphs",
                 type(err).__name__, err)
        return None
    return advanced


def prepare_gemm(name: str, attrs: Any, inputs: Sequence[TensorType], out: TensorType,
                 epilogue: Epilogue, *, dynamic: bool, xp: Any) -> Prepared | None:
    """A cuBLASLt product for ``name`` (:data:`GEMMS`) at these types, or None.

    ``call(*inputs[, bias][, residual], out)`` runs on CuPy's (``xp``) current stream and
    device.
    """
    advanced = nvmath_matmul()
    if (advanced is None or dynamic or epilogue.clip is not None or 0 in out.shape
            or any(t.dtype not in _DTYPES or t.dtype != out.dtype for t in inputs)
            or (name == "dense" and len(inputs) == 3 and epilogue.bias)):
        return None
    views = _dense_views if name == "dense" else _matmul_views(
        inputs[0], inputs[1], getattr(attrs, "transpose_a", False),
        getattr(attrs, "transpose_b", False), out, epilogue.bias)
    if views is None:
        return None
    epilog = advanced.MatmulEpilog
    has_bias = (name == "dense" and len(inputs) == 3) or epilogue.bias
    kind = ((epilog.RELU_BIAS if epilogue.relu else epilog.BIAS) if has_bias
            else epilog.RELU if epilogue.relu else None)
    gemm = _Gemm(advanced, xp, views, len(inputs), epilogue.bias, epilogue.residual, kind)
    key = (name, tuple(inputs), out, getattr(attrs, "transpose_a", False),
           getattr(attrs, "transpose_b", False), epilogue, int(xp.cuda.Device().id))
    with _LOCK:
        if key not in _PLANNABLE:
            _PLANNABLE[key] = gemm.plannable(inputs, out)
    return Prepared(gemm, capturable=True, provider="cublaslt") if _PLANNABLE[key] else None


def _dense_views(arrays: Sequence[Any], out: Any, bias: Any) -> Operands:
    """``out.T = w @ x.T (+ bias along the rows)``: every operand a view."""
    x, w = arrays[0], arrays[1]
    rows, depth = out.size // w.shape[0], w.shape[1]
    if len(arrays) == 3:
        bias = arrays[2]
    return w, x.reshape(rows, depth).T, out.reshape(rows, w.shape[0]).T, bias


def _matmul_views(a: TensorType, b: TensorType, transpose_a: bool, transpose_b: bool,
                  out: TensorType, bias: bool) -> Views | None:
    """How a call's ``a``, ``b`` and ``out`` become cuBLASLt's operands, or None where the
    batch shapes broadcast both ways (cuBLASLt broadcasts one side only), or where a bias
    is asked for and ``B`` is batched or ``A`` transposed (the bias needs all the rows as one
    transposed product)."""
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    if (batch_a and batch_b and batch_a != batch_b) or (
            bias and (batch_b or (batch_a and transpose_a))):
        return None
    fold = bool(batch_a) and not batch_b and not transpose_a  # all of A's rows at once
    rows, n = prod(out.shape[:-1]), out.shape[-1]

    def views(arrays: Sequence[Any], target: Any, vector: Any) -> Operands:
        left, right = arrays[0], arrays[1]
        if transpose_a:
            left = left.swapaxes(-1, -2)
        if transpose_b:
            right = right.swapaxes(-1, -2)
        if vector is not None:  # out.T = B.T @ A.T + bias along the rows
            rows_of_a = left.reshape(rows, left.shape[-1])
            return right.T, rows_of_a.T, target.reshape(rows, n).T, vector
        if fold and left.flags.c_contiguous:
            return left.reshape(rows, left.shape[-1]), right, target.reshape(rows, n), None
        return left, right, target, None

    return views


class _Gemm:
    """The call of one prepared product: per thread, one ``Matmul`` planned on the first
    call and re-pointed when the operands move."""

    def __init__(self, advanced: Any, xp: Any, views: Views, n_inputs: int, bias: bool,
                 residual: bool, epilog: Any) -> None:
        self._advanced, self._xp, self._views = advanced, xp, views
        self._n_inputs, self._bias, self._residual = n_inputs, bias, residual
        self._epilog = epilog
        self._local = threading.local()

    def __call__(self, *arrays: Any) -> None:
        n = self._n_inputs
        out = arrays[-1]
        a, b, c, bias = self._views(arrays[:n], out, arrays[n] if self._bias else None)
        if self._residual:  # D = A @ B + 1 * C, C holding the residual
            self._xp.copyto(out, arrays[n + self._bias])
        stream = self._xp.cuda.get_current_stream()
        key = (a.data.ptr, b.data.ptr, c.data.ptr, None if bias is None else bias.data.ptr)
        local = self._local
        state: dict[int, tuple[Any, tuple[Any, ...]]] = local.__dict__.setdefault("plans", {})
        device = int(c.device.id)
        held = state.get(device)
        if held is None:
            matmul = self._plan(a, b, c, bias, stream, device)
        else:
            matmul = held[0]
            if held[1] != key:
                matmul.reset_operands_unchecked(
                    a=a, b=b, c=c, epilog_inputs=None if bias is None else {"bias": bias})
        state[device] = (matmul, key)
        matmul.execute(stream=stream)

    def plannable(self, inputs: Sequence[TensorType], out: TensorType) -> bool:
        """Whether cuBLASLt plans this case, tried on scratch operands of its types (so
        ``create()`` falls back to the next provider instead of a run failing); said in the
        log when it does not."""
        xp = self._xp
        arrays = [xp.zeros(t.shape, t.dtype) for t in (*inputs, out)]
        vector = xp.zeros(out.shape[-1:], out.dtype) if self._bias else None
        try:
            a, b, c, bias = self._views(arrays[:-1], arrays[-1], vector)
            self._plan(a, b, c, bias, xp.cuda.get_current_stream(), int(c.device.id)).free()
        except Exception as err:  # no algorithm, an unsupported layout: the next provider
            log.info("graphrt: cuBLASLt cannot run %s -> %s %s (%s: %s)",
                     [list(t.shape) for t in inputs], list(out.shape), out.dtype,
                     type(err).__name__, str(err)[:200])
            return False
        return True

    def _plan(self, a: Any, b: Any, c: Any, bias: Any, stream: Any, device: int) -> Any:
        matmul = self._advanced.Matmul(
            a, b, c=c, beta=1.0 if self._residual else 0.0, stream=stream,
            options={"inplace": True, "device_id": device})
        matmul.plan(epilog=self._epilog,
                    epilog_inputs=None if bias is None else {"bias": bias}, stream=stream)
        return matmul
