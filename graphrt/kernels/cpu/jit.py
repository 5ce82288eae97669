"""numba on the host, where it is installed: the one check of whether compiled host kernels
may be used, the compiled row kernels of ``layer_norm`` and ``softmax``
(:mod:`graphrt.kernels.cpu.row_kernels`), the direct convolution
(:mod:`graphrt.kernels.cpu.direct_conv`), the quantized convolution's passes
(:mod:`graphrt.kernels.cpu.quantized_kernels`) and its integer kernel on AVX2
(:mod:`graphrt.kernels.cpu.integer_conv`), and the max pool
(:mod:`graphrt.kernels.cpu.pool_kernels`).

numba is a core dependency: the compiled kernels are graphrt's cpu speed. ``GRAPHRT_JIT=0``
switches them off (each op keeps its numpy path, said once in the log at info level). Where
they cannot run although asked for (numba missing or unusable on this CPU, a compile that
fails), one warning per process says so and what it costs (:func:`compiled_path_lost`). The
compiled modules are compiled (or loaded from numba's disk cache) when a kernel or plan first
asks for them, which is at ``create()``.

Example:
    >>> kernels = row_kernels()  # None without numba
    >>> kernels is None or callable(kernels.softmax_rows)
    True
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Sequence
from math import prod
from types import ModuleType
from typing import Any

import numpy as np

from ...ops import TensorType, normalize_axis
from .blas_threads import lanes_running
from .crew import run_jobs

__all__ = ["JOB_ELEMENTS", "PARALLEL_ELEMENTS", "compiled_path_lost", "direct_conv",
           "host_rows", "integer_conv", "load_numba", "pool_kernels", "quantized_kernels",
           "row_kernels", "rows_call"]

logger = logging.getLogger(__name__)

_LOGGED: set[str] = set()  # the reasons a compiled module was not used, each logged once
_WARNED: list[str] = []  # the one warning of this process, once given

COST = ("convolutions, max pooling, softmax, layer norm and fused elementwise runs take their "
        "numpy paths (elementwise chains run up to about 1.6x slower: benchmarks/peers.py's "
        "1000-node chain)")


def compiled_path_lost(reason: str) -> None:
    """Warn, once per process, that the compiled cpu kernels cannot run, why and what it
    costs (not for ``GRAPHRT_JIT=0``, which is asked for)."""
    if not _WARNED:
        _WARNED.append(reason)
        logger.warning("graphrt: the compiled cpu kernels cannot run (%s): %s", reason, COST)


def load_numba(why_not: Callable[[str], None]) -> Any:
    """The numba module, or None after ``why_not(reason)`` (``GRAPHRT_JIT=0``, or numba
    missing or unusable: then with the process's one warning too)."""
    if os.environ.get("GRAPHRT_JIT", "1") == "0":
        why_not("GRAPHRT_JIT=0")
        return None
    try:
        import numba  # slow to import: only when a kernel asks for it
    except ImportError as err:  # an install without graphrt's dependencies, or a CPU it lacks
        reason = f"numba cannot be imported ({err}); pip install numba"
        why_not(reason)
        compiled_path_lost(reason)
        return None
    return numba


def _compiled(name: str, what: str) -> ModuleType | None:
    """The compiled module ``graphrt.ops.<name>``; None where numba is missing, switched
    off or fails to compile it, after logging once that ``what`` (the ops it serves, and the
    path they take instead) is used, and why."""
    def why_not(reason: str) -> None:
        line = f"graphrt: {what}: {reason}"
        if line not in _LOGGED:
            _LOGGED.add(line)
            logger.info(line)

    numba = load_numba(why_not)
    if numba is None:
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except (ImportError, OSError, numba.core.errors.NumbaError) as err:
        reason = f"numba could not compile them ({type(err).__name__}: {err})"
        why_not(reason)
        compiled_path_lost(reason)
        return None


def row_kernels() -> ModuleType | None:
    """:mod:`graphrt.kernels.cpu.row_kernels`, compiled; None where numba is missing, switched
    off or fails to compile them (the reason logged once)."""
    return _compiled("row_kernels", "layer_norm and softmax on cpu take the numpy path")


def direct_conv() -> ModuleType | None:
    """:mod:`graphrt.kernels.cpu.direct_conv`, compiled; None where numba is missing, switched
    off or fails to compile it (the reason logged once)."""
    return _compiled("direct_conv", "float32 convolutions on cpu take the im2col + GEMM path")


def quantized_kernels() -> ModuleType | None:
    """:mod:`graphrt.kernels.cpu.quantized_kernels`, compiled; None where numba is missing,
    switched off or fails to compile it (the reason logged once)."""
    return _compiled("quantized_kernels", "quantized convolutions on cpu take the exact "
                     "float GEMM path")


def integer_conv() -> ModuleType | None:
    """:mod:`graphrt.kernels.cpu.integer_conv`, compiled; None where numba is missing,
    switched off or fails to compile it, or where numba does not compile for a CPU with
    AVX2 (its micro-kernel is AVX2's integer multiply-adds), the reason logged once."""
    what = "quantized convolutions on cpu take the float kernels"
    if _AVX2.get("ok") is None:
        numba = load_numba(lambda reason: None)
        if numba is None:  # switched off or missing: said once, as for every module
            return _compiled("integer_conv", what)
        _AVX2["ok"] = _compiles_avx2(numba)
    if not _AVX2["ok"]:
        line = f"graphrt: {what}: numba does not compile for AVX2 here"
        if line not in _LOGGED:
            _LOGGED.add(line)
            logger.info(line)
        return None
    return _compiled("integer_conv", what)


_AVX2: dict[str, bool] = {}


def _compiles_avx2(numba: Any) -> bool:
    """Whether numba compiles for a CPU with AVX2: this one's (unless ``NUMBA_CPU_NAME``
    names another) or the one ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` name."""
    import llvmlite.binding as llvm

    features = numba.config.CPU_FEATURES
    if numba.config.CPU_NAME not in (None, "host"):
        return features is not None and "+avx2" in features.split(",")
    try:
        return bool(llvm.get_host_cpu_features().get("avx2", False))
    except RuntimeError:  # features this LLVM cannot read
        return False


def pool_kernels() -> ModuleType | None:
    """:mod:`graphrt.kernels.cpu.pool_kernels`, compiled; None where numba is missing, switched
    off or fails to compile it (the reason logged once)."""
    return _compiled("pool_kernels", "float32 max pooling on cpu takes the numpy path")


_ROW_DTYPES = (np.dtype("float32"), np.dtype("float64"))


def host_rows(name: str, axis: int, fallback: Callable[..., None],
              extra: tuple[Any, ...] = ()) -> Callable[..., None]:
    """A kernel ``(x, *vectors, out)`` that runs the compiled row kernel ``name`` of
    :mod:`graphrt.kernels.cpu.row_kernels` as ``name(rows, *vectors, out_rows, *extra)`` where
    it fits (see :func:`_fits`, checked on every call), else ``fallback`` with the same
    arguments; ``fallback`` itself without numba.

    Example:
        >>> kernel = host_rows("softmax_rows", -1, lambda x, out: None)
        >>> x = np.zeros((2, 4), dtype=np.float32)
        >>> out = np.empty_like(x)
        >>> kernel(x, out)
        >>> bool(np.allclose(out, 0.25)) or row_kernels() is None
        True
    """
    rows = row_kernels()
    if rows is None:
        return fallback
    compiled = getattr(rows, name)

    def kernel(x: Any, *rest: Any) -> None:
        *vectors, out = rest
        if _fits(x, out, normalize_axis(axis, x.ndim), vectors):
            _run_rows(compiled, x, out, vectors, extra)
        else:
            fallback(x, *rest)

    return kernel


def rows_call(name: str, axis: int, x: TensorType, vectors: Sequence[TensorType],
              fallback: Callable[..., None], extra: tuple[Any, ...] = (), *,
              dynamic: bool, parallel: Callable[[], bool] = lambda: False
              ) -> Callable[..., None] | None:
    """A kernel ``(x, *vectors, out)`` running the compiled row kernel ``name`` as
    :func:`host_rows` does, decided once from the types: None where it cannot take them
    (numba missing, not float32/float64, ``axis`` not the last, a vector not 1-D over it, an
    empty ``x``). A static node's kernel then runs it with no check, on the helper threads
    (its job function, ``name`` ending ``_jobs``) where ``x`` has :data:`PARALLEL_ELEMENTS`
    elements or more and ``parallel()`` says so on that call; a dynamic node's
    (``dynamic``) checks each call's shapes, ``fallback`` taking the rest."""
    rows = row_kernels()
    if rows is None or np.dtype(x.dtype) not in _ROW_DTYPES or 0 in x.shape or \
            normalize_axis(axis, len(x.shape)) != len(x.shape) - 1 or \
            any(v.dtype != x.dtype or v.shape != x.shape[-1:] for v in vectors):
        return None
    if dynamic:
        return host_rows(name, axis, fallback, extra)
    compiled = getattr(rows, name)
    jobs = getattr(rows, name.removesuffix("_rows") + "_jobs")
    wide, block = prod(x.shape) >= PARALLEL_ELEMENTS, max(1, JOB_ELEMENTS // x.shape[-1])

    def on_helpers(*arrays: Any) -> None:
        run_jobs(jobs, True, (*arrays, block, np.zeros(2, np.int64), 1))

    def kernel(x: Any, *rest: Any) -> None:
        _run_rows(on_helpers if wide and parallel() and not lanes_running() else compiled, x,
                  rest[-1], rest[:-1], extra)

    return kernel


PARALLEL_ELEMENTS = 1 << 15
"""Elements from which a row or elementwise kernel runs on the helper threads (where its
graph lets it: no product of the graph on BLAS, whose spinning workers would take their
cores)."""
JOB_ELEMENTS = 1 << 13
"""Elements of one job of such a kernel."""


def _fits(x: Any, out: Any, axis: int, vectors: Sequence[Any]) -> bool:
    """Whether a row kernel can take ``x`` into ``out`` along ``axis``: host arrays (cpu's or
    sim's) of one float32 or float64 dtype, not empty, ``axis`` the last one, and each of
    ``vectors`` 1-D over it."""
    return (isinstance(x, np.ndarray) and isinstance(out, np.ndarray)
            and x.dtype in _ROW_DTYPES and out.dtype == x.dtype and out.shape == x.shape
            and x.size > 0 and axis == x.ndim - 1
            and all(isinstance(v, np.ndarray) and v.dtype == x.dtype
                    and v.shape == x.shape[-1:] for v in vectors))


def _run_rows(kernel: Callable[..., None], x: Any, out: Any, vectors: Sequence[Any],
              extra: tuple[Any, ...]) -> None:
    """``kernel(rows, *vectors, out_rows, *extra)`` over the rows of ``x``, through
    contiguous copies where ``x``, a vector or ``out`` is strided, so that the result is the
    same bits whatever the layout."""
    width = x.shape[-1]
    src = np.ascontiguousarray(x).reshape(-1, width)
    dest = np.asarray(out)
    direct = dest.flags.c_contiguous
    target = dest.reshape(-1, width) if direct else np.empty_like(src)
    kernel(src, *(np.ascontiguousarray(v) for v in vectors), target, *extra)
    if not direct:
        dest[...] = target.reshape(dest.shape)
