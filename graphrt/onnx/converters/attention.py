"""ONNX converters: attention, rotary embeddings and the classification losses.

``Attention`` (opsets 23, 24, 25) becomes the standard op ``attention`` over 4-D heads, with
3-D inputs split into heads around it, ``past_key``/``past_value`` concatenated into the
present outputs, and every structural mask (causal, sliding window, ``nonpad_kv_seqlen``
padding, a boolean ``attn_mask``) combined into one boolean mask input; a float ``attn_mask``
is the additive bias. ``RotaryEmbedding`` (opset 23) composes slices, gathers and elementwise
ops. ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` become ``nll_loss`` (after a
``log_softmax`` over the class axis for the latter).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from .common import const_ints

SOFTMAX_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
"""ONNX TensorProto element types accepted as ``softmax_precision``."""

_QK_OUTPUT = {0: "scores", 1: "scores", 2: "biased", 3: "probs"}
"""``qk_matmul_output_mode`` → the ``attention`` op's ``qk_output``."""


def _flag(n: OnnxNode, name: str) -> bool:
    value = n.attr(name, 0)
    if value not in (0, 1):
        raise n.fail(f"{name} must be 0 or 1, given {value}")
    return bool(value)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def _split_heads(b: Builder, n: OnnxNode, x: str, heads: int, what: str) -> str:
    """``[B, S, H*D]`` → ``[B, H, S, D]``."""
    batch, seq, hidden = b.shape(x)
    if hidden % heads:
        raise n.fail(f"{what}'s hidden size {hidden} is not a multiple of its {heads} heads")
    (x,) = b.op("reshape", [x], {"newshape": [batch, seq, heads, hidden // heads]})
    return b.op("transpose", [x], {"axes": [0, 2, 1, 3]})[0]


def _structural_mask(b: Builder, n: OnnxNode, q_len: int, kv_len: int, offset: int | str,
                     causal: bool, left: int, right: int) -> str | None:
    """The bool mask (True: attend) of the causal frontier and the sliding window, or None.

    ``offset`` is the count of valid keys before the query block: an int, or the name of an
    int64 ``[B]`` value (``nonpad_kv_seqlen - q_len``) for a mask of shape ``[B, 1, S, T]``.
    """
    if not causal and left < 0 and right < 0:
        return None
    i = b.computed((q_len, 1), "int64", "the query positions",
                   lambda: np.arange(q_len, dtype=np.int64).reshape(q_len, 1))
    j = b.computed((1, kv_len), "int64", "the key positions",
                   lambda: np.arange(kv_len, dtype=np.int64).reshape(1, kv_len))
    if isinstance(offset, int):
        shifted = b.constant(np.int64(offset))
    else:
        batch = b.shape(offset)[0]
        (shifted,) = b.op("reshape", [offset], {"newshape": [batch, 1, 1, 1]})
    # query position minus key position; folds while the mask fits the budget
    (pos,) = b.op("add", [shifted, i])
    (d,) = b.op("subtract", [pos, j])
    conditions = []
    if causal:
        conditions.append(b.op("greater_equal", [d, b.constant(np.int64(0))])[0])
    if left >= 0:
        conditions.append(b.op("less_equal", [d, b.constant(np.int64(left))])[0])
    if right >= 0:
        conditions.append(b.op("greater_equal", [d, b.constant(np.int64(-right))])[0])
    result = conditions[0]
    for other in conditions[1:]:
        (result,) = b.op("logical_and", [result, other])
    return result


def _and(b: Builder, a: str | None, c: str | None) -> str | None:
    if a is None:
        return c
    if c is None:
        return a
    return b.op("logical_and", [a, c])[0]


def _pad_mask(b: Builder, n: OnnxNode, mask: str, kv_len: int) -> str:
    """``attn_mask`` padded along its last axis to ``kv_len`` keys with masked entries."""
    shape = b.shape(mask)
    if not shape:
        return mask
    short = kv_len - shape[-1]
    if short < 0:
        raise n.fail(f"attn_mask's last axis ({shape[-1]}) is longer than the {kv_len} keys")
    if short == 0 or shape[-1] == 1:
        return mask
    dtype = b.dtype(mask)
    pad = b.filled(False if dtype == "bool" else -np.inf, (*shape[:-1], short), dtype)
    return b.op("concatenate", [mask, pad], {"axis": -1})[0]


def _attention(b: Builder, n: OnnxNode, nonpad_input: bool, windows: bool) -> list[str]:
    q, k, v = n.inputs[0], n.inputs[1], n.inputs[2]
    mask, past_key, past_value = n.input(3), n.input(4), n.input(5)
    nonpad = n.input(6) if nonpad_input else None
    rank = len(b.shape(q))
    if rank not in (3, 4) or len(b.shape(k)) != rank or len(b.shape(v)) != rank:
        raise n.fail(f"Q, K and V must all be 3-D or all 4-D, given {list(b.shape(q))}, "
                     f"{list(b.shape(k))}, {list(b.shape(v))}")
    q_heads, kv_heads = n.attr("q_num_heads", None), n.attr("kv_num_heads", None)
    if rank == 3:
        if q_heads is None or kv_heads is None:
            raise n.fail("3-D Q, K and V need the q_num_heads and kv_num_heads attributes")
        if q_heads < 1 or kv_heads < 1:
            raise n.fail(f"q_num_heads ({q_heads}) and kv_num_heads ({kv_heads}) must be >= 1")
        q = _split_heads(b, n, q, q_heads, "Q")
        k = _split_heads(b, n, k, kv_heads, "K")
        v = _split_heads(b, n, v, kv_heads, "V")
    elif windows and (q_heads is not None or kv_heads is not None):
        raise n.fail("q_num_heads and kv_num_heads must not be given for 4-D inputs")
    else:
        for given, actual, name in ((q_heads, b.shape(q)[1], "q_num_heads"),
                                    (kv_heads, b.shape(k)[1], "kv_num_heads")):
            if given is not None and given != actual:
                raise n.fail(f"{name} is {given} but the 4-D input has {actual} heads")
    if (past_key is None) != (past_value is None):
        raise n.fail("past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise n.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    past_len = 0
    if past_key is not None and past_value is not None:
        for past, now, name in ((past_key, k, "past_key"), (past_value, v, "past_value")):
            shape, want = b.shape(past), b.shape(now)
            if len(shape) != 4 or shape[:2] != want[:2] or shape[3] != want[3]:
                raise n.fail(f"{name} must be [{want[0]}, {want[1]}, past, {want[3]}], given "
                             f"{list(shape)}")
        past_len = b.shape(past_key)[2]
        (k,) = b.op("concatenate", [past_key, k], {"axis": 2})
        (v,) = b.op("concatenate", [past_value, v], {"axis": 2})
    present_key, present_value = k, v
    batch, _, q_len, head = b.shape(q)
    kv_len = b.shape(k)[2]

    scale = n.attr("scale", None)
    if scale is None:
        scale = 1.0 / math.sqrt(head)
    softcap = float(n.attr("softcap", 0.0))
    if softcap < 0:
        raise n.fail(f"softcap must be >= 0, given {softcap}")
    precision = n.attr("softmax_precision", None)
    if precision is not None and precision not in SOFTMAX_DTYPES:
        raise n.fail(f"softmax_precision {precision} is not a float type (1, 10, 11 or 16)")
    mode = n.attr("qk_matmul_output_mode", 0)
    if mode not in _QK_OUTPUT:
        raise n.fail(f"qk_matmul_output_mode must be 0, 1, 2 or 3, given {mode}")
    causal = _flag(n, "is_causal")
    left = int(n.attr("left_window_size", -1)) if windows else -1
    right = int(n.attr("right_window_size", -1)) if windows else -1
    if left < -1 or right < -1:
        raise n.fail(f"left_window_size ({left}) and right_window_size ({right}) must be -1 "
                     "or >= 0")

    bias: str | None = None
    allowed: str | None = None
    if mask is not None:
        if b.dtype(mask) not in ("bool", b.dtype(q)):
            raise n.fail(f"attn_mask must be bool or have Q's dtype {b.dtype(q)}, given "
                         f"{b.dtype(mask)}")
        mask = _pad_mask(b, n, mask, kv_len)
        if b.dtype(mask) == "bool":
            allowed = mask
        else:
            bias = mask
    offset: int | str = past_len
    padding: str | None = None
    if nonpad is not None:
        (lengths,) = b.op("cast", [nonpad], {"dtype": "int64"})
        if causal or left >= 0 or right >= 0:
            (offset,) = b.op("subtract", [lengths, b.constant(np.int64(q_len))])
        (col,) = b.op("reshape", [lengths], {"newshape": [batch, 1, 1, 1]})
        keys = b.computed((kv_len,), "int64", "the key positions",
                          lambda: np.arange(kv_len, dtype=np.int64))
        (padding,) = b.op("less", [keys, col])
    allowed = _and(b, allowed, _structural_mask(b, n, q_len, kv_len, offset, causal, left,
                                                right))
    allowed = _and(b, allowed, padding)

    want_qk = len(n.outputs) > 3 and bool(n.outputs[3])
    inputs = [q, k, v] + [x for x in (bias, allowed) if x is not None]
    outs = b.op("attention", inputs, {
        "scale": float(scale), "softcap": softcap,
        "softmax_dtype": SOFTMAX_DTYPES[precision] if precision is not None else None,
        "bias": bias is not None, "mask": allowed is not None,
        "qk_output": _QK_OUTPUT[mode] if want_qk else "none"})
    y = outs[0]
    if rank == 3:
        (y,) = b.op("transpose", [y], {"axes": [0, 2, 1, 3]})
        shape = b.shape(y)
        (y,) = b.op("reshape", [y], {"newshape": [shape[0], shape[1], shape[2] * shape[3]]})
    return [y, present_key, present_value, *outs[1:]]


@converter("Attention", since=23, until=23)
def attention_23(b: Builder, n: OnnxNode) -> list[str]:
    """Attention-23: no ``nonpad_kv_seqlen``, no sliding window."""
    return _attention(b, n, nonpad_input=False, windows=False)


@converter("Attention", since=24, until=24)
def attention_24(b: Builder, n: OnnxNode) -> list[str]:
    """Attention-24: adds the ``nonpad_kv_seqlen`` input."""
    return _attention(b, n, nonpad_input=True, windows=False)


@converter("Attention", since=25)
def attention_25(b: Builder, n: OnnxNode) -> list[str]:
    """Attention-25: adds ``left_window_size``/``right_window_size``."""
    return _attention(b, n, nonpad_input=True, windows=True)


# --------------------------------------------------------------------------------------------
# NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
# --------------------------------------------------------------------------------------------


def _loss(b: Builder, n: OnnxNode, scores: str) -> str:
    """``nll_loss`` of ``scores`` (log-probabilities) against the node's target and weight."""
    reduction = n.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise n.fail(f"reduction must be 'none', 'sum' or 'mean', given {reduction!r}")
    ignore = n.attr("ignore_index", None)
    target, weight = n.inputs[1], n.input(2)
    if len(b.shape(scores)) < 2:
        raise n.fail(f"the scores must be at least 2-D ([N, C, ...]), given "
                     f"{list(b.shape(scores))}")
    inputs = [scores, target] + ([weight] if weight is not None else [])
    return b.op("nll_loss", inputs, {"reduction": reduction, "weight": weight is not None,
                                     "ignore_index": None if ignore is None else int(ignore)})[0]


@converter("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(b: Builder, n: OnnxNode) -> list[str]:
    """``-input[n, target[n, ...], ...]``, weighted and reduced."""
    return [_loss(b, n, n.inputs[0])]


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(b: Builder, n: OnnxNode) -> list[str]:
    """``NegativeLogLikelihoodLoss`` of ``log_softmax`` over the class axis (and the latter as
    the optional second output)."""
    scores = n.inputs[0]
    if len(b.shape(scores)) < 2:
        raise n.fail(f"the scores must be at least 2-D ([N, C, ...]), given "
                     f"{list(b.shape(scores))}")
    (log_prob,) = b.op("log_softmax", [scores], {"axis": 1})
    return [_loss(b, n, log_prob), log_prob]


# --------------------------------------------------------------------------------------------
# RotaryEmbedding
# --------------------------------------------------------------------------------------------


def _last(b: Builder, x: str, begin: int, end: int, stride: int = 1) -> str:
    """``x[..., begin:end:stride]``."""
    axis = len(b.shape(x)) - 1
    return b.op("strided_slice", [x], {"begin": [begin], "end": [end], "strides": [stride],
                                       "axes": [axis]})[0]


@converter("RotaryEmbedding", since=23)
def rotary_embedding(b: Builder, n: OnnxNode) -> list[str]:
    """Rotate the first ``rotary_embedding_dim`` features of each head by the cached angles."""
    x, cos, sin, positions = n.inputs[0], n.inputs[1], n.inputs[2], n.input(3)
    interleaved = _flag(n, "interleaved")
    shape = b.shape(x)
    if len(shape) == 4:
        batch, _, seq, head = shape
        heads_axis = 1  # [B, H, S, D]: the caches broadcast as [B, 1, S, D/2]
        work = x
    elif len(shape) == 3:
        heads = int(n.attr("num_heads", 0))
        batch, seq, hidden = shape
        if heads < 1 or hidden % heads:
            raise n.fail(f"a 3-D input needs num_heads >= 1 dividing its hidden size {hidden}, "
                         f"given num_heads={heads}")
        head = hidden // heads
        heads_axis = 2  # [B, S, H, D]: the caches broadcast as [B, S, 1, D/2]
        (work,) = b.op("reshape", [x], {"newshape": [batch, seq, heads, head]})
    else:
        raise n.fail(f"the input must be 3-D or 4-D, given {list(shape)}")
    rot = int(n.attr("rotary_embedding_dim", 0)) or head
    if rot % 2 or not 0 < rot <= head:
        raise n.fail(f"rotary_embedding_dim must be even and at most the head size {head}, "
                     f"given {rot}")
    half = rot // 2
    if positions is not None:
        (cos,) = b.op("take", [cos, positions], {"axis": 0})
        (sin,) = b.op("take", [sin, positions], {"axis": 0})
    for cache, name in ((cos, "cos_cache"), (sin, "sin_cache")):
        if b.shape(cache) != (batch, seq, half):
            raise n.fail(f"{name} must give [{batch}, {seq}, {half}] (batch, sequence, "
                         f"rotary_embedding_dim / 2) values, gives {list(b.shape(cache))}")
    (cos,) = b.op("expand_dims", [cos], {"axis": heads_axis})
    (sin,) = b.op("expand_dims", [sin], {"axis": heads_axis})
    if interleaved:
        x1, x2 = _last(b, work, 0, rot, 2), _last(b, work, 1, rot, 2)
    else:
        x1, x2 = _last(b, work, 0, half), _last(b, work, half, rot)
    (real,) = b.op("subtract", [b.op("multiply", [cos, x1])[0], b.op("multiply", [sin, x2])[0]])
    (imag,) = b.op("add", [b.op("multiply", [sin, x1])[0], b.op("multiply", [cos, x2])[0]])
    if interleaved:
        (real,) = b.op("expand_dims", [real], {"axis": -1})
        (imag,) = b.op("expand_dims", [imag], {"axis": -1})
        (pairs,) = b.op("concatenate", [real, imag], {"axis": -1})
        parts = [b.op("reshape", [pairs], {"newshape": [*b.shape(x1)[:-1], rot]})[0]]
    else:
        parts = [real, imag]
    if rot < head:
        parts.append(_last(b, work, rot, head))
    (out,) = b.op("concatenate", parts, {"axis": -1})
    if len(shape) == 3:
        (out,) = b.op("reshape", [out], {"newshape": list(shape)})
    return [out]


# --------------------------------------------------------------------------------------------
# GridSample, AffineGrid, Col2Im
# --------------------------------------------------------------------------------------------

_GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_GRID_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}


def _grid_sample(b: Builder, n: OnnxNode, modes: dict[str, str], ranks: tuple[int, ...]
                 ) -> list[str]:
    x, grid = n.inputs[0], n.inputs[1]
    mode = n.attr("mode", next(iter(modes)))
    if mode not in modes:
        raise n.fail(f"mode must be one of {', '.join(modes)}, given {mode!r}")
    padding = n.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise n.fail(f"padding_mode must be 'zeros', 'border' or 'reflection', given "
                     f"{padding!r}")
    if len(b.shape(x)) not in ranks:
        raise n.fail(f"X must be {' or '.join(f'{r}-D' for r in ranks)}, given "
                     f"{list(b.shape(x))}")
    return b.op("grid_sample", [x, grid], {"mode": modes[mode], "padding": padding,
                                           "align_corners": _flag(n, "align_corners")})


@converter("GridSample", since=16, until=19)
def grid_sample_16(b: Builder, n: OnnxNode) -> list[str]:
    """GridSample-16: 4-D input, modes bilinear/nearest/bicubic."""
    return _grid_sample(b, n, _GRID_MODES_16, (4,))


@converter("GridSample", since=20)
def grid_sample_20(b: Builder, n: OnnxNode) -> list[str]:
    """GridSample-20: N-d input, modes linear/nearest/cubic."""
    return _grid_sample(b, n, _GRID_MODES_20, tuple(range(3, 9)))


def _grid_line(length: int, align: bool) -> Any:
    """The normalized coordinates of ``length`` pixels along one axis, in float64."""
    if align:
        return np.linspace(-1.0, 1.0, length) if length > 1 else np.array([-1.0])
    return (np.arange(length, dtype=np.float64) * 2 + 1) / length - 1


@converter("AffineGrid", since=20)
def affine_grid(b: Builder, n: OnnxNode) -> list[str]:
    """``theta`` applied to the normalized coordinates of every output pixel."""
    theta = n.inputs[0]
    size = const_ints(b, n.inputs[1], "size")
    align = _flag(n, "align_corners")
    dims = len(size) - 2
    if dims not in (2, 3) or min(size) < 1:
        raise n.fail(f"size must be [N, C, H, W] or [N, C, D, H, W] of positive values, given "
                     f"{size}")
    if b.shape(theta) != (size[0], dims, dims + 1):
        raise n.fail(f"theta must be [{size[0]}, {dims}, {dims + 1}] for size {size}, given "
                     f"{list(b.shape(theta))}")
    spatial = size[2:]
    dtype, pixels = b.dtype(theta), math.prod(spatial)
    rows = []  # homogeneous coordinates, innermost axis first: (x, y[, z], 1)
    for axis in reversed(range(dims)):
        length = spatial[axis]
        line = b.computed((length,), dtype, f"AffineGrid's coordinates along axis {axis + 2}",
                          partial(_grid_line, length, align))
        shape = [length if a == axis else 1 for a in range(dims)]
        (line,) = b.op("reshape", [line], {"newshape": shape})
        (mesh,) = b.op("broadcast_to", [line], {"shape": list(spatial)})
        rows.append(b.op("reshape", [mesh], {"newshape": [1, pixels]})[0])
    rows.append(b.filled(1, (1, pixels), dtype))
    # folds into one [dims + 1, pixels] constant while it fits the budget
    (base,) = b.op("concatenate", rows, {"axis": 0})
    (grid,) = b.op("matmul", [theta, base])  # [N, dims, prod(spatial)]
    (grid,) = b.op("transpose", [grid], {"axes": [0, 2, 1]})
    return b.op("reshape", [grid], {"newshape": [size[0], *spatial, dims]})


@converter("Col2Im", since=18)
def col2im(b: Builder, n: OnnxNode) -> list[str]:
    """Sum sliding blocks back into an image."""
    image = const_ints(b, n.inputs[1], "image_shape")
    block = const_ints(b, n.inputs[2], "block_shape")
    attrs: dict[str, Any] = {"image": image, "block": block}
    for key in ("strides", "dilations", "pads"):
        value = n.attr(key, None)
        if value is not None:
            attrs[key] = [int(v) for v in value]
    return b.op("col2im", [n.inputs[0]], attrs)


# --------------------------------------------------------------------------------------------
# CausalConvWithState
# --------------------------------------------------------------------------------------------


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(b: Builder, n: OnnxNode) -> list[str]:
    """A depthwise causal 1-D convolution continuing from ``past_state``: one grouped ``conv``
    over the state and the input; the last ``k - 1`` steps are the present state."""
    x, weight, bias, past = n.inputs[0], n.inputs[1], n.input(2), n.input(3)
    activation = n.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise n.fail(f"activation must be 'none', 'silu' or 'swish', given {activation!r}")
    if len(b.shape(x)) != 3:
        raise n.fail(f"input must be 3-D ([batch, channels, length]), given "
                     f"{list(b.shape(x))}")
    batch, channels, length = b.shape(x)
    if len(b.shape(weight)) != 3 or b.shape(weight)[:2] != (channels, 1):
        raise n.fail(f"weight must be [{channels}, 1, k], given {list(b.shape(weight))}")
    k = b.shape(weight)[2]
    if k < 1:
        raise n.fail("weight's kernel size must be >= 1")
    state_shape = (batch, channels, k - 1)
    if past is None:
        past = b.filled(0, state_shape, b.dtype(x))
    elif b.shape(past) != state_shape:
        raise n.fail(f"past_state must be {list(state_shape)}, given {list(b.shape(past))}")
    (padded,) = b.op("concatenate", [past, x], {"axis": 2})
    wide_in, taps = padded, weight
    if b.dtype(x) == "float16":  # sum the taps in float32, rounding once as a matmul does
        (wide_in,) = b.op("cast", [padded], {"dtype": "float32"})
        (taps,) = b.op("cast", [weight], {"dtype": "float32"})
    # one depthwise convolution over the state and the input: O(1) steps whatever k is
    (out,) = b.op("conv", [wide_in, taps], {"groups": channels})
    if b.dtype(out) != b.dtype(x):
        (out,) = b.op("cast", [out], {"dtype": b.dtype(x)})
    if bias is not None:
        (column,) = b.op("reshape", [bias], {"newshape": [channels, 1]})
        (out,) = b.op("add", [out, column])
    if activation != "none":
        wide = b.op("cast", [out], {"dtype": "float32"})[0] if b.dtype(out) == "float16" else out
        (gate,) = b.op("sigmoid", [wide])
        (out,) = b.op("multiply", [wide, gate])
        if b.dtype(out) != b.dtype(x):
            (out,) = b.op("cast", [out], {"dtype": b.dtype(x)})
    (state,) = b.op("strided_slice", [padded], {"begin": [length], "end": [length + k - 1],
                                                "axes": [2]})
    return [out, state]
