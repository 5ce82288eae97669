"""Standard ops: indexing (used by the ONNX frontend; numpy and cupy).

Ops that select, scatter, repeat or reorder elements by index: ``tile``, ``broadcast_to``,
``gather_nd``, ``scatter_elements``, ``scatter_nd``, ``cumsum``, ``cumprod``, ``topk`` (values
and int64 indices), ``one_hot``, ``eye_like``, ``depth_to_space``, ``space_to_depth``,
``reverse_sequence`` and ``pad_fill``.

Each is written once against the array namespace ``xp`` and writes its preallocated
output(s). Index arithmetic stays on the device: temporaries are made from the inputs by
``xp`` functions, and :func:`_same_device` gives the few numpy functions that return an
untagged array on the simulated device (``where``, ``searchsorted``, ``arange``) an array of
the input's kind. Zero-size inputs and outputs are allowed everywhere (nothing is written).

Scatters with repeated indices apply the updates in index order, as ONNX specifies: the
updates are grouped by target (a stable sort) and applied one rank of repetition at a time,
so the work is vectorized and a loop runs only as many times as the most repeated target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    broadcast,
    normalize_axis,
    numpy_api,
    register_op,
)
from .transform import _is_integer, _one, _size

__all__ = [
    "BroadcastToAttrs",
    "CumprodAttrs",
    "CumsumAttrs",
    "DepthToSpaceAttrs",
    "EyeLikeAttrs",
    "GatherNdAttrs",
    "OneHotAttrs",
    "PadFillAttrs",
    "ReverseSequenceAttrs",
    "ScatterElementsAttrs",
    "ScatterNdAttrs",
    "TileAttrs",
    "TopkAttrs",
]

Reduction = Literal["none", "add", "mul", "max", "min"]


# ---------------------------------------------------------------------------------------------
# helpers


def _integer_input(name: str, role: str, tensor: TensorType) -> None:
    if not _is_integer(tensor.dtype):
        raise OpError(f"{name}: {role} must have an integer dtype (int32, int64), given "
                      f"{tensor.dtype}")


def _axis(name: str, axis: int, ndim: int) -> int:
    try:
        return normalize_axis(axis, ndim)
    except OpError as err:
        raise OpError(f"{name}: {err}") from None


def _along(axis: int, index: slice) -> tuple[slice, ...]:
    """An index tuple applying ``index`` to ``axis`` (all of every earlier axis)."""
    return (slice(None),) * axis + (index,)


def _same_device(xp: Any, ref: Any, arr: Any) -> Any:
    """``arr`` as an array of ``ref``'s kind.

    A no-op on numpy and cupy. On the simulated device some numpy functions return an untagged
    array, which its ufuncs refuse to combine with device arrays; that gets a tagged copy.
    """
    if type(arr) is type(ref):
        return arr
    out = xp.empty_like(ref, shape=np.shape(arr), dtype=arr.dtype)
    out[...] = arr
    return out


def _arange(xp: Any, ref: Any, n: int) -> Any:
    """``0 .. n-1`` (int64) on the device of ``ref``."""
    return _same_device(xp, ref, xp.arange(n, dtype=np.int64))


def _normalized_indices(xp: Any, idx: Any, n: int, name: str) -> Any:
    """``idx`` as int64 in ``[0, n)``; negative values count from the end.

    Raises:
        OpError: an index outside ``[-n, n)``.
    """
    idx = idx.astype(np.int64)
    if idx.size == 0:
        return idx
    low, high = int(idx.min()), int(idx.max())
    if low < -n or high >= n:
        raise OpError(f"{name}: indices must lie in [{-n}, {n}), given values in "
                      f"[{low}, {high}]")
    return xp.mod(idx, n) if low < 0 else idx


def _stable_argsort(xp: Any, a: Any, axis: int) -> Any:
    """Indices sorting ``a`` along ``axis``, equal elements kept in index order.

    cupy's sort is always stable and accepts no ``kind``; numpy needs ``kind="stable"``.
    """
    if numpy_api(xp):
        return np.argsort(a, axis=axis, kind="stable")
    return xp.argsort(a, axis=axis)


def _write_through(out: Any, shape: tuple[int, ...], value: Any) -> None:
    """Write ``value`` (of ``shape``) into ``out``, whose elements are ``shape``'s in C order.

    A contiguous ``out`` is written through a reshaped view (one pass); another is written
    from a reshaped copy of ``value``.
    """
    if out.flags.c_contiguous:
        out.reshape(shape)[...] = value
    else:
        out[...] = value.reshape(out.shape)


_COMBINE: dict[str, str] = {"add": "add", "mul": "multiply", "max": "maximum",
                            "min": "minimum"}


def _scatter_rows(xp: Any, target: Any, rows: Any, updates: Any, reduction: str) -> None:
    """``target[rows[i]] = reduce(target[rows[i]], updates[i])`` for every i, in order of i.

    ``target`` is 2-D ``(N, R)``, ``rows`` 1-D int64 in ``[0, N)``, ``updates`` ``(len(rows),
    R)``. Repeated rows are applied one after another in index order ("none" keeps the last).
    """
    m = rows.shape[0]
    if m == 0:
        return
    order = _stable_argsort(xp, rows, 0)
    ordered = rows[order]
    first = _same_device(xp, ordered, xp.searchsorted(ordered, ordered, side="left"))
    rank = _arange(xp, ordered, m) - first
    depth = int(rank.max()) + 1
    combine = None if reduction == "none" else getattr(xp, _COMBINE[reduction])
    for k in range(depth):
        chosen = order if depth == 1 else order[rank == k]
        where = rows[chosen]
        values = updates[chosen]
        if combine is None:
            target[where] = values
        else:
            target[where] = combine(target[where], values)


def _flat_positions(xp: Any, idx: Any, dims: Sequence[int]) -> Any:
    """Row-major linear positions of the index tuples in the last axis of ``idx`` (int64,
    already in range) within ``dims``; shape ``idx.shape[:-1]``."""
    if not dims:
        return xp.zeros_like(idx, shape=idx.shape[:-1], dtype=np.int64)
    linear = idx[..., 0]
    for i in range(1, len(dims)):
        linear = linear * dims[i] + idx[..., i]
    return linear


def _check_nd_indices(xp: Any, idx: Any, dims: Sequence[int], name: str) -> Any:
    """``idx`` (last axis: one coordinate per dim of ``dims``) as int64 in range."""
    idx = idx.astype(np.int64)
    if idx.size == 0 or not dims:
        return idx
    columns = []
    for i, n in enumerate(dims):
        columns.append(_normalized_indices(xp, idx[..., i], n, f"{name} (coordinate {i})"))
    return xp.stack(columns, axis=-1)


# ---------------------------------------------------------------------------------------------
# tile


class TileAttrs(Attrs):
    """``reps``: how many times to repeat the input along each axis (one per axis, >= 0)."""

    reps: list[int]


def _tile_infer(types: Sequence[TensorType], attrs: TileAttrs,
                data: Sequence[Any]) -> list[TensorType]:
    _one(types, "tile", 1)
    (src,) = types
    if len(attrs.reps) != src.ndim:
        raise OpError(f"tile: reps {attrs.reps} must have one value per axis of the "
                      f"{src.ndim}-D input (shape {list(src.shape)})")
    if any(r < 0 for r in attrs.reps):
        raise OpError(f"tile: reps {attrs.reps} must be >= 0")
    return [TensorType(tuple(d * r for d, r in zip(src.shape, attrs.reps, strict=True)),
                       src.dtype)]


def _tile_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: TileAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    # the output as (r0, d0, r1, d1, ...): every repetition is a broadcast of the input
    blocked = tuple(v for r, d in zip(attrs.reps, x.shape, strict=True) for v in (r, d))
    source = x.reshape(tuple(v for d in x.shape for v in (1, d)))
    _write_through(out, blocked, source)


register_op(OpDef(name="tile", attrs=TileAttrs, arity=1, infer=_tile_infer,
                  compute=_tile_compute))


# ---------------------------------------------------------------------------------------------
# broadcast_to


class BroadcastToAttrs(Attrs):
    """``shape``: the output shape; the input broadcasts to it by numpy's rules."""

    shape: list[int]


def _broadcast_to_infer(types: Sequence[TensorType], attrs: BroadcastToAttrs,
                        data: Sequence[Any]) -> list[TensorType]:
    _one(types, "broadcast_to", 1)
    (src,) = types
    shape = tuple(attrs.shape)
    if any(d < 0 for d in shape):
        raise OpError(f"broadcast_to: shape {list(shape)} has a negative dim")
    try:
        ok = broadcast(src.shape, shape) == shape
    except OpError:
        ok = False
    if not ok:
        raise OpError(f"broadcast_to: an input of shape {list(src.shape)} does not broadcast "
                      f"to shape {list(shape)}")
    return [TensorType(shape, src.dtype)]


def _broadcast_to_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                          attrs: BroadcastToAttrs) -> None:
    if outputs[0].size:
        xp.copyto(outputs[0], inputs[0])


register_op(OpDef(name="broadcast_to", attrs=BroadcastToAttrs, arity=1,
                  infer=_broadcast_to_infer, compute=_broadcast_to_compute))


# ---------------------------------------------------------------------------------------------
# gather_nd


class GatherNdAttrs(Attrs):
    """ONNX GatherND: the last axis of ``indices`` (length q) indexes the first q dims of
    ``data`` after ``batch_dims`` leading dims that data and indices share. Negative indices
    count from the end."""

    batch_dims: int = 0


def _gather_nd_infer(types: Sequence[TensorType], attrs: GatherNdAttrs,
                     data: Sequence[Any]) -> list[TensorType]:
    _one(types, "gather_nd", 2)
    src, indices = types
    _integer_input("gather_nd", "indices", indices)
    b = attrs.batch_dims
    if src.ndim < 1 or indices.ndim < 1:
        raise OpError(f"gather_nd: data and indices must be at least 1-D, given shapes "
                      f"{list(src.shape)} and {list(indices.shape)}")
    if not 0 <= b < min(src.ndim, indices.ndim):
        raise OpError(f"gather_nd: batch_dims {b} must lie in [0, {min(src.ndim, indices.ndim)})"
                      f" for data shape {list(src.shape)} and indices shape "
                      f"{list(indices.shape)}")
    if src.shape[:b] != indices.shape[:b]:
        raise OpError(f"gather_nd: the first {b} dims of data {list(src.shape)} and indices "
                      f"{list(indices.shape)} must match (batch_dims)")
    q = indices.shape[-1]
    if q > src.ndim - b:
        raise OpError(f"gather_nd: indices' last dim {q} exceeds the {src.ndim - b} dims of "
                      f"data {list(src.shape)} after {b} batch dims")
    return [TensorType((*indices.shape[:-1], *src.shape[b + q:]), src.dtype)]


def _gather_nd_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: GatherNdAttrs) -> None:
    data, indices = inputs
    out = outputs[0]
    if out.size == 0:
        return
    b, q = attrs.batch_dims, indices.shape[-1]
    dims = data.shape[b:b + q]
    rest = data.shape[b + q:]
    batch, span = _size(data.shape[:b]), _size(dims)
    count = _size(indices.shape[b:-1])
    idx = _check_nd_indices(xp, indices.reshape(batch, count, q), dims, "gather_nd")
    linear = _flat_positions(xp, idx, dims)
    if batch > 1:
        linear = linear + (_arange(xp, linear, batch) * span).reshape(batch, 1)
    rows = xp.take(data.reshape(batch * span, *rest), linear.reshape(-1), axis=0)
    out[...] = rows.reshape(out.shape)


register_op(OpDef(name="gather_nd", attrs=GatherNdAttrs, arity=2, infer=_gather_nd_infer,
                  compute=_gather_nd_compute))


# ---------------------------------------------------------------------------------------------
# scatter_elements / scatter_nd


class ScatterElementsAttrs(Attrs):
    """ONNX ScatterElements: a copy of ``data`` where ``out[..., indices[i, j], ...] =
    updates[i, j]`` (``indices`` replacing the coordinate on ``axis``); ``reduction``
    combines each update with the value there instead ("none" replaces). Repeated indices
    apply in index order."""

    axis: int = 0
    reduction: Reduction = "none"


def _scatter_elements_infer(types: Sequence[TensorType], attrs: ScatterElementsAttrs,
                            data: Sequence[Any]) -> list[TensorType]:
    name = "scatter_elements"
    _one(types, name, 3)
    src, indices, updates = types
    _integer_input(name, "indices", indices)
    if indices.shape != updates.shape:
        raise OpError(f"{name}: indices {list(indices.shape)} and updates "
                      f"{list(updates.shape)} must have the same shape")
    if updates.dtype != src.dtype:
        raise OpError(f"{name}: updates have dtype {updates.dtype}, data {src.dtype}")
    if indices.ndim != src.ndim:
        raise OpError(f"{name}: indices must have the rank of data ({src.ndim}), given "
                      f"{indices.ndim}-D indices")
    axis = _axis(name, attrs.axis, src.ndim)
    for d in range(src.ndim):
        if d != axis and indices.shape[d] > src.shape[d]:
            raise OpError(f"{name}: indices shape {list(indices.shape)} exceeds data shape "
                          f"{list(src.shape)} in dim {d} (only axis {axis} may)")
    return [src]


def _scatter_elements_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                              attrs: ScatterElementsAttrs) -> None:
    data, indices, updates = inputs
    out = outputs[0]
    if out.size:
        out[...] = data
    if indices.size == 0:
        return
    axis = normalize_axis(attrs.axis, data.ndim)
    idx = _normalized_indices(xp, indices, data.shape[axis], "scatter_elements")
    strides = [_size(data.shape[d + 1:]) for d in range(data.ndim)]
    position = idx * strides[axis]
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > 1:
            shape = [1] * data.ndim
            shape[d] = indices.shape[d]
            position = position + (_arange(xp, position, indices.shape[d])
                                   * strides[d]).reshape(shape)
    target = out if out.flags.c_contiguous else out.copy()
    _scatter_rows(xp, target.reshape(-1, 1), position.reshape(-1), updates.reshape(-1, 1),
                  attrs.reduction)
    if target is not out:
        out[...] = target


register_op(OpDef(name="scatter_elements", attrs=ScatterElementsAttrs, arity=3,
                  infer=_scatter_elements_infer, compute=_scatter_elements_compute))


class ScatterNdAttrs(Attrs):
    """ONNX ScatterND: a copy of ``data`` where the slice at each index tuple (the last axis
    of ``indices``, length k) is replaced by (or, with ``reduction``, combined with) the
    matching slice of ``updates``. Repeated tuples apply in index order."""

    reduction: Reduction = "none"


def _scatter_nd_infer(types: Sequence[TensorType], attrs: ScatterNdAttrs,
                      data: Sequence[Any]) -> list[TensorType]:
    name = "scatter_nd"
    _one(types, name, 3)
    src, indices, updates = types
    _integer_input(name, "indices", indices)
    if src.ndim < 1 or indices.ndim < 1:
        raise OpError(f"{name}: data and indices must be at least 1-D, given shapes "
                      f"{list(src.shape)} and {list(indices.shape)}")
    k = indices.shape[-1]
    if k > src.ndim:
        raise OpError(f"{name}: indices' last dim {k} exceeds the rank of data "
                      f"{list(src.shape)}")
    expected = (*indices.shape[:-1], *src.shape[k:])
    if updates.shape != expected:
        raise OpError(f"{name}: updates must have shape {list(expected)} (indices "
                      f"{list(indices.shape)}, data {list(src.shape)}), given "
                      f"{list(updates.shape)}")
    if updates.dtype != src.dtype:
        raise OpError(f"{name}: updates have dtype {updates.dtype}, data {src.dtype}")
    return [src]


def _scatter_nd_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                        attrs: ScatterNdAttrs) -> None:
    data, indices, updates = inputs
    out = outputs[0]
    if out.size:
        out[...] = data
    k = indices.shape[-1]
    m = _size(indices.shape[:-1])
    if m == 0 or out.size == 0:
        return
    dims = data.shape[:k]
    idx = _check_nd_indices(xp, indices.reshape(m, k), dims, "scatter_nd")
    rows = _flat_positions(xp, idx, dims)
    width = _size(data.shape[k:])
    target = out if out.flags.c_contiguous else out.copy()
    _scatter_rows(xp, target.reshape(_size(dims), width), rows, updates.reshape(m, width),
                  attrs.reduction)
    if target is not out:
        out[...] = target


register_op(OpDef(name="scatter_nd", attrs=ScatterNdAttrs, arity=3, infer=_scatter_nd_infer,
                  compute=_scatter_nd_compute))


# ---------------------------------------------------------------------------------------------
# cumsum, cumprod


class CumsumAttrs(Attrs):
    """Cumulative sum along ``axis`` in the input's dtype (float16 and bfloat16 accumulate in
    float32); ``exclusive`` leaves out each element itself (the first is 0), ``reverse`` sums
    from the end."""

    axis: int = 0
    exclusive: bool = False
    reverse: bool = False


class CumprodAttrs(CumsumAttrs):
    """Cumulative product along ``axis``, as :class:`CumsumAttrs` says for sums: float16 and
    bfloat16 multiply in float32, ``exclusive`` leaves out each element itself (the first is
    1), ``reverse`` multiplies from the end."""


def _scan_infer(name: str, types: Sequence[TensorType], attrs: CumsumAttrs) -> list[TensorType]:
    """The type of a cumulative scan (``cumsum``, ``cumprod``): the input's."""
    _one(types, name, 1)
    (src,) = types
    if np.dtype(src.dtype).kind not in "iuf" and src.dtype != "bfloat16":
        raise OpError(f"{name}: expects a numeric input (an integer or float dtype), given "
                      f"{src.dtype}")
    if src.ndim == 0:
        raise OpError(f"{name}: the input must be at least 1-D, given a 0-D tensor")
    _axis(name, attrs.axis, src.ndim)
    return [src]


def _scan_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: CumsumAttrs,
                  function: str, identity: int) -> None:
    """``xp.<function>`` (``cumsum`` or ``cumprod``) along the axis into the output; an
    exclusive scan starts from ``identity``."""
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    scan = getattr(xp, function)
    axis = normalize_axis(attrs.axis, x.ndim)
    src = xp.flip(x, axis) if attrs.reverse else x
    dst = xp.flip(out, axis) if attrs.reverse else out
    work = accumulator(out.dtype)  # float16 scans in float32, each result rounded once
    if not attrs.exclusive:
        dst[...] = scan(src, axis=axis, dtype=work)
        return
    n = x.shape[axis]
    dst[_along(axis, slice(0, 1))] = identity
    if n > 1:
        dst[_along(axis, slice(1, None))] = scan(src[_along(axis, slice(0, n - 1))],
                                                 axis=axis, dtype=work)


def _cumsum_infer(types: Sequence[TensorType], attrs: CumsumAttrs,
                  data: Sequence[Any]) -> list[TensorType]:
    return _scan_infer("cumsum", types, attrs)


def _cumsum_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: CumsumAttrs) -> None:
    _scan_compute(xp, inputs, outputs, attrs, "cumsum", 0)


def _cumprod_infer(types: Sequence[TensorType], attrs: CumprodAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    return _scan_infer("cumprod", types, attrs)


def _cumprod_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     attrs: CumprodAttrs) -> None:
    _scan_compute(xp, inputs, outputs, attrs, "cumprod", 1)


register_op(OpDef(name="cumsum", attrs=CumsumAttrs, arity=1, infer=_cumsum_infer,
                  compute=_cumsum_compute))
register_op(OpDef(name="cumprod", attrs=CumprodAttrs, arity=1, infer=_cumprod_infer,
                  compute=_cumprod_compute))


# ---------------------------------------------------------------------------------------------
# topk


class TopkAttrs(Attrs):
    """The ``k`` largest (or smallest) elements along ``axis``, sorted, and their int64
    indices; equal elements come in index order (the smaller index first)."""

    k: int
    axis: int = -1
    largest: bool = True


def _topk_infer(types: Sequence[TensorType], attrs: TopkAttrs,
                data: Sequence[Any]) -> list[TensorType]:
    _one(types, "topk", 1)
    (src,) = types
    if src.ndim == 0:
        raise OpError("topk: the input must be at least 1-D, given a 0-D tensor")
    if src.dtype == "bool":
        raise OpError("topk: expects a numeric input, given bool")
    axis = _axis("topk", attrs.axis, src.ndim)
    if not 0 <= attrs.k <= src.shape[axis]:
        raise OpError(f"topk: k {attrs.k} must lie in [0, {src.shape[axis]}] (axis {axis} of "
                      f"shape {list(src.shape)})")
    shape = (*src.shape[:axis], attrs.k, *src.shape[axis + 1:])
    return [TensorType(shape, src.dtype), TensorType(shape, "int64")]


def _topk_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: TopkAttrs) -> None:
    x = inputs[0]
    values, indices = outputs
    if values.size == 0:
        return
    axis = normalize_axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    if attrs.largest:
        # descending with ties in index order: a stable ascending sort of the reversed
        # input, read backwards, holds reversed positions
        order = xp.flip(_stable_argsort(xp, xp.flip(x, axis), axis), axis)
        order = (n - 1) - order[_along(axis, slice(0, attrs.k))]
    else:
        order = _stable_argsort(xp, x, axis)[_along(axis, slice(0, attrs.k))]
    indices[...] = order
    values[...] = xp.take_along_axis(x, order, axis=axis)


register_op(OpDef(name="topk", attrs=TopkAttrs, arity=1, infer=_topk_infer,
                  compute=_topk_compute, num_outputs=2))


# ---------------------------------------------------------------------------------------------
# one_hot


class OneHotAttrs(Attrs):
    """ONNX OneHot: ``values[1]`` where ``indices`` selects a position of a new axis of size
    ``depth`` inserted at ``axis`` (in ``[-r-1, r]``), ``values[0]`` elsewhere. Indices are
    truncated to integers; negative ones count from the end when ``wrap_negative`` (else they
    select nothing, like every index outside the range)."""

    depth: int
    axis: int = -1
    wrap_negative: bool = True


def _one_hot_axis(attrs: OneHotAttrs, ndim: int) -> int:
    if not -ndim - 1 <= attrs.axis <= ndim:
        raise OpError(f"one_hot: axis {attrs.axis} must lie in [{-ndim - 1}, {ndim}] for "
                      f"{ndim}-D indices")
    return attrs.axis + ndim + 1 if attrs.axis < 0 else attrs.axis


def _one_hot_infer(types: Sequence[TensorType], attrs: OneHotAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    _one(types, "one_hot", 2)
    indices, values = types
    if np.dtype(indices.dtype).kind not in "iuf":
        raise OpError(f"one_hot: indices must be numeric, given {indices.dtype}")
    if values.shape != (2,):
        raise OpError(f"one_hot: values must have shape [2] (off, on), given "
                      f"{list(values.shape)}")
    if attrs.depth < 0:
        raise OpError(f"one_hot: depth must be >= 0, given {attrs.depth}")
    axis = _one_hot_axis(attrs, indices.ndim)
    shape = (*indices.shape[:axis], attrs.depth, *indices.shape[axis:])
    return [TensorType(shape, values.dtype)]


def _one_hot_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     attrs: OneHotAttrs) -> None:
    indices, values = inputs
    out = outputs[0]
    if out.size == 0:
        return
    axis = _one_hot_axis(attrs, indices.ndim)
    depth = attrs.depth
    idx = indices.astype(np.int64)
    if attrs.wrap_negative:
        idx = idx + (idx < 0) * depth
    shape = [1] * out.ndim
    shape[axis] = depth
    hit = xp.expand_dims(idx, axis) == _arange(xp, idx, depth).reshape(shape)
    out[...] = xp.where(hit, values[1], values[0])


register_op(OpDef(name="one_hot", attrs=OneHotAttrs, arity=2, infer=_one_hot_infer,
                  compute=_one_hot_compute))


# ---------------------------------------------------------------------------------------------
# eye_like


class EyeLikeAttrs(Attrs):
    """A 2-D tensor of the input's shape and ``dtype`` with ones on diagonal ``k`` (positive:
    above the main one) and zeros elsewhere; the input's values are not read."""

    k: int = 0
    dtype: str


def _eye_like_infer(types: Sequence[TensorType], attrs: EyeLikeAttrs,
                    data: Sequence[Any]) -> list[TensorType]:
    _one(types, "eye_like", 1)
    (src,) = types
    if src.ndim != 2:
        raise OpError(f"eye_like: the input must be 2-D, given shape {list(src.shape)}")
    try:
        dtype = np.dtype(attrs.dtype)
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind not in "biuf":
        raise OpError(f"eye_like: unknown dtype {attrs.dtype!r} (expected bool or a numeric "
                      "dtype name such as 'float32' or 'int64')")
    return [TensorType(src.shape, dtype.name)]


def _eye_like_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: EyeLikeAttrs) -> None:
    out = outputs[0]
    if out.size == 0:
        return
    out.fill(0)
    rows, cols = out.shape
    row0, col0 = max(-attrs.k, 0), max(attrs.k, 0)
    length = min(rows - row0, cols - col0)
    if length > 0:
        steps = _arange(xp, out, length)
        out[steps + row0, steps + col0] = 1


register_op(OpDef(name="eye_like", attrs=EyeLikeAttrs, arity=1, infer=_eye_like_infer,
                  compute=_eye_like_compute))


# ---------------------------------------------------------------------------------------------
# depth_to_space / space_to_depth


class DepthToSpaceAttrs(Attrs):
    """Move ``blocksize`` x ``blocksize`` blocks between the channels and the spatial dims of
    an NCHW tensor. ``mode``: ``"DCR"`` (depth-column-row) or ``"CRD"`` (column-row-depth)
    order of the channels within a block."""

    blocksize: int
    mode: Literal["DCR", "CRD"] = "DCR"


def _depth_to_space_infer(types: Sequence[TensorType], attrs: DepthToSpaceAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    _one(types, "depth_to_space", 1)
    (src,) = types
    bs = attrs.blocksize
    if src.ndim != 4 or bs < 1:
        raise OpError(f"depth_to_space: needs a 4-D NCHW input and blocksize >= 1, given "
                      f"shape {list(src.shape)} and blocksize {bs}")
    n, c, h, w = src.shape
    if c % (bs * bs):
        raise OpError(f"depth_to_space: channels {c} must be divisible by blocksize^2 = "
                      f"{bs * bs}")
    return [TensorType((n, c // (bs * bs), h * bs, w * bs), src.dtype)]


def _depth_to_space_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                            attrs: DepthToSpaceAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    bs = attrs.blocksize
    n, c, h, w = x.shape
    depth = c // (bs * bs)
    if attrs.mode == "DCR":
        blocks = x.reshape(n, bs, bs, depth, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, depth, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    _write_through(out, (n, depth, h, bs, w, bs), blocks)


register_op(OpDef(name="depth_to_space", attrs=DepthToSpaceAttrs, arity=1,
                  infer=_depth_to_space_infer, compute=_depth_to_space_compute))


def _space_to_depth_infer(types: Sequence[TensorType], attrs: DepthToSpaceAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    _one(types, "space_to_depth", 1)
    (src,) = types
    bs = attrs.blocksize
    if src.ndim != 4 or bs < 1:
        raise OpError(f"space_to_depth: needs a 4-D NCHW input and blocksize >= 1, given "
                      f"shape {list(src.shape)} and blocksize {bs}")
    n, c, h, w = src.shape
    if h % bs or w % bs:
        raise OpError(f"space_to_depth: height {h} and width {w} must be divisible by "
                      f"blocksize {bs}")
    return [TensorType((n, c * bs * bs, h // bs, w // bs), src.dtype)]


def _space_to_depth_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                            attrs: DepthToSpaceAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    bs = attrs.blocksize
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // bs, bs, w // bs, bs)
    if attrs.mode == "DCR":
        _write_through(out, (n, bs, bs, c, h // bs, w // bs),
                       blocks.transpose(0, 3, 5, 1, 2, 4))
    else:
        _write_through(out, (n, c, bs, bs, h // bs, w // bs),
                       blocks.transpose(0, 1, 3, 5, 2, 4))


register_op(OpDef(name="space_to_depth", attrs=DepthToSpaceAttrs, arity=1,
                  infer=_space_to_depth_infer, compute=_space_to_depth_compute))


# ---------------------------------------------------------------------------------------------
# reverse_sequence


class ReverseSequenceAttrs(Attrs):
    """ONNX ReverseSequence: for each index ``i`` of ``batch_axis``, reverse the first
    ``sequence_lens[i]`` elements along ``time_axis`` and keep the rest."""

    batch_axis: int = 1
    time_axis: int = 0


def _reverse_sequence_axes(attrs: ReverseSequenceAttrs, ndim: int) -> tuple[int, int]:
    batch = _axis("reverse_sequence", attrs.batch_axis, ndim)
    time = _axis("reverse_sequence", attrs.time_axis, ndim)
    if batch == time:
        raise OpError(f"reverse_sequence: batch_axis {attrs.batch_axis} and time_axis "
                      f"{attrs.time_axis} must differ")
    return batch, time


def _reverse_sequence_infer(types: Sequence[TensorType], attrs: ReverseSequenceAttrs,
                            data: Sequence[Any]) -> list[TensorType]:
    _one(types, "reverse_sequence", 2)
    src, lens = types
    _integer_input("reverse_sequence", "sequence_lens", lens)
    if src.ndim < 2:
        raise OpError(f"reverse_sequence: the input must be at least 2-D, given shape "
                      f"{list(src.shape)}")
    batch, _ = _reverse_sequence_axes(attrs, src.ndim)
    if lens.shape != (src.shape[batch],):
        raise OpError(f"reverse_sequence: sequence_lens must have shape [{src.shape[batch]}] "
                      f"(the batch axis), given {list(lens.shape)}")
    return [src]


def _reverse_sequence_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                              attrs: ReverseSequenceAttrs) -> None:
    x, lens = inputs
    out = outputs[0]
    if out.size == 0:
        return
    batch, time = _reverse_sequence_axes(attrs, x.ndim)
    steps = x.shape[time]
    length = lens.astype(np.int64)
    if int(length.min()) < 0 or int(length.max()) > steps:
        raise OpError(f"reverse_sequence: sequence_lens must lie in [0, {steps}], given values "
                      f"in [{int(length.min())}, {int(length.max())}]")
    t_shape, b_shape = [1] * x.ndim, [1] * x.ndim
    t_shape[time], b_shape[batch] = steps, x.shape[batch]
    t = _arange(xp, length, steps).reshape(t_shape)
    n = length.reshape(b_shape)
    inside = t < n
    source = t + inside * (n - 1 - 2 * t)  # n - 1 - t inside the sequence, t after it
    source = _same_device(xp, x, xp.broadcast_to(source, x.shape))
    out[...] = xp.take_along_axis(x, source, axis=time)


register_op(OpDef(name="reverse_sequence", attrs=ReverseSequenceAttrs, arity=2,
                  infer=_reverse_sequence_infer, compute=_reverse_sequence_compute))



# ---------------------------------------------------------------------------------------------
# pad_fill


class PadFillAttrs(Attrs):
    """Constant padding by ``pad_width`` (``(before, after)`` per axis, non-negative) with the
    fill value given as input 1, a one-element tensor of the data's dtype: exact for every
    value of every dtype (64-bit integers, infinities and NaN, which a float attribute of
    ``pad`` cannot carry through a JSON lib)."""

    pad_width: list[tuple[int, int]]


def _pad_fill_infer(types: Sequence[TensorType], attrs: PadFillAttrs,
                    data: Sequence[Any]) -> list[TensorType]:
    _one(types, "pad_fill", 2)
    src, value = types
    if _size(value.shape) != 1 or value.dtype != src.dtype:
        raise OpError(f"pad_fill: the fill value must be one element of the data's dtype "
                      f"({src.dtype}), given {value.dtype} of shape {list(value.shape)}")
    if len(attrs.pad_width) != src.ndim:
        raise OpError(f"pad_fill: pad_width has {len(attrs.pad_width)} (before, after) pairs, "
                      f"expected one per axis of the {src.ndim}-D input")
    if any(lo < 0 or hi < 0 for lo, hi in attrs.pad_width):
        raise OpError(f"pad_fill: pad_width {attrs.pad_width} has a negative width")
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(src.shape, attrs.pad_width, strict=True))
    return [TensorType(shape, src.dtype)]


def _pad_fill_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: PadFillAttrs) -> None:
    x, value = inputs
    out = outputs[0]
    if out.size == 0:
        return
    out[...] = value.reshape(())
    if x.size:
        out[tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, attrs.pad_width,
                                                           strict=True))] = x


register_op(OpDef(name="pad_fill", attrs=PadFillAttrs, arity=2, infer=_pad_fill_infer,
                  compute=_pad_fill_compute))
