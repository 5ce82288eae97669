"""Differential tests of graphrt's shape, layout and indexing ops (transform and indexing)
against ONNX Runtime one-node models, in float32, float16 and integer dtypes.

The rows, helpers and tolerance policy are those of ``test_ops_differential_nn.py``; ops that
only move elements compare exactly in every dtype. Ops without an ONNX counterpart
(``slice_like``, blocked ``layout_transform``) and modes ONNX lacks compare with numpy.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from tests.ops.test_ops_differential_nn import (
    FLOATS,
    I64_MAX,
    I64_MIN,
    Arrays,
    Case,
    check_case,
    check_sim,
    data,
    i64,
    onnx,
    params,
    sim_params,
)

ALL = ("float32", "float16", "int64", "uint8")
"""Element-moving ops run in every dtype; their results must be exact."""


def x_of(shape: tuple[int, ...]) -> Any:
    return lambda dt, r: [data(r, shape, dt)]


# --------------------------------------------------------------------------------------------
# reshape, transpose, flatten, expand_dims, squeeze, concatenate, split


def reshape_case(shape: tuple[int, ...], newshape: list[int]) -> Case:
    return Case(f"reshape-{list(shape)}->{newshape}", "reshape", {"newshape": newshape},
                x_of(shape), lambda ins: onnx("Reshape", {"x": ins[0]},
                                              {"s": np.array(newshape, np.int64)}),
                dtypes=ALL)


def transpose_case(shape: tuple[int, ...], axes: list[int] | None) -> Case:
    perm = list(reversed(range(len(shape)))) if axes is None else [a % len(shape) for a in axes]
    return Case(f"transpose-{list(shape)}-{axes}", "transpose", {"axes": axes}, x_of(shape),
                lambda ins: onnx("Transpose", {"x": ins[0]}, perm=perm), dtypes=ALL)


def flatten_case(shape: tuple[int, ...], axis: int) -> Case:
    return Case(f"flatten-{list(shape)}-axis{axis}", "flatten", {"axis": axis}, x_of(shape),
                lambda ins: onnx("Flatten", {"x": ins[0]}, axis=axis), dtypes=ALL)


def expand_dims_case(shape: tuple[int, ...], axis: int, num: int = 1) -> Case:
    at = axis + len(shape) + 1 if axis < 0 else axis
    return Case(f"expand_dims-{list(shape)}-axis{axis}-n{num}", "expand_dims",
                {"axis": axis, "num_newaxis": num}, x_of(shape),
                lambda ins: onnx("Unsqueeze", {"x": ins[0]}, {"a": i64(*range(at, at + num))}),
                dtypes=ALL)


def squeeze_case(shape: tuple[int, ...], axis: list[int] | None) -> Case:
    consts = {} if axis is None else {"a": np.array(axis, np.int64)}
    return Case(f"squeeze-{list(shape)}-{axis}", "squeeze", {"axis": axis}, x_of(shape),
                lambda ins: onnx("Squeeze", {"x": ins[0]}, consts), dtypes=ALL)


def concat_case(shapes: list[tuple[int, ...]], axis: int) -> Case:
    return Case(f"concatenate-{shapes}-axis{axis}", "concatenate", {"axis": axis},
                lambda dt, r: [data(r, s, dt) for s in shapes],
                lambda ins: onnx("Concat", {f"in{i}": a for i, a in enumerate(ins)}, axis=axis),
                dtypes=ALL)


def split_case(shape: tuple[int, ...], ios: int | list[int], axis: int) -> Case:
    dim = shape[axis]
    if isinstance(ios, int):
        sizes, n = [dim // ios] * ios, ios
    else:
        points = [0, *ios, dim]
        sizes, n = [b - a for a, b in pairwise(points)], len(ios) + 1
    return Case(f"split-{list(shape)}-{ios}-axis{axis}", "split",
                {"indices_or_sections": ios, "axis": axis}, x_of(shape),
                lambda ins: onnx("Split", {"x": ins[0]}, {"s": np.array(sizes, np.int64)},
                                 n_outputs=n, axis=axis), dtypes=ALL)


SHAPE = [
    reshape_case((2, 3, 4), [4, -1]),
    reshape_case((2, 3, 4), [0, 0, 2, 2]),
    reshape_case((2, 3, 4), [-1]),
    reshape_case((2, 0, 4), [0, 4, -1]),
    reshape_case((1,), []),
    transpose_case((2, 3, 4), [1, 0, 2]),
    transpose_case((2, 3, 4), None),
    transpose_case((2, 3, 4, 5), [-1, 0, -2, 1]),
    transpose_case((3, 0, 2), [2, 0, 1]),
    transpose_case((5,), [0]),
    flatten_case((2, 3, 4), 1),
    flatten_case((2, 3, 4), 0),
    flatten_case((2, 3, 4), 3),
    flatten_case((2, 3, 4), -1),
    flatten_case((2, 0, 4), 2),
    expand_dims_case((2, 3), 0),
    expand_dims_case((2, 3), -1),
    expand_dims_case((2, 3), 1, 2),
    expand_dims_case((2, 3), -3, 3),
    squeeze_case((1, 3, 1, 2), None),
    squeeze_case((1, 3, 1, 2), [0]),
    squeeze_case((1, 3, 1, 2), [-2, 0]),
    squeeze_case((1, 1), [0, 1]),
    concat_case([(2, 3), (4, 3), (1, 3)], 0),
    concat_case([(2, 3, 1), (2, 3, 4)], -1),
    concat_case([(2, 0), (2, 3), (2, 0)], 1),
    concat_case([(2, 3)], 0),
    split_case((6, 4), 3, 0),
    split_case((2, 7), [2, 5], 1),
    split_case((2, 7), [0, 3, 3], -1),
    split_case((4, 2), 1, 0),
]


# --------------------------------------------------------------------------------------------
# strided_slice, dynamic_strided_slice, slice_like


def _onnx_slice(shape: tuple[int, ...], begin: list[int], end: list[int],
                strides: list[int] | None, axes: list[int] | None) -> dict[str, np.ndarray]:
    """ONNX Slice's starts/ends/axes/steps for graphrt's begin/end/strides/axes (a missing end
    runs to the end of the axis in the stride's direction)."""
    k = len(begin)
    steps = list(strides or []) + [1] * (k - len(strides or []))
    ends = list(end) + [I64_MAX if s > 0 else I64_MIN for s in steps[len(end):]]
    return {"starts": np.array(begin, np.int64), "ends": np.array(ends, np.int64),
            "axes": np.array(axes if axes is not None else list(range(k)), np.int64),
            "steps": np.array(steps, np.int64)}


def python_slice(x: np.ndarray, begin: list[int], end: list[int], strides: list[int] | None,
                 axes: list[int] | None) -> Arrays:
    """numpy (Python) slicing: graphrt's documented semantics. It departs from ONNX Slice
    only where a negative step starts below ``-dim``: Python clamps that start to "before
    index 0" (nothing), ONNX to index 0 (the ONNX frontend converts; checked separately)."""
    index = [slice(None)] * x.ndim
    steps = list(strides or []) + [1] * (len(begin) - len(strides or []))
    for j, axis in enumerate(axes if axes is not None else range(len(begin))):
        index[axis] = slice(begin[j], end[j] if j < len(end) else None, steps[j])
    return [x[tuple(index)]]


def slice_case(shape: tuple[int, ...], begin: list[int], end: list[int],
               strides: list[int] | None = None, axes: list[int] | None = None,
               python: bool = False) -> Case:
    consts = _onnx_slice(shape, begin, end, strides, axes)

    def ref(ins: Arrays) -> Arrays:
        if python:
            return python_slice(ins[0], begin, end, strides, axes)
        return onnx("Slice", {"x": ins[0]}, consts)

    return Case(f"strided_slice-{list(shape)}-b{begin}-e{end}-s{strides}-a{axes}",
                "strided_slice", {"begin": begin, "end": end, "strides": strides, "axes": axes},
                x_of(shape), ref, dtypes=ALL)


def dyn_slice_case(shape: tuple[int, ...], begin: list[int], end: list[int],
                   strides: list[int], index_dtype: str = "int64", python: bool = False
                   ) -> Case:
    consts = _onnx_slice(shape, begin, end, strides, None)
    idt = np.dtype(index_dtype)

    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        return [data(r, shape, dt), np.array(begin, idt), np.array(end, idt),
                np.array(strides, idt)]

    return Case(f"dynamic_strided_slice-{list(shape)}-b{begin}-e{end}-s{strides}-{index_dtype}",
                "dynamic_strided_slice", {}, make,
                lambda ins: python_slice(ins[0], begin, end, strides, None) if python
                else onnx("Slice", {"x": ins[0]}, consts), dtypes=ALL)


def slice_like_case(shape: tuple[int, ...], like: tuple[int, ...], axes: list[int],
                    like_axes: list[int] | None = None) -> Case:
    def ref(ins: Arrays) -> Arrays:
        # TVM's slice_like has no ONNX counterpart: numpy slicing
        index = [slice(None)] * len(shape)
        for a, b in zip(axes, like_axes or axes, strict=True):
            index[a] = slice(0, like[b])
        return [ins[0][tuple(index)]]

    return Case(f"slice_like-{list(shape)}-like{list(like)}-{axes}-{like_axes}", "slice_like",
                {"axes": axes, "like_axes": like_axes},
                lambda dt, r: [data(r, shape, dt), data(r, like, dt)], ref, dtypes=ALL)


SLICE = [
    slice_case((5, 6), [1, 2], [4, 5]),
    slice_case((5, 6), [-4, 0], [-1, 6], [2, 3]),
    slice_case((5, 6), [4], [0], [-1]),
    slice_case((5, 6), [-1, 5], [-100, 0], [-2, -3]),
    slice_case((5, 6), [10], [20]),
    slice_case((5, 6, 3), [1, 0], [3, 2], None, [2, -3]),
    slice_case((5, 6), [3], [], [-1]),
    slice_case((5, 6), [0, 1], [5], [1, 2]),
    slice_case((4, 0), [0, 0], [2, 0]),
    # a negative step starting below -dim: nothing in Python's semantics (numpy reference)
    slice_case((5, 6), [-10], [], [-1], python=True),
    slice_case((5, 6), [0, -9], [3, -7], [-1, -2], python=True),
    dyn_slice_case((5, 6), [-10], [-20], [-1], python=True),
    dyn_slice_case((5, 6), [4, -7], [-100, -9], [-2, -1], python=True),
    dyn_slice_case((5, 6), [1, 2], [4, 5], [1, 2]),
    dyn_slice_case((5, 6), [4, -1], [-100, 0], [-2, -1]),
    dyn_slice_case((5, 6), [-4], [100], [3], "int32"),
    dyn_slice_case((5, 6), [1, 0], [4, 5], [2, 2], "int8"),
    dyn_slice_case((5, 6), [4], [0], [-1], "int16"),
    # begin + length overflows a small index dtype (-1 + 200 = 199 > int8's 127)
    dyn_slice_case((200, 2), [-1, 0], [-127, 2], [-2, 1], "int8"),
    dyn_slice_case((300, 2), [-44], [255], [1], "int16"),
    dyn_slice_case((300,), [250], [255], [2], "uint8"),
    slice_like_case((5, 6, 7), (3, 4), [0, 1]),
    slice_like_case((5, 6, 7), (2, 9, 4), [2], [2]),
    slice_like_case((5, 6, 7), (2, 3), [-1], [0]),
]


# --------------------------------------------------------------------------------------------
# take, gather, gather_nd, scatter_elements, scatter_nd


def take_case(shape: tuple[int, ...], idx: Any, axis: int | None, mode: str,
              index_dtype: str = "int64") -> Case:
    n = int(np.prod(shape)) if axis is None else shape[axis]
    indices = np.array(idx, dtype=index_dtype)

    def ref(ins: Arrays) -> Arrays:
        x = ins[0].reshape(-1) if axis is None else ins[0]
        i = indices.astype(np.int64)
        # ONNX Gather takes [-n, n): clip and wrap (TVM modes) map the indices there first
        i = np.clip(i, 0, n - 1) if mode == "clip" else np.mod(i, n) if mode == "wrap" else i
        return onnx("Gather", {"x": x}, {"i": i}, axis=axis or 0)

    return Case(f"take-{list(shape)}-{idx}-axis{axis}-{mode}-{index_dtype}", "take",
                {"axis": axis, "mode": mode}, lambda dt, r: [data(r, shape, dt), indices], ref,
                dtypes=ALL)


def gather_case(shape: tuple[int, ...], ishape: tuple[int, ...], axis: int,
                negative: bool = False) -> Case:
    n = shape[axis]

    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        lo = -n if negative else 0
        return [data(r, shape, dt), r.integers(lo, n, size=ishape).astype(np.int64)]

    return Case(f"gather-{list(shape)}-{list(ishape)}-axis{axis}-neg{int(negative)}", "gather",
                {"axis": axis}, make,
                lambda ins: onnx("GatherElements", {"x": ins[0], "i": ins[1]}, axis=axis),
                dtypes=ALL)


def gather_nd_case(shape: tuple[int, ...], ishape: tuple[int, ...], batch_dims: int = 0,
                   negative: bool = False) -> Case:
    q = ishape[-1]
    dims = shape[batch_dims:batch_dims + q]

    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        cols = [r.integers(-d if negative else 0, d, size=ishape[:-1]) for d in dims]
        return [data(r, shape, dt), np.stack(cols, axis=-1).astype(np.int64).reshape(ishape)]

    return Case(f"gather_nd-{list(shape)}-{list(ishape)}-b{batch_dims}-neg{int(negative)}",
                "gather_nd", {"batch_dims": batch_dims}, make,
                lambda ins: onnx("GatherND", {"x": ins[0], "i": ins[1]}, batch_dims=batch_dims),
                dtypes=ALL)


def scatter_elements_case(shape: tuple[int, ...], ishape: tuple[int, ...], axis: int,
                          reduction: str) -> Case:
    n = shape[axis]
    axis_ = axis % len(shape)

    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        axis = axis_
        if reduction == "none":  # distinct targets along the axis: ONNX leaves repeats open
            idx = np.argsort(r.random((*ishape[:axis], n, *ishape[axis + 1:])), axis=axis)
            idx = np.take(idx, range(ishape[axis]), axis=axis) - n * (r.random(ishape) < 0.3)
        else:
            idx = r.integers(-n, n, size=ishape)
        return [data(r, shape, dt), idx.astype(np.int64), data(r, ishape, dt)]

    return Case(f"scatter_elements-{list(shape)}-{list(ishape)}-axis{axis}-{reduction}",
                "scatter_elements", {"axis": axis, "reduction": reduction}, make,
                lambda ins: onnx("ScatterElements", {"x": ins[0], "i": ins[1], "u": ins[2]},
                                 axis=axis, reduction=reduction), dtypes=ALL)


def scatter_nd_case(shape: tuple[int, ...], ishape: tuple[int, ...], reduction: str) -> Case:
    k, m = ishape[-1], int(np.prod(ishape[:-1]))

    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        span = int(np.prod(shape[:k]))
        flat = (r.permutation(span)[:m] if reduction == "none"
                else r.integers(0, span, size=m))  # repeats only where they are defined
        idx = np.stack(np.unravel_index(flat, shape[:k]), axis=-1).reshape(ishape)
        idx = idx - np.array(shape[:k]) * (r.random(ishape) < 0.3)  # some negative
        return [data(r, shape, dt), idx.astype(np.int64),
                data(r, (*ishape[:-1], *shape[k:]), dt)]

    return Case(f"scatter_nd-{list(shape)}-{list(ishape)}-{reduction}", "scatter_nd",
                {"reduction": reduction}, make,
                lambda ins: onnx("ScatterND", {"x": ins[0], "i": ins[1], "u": ins[2]},
                                 reduction=reduction), dtypes=ALL)


INDEX = [
    take_case((5, 3), [[0, 4], [2, 2]], 0, "clip"),
    take_case((5, 3), [-1, 7, 2], 0, "clip"),
    take_case((5, 3), [-1, 7, 2, -6], -1, "wrap"),
    take_case((5, 3), [-5, 4, -1], 0, "raise", "int32"),
    take_case((2, 3, 4), [[1], [3]], None, "raise"),
    take_case((2, 3, 4), [], 1, "clip"),
    take_case((4,), 2, 0, "raise"),
    gather_case((4, 5), (3, 5), 0),
    gather_case((4, 5), (4, 2), 1, negative=True),
    gather_case((3, 4, 5), (2, 6, 5), -2, negative=True),
    gather_nd_case((4, 5, 6), (3, 2)),
    gather_nd_case((4, 5, 6), (2, 3, 3), negative=True),
    gather_nd_case((2, 5, 6), (2, 3, 1), batch_dims=1),
    gather_nd_case((2, 3, 4, 5), (2, 3, 4, 1), batch_dims=2, negative=True),
    scatter_elements_case((4, 5), (3, 5), 0, "none"),
    scatter_elements_case((4, 5), (4, 3), -1, "none"),
    *[scatter_elements_case((4, 5), (6, 4), 0, red) for red in ("add", "mul", "max", "min")],
    scatter_nd_case((4, 5, 3), (3, 2), "none"),
    scatter_nd_case((6, 3), (4, 1), "none"),
    *[scatter_nd_case((4, 3), (6, 1), red) for red in ("add", "mul", "max", "min")],
    scatter_nd_case((3, 4), (2, 2, 2), "add"),
]


# --------------------------------------------------------------------------------------------
# tile, broadcast_to, pad, pad_fill, cumsum, topk, one_hot, eye_like, depth/space, sequence


def pad_case(shape: tuple[int, ...], width: list[tuple[int, int]], mode: str,
             value: float = 0.0) -> Case:
    pads = np.array([lo for lo, _ in width] + [hi for _, hi in width], np.int64)

    def ref(ins: Arrays) -> Arrays:
        consts = {"p": pads}
        if mode == "constant":
            consts["v"] = np.array(value).astype(ins[0].dtype)
        return onnx("Pad", {"x": ins[0]}, consts, mode=mode)

    return Case(f"pad-{list(shape)}-{width}-{mode}-{value}", "pad",
                {"pad_width": width, "mode": mode, "pad_value": value}, x_of(shape), ref,
                dtypes=ALL)


def pad_fill_case(shape: tuple[int, ...], width: list[tuple[int, int]], value: float) -> Case:
    pads = np.array([lo for lo, _ in width] + [hi for _, hi in width], np.int64)
    return Case(f"pad_fill-{list(shape)}-{width}-{value}", "pad_fill", {"pad_width": width},
                lambda dt, r: [data(r, shape, dt), np.array([value]).astype(dt)],
                lambda ins: onnx("Pad", {"x": ins[0]}, {"p": pads, "v": ins[1].reshape(())}),
                dtypes=ALL)


def cumsum_case(shape: tuple[int, ...], axis: int, exclusive: bool = False,
                reverse: bool = False, dtypes: tuple[str, ...] = (*FLOATS, "int64", "int32")
                ) -> Case:
    n = shape[axis]
    return Case(f"cumsum-{list(shape)}-axis{axis}-ex{int(exclusive)}-rev{int(reverse)}",
                "cumsum", {"axis": axis, "exclusive": exclusive, "reverse": reverse},
                x_of(shape),
                lambda ins: onnx("CumSum", {"x": ins[0]}, {"a": np.array(axis, np.int64)},
                                 exclusive=int(exclusive), reverse=int(reverse)),
                dtypes=dtypes,
                # a running sum of up to n terms: the last rounds n times in either order
                tol={"float32": (1e-5, n * 1.2e-7 * 4), "float16": (2e-3, n * 1e-3 * 2)})


def topk_case(shape: tuple[int, ...], k: int, axis: int, largest: bool,
              ties: bool = False) -> Case:
    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        if ties:
            return [r.integers(0, 4, size=shape).astype(dt)]
        # distinct values in every dtype (a permutation), so the indices are defined
        return [r.permutation(int(np.prod(shape))).reshape(shape).astype(dt)]

    return Case(f"topk-{list(shape)}-k{k}-axis{axis}-largest{int(largest)}-ties{int(ties)}",
                "topk", {"k": k, "axis": axis, "largest": largest}, make,
                lambda ins: onnx("TopK", {"x": ins[0]}, {"k": i64(k)}, n_outputs=2, axis=axis,
                                 largest=int(largest), sorted=1),
                dtypes=(*FLOATS, "int64", "uint8") if not ties else (*FLOATS, "int64"))


def one_hot_case(ishape: tuple[int, ...], depth: int, axis: int, wrap: bool = True) -> Case:
    def make(dt: np.dtype[Any], r: np.random.Generator) -> Arrays:
        idx = r.integers(-depth - 1, depth + 1, size=ishape).astype(np.int64)
        return [idx, np.array([-2 if dt.kind != "u" else 3, 5]).astype(dt)]

    def ref(ins: Arrays) -> Arrays:
        if wrap:
            return onnx("OneHot", {"i": ins[0]}, {"d": np.array(depth, np.int64), "v": ins[1]},
                        axis=axis)
        # wrap_negative=False has no ONNX counterpart: numpy (negatives select nothing)
        out_axis = axis % (len(ishape) + 1)
        hit = np.expand_dims(ins[0], out_axis) == np.arange(depth).reshape(
            [-1 if a == out_axis else 1 for a in range(len(ishape) + 1)])
        return [np.where(hit, ins[1][1], ins[1][0])]

    return Case(f"one_hot-{list(ishape)}-d{depth}-axis{axis}-wrap{int(wrap)}", "one_hot",
                {"depth": depth, "axis": axis, "wrap_negative": wrap}, make, ref, dtypes=ALL)


def eye_like_case(shape: tuple[int, int], k: int, dtype: str) -> Case:
    onnx_dtype = {"float32": 1, "uint8": 2, "int32": 6, "int64": 7, "float16": 10}[dtype]
    return Case(f"eye_like-{list(shape)}-k{k}-{dtype}", "eye_like", {"k": k, "dtype": dtype},
                x_of(shape),
                lambda ins: onnx("EyeLike", {"x": ins[0]}, k=k, dtype=onnx_dtype),
                dtypes=("float32", "int64"))


def d2s_case(op: str, shape: tuple[int, ...], bs: int, mode: str) -> Case:
    def ref(ins: Arrays) -> Arrays:
        if op == "depth_to_space":
            return onnx("DepthToSpace", {"x": ins[0]}, blocksize=bs, mode=mode)
        if mode == "DCR":
            return onnx("SpaceToDepth", {"x": ins[0]}, blocksize=bs)
        # SpaceToDepth has no CRD mode in ONNX: numpy, the inverse of DepthToSpace CRD
        n, c, h, w = ins[0].shape
        blocks = ins[0].reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 1, 3, 5, 2, 4)
        return [blocks.reshape(n, c * bs * bs, h // bs, w // bs)]

    return Case(f"{op}-{list(shape)}-bs{bs}-{mode}", op, {"blocksize": bs, "mode": mode},
                x_of(shape), ref, dtypes=ALL)


def reverse_sequence_case(shape: tuple[int, ...], batch: int, time: int,
                          lens: list[int]) -> Case:
    return Case(f"reverse_sequence-{list(shape)}-b{batch}-t{time}-{lens}", "reverse_sequence",
                {"batch_axis": batch, "time_axis": time},
                lambda dt, r: [data(r, shape, dt), np.array(lens, np.int64)],
                lambda ins: onnx("ReverseSequence", {"x": ins[0], "l": ins[1]},
                                 batch_axis=batch, time_axis=time), dtypes=ALL)


def layout_case(shape: tuple[int, ...], src: str, dst: str) -> Case:
    perms = {("NCHW", "NHWC"): [0, 2, 3, 1], ("NHWC", "NCHW"): [0, 3, 1, 2]}

    def nchw(x: np.ndarray, layout: str) -> np.ndarray:
        if layout == "NCHW":
            return x
        if layout == "NHWC":
            return np.asarray(x.transpose(0, 3, 1, 2))
        return np.asarray(x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, *x.shape[2:4]))

    def ref(ins: Arrays) -> Arrays:
        if (src, dst) in perms:
            return onnx("Transpose", {"x": ins[0]}, perm=perms[(src, dst)])
        # blocked NCHW<n>c has no ONNX op: numpy reshape/transpose through NCHW
        x = nchw(ins[0], src)
        if dst == "NCHW":
            return [x]
        if dst == "NHWC":
            return [x.transpose(0, 2, 3, 1)]
        b = int(dst[4:-1])
        n, c, h, w = x.shape
        return [x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2)]

    return Case(f"layout_transform-{list(shape)}-{src}->{dst}", "layout_transform",
                {"src_layout": src, "dst_layout": dst}, x_of(shape), ref, dtypes=ALL)


MISC = [
    Case("tile-[2, 3]-[2, 3]", "tile", {"reps": [2, 3]}, x_of((2, 3)),
         lambda ins: onnx("Tile", {"x": ins[0]}, {"r": i64(2, 3)}), dtypes=ALL),
    Case("tile-[2, 1, 3]-[1, 4, 0]", "tile", {"reps": [1, 4, 0]}, x_of((2, 1, 3)),
         lambda ins: onnx("Tile", {"x": ins[0]}, {"r": i64(1, 4, 0)}), dtypes=ALL),
    Case("tile-[0, 2]-[3, 1]", "tile", {"reps": [3, 1]}, x_of((0, 2)),
         lambda ins: onnx("Tile", {"x": ins[0]}, {"r": i64(3, 1)}), dtypes=ALL),
    Case("broadcast_to-[3, 1]->[2, 3, 4]", "broadcast_to", {"shape": [2, 3, 4]}, x_of((3, 1)),
         lambda ins: onnx("Expand", {"x": ins[0]}, {"s": i64(2, 3, 4)}), dtypes=ALL),
    Case("broadcast_to-[1]->[0, 2]", "broadcast_to", {"shape": [0, 2]}, x_of((1,)),
         lambda ins: onnx("Expand", {"x": ins[0]}, {"s": i64(0, 2)}), dtypes=ALL),
    Case("broadcast_to-[2, 3]->[2, 3]", "broadcast_to", {"shape": [2, 3]}, x_of((2, 3)),
         lambda ins: onnx("Expand", {"x": ins[0]}, {"s": i64(2, 3)}), dtypes=ALL),
    pad_case((2, 3), [(1, 2), (0, 3)], "constant", 3.0),
    Case("pad-float-value-1.5", "pad", {"pad_width": [(1, 0), (2, 1)], "pad_value": 1.5},
         x_of((2, 3)), lambda ins: onnx("Pad", {"x": ins[0]}, {"p": i64(1, 2, 0, 1),
                                                             "v": np.array(1.5, ins[0].dtype)})),
    pad_case((2, 3, 4), [(0, 0), (2, 1), (3, 3)], "reflect"),
    pad_case((2, 3), [(3, 0), (1, 4)], "edge"),
    pad_case((0, 3), [(1, 1), (1, 0)], "constant", 7.0),
    pad_case((2, 3), [(0, 0), (0, 0)], "edge"),
    pad_fill_case((2, 3), [(1, 0), (2, 2)], 9.0),
    pad_fill_case((3,), [(4, 1)], -3.0),
    pad_fill_case((1, 0), [(1, 1), (2, 0)], 1.0),
    cumsum_case((4, 5), 0),
    cumsum_case((4, 5), -1, exclusive=True),
    cumsum_case((4, 5), 1, reverse=True),
    cumsum_case((3, 6), 1, exclusive=True, reverse=True),
    cumsum_case((1, 1), 0, exclusive=True),
    cumsum_case((2, 300), 1),
    topk_case((4, 6), 3, -1, True),
    topk_case((4, 6), 2, 0, False),
    topk_case((3, 4, 5), 5, 2, True),
    topk_case((3, 4), 0, 1, True),
    topk_case((5, 8), 4, 1, True, ties=True),
    topk_case((5, 8), 5, 1, False, ties=True),
    one_hot_case((2, 3), 4, -1),
    one_hot_case((2, 3), 4, 0),
    one_hot_case((3,), 5, 1),
    one_hot_case((2, 3), 4, 1, wrap=False),
    eye_like_case((3, 4), 0, "float32"),
    eye_like_case((4, 3), 1, "int64"),
    eye_like_case((4, 3), -2, "float16"),
    eye_like_case((3, 3), 5, "uint8"),
    d2s_case("depth_to_space", (1, 8, 2, 3), 2, "DCR"),
    d2s_case("depth_to_space", (2, 18, 2, 1), 3, "CRD"),
    d2s_case("space_to_depth", (1, 2, 4, 6), 2, "DCR"),
    d2s_case("space_to_depth", (2, 3, 6, 3), 3, "CRD"),
    d2s_case("depth_to_space", (1, 3, 2, 2), 1, "DCR"),
    reverse_sequence_case((4, 3, 2), 1, 0, [1, 4, 2]),
    reverse_sequence_case((3, 5), 0, 1, [5, 0, 3]),
    layout_case((2, 3, 4, 5), "NCHW", "NHWC"),
    layout_case((2, 4, 5, 3), "NHWC", "NCHW"),
    layout_case((2, 8, 3, 2), "NCHW", "NCHW4c"),
    layout_case((2, 2, 3, 2, 4), "NCHW4c", "NHWC"),
    layout_case((1, 3, 2, 2, 2), "NCHW2c", "NCHW"),
    layout_case((1, 4, 2, 3, 2), "NCHW2c", "NCHW8c"),
]

CASES: list[Case] = [*SHAPE, *SLICE, *INDEX, *MISC]


@pytest.mark.parametrize(("case", "dtype"), params(CASES))
def test_matches_onnx_runtime(case: Case, dtype: str) -> None:
    check_case(case, dtype)


@pytest.mark.parametrize("case", sim_params(CASES))
def test_sim_equals_cpu_bitwise(case: Case) -> None:
    check_sim(case)
