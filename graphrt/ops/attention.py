"""Standard ops: attention and losses (used by the ONNX frontend; numpy and cupy).

``attention`` is scaled dot-product attention over ``[batch, heads, seq, head_size]`` tensors
with grouped key/value heads, an optional softcap, an additive bias and a boolean mask, and a
zero output for query rows that every key is masked from. float16 and bfloat16 compute in
float32 (the matrix products natively in float16 on cupy), rounding to the input dtype after
each step ONNX's reference rounds at.

``grid_sample`` samples N-d images at normalized grid coordinates (nearest, linear or cubic;
zeros, border or reflection padding). ``col2im`` sums sliding blocks back into an N-d image.

``nll_loss`` is the negative log-likelihood loss over class axis 1 with per-class weights, an
ignored target value and a reduction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    broadcast,
    gemm_dtype,
    matmul,
    register_op,
    window_attrs,
)

__all__ = ["AttentionAttrs", "Col2ImAttrs", "GridSampleAttrs", "NllLossAttrs"]

_FLOATS = ("float16", "float32", "float64", "bfloat16")
_LOW_PRECISION = ("float16", "bfloat16")
FloatDtype = Literal["float16", "float32", "float64", "bfloat16"]


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _np_dtype(name: str) -> Any:
    """numpy's dtype for ``name`` (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _matmul(xp: Any, a: Any, b: Any, dtype: Any) -> Any:
    """``a @ b`` of operands holding ``dtype`` values (in the work dtype), in the work dtype:
    the product runs in :func:`gemm_dtype` (native float16 on cupy)."""
    gemm = gemm_dtype(xp, dtype)
    result = matmul(xp, a.astype(gemm, copy=False), b.astype(gemm, copy=False))
    return result.astype(accumulator(dtype), copy=False)


def _select(xp: Any, cond: Any, a: Any, b: Any, dtype: Any) -> Any:
    """``where(cond, a, b)`` as a new array on ``cond``'s device (numpy's ``where`` drops the
    sim device's array type; ``copyto`` writes into an array made like ``cond``)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in (cond, a, b)))
    out = xp.empty_like(cond, dtype=dtype, shape=shape)
    xp.copyto(out, b)
    xp.copyto(out, a, where=cond)
    return out


# --------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------


class AttentionAttrs(Attrs):
    """``attention``: ``softmax(q·kᵀ·scale (softcapped) + bias, masked) · v``.

    Attributes:
        scale: the factor applied to ``q·kᵀ`` (as ``sqrt(scale)`` on each of q and k, rounded
            to the input dtype).
        softcap: when > 0, scores become ``softcap * tanh(scores / softcap)`` before the bias.
        softmax_dtype: the dtype the softmax is rounded to (None: the input dtype).
        bias: an additive float input (broadcast to ``[B, Hq, S, T]``) follows ``v``.
        mask: a bool input (True: attend) follows ``v`` (and the bias).
        qk_output: a second output of the scores: ``"scores"`` after the softcap, ``"biased"``
            after the bias and mask, ``"probs"`` after the softmax; ``"none"``: no such output.
    """

    scale: float
    softcap: float = Field(default=0.0, ge=0.0)
    softmax_dtype: FloatDtype | None = None
    bias: bool = False
    mask: bool = False
    qk_output: Literal["none", "scores", "biased", "probs"] = "none"


def _attention_outputs(attrs: AttentionAttrs) -> int:
    return 1 if attrs.qk_output == "none" else 2


def _infer_attention(types: Sequence[TensorType], attrs: AttentionAttrs, data: Sequence[Any]
                     ) -> list[TensorType]:
    expected = 3 + int(attrs.bias) + int(attrs.mask)
    if len(types) != expected:
        raise OpError(f"attention takes {expected} inputs (q, k, v"
                      f"{', bias' if attrs.bias else ''}{', mask' if attrs.mask else ''}), "
                      f"given {len(types)}")
    q, k, v = types[:3]
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if t.ndim != 4:
            raise OpError(f"{name} must be 4-D ([batch, heads, seq, head_size]), given "
                          f"{_show(t)}")
        if t.dtype != q.dtype:
            raise OpError(f"{name} must have q's dtype ({q.dtype}), given {t.dtype}")
    if q.dtype not in _FLOATS:
        raise OpError(f"q must be one of {', '.join(_FLOATS)}, given {q.dtype}")
    batch, q_heads, q_len, head = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise OpError(f"q, k and v must have one batch size, given q {_show(q)}, k {_show(k)}, "
                      f"v {_show(v)}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise OpError(f"k and v must have the same heads and sequence length, given k "
                      f"{_show(k)} and v {_show(v)}")
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if kv_heads < 1 or q_heads % kv_heads:
        raise OpError(f"q's heads ({q_heads}) must be a multiple of k's heads ({kv_heads})")
    if k.shape[3] != head:
        raise OpError(f"q and k must have one head size, given q {_show(q)} and k {_show(k)}")
    full = (batch, q_heads, q_len, kv_len)
    extra = list(types[3:])
    for present, name, ok in ((attrs.bias, "bias", _FLOATS), (attrs.mask, "mask", ("bool",))):
        if not present:
            continue
        t = extra.pop(0)
        if t.dtype not in ok:
            raise OpError(f"{name} must be one of {', '.join(ok)}, given {t.dtype}")
        if t.ndim > 4 or broadcast(t.shape, full) != full:
            raise OpError(f"{name} {_show(t)} does not broadcast to the scores {list(full)}")
    out = [TensorType((batch, q_heads, q_len, v.shape[3]), q.dtype)]
    if attrs.qk_output != "none":
        out.append(TensorType(full, q.dtype))
    return out


def _attention(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
               attrs: AttentionAttrs) -> None:
    q, k, v = inputs[:3]
    extra = list(inputs[3:])
    bias = extra.pop(0) if attrs.bias else None
    mask = extra.pop(0) if attrs.mask else None
    dtype = q.dtype
    work = accumulator(dtype)
    low = work != dtype

    def rnd(x: Any) -> Any:
        """``x`` rounded to the input dtype (kept in the work dtype)."""
        return x.astype(dtype).astype(work) if low else x

    batch, q_heads, q_len, head = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    reps = q_heads // kv_heads
    root = float(np.asarray(math.sqrt(attrs.scale), dtype=dtype).astype(np.float64))
    qs = rnd(q.astype(work) * work.type(root)).reshape(batch, kv_heads, reps, q_len, head)
    ks = rnd(k.astype(work) * work.type(root))[:, :, None]
    scores = rnd(_matmul(xp, qs, ks.swapaxes(-1, -2), dtype)).reshape(batch, q_heads, q_len,
                                                                        kv_len)
    if attrs.softcap > 0:
        cap = work.type(attrs.softcap)
        scores = rnd(rnd(xp.tanh(rnd(scores / cap))) * cap)
    qk: Any = scores if attrs.qk_output == "scores" else None
    masked_rows = None
    if bias is not None or mask is not None:
        neg_inf = work.type(-np.inf)
        eff = bias.astype(work) if bias is not None else xp.zeros_like(mask, dtype=work)
        if mask is not None:
            eff = _select(xp, mask, eff, neg_inf, work)
        scores = rnd(scores + eff)
        masked_rows = xp.all(eff == neg_inf, axis=-1, keepdims=True)
    if attrs.qk_output == "biased":
        qk = scores
    sm_dtype = _np_dtype(attrs.softmax_dtype) if attrs.softmax_dtype else dtype
    sm_work = accumulator(sm_dtype)
    x = scores.astype(sm_work)
    top = xp.max(x, axis=-1, keepdims=True)
    top = _select(xp, xp.isneginf(top), sm_work.type(0), top, sm_work)
    e = xp.exp(x - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    total = _select(xp, total == 0, sm_work.type(1), total, sm_work)
    probs = e / total
    if sm_work != sm_dtype:
        probs = probs.astype(sm_dtype).astype(sm_work)
    if masked_rows is not None:
        probs = _select(xp, masked_rows, sm_work.type(0), probs, sm_work)
    probs = probs.astype(dtype).astype(work)
    if attrs.qk_output == "probs":
        qk = probs
    vs = v.astype(work)[:, :, None]
    y = _matmul(xp, probs.reshape(batch, kv_heads, reps, q_len, kv_len), vs, dtype)
    outputs[0][...] = y.reshape(outputs[0].shape).astype(dtype)
    if qk is not None:
        outputs[1][...] = qk.astype(dtype)


register_op(OpDef(name="attention", attrs=AttentionAttrs, arity=None, infer=_infer_attention,
                  compute=_attention, num_outputs=_attention_outputs))


# --------------------------------------------------------------------------------------------
# nll_loss
# --------------------------------------------------------------------------------------------


class NllLossAttrs(Attrs):
    """``nll_loss``: ``-x[n, target[n, ...], ...] * weight[target]`` reduced.

    Attributes:
        reduction: ``"none"`` (shape of target), ``"sum"``, or ``"mean"`` (the sum divided by
            the sum of the weights of the targets that are not ignored).
        ignore_index: a target value that contributes nothing (None: every target counts).
        weight: a per-class weight input (``[C]``) follows the target.
    """

    reduction: Literal["none", "sum", "mean"] = "mean"
    ignore_index: int | None = None
    weight: bool = False


def _infer_nll_loss(types: Sequence[TensorType], attrs: NllLossAttrs, data: Sequence[Any]
                    ) -> list[TensorType]:
    expected = 3 if attrs.weight else 2
    if len(types) != expected:
        raise OpError(f"nll_loss takes {expected} inputs (x, target"
                      f"{', weight' if attrs.weight else ''}), given {len(types)}")
    x, target = types[:2]
    if x.dtype not in _FLOATS:
        raise OpError(f"x must be one of {', '.join(_FLOATS)}, given {x.dtype}")
    if x.ndim < 2:
        raise OpError(f"x must be at least 2-D ([N, C, ...]), given {_show(x)}")
    if np.dtype(target.dtype).kind not in "iu":
        raise OpError(f"target must have an integer dtype, given {target.dtype}")
    if target.shape != (x.shape[0], *x.shape[2:]):
        raise OpError(f"target must have shape {[x.shape[0], *x.shape[2:]]} for x {_show(x)}, "
                      f"given {_show(target)}")
    if attrs.weight:
        w = types[2]
        if w.shape != (x.shape[1],) or w.dtype != x.dtype:
            raise OpError(f"weight must be {x.dtype}[{x.shape[1]}], given {_show(w)}")
    shape = target.shape if attrs.reduction == "none" else ()
    return [TensorType(shape, x.dtype)]


def _nll_loss(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: NllLossAttrs) -> None:
    x, target = inputs[:2]
    classes = x.shape[1]
    work = accumulator(x.dtype)
    index = target.astype(np.int64)
    keep = None if attrs.ignore_index is None else index != attrs.ignore_index
    safe = xp.clip(index, 0, classes - 1)
    picked = xp.take_along_axis(x, xp.expand_dims(safe, 1), axis=1)
    loss = -xp.squeeze(picked, axis=1).astype(work)
    if attrs.weight:
        w = xp.take(inputs[2].astype(work), safe)
    else:
        w = xp.ones_like(loss) if keep is not None else None
    if w is not None and keep is not None:
        w = _select(xp, keep, w, work.type(0), work)
    if w is not None:
        loss = loss * w
    if attrs.reduction == "none":
        outputs[0][...] = loss.astype(x.dtype)
    elif attrs.reduction == "sum":
        outputs[0][...] = xp.sum(loss).astype(x.dtype)
    elif w is None:
        outputs[0][...] = xp.mean(loss).astype(x.dtype)
    else:
        outputs[0][...] = (xp.sum(loss) / xp.sum(w)).astype(x.dtype)


register_op(OpDef(name="nll_loss", attrs=NllLossAttrs, arity=None, infer=_infer_nll_loss,
                  compute=_nll_loss))


# --------------------------------------------------------------------------------------------
# grid_sample
# --------------------------------------------------------------------------------------------


class GridSampleAttrs(Attrs):
    """``grid_sample``: ``y[n, c, o...] = x[n, c]`` interpolated at ``grid[n, o..., :]``.

    The grid's last axis holds normalized coordinates in ``[-1, 1]``, innermost spatial axis
    first (``(x, y)`` for 2-D, ``(x, y, z)`` for 3-D), as in PyTorch and ONNX.

    Attributes:
        mode: ``"nearest"`` (round half to even), ``"linear"`` or ``"cubic"`` (Keys, a=-0.75).
        padding: what lies outside the image: ``"zeros"``, the ``"border"`` value, or the image
            ``"reflection"``.
        align_corners: -1 and 1 are the centers of the corner pixels (True) or their outer
            edges (False).
    """

    mode: Literal["nearest", "linear", "cubic"] = "linear"
    padding: Literal["zeros", "border", "reflection"] = "zeros"
    align_corners: bool = False


def _infer_grid_sample(types: Sequence[TensorType], attrs: GridSampleAttrs, data: Sequence[Any]
                       ) -> list[TensorType]:
    if len(types) != 2:
        raise OpError(f"grid_sample takes 2 inputs (x, grid), given {len(types)}")
    x, grid = types
    if x.dtype not in _FLOATS or grid.dtype not in _FLOATS:
        raise OpError(f"x and grid must be floats, given {x.dtype} and {grid.dtype}")
    dims = x.ndim - 2
    if dims < 1:
        raise OpError(f"x must be at least 3-D ([N, C, spatial...]), given {_show(x)}")
    if grid.ndim != dims + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != dims:
        raise OpError(f"grid must be [{x.shape[0]}, out spatial ({dims} axes)..., {dims}] for "
                      f"x {_show(x)}, given {_show(grid)}")
    return [TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def _reflect(xp: Any, v: Any, lo: float, hi: float) -> Any:
    """``v`` folded into ``[lo, hi]`` by reflecting at the borders."""
    span = hi - lo
    if span <= 0:
        return xp.zeros_like(v) + v.dtype.type(lo)
    below = v < lo
    dist = _select(xp, below, lo - v, v - hi, v.dtype)
    folds = xp.trunc(dist / span)
    rest = dist - folds * span
    even = xp.fmod(folds, 2) == 0
    low_side = lo + rest
    high_side = hi - rest
    folded = _select(xp, below, _select(xp, even, low_side, high_side, v.dtype),
                     _select(xp, even, high_side, low_side, v.dtype), v.dtype)
    return _select(xp, (v < lo) | (v > hi), folded, v, v.dtype)


def _cubic_weights(t: Any) -> list[Any]:
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 from floor(x)."""
    a = -0.75
    u, w = t + 1, 1 - t
    v = 2 - t
    return [((a * u - 5 * a) * u + 8 * a) * u - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * w - (a + 3)) * w * w + 1,
            ((a * v - 5 * a) * v + 8 * a) * v - 4 * a]


def _grid_sample(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: GridSampleAttrs) -> None:
    x, grid = inputs
    out = outputs[0]
    if out.size == 0:
        return
    batch, channels, *sizes = x.shape
    dims = len(sizes)
    cdtype = np.dtype("float64") if grid.dtype == np.float64 else np.dtype("float32")
    work = accumulator(x.dtype)
    flat_x = x.reshape(batch, channels, -1).astype(work)
    q = int(np.prod(grid.shape[1:-1]))
    taps: list[list[tuple[Any, Any]]] = []  # per spatial axis: (index, weight or None) per tap
    valid_masks: list[list[Any]] = []
    for axis, size in enumerate(sizes):
        g = grid[..., dims - 1 - axis].reshape(batch, q).astype(cdtype)
        if attrs.align_corners:
            c = (g + 1) / 2 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            c = ((g + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        if attrs.mode == "nearest":
            c = xp.rint(c)
        if attrs.padding == "border":
            c = _select(xp, (c < lo) | (c > hi), xp.clip(c, 0, size - 1), c, c.dtype)
        elif attrs.padding == "reflection":
            c = _reflect(xp, c, lo, hi)
        if attrs.mode == "nearest":
            starts, weights = [xp.trunc(c)], [None]
        else:
            base = xp.floor(c)
            t = (c - base).astype(work)
            if attrs.mode == "linear":
                starts, weights = [base, base + 1], [1 - t, t]
            else:
                starts = [base - 1, base, base + 1, base + 2]
                weights = _cubic_weights(t)
        axis_taps, axis_valid = [], []
        for start, tap_weight in zip(starts, weights, strict=True):
            if attrs.padding == "zeros":
                axis_valid.append((start >= 0) & (start <= size - 1))
            elif attrs.padding == "reflection":
                start = xp.trunc(_reflect(xp, start, lo, hi))
                axis_valid.append(None)
            else:
                axis_valid.append(None)
            index = xp.clip(start, 0, size - 1).astype(np.int64)
            axis_taps.append((index, tap_weight))
        taps.append(axis_taps)
        valid_masks.append(axis_valid)
    strides = [int(np.prod(sizes[k + 1:])) for k in range(dims)]
    total: Any = None
    for combo in itertools.product(*(range(len(t)) for t in taps)):
        flat: Any = None
        weight: Any = None
        valid: Any = None
        for axis, k in enumerate(combo):
            index, w = taps[axis][k]
            term = index * strides[axis]
            flat = term if flat is None else flat + term
            if w is not None:
                weight = w if weight is None else weight * w
            ok = valid_masks[axis][k]
            if ok is not None:
                valid = ok if valid is None else valid & ok
        values = xp.take_along_axis(flat_x, flat[:, None, :], axis=2)
        if valid is not None:
            values = _select(xp, valid[:, None, :], values, work.type(0), work)
        if weight is not None:
            values = values * weight[:, None, :]
        total = values if total is None else total + values
    out[...] = total.reshape(out.shape).astype(out.dtype)


register_op(OpDef(name="grid_sample", attrs=GridSampleAttrs, arity=2, infer=_infer_grid_sample,
                  compute=_grid_sample))


# --------------------------------------------------------------------------------------------
# col2im
# --------------------------------------------------------------------------------------------


class Col2ImAttrs(Attrs):
    """``col2im``: ``[N, C*prod(block), L]`` columns summed into an ``[N, C, *image]`` image.

    Attributes:
        image: the image's spatial shape.
        block: the sliding block's shape.
        strides, dilations: per spatial axis (default 1).
        pads: begin pads then end pads per spatial axis (default 0).
    """

    image: list[int] = Field(min_length=1)
    block: list[int] = Field(min_length=1)
    strides: list[int] | None = None
    dilations: list[int] | None = None
    pads: list[int] | None = None


def _col2im_plan(attrs: Col2ImAttrs) -> tuple[list[int], list[int], list[int], list[int]]:
    """Strides, dilations, begin+end pads and the block count per axis."""
    dims = len(attrs.image)
    if len(attrs.block) != dims:
        raise OpError(f"block {attrs.block} and image {attrs.image} must have one rank")
    strides, dilations, pads = window_attrs(attrs.strides, attrs.dilations, attrs.pads, dims)
    if min(attrs.block) < 1:
        raise OpError(f"block {attrs.block} must be >= 1")
    counts = []
    for k in range(dims):
        span = dilations[k] * (attrs.block[k] - 1) + 1
        count = (attrs.image[k] + pads[k] + pads[k + dims] - span) // strides[k] + 1
        if count < 1:
            raise OpError(f"the block {attrs.block} (dilations {dilations}) does not fit the "
                          f"padded image {attrs.image} (pads {pads}) along axis {k}")
        counts.append(count)
    return strides, dilations, pads, counts


def _infer_col2im(types: Sequence[TensorType], attrs: Col2ImAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"col2im takes 1 input, given {len(types)}")
    (x,) = types
    _, _, _, counts = _col2im_plan(attrs)
    if x.ndim != 3:
        raise OpError(f"the columns must be 3-D ([N, C*prod(block), L]), given {_show(x)}")
    size = int(np.prod(attrs.block))
    if x.shape[1] % size:
        raise OpError(f"axis 1 of the columns ({x.shape[1]}) is not a multiple of the block "
                      f"size {size} (block {attrs.block})")
    if x.shape[2] != int(np.prod(counts)):
        raise OpError(f"axis 2 of the columns ({x.shape[2]}) must be the number of blocks "
                      f"{counts} = {int(np.prod(counts))}")
    return [TensorType((x.shape[0], x.shape[1] // size, *attrs.image), x.dtype)]


def _col2im(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: Col2ImAttrs) -> None:
    (x,), out = inputs, outputs[0]
    strides, dilations, pads, counts = _col2im_plan(attrs)
    dims = len(attrs.image)
    batch, channels = out.shape[:2]
    cols = x.reshape(batch, channels, *attrs.block, *counts)
    padded_shape = [attrs.image[k] + pads[k] + pads[k + dims] for k in range(dims)]
    work = accumulator(x.dtype)
    padded = xp.zeros_like(x, dtype=work, shape=(batch, channels, *padded_shape))
    for offset in itertools.product(*(range(b) for b in attrs.block)):
        where = tuple(slice(offset[k] * dilations[k],
                            offset[k] * dilations[k] + strides[k] * (counts[k] - 1) + 1,
                            strides[k]) for k in range(dims))
        target = (slice(None), slice(None), *where)
        source = (slice(None), slice(None), *offset)
        padded[target] += cols[source]
    crop = tuple(slice(pads[k], pads[k] + attrs.image[k]) for k in range(dims))
    kept = (slice(None), slice(None), *crop)
    out[...] = padded[kept].astype(out.dtype)


register_op(OpDef(name="col2im", attrs=Col2ImAttrs, arity=1, infer=_infer_col2im,
                  compute=_col2im))
