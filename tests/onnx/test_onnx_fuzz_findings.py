"""What the importer's fuzz targets found (``tests/fuzz/test_fuzz_onnx.py``), one test per
root: each escaped as a bare Python error, or as the converter driver's catch-all
"conversion failed: ValueError: ...", and is now a ConversionError naming the value."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_harness import declared_model, node_model, run_graphrt

from graphrt.errors import ConversionError, abridge

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from graphrt.onnx import convert_model  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def converts_or_names(model: object, pattern: str) -> None:
    with pytest.raises(ConversionError, match=pattern) as caught:
        convert_model(model)
    assert "conversion failed" not in str(caught.value)


def test_a_non_finite_integer_input_is_named() -> None:
    """Reshape's shape given as floats with an infinity (was: OverflowError in const_ints)."""
    model = declared_model("Tile", {"x": ([2, 3], F32)},
                           {"repeats": np.array([1.0, np.inf], np.float32)}, 13)
    converts_or_names(model, r"hostile_tile.*repeats must be integers, given inf")


def test_a_message_quoting_thousands_of_values_is_abridged() -> None:
    model = declared_model("Transpose", {"x": ([2, 3], F32)}, {}, 13, perm=[2**62] * 2000)
    with pytest.raises(ConversionError, match=r"hostile_transpose.*perm \[4611686018427387904"
                       r".* chars\) \.\.\. .*is not a permutation of the 2 axes") as caught:
        convert_model(model)
    assert len(str(caught.value)) < 1100


def test_abridge_keeps_short_text_and_cuts_long_text_in_the_middle() -> None:
    assert abridge("short") == "short"
    cut = abridge("a" * 500 + "b" * 5000 + "z" * 500, 1000)
    assert cut.startswith("a" * 500) and cut.endswith("z" * 250) and len(cut) < 1050


def test_a_sequence_where_a_tensor_is_expected_is_named() -> None:
    """SplitToSequence fed a sequence (was: KeyError in Builder.shape)."""
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"]),
             helper.make_node("SplitToSequence", ["s"], ["t"], name="twice"),
             helper.make_node("SequenceLength", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [3])],
                              [helper.make_tensor_value_info("y", I64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    converts_or_names(model, r"'twice'.*is a sequence where a tensor is expected")


@pytest.mark.parametrize(("bounds", "expected"), [
    ({"min": -(2.0**40), "max": 2.0**40}, [-128, -1, 0, 1, 127]),
    ({"min": 1.0e30}, [127] * 5),
    ({"min": float("-inf"), "max": 0.0}, [-128, -1, 0, 0, 0]),
])
def test_integer_clip_bounds_beyond_the_dtype_are_its_ends(bounds: dict[str, float],
                                                           expected: list[int]) -> None:
    """Clip-10 of int8 with bounds outside int8 (was: OverflowError making the bound)."""
    x = np.array([-128, -1, 0, 1, 127], np.int8)
    model = declared_model("Clip", {"x": ([5], TensorProto.INT8)}, {}, 10, **bounds)
    (y,) = run_graphrt(model, {"x": x})
    np.testing.assert_array_equal(y, np.array(expected, np.int8))


def test_a_nan_clip_bound_of_an_integer_input_is_named() -> None:
    model = declared_model("Clip", {"x": ([5], TensorProto.INT8)}, {}, 10, min=float("nan"))
    converts_or_names(model, r"hostile_clip.*min is NaN, which no int8 stands for")


def test_training_batch_norm_checks_its_statistics_shapes() -> None:
    """0-d scale in training mode (was: ValueError unpacking its shape)."""
    model = declared_model("BatchNormalization", {"x": ([2, 3, 4], F32), "s": ([], F32),
                                                  "b": ([3], F32), "m": ([3], F32),
                                                  "v": ([3], F32)}, {}, 15, training_mode=1)
    converts_or_names(model, r"hostile_batchnormalization.*scale must be \[C\] = \[3\], "
                      r"given \[\]")


def test_an_integer_attention_mask_is_named() -> None:
    """attn_mask of int64 (was: OverflowError filling its padding with -inf)."""
    model = declared_model("Attention", {"q": ([1, 1, 2, 4], F32), "k": ([1, 1, 3, 4], F32),
                                         "v": ([1, 1, 3, 4], F32), "m": ([2, 2], I64)}, {}, 23)
    converts_or_names(model, r"hostile_attention.*attn_mask must be bool or have Q's dtype "
                      r"float32, given int64")


def test_an_empty_shape_numpy_cannot_hold_is_named() -> None:
    """ConstantOfShape to (0, 2**62) (was: ValueError from numpy when folding)."""
    model = declared_model("ConstantOfShape", {}, {"shape": np.array([0, 2**62], np.int64)}, 9)
    converts_or_names(model, r"hostile_constantofshape.*shape \[0, 4611686018427387904\] "
                      r"float32: empty, but its other dimensions span")


def test_node_model_still_converts() -> None:
    """The checks above do not refuse the ordinary case."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = node_model("Tile", {"x": x}, {"r": np.array([1, 2], np.int64)}, 13)
    np.testing.assert_array_equal(run_graphrt(model, {"x": x})[0], np.tile(x, (1, 2)))


def test_clip_of_bool_is_named() -> None:
    model = declared_model("Clip", {"x": ([3], TensorProto.BOOL)}, {}, 9)
    converts_or_names(model, r"hostile_clip.*Clip takes numbers, given a bool input")


def test_reshape_of_a_declared_size_beyond_int64_is_named() -> None:
    """Sizes are exact integers (was: OverflowError in the converter's size helper)."""
    model = declared_model("Reshape", {"x": ([2, 3], F32)},
                           {"shape": np.array([2**62, 2**62], np.int64)}, 14)
    converts_or_names(model, r"hostile_reshape")


def test_a_sequence_of_too_many_tensors_is_refused_before_it_is_built() -> None:
    """SplitToSequence of a declared [2**40] (was: MemoryError building 2**40 lengths)."""
    model = declared_model("SplitToSequence", {"x": ([2**40], F32)}, {}, 11)
    converts_or_names(model, r"hostile_splittosequence.*would hold 1,099,511,627,776 tensors, "
                      r"more than the 131,072")


def test_broadcast_to_more_than_32_dimensions_is_shape_inferred() -> None:
    """numpy's broadcast_shapes stops at 32 dimensions (was: a bare RuntimeError)."""
    shape = np.ones(36, np.int64)
    model = declared_model("ConstantOfShape", {}, {"shape": shape}, 12)
    (y,) = run_graphrt(model, {})
    assert y.shape == (1,) * 36 and y.dtype == np.float32 and float(y.reshape(())) == 0.0


def test_range_with_bounds_near_the_float32_limits() -> None:
    """limit - start overflows float32 (was: np.arange's own size check, a bare ValueError)."""
    model = declared_model("Range", {}, {"start": np.array(-3.4e38, np.float32),
                                         "limit": np.array(3.4e38, np.float32),
                                         "delta": np.array(3.4e38, np.float32)}, 11)
    (y,) = run_graphrt(model, {})
    np.testing.assert_array_equal(y, np.array([-3.4e38, 0.0], np.float32))


def test_range_is_start_plus_i_delta() -> None:
    model = declared_model("Range", {}, {"start": np.array(1.0, np.float32),
                                         "limit": np.array(2.0, np.float32),
                                         "delta": np.array(0.25, np.float32)}, 11)
    (y,) = run_graphrt(model, {})
    np.testing.assert_array_equal(y, np.array([1.0, 1.25, 1.5, 1.75], np.float32))


def test_attention_past_key_of_the_wrong_rank_is_named() -> None:
    """(was: IndexError reading the past length of a 2-D past_key)."""
    model = declared_model("Attention", {"q": ([1, 1, 2, 4], F32), "k": ([1, 1, 3, 4], F32),
                                         "v": ([1, 1, 3, 4], F32), "m": ([2, 3], F32),
                                         "pk": ([2, 2], F32), "pv": ([2, 2], F32)}, {}, 23)
    converts_or_names(model, r"hostile_attention.*past_key must be \[1, 1, past, 4\], "
                      r"given \[2, 2\]")


def test_a_pooling_window_far_larger_than_its_input_plans_quickly() -> None:
    """LpPool with a declared 10**6 kernel (was: 2 million kernel offsets enumerated)."""
    from graphrt.ops.convolution import Window

    window = Window([1_000_000, 2], [1, 1], [1, 1], [0, 0], [4, 4], [1, 3])
    assert [offset for offset, _, _ in window.pairs] == [
        (k, j) for k in range(4) for j in range(2)]
