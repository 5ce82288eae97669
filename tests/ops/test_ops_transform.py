"""Transform ops against numpy references, on cpu and on the simulated accelerator."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest
from ops_harness import run_op

import graphrt
from graphrt.ops import OpError, TensorType, get_op

DEVICES = [graphrt.cpu(0), graphrt.sim(0)]
TRANSFORM_OPS = ["reshape", "transpose", "flatten", "expand_dims", "squeeze", "concatenate",
                 "split", "strided_slice", "dynamic_strided_slice", "take", "gather", "pad",
                 "layout_transform"]

device_param = pytest.mark.parametrize("device", DEVICES, ids=str)


def arange(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def one(name: str, inputs: list[np.ndarray], attrs: dict[str, Any],
        device: graphrt.Device) -> np.ndarray:
    outputs = run_op(name, inputs, attrs, device)
    assert len(outputs) == 1
    return outputs[0]


def check(name: str, inputs: list[np.ndarray], attrs: dict[str, Any], device: graphrt.Device,
          expected: np.ndarray) -> None:
    out = one(name, inputs, attrs, device)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected, strict=True)


def infer(name: str, types: list[TensorType], attrs: dict[str, Any],
          data: list[Any] | None = None) -> list[TensorType]:
    op = get_op(name)
    return op.infer(types, op.attrs.model_validate(attrs), data or [None] * len(types))


def test_data_dependence() -> None:
    assert get_op("dynamic_strided_slice").needs_data(4) == (False, True, True, True)
    for name in TRANSFORM_OPS:
        if name == "dynamic_strided_slice":
            continue
        for n in (1, 2, 3):
            assert get_op(name).needs_data(n) == (False,) * n, name


# ----------------------------------------------------------------------------- shape ops


@device_param
def test_reshape(device: graphrt.Device) -> None:
    x = arange(2, 3, 4)
    check("reshape", [x], {"newshape": [-1, 4]}, device, x.reshape(6, 4))
    check("reshape", [x], {"newshape": [0, -1]}, device, x.reshape(2, 12))
    check("reshape", [x], {"newshape": [0, 0, 2, 2]}, device, x.reshape(2, 3, 2, 2))
    check("reshape", [x], {"newshape": [24]}, device, x.reshape(24))


def test_reshape_errors() -> None:
    t = [TensorType((2, 3, 4), "float32")]
    with pytest.raises(OpError, match="24 elements"):
        infer("reshape", t, {"newshape": [5, 5]})
    with pytest.raises(OpError, match="more than one -1"):
        infer("reshape", t, {"newshape": [-1, -1]})
    with pytest.raises(OpError, match="copies dim 3"):
        infer("reshape", t, {"newshape": [1, 1, 1, 0]})
    with pytest.raises(OpError, match="cannot infer"):
        infer("reshape", t, {"newshape": [5, -1]})


@device_param
def test_transpose(device: graphrt.Device) -> None:
    x = arange(2, 3, 4, dtype=np.int32)
    check("transpose", [x], {}, device, x.transpose())
    check("transpose", [x], {"axes": [1, 2, 0]}, device, x.transpose(1, 2, 0))
    check("transpose", [x], {"axes": [-1, 0, 1]}, device, x.transpose(2, 0, 1))


def test_transpose_errors() -> None:
    t = [TensorType((2, 3, 4), "float32")]
    with pytest.raises(OpError, match="not a permutation"):
        infer("transpose", t, {"axes": [0, 0, 1]})
    with pytest.raises(OpError, match="permutation of 3 axes, given 2"):
        infer("transpose", t, {"axes": [0, 1]})


@device_param
def test_flatten(device: graphrt.Device) -> None:
    x = arange(2, 3, 4, 5)
    check("flatten", [x], {}, device, x.reshape(2, 60))
    check("flatten", [x], {"axis": 0}, device, x.reshape(1, 120))
    check("flatten", [x], {"axis": 4}, device, x.reshape(120, 1))
    check("flatten", [x], {"axis": -2}, device, x.reshape(6, 20))


def test_flatten_errors() -> None:
    with pytest.raises(OpError, match=r"\[-2, 2\]"):
        infer("flatten", [TensorType((2, 3), "float32")], {"axis": 3})


@device_param
def test_expand_dims(device: graphrt.Device) -> None:
    x = arange(2, 3)
    check("expand_dims", [x], {"axis": 1}, device, x.reshape(2, 1, 3))
    check("expand_dims", [x], {"axis": -1, "num_newaxis": 2}, device, x.reshape(2, 3, 1, 1))
    check("expand_dims", [x], {"axis": 0, "num_newaxis": 0}, device, x)


def test_expand_dims_errors() -> None:
    t = [TensorType((2, 3), "float32")]
    with pytest.raises(OpError, match=r"\[-3, 2\]"):
        infer("expand_dims", t, {"axis": 3})
    with pytest.raises(OpError, match="num_newaxis"):
        infer("expand_dims", t, {"axis": 0, "num_newaxis": -1})
    # a huge count is refused before any shape is built (it was a bare MemoryError)
    with pytest.raises(OpError, match=r"num_newaxis 1099511627776 would give a "
                                      r"1099511627778-D result; arrays have at most 64"):
        infer("expand_dims", t, {"axis": 0, "num_newaxis": 2**40})
    assert infer("expand_dims", t, {"axis": 0, "num_newaxis": 62})[0].shape == (1,) * 62 + (2, 3)


@device_param
def test_squeeze(device: graphrt.Device) -> None:
    x = arange(1, 3, 1, 4)
    check("squeeze", [x], {}, device, x.reshape(3, 4))
    check("squeeze", [x], {"axis": [-2]}, device, x.reshape(1, 3, 4))
    check("squeeze", [x], {"axis": [0, 2]}, device, x.reshape(3, 4))


def test_squeeze_errors() -> None:
    with pytest.raises(OpError, match="axis 1 has size 3, expected 1"):
        infer("squeeze", [TensorType((1, 3), "float32")], {"axis": [1]})
    with pytest.raises(OpError, match="out of range"):
        infer("squeeze", [TensorType((1, 3), "float32")], {"axis": [2]})


@device_param
def test_slice_like(device: graphrt.Device) -> None:
    x = arange(1, 6, 4)
    like = np.zeros((3, 2), "int64")
    check("slice_like", [x, like], {"axes": [1], "like_axes": [1]}, device, x[:, :2])
    check("slice_like", [x, like], {"axes": [1, 2], "like_axes": [0, 0]}, device,
          x[:, :3, :3])


def test_slice_like_errors() -> None:
    with pytest.raises(OpError, match="cannot take 9 elements of axis 1"):
        infer("slice_like", [TensorType((1, 6), "float32"), TensorType((9,), "int64")],
              {"axes": [1], "like_axes": [0]})
    with pytest.raises(OpError, match="differ in length"):
        infer("slice_like", [TensorType((1, 6), "float32"), TensorType((9,), "int64")],
              {"axes": [1], "like_axes": [0, 0]})


# ----------------------------------------------------------------------------- concat, split


@device_param
def test_concatenate(device: graphrt.Device) -> None:
    a, b, c = arange(2, 1, 3), arange(2, 2, 3) + 10, arange(2, 3, 3) + 100
    check("concatenate", [a, b, c], {"axis": 1}, device, np.concatenate([a, b, c], axis=1))
    check("concatenate", [a, b, c], {"axis": -2}, device, np.concatenate([a, b, c], axis=1))
    check("concatenate", [a, a, a], {}, device, np.concatenate([a, a, a]))


def test_concatenate_errors() -> None:
    with pytest.raises(OpError, match="dim 2 must be 3"):
        infer("concatenate", [TensorType((2, 1, 3), "float32"),
                              TensorType((2, 1, 4), "float32")], {"axis": 1})
    with pytest.raises(OpError, match="dtype int32, expected float32"):
        infer("concatenate", [TensorType((2,), "float32"), TensorType((2,), "int32")], {})


@device_param
def test_split(device: graphrt.Device) -> None:
    x = arange(4, 6, dtype=np.int64)
    op = get_op("split")
    sections = {"indices_or_sections": 3, "axis": 1}
    assert op.outputs_for(op.attrs.model_validate(sections)) == 3
    outs = run_op("split", [x], sections, device)
    assert len(outs) == 3
    for out, ref in zip(outs, np.split(x, 3, axis=1), strict=True):
        np.testing.assert_array_equal(out, ref, strict=True)
    indices = {"indices_or_sections": [1, 3, 3], "axis": 0}
    assert op.outputs_for(op.attrs.model_validate(indices)) == 4
    outs = run_op("split", [x], indices, device)
    assert [o.shape for o in outs] == [(1, 6), (2, 6), (0, 6), (1, 6)]
    for out, ref in zip(outs, np.split(x, [1, 3, 3], axis=0), strict=True):
        np.testing.assert_array_equal(out, ref, strict=True)


def test_split_errors() -> None:
    t = [TensorType((4, 6), "float32")]
    with pytest.raises(OpError, match="4 sections do not divide axis 1 of size 6"):
        infer("split", t, {"indices_or_sections": 4, "axis": 1})
    with pytest.raises(OpError, match="non-decreasing"):
        infer("split", t, {"indices_or_sections": [3, 1]})
    with pytest.raises(OpError, match="non-decreasing"):
        infer("split", t, {"indices_or_sections": [5]})


# ----------------------------------------------------------------------------- strided slices

SLICES = [
    # begin, end, strides, axes, numpy index for a (4, 5, 6) array
    ([1, -4], [3, 5], None, None, np.s_[1:3, -4:5]),
    ([-1], [-100], [-1], None, np.s_[::-1]),
    ([3, 10], [0, -10], [-2, -3], [0, 2], np.s_[3:0:-2, :, 10:-10:-3]),
    ([-100, 2], [100, 2**40], [1, 2], [1, -1], np.s_[:, -100:100, 2::2]),
    ([0, 4, 1], [4, 0, 6], [3, -1, 2], None, np.s_[0:4:3, 4:0:-1, 1:6:2]),
    ([2], [2], None, [2], np.s_[:, :, 2:2]),
]


@device_param
@pytest.mark.parametrize(("begin", "end", "strides", "axes", "index"), SLICES)
def test_strided_slice(device: graphrt.Device, begin: list[int], end: list[int],
                       strides: list[int] | None, axes: list[int] | None, index: Any) -> None:
    x = arange(4, 5, 6)
    attrs = {"begin": begin, "end": end, "strides": strides, "axes": axes}
    check("strided_slice", [x], attrs, device, x[index])
    if axes is None:
        ints = [np.array(v, np.int64) for v in (begin, end, strides or [1] * len(begin))]
        check("dynamic_strided_slice", [x, *ints], {}, device, x[index])


def test_strided_slice_short_end_and_strides() -> None:
    x = arange(4, 5)
    out = one("strided_slice", [x], {"begin": [3, 1], "end": [], "strides": [-1]},
              graphrt.cpu(0))
    np.testing.assert_array_equal(out, x[3::-1, 1:], strict=True)


def test_strided_slice_errors() -> None:
    t = [TensorType((4, 5), "float32")]
    with pytest.raises(OpError, match="begin has 3 values but the input is 2-D"):
        infer("strided_slice", t, {"begin": [0, 0, 0], "end": [1, 1, 1]})
    with pytest.raises(OpError, match="stride of axis 0 is 0"):
        infer("strided_slice", t, {"begin": [0], "end": [1], "strides": [0]})
    with pytest.raises(OpError, match="out of range"):
        infer("strided_slice", t, {"begin": [0], "end": [1], "axes": [2]})


@device_param
def test_dynamic_strided_slice_shape_follows_values(device: graphrt.Device) -> None:
    x = arange(6, 4)
    types = [TensorType((6, 4), "float32")] + [TensorType((2,), "int64")] * 3
    shapes = []
    for begin, end in (([0, 0], [6, 4]), ([1, 1], [3, 2]), ([-2, 0], [100, 4])):
        ints = [np.array(begin), np.array(end), np.array([1, 1])]
        (out_type,) = infer("dynamic_strided_slice", types, {}, [None, *ints])
        shapes.append(out_type.shape)
        out = one("dynamic_strided_slice", [x, *ints], {}, device)
        np.testing.assert_array_equal(out, x[begin[0]:end[0], begin[1]:end[1]], strict=True)
    assert shapes == [(6, 4), (2, 1), (2, 4)]


def test_dynamic_strided_slice_errors() -> None:
    types = [TensorType((6, 4), "float32"), TensorType((2,), "float32"),
             TensorType((2,), "int64"), TensorType((2,), "int64")]
    ints = [np.zeros(2), np.ones(2, np.int64), np.ones(2, np.int64)]
    with pytest.raises(OpError, match=r"begin \(input 1\) must be a 1-D integer tensor"):
        infer("dynamic_strided_slice", types, {}, [None, *ints])
    types[1] = TensorType((2,), "int64")
    with pytest.raises(OpError, match="needs the values"):
        infer("dynamic_strided_slice", types, {}, [None] * 4)


# ----------------------------------------------------------------------------- take, gather


@device_param
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_take(device: graphrt.Device, index_dtype: Any) -> None:
    x = arange(3, 4)
    idx = np.array([[0, 3], [-1, 7], [-5, 2]], index_dtype)
    for mode in ("clip", "wrap"):
        check("take", [x, idx], {"axis": 1, "mode": mode}, device,
              np.take(x, idx, axis=1, mode=mode))
        check("take", [x, idx], {"mode": mode}, device, np.take(x, idx, mode=mode))
    # TVM's default mode is clip: negative indices select element 0
    check("take", [x, idx], {"axis": 1}, device, np.take(x, idx, axis=1, mode="clip"))
    in_range = np.array([2, -1, -3, 0], index_dtype)
    check("take", [x, in_range], {"axis": 0, "mode": "raise"}, device,
          np.take(x, in_range, axis=0))
    check("take", [x, in_range], {"mode": "raise"}, device, np.take(x, in_range))


@device_param
def test_take_raise_out_of_range(device: graphrt.Device) -> None:
    with pytest.raises(OpError, match=r"indices must lie in \[-3, 3\)"):
        run_op("take", [arange(3, 4), np.array([0, 3])], {"axis": 0, "mode": "raise"}, device)


def test_take_errors() -> None:
    with pytest.raises(OpError, match="integer dtype"):
        infer("take", [TensorType((3, 4), "float32"), TensorType((2,), "float32")], {})
    with pytest.raises(OpError, match="out of range"):
        infer("take", [TensorType((3, 4), "float32"), TensorType((2,), "int64")], {"axis": 2})


@device_param
def test_gather(device: graphrt.Device) -> None:
    x = arange(3, 4)
    idx = np.array([[2, 0, -1, 1], [0, -3, 2, 2]], np.int64)
    check("gather", [x, idx], {"axis": 0}, device, np.take_along_axis(x, idx % 3, axis=0))
    idx1 = np.array([[3, 0], [1, -1], [2, 2]], np.int32)
    check("gather", [x, idx1], {"axis": -1}, device, np.take_along_axis(x, idx1 % 4, axis=1))
    # indices smaller than data off the axis gather from the leading window
    small = np.array([[1], [0]], np.int64)
    check("gather", [x, small], {"axis": 1}, device, np.take_along_axis(x[:2, :], small, 1))
    with pytest.raises(OpError, match=r"indices must lie in \[-3, 3\)"):
        run_op("gather", [x, np.array([[3, 0, 0, 0]])], {"axis": 0}, device)


def test_gather_errors() -> None:
    with pytest.raises(OpError, match="rank of data"):
        infer("gather", [TensorType((3, 4), "float32"), TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match="exceeds data shape"):
        infer("gather", [TensorType((3, 4), "float32"), TensorType((2, 5), "int64")], {})
    with pytest.raises(OpError, match="integer dtype"):
        infer("gather", [TensorType((3, 4), "float32"), TensorType((3, 4), "float64")], {})


# ----------------------------------------------------------------------------- pad, layout


@device_param
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad(device: graphrt.Device, mode: Literal["constant", "edge", "reflect"]) -> None:
    x = arange(3, 4, 5, dtype=np.int32)
    widths = [(1, 2), (0, 3), (2, 0)]
    attrs: dict[str, Any] = {"pad_width": widths, "mode": mode}
    if mode == "constant":
        attrs["pad_value"] = -7.0
        expected = np.pad(x, widths, mode="constant", constant_values=-7)
    else:
        expected = np.pad(x, widths, mode=mode)
    check("pad", [x], attrs, device, expected)
    # widths of dim - 1 on both sides (the most reflect allows)
    full = [(2, 2), (3, 3), (4, 4)]
    expected = np.pad(x, full, mode=mode) if mode != "constant" else np.pad(x, full)
    check("pad", [x], {"pad_width": full, "mode": mode}, device, expected)


@device_param
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_leaves_an_empty_axis_it_does_not_pad(
        device: graphrt.Device, mode: Literal["constant", "edge", "reflect"]) -> None:
    """A (0, 0) pad of an empty axis is no pad at all, in every mode (as numpy's)."""
    x = np.zeros((0, 3), np.float32)
    widths = [(0, 0), (1, 1)]
    assert infer("pad", [TensorType((0, 3), "float32")],
                 {"pad_width": widths, "mode": mode})[0].shape == (0, 5)
    check("pad", [x], {"pad_width": widths, "mode": mode}, device, np.pad(x, widths, mode=mode))


def test_pad_errors() -> None:
    t = [TensorType((3, 4), "float32")]
    with pytest.raises(OpError, match=r"1 \(before, after\) pairs, expected one per axis"):
        infer("pad", t, {"pad_width": [(1, 1)]})
    with pytest.raises(OpError, match="negative"):
        infer("pad", t, {"pad_width": [(1, 1), (-1, 0)]})
    with pytest.raises(OpError, match="at most 2 per side"):
        infer("pad", t, {"pad_width": [(3, 0), (0, 0)], "mode": "reflect"})


@device_param
def test_layout_transform(device: graphrt.Device) -> None:
    nchw = arange(2, 8, 3, 5)
    nhwc = nchw.transpose(0, 2, 3, 1)
    check("layout_transform", [nchw], {"src_layout": "NCHW", "dst_layout": "NHWC"}, device,
          nhwc)
    check("layout_transform", [np.ascontiguousarray(nhwc)],
          {"src_layout": "NHWC", "dst_layout": "NCHW"}, device, nchw)
    packed = nchw.reshape(2, 2, 4, 3, 5).transpose(0, 1, 3, 4, 2)
    out = one("layout_transform", [nchw], {"src_layout": "NCHW", "dst_layout": "NCHW4c"},
              device)
    np.testing.assert_array_equal(out, packed, strict=True)
    back = one("layout_transform", [out], {"src_layout": "NCHW4c", "dst_layout": "NCHW"},
               device)
    np.testing.assert_array_equal(back, nchw, strict=True)
    check("layout_transform", [np.ascontiguousarray(nhwc)],
          {"src_layout": "NHWC", "dst_layout": "NCHW4c"}, device, packed)
    check("layout_transform", [out], {"src_layout": "NCHW4c", "dst_layout": "NHWC"}, device,
          nhwc)
    check("layout_transform", [out], {"src_layout": "NCHW4c", "dst_layout": "NCHW2c"}, device,
          nchw.reshape(2, 4, 2, 3, 5).transpose(0, 1, 3, 4, 2))
    check("layout_transform", [nchw], {"src_layout": "NCHW", "dst_layout": "NCHW"}, device,
          nchw)


def test_layout_transform_errors() -> None:
    t = [TensorType((2, 6, 3, 3), "float32")]
    with pytest.raises(OpError, match="unknown layout 'NCDHW'"):
        infer("layout_transform", t, {"src_layout": "NCDHW", "dst_layout": "NCHW"})
    with pytest.raises(OpError, match="C divisible by 4, given C = 6"):
        infer("layout_transform", t, {"src_layout": "NCHW", "dst_layout": "NCHW4c"})
    with pytest.raises(OpError, match="5-D"):
        infer("layout_transform", t, {"src_layout": "NCHW4c", "dst_layout": "NCHW"})
