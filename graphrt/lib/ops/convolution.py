"""Standard ops: N-d convolutions and tensor contractions (numpy and cupy).

* ``conv``: data ``[N, C, *spatial]`` (any number >= 1 of spatial axes), weight
  ``[O, C/groups, *kernel]``, optional bias ``[O]``. ``padding`` lists the begin pads of every
  spatial axis, then the end pads (ONNX ``pads``). Lowered to im2col (one strided copy per kernel
  offset) and one batched ``matmul`` covering every group.
* ``conv_transpose``: weight ``[C, O/groups, *kernel]``; one ``matmul`` then col2im (a strided
  add per kernel offset). Output size per axis ``(in - 1) * stride + dilation * (k - 1) + 1 +
  output_padding - pad_begin - pad_end``; pads may be negative (the output grows, the extra
  positions hold only the bias), which is how ONNX ``output_shape`` larger than the natural size
  is expressed.
* ``einsum``: ``xp.einsum`` over any number of operands (ONNX ``Einsum``).

Matrix products of float16 run in float32 on numpy (which has no float16 BLAS) and natively
on cupy (tensor cores, float32 accumulation); bfloat16 always runs in float32. Overlapping
sums (col2im) accumulate in float32 for 16-bit floats; results are rounded once.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from math import prod
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    gemm_dtype,
    matmul,
    register_op,
)

__all__ = ["ConvAttrs", "ConvTransposeAttrs", "EinsumAttrs", "Window", "window_range"]

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]

_FLOATS = ("float16", "float32", "float64", "bfloat16")


class ConvAttrs(Attrs):
    """``conv``: per spatial axis strides, dilation (default 1), padding (begins then ends,
    default 0), and the number of groups."""

    strides: list[PosInt] | None = None
    padding: list[NonNegInt] | None = None
    dilation: list[PosInt] | None = None
    groups: PosInt = 1


class ConvTransposeAttrs(Attrs):
    """``conv_transpose``: as ``conv`` (pads may be negative), plus ``output_padding`` added at
    the end of each spatial axis."""

    strides: list[PosInt] | None = None
    padding: list[int] | None = None
    dilation: list[PosInt] | None = None
    groups: PosInt = 1
    output_padding: list[NonNegInt] | None = None


class EinsumAttrs(Attrs):
    """``einsum``: the equation in numpy's notation (explicit ``->`` output, ``...`` allowed)."""

    equation: str


# --------------------------------------------------------------------------------------------
# Helpers shared with pooling


def show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def per_axis(values: Sequence[int] | None, count: int, default: int, name: str) -> list[int]:
    """``values`` checked to hold ``count`` entries, or ``count`` times ``default``."""
    if values is None:
        return [default] * count
    if len(values) != count:
        raise OpError(f"{name} needs {count} values (one per spatial axis), given "
                      f"{list(values)}")
    return list(values)


def window_range(offset: int, pad: int, stride: int, n_src: int, n_dst: int
                 ) -> tuple[int, int, int]:
    """Indices ``d`` in ``[0, n_dst)`` with ``s = d*stride + offset - pad`` in ``[0, n_src)``.

    Returns ``(d_begin, d_end, s_begin)``; the matching ``s`` are ``s_begin, s_begin + stride,
    ...`` (``d_end - d_begin`` of them, possibly none).
    """
    begin = max(0, -((offset - pad) // stride))
    end = max(begin, min(n_dst, (n_src - 1 + pad - offset) // stride + 1))
    return begin, end, begin * stride + offset - pad


class Window:
    """The regions of a sliding-window op, one pair per kernel offset.

    For each offset (row-major over the kernel) with at least one valid position:
    ``(offset, dst, src)`` where ``dst`` slices the destination axes and ``src`` the source
    axes (``src`` positions are ``dst * stride + offset * dilation - pad``).
    """

    def __init__(self, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int],
                 pads: Sequence[int], src: Sequence[int], dst: Sequence[int]) -> None:
        self.pairs: list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]] = []
        for offset in itertools.product(*(range(k) for k in kernel)):
            dst_slices, src_slices = [], []
            for k, s, d, p, n_src, n_dst in zip(offset, strides, dilation, pads, src, dst,
                                                strict=True):
                d0, d1, s0 = window_range(k * d, p, s, n_src, n_dst)
                if d1 <= d0:
                    break
                dst_slices.append(slice(d0, d1))
                src_slices.append(slice(s0, s0 + (d1 - d0 - 1) * s + 1, s))
            else:
                self.pairs.append((offset, tuple(dst_slices), tuple(src_slices)))


def check_float(types: Sequence[TensorType], names: Sequence[str], op: str) -> str:
    """The one float dtype of every input."""
    first = types[0].dtype
    if first not in _FLOATS:
        raise OpError(f"{op}: {names[0]} must be one of {', '.join(_FLOATS)}, given {first}")
    for t, name in zip(types[1:], names[1:], strict=False):
        if t.dtype != first:
            raise OpError(f"{op}: {name} must have the dtype of {names[0]} ({first}), given "
                          f"{t.dtype}")
    return first


# --------------------------------------------------------------------------------------------
# conv and conv_transpose


def _conv_checks(types: Sequence[TensorType], groups: int, transpose: bool, op: str
                 ) -> tuple[str, int, int]:
    """Checks shared by both ops; returns (dtype, spatial rank, output channels)."""
    if len(types) not in (2, 3):
        raise OpError(f"{op}: expected 2 or 3 inputs (data, weight[, bias]), given {len(types)}")
    x, w = types[0], types[1]
    dtype = check_float(types, ["data", "weight", "bias"], op)
    if x.ndim < 3:
        raise OpError(f"{op}: data must be [N, C, *spatial] with at least one spatial axis, "
                      f"given {show(x)}")
    layout = "[C, O/groups, *kernel]" if transpose else "[O, C/groups, *kernel]"
    if w.ndim != x.ndim:
        raise OpError(f"{op}: weight must be {x.ndim}-D {layout}, given {show(w)}")
    if any(d < 1 for d in w.shape) or any(d < 1 for d in x.shape[1:]):
        raise OpError(f"{op}: data {show(x)} and weight {show(w)} must have no empty axis "
                      "(past the batch)")
    c = x.shape[1]
    if c % groups:
        raise OpError(f"{op}: data channels ({c}) must be divisible by groups ({groups})")
    if transpose:
        if w.shape[0] != c:
            raise OpError(f"{op}: weight {layout} must have C = {c} (the channels of data), "
                          f"given {show(w)}")
        out_channels = w.shape[1] * groups
    else:
        if w.shape[1] != c // groups:
            raise OpError(f"{op}: weight {layout} must have C/groups = {c // groups} input "
                          f"channels, given {show(w)}")
        out_channels = w.shape[0]
        if out_channels % groups:
            raise OpError(f"{op}: weight's output channels ({out_channels}) must be divisible "
                          f"by groups ({groups})")
    if len(types) == 3 and types[2].shape != (out_channels,):
        raise OpError(f"{op}: bias must be [{out_channels}] (the output channels), given "
                      f"{show(types[2])}")
    return dtype, x.ndim - 2, out_channels


def _conv_params(attrs: ConvAttrs | ConvTransposeAttrs, rank: int
                 ) -> tuple[list[int], list[int], list[int], list[int]]:
    strides = per_axis(attrs.strides, rank, 1, "strides")
    dilation = per_axis(attrs.dilation, rank, 1, "dilation")
    pads = per_axis(attrs.padding, 2 * rank, 0, "padding")
    return strides, dilation, pads[:rank], pads[rank:]


def _infer_conv(types: Sequence[TensorType], attrs: ConvAttrs, data: Sequence[Any]
                ) -> list[TensorType]:
    dtype, rank, o = _conv_checks(types, attrs.groups, False, "conv")
    strides, dilation, begin, end = _conv_params(attrs, rank)
    x, w = types[0], types[1]
    sizes = []
    for axis in range(rank):
        span = dilation[axis] * (w.shape[2 + axis] - 1) + 1
        padded = x.shape[2 + axis] + begin[axis] + end[axis]
        if padded < span:
            raise OpError(f"conv: the dilated kernel ({span}) is larger than the padded input "
                          f"({padded}) along spatial axis {axis}: the output would be empty")
        sizes.append((padded - span) // strides[axis] + 1)
    return [TensorType((x.shape[0], o, *sizes), dtype)]


def _add_bias(xp: Any, acc: Any, inputs: Sequence[Any]) -> None:
    if len(inputs) == 3:
        bias = inputs[2]
        xp.add(acc, bias.reshape(bias.shape + (1,) * (acc.ndim - 2)), out=acc)


def _finish(xp: Any, acc: Any, out: Any) -> None:
    if acc is not out:
        out[...] = acc


def _conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ConvAttrs) -> None:
    x, weight, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    rank = x.ndim - 2
    n = x.shape[0]
    o, cg = weight.shape[:2]
    kernel, space, out_space = weight.shape[2:], x.shape[2:], out.shape[2:]
    g = attrs.groups
    strides, dilation, begin, _ = _conv_params(attrs, rank)
    work = gemm_dtype(xp, x.dtype)
    if work != x.dtype:
        x, weight = x.astype(work), weight.astype(work)
    xg = x.reshape(n, g, cg, *space)
    ksize, osize = prod(kernel), prod(out_space)
    if ksize == 1 and all(s == 1 for s in strides) and not any(begin) and out_space == space:
        cols = xg.reshape(n, g, cg, osize)  # 1x1 convolution: data is already its im2col
    else:
        # cols[n, g, c, *k, *y] = data[n, g, c, *(y*stride + k*dilation - pad)], 0 in the pads
        cols = xp.zeros_like(x, shape=(n, g, cg, *kernel, *out_space))
        lead = (slice(None),) * 3
        for offset, dst, src in Window(kernel, strides, dilation, begin, space,
                                       out_space).pairs:
            cols[lead + offset + dst] = xg[lead + src]
        cols = cols.reshape(n, g, cg * ksize, osize)
    # [G, O/G, C/G*K] @ [N, G, C/G*K, OUT] -> [N, G, O/G, OUT]: one matmul.
    w = weight.reshape(g, o // g, cg * ksize)
    direct = work == out.dtype and bool(out.flags.c_contiguous)
    if direct:
        xp.matmul(w, cols, out=out.reshape(n, g, o // g, osize))
        acc = out
    else:
        acc = xp.matmul(w, cols).reshape(out.shape)
    _add_bias(xp, acc, inputs)
    _finish(xp, acc, out)


def _infer_conv_transpose(types: Sequence[TensorType], attrs: ConvTransposeAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    dtype, rank, o = _conv_checks(types, attrs.groups, True, "conv_transpose")
    strides, dilation, begin, end = _conv_params(attrs, rank)
    extra = per_axis(attrs.output_padding, rank, 0, "output_padding")
    x, w = types[0], types[1]
    sizes = []
    for axis in range(rank):
        full = ((x.shape[2 + axis] - 1) * strides[axis]
                + dilation[axis] * (w.shape[2 + axis] - 1) + 1 + extra[axis])
        size = full - begin[axis] - end[axis]
        if size < 1:
            raise OpError(f"conv_transpose: padding ({begin[axis]} + {end[axis]}) crops the "
                          f"whole output ({full}) along spatial axis {axis}")
        sizes.append(size)
    return [TensorType((x.shape[0], o, *sizes), dtype)]


def _conv_transpose(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: ConvTransposeAttrs) -> None:
    x, weight, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    rank = x.ndim - 2
    n, c = x.shape[:2]
    og = weight.shape[1]
    kernel, space, out_space = weight.shape[2:], x.shape[2:], out.shape[2:]
    o = out.shape[1]
    g = attrs.groups
    cg = c // g
    strides, dilation, begin, _ = _conv_params(attrs, rank)
    ksize, isize = prod(kernel), prod(space)
    # [G, O/G*K, C/G] @ [N, G, C/G, IN] -> cols [N, G, O/G*K, IN]: one matmul.
    wt = weight.reshape(g, cg, og * ksize).swapaxes(-1, -2)
    cols = matmul(xp, wt, x.reshape(n, g, cg, isize)).reshape(n, o, *kernel, *space)
    work = accumulator(out.dtype)  # the overlapping sums: float32 for 16-bit floats
    acc = out if work == out.dtype else xp.empty_like(out, dtype=work)
    acc[...] = 0
    lead = (slice(None),) * 2
    # col2im: out[n, o, *(y*stride + k*dilation - pad)] += cols[n, o, *k, *y]
    for offset, src, dst in Window(kernel, strides, dilation, begin, out_space, space).pairs:
        target = acc[lead + dst]
        xp.add(target, cols[lead + offset + src], out=target)
    _add_bias(xp, acc, inputs)
    _finish(xp, acc, out)


# --------------------------------------------------------------------------------------------
# einsum

_TERM = re.compile(r"^(?:[A-Za-z]|\.\.\.)*$")
_NUMERIC = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64")


def _einsum_terms(equation: str, count: int) -> tuple[list[str], str | None]:
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise OpError(f"einsum: equation {equation!r} has more than one '->'")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise OpError(f"einsum: equation {equation!r} names {len(terms)} operands, given "
                      f"{count}")
    for term in [*terms, rhs]:
        if not _TERM.match(term) or term.count("...") > 1:
            raise OpError(f"einsum: equation {equation!r} has a malformed term {term!r}")
    return terms, rhs if "->" in eq else None


def _infer_einsum(types: Sequence[TensorType], attrs: EinsumAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    if not types:
        raise OpError("einsum: expected at least one input")
    dtype = types[0].dtype
    shown = ", ".join(show(t) for t in types)
    if dtype not in _NUMERIC or any(t.dtype != dtype for t in types):
        raise OpError(f"einsum: inputs must share one numeric dtype, given {shown}")
    terms, rhs = _einsum_terms(attrs.equation, len(types))
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipses: list[tuple[int, ...]] = []
    for term, t in zip(terms, types, strict=True):
        letters = term.replace("...", "")
        if (len(letters) != t.ndim) if "..." not in term else (len(letters) > t.ndim):
            raise OpError(f"einsum: term {term!r} of {attrs.equation!r} does not fit input "
                          f"{show(t)}")
        head = term.index("...") if "..." in term else len(letters)
        n_ell = t.ndim - len(letters)
        dims = list(t.shape[:head]) + list(t.shape[head + n_ell:])
        ellipses.append(t.shape[head:head + n_ell])
        for label, dim in zip(letters, dims, strict=True):
            known = sizes.get(label, dim)
            if dim != known and 1 not in (dim, known):
                raise OpError(f"einsum: label {label!r} of {attrs.equation!r} has sizes "
                              f"{known} and {dim} (inputs {shown})")
            sizes[label] = max(dim, known)
            counts[label] = counts.get(label, 0) + 1
    try:
        ell = tuple(int(d) for d in np.broadcast_shapes(*ellipses))
    except ValueError:
        raise OpError(f"einsum: the '...' axes of inputs {shown} do not broadcast") from None
    if rhs is None:
        out = ell + tuple(sizes[label] for label in sorted(counts) if counts[label] == 1)
        return [TensorType(out, dtype)]
    letters = rhs.replace("...", "")
    for label in letters:
        if label not in sizes or letters.count(label) > 1:
            raise OpError(f"einsum: output label {label!r} of {attrs.equation!r} must appear "
                          "in an input, once in the output")
    head = rhs.index("...") if "..." in rhs else len(letters)
    if "..." not in rhs and any(ellipses):
        raise OpError(f"einsum: {attrs.equation!r} drops the '...' axes of inputs {shown}")
    out = (tuple(sizes[label] for label in letters[:head]) + (ell if "..." in rhs else ())
           + tuple(sizes[label] for label in letters[head:]))
    return [TensorType(out, dtype)]


def _einsum(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: EinsumAttrs) -> None:
    out = outputs[0]
    work = gemm_dtype(xp, out.dtype)
    operands = [a.astype(work) if a.dtype != work else a for a in inputs]
    out[...] = xp.einsum(attrs.equation, *operands, optimize=True)


register_op(OpDef(name="conv", attrs=ConvAttrs, arity=None, infer=_infer_conv, compute=_conv))
register_op(OpDef(name="conv_transpose", attrs=ConvTransposeAttrs, arity=None,
                  infer=_infer_conv_transpose, compute=_conv_transpose))
register_op(OpDef(name="einsum", attrs=EinsumAttrs, arity=None, infer=_infer_einsum,
                  compute=_einsum))
