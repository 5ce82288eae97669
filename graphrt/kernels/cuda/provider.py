"""The cuda kernels behind the provider interface (:mod:`graphrt.kernels.base`):
convolutions with their bias, residual and relu epilogues through cuDNN's frontend
(:mod:`graphrt.kernels.cuda.cudnn_conv`, where it is installed), matrix products with theirs
through nvmath-python's cuBLASLt (:mod:`graphrt.kernels.cuda.cublaslt_gemm`, likewise),
softmax and layer norm over the last axis as one kernel each
(:mod:`graphrt.kernels.cuda.row_kernels`), runs of elementwise steps
fused into one ``cupy.ElementwiseKernel`` each (:mod:`graphrt.kernels.cuda.elementwise`;
per-tensor quantize and dequantize excepted, not yet verified bitwise on a GPU);
every other op runs its reference on cupy.

cupy is imported by the device backend, never here: :meth:`CudaProvider.fuse` compiles
through the namespace it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from ...ops import OpDef, TensorType, elementwise_runs, normalize_axis
from ...ops.convolution import conv_geometry
from ...ops.nn import conv2d_blocked, conv2d_channels_last, conv2d_geometry, pool2d_windows
from ...ops.pooling import axis_windows
from ...ops.quantize import QUANT_EXPRESSIONS
from ..base import ElementwiseStep, Epilogue, FusedRun, Prepared
from .cublaslt_gemm import GEMMS, nvmath_matmul, prepare_gemm
from .cudnn_conv import cudnn_module, prepare_conv
from .elementwise import compile_run, kernel_source
from .pool_kernels import max_pool2d_kernel
from .row_kernels import rows_kernel

__all__ = ["CudaProvider"]


_CONVS = frozenset({"conv", "conv2d"})
_ROWS = frozenset({"softmax", "layer_norm", "normalize", "reduce", "global_avg_pool2d"})
_POOLS = frozenset({"max_pool2d", "max_pool"})


class CudaProvider:
    """cuDNN convolutions, cuBLASLt products and elementwise fusion on cuda."""

    name = "cuda"

    UNSUPPORTED = frozenset({"cast_bfloat16", "cast_low_precision", "random_uniform",
                             "random_normal", "random_uniform_like", "random_normal_like",
                             "bernoulli", "multinomial"})
    """Ops whose reference cupy cannot run (it has no bfloat16, float8, int4, ...) or that draw
    with numpy's generator on the host (the random ops, whose seeded values are numpy's on
    every device): placement keeps them on a host device."""

    CUBLAS = frozenset({"dense", "matmul", "batch_matmul", "conv", "conv2d", "conv_transpose",
                        "conv2d_transpose", "einsum", "attention", "col2im", "rnn", "gru",
                        "lstm", "det", "conv_integer", "qlinear_conv", "matmul_integer",
                        "qlinear_matmul", "deform_conv", "linear_attention", "roi_align",
                        "dft", "stft", "unique", "non_max_suppression", "with_shape_vars",
                        "loop", "take", "gather"})
    """Ops whose reference multiplies matrices (or factors them, ``det``) through CuPy, which
    refuses cuBLAS and cuSOLVER while a stream captures, plans cuFFT (``dft``, ``stft``) or
    reads values back to the host (the recurrent ops' sequence lengths, ``roi_align``'s grids,
    ``unique`` and ``non_max_suppression``, which run on the host; ``take`` and ``gather``
    check their indices' range, as ONNX asks, from the host; ``with_shape_vars`` wraps
    any op, and ``loop`` runs a nested program and reads its condition on the host): they run
    between the recorded segments of a CUDA graph."""

    def supports(self, op: OpDef) -> bool:
        return ((op.name in _CONVS and cudnn_module() is not None)
                or (op.name in GEMMS and nvmath_matmul() is not None) or op.name in _ROWS
                or op.name in _POOLS)

    def takes_epilogue(self, op: OpDef) -> bool:
        return op.name not in _ROWS and op.name not in _POOLS and self.supports(op)

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue, *, dynamic: bool,
                xp: Any) -> Prepared | None:
        if xp is None or not hasattr(xp, "cuda"):
            return None
        if op.name in GEMMS:
            return prepare_gemm(op.name, attrs, inputs, outputs[0], epilogue,
                                dynamic=dynamic, xp=xp)
        if op.name in _ROWS:
            if epilogue:
                return None
            row = _row_op(op.name, attrs, inputs[0])
            call = None if row is None else rows_kernel(
                row[0], row[1], [row[2], *inputs[1:]], outputs[0],
                op.positional(xp, attrs, len(inputs)), dynamic=dynamic, xp=xp)
            return None if call is None else Prepared(call, provider=self.name)
        if op.name in _POOLS:
            if epilogue or getattr(attrs, "indices", False) or len(inputs[0].shape) != 4:
                return None
            windows = (pool2d_windows(attrs) if op.name == "max_pool2d"
                       else axis_windows(attrs, 2))
            pool = max_pool2d_kernel(inputs[0], outputs[0], windows,
                                     op.positional(xp, attrs, 1), dynamic=dynamic, xp=xp,
                                     channels_last=getattr(attrs, "layout", "NCHW") == "NHWC")
            return None if pool is None else Prepared(pool, provider=self.name)
        if op.name not in _CONVS or (op.name == "conv2d" and any(conv2d_blocked(attrs))):
            return None  # blocked layouts (a cpu conversion's) take the reference
        if op.name == "conv2d":
            return prepare_conv(inputs, outputs[0], *conv2d_geometry(attrs), epilogue,
                                dynamic=dynamic, xp=xp,
                                channels_last=conv2d_channels_last(attrs))
        return prepare_conv(inputs, outputs[0], *conv_geometry(attrs, len(inputs[0].shape) - 2),
                            epilogue, dynamic=dynamic, xp=xp)

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool, xp: Any) -> list[FusedRun]:
        # per-tensor quantize and dequantize are not verified bitwise against cupy's
        # references on a GPU yet (NaN through cupy's clip and cast): they stay unfused
        steps = [(None if expression in QUANT_EXPRESSIONS else expression, ins, outs)
                 for expression, ins, outs in steps]
        runs = []
        for run in elementwise_runs(steps, exported):
            try:
                source = kernel_source(run, steps, types)
            except ValueError:  # a dtype CUDA code cannot name: leave these steps unfused
                continue
            runs.append((run, compile_run(xp, source)))
        return runs


def _row_op(name: str, attrs: Any, x: TensorType) -> tuple[str, float, TensorType] | None:
    """``(row kernel, epsilon, x as rows)`` of an op that reduces or normalizes rows over its
    trailing axes: softmax and layer_norm over the last axis, the ``normalize`` that ONNX's
    LayerNormalization becomes, a sum or mean over the trailing axes and global average
    pooling (their rows: ``x`` with the trailing axes as one); None for any other case."""
    ndim = len(x.shape)
    if name in ("softmax", "layer_norm"):
        if ndim == 0 or normalize_axis(attrs.axis, ndim) != ndim - 1:
            return None
        return name, getattr(attrs, "epsilon", 0.0), x
    if name == "normalize":
        if (len(attrs.axes) != 1 or not attrs.center or attrs.epsilon_outside or attrs.stats
                or not -ndim <= attrs.axes[0] < ndim or attrs.axes[0] % ndim != ndim - 1):
            return None
        return "layer_norm", attrs.epsilon, x
    if name == "global_avg_pool2d":
        if attrs.layout != "NCHW":  # a mean over H and W, not trailing: the reference
            return None
        kind, axes = "mean", [2, 3]
    elif attrs.kind in ("sum", "mean") and attrs.axes:
        kind, axes = attrs.kind, attrs.axes
    else:
        return None
    if not all(-ndim <= a < ndim for a in axes):
        return None
    first = ndim - len(axes)
    if sorted(a % ndim for a in axes) != list(range(first, ndim)) or first == 0:
        return None
    rows = TensorType((*x.shape[:first], prod(x.shape[first:])), x.dtype)
    return f"reduce_{kind}", 0.0, rows
