"""ONNX Attention, RotaryEmbedding, the losses, GridSample, AffineGrid, Col2Im and
CausalConvWithState against ONNX Runtime (or ONNX's reference where ORT lacks the op), and the
new standard ops (attention, nll_loss, grid_sample, col2im) on cpu and sim."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_harness import run_graphrt, run_ort, run_reference
from ops_harness import run_op
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
RNG = np.random.default_rng(7)

_ELEM = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("float16"): TensorProto.FLOAT16,
         np.dtype("float64"): TensorProto.DOUBLE, np.dtype("int64"): TensorProto.INT64,
         np.dtype("int32"): TensorProto.INT32, np.dtype("bool"): TensorProto.BOOL}


def make_model(op: str, data: dict[str, np.ndarray | None], consts: dict[str, np.ndarray],
               opset: int, n_outputs: int = 1, **attrs: Any) -> Any:
    """A one-node model: ``data`` are graph inputs (None: omitted), ``consts`` initializers
    (listed after the data inputs)."""
    names = [k if v is not None else "" for k, v in data.items()] + list(consts)
    while names and not names[-1]:
        names.pop()
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outputs, name=f"my_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, _ELEM[v.dtype], v.shape) for k, v in data.items()
         if v is not None],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    model = onnx.shape_inference.infer_shapes(model)
    first = next(v for v in data.values() if v is not None)
    for out in model.graph.output:  # where inference could not (a bad node): any shape
        if not out.type.HasField("tensor_type"):
            out.type.CopyFrom(helper.make_tensor_type_proto(
                _ELEM[first.dtype], [f"d{i}" for i in range(first.ndim)]))
    return model


def feeds(data: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    return {k: v for k, v in data.items() if v is not None}


def check(model: Any, data: dict[str, np.ndarray | None], oracle: Any = run_ort,
          rtol: float = 1e-5, atol: float = 1e-5,
          device: graphrt.Device | None = None) -> list[np.ndarray]:
    given = feeds(data)
    got, want = run_graphrt(model, given, device), oracle(model, given)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol)
    return got


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [23, 24])
@pytest.mark.parametrize("case", ["mha", "gqa", "causal", "bool_mask", "float_mask_3d",
                                  "softcap", "scaled", "short_mask"])
def test_attention_4d_matches_ort(opset: int, case: str) -> None:
    hq = 4 if case == "gqa" else 2
    data: dict[str, np.ndarray | None] = {"q": rand(2, hq, 3, 8), "k": rand(2, 2, 5, 8),
                                          "v": rand(2, 2, 5, 6)}
    attrs: dict[str, Any] = {}
    if case == "causal":
        attrs["is_causal"] = 1
    if case == "bool_mask":
        data["mask"] = RNG.random((3, 5)) > 0.3
    if case == "float_mask_3d":
        data["mask"] = rand(2, 3, 5)
    if case == "short_mask":
        data["mask"] = rand(1, 1, 3, 4)
    if case == "softcap":
        attrs["softcap"] = 2.0
    if case == "scaled":
        attrs["scale"] = 0.3
    model = make_model("Attention", data, {}, opset, **attrs)
    # ONNX Runtime refuses a mask shorter than the keys, which ONNX pads with masked keys
    check(model, data, oracle=run_reference if case == "short_mask" else run_ort)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_past_present_and_qk_output(mode: int) -> None:
    data: dict[str, np.ndarray | None] = {
        "q": rand(1, 2, 3, 4), "k": rand(1, 2, 3, 4), "v": rand(1, 2, 3, 4),
        "mask": rand(1, 2, 3, 7), "past_key": rand(1, 2, 4, 4), "past_value": rand(1, 2, 4, 4)}
    model = make_model("Attention", data, {}, 23, n_outputs=4, is_causal=1,
                       qk_matmul_output_mode=mode)
    _, present_key, _, qk = check(model, data, oracle=run_reference)
    assert present_key.shape == (1, 2, 7, 4) and qk.shape == (1, 2, 3, 7)


def test_attention_3d_heads() -> None:
    data: dict[str, np.ndarray | None] = {"q": rand(2, 3, 16), "k": rand(2, 5, 8),
                                          "v": rand(2, 5, 12)}
    model = make_model("Attention", data, {}, 23, q_num_heads=4, kv_num_heads=2, is_causal=1)
    (y,) = check(model, data)
    assert y.shape == (2, 3, 24)


def test_attention_float16_softmax_precision() -> None:
    data: dict[str, np.ndarray | None] = {"q": rand(1, 2, 3, 8, dtype="float16"),
                                          "k": rand(1, 2, 4, 8, dtype="float16"),
                                          "v": rand(1, 2, 4, 8, dtype="float16")}
    model = make_model("Attention", data, {}, 23, softmax_precision=TensorProto.FLOAT)
    check(model, data, rtol=2e-3, atol=2e-3)


def test_attention_fully_masked_row_is_zero_and_nonpad() -> None:
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    data: dict[str, np.ndarray | None] = {"q": rand(2, 2, 3, 4), "k": rand(2, 2, 5, 4),
                                          "v": rand(2, 2, 5, 4), "mask": mask,
                                          "past_key": None, "past_value": None,
                                          "nonpad": np.array([5, 3], dtype=np.int64)}
    model = make_model("Attention", data, {}, 24, is_causal=1)
    (y,) = check(model, data, oracle=run_reference)
    assert np.all(y[:, :, 1] == 0) and np.isfinite(y).all()


def test_attention_window_opset_25() -> None:
    data: dict[str, np.ndarray | None] = {"q": rand(1, 2, 4, 4), "k": rand(1, 2, 6, 4),
                                          "v": rand(1, 2, 6, 4)}
    model = make_model("Attention", data, {}, 25, left_window_size=2, right_window_size=1)
    check(model, data, oracle=run_reference)


@pytest.mark.parametrize("device", DEVICES)
def test_attention_runs_on_device(device: graphrt.Device) -> None:
    data: dict[str, np.ndarray | None] = {"q": rand(1, 4, 3, 4), "k": rand(1, 2, 3, 4),
                                          "v": rand(1, 2, 3, 4), "mask": rand(3, 3)}
    model = make_model("Attention", data, {}, 23, is_causal=1, softcap=3.0)
    check(model, data, device=device)


def test_attention_bad_attribute_names_node() -> None:
    data: dict[str, np.ndarray | None] = {"q": rand(1, 2, 3, 4), "k": rand(1, 2, 3, 4),
                                          "v": rand(1, 2, 3, 4)}
    model = make_model("Attention", data, {}, 23, qk_matmul_output_mode=7)
    with pytest.raises(ConversionError, match=r"my_attention.*qk_matmul_output_mode"):
        graphrt.from_onnx(model)
    model = make_model("Attention", {"q": rand(1, 3, 8), "k": rand(1, 3, 8),
                                     "v": rand(1, 3, 8)}, {}, 23)
    with pytest.raises(ConversionError, match=r"my_attention.*q_num_heads"):
        graphrt.from_onnx(model)


# --------------------------------------------------------------------------------------------
# RotaryEmbedding
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("positions", [True, False])
def test_rotary_embedding_4d(interleaved: int, rotary_dim: int, positions: bool) -> None:
    half = (rotary_dim or 8) // 2
    x = rand(2, 3, 5, 8)
    data: dict[str, np.ndarray | None]
    if positions:
        data = {"x": x, "cos": rand(10, half), "sin": rand(10, half),
                "pos": RNG.integers(0, 10, (2, 5)).astype(np.int64)}
    else:
        data = {"x": x, "cos": rand(2, 5, half), "sin": rand(2, 5, half)}
    model = make_model("RotaryEmbedding", data, {}, 23, interleaved=interleaved,
                       rotary_embedding_dim=rotary_dim)
    check(model, data)


def test_rotary_embedding_3d_needs_num_heads() -> None:
    data: dict[str, np.ndarray | None] = {"x": rand(2, 5, 12), "cos": rand(8, 2),
                                          "sin": rand(8, 2),
                                          "pos": RNG.integers(0, 8, (2, 5)).astype(np.int64)}
    check(make_model("RotaryEmbedding", data, {}, 23, num_heads=3), data)
    with pytest.raises(ConversionError, match=r"my_rotaryembedding.*num_heads"):
        graphrt.from_onnx(make_model("RotaryEmbedding", data, {}, 23))


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1])
def test_losses_match_ort(op: str, reduction: str, weighted: bool, ignore: int | None) -> None:
    data: dict[str, np.ndarray | None] = {"x": rand(3, 4, 2, 2),
                                          "t": RNG.integers(0, 4, (3, 2, 2)).astype(np.int64)}
    if weighted:
        data["w"] = RNG.random(4).astype(np.float32)
    attrs: dict[str, Any] = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    n_outputs = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    model = make_model(op, data, {}, 13, n_outputs=n_outputs, **attrs)
    check(model, data)


def test_loss_bad_reduction_names_node() -> None:
    data: dict[str, np.ndarray | None] = {"x": rand(3, 4),
                                          "t": np.array([0, 1, 2], dtype=np.int64)}
    model = make_model("NegativeLogLikelihoodLoss", data, {}, 13, reduction="max")
    with pytest.raises(ConversionError, match=r"my_negativeloglikelihoodloss.*reduction"):
        graphrt.from_onnx(model)


# --------------------------------------------------------------------------------------------
# GridSample, AffineGrid, Col2Im, CausalConvWithState
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_16_matches_ort(mode: str, padding: str, align: int) -> None:
    data: dict[str, np.ndarray | None] = {
        "x": rand(2, 3, 4, 5), "grid": RNG.uniform(-1.3, 1.3, (2, 3, 6, 2)).astype("float32")}
    model = make_model("GridSample", data, {}, 16, mode=mode, padding_mode=padding,
                       align_corners=align)
    renamed = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}[mode]
    reference = make_model("GridSample", data, {}, 20, mode=renamed, padding_mode=padding,
                           align_corners=align)
    np.testing.assert_allclose(run_graphrt(model, feeds(data))[0],
                               run_reference(reference, feeds(data))[0], rtol=1e-4, atol=1e-4)
    if (mode, padding) != ("bicubic", "border"):  # ORT clamps each tap, ONNX the coordinate
        check(model, data, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_20_volumetric(mode: str) -> None:
    data: dict[str, np.ndarray | None] = {
        "x": rand(1, 2, 3, 4, 5), "grid": RNG.uniform(-1, 1, (1, 2, 3, 2, 3)).astype("float32")}
    model = make_model("GridSample", data, {}, 20, mode=mode, padding_mode="border")
    check(model, data, oracle=run_reference, rtol=1e-4, atol=1e-4)


def test_grid_sample_bad_mode_names_node() -> None:
    data: dict[str, np.ndarray | None] = {"x": rand(1, 1, 2, 2), "grid": rand(1, 2, 2, 2)}
    with pytest.raises(ConversionError, match=r"my_gridsample.*mode"):
        graphrt.from_onnx(make_model("GridSample", data, {}, 20, mode="bilinear"))


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 2, 3, 4]])
def test_affine_grid_matches_ort(align: int, size: list[int]) -> None:
    dims = len(size) - 2
    data: dict[str, np.ndarray | None] = {"theta": rand(2, dims, dims + 1)}
    model = make_model("AffineGrid", data, {"size": np.array(size, dtype=np.int64)}, 20,
                       align_corners=align)
    check(model, data)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 2]},
                                   {"dilations": [2, 1]}])
def test_col2im_matches_ort(attrs: dict[str, list[int]]) -> None:
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    image, block = [5, 6], [2, 3]
    counts = [(image[k] + pads[k] + pads[k + 2] - dilations[k] * (block[k] - 1) - 1)
              // strides[k] + 1 for k in range(2)]
    data: dict[str, np.ndarray | None] = {"x": rand(2, 3 * 6, counts[0] * counts[1])}
    model = make_model("Col2Im", data, {"image": np.array(image, dtype=np.int64),
                                        "block": np.array(block, dtype=np.int64)}, 18, **attrs)
    check(model, data)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("past", [False, True])
def test_causal_conv_with_state(activation: str, past: bool) -> None:
    data: dict[str, np.ndarray | None] = {"x": rand(2, 3, 6), "w": rand(3, 1, 4),
                                          "b": rand(3), "past": rand(2, 3, 3) if past else None}
    model = make_model("CausalConvWithState", data, {}, 27, n_outputs=2,
                       activation=activation)
    check(model, data, oracle=run_reference)


# --------------------------------------------------------------------------------------------
# The new standard ops on cpu and sim
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_attention_op(device: graphrt.Device) -> None:
    q, k, v = rand(1, 4, 2, 3), rand(1, 2, 3, 3), rand(1, 2, 3, 5)
    mask = np.array([[True, True, False], [False, False, False]])
    y, probs = run_op("attention", [q, k, v, mask], {"scale": 0.5, "mask": True,
                                                       "qk_output": "probs"}, device)
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    scores = np.where(mask, q @ kk.swapaxes(-1, -2) * 0.5, -np.inf)
    want = np.exp(scores[:, :, :1] - scores[:, :, :1].max(-1, keepdims=True))
    want = np.concatenate([want / want.sum(-1, keepdims=True), np.zeros_like(want)], axis=2)
    np.testing.assert_allclose(probs, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, want @ vv, rtol=1e-5, atol=1e-6)
    assert y.shape == (1, 4, 2, 5) and y.dtype == np.float32


def test_attention_op_refuses_bad_inputs() -> None:
    with pytest.raises(OpError, match="multiple"):
        run_op("attention", [rand(1, 3, 2, 4), rand(1, 2, 2, 4), rand(1, 2, 2, 4)],
               {"scale": 1.0})
    with pytest.raises(OpError, match="broadcast"):
        run_op("attention", [rand(1, 2, 2, 4), rand(1, 2, 3, 4), rand(1, 2, 3, 4),
                             rand(2, 5)], {"scale": 1.0, "bias": True})


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_op(device: graphrt.Device) -> None:
    x = rand(4, 3)
    target = np.array([0, 2, 1, 2], dtype=np.int64)
    weight = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    (loss,) = run_op("nll_loss", [x, target, weight], {"reduction": "mean", "weight": True,
                                                      "ignore_index": 1}, device)
    w = np.array([1.0, 0.5, 0.0, 0.5], dtype=np.float32)
    want = -(x[np.arange(4), target] * w).sum() / w.sum()
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    (each,) = run_op("nll_loss", [x, target], {"reduction": "none"}, device)
    np.testing.assert_allclose(each, -x[np.arange(4), target])
    with pytest.raises(OpError, match="target must have shape"):
        run_op("nll_loss", [x, target[:2]], {})


@pytest.mark.parametrize("device", DEVICES)
def test_grid_sample_op_identity_grid(device: graphrt.Device) -> None:
    x = rand(1, 2, 3, 4)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    grid = np.stack([xs, ys], axis=-1)[None].astype(np.float32)
    for mode in ("nearest", "linear", "cubic"):
        (y,) = run_op("grid_sample", [x, grid], {"mode": mode, "align_corners": True}, device)
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)
    with pytest.raises(OpError, match="grid must be"):
        run_op("grid_sample", [x, grid[..., :1]], {})


@pytest.mark.parametrize("device", DEVICES)
def test_col2im_op_sums_overlaps(device: graphrt.Device) -> None:
    cols = np.ones((1, 2, 3), dtype=np.float32)  # 1 channel, block [2], 3 blocks over 4 pixels
    (image,) = run_op("col2im", [cols], {"image": [4], "block": [2]}, device)
    np.testing.assert_array_equal(image, [[[1, 2, 2, 1]]])
    with pytest.raises(OpError, match="number of blocks"):
        run_op("col2im", [np.ones((1, 2, 2), dtype=np.float32)], {"image": [4], "block": [2]})
