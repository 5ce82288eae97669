"""Matrix products by a weight on the compiled micro-kernel, the weight packed once at load.

``dense`` (``x @ w.T + bias``) and ``matmul`` / ``batch_matmul`` by a 2-D right operand run
here when that operand is a param (frozen: :mod:`graphrt.devices.frozen`) and everything is
float32: the weight is packed 16 columns at a time with the bias as one more step
(:func:`pack_columns`, once per loaded param), and
:func:`graphrt.kernels.cpu.direct_conv.dense_jobs` runs the tiles on the helper threads,
reading the data in place, 6 rows at a time (12 on AVX-512 where the weight is deeper than
256), starting from the bias, adding a residual and
applying relu or a clip as it stores. OpenBLAS packs both operands again on every call (for
64 rows by 1024 that was a quarter of its time) and its workers spin for about 0.1 s after
each call, taking the cores the helper threads need. Packing the data too cost 42 us of the
2.1 ms of a 64 x 1024 by 1024 x 1024 product, and 0.7 ms of 1024 x 1024 by 1024 x 256
(then 10.2 ms, OpenBLAS 8.4 ms; read in place: 7.2 ms, OpenBLAS 7.3 ms). Fewer than
:data:`MIN_ROWS` rows run as matrix-vector products on the same packed weight in a graph
with compiled convolutions, else on BLAS.

A weight that is not a param (fed at run time) takes the reference on BLAS, with the
epilogue applied after it, and then so does every product of the graph (``packing()``):
the helper threads spinning after a packed product and OpenBLAS's workers spinning after
theirs took each other's cores, and a BERT-style encoder ran 1.5x slower than on BLAS alone.
Attention's products, of two activations, run on the same micro-kernel
(:mod:`graphrt.kernels.cpu.batch_product`), so that an encoder runs without BLAS.

A call is bound to its arrays the first time it sees them (the packed weight looked up, the
views and the job's arguments made) and runs bound while a graph hands it the same arrays,
as it does on every run; in a graph without compiled kernels the product on BLAS is bound
as the reference's own numpy calls. The MLP at batch 1 ran 0.93x as long, a 16-wide one
0.59x, the BERT-style encoder 0.96x.

Example:
    >>> import numpy as np
    >>> from graphrt.devices.frozen import freeze
    >>> from graphrt.kernels.base import NO_EPILOGUE
    >>> from graphrt.ops import TensorType
    >>> x, w = np.ones((32, 8), np.float32), np.full((3, 8), 0.5, np.float32)
    >>> bias = np.arange(3, dtype=np.float32)
    >>> freeze(w); freeze(bias)
    >>> types = [TensorType(x.shape, "float32"), TensorType(w.shape, "float32"),
    ...          TensorType(bias.shape, "float32")]
    >>> prepared = dense_call("dense", None, types, TensorType((32, 3), "float32"),
    ...                       NO_EPILOGUE, lambda x, w, b, out: None)
    >>> out = np.empty((32, 3), np.float32)
    >>> prepared.call(x, w, bias, out)
    >>> out[0].tolist()
    [4.0, 5.0, 6.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from math import prod
from typing import Any

import numpy as np

from ...devices.base import aligned_copy
from ...devices.frozen import derived, is_frozen
from ...ops import TensorType
from ..base import Epilogue, Prepared
from .blas_threads import lanes_running
from .crew import LastArrays, run_jobs, threads_now
from .jit import direct_conv

__all__ = ["MIN_ROWS", "dense_call", "epilogue_after", "pack_columns"]

MIN_ROWS = 16
"""Rows (the product of the data's leading dimensions) below which a product is mostly a read
of the weight. In a graph whose convolutions hold small GEMMs to one BLAS thread (see
:mod:`graphrt.kernels.cpu.provider`) it runs as matrix-vector products on the helper threads,
a row at a time over 4 packed panels of the weight at once
(:func:`graphrt.kernels.cpu.product_kernels.row_jobs`): MobileNetV2's classifier, 1280 by
1000 at batch 1, took 0.52 ms on one BLAS thread and 0.33 ms so (ONNX Runtime: 0.31 ms).
Elsewhere OpenBLAS's threaded matrix-vector kernel is the faster: the 4 x 1024 MLP at batch
1 ran 1.10-1.38x as long on the helpers as on it (in one process, interleaved; 1.7-2.2x
when each job read one panel)."""
_MIN_VECTOR_WORK = 1 << 18
"""Multiply-adds below which a matrix-vector product runs on the calling thread alone."""

_ROWS, _SPAN = 6, 16  # the micro-kernel's tile (direct_conv.ROWS, direct_conv.SPAN)
_PANELS = 4  # panels a matrix-vector job runs at once (product_kernels.PANELS)
_CHUNK_BYTES = 1 << 19
"""Data bytes one job runs over one 16-column panel (which stays in cache), at most."""
_MIN_WORK = 1 << 21
"""Multiply-adds below which a product runs on the calling thread alone."""


def pack_columns(weight: np.ndarray[Any, Any], transposed: bool,
                 bias: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any]:
    """The right operand (``[N, K]`` when ``transposed``, else ``[K, N]``) as
    ``[ceil(N/16), K + 1, 16]`` float32, flattened: 16 columns at a time, the bias (or zeros)
    as step ``K``, zeros past ``N``.

    Example:
        >>> pack_columns(np.eye(2, dtype=np.float32), False, None).reshape(1, 3, 16)[0, :, :3]
        array([[1., 0., 0.],
               [0., 1., 0.],
               [0., 0., 0.]], dtype=float32)
    """
    by_column = weight if transposed else weight.T  # [N, K]
    n, k = by_column.shape
    panels = -(-n // _SPAN)
    packed = np.zeros((panels * _SPAN, k + 1), np.float32)
    packed[:n, :k] = by_column
    if bias is not None:
        packed[:n, k] = bias
    return aligned_copy(packed.reshape(panels, _SPAN, k + 1).transpose(0, 2, 1))


def epilogue_after(out: np.ndarray[Any, Any], residual: np.ndarray[Any, Any] | None,
                   epilogue: Epilogue) -> None:
    """The epilogue on a stored result (the reference's path)."""
    _in_turn(tuple(_epilogue_steps(out, residual, epilogue)))


def _epilogue_steps(out: np.ndarray[Any, Any], residual: np.ndarray[Any, Any] | None,
                   epilogue: Epilogue) -> list[Callable[[], Any]]:
    """The numpy calls of the epilogue on a stored result, in order, bound to ``out``."""
    steps: list[Callable[[], Any]] = []
    if residual is not None:
        steps.append(partial(np.add, out, residual, out=out))
    if epilogue.relu:
        steps.append(partial(np.maximum, out, 0, out=out))  # NaN stays NaN
    if epilogue.clip is not None:
        steps.append(partial(np.clip, out, *epilogue.clip, out=out))
    return steps


def dense_call(op: str, attrs: Any, inputs: Sequence[TensorType], out: TensorType,
               epilogue: Epilogue, reference: Callable[..., None],
               packing: Callable[[], bool] = lambda: True,
               few_rows: Callable[[], bool] = lambda: True,
               plain_blas: Callable[[], bool] = lambda: False) -> Prepared | None:
    """The kernel of ``op`` (``dense``, ``matmul``, ``batch_matmul``) at these static types,
    or None where the packed product cannot apply (another dtype, a transposed left
    operand, a right operand of more than 2 dimensions, no numba); it
    decides whether the weight is a param and ``packing()`` allows it (see the
    module docstring), and for fewer than :data:`MIN_ROWS` rows whether ``few_rows()``
    does. Where ``plain_blas()`` (the graph's BLAS policy adds nothing to ``reference``),
    a product left to BLAS runs as the reference's own numpy calls."""
    kernels = direct_conv()
    if kernels is None or any(t.dtype != "float32" for t in (*inputs, out)):
        return None
    if op == "dense":
        if epilogue.bias and len(inputs) == 3:  # a bias of its own, and one more after
            return None
        transposed, has_bias = True, len(inputs) == 3 or epilogue.bias
    elif getattr(attrs, "transpose_a", False) or len(inputs) != 2:
        return None
    else:
        transposed, has_bias = bool(getattr(attrs, "transpose_b", False)), epilogue.bias
    x, w = inputs[0], inputs[1]
    if len(w.shape) != 2 or len(x.shape) < 2 or 0 in out.shape:
        return None
    m, k = prod(x.shape[:-1]), x.shape[-1]
    n = w.shape[0] if transposed else w.shape[1]
    if out.shape != (*x.shape[:-1], n):
        return None
    n_in, residual_at = len(inputs) + epilogue.bias, epilogue.residual
    own = len(inputs)  # the op's own inputs: the reference adds no bias of the epilogue's
    few = m < MIN_ROWS  # matrix-vector products, a row at a time
    if few:
        parallel, grain = m * n * k >= _MIN_VECTOR_WORK, max(1, -(-n // (_SPAN * _PANELS)) // 16)
    else:
        parallel = m * n * k >= _MIN_WORK
    flags = ((kernels.RELU if epilogue.relu else 0) | (kernels.CLIP if epilogue.clip else 0)
             | (kernels.RESIDUAL if residual_at else 0))
    bounds = np.asarray(epilogue.clip or (0.0, 0.0), np.float32)

    def bind(arrays: tuple[Any, ...], rows_ok: bool, allowed: bool, plain: bool, threads: int
             ) -> Callable[[], None]:
        """The call on these arrays, its arguments made once (see ``call``)."""
        weight, bias = arrays[1], arrays[2] if has_bias else None
        residual = arrays[n_in] if residual_at else None
        result = arrays[-1]
        if not (allowed and (not few or rows_ok) and is_frozen(weight)
                and (bias is None or is_frozen(bias))):
            steps = (_numpy_product(op, transposed, arrays[0], weight, bias, result) if plain
                     else None)
            if steps is None:
                steps = [partial(reference, *arrays[:own], result)]
                if epilogue.bias:  # then the bias, as the add step after it would
                    steps.append(partial(np.add, result, bias, out=result))
            steps += _epilogue_steps(result, residual, epilogue)
            return steps[0] if len(steps) == 1 else partial(_in_turn, tuple(steps))
        columns = derived(weight, ("dense", transposed, id(bias)), lambda: pack_columns(
            weight, transposed, bias))
        flat = result.reshape(-1)
        extra = (np.ascontiguousarray(residual).reshape(-1) if residual is not None
                 else flat[:0])
        data = np.ascontiguousarray(arrays[0]).reshape(-1)
        if few:
            return partial(_jobs_call, kernels.row_jobs, parallel, (
                data, m, k, columns, n, flat, extra, flags, bounds), grain)
        chunk = _chunk(-(-m // _ROWS), k, threads if parallel and m >= n else 1)
        jobs = -(-n // (_SPAN * kernels.PAIR)) * -(-m // (_ROWS * chunk))
        return partial(_jobs_call, kernels.dense_jobs, parallel, (
            data, k, columns, m, n, flat, extra, flags, bounds, chunk), max(1, min(8, jobs // 32)))

    last = LastArrays()  # the frozen params looked up and the views made once

    def call(*arrays: Any) -> None:
        # the graph's, fixed once create() returns; and the threads a run context allows
        policy = (few_rows(), packing(), plain_blas(), threads_now())
        run = last.get(arrays, policy)
        if run is None:
            run = bind(arrays, *policy)
            last.keep(arrays, policy, run)
        run()

    return Prepared(call, capturable=False, provider="cpu")


def _chunk(blocks: int, k: int, threads: int) -> int:
    """Blocks of 6 rows one job of a product covers: at most :data:`_CHUNK_BYTES` of data,
    in a number of chunks that is a multiple of ``threads``, as even as may be. The caller's
    claims (from the front) and the helpers' (from the back) then meet at a chunk's edge,
    so each thread computes the same rows in every product and reads back the rows it wrote
    in the product before, as ONNX Runtime's threads do with their fixed share of the rows.
    (512 rows of 512 on 2 threads: 4 chunks of 22 blocks, where 42, 42 and 2 had the
    threads share the middle chunk by columns, so that half of its rows, and of the rows
    the next product read there, came from the other core.) Only for products of at least
    as many rows as columns, as ONNX Runtime splits rows only there: 64 rows by a 1024 x
    1024 weight split in two chunks read every panel twice and took 1.14x as long.

    Example:
        >>> _chunk(86, 512, 2), _chunk(86, 512, 1), _chunk(11, 1024, 2)
        (22, 29, 6)
    """
    most = max(1, _CHUNK_BYTES // ((k + 1) * _ROWS * 4))
    chunks = -(-blocks // most)
    chunks = -(-chunks // threads) * threads
    return -(-blocks // chunks)


def _jobs_call(jobs: Any, parallel: bool, args: tuple[Any, ...], grain: int) -> None:
    """A job function's call with fresh counters, on the helpers where it is worth it and no
    lane holds the cores (:func:`~graphrt.kernels.cpu.blas_threads.lanes_running`)."""
    run_jobs(jobs, parallel and not lanes_running(), (*args, np.zeros(2, np.int64), grain))


def _in_turn(steps: tuple[Callable[[], Any], ...]) -> None:
    for step in steps:
        step()


def _numpy_product(op: str, transposed: bool, x: Any, weight: Any, bias: Any, result: Any
                   ) -> list[Callable[[], Any]] | None:
    """The reference's own numpy calls (the same, in the same order) on these arrays, for a
    graph whose BLAS policy adds nothing to them (no compiled kernel takes the helper
    threads) and where the views they take are views (C-contiguous data and result): the
    op's reference, through its wrappers and checks, took 10 us more per call. None for
    other ops and layouts."""
    if op not in ("dense", "matmul") or not (x.flags.c_contiguous
                                             and result.flags.c_contiguous):
        return None
    right, out = (weight.T if transposed else weight), result
    if op == "dense":  # its reference's 2-D views
        rows = result.size // weight.shape[0]
        x, out = x.reshape(rows, x.shape[-1]), result.reshape(rows, weight.shape[0])
    product: list[Callable[[], Any]] = [partial(np.matmul, x, right, out=out)]
    return product if bias is None else [*product, partial(np.add, out, bias, out=out)]
