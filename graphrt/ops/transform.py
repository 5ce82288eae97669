"""Standard ops: transform (shape, layout and indexing ops).

Every op here moves or selects elements without arithmetic: reshape, transpose, flatten,
expand_dims, squeeze, concatenate, split, strided_slice, dynamic_strided_slice, take, gather,
pad, layout_transform and bitcast (the input's bytes read as another dtype). Each writes its
preallocated output(s) in one pass where it can (``xp.copyto`` from a view of the input, or a
write through a view of the output).

Only ``dynamic_strided_slice`` is data dependent: its output shape follows the values of its
begin/end/strides tensors, which ``infer`` receives as host numpy arrays; its compute then
reads them on the device.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal

import numpy as np

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    check_fill,
    normalize_axis,
    register_op,
)

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------
# helpers


def _one(types: Sequence[TensorType], name: str, count: int = 1) -> None:
    if len(types) != count:
        raise OpError(f"{name}: expected {count} input(s), given {len(types)}")


def _size(shape: Sequence[int]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def _along(axis: int, index: slice) -> tuple[slice, ...]:
    """An index tuple applying ``index`` to ``axis`` (all of every earlier axis)."""
    return (slice(None),) * axis + (index,)


def _is_integer(dtype: str) -> bool:
    return np.dtype(dtype).kind in "iu"


def _host_ints(xp: Any, arr: Any) -> list[int]:
    """The values of a 1-D integer array on any device as Python ints (a host copy).

    numpy and SimArray (a numpy subclass) are read through a plain ndarray view; cupy arrays
    through ``xp.asnumpy``.
    """
    if isinstance(arr, np.ndarray):
        host = arr.view(np.ndarray)
    elif hasattr(xp, "asnumpy"):
        host = xp.asnumpy(arr)
    else:
        host = np.asarray(arr)
    return [int(v) for v in np.asarray(host).reshape(-1).tolist()]


def _check_index_range(xp: Any, idx: Any, n: int, name: str) -> bool:
    """Raise OpError if any index is outside ``[-n, n)``; return whether any is negative."""
    if idx.size == 0:
        return False
    low, high = int(idx.min()), int(idx.max())
    if low < -n or high >= n:
        raise OpError(f"{name}: indices must lie in [{-n}, {n}), given values in "
                      f"[{low}, {high}]")
    return low < 0


def _wide_enough(xp: Any, idx: Any, n: int) -> Any:
    """``idx`` widened to int64 when ``n`` does not fit its dtype (keeps index arithmetic exact)."""
    if n > np.iinfo(idx.dtype).max or idx.dtype.kind == "u":
        return idx.astype(xp.int64)
    return idx


# ---------------------------------------------------------------------------------------------
# reshape


class ReshapeAttrs(Attrs):
    """``newshape``: the output shape; one ``-1`` is inferred, ``0`` copies the input's dim
    at the same position (ONNX ``allowzero=0``, TVM)."""

    newshape: list[int]


def _reshape_infer(types: Sequence[TensorType], attrs: ReshapeAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    _one(types, "reshape")
    (src,) = types
    shape: list[int] = []
    infer_at: int | None = None
    for i, dim in enumerate(attrs.newshape):
        if dim == 0:
            if i >= src.ndim:
                raise OpError(f"reshape: newshape {attrs.newshape} copies dim {i} (0) but the "
                              f"input has only {src.ndim} dims (shape {list(src.shape)})")
            shape.append(src.shape[i])
        elif dim == -1:
            if infer_at is not None:
                raise OpError(f"reshape: newshape {attrs.newshape} has more than one -1")
            infer_at = i
            shape.append(1)
        elif dim < -1:
            raise OpError(f"reshape: newshape {attrs.newshape} has {dim}; expected dims >= 0 "
                          f"or a single -1")
        else:
            shape.append(dim)
    size = _size(src.shape)
    if infer_at is not None:
        known = _size(shape)
        if known == 0 or size % known:
            raise OpError(f"reshape: cannot infer the -1 of newshape {attrs.newshape} for an "
                          f"input of shape {list(src.shape)} ({size} elements)")
        shape[infer_at] = size // known
    if _size(shape) != size:
        raise OpError(f"reshape: newshape {attrs.newshape} gives shape {shape} "
                      f"({_size(shape)} elements); the input has shape {list(src.shape)} "
                      f"({size} elements)")
    return [TensorType(tuple(shape), src.dtype)]


def _reshape_copy(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: Any) -> None:
    """The compute of every op that only changes the shape: one copy into the output."""
    xp.copyto(outputs[0], inputs[0].reshape(outputs[0].shape))


register_op(OpDef(name="reshape", attrs=ReshapeAttrs, arity=1, infer=_reshape_infer,
                  compute=_reshape_copy))


# ---------------------------------------------------------------------------------------------
# transpose


class TransposeAttrs(Attrs):
    """``axes``: a permutation of the input's axes (negative allowed); None reverses them."""

    axes: list[int] | None = None


def _perm(axes: list[int] | None, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    if len(axes) != ndim:
        raise OpError(f"transpose: axes {axes} must be a permutation of {ndim} axes, given "
                      f"{len(axes)}")
    perm = tuple(normalize_axis(a, ndim) for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise OpError(f"transpose: axes {axes} is not a permutation of range({ndim})")
    return perm


def _transpose_infer(types: Sequence[TensorType], attrs: TransposeAttrs,
                     data: Sequence[Any]) -> list[TensorType]:
    _one(types, "transpose")
    (src,) = types
    perm = _perm(attrs.axes, src.ndim)
    return [TensorType(tuple(src.shape[a] for a in perm), src.dtype)]


def _transpose_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: TransposeAttrs) -> None:
    x = inputs[0]
    xp.copyto(outputs[0], xp.transpose(x, _perm(attrs.axes, x.ndim)))


register_op(OpDef(name="transpose", attrs=TransposeAttrs, arity=1, infer=_transpose_infer,
                  compute=_transpose_compute))


# ---------------------------------------------------------------------------------------------
# flatten


class FlattenAttrs(Attrs):
    """``axis`` in ``[-r, r]``: output is 2-D ``(_size(shape[:axis]), _size(shape[axis:]))``
    (ONNX Flatten)."""

    axis: int = 1


def _flatten_infer(types: Sequence[TensorType], attrs: FlattenAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    _one(types, "flatten")
    (src,) = types
    if not -src.ndim <= attrs.axis <= src.ndim:
        raise OpError(f"flatten: axis {attrs.axis} must lie in [{-src.ndim}, {src.ndim}] for "
                      f"a {src.ndim}-D input")
    axis = attrs.axis + src.ndim if attrs.axis < 0 else attrs.axis
    return [TensorType((_size(src.shape[:axis]), _size(src.shape[axis:])), src.dtype)]


register_op(OpDef(name="flatten", attrs=FlattenAttrs, arity=1, infer=_flatten_infer,
                  compute=_reshape_copy))


# ---------------------------------------------------------------------------------------------
# expand_dims


class ExpandDimsAttrs(Attrs):
    """Insert ``num_newaxis`` unit dims at ``axis`` in ``[-ndim-1, ndim]`` (TVM)."""

    axis: int
    num_newaxis: int = 1


def _expand_dims_infer(types: Sequence[TensorType], attrs: ExpandDimsAttrs,
                       data: Sequence[Any]) -> list[TensorType]:
    _one(types, "expand_dims")
    (src,) = types
    if not -src.ndim - 1 <= attrs.axis <= src.ndim:
        raise OpError(f"expand_dims: axis {attrs.axis} must lie in [{-src.ndim - 1}, "
                      f"{src.ndim}] for a {src.ndim}-D input")
    if attrs.num_newaxis < 0:
        raise OpError(f"expand_dims: num_newaxis must be >= 0, given {attrs.num_newaxis}")
    if src.ndim + attrs.num_newaxis > MAX_DIMS:  # checked before the shape is built
        raise OpError(f"expand_dims: num_newaxis {attrs.num_newaxis} would give a "
                      f"{src.ndim + attrs.num_newaxis}-D result; arrays have at most {MAX_DIMS} "
                      "dimensions")
    axis = attrs.axis + src.ndim + 1 if attrs.axis < 0 else attrs.axis
    shape = (*src.shape[:axis], *(1,) * attrs.num_newaxis, *src.shape[axis:])
    return [TensorType(shape, src.dtype)]


MAX_DIMS = 64
"""Dimensions an array may have (numpy's limit, and cupy's)."""


register_op(OpDef(name="expand_dims", attrs=ExpandDimsAttrs, arity=1, infer=_expand_dims_infer,
                  compute=_reshape_copy))


# ---------------------------------------------------------------------------------------------
# squeeze


class SqueezeAttrs(Attrs):
    """``axis``: the unit dims to remove (negative allowed); None removes every unit dim."""

    axis: list[int] | None = None


def _squeeze_infer(types: Sequence[TensorType], attrs: SqueezeAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    _one(types, "squeeze")
    (src,) = types
    if attrs.axis is None:
        drop = {i for i, d in enumerate(src.shape) if d == 1}
    else:
        drop = set()
        for a in attrs.axis:
            i = normalize_axis(a, src.ndim)
            if i in drop:
                raise OpError(f"squeeze: axis {attrs.axis} names axis {i} twice")
            if src.shape[i] != 1:
                raise OpError(f"squeeze: axis {a} has size {src.shape[i]}, expected 1 "
                              f"(input shape {list(src.shape)})")
            drop.add(i)
    shape = tuple(d for i, d in enumerate(src.shape) if i not in drop)
    return [TensorType(shape, src.dtype)]


register_op(OpDef(name="squeeze", attrs=SqueezeAttrs, arity=1, infer=_squeeze_infer,
                  compute=_reshape_copy))


# ---------------------------------------------------------------------------------------------
# slice_like


class SliceLikeAttrs(Attrs):
    """``slice_like(data, like)``: the leading ``like.shape[like_axes[i]]`` elements of
    ``data`` along ``axes[i]`` (TVM's op; ``like_axes`` defaults to ``axes``). Only ``like``'s
    shape is read, so a constant can follow a dimension that varies from run to run."""

    axes: list[int]
    like_axes: list[int] | None = None


def _slice_like_infer(types: Sequence[TensorType], attrs: SliceLikeAttrs,
                      data: Sequence[Any]) -> list[TensorType]:
    src, like = types
    like_axes = attrs.like_axes if attrs.like_axes is not None else attrs.axes
    if len(like_axes) != len(attrs.axes):
        raise OpError(f"slice_like: axes {attrs.axes} and like_axes {like_axes} differ in "
                      "length")
    shape = list(src.shape)
    for axis, like_axis in zip(attrs.axes, like_axes, strict=True):
        i, j = normalize_axis(axis, src.ndim), normalize_axis(like_axis, like.ndim)
        if like.shape[j] > shape[i]:
            raise OpError(f"slice_like: cannot take {like.shape[j]} elements of axis {i}, "
                          f"which has {shape[i]} (input shape {list(src.shape)})")
        shape[i] = like.shape[j]
    return [TensorType(tuple(shape), src.dtype)]


def _slice_like(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: SliceLikeAttrs) -> None:
    outs[0][...] = ins[0][tuple(slice(0, d) for d in outs[0].shape)]


register_op(OpDef(name="slice_like", attrs=SliceLikeAttrs, arity=2, infer=_slice_like_infer,
                  compute=_slice_like))


# ---------------------------------------------------------------------------------------------
# concatenate


class ConcatenateAttrs(Attrs):
    """Join any number of inputs (same dtype and rank, same dims off ``axis``) along ``axis``."""

    axis: int = 0


def _concatenate_infer(types: Sequence[TensorType], attrs: ConcatenateAttrs,
                       data: Sequence[Any]) -> list[TensorType]:
    if not types:
        raise OpError("concatenate: expected at least 1 input, given 0")
    first = types[0]
    if first.ndim == 0:
        raise OpError("concatenate: 0-D inputs cannot be concatenated")
    axis = normalize_axis(attrs.axis, first.ndim)
    total = 0
    for i, t in enumerate(types):
        if t.dtype != first.dtype:
            raise OpError(f"concatenate: input {i} has dtype {t.dtype}, expected {first.dtype} "
                          f"(input 0's)")
        if t.ndim != first.ndim:
            raise OpError(f"concatenate: input {i} is {t.ndim}-D, expected {first.ndim}-D "
                          f"(input 0's rank)")
        for d in range(first.ndim):
            if d != axis and t.shape[d] != first.shape[d]:
                raise OpError(f"concatenate: input {i} has shape {list(t.shape)}; dim {d} "
                              f"must be {first.shape[d]} like input 0 {list(first.shape)} "
                              f"(only axis {axis} may differ)")
        total += t.shape[axis]
    shape = (*first.shape[:axis], total, *first.shape[axis + 1:])
    return [TensorType(shape, first.dtype)]


def _concatenate_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                         attrs: ConcatenateAttrs) -> None:
    axis = normalize_axis(attrs.axis, inputs[0].ndim)
    xp.concatenate(list(inputs), axis=axis, out=outputs[0])


register_op(OpDef(name="concatenate", attrs=ConcatenateAttrs, arity=None,
                  infer=_concatenate_infer, compute=_concatenate_compute))


# ---------------------------------------------------------------------------------------------
# split


class SplitAttrs(Attrs):
    """``indices_or_sections``: a number of equal sections (must divide the dim), or the
    non-decreasing split points in ``[0, dim]`` (``len + 1`` outputs); along ``axis``."""

    indices_or_sections: int | list[int]
    axis: int = 0


def _split_outputs(attrs: SplitAttrs) -> int:
    ios = attrs.indices_or_sections
    return ios if isinstance(ios, int) else len(ios) + 1


def _split_bounds(shape: tuple[int, ...], attrs: SplitAttrs) -> tuple[int, list[int]]:
    """The split axis and the piece boundaries ``[0, ..., dim]``."""
    if not shape:
        raise OpError("split: a 0-D input cannot be split")
    axis = normalize_axis(attrs.axis, len(shape))
    dim = shape[axis]
    ios = attrs.indices_or_sections
    if isinstance(ios, int):
        if ios < 1:
            raise OpError(f"split: sections must be >= 1, given {ios}")
        if dim % ios:
            raise OpError(f"split: {ios} sections do not divide axis {axis} of size {dim} "
                          f"(shape {list(shape)})")
        step = dim // ios
        return axis, [i * step for i in range(ios + 1)]
    previous = 0
    for point in ios:
        if not previous <= point <= dim:
            raise OpError(f"split: indices {ios} must be non-decreasing within [0, {dim}] "
                          f"(axis {axis} of shape {list(shape)})")
        previous = point
    return axis, [0, *ios, dim]


def _split_infer(types: Sequence[TensorType], attrs: SplitAttrs,
                 data: Sequence[Any]) -> list[TensorType]:
    _one(types, "split")
    (src,) = types
    axis, bounds = _split_bounds(src.shape, attrs)
    return [TensorType((*src.shape[:axis], hi - lo, *src.shape[axis + 1:]), src.dtype)
            for lo, hi in pairwise(bounds)]


def _split_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                   attrs: SplitAttrs) -> None:
    x = inputs[0]
    axis, bounds = _split_bounds(tuple(x.shape), attrs)
    for out, (lo, hi) in zip(outputs, pairwise(bounds), strict=True):
        xp.copyto(out, x[_along(axis, slice(lo, hi))])


register_op(OpDef(name="split", attrs=SplitAttrs, arity=1, infer=_split_infer,
                  compute=_split_compute, num_outputs=_split_outputs))


# ---------------------------------------------------------------------------------------------
# strided_slice / dynamic_strided_slice


class StridedSliceAttrs(Attrs):
    """TVM strided_slice: ``begin``/``end``/``strides`` per sliced axis, Python slice semantics
    (negative indices count from the end, out-of-range values clamp, strides may be negative
    but not 0). The sliced axes are ``axes`` or, when None, the first ``len(begin)`` axes.
    ``end`` and ``strides`` may be shorter than ``begin``: missing ends run to the end of the
    axis in the stride's direction, missing strides are 1."""

    begin: list[int]
    end: list[int]
    strides: list[int] | None = None
    axes: list[int] | None = None


def _slice_plan(name: str, shape: tuple[int, ...], begin: Sequence[int], end: Sequence[int],
                strides: Sequence[int] | None, axes: Sequence[int] | None
                ) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """The index tuple and output shape of a strided slice of ``shape``."""
    ndim = len(shape)
    k = len(begin)
    strides = list(strides) if strides is not None else []
    if len(end) > k or len(strides) > k:
        raise OpError(f"{name}: begin has {k} values; end ({len(end)}) and strides "
                      f"({len(strides)}) may not have more")
    if axes is None:
        if k > ndim:
            raise OpError(f"{name}: begin has {k} values but the input is {ndim}-D "
                          f"(shape {list(shape)})")
        where = list(range(k))
    else:
        if len(axes) != k:
            raise OpError(f"{name}: axes {list(axes)} has {len(axes)} values, expected {k} "
                          f"(one per begin value)")
        where = [normalize_axis(a, ndim) for a in axes]
        if len(set(where)) != k:
            raise OpError(f"{name}: axes {list(axes)} names an axis twice")
    index = [slice(None)] * ndim
    out = list(shape)
    for j, axis in enumerate(where):
        stride = strides[j] if j < len(strides) else 1
        if stride == 0:
            raise OpError(f"{name}: stride of axis {axis} is 0")
        stop: int | None = end[j] if j < len(end) else None
        picked = range(*slice(begin[j], stop, stride).indices(shape[axis]))
        out[axis] = len(picked)
        # the same elements as a slice of non-negative bounds (slice.indices gives -1 for
        # "before index 0", which as a slice bound would mean the last element)
        index[axis] = (slice(picked.start, picked.stop if picked.stop >= 0 else None, stride)
                       if picked else slice(0, 0))
    return tuple(index), tuple(out)


def _strided_slice_infer(types: Sequence[TensorType], attrs: StridedSliceAttrs,
                         data: Sequence[Any]) -> list[TensorType]:
    _one(types, "strided_slice")
    (src,) = types
    _, shape = _slice_plan("strided_slice", src.shape, attrs.begin, attrs.end, attrs.strides,
                           attrs.axes)
    return [TensorType(shape, src.dtype)]


def _strided_slice_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                           attrs: StridedSliceAttrs) -> None:
    x = inputs[0]
    index, _ = _slice_plan("strided_slice", tuple(x.shape), attrs.begin, attrs.end,
                           attrs.strides, attrs.axes)
    xp.copyto(outputs[0], x[index])


register_op(OpDef(name="strided_slice", attrs=StridedSliceAttrs, arity=1,
                  infer=_strided_slice_infer, compute=_strided_slice_compute))


class DynamicStridedSliceAttrs(Attrs):
    """No attributes: begin, end and strides are inputs 1..3 (1-D integer tensors), sliced
    axes are the first ``len(begin)``; same semantics as :class:`StridedSliceAttrs`."""


def _dynamic_slice_infer(types: Sequence[TensorType], attrs: DynamicStridedSliceAttrs,
                         data: Sequence[Any]) -> list[TensorType]:
    name = "dynamic_strided_slice"
    _one(types, name, 4)
    for i, role in enumerate(("begin", "end", "strides"), start=1):
        t = types[i]
        if t.ndim != 1 or not _is_integer(t.dtype):
            raise OpError(f"{name}: {role} (input {i}) must be a 1-D integer tensor, given "
                          f"{t.dtype} of shape {list(t.shape)}")
        if len(data) <= i or data[i] is None:
            raise OpError(f"{name}: infer needs the values of {role} (input {i}); none given")
    begin, end, strides = (_host_ints(np, data[i]) for i in (1, 2, 3))
    _, shape = _slice_plan(name, types[0].shape, begin, end, strides, None)
    return [TensorType(shape, types[0].dtype)]


def _as_int64(xp: Any, values: Any) -> Any:
    """Integer index values of any dtype as int64, exactly (uint64 above 2**63 - 1 clamps
    there, which no axis length reaches), so index arithmetic neither overflows nor mixes
    signed and unsigned."""
    if values.dtype == np.uint64:
        values = xp.minimum(values, np.uint64(np.iinfo(np.int64).max))
    return values.astype(np.int64)


def _dynamic_slice_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                           attrs: DynamicStridedSliceAttrs) -> None:
    """Gather along each sliced axis with indices computed on the device.

    The output's shape, which the shape function computed on the host, gives each axis's
    length; begin and strides are read where they live, so running the kernel moves nothing
    to the host (only the shape function's inputs cross, once).
    """
    x, out = inputs[0], outputs[0]
    begin, strides = _as_int64(xp, inputs[1]), _as_int64(xp, inputs[3])
    if begin.shape[0] > x.ndim:
        raise OpError(f"dynamic_strided_slice: begin has {begin.shape[0]} values but the input "
                      f"is {x.ndim}-D (shape {list(x.shape)})")
    result = x
    for axis in range(begin.shape[0]):
        n, m = x.shape[axis], out.shape[axis]
        first = xp.clip(begin[axis], -n - 1, n)  # the same slice, and no overflow below
        first = xp.where(first < 0, first + n, first)
        if axis < strides.shape[0]:
            step = strides[axis]
            first = xp.where(step > 0, xp.clip(first, 0, n), xp.clip(first, -1, n - 1))
            index = first + step * xp.arange(m)
        else:
            index = xp.clip(first, 0, n) + xp.arange(m)
        result = xp.take(result, index, axis=axis)
    xp.copyto(out, result)


register_op(OpDef(name="dynamic_strided_slice", attrs=DynamicStridedSliceAttrs, arity=4,
                  infer=_dynamic_slice_infer, compute=_dynamic_slice_compute,
                  data_dependent=(False, True, True, True)))


# ---------------------------------------------------------------------------------------------
# take


class TakeAttrs(Attrs):
    """Select ``data`` elements by ``indices`` along ``axis`` (None: of the flattened data).

    ``mode``: ``"clip"`` (TVM's default) clamps to ``[0, n-1]``, so negative indices select
    element 0; ``"wrap"`` takes indices modulo ``n``; ``"raise"`` allows ``[-n, n)`` (negative
    counts from the end) and raises :class:`OpError` from compute otherwise.
    """

    axis: int | None = None
    mode: Literal["clip", "wrap", "raise"] = "clip"


def _check_indices(op: str, indices: TensorType) -> None:
    if not _is_integer(indices.dtype):
        raise OpError(f"{op}: indices must have an integer dtype (int32, int64), given "
                      f"{indices.dtype}")


def _take_infer(types: Sequence[TensorType], attrs: TakeAttrs,
                data: Sequence[Any]) -> list[TensorType]:
    _one(types, "take", 2)
    src, indices = types
    _check_indices("take", indices)
    if attrs.axis is None:
        n, shape = _size(src.shape), indices.shape
    else:
        axis = normalize_axis(attrs.axis, src.ndim)
        n = src.shape[axis]
        shape = (*src.shape[:axis], *indices.shape, *src.shape[axis + 1:])
    if n == 0 and _size(indices.shape):
        raise OpError(f"take: cannot take {_size(indices.shape)} indices from an empty axis "
                      f"(data shape {list(src.shape)}, axis {attrs.axis})")
    return [TensorType(tuple(shape), src.dtype)]


def _take_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: TakeAttrs) -> None:
    data, idx = inputs
    if outputs[0].size == 0:
        return
    if attrs.axis is None:
        n, axis = data.size, None
    else:
        axis = normalize_axis(attrs.axis, data.ndim)
        n = data.shape[axis]
    idx = _wide_enough(xp, idx, n)
    if attrs.mode == "clip":
        idx = xp.clip(idx, 0, n - 1)
    elif attrs.mode == "wrap" or _check_index_range(xp, idx, n, "take"):
        idx = xp.mod(idx, n)
    # every index is now in [0, n): numpy's and cupy's take agree (no mode argument)
    xp.take(data, idx, axis=axis, out=outputs[0])


register_op(OpDef(name="take", attrs=TakeAttrs, arity=2, infer=_take_infer,
                  compute=_take_compute))


# ---------------------------------------------------------------------------------------------
# gather


class GatherAttrs(Attrs):
    """ONNX GatherElements: ``out[i][j][k] = data[indices[i][j][k]][j][k]`` for ``axis=0``.

    ``indices`` has the rank of ``data`` and dims no larger than data's off ``axis``; its values
    lie in ``[-n, n)`` (negative counts from the end; others raise OpError from compute).
    """

    axis: int = 0


def _gather_infer(types: Sequence[TensorType], attrs: GatherAttrs,
                  data: Sequence[Any]) -> list[TensorType]:
    _one(types, "gather", 2)
    src, indices = types
    _check_indices("gather", indices)
    if indices.ndim != src.ndim:
        raise OpError(f"gather: indices must have the rank of data ({src.ndim}), given "
                      f"{indices.ndim}-D indices")
    axis = normalize_axis(attrs.axis, src.ndim)
    for d in range(src.ndim):
        if d != axis and indices.shape[d] > src.shape[d]:
            raise OpError(f"gather: indices shape {list(indices.shape)} exceeds data shape "
                          f"{list(src.shape)} in dim {d} (only axis {axis} may)")
    if src.shape[axis] == 0 and _size(indices.shape):
        raise OpError(f"gather: cannot gather from empty axis {axis} of data shape "
                      f"{list(src.shape)}")
    return [TensorType(indices.shape, src.dtype)]


def _gather_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: GatherAttrs) -> None:
    data, idx = inputs
    if outputs[0].size == 0:
        return
    axis = normalize_axis(attrs.axis, data.ndim)
    n = data.shape[axis]
    if _check_index_range(xp, idx, n, "gather"):
        idx = xp.mod(_wide_enough(xp, idx, n), n)
    window = tuple(slice(None) if d == axis else slice(0, idx.shape[d])
                   for d in range(data.ndim))
    outputs[0][...] = xp.take_along_axis(data[window], idx, axis=axis)


register_op(OpDef(name="gather", attrs=GatherAttrs, arity=2, infer=_gather_infer,
                  compute=_gather_compute))


# ---------------------------------------------------------------------------------------------
# pad


class PadAttrs(Attrs):
    """``pad_width``: ``(before, after)`` per axis (non-negative). ``mode``: ``"constant"``
    fills ``pad_value``, which the dtype must hold (integer dtypes: an integer in range;
    floats: a value in the finite range, an infinity or nan; else the shape function refuses
    it), ``"edge"`` repeats the border element, ``"reflect"`` mirrors without repeating the
    border (each width at most dim - 1)."""

    pad_width: list[tuple[int, int]]
    pad_value: float = 0.0
    mode: Literal["constant", "edge", "reflect"] = "constant"


def _pad_infer(types: Sequence[TensorType], attrs: PadAttrs,
               data: Sequence[Any]) -> list[TensorType]:
    _one(types, "pad")
    (src,) = types
    if len(attrs.pad_width) != src.ndim:
        raise OpError(f"pad: pad_width has {len(attrs.pad_width)} (before, after) pairs, "
                      f"expected one per axis of the {src.ndim}-D input")
    for axis, (lo, hi) in enumerate(attrs.pad_width):
        dim = src.shape[axis]
        if lo < 0 or hi < 0:
            raise OpError(f"pad: pad_width {list(attrs.pad_width[axis])} of axis {axis} is "
                          f"negative")
        if attrs.mode == "edge" and dim == 0 and (lo or hi):
            raise OpError(f"pad: edge mode cannot pad axis {axis} of size 0")
        if attrs.mode == "reflect" and (lo or hi) and max(lo, hi) > dim - 1:
            raise OpError(f"pad: reflect mode pads axis {axis} of size {dim} by at most "
                          f"{max(dim - 1, 0)} per side, given {list(attrs.pad_width[axis])}")
    if attrs.mode == "constant":
        check_fill(attrs.pad_value, src.dtype, "pad: pad_value")
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(src.shape, attrs.pad_width, strict=True))
    return [TensorType(shape, src.dtype)]


def _pad_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: PadAttrs) -> None:
    x, out = inputs[0], outputs[0]
    interior = tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, attrs.pad_width, strict=True))
    if attrs.mode == "constant":
        if any(lo or hi for lo, hi in attrs.pad_width):
            out.fill(attrs.pad_value)
        out[interior] = x
        return
    out[interior] = x
    # fill the borders axis by axis from what is already written (numpy's algorithm)
    for axis, (lo, hi) in enumerate(attrs.pad_width):
        dim = x.shape[axis]
        end = lo + dim
        if attrs.mode == "edge":
            if lo:
                out[_along(axis, slice(0, lo))] = out[_along(axis, slice(lo, lo + 1))]
            if hi:
                out[_along(axis, slice(end, end + hi))] = out[_along(axis, slice(end - 1, end))]
        else:
            if lo:
                out[_along(axis, slice(0, lo))] = out[_along(axis, slice(2 * lo, lo, -1))]
            if hi:
                stop = end - 2 - hi
                out[_along(axis, slice(end, end + hi))] = out[
                    _along(axis, slice(end - 2, stop if stop >= 0 else None, -1))]


register_op(OpDef(name="pad", attrs=PadAttrs, arity=1, infer=_pad_infer,
                  compute=_pad_compute))


# ---------------------------------------------------------------------------------------------
# layout_transform


class LayoutTransformAttrs(Attrs):
    """Convert between ``"NCHW"``, ``"NHWC"`` and packed ``"NCHW<n>c"`` (e.g. ``"NCHW8c"``:
    shape ``(N, C/n, H, W, n)``; C must be divisible by n)."""

    src_layout: str
    dst_layout: str


_PACKED = re.compile(r"NCHW([1-9][0-9]*)c")


def _parse_layout(layout: str) -> int:
    """0 for NCHW, -1 for NHWC, the block size n for NCHW<n>c."""
    if layout == "NCHW":
        return 0
    if layout == "NHWC":
        return -1
    match = _PACKED.fullmatch(layout)
    if match is None:
        raise OpError(f"layout_transform: unknown layout {layout!r}; expected 'NCHW', 'NHWC' "
                      f"or 'NCHW<n>c' (e.g. 'NCHW8c')")
    return int(match.group(1))


def _logical_nchw(shape: tuple[int, ...], layout: str, kind: int) -> tuple[int, int, int, int]:
    rank = 5 if kind > 0 else 4
    if len(shape) != rank:
        raise OpError(f"layout_transform: a {layout} tensor is {rank}-D, given shape "
                      f"{list(shape)}")
    if kind == 0:
        n, c, h, w = shape
    elif kind < 0:
        n, h, w, c = shape
    else:
        if shape[4] != kind:
            raise OpError(f"layout_transform: a {layout} tensor's last dim is {kind}, given "
                          f"shape {list(shape)}")
        n, c, h, w = shape[0], shape[1] * kind, shape[2], shape[3]
    return n, c, h, w


def _physical_shape(nchw: tuple[int, int, int, int], layout: str,
                    kind: int) -> tuple[int, ...]:
    n, c, h, w = nchw
    if kind == 0:
        return nchw
    if kind < 0:
        return n, h, w, c
    if c % kind:
        raise OpError(f"layout_transform: {layout} needs C divisible by {kind}, given C = {c}")
    return n, c // kind, h, w, kind


def _blocked_view(array: Any, kind: int, block: int) -> Any:
    """``array`` (in layout ``kind``) as a 5-D ``(N, C/block, block, H, W)`` view.

    A view for the packed layout with ``block`` and for contiguous NCHW/NHWC arrays.
    """
    if kind > 0:
        return array.transpose(0, 1, 4, 2, 3)
    if kind == 0:
        n, c, h, w = array.shape
        return array.reshape(n, c // block, block, h, w)
    n, h, w, c = array.shape
    return array.reshape(n, h, w, c // block, block).transpose(0, 3, 4, 1, 2)


def _layout_infer(types: Sequence[TensorType], attrs: LayoutTransformAttrs,
                  data: Sequence[Any]) -> list[TensorType]:
    _one(types, "layout_transform")
    (src,) = types
    src_kind, dst_kind = _parse_layout(attrs.src_layout), _parse_layout(attrs.dst_layout)
    nchw = _logical_nchw(src.shape, attrs.src_layout, src_kind)
    return [TensorType(_physical_shape(nchw, attrs.dst_layout, dst_kind), src.dtype)]


def _layout_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: LayoutTransformAttrs) -> None:
    x, out = inputs[0], outputs[0]
    src_kind, dst_kind = _parse_layout(attrs.src_layout), _parse_layout(attrs.dst_layout)
    if src_kind > 0 and dst_kind > 0 and src_kind != dst_kind:
        # re-blocking: unpack to a contiguous NCHW temporary first (two passes)
        x = _blocked_view(x, src_kind, src_kind).copy()
        n, c1, b, h, w = x.shape
        x, src_kind = x.reshape(n, c1 * b, h, w), 0
    block = max(src_kind, dst_kind, 1)
    _blocked_view(out, dst_kind, block)[...] = _blocked_view(x, src_kind, block)


register_op(OpDef(name="layout_transform", attrs=LayoutTransformAttrs, arity=1,
                  infer=_layout_infer, compute=_layout_compute))


# ---------------------------------------------------------------------------------------------
# bitcast


_BITS: dict[str, int] = {
    "bool": 8, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "float16": 16,
    "bfloat16": 16, "uint32": 32, "int32": 32, "float32": 32, "uint64": 64, "int64": 64,
    "float64": 64,
}
"""Bits of each dtype ``bitcast`` reinterprets (a bool takes a whole byte)."""


class BitcastAttrs(Attrs):
    """``dtype``: the type whose bits the output reads the input's as (ONNX ``BitCast``): the
    same width as the input's, so the shape stays; no value is converted (a float's bits
    become an integer's, little-endian in memory as every graphrt device is)."""

    dtype: str


def _bitcast_infer(types: Sequence[TensorType], attrs: BitcastAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    _one(types, "bitcast")
    (src,) = types
    known = ", ".join(_BITS)
    if attrs.dtype not in _BITS:
        raise OpError(f"bitcast: unsupported target dtype {attrs.dtype!r} (expected one of "
                      f"{known})")
    if src.dtype not in _BITS:
        raise OpError(f"bitcast: unsupported input dtype {src.dtype!r} (expected one of "
                      f"{known})")
    if _BITS[src.dtype] != _BITS[attrs.dtype]:
        raise OpError(f"bitcast: the target dtype must have the input's bit width: "
                      f"{src.dtype} has {_BITS[src.dtype]} bits, {attrs.dtype} has "
                      f"{_BITS[attrs.dtype]}")
    return [TensorType(src.shape, attrs.dtype)]


def _bitcast_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     attrs: BitcastAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size:
        xp.copyto(out.view(x.dtype), x)  # the bytes, unchanged: one copy through a view


register_op(OpDef(name="bitcast", attrs=BitcastAttrs, arity=1, infer=_bitcast_infer,
                  compute=_bitcast_compute))
