"""Standard ops whose output shape depends on their input's values: ``nonzero``, ``unique``,
``non_max_suppression``, ``compress`` and ``dynamic_topk``.

Their shape functions read the values they depend on (``data_dependent``), so at run time the
executor runs them on the host before the kernel, copying only those inputs there. Each also
declares a ``bound``: the largest each output can be, from the input *shapes* alone, and which
axes the data decides. A converter that meets one of these ops before its data is known
(a graph input) plans the outputs at that bound, with a fresh shape variable per decided axis,
which the shape function binds on every run.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("nonzero")
    >>> x = np.array([[0, 3], [4, 0]])
    >>> op.infer([TensorType((2, 2), "int64")], op.attrs(), [x])
    [TensorType(shape=(2, 2), dtype='int64')]
    >>> op.bound([TensorType((2, 2), "int64")], op.attrs())
    [(TensorType(shape=(2, 4), dtype='int64'), {1: 'count'})]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import Attrs, OpDef, OpError, TensorType, host_values, normalize_axis, register_op
from .indexing import TopkAttrs, _topk_compute

__all__: list[str] = []


def _values(name: str, data: Sequence[Any], index: int, role: str) -> np.ndarray[Any, Any]:
    if len(data) <= index or data[index] is None:
        raise OpError(f"{name}: infer needs the values of {role} (input {index}); none given")
    return np.asarray(data[index])


def _size(shape: Sequence[int]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def _axis(name: str, axis: int, ndim: int) -> int:
    try:
        return normalize_axis(axis, ndim)
    except OpError as err:
        raise OpError(f"{name}: {err}") from None


# ---------------------------------------------------------------------------------------------
# nonzero


class NoAttrs(Attrs):
    """No attributes."""


def _nonzero_infer(types: Sequence[TensorType], attrs: NoAttrs,
                   data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"nonzero: expected 1 input, given {len(types)}")
    count = int(np.count_nonzero(_values("nonzero", data, 0, "the input")))
    return [TensorType((max(types[0].ndim, 1), count), "int64")]


def _nonzero_bound(types: Sequence[TensorType], attrs: NoAttrs
                   ) -> list[tuple[TensorType, dict[int, str]]]:
    return [(TensorType((max(types[0].ndim, 1), _size(types[0].shape)), "int64"),
             {1: "count"})]


def _nonzero_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                     attrs: NoAttrs) -> None:
    out = outputs[0]
    if out.size:  # a 0-d input is read as its one element, as ONNX's reference does
        for axis, index in enumerate(xp.nonzero(inputs[0].reshape(inputs[0].shape or (1,)))):
            out[axis] = index


register_op(OpDef(name="nonzero", attrs=NoAttrs, arity=1, infer=_nonzero_infer,
                  compute=_nonzero_compute, data_dependent=(True,), bound=_nonzero_bound))


# ---------------------------------------------------------------------------------------------
# unique


class UniqueAttrs(Attrs):
    """``sorted``: values ascending (else in order of first occurrence); ``axis``: unique
    slices along it, or None for unique elements of the flattened input. Outputs: the unique
    values, the index of each one's first occurrence, each element's (slice's) position among
    the unique ones, and their counts (ONNX ``Unique``)."""

    sorted: bool = True
    axis: int | None = None


def _unique(x: np.ndarray[Any, Any], attrs: UniqueAttrs
            ) -> tuple[np.ndarray[Any, Any], ...]:
    axis = None if attrs.axis is None else normalize_axis(attrs.axis, x.ndim)
    source = x.reshape(-1) if axis is None else x
    y, first, inverse, counts = np.unique(source, return_index=True, return_inverse=True,
                                          return_counts=True, axis=0 if axis is None else axis)
    inverse = inverse.reshape(-1)
    if not attrs.sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(source, first, axis=0 if axis is None else axis)
    return y, first, inverse, counts


def _unique_types(types: Sequence[TensorType], attrs: UniqueAttrs, count: int
                  ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"unique: expected 1 input, given {len(types)}")
    x = types[0]
    shape: tuple[int, ...]
    if attrs.axis is None:
        shape, n = (count,), _size(x.shape)
    else:
        axis = _axis("unique", attrs.axis, x.ndim)
        shape, n = (*x.shape[:axis], count, *x.shape[axis + 1:]), x.shape[axis]
    return [TensorType(shape, x.dtype), TensorType((count,), "int64"),
            TensorType((n,), "int64"), TensorType((count,), "int64")]


def _unique_infer(types: Sequence[TensorType], attrs: UniqueAttrs,
                  data: Sequence[Any]) -> list[TensorType]:
    _unique_types(types, attrs, 0)  # checks arity and axis first
    values = _values("unique", data, 0, "the input")
    return _unique_types(types, attrs, int(_unique(values, attrs)[1].shape[0]))


def _unique_bound(types: Sequence[TensorType], attrs: UniqueAttrs
                  ) -> list[tuple[TensorType, dict[int, str]]]:
    x = types[0]
    n = _size(x.shape) if attrs.axis is None else x.shape[_axis("unique", attrs.axis, x.ndim)]
    at = 0 if attrs.axis is None else _axis("unique", attrs.axis, x.ndim)
    found = _unique_types(types, attrs, n)
    return [(found[0], {at: "count"}), (found[1], {0: "count"}), (found[2], {}),
            (found[3], {0: "count"})]


def _unique_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: UniqueAttrs) -> None:
    found = _unique(host_values(xp, inputs[0]), attrs)
    for out, value in zip(outputs, found, strict=True):
        if out.size:
            out[...] = value


register_op(OpDef(name="unique", attrs=UniqueAttrs, arity=1, infer=_unique_infer,
                  compute=_unique_compute, data_dependent=(True,), num_outputs=4,
                  bound=_unique_bound))


# ---------------------------------------------------------------------------------------------
# non_max_suppression


class NmsAttrs(Attrs):
    """ONNX ``NonMaxSuppression``: boxes ``[batch, boxes, 4]`` as corners ``[y1, x1, y2,
    x2]`` (either diagonal) or, with ``center_point_box``, ``[x, y, w, h]``; scores ``[batch,
    classes, boxes]``; optional scalar inputs max_output_boxes_per_class (0 when absent),
    iou_threshold and score_threshold. The output lists ``[batch, class, box]`` per selected
    box, by batch, then class, then descending score."""

    center_point_box: bool = False


def _corners(boxes: np.ndarray[Any, Any], center: bool) -> np.ndarray[Any, Any]:
    """``[x_min, y_min, x_max, y_max]`` of each box."""
    if center:
        x, y, w, h = (boxes[..., i] for i in range(4))
        return np.stack([x - w / 2, y - h / 2, x + w / 2, y + h / 2], axis=-1)
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.stack([np.minimum(x1, x2), np.minimum(y1, y2), np.maximum(x1, x2),
                     np.maximum(y1, y2)], axis=-1)


def _scalar(values: Sequence[Any], index: int, default: float) -> float:
    if len(values) <= index or values[index] is None or np.asarray(values[index]).size == 0:
        return default
    return float(np.asarray(values[index]).reshape(-1)[0])


def _nms(values: Sequence[Any], attrs: NmsAttrs) -> np.ndarray[Any, Any]:
    boxes, scores = np.asarray(values[0]), np.asarray(values[1])
    limit = max(int(_scalar(values, 2, 0)), 0)
    iou_threshold = _scalar(values, 3, 0.0)
    has_score_threshold = len(values) > 4 and values[4] is not None and np.asarray(
        values[4]).size > 0
    score_threshold = _scalar(values, 4, 0.0)
    corners = _corners(boxes.astype(np.float64), attrs.center_point_box)
    area = (corners[..., 2] - corners[..., 0]) * (corners[..., 3] - corners[..., 1])
    selected: list[tuple[int, int, int]] = []
    for batch in range(scores.shape[0]):
        box, box_area = corners[batch], area[batch]
        for cls in range(scores.shape[1]):
            score = scores[batch, cls]
            # descending score, ties by ascending index (ONNX's reference order)
            order = np.lexsort((np.arange(score.size), -score.astype(np.float64)))
            if has_score_threshold:
                order = order[score[order] > score_threshold]
            kept: list[int] = []
            for index in order:
                if len(kept) >= limit:
                    break
                if kept:
                    other = box[kept]
                    width = np.minimum(other[:, 2], box[index, 2]) - np.maximum(
                        other[:, 0], box[index, 0])
                    height = np.minimum(other[:, 3], box[index, 3]) - np.maximum(
                        other[:, 1], box[index, 1])
                    inter = np.where((width > 0) & (height > 0), width * height, 0.0)
                    union = box_area[kept] + box_area[index] - inter
                    valid = (inter > 0) & (box_area[kept] > 0) & (box_area[index] > 0) & (
                        union > 0)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        iou = np.where(valid, inter / np.where(union > 0, union, 1), 0.0)
                    if bool((iou > iou_threshold).any()):
                        continue
                kept.append(int(index))
            selected += [(batch, cls, index) for index in kept]
    return np.asarray(selected, np.int64).reshape(-1, 3)


def _nms_check(types: Sequence[TensorType]) -> tuple[int, int, int]:
    if not 2 <= len(types) <= 5:
        raise OpError(f"non_max_suppression: expected 2 to 5 inputs, given {len(types)}")
    boxes, scores = types[0], types[1]
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise OpError(f"non_max_suppression: boxes must be [batch, boxes, 4], given "
                      f"{list(boxes.shape)}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or (
            scores.shape[2] != boxes.shape[1]):
        raise OpError(f"non_max_suppression: scores must be [batch, classes, boxes] = "
                      f"[{boxes.shape[0]}, C, {boxes.shape[1]}], given {list(scores.shape)}")
    return boxes.shape[0], scores.shape[1], boxes.shape[1]


def _nms_infer(types: Sequence[TensorType], attrs: NmsAttrs,
               data: Sequence[Any]) -> list[TensorType]:
    _nms_check(types)
    values = [_values("non_max_suppression", data, 0, "boxes"),
              _values("non_max_suppression", data, 1, "scores"), *data[2:]]
    return [TensorType((int(_nms(values, attrs).shape[0]), 3), "int64")]


def _nms_bound(types: Sequence[TensorType], attrs: NmsAttrs
               ) -> list[tuple[TensorType, dict[int, str]]]:
    batches, classes, boxes = _nms_check(types)
    return [(TensorType((batches * classes * boxes, 3), "int64"), {0: "selected"})]


def _nms_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: NmsAttrs) -> None:
    if outputs[0].size:
        outputs[0][...] = _nms([host_values(xp, v) for v in inputs], attrs)


register_op(OpDef(name="non_max_suppression", attrs=NmsAttrs, arity=None, infer=_nms_infer,
                  compute=_nms_compute, data_dependent=(True,), bound=_nms_bound))


# ---------------------------------------------------------------------------------------------
# compress


class CompressAttrs(Attrs):
    """The slices along ``axis`` (of the flattened input when None) where the 1-D boolean
    condition is true; a condition shorter than the axis selects from its first entries."""

    axis: int | None = None


def _compress_length(types: Sequence[TensorType], attrs: CompressAttrs) -> int:
    if len(types) != 2:
        raise OpError(f"compress: expected the input and the condition, given {len(types)} "
                      "inputs")
    if types[1].ndim != 1:
        raise OpError(f"compress: the condition must be 1-D, given {list(types[1].shape)}")
    x = types[0]
    return _size(x.shape) if attrs.axis is None else x.shape[_axis("compress", attrs.axis,
                                                                     x.ndim)]


def _compress_types(types: Sequence[TensorType], attrs: CompressAttrs, count: int
                    ) -> list[TensorType]:
    x = types[0]
    if attrs.axis is None:
        return [TensorType((count,), x.dtype)]
    axis = _axis("compress", attrs.axis, x.ndim)
    return [TensorType((*x.shape[:axis], count, *x.shape[axis + 1:]), x.dtype)]


def _compress_infer(types: Sequence[TensorType], attrs: CompressAttrs,
                    data: Sequence[Any]) -> list[TensorType]:
    length = _compress_length(types, attrs)
    chosen = np.flatnonzero(_values("compress", data, 1, "the condition").astype(bool))
    if chosen.size and chosen[-1] >= length:
        raise OpError(f"compress: the condition selects index {int(chosen[-1])}, beyond the "
                      f"{length} entries it chooses from")
    return _compress_types(types, attrs, int(chosen.size))


def _compress_bound(types: Sequence[TensorType], attrs: CompressAttrs
                    ) -> list[tuple[TensorType, dict[int, str]]]:
    length = min(_compress_length(types, attrs), types[1].shape[0])
    at = 0 if attrs.axis is None else _axis("compress", attrs.axis, types[0].ndim)
    return [(_compress_types(types, attrs, length)[0], {at: "count"})]


def _compress_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: CompressAttrs) -> None:
    x, condition = inputs
    out = outputs[0]
    if out.size:
        source = x.reshape(-1) if attrs.axis is None else x
        axis = 0 if attrs.axis is None else normalize_axis(attrs.axis, x.ndim)
        chosen = xp.nonzero(condition.astype(bool))[0]
        xp.copyto(out, xp.take(source, chosen, axis=axis))


register_op(OpDef(name="compress", attrs=CompressAttrs, arity=2, infer=_compress_infer,
                  compute=_compress_compute, data_dependent=(False, True),
                  bound=_compress_bound))


# ---------------------------------------------------------------------------------------------
# dynamic_topk


class DynamicTopkAttrs(Attrs):
    """``topk`` with ``k`` a one-element integer tensor (input 1) read at run time."""

    axis: int = -1
    largest: bool = True


def _topk_types(types: Sequence[TensorType], attrs: DynamicTopkAttrs, k: int
                ) -> list[TensorType]:
    if len(types) != 2:
        raise OpError(f"dynamic_topk: expected the input and k, given {len(types)} inputs")
    x = types[0]
    if x.ndim == 0:
        raise OpError("dynamic_topk: the input must be at least 1-D, given a 0-D tensor")
    axis = _axis("dynamic_topk", attrs.axis, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise OpError(f"dynamic_topk: k {k} must lie in [0, {x.shape[axis]}] (axis {axis} of "
                      f"shape {list(x.shape)})")
    shape = (*x.shape[:axis], k, *x.shape[axis + 1:])
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _dynamic_topk_infer(types: Sequence[TensorType], attrs: DynamicTopkAttrs,
                        data: Sequence[Any]) -> list[TensorType]:
    ks = _values("dynamic_topk", data, 1, "k").reshape(-1)
    if ks.size != 1 or ks.dtype.kind not in "iu":
        raise OpError(f"dynamic_topk: k must be one integer, given {ks.dtype}{list(ks.shape)}")
    return _topk_types(types, attrs, int(ks[0]))


def _dynamic_topk_bound(types: Sequence[TensorType], attrs: DynamicTopkAttrs
                        ) -> list[tuple[TensorType, dict[int, str]]]:
    axis = _axis("dynamic_topk", attrs.axis, max(types[0].ndim, 1))
    found = _topk_types(types, attrs, types[0].shape[axis])
    return [(found[0], {axis: "k"}), (found[1], {axis: "k"})]


def _dynamic_topk_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                          attrs: DynamicTopkAttrs) -> None:
    axis = normalize_axis(attrs.axis, inputs[0].ndim)
    fixed = TopkAttrs(k=outputs[0].shape[axis], axis=axis, largest=attrs.largest)
    _topk_compute(xp, inputs[:1], outputs, fixed)  # k is the output's length on that axis


register_op(OpDef(name="dynamic_topk", attrs=DynamicTopkAttrs, arity=2,
                  infer=_dynamic_topk_infer, compute=_dynamic_topk_compute,
                  data_dependent=(False, True), num_outputs=2, bound=_dynamic_topk_bound))
