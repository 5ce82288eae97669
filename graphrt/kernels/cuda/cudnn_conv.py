"""Convolutions through NVIDIA's cuDNN frontend (``import cudnn``, pip
``nvidia-cudnn-frontend``), planned at ``create()`` and capturable into CUDA graphs.

One cuDNN operation graph per (shapes, dtypes, layouts, geometry, epilogue): ``conv_fprop``
over NCHW (or N-d) tensors, or NHWC ones with an OHWI weight (declared to cuDNN as the same
NCHW dims with channels-last strides: its tensor-core kernels' own layout), then the bias, the
residual add and relu the declarative function fuses after it, computed in float32 and stored
once in the output's dtype. float32 convolutions take no TF32 plan (PyTorch's default does):
graphrt's float32 matches the cpu's to float32 rounding; float16 runs on tensor cores with
float32 accumulation. Heuristics ``A`` then ``FALLBACK`` pick the plan; its workspace is a
planned scratch array of the node (:attr:`Prepared.workspace`), so a call allocates nothing,
synchronizes nothing and can be recorded into a CUDA graph (CuPy refuses cuBLAS under capture;
cuDNN's frontend runs there, verified on an H200: ``../shared/gpu-notes.md``). Plans are cached
per process by that key, so a second module of the same model builds nothing.

Where cuDNN cannot run a case (a dynamic node, an empty output, cuDNN not installed or not
supporting the graph), :func:`prepare_conv` returns None and the next provider runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cache
from math import prod
from threading import Lock
from typing import Any

from ...ops import TensorType
from ..base import Epilogue, Prepared

__all__ = ["channels_last_dims", "cudnn_module", "prepare_conv"]

log = logging.getLogger("graphrt")

ConvKey = tuple[Any, ...]
Built = tuple[Any, list[Any], int]
_PLANS: dict[ConvKey, Built | None] = {}  # None: cuDNN has no plan for the case
_LOCK = Lock()
_DTYPES = {"float32": "FLOAT", "float16": "HALF"}


@cache
def cudnn_module() -> Any:
    """The ``cudnn`` frontend module, or None when it is not installed (or its backend
    library does not load); said once in the log."""
    try:
        import cudnn
    except Exception as err:  # ImportError, or OSError from a missing libcudnn
        log.info("graphrt: cuDNN's frontend is not available (%s: %s); convolutions on cuda "
                 "run CuPy's GEMMs and cannot be captured into CUDA graphs",
                 type(err).__name__, err)
        return None
    return cudnn


@cache
def _handle(ordinal: int) -> Any:
    """One cuDNN handle per GPU, made on first use (its stream is set at each call)."""
    return cudnn_module().create_handle()


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides, in elements, of ``shape``."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return strides[::-1]


def post_padding(x: Sequence[int], w: Sequence[int], out: Sequence[int],
                 strides: Sequence[int], dilation: Sequence[int], begin: Sequence[int]
                 ) -> list[int] | None:
    """The end pads that make cuDNN's output size exactly ``out`` (its own formula
    ``(in + pre + post - dilation * (k - 1) - 1) // stride + 1``), or None where no
    non-negative pad does. A strided window that leaves the last rows unread (a 1x1
    convolution of stride 2 over an even size: ResNet's downsampling) needs no pad at all.

    Example:
        >>> post_padding((1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 4, 4), (2, 2), (1, 1), (1, 1))
        [0, 0]
        >>> post_padding((1, 8, 56, 56), (16, 8, 1, 1), (1, 16, 28, 28), (2, 2), (1, 1), (0, 0))
        [0, 0]
    """
    pads = []
    for i, k, o, s, d, p in zip(x[2:], w[2:], out[2:], strides, dilation, begin, strict=True):
        post = max(0, (o - 1) * s + d * (k - 1) + 1 - i - p)
        if (i + p + post - d * (k - 1) - 1) // s + 1 != o:
            return None
        pads.append(post)
    return pads


def channels_last_dims(shape: Sequence[int], channels_last: bool
                       ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The NCHW dims (OIHW for a weight) and the strides, in elements, that declare a tensor
    of ``shape`` to cuDNN: as they are, or, ``channels_last``, an NHWC (OHWI) array's.

    Example:
        >>> channels_last_dims((2, 5, 5, 8), True)
        ((2, 8, 5, 5), (200, 1, 40, 8))
        >>> channels_last_dims((2, 8, 5, 5), False)
        ((2, 8, 5, 5), (200, 25, 5, 1))
    """
    strides = contiguous_strides(shape)
    if not channels_last:
        return tuple(shape), tuple(strides)
    n, *space, c = shape
    return (n, c, *space), (strides[0], 1, *strides[1:-1])


def prepare_conv(inputs: Sequence[TensorType], out: TensorType, groups: int,
                 strides: Sequence[int], dilation: Sequence[int], begin: Sequence[int],
                 epilogue: Epilogue, *, dynamic: bool, xp: Any,
                 channels_last: tuple[bool, bool, bool] = (False, False, False)
                 ) -> Prepared | None:
    """A cuDNN convolution (``inputs``: data, weight[, bias]) with ``epilogue``, or None.

    ``channels_last`` says whether the data, the output and the weight are NHWC (OHWI).
    ``call(x, w[, bias][, residual], out[, workspace])`` runs on CuPy's (``xp``) current
    stream and device.
    """
    cudnn = cudnn_module()
    x, w = inputs[0], inputs[1]
    if (cudnn is None or dynamic or epilogue.clip is not None or epilogue.bias
            or x.dtype not in _DTYPES
            or prod(out.shape) == 0
            or len(x.shape) not in (4, 5) or any(t.dtype != x.dtype for t in inputs)):
        return None
    ordinal = int(xp.cuda.Device().id)
    data, result, weight = (channels_last_dims(t.shape, last)
                            for t, last in zip((x, out, w), channels_last, strict=True))
    post = post_padding(data[0], weight[0], result[0], strides, dilation, begin)
    if post is None or min(begin, default=0) < 0:
        return None
    has_bias = len(inputs) == 3
    key = (data, weight, result, x.dtype, groups, tuple(strides), tuple(dilation),
           tuple(begin), tuple(post), has_bias, epilogue.residual, epilogue.relu, ordinal)
    with _LOCK:
        if key not in _PLANS:
            try:
                _PLANS[key] = _build(cudnn, key, ordinal)
            except Exception as err:  # cuDNN has no plan for this case: the next provider
                log.info("graphrt: cuDNN cannot run conv %s -> %s %s (%s: %s)",
                         list(x.shape), list(out.shape), x.dtype, type(err).__name__,
                         str(err)[:200])
                _PLANS[key] = None
        built = _PLANS[key]
    if built is None:
        return None
    graph, tensors, size = built
    workspace = (TensorType((size,), "uint8"),) if size else ()
    return Prepared(_caller(cudnn, xp, graph, tensors, ordinal, bool(size)), workspace,
                    capturable=True, provider="cudnn")


def _build(cudnn: Any, key: ConvKey, ordinal: int) -> Built:
    """Build and plan the operation graph of ``key``: its graph, its tensors in call order
    (x, w[, bias][, residual], y) and its workspace bytes."""
    ((xs, x_strides), (ws, w_strides), (ys, y_strides), dtype, _groups, strides, dilation,
     begin, post, has_bias, residual, relu, _) = key
    io = getattr(cudnn.data_type, _DTYPES[dtype])
    f32 = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32,
                          handle=_handle(ordinal))
    x = graph.tensor(name="x", dim=list(xs), stride=list(x_strides), data_type=io)
    w = graph.tensor(name="w", dim=list(ws), stride=list(w_strides), data_type=io)
    tensors = [x, w]
    y = graph.conv_fprop(image=x, weight=w, pre_padding=list(begin), post_padding=list(post),
                         stride=list(strides), dilation=list(dilation), compute_data_type=f32)
    channels = ys[1]
    if has_bias:  # the [K] bias seen as [1, K, 1, ...]
        dims = [1, channels] + [1] * (len(ys) - 2)
        bias = graph.tensor(name="bias", dim=dims, stride=contiguous_strides(dims),
                            data_type=io)
        tensors.append(bias)
        y = graph.bias(input=y, bias=bias)
    if residual:
        extra = graph.tensor(name="residual", dim=list(ys), stride=list(y_strides),
                             data_type=io)
        tensors.append(extra)
        y = graph.add(a=y, b=extra)
    if relu:
        y = graph.relu(input=y)
    # pinned to the output's own strides: left unset, cuDNN infers channels-last
    y.set_output(True).set_data_type(io).set_dim(list(ys)).set_stride(list(y_strides))
    tensors.append(y)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    if dtype == "float32":  # float32 stays float32: no TF32 tensor-core plans
        graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE,
                                      cudnn.numerical_note.DOWN_CONVERT_INPUTS])
    graph.check_support()
    graph.build_plans()
    return graph, tensors, int(graph.get_workspace_size())


def _caller(cudnn: Any, xp: Any, graph: Any, tensors: list[Any], ordinal: int,
            has_workspace: bool) -> Any:
    handle = _handle(ordinal)  # the graph's plans belong to the GPU they were built on
    count = len(tensors)
    current_stream = xp.cuda.get_current_stream

    def call(*arrays: Any) -> None:
        cudnn.set_stream(handle=handle, stream=current_stream().ptr)
        pack = dict(zip(tensors, arrays[:count], strict=True))
        graph.execute(pack, arrays[count] if has_workspace else None, handle=handle)

    return call
