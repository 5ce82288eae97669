"""The cpu's compiled kernels behind the provider interface (:mod:`graphrt.kernels.base`).

- ``conv``, ``conv2d``: the direct or pointwise convolution (2-D float32 of one group), or the
  depthwise one (a group per channel), with its ``+ residual`` / relu / clip epilogue, on
  NCHW or blocked ``NCHW8c`` data and outputs (:mod:`graphrt.kernels.cpu.conv`).
- ``qlinear_conv``: the quantized convolution (2-D, one group or depthwise, static shapes) on
  the integer AVX2 kernel where its weight allows, else on the float32 direct kernels, exact
  either way (:mod:`graphrt.kernels.cpu.qconv`); ``conv_integer`` (2-D, one group) on the
  integer kernel too; ``qlinear_matmul``
  (2-D and batched operands, per-tensor ``a``) as one exact float32 BLAS product
  (:mod:`graphrt.kernels.cpu.qmatmul`).
- ``max_pool``, ``max_pool2d``: the compiled max pool (float32 or 8-bit, 2-D windows, no indices;
  :mod:`graphrt.kernels.cpu.pool`); ``global_avg_pool2d``: one compiled sum per plane
  (float32, static shapes).
- ``softmax``, ``layer_norm``: one compiled pass per row over the last axis (float32 and
  float64; :mod:`graphrt.kernels.cpu.row_kernels`).
- ``dense``, ``matmul``, ``batch_matmul`` by a 2-D weight that is a param, float32, with at
  least 16 rows (or fewer, in a graph with compiled convolutions): the packed product on the
  helper threads, with its ``+ bias`` (ONNX's MatMul -> Add, packed with the weight) /
  ``+ residual`` / relu / clip epilogue (:mod:`graphrt.kernels.cpu.dense`); ``matmul`` and
  ``batch_matmul`` of two float32 activations of the same leading dimensions (attention's)
  on the same micro-kernel, both read in place (:mod:`graphrt.kernels.cpu.batch_product`),
  while no product of the graph runs on BLAS; otherwise the reference under the graph's
  BLAS thread policy (below).
- runs of elementwise steps: one compiled loop per run (static shapes only;
  :mod:`graphrt.kernels.cpu.loops`).

Where a kernel does not apply, the provider answers None and the reference runs.
Everything is decided in :meth:`CpuProvider.prepare`, at ``create()``: whether numba is there
(and ``GRAPHRT_JIT``), the convolution's plan, whether a row or pool kernel takes these types.
A static node's kernel then runs with no check; a dynamic node's decides per shape (cached).

BLAS thread policy: a graph that runs kernels on the helper threads (a compiled convolution or
max pool) runs its small GEMMs (under :data:`SMALL_GEMM` multiply-adds at the planned shapes)
on one BLAS thread and quiets the helpers before every GEMM: OpenBLAS's workers spin for about
0.1 s after a threaded call, and a spinning worker takes the core a convolution's helper needs
(:mod:`graphrt.kernels.cpu.blas_threads`). And a graph that runs some product on BLAS (a
weight fed at run time, a transposed left operand) runs all of them there and its softmax,
layer norms and elementwise loops on the calling thread alone (:meth:`CpuProvider._parallel`);
a graph without one runs those on the helper threads too, from
:data:`~graphrt.kernels.cpu.jit.PARALLEL_ELEMENTS` elements. The provider is made per
compiled graph, so the policy is that graph's, fixed once ``create()`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from ...ops import OpDef, TensorType, normalize_axis
from ...ops.convolution import conv_geometry
from ...ops.nn import (
    conv2d_blocked,
    conv2d_channels_last,
    conv2d_geometry,
    nchw_shape,
    pool2d_windows,
)
from ...ops.pooling import axis_windows
from ..base import ElementwiseStep, Epilogue, FusedRun, Prepared
from .batch_product import batch_product_call
from .blas_threads import blas_held
from .conv import conv_epilogue, conv_plan, run_conv_with
from .crew import quiet
from .dense import dense_call
from .jit import direct_conv, rows_call
from .loops import fused_runs
from .pool import max_pool_call, mean_pool_call
from .qconv import conv_integer_call, qconv_call
from .qmatmul import qmatmul_call

__all__ = ["MAX_DIRECT_PIXELS", "SMALL_GEMM", "CpuProvider"]

SMALL_GEMM = 1 << 24
"""Multiply-adds below which a GEMM of a graph with compiled convolutions runs on one BLAS
thread."""

MAX_DIRECT_PIXELS = 1 << 24
"""Output pixels per image above which a convolution takes the reference: the direct kernel's
plan keeps an offset per output pixel (8 bytes each, made at create())."""

_CONVS = frozenset({"conv", "conv2d"})
_GEMMS = frozenset({"dense", "matmul", "batch_matmul"})
_OPS = _CONVS | _GEMMS | {"max_pool", "max_pool2d", "global_avg_pool2d", "softmax",
                          "layer_norm", "qlinear_conv", "qlinear_matmul", "conv_integer"}


class CpuProvider:
    """The compiled cpu kernels of one compiled graph (see the module docstring).

    Attributes:
        crew: whether this graph runs a kernel on the helper threads (set while its ops are
            prepared, at ``create()``; its GEMMs follow the BLAS policy then).
        blas_gemms: whether some product of this graph runs on BLAS (set likewise): its
            products by params then run there too (:mod:`graphrt.kernels.cpu.dense`).
    """

    name = "cpu"

    def __init__(self) -> None:
        self.crew = False
        self.blas_gemms = False

    def _parallel(self) -> bool:
        """Whether row and elementwise kernels may run on the helper threads: while no
        product of the graph runs on BLAS, whose workers spin for about 0.1 s after each
        call and would take the helpers' cores (fixed once ``create()`` returns)."""
        return not self.blas_gemms

    def supports(self, op: OpDef) -> bool:
        return op.name in _OPS

    def takes_epilogue(self, op: OpDef) -> bool:
        return op.name in _CONVS or op.name in _GEMMS

    def prepare(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType],
                outputs: Sequence[TensorType], epilogue: Epilogue, *, dynamic: bool,
                xp: Any) -> Prepared | None:
        name = op.name
        if epilogue.bias and name not in _GEMMS:  # only the products pack a bias (dense.py)
            return None
        if getattr(attrs, "layout", "NCHW") == "NHWC" or (
                name == "conv2d" and any(conv2d_channels_last(attrs))):
            return None  # channels last (a cuda conversion's): the reference
        if name in _CONVS:
            return self._conv(op, attrs, inputs, outputs[0], epilogue, dynamic, xp)
        if name in ("qlinear_conv", "conv_integer"):
            make = qconv_call if name == "qlinear_conv" else conv_integer_call
            quantized = None if dynamic or epilogue else make(
                attrs, inputs, outputs[0], op.positional(xp, attrs, len(inputs)))
            if quantized is None:
                return None
            self.crew = True
            return Prepared(quantized.run, quantized.workspace, capturable=False,
                            provider=self.name)
        if name == "qlinear_matmul":
            product = None if dynamic or epilogue else qmatmul_call(
                inputs, outputs[0], op.positional(xp, attrs, len(inputs)))
            if product is None:
                return None
            self.blas_gemms = True  # its product runs on BLAS
            return Prepared(product.run, product.workspace, capturable=False,
                            provider=self.name)
        if name in _GEMMS:
            packed = None if dynamic else dense_call(
                name, attrs, inputs, outputs[0], epilogue, self._gemm_of(op, attrs, inputs,
                                                                         outputs[0], xp),
                self._parallel, lambda: self.crew, lambda: not self.crew)
            if packed is None and not dynamic and not epilogue.bias:
                packed = batch_product_call(
                    name, attrs, inputs, outputs[0], epilogue,
                    self._gemm_of(op, attrs, inputs, outputs[0], xp), self._parallel)
            if packed is not None:
                return packed
            if epilogue.bias:  # the steps run apart, and the product alone decides
                return None
            self.blas_gemms = True
        if epilogue:
            return None
        call: Callable[..., None] | None = None
        if name in ("max_pool", "max_pool2d") and not getattr(attrs, "indices", False):
            windows = (pool2d_windows(attrs) if name == "max_pool2d"
                       else axis_windows(attrs, len(attrs.kernel)))
            call = max_pool_call(inputs[0], outputs[0], windows, dynamic=dynamic)
            self.crew = self.crew or call is not None
        elif name == "global_avg_pool2d":
            call = mean_pool_call(inputs[0], outputs[0], dynamic=dynamic,
                                  blocked=attrs.layout == "NCHW8c")
        elif name == "softmax":
            call = rows_call("softmax_rows", attrs.axis, inputs[0], (),
                             op.positional(xp, attrs, 1), dynamic=dynamic,
                             parallel=self._parallel)
        elif name == "layer_norm":
            call = rows_call("layer_norm_rows", normalize_axis(attrs.axis, len(inputs[0].shape)),
                             inputs[0], inputs[1:], op.positional(xp, attrs, 3),
                             (attrs.epsilon,), dynamic=dynamic, parallel=self._parallel)
        elif name in _GEMMS:
            call = self._gemm_of(op, attrs, inputs, outputs[0], xp)
        return None if call is None else Prepared(call, capturable=False, provider=self.name)

    def _gemm_of(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType], out: TensorType,
                 xp: Any) -> Callable[..., None]:
        """The reference product of ``op`` under this graph's BLAS policy."""
        transposed = getattr(attrs, "transpose_a", False)
        depth = inputs[0].shape[-2 if transposed else -1] if inputs[0].shape else 1
        return self._gemm(op.positional(xp, attrs, len(inputs)), depth, out)

    def fuse(self, steps: Sequence[ElementwiseStep], exported: set[str],
             types: dict[str, TensorType], *, dynamic: bool, xp: Any) -> list[FusedRun]:
        if dynamic:  # the compiled loops are specialized to the shapes
            return []
        return fused_runs(steps, exported, types, self._parallel)

    def _conv(self, op: OpDef, attrs: Any, inputs: Sequence[TensorType], out: TensorType,
              epilogue: Epilogue, dynamic: bool, xp: Any) -> Prepared | None:
        """The compiled convolution, planned here (per shape for a dynamic node)."""
        blocked = conv2d_blocked(attrs) if op.name == "conv2d" else (False, False)
        x, out_shape = nchw_shape(inputs[0].shape, blocked[0]), nchw_shape(out.shape, blocked[1])
        if prod(out_shape[2:]) > MAX_DIRECT_PIXELS:  # its tables would be too large
            return None
        geometry = (conv2d_geometry(attrs) if op.name == "conv2d"
                    else conv_geometry(attrs, len(x) - 2))
        kernels = direct_conv()
        plan = conv_plan(x, inputs[1].shape, out_shape, inputs[0].dtype, inputs[0].dtype, True,
                         *geometry, kernels is not None, blocked)
        if plan.direct is None or 0 in out.shape or (dynamic and any(blocked)):
            return None  # (blocked layouts, of static shapes only, else take the reference)
        self.crew = True
        workspace = tuple(plan.workspace())
        if dynamic:
            groups, strides, dilation, begin = geometry
            residual, relu, clip, n_in = (epilogue.residual, epilogue.relu, epilogue.clip,
                                          len(inputs))

            def per_shape(*arrays: Any) -> None:
                extra = arrays[n_in] if residual else None
                run_conv_with(kernels, xp, arrays[:n_in], arrays[n_in + residual:], groups,
                              strides, dilation, begin, extra, relu, clip)

            return Prepared(per_shape, workspace, capturable=False, provider=self.name)
        call = conv_epilogue(xp, inputs, out, *geometry, epilogue.residual, epilogue.relu,
                             epilogue.clip, blocked)
        return None if call is None else Prepared(call, workspace, capturable=False,
                                                  provider=self.name)

    def _gemm(self, reference: Callable[..., None], depth: int, out: TensorType
              ) -> Callable[..., None]:
        """The reference GEMM (``depth``: its reduction length) under this graph's BLAS
        policy (see the module docstring)."""
        small = prod(out.shape) * depth < SMALL_GEMM
        provider = self

        def gemm(*arrays: Any) -> None:
            if provider.crew:  # fixed once create() returns
                quiet()
                if small:
                    with blas_held(1):
                        reference(*arrays)
                    return
            reference(*arrays)

        return gemm
