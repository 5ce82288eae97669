"""ONNX converters: convolutions, Gemm/MatMul/Einsum/Det, normalizations, pools (and
MaxUnpool), softmax family, Flatten and Trilu.

2-D float32/float64 convolutions and pools become the 2-D standard ops (``conv2d``,
``max_pool2d``, ...), everything else the N-d ones (``conv``, ``max_pool``, ...), which compute
float16 in float32. Where an op's semantics changed between opsets (Softmax's 2-D coercion
before 13, GroupNormalization's per-group scale at 18, BatchNormalization's outputs,
Gemm's optional C from 11, Flatten's negative axis from 11), a converter is registered per
range. Softmax's family reads negative axes at every opset, as ONNX Runtime does (old PyTorch
exports use them).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from ...errors import ConversionError
from ..builder import Builder
from ..model import OnnxNode
from ..registry import ConvertFn, converter
from .common import const_ints, same_as

_FLOATS_2D = ("float32", "float64")
"""Dtypes the 2-D standard ops take here (float16 goes to the N-d ops, which accumulate in
float32)."""

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# --------------------------------------------------------------------------------------------
# Helpers


def _used(n: OnnxNode, index: int) -> bool:
    return index < len(n.outputs) and bool(n.outputs[index])


def _ints(n: OnnxNode, key: str, count: int, default: int, low: int) -> list[int]:
    """Attribute ``key``: ``count`` ints >= ``low``, or ``count`` times ``default``."""
    values = n.attr(key, None)
    if values is None:
        return [default] * count
    values = [int(v) for v in values]
    if len(values) != count:
        raise n.fail(f"{key} must have {count} values, given {values}")
    if any(v < low for v in values):
        raise n.fail(f"{key} must be >= {low}, given {values}")
    return values


def _const(b: Builder, value: float, like: str) -> str:
    return b.constant(np.asarray(value, dtype=b.dtype(like)))


def _reshape(b: Builder, value: str, shape: tuple[int, ...]) -> str:
    if b.shape(value) == shape:
        return value
    if 0 in shape:  # reshape's 0 copies a dim, it cannot spell an empty one
        raise ConversionError(f"{b.source}: cannot reshape {value!r} to the empty shape "
                              f"{list(shape)}")
    return b.op("reshape", [value], {"newshape": list(shape)})[0]


def _axis(n: OnnxNode, axis: int, ndim: int) -> int:
    """``axis`` in ``[-ndim, ndim)`` made non-negative (ONNX Runtime reads negative axes at
    every opset, also where the schema names them only from opset 11)."""
    if not -ndim <= axis < ndim:
        raise n.fail(f"axis {axis} is out of range for a {ndim}-D input ([{-ndim}, "
                     f"{ndim - 1}])")
    return axis + ndim if axis < 0 else axis


def _auto_pads(n: OnnxNode, space: tuple[int, ...], kernel: list[int], strides: list[int],
               dilations: list[int]) -> list[int]:
    """Begin pads then end pads, from ``auto_pad`` or ``pads``."""
    rank = len(space)
    mode = n.attr("auto_pad", "NOTSET")
    if mode not in _AUTO_PADS:
        raise n.fail(f"auto_pad {mode!r} is not supported ({', '.join(_AUTO_PADS)})")
    if mode == "NOTSET":
        return _ints(n, "pads", 2 * rank, 0, 0)
    if mode == "VALID":
        return [0] * (2 * rank)
    begin, end = [], []
    for size, k, s, d in zip(space, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin + end


def _spatial(b: Builder, n: OnnxNode, data: str) -> tuple[int, ...]:
    shape = b.shape(data)
    if len(shape) < 3:
        raise n.fail(f"input must be [N, C, *spatial] with at least one spatial axis, given "
                     f"shape {list(shape)}")
    return shape[2:]


# --------------------------------------------------------------------------------------------
# Conv, ConvTranspose


def _conv_window(b: Builder, n: OnnxNode, x: str | None = None, w: str | None = None
                 ) -> tuple[tuple[int, ...], list[int], list[int], list[int], int]:
    """Spatial shape, kernel, strides, dilations and group of a Conv/ConvTranspose node (or
    of a quantized one, whose data ``x`` and weight ``w`` are other inputs)."""
    space = _spatial(b, n, x or n.inputs[0])
    rank = len(space)
    weight = b.shape(w or n.inputs[1])
    if len(weight) != rank + 2:
        raise n.fail(f"weight must be {rank + 2}-D, given shape {list(weight)}")
    kernel = list(weight[2:])
    given = n.attr("kernel_shape", None)
    if given is not None and [int(k) for k in given] != kernel:
        raise n.fail(f"kernel_shape {list(given)} differs from the weight's {kernel}")
    group = int(n.attr("group", 1))
    if group < 1:
        raise n.fail(f"group must be >= 1, given {group}")
    return (space, kernel, _ints(n, "strides", rank, 1, 1), _ints(n, "dilations", rank, 1, 1),
            group)


@converter("Conv")
def conv(b: Builder, n: OnnxNode) -> list[str]:
    """Conv (1-D, 2-D, 3-D, ...); explicit pads or auto_pad."""
    space, kernel, strides, dilations, group = _conv_window(b, n)
    pads = _auto_pads(n, space, kernel, strides, dilations)
    inputs = [n.inputs[0], n.inputs[1]] + ([n.inputs[2]] if n.input(2) else [])
    if len(space) == 2 and b.dtype(n.inputs[0]) in _FLOATS_2D:
        return b.op("conv2d", inputs, {"strides": strides, "padding": pads,
                                       "dilation": dilations, "groups": group})
    return b.op("conv", inputs, {"strides": strides, "padding": pads, "dilation": dilations,
                                 "groups": group})


@converter("ConvTranspose")
def conv_transpose(b: Builder, n: OnnxNode) -> list[str]:
    """ConvTranspose; ``output_shape`` sets the pads (the output grows at the end when it is
    larger than the natural size), as ONNX Runtime does."""
    space, kernel, strides, dilations, group = _conv_window(b, n)
    rank = len(space)
    extra = _ints(n, "output_padding", rank, 0, 0)
    mode = n.attr("auto_pad", "NOTSET")
    if mode not in _AUTO_PADS:
        raise n.fail(f"auto_pad {mode!r} is not supported ({', '.join(_AUTO_PADS)})")
    output_shape = n.attr("output_shape", None)
    if output_shape is not None:
        target = [int(v) for v in output_shape]
        if len(target) == rank + 2:
            target = target[2:]
        if len(target) != rank:
            raise n.fail(f"output_shape must have {rank} values, given {list(output_shape)}")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        target = [size * s for size, s in zip(space, strides, strict=True)]
    else:
        target = None
    if target is None:
        pads = _ints(n, "pads", 2 * rank, 0, 0) if mode == "NOTSET" else [0] * (2 * rank)
    else:
        begin, end = [], []
        for i in range(rank):
            total = (strides[i] * (space[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i]
                     + 1 - target[i])
            if total < 0:  # larger than the natural size: grow at the end
                begin.append(0)
                end.append(total)
            else:
                small, large = total // 2, total - total // 2
                begin.append(small if mode == "SAME_UPPER" else large)
                end.append(large if mode == "SAME_UPPER" else small)
        pads = begin + end
    inputs = [n.inputs[0], n.inputs[1]] + ([n.inputs[2]] if n.input(2) else [])
    attrs: dict[str, Any] = {"strides": strides, "padding": pads, "dilation": dilations,
                             "groups": group, "output_padding": extra}
    if (rank == 2 and b.dtype(n.inputs[0]) in _FLOATS_2D and min(pads) >= 0
            and all(e < max(s, d) for e, s, d in zip(extra, strides, dilations, strict=True))):
        return b.op("conv2d_transpose", inputs, attrs)
    return b.op("conv_transpose", inputs, attrs)


# --------------------------------------------------------------------------------------------
# Gemm, MatMul, Einsum


def _native(b: Builder, value: str) -> bool:
    """Whether ``matmul``/``dense`` take ``value``'s dtype (others go to ``einsum``)."""
    return b.dtype(value) in ("float16", "float32", "float64")


def _gemm(b: Builder, n: OnnxNode, c: str | None) -> list[str]:
    a, w = n.inputs[0], n.inputs[1]
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    trans_a, trans_b = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    if trans_a not in (0, 1) or trans_b not in (0, 1):
        raise n.fail(f"transA and transB must be 0 or 1, given {trans_a} and {trans_b}")
    for value, name in ((a, "A"), (w, "B")):
        if len(b.shape(value)) != 2:
            raise n.fail(f"{name} must be 2-D, given shape {list(b.shape(value))}")
    m = b.shape(a)[1 if trans_a else 0]
    cols = b.shape(w)[0 if trans_b else 1]
    if c is not None:
        try:
            fits = np.broadcast_shapes(b.shape(c), (m, cols)) == (m, cols)
        except ValueError:
            fits = False
        if not fits:
            raise n.fail(f"C of shape {list(b.shape(c))} does not broadcast to the output "
                         f"[{m}, {cols}]")
    if not _native(b, a):
        if b.dtype(a) != "bfloat16" and (alpha != int(alpha) or beta != int(beta)):
            raise n.fail(f"integer Gemm needs integral alpha and beta, given {alpha}, {beta}")
        equation = ("ki" if trans_a else "ik") + "," + ("jk" if trans_b else "kj") + "->ij"
        (y,) = b.op("einsum", [a, w], {"equation": equation})
    elif (not trans_a and trans_b and alpha == 1.0 and (c is None or (
            beta == 1.0 and b.shape(c) == (cols,)))):
        return b.op("dense", [a, w] + ([c] if c is not None else []))
    else:
        (y,) = b.op("matmul", [a, w], {"transpose_a": bool(trans_a),
                                       "transpose_b": bool(trans_b)})
    if alpha != 1.0:
        (y,) = b.op("multiply", [y, _const(b, alpha, y)])
    if c is None or beta == 0.0:
        return [y]
    c = same_as(b, c, y)
    if beta != 1.0:
        (c,) = b.op("multiply", [c, _const(b, beta, c)])
    return b.op("add", [y, c])


@converter("Gemm", until=10)
def gemm_7(b: Builder, n: OnnxNode) -> list[str]:
    """Gemm-7/9: C is required."""
    c = n.input(2)
    if c is None:
        raise n.fail(f"Gemm-{n.opset} needs input C")
    return _gemm(b, n, c)


@converter("Gemm", since=11)
def gemm_11(b: Builder, n: OnnxNode) -> list[str]:
    """Gemm-11/13: C is optional."""
    return _gemm(b, n, n.input(2))


@converter("MatMul")
def matmul(b: Builder, n: OnnxNode) -> list[str]:
    """numpy matmul: batched, broadcast, 1-D operands (a row or a column vector)."""
    a, w = n.inputs[0], n.inputs[1]
    sa, sb = b.shape(a), b.shape(w)
    if not sa or not sb:
        raise n.fail(f"MatMul takes no scalars, given shapes {list(sa)} and {list(sb)}")
    if not _native(b, a):
        ta = "...ij" if len(sa) > 1 else "j"
        tb = "...jk" if len(sb) > 1 else "j"
        out = "..." + ("i" if len(sa) > 1 else "") + ("k" if len(sb) > 1 else "")
        return b.op("einsum", [a, w], {"equation": f"{ta},{tb}->{out}"})
    a2 = _reshape(b, a, (1, sa[0])) if len(sa) == 1 else a
    b2 = _reshape(b, w, (sb[0], 1)) if len(sb) == 1 else w
    (y,) = b.op("matmul", [a2, b2])
    shape = b.shape(y)
    if len(sa) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(sb) == 1:
        shape = shape[:-1]
    if shape == b.shape(y):
        return [y]
    if 0 in shape:
        raise n.fail(f"MatMul of shapes {list(sa)} and {list(sb)} is empty")
    return b.op("reshape", [y], {"newshape": list(shape)})


@converter("Einsum", since=12)
def einsum(b: Builder, n: OnnxNode) -> list[str]:
    """Einsum: the equation as numpy reads it."""
    equation = str(n.attr("equation")).replace(" ", "")
    inputs = [name for name in n.inputs if name]
    return b.op("einsum", inputs, {"equation": equation})


_DET_DTYPES = ("float16", "float32", "float64", "bfloat16")


@converter("Det", since=11)
def det(b: Builder, n: OnnxNode) -> list[str]:
    """Det: the determinant of each square matrix [..., M, M] (float types)."""
    x = n.inputs[0]
    shape, dtype = b.shape(x), b.dtype(x)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise n.fail(f"Det takes square matrices [..., M, M], given shape {list(shape)}")
    if dtype not in _DET_DTYPES:
        raise n.fail(f"Det takes {', '.join(_DET_DTYPES)}, given {dtype}")
    return b.op("det", [x])


# --------------------------------------------------------------------------------------------
# BatchNormalization


def _channel(b: Builder, value: str, ndim: int) -> str:
    """A [C] vector shaped [C, 1, ...] to broadcast along axis 1 of an ``ndim``-D tensor."""
    (c,) = b.shape(value)
    return _reshape(b, value, (c,) + (1,) * (ndim - 2))


def _batch_norm_inference(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    if len(b.shape(x)) < 2:
        raise n.fail(f"X must be [N, C, ...], given shape {list(b.shape(x))}")
    stats = [same_as(b, name, x) for name in n.inputs[1:5]]
    epsilon = float(n.attr("epsilon", 1e-5))
    if all(len(b.shape(s)) == 1 for s in stats):
        return b.op("batch_norm", [x, *stats], {"axis": 1, "epsilon": epsilon})
    # Per-activation statistics ([C, D1, ...], opset < 9 spatial=0): elementwise.
    scale, bias, mean, var = stats
    (d,) = b.op("subtract", [x, mean])
    (s,) = b.op("add", [var, _const(b, epsilon, var)])
    (s,) = b.op("sqrt", [s])
    (s,) = b.op("divide", [scale, s])
    (y,) = b.op("multiply", [d, s])
    return b.op("add", [y, bias])


@converter("BatchNormalization", until=13)
def batch_norm_7(b: Builder, n: OnnxNode) -> list[str]:
    """BatchNormalization-7/9 (inference); the training outputs must be unused."""
    spatial = int(n.attr("spatial", 1))
    if spatial not in (0, 1):
        raise n.fail(f"spatial must be 0 or 1, given {spatial}")
    if any(_used(n, i) for i in range(1, 5)):
        raise n.fail("the training-mode outputs (mean, var, saved_mean, saved_var) are not "
                     "supported: graphrt runs inference")
    if spatial == 1 and any(len(b.shape(s)) != 1 for s in n.inputs[1:5]):
        raise n.fail("with spatial=1, scale, B, mean and var must be 1-D")
    return _batch_norm_inference(b, n)


@converter("BatchNormalization", since=14)
def batch_norm_14(b: Builder, n: OnnxNode) -> list[str]:
    """BatchNormalization-14/15: inference, or training_mode=1 with batch statistics and the
    running mean and variance outputs."""
    training = int(n.attr("training_mode", 0))
    if training not in (0, 1):
        raise n.fail(f"training_mode must be 0 or 1, given {training}")
    if not training:
        if _used(n, 1) or _used(n, 2):
            raise n.fail("running_mean and running_var are outputs of training_mode=1 only")
        return _batch_norm_inference(b, n)
    x = n.inputs[0]
    ndim = len(b.shape(x))
    if ndim < 2:
        raise n.fail(f"X must be [N, C, ...], given shape {list(b.shape(x))}")
    epsilon = float(n.attr("epsilon", 1e-5))
    momentum = float(n.attr("momentum", 0.9))
    channels = b.shape(x)[1]
    for index, what in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")):
        if b.shape(n.inputs[index]) != (channels,):
            raise n.fail(f"{what} must be [C] = [{channels}], given "
                         f"{list(b.shape(n.inputs[index]))}")
    scale, bias = (_channel(b, same_as(b, v, x), ndim) for v in n.inputs[1:3])
    axes = [0, *range(2, ndim)]
    (y,) = b.op("normalize", [x, scale, bias], {"axes": axes, "epsilon": epsilon})
    outputs = [y]
    if _used(n, 1) or _used(n, 2):
        (mean,) = b.op("reduce", [x], {"kind": "mean", "axes": axes, "keepdims": True})
        (d,) = b.op("subtract", [x, mean])
        (sq,) = b.op("multiply", [d, d])
        (var,) = b.op("reduce", [sq], {"kind": "mean", "axes": axes, "keepdims": False})
        (mean,) = b.op("reshape", [mean], {"newshape": [b.shape(x)[1]]})
        for running, current in ((n.inputs[3], mean), (n.inputs[4], var)):
            current = same_as(b, current, running)
            (old,) = b.op("multiply", [running, _const(b, momentum, running)])
            (new,) = b.op("multiply", [current, _const(b, 1.0 - momentum, running)])
            outputs += b.op("add", [old, new])
    return outputs


# --------------------------------------------------------------------------------------------
# Instance, layer, group, RMS, mean-variance, Lp normalization; LRN


@converter("InstanceNormalization")
def instance_norm(b: Builder, n: OnnxNode) -> list[str]:
    """Per sample and channel over the spatial axes: group_norm with one group per channel."""
    x = n.inputs[0]
    shape = b.shape(x)
    if len(shape) < 3:
        raise n.fail(f"input must be [N, C, D1, ...], given shape {list(shape)}")
    scale, bias = (same_as(b, v, x) for v in n.inputs[1:3])
    return b.op("group_norm", [x, scale, bias], {"num_groups": shape[1],
                                                 "epsilon": float(n.attr("epsilon", 1e-5))})


def _stash(n: OnnxNode) -> None:
    stash = int(n.attr("stash_type", 1))
    if stash != 1:
        raise n.fail(f"stash_type {stash} is not supported (1: float32)")


@converter("LayerNormalization", since=17)
def layer_norm(b: Builder, n: OnnxNode) -> list[str]:
    """Over axes ``axis..r-1``; Mean and InvStdDev (float32) when requested."""
    _stash(n)
    x = n.inputs[0]
    shape = b.shape(x)
    axis = _axis(n, int(n.attr("axis", -1)), len(shape))
    epsilon = float(n.attr("epsilon", 1e-5))
    inputs = [x, n.inputs[1]] + ([n.inputs[2]] if n.input(2) else [])
    stats = _used(n, 1) or _used(n, 2)
    if (not stats and axis == len(shape) - 1 and len(inputs) == 3
            and b.dtype(x) in _FLOATS_2D
            and all(b.shape(v) == (shape[-1],) and b.dtype(v) == b.dtype(x)
                    for v in inputs[1:])):
        return b.op("layer_norm", inputs, {"axis": -1, "epsilon": epsilon})
    inputs = [inputs[0]] + [same_as(b, v, x) for v in inputs[1:]]
    outputs = b.op("normalize", inputs, {"axes": list(range(axis, len(shape))),
                                         "epsilon": epsilon, "stats": stats})
    return [outputs[0]] + [v if b.dtype(v) == "float32" else
                           b.op("cast", [v], {"dtype": "float32"})[0] for v in outputs[1:]]


def _group_norm(per_group: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        if not per_group:
            _stash(n)
        x = n.inputs[0]
        shape = b.shape(x)
        if len(shape) < 2:
            raise n.fail(f"X must be [N, C, ...], given shape {list(shape)}")
        groups = int(n.attr("num_groups"))
        c = shape[1]
        if groups < 1 or c % groups:
            raise n.fail(f"num_groups ({groups}) must divide the channels ({c})")
        scale, bias = (same_as(b, v, x) for v in n.inputs[1:3])
        if per_group:  # opset 18: one scale and bias per group, repeated per channel
            for value, name in ((scale, "scale"), (bias, "bias")):
                if b.shape(value) != (groups,):
                    raise n.fail(f"{name} must be [num_groups] = [{groups}] at opset 18, "
                                 f"given {list(b.shape(value))}")
            index = b.computed((c,), "int64", "the channels' group numbers",
                               lambda: np.arange(c, dtype=np.int64) // (c // groups))
            (scale,) = b.op("take", [scale, index], {"axis": 0, "mode": "raise"})
            (bias,) = b.op("take", [bias, index], {"axis": 0, "mode": "raise"})
        return b.op("group_norm", [x, scale, bias], {
            "num_groups": groups, "epsilon": float(n.attr("epsilon", 1e-5))})

    return convert


converter("GroupNormalization", since=18, until=20)(_group_norm(True))
converter("GroupNormalization", since=21)(_group_norm(False))


@converter("RMSNormalization", since=23)
def rms_norm(b: Builder, n: OnnxNode) -> list[str]:
    """``x / sqrt(mean(x^2) + epsilon) * scale`` over axes ``axis..r-1``."""
    _stash(n)
    x = n.inputs[0]
    shape = b.shape(x)
    axis = _axis(n, int(n.attr("axis", -1)), len(shape))
    return b.op("normalize", [x, same_as(b, n.inputs[1], x)], {
        "axes": list(range(axis, len(shape))), "epsilon": float(n.attr("epsilon", 1e-5)),
        "center": False})


@converter("MeanVarianceNormalization", since=9)
def mean_variance_norm(b: Builder, n: OnnxNode) -> list[str]:
    """``(x - mean) / (std + 1e-9)`` over ``axes``."""
    x = n.inputs[0]
    ndim = len(b.shape(x))
    axes = [int(a) for a in n.attr("axes", [0, 2, 3])]
    axes = [_axis(n, a, ndim) for a in axes]
    return b.op("normalize", [x], {"axes": axes, "epsilon": 1e-9, "epsilon_outside": True})


@converter("LpNormalization")
def lp_norm(b: Builder, n: OnnxNode) -> list[str]:
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    x = n.inputs[0]
    ndim = len(b.shape(x))
    axis = _axis(n, int(n.attr("axis", -1)), ndim)
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        raise n.fail(f"p must be 1 or 2, given {p}")
    (norm,) = b.op("reduce", [x], {"kind": f"l{p}", "axes": [axis], "keepdims": True})
    (zero,) = b.op("equal", [norm, _const(b, 0.0, norm)])
    (zero,) = b.op("cast", [zero], {"dtype": b.dtype(norm)})
    (norm,) = b.op("add", [norm, zero])
    return b.op("divide", [x, norm])


@converter("LRN")
def lrn(b: Builder, n: OnnxNode) -> list[str]:
    """Local response normalization across channels."""
    size = int(n.attr("size"))
    if size < 1:
        raise n.fail(f"size must be >= 1, given {size}")
    return b.op("lrn", [n.inputs[0]], {"size": size, "alpha": float(n.attr("alpha", 1e-4)),
                                       "beta": float(n.attr("beta", 0.75)),
                                       "bias": float(n.attr("bias", 1.0))})


# --------------------------------------------------------------------------------------------
# Pools


def _pool_window(b: Builder, n: OnnxNode) -> tuple[list[int], list[int], list[int], list[int],
                                                      bool]:
    """kernel, strides, dilations, pads (begins then ends), ceil_mode."""
    space = _spatial(b, n, n.inputs[0])
    rank = len(space)
    kernel = _ints(n, "kernel_shape", rank, 0, 1)
    if not n.attr("kernel_shape", None):
        raise n.fail("kernel_shape is required")
    strides = _ints(n, "strides", rank, 1, 1)
    dilations = _ints(n, "dilations", rank, 1, 1)
    ceil = int(n.attr("ceil_mode", 0))
    if ceil not in (0, 1):
        raise n.fail(f"ceil_mode must be 0 or 1, given {ceil}")
    pads = _auto_pads(n, space, kernel, strides, dilations)
    return kernel, strides, dilations, pads, bool(ceil)


def _fits_2d(kernel: list[int], dilations: list[int], pads: list[int]) -> bool:
    return len(kernel) == 2 and dilations == [1, 1] and all(
        p < kernel[i % 2] for i, p in enumerate(pads))


def _max_pool(b: Builder, n: OnnxNode) -> list[str]:
    kernel, strides, dilations, pads, ceil = _pool_window(b, n)
    order = int(n.attr("storage_order", 0))
    if order not in (0, 1):
        raise n.fail(f"storage_order must be 0 or 1, given {order}")
    indices = _used(n, 1)
    x = n.inputs[0]
    if not indices and _fits_2d(kernel, dilations, pads) and (
            b.dtype(x) not in ("float16", "bfloat16")):
        return b.op("max_pool2d", [x], {"pool_size": kernel, "strides": strides,
                                        "padding": pads, "ceil_mode": ceil})
    return b.op("max_pool", [x], {"kernel": kernel, "strides": strides, "padding": pads,
                                  "dilation": dilations, "ceil_mode": ceil,
                                  "indices": indices, "column_major": bool(order)})


converter("MaxPool")(_max_pool)


@converter("MaxUnpool", since=9)
def max_unpool(b: Builder, n: OnnxNode) -> list[str]:
    """MaxUnpool: X's values written at the flat indices I (MaxPool's second output) into
    zeros of the unpooled shape, held at the start of ``output_shape`` where given."""
    if len(n.inputs) < 2 or not n.inputs[1]:
        raise n.fail("the indices input I is required (inputs: X, I[, output_shape])")
    x, indices = n.inputs[0], n.inputs[1]
    rank = len(_spatial(b, n, x))
    if not n.attr("kernel_shape", None):
        raise n.fail("kernel_shape is required")
    kernel = _ints(n, "kernel_shape", rank, 0, 1)
    strides = _ints(n, "strides", rank, 1, 1)
    pads = _ints(n, "pads", 2 * rank, 0, 0)
    if b.dtype(indices) != "int64":
        raise n.fail(f"indices I must be int64, given {b.dtype(indices)}")
    if b.shape(indices) != b.shape(x):
        raise n.fail(f"indices I must have X's shape {list(b.shape(x))}, given "
                     f"{list(b.shape(indices))}")
    attrs: dict[str, Any] = {"kernel": kernel, "strides": strides, "padding": pads}
    shape_input = n.input(2)
    if shape_input is not None:
        output_shape = const_ints(b, shape_input, "output_shape")
        if len(output_shape) != rank + 2 or any(d < 0 for d in output_shape):
            raise n.fail(f"output_shape must be {rank + 2} sizes >= 0 (one per axis of X), "
                         f"given {output_shape}")
        attrs["output_shape"] = output_shape
    return b.op("max_unpool", [x, indices], attrs)


@converter("AveragePool")
def avg_pool(b: Builder, n: OnnxNode) -> list[str]:
    """AveragePool (ceil_mode from 10, dilations from 19)."""
    kernel, strides, dilations, pads, ceil = _pool_window(b, n)
    include = int(n.attr("count_include_pad", 0))
    if include not in (0, 1):
        raise n.fail(f"count_include_pad must be 0 or 1, given {include}")
    x = n.inputs[0]
    if _fits_2d(kernel, dilations, pads) and b.dtype(x) in _FLOATS_2D:
        return b.op("avg_pool2d", [x], {"pool_size": kernel, "strides": strides,
                                        "padding": pads, "ceil_mode": ceil,
                                        "count_include_pad": bool(include)})
    return b.op("avg_pool", [x], {"kernel": kernel, "strides": strides, "padding": pads,
                                  "dilation": dilations, "ceil_mode": ceil,
                                  "count_include_pad": bool(include)})


@converter("LpPool")
def lp_pool(b: Builder, n: OnnxNode) -> list[str]:
    """LpPool (ceil_mode and dilations from 18)."""
    kernel, strides, dilations, pads, ceil = _pool_window(b, n)
    p = float(n.attr("p", 2))
    if p <= 0:
        raise n.fail(f"p must be positive, given {p}")
    return b.op("lp_pool", [n.inputs[0]], {"kernel": kernel, "strides": strides,
                                           "padding": pads, "dilation": dilations,
                                           "ceil_mode": ceil, "p": p})


def _global(kind: str) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        space = _spatial(b, n, x)
        if len(space) == 2 and b.dtype(x) in _FLOATS_2D:
            return b.op(f"global_{kind}_pool2d", [x])
        return b.op("reduce", [x], {"kind": "mean" if kind == "avg" else "max",
                                    "axes": list(range(2, 2 + len(space))), "keepdims": True})

    return convert


converter("GlobalAveragePool")(_global("avg"))
converter("GlobalMaxPool")(_global("max"))


@converter("GlobalLpPool")
def global_lp_pool(b: Builder, n: OnnxNode) -> list[str]:
    """LpPool over the whole spatial extent."""
    space = _spatial(b, n, n.inputs[0])
    p = float(n.attr("p", 2))
    if p <= 0:
        raise n.fail(f"p must be positive, given {p}")
    return b.op("lp_pool", [n.inputs[0]], {"kernel": list(space), "p": p})


# --------------------------------------------------------------------------------------------
# Softmax, LogSoftmax, Hardmax


def _hardmax_along(b: Builder, x: str, axis: int) -> str:
    (arg,) = b.op("arg_reduce", [x], {"kind": "max", "axis": axis, "keepdims": False,
                                      "select_last_index": False})
    values = b.computed((2,), b.dtype(x), "Hardmax's values", lambda: [0, 1])
    return b.op("one_hot", [arg, values], {"depth": b.shape(x)[axis], "axis": axis})[0]


def _softmax_op(op: str) -> Callable[[Builder, str, int], str]:
    def along(b: Builder, x: str, axis: int) -> str:
        if op == "hardmax":
            return _hardmax_along(b, x, axis)
        return b.op(op, [x], {"axis": axis})[0]

    return along


def _softmax_2d(op: str) -> ConvertFn:
    """Opset < 13: coerce to 2-D ``[prod(shape[:axis]), prod(shape[axis:])]``, apply along
    the second axis, reshape back."""
    along = _softmax_op(op)

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        if not shape:
            raise n.fail("input must be at least 1-D")
        axis = _axis(n, int(n.attr("axis", 1)), len(shape))
        if axis == len(shape) - 1:
            return [along(b, x, axis)]
        if 0 in shape:
            raise n.fail(f"input of shape {list(shape)} is empty")
        (flat,) = b.op("reshape", [x], {"newshape": [prod(shape[:axis]), prod(shape[axis:])]})
        y = along(b, flat, 1)
        return b.op("reshape", [y], {"newshape": list(shape)})

    return convert


def _softmax_13(op: str) -> ConvertFn:
    along = _softmax_op(op)

    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x = n.inputs[0]
        shape = b.shape(x)
        if not shape:
            raise n.fail("input must be at least 1-D")
        return [along(b, x, _axis(n, int(n.attr("axis", -1)), len(shape)))]

    return convert


for _onnx, _op in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax"),
                   ("Hardmax", "hardmax")):
    converter(_onnx, until=12)(_softmax_2d(_op))
    converter(_onnx, since=13)(_softmax_13(_op))


# --------------------------------------------------------------------------------------------
# Flatten, Trilu


def _flatten(negative: bool) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        """2-D ``[prod(shape[:axis]), prod(shape[axis:])]``; ``axis`` in ``[0, r]``, or
        ``[-r, r]`` from opset 11."""
        x = n.inputs[0]
        ndim = len(b.shape(x))
        axis = int(n.attr("axis", 1))
        low = -ndim if negative else 0
        if not low <= axis <= ndim:
            raise n.fail(f"axis {axis} is out of range for a {ndim}-D input (opset {n.opset} "
                         f"allows [{low}, {ndim}])")
        return b.op("flatten", [x], {"axis": axis})

    return convert


converter("Flatten", until=10)(_flatten(False))
converter("Flatten", since=11)(_flatten(True))


@converter("Trilu", since=14)
def trilu(b: Builder, n: OnnxNode) -> list[str]:
    """Keep the upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two
    axes; zero elsewhere."""
    x = n.inputs[0]
    shape = b.shape(x)
    if len(shape) < 2:
        raise n.fail(f"input must be at least 2-D, given shape {list(shape)}")
    upper = int(n.attr("upper", 1))
    if upper not in (0, 1):
        raise n.fail(f"upper must be 0 or 1, given {upper}")
    k_name = n.input(1)
    k = 0
    if k_name is not None:
        values = const_ints(b, k_name, "k")
        if len(values) != 1:
            raise n.fail(f"k must be a single value, given {values}")
        k = values[0]
    rows, cols = shape[-2:]
    row = b.computed((rows, 1), "int64", "Trilu's row numbers",
                     lambda: np.arange(rows, dtype=np.int64).reshape(rows, 1))
    col = b.computed((1, cols), "int64", "Trilu's column numbers",
                     lambda: np.arange(cols, dtype=np.int64).reshape(1, cols))
    (diff,) = b.op("subtract", [col, row])  # folds while the mask fits the budget
    (mask,) = b.op("greater_equal" if upper else "less_equal", [diff, b.constant(np.int64(k))])
    zero = b.constant(np.zeros((), dtype=b.dtype(x)))
    return b.op("where", [mask, x, zero])
