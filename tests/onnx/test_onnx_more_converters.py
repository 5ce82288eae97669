"""RoiAlign, DeformConv, LinearAttention, SwiGLU and TensorScatter: graphrt against ONNX's
reference evaluator (and ONNX Runtime where it runs the op) on cpu and sim, for each opset
version ONNX defines and each attribute combination; the standard ops behind them
(``roi_align``, ``deform_conv``, ``linear_attention``) on their own; and the clear errors a bad
model gets, naming its node.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from onnx_harness import run_graphrt, run_ort, run_reference, typed
from ops_harness import run_op
from ort_compat import ort_ir_version, ort_reads_opset

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(27)
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
BF16 = np.dtype(ml_dtypes.bfloat16)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model_of(op: str, inputs: list[str], data: dict[str, np.ndarray], opset: int,
             outputs: int = 1, consts: dict[str, np.ndarray] | None = None,
             **attrs: Any) -> Any:
    """A one-node model named ``my_<op>``: ``inputs`` in order (``""`` omits one), each a graph
    input from ``data`` or an initializer from ``consts``."""
    consts = consts or {}
    node = helper.make_node(op, inputs, [f"out{i}" for i in range(outputs)],
                            name=f"my_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in data.items()],
        [onnx.ValueInfoProto(name=f"out{i}") for i in range(outputs)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    first = next(iter(data.values()))
    return typed(model, helper.np_dtype_to_tensor_dtype(first.dtype))


def check(model: Any, data: dict[str, np.ndarray], device: graphrt.Device, oracle: Any,
          rtol: float) -> list[np.ndarray]:
    """graphrt's outputs on ``device`` have the oracle's dtypes and shapes and its values
    within ``rtol`` (relative and absolute; 0: bit for bit)."""
    got, want = run_graphrt(model, data, device), oracle(model, data)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (g.dtype, g.shape, w.dtype, w.shape)
        if rtol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=rtol)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def convert_error(model: Any, match: str) -> None:
    """Converting ``model`` fails with a ConversionError matching ``match`` that names the
    node."""
    with pytest.raises(ConversionError, match=match) as info:
        graphrt.from_onnx(model)
    assert "my_" in str(info.value)


# ---------------------------------------------------------------------------------------------
# RoiAlign (opsets 10, 16, 22)

ROI_X = f32(2, 3, 10, 12)
ROIS = np.array([[0, 0, 9, 9], [0, 5, 4, 9], [5, 5, 9, 9], [-3, -2, 14, 13],
                 [2.2, 3.1, 2.3, 3.15], [8, 8, 1, 1], [1.5, 0.2, 10.1, 4.4]], np.float32)
ROI_BATCH = np.array([0, 1, 0, 1, 0, 1, 1], np.int64)
ROI_DATA = {"x": ROI_X, "rois": ROIS, "batch": ROI_BATCH}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("opset", "coordinates"), [
    (10, None), (16, None), (16, "output_half_pixel"), (16, "half_pixel"), (22, None),
    (22, "output_half_pixel")])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize(("ratio", "scale"), [(0, 1.0), (2, 1.0), (1, 0.5), (3, 0.75)])
def test_roi_align_matches_onnxruntime(device: graphrt.Device, opset: int,
                                       coordinates: str | None, mode: str, ratio: int,
                                       scale: float) -> None:
    attrs: dict[str, Any] = {"mode": mode, "output_height": 3, "output_width": 4,
                             "sampling_ratio": ratio, "spatial_scale": scale}
    if coordinates:
        attrs["coordinate_transformation_mode"] = coordinates
    model = model_of("RoiAlign", ["x", "rois", "batch"], ROI_DATA, opset, **attrs)
    # ONNX Runtime has no RoiAlign-22 kernel: the same node at opset 16 is its oracle
    ort_model = model_of("RoiAlign", ["x", "rois", "batch"], ROI_DATA, min(opset, 16), **attrs)
    (got,) = run_graphrt(model, ROI_DATA, device)
    (want,) = run_ort(ort_model, ROI_DATA)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if opset >= 16:  # ONNX's reference evaluator ignores RoiAlign-10's missing half-pixel shift
        check(model, ROI_DATA, device, run_reference, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "opset", "rtol"), [
    (np.float16, 16, 2e-3), (np.float64, 16, 1e-12), (BF16, 22, 2e-2)])
def test_roi_align_dtypes_compute_in_float32_or_float64(device: graphrt.Device, dtype: Any,
                                                        opset: int, rtol: float) -> None:
    data = {"x": ROI_X.astype(dtype), "rois": ROIS.astype(dtype), "batch": ROI_BATCH}
    exact = {"x": data["x"].astype(np.float64), "rois": data["rois"].astype(np.float64),
             "batch": ROI_BATCH}
    for mode in ("avg", "max"):
        attrs = {"mode": mode, "output_height": 2, "output_width": 3, "sampling_ratio": 0}
        (got,) = run_graphrt(model_of("RoiAlign", ["x", "rois", "batch"], data, opset,
                                      **attrs), data, device)
        (want,) = run_reference(model_of("RoiAlign", ["x", "rois", "batch"], exact, 16,
                                         **attrs), exact)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_op_on_its_own(device: graphrt.Device) -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    rois = np.array([[0, 0, 3, 3], [0, 0, 0, 0], [-9, -9, -8, -8]], np.float32)
    batch = np.zeros(3, np.int64)
    (got,) = run_op("roi_align", [x, rois, batch],
                    {"sampling_ratio": 1, "half_pixel": False}, device)
    # one sample per region at its center; the last region lies outside the map: 0
    np.testing.assert_array_equal(got.reshape(-1), np.array([7.5, 2.5, 0.0], np.float32))
    (lowered,) = run_op("roi_align", [x, rois, batch],
                        {"sampling_ratio": 1, "half_pixel": False}, device, lowered=True)
    np.testing.assert_array_equal(lowered, got)
    # with an adaptive grid, half-pixel regions of negative size have no sample: 0 in both
    # modes (output_half_pixel makes them 1x1)
    flipped = rois[:, [2, 3, 0, 1]].copy()
    for mode in ("avg", "max"):
        (got,) = run_op("roi_align", [x + 1, flipped[:1], batch[:1]], {"mode": mode}, device)
        np.testing.assert_array_equal(got, np.zeros((1, 1, 1, 1), np.float32))
        (got,) = run_op("roi_align", [x + 1, flipped[:1], batch[:1]],
                        {"mode": mode, "half_pixel": False}, device)
        assert got[0, 0, 0, 0] > 0
    empty = np.zeros((0, 4), np.float32)
    (got,) = run_op("roi_align", [x, empty, np.zeros(0, np.int64)],
                    {"output_height": 2, "output_width": 2}, device)
    assert got.shape == (0, 1, 2, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_in_blocks_matches_one_block(device: graphrt.Device,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import graphrt.ops.vision as vision

    attrs = {"output_height": 3, "output_width": 4, "sampling_ratio": 0, "mode": "max"}
    (whole,) = run_op("roi_align", [ROI_X, ROIS, ROI_BATCH], attrs, device)
    monkeypatch.setattr(vision, "_BLOCK", 7)  # one region, one sample row and column a step
    (blocked,) = run_op("roi_align", [ROI_X, ROIS, ROI_BATCH], attrs, device)
    np.testing.assert_array_equal(blocked, whole)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_batch_index_out_of_range_fails_at_run_time(device: graphrt.Device) -> None:
    module = graphrt.from_onnx(model_of("RoiAlign", ["x", "rois", "batch"], ROI_DATA,
                                        22)).create(device)
    bad = dict(ROI_DATA, batch=np.array([0, 1, 0, 2, 0, 1, 1], np.int64))
    with pytest.raises(graphrt.ExecutionError, match=r"batch_indices must lie in \[0, 2\)"):
        module(**bad)


def test_roi_align_refuses_an_unbounded_adaptive_grid() -> None:
    rois = np.array([[0, 0, 1e9, 1e9]], np.float32)
    with pytest.raises(OpError, match="sampling points per bin"):
        run_op("roi_align", [ROI_X, rois, np.zeros(1, np.int64)], {})


# ---------------------------------------------------------------------------------------------
# DeformConv (opsets 19, 22)


def naive_deform_conv(x: np.ndarray, w: np.ndarray, offset: np.ndarray, bias: Any,
                      mask: Any, strides: list[int], pads: list[int], dilations: list[int],
                      group: int, offset_group: int) -> np.ndarray:
    """DeformConv by its definition, one output element at a time, in float64 (the oracle of
    every rank; ONNX's reference evaluator does 2-D only)."""
    x, w, offset = (a.astype(np.float64) for a in (x, w, offset))
    n, c, *space = x.shape
    oc, _, *kernel = w.shape
    dims = len(space)
    out_space = list(offset.shape[2:])
    taps = math.prod(kernel)
    off = offset.reshape(n, offset_group, taps, dims, *out_space)
    msk = (np.ones((n, offset_group, taps, *out_space)) if mask is None
           else mask.astype(np.float64).reshape(n, offset_group, taps, *out_space))
    y = np.zeros((n, oc, *out_space))
    cpg, opg, cpo = c // group, oc // group, c // offset_group

    def sample(image: np.ndarray, pos: list[float]) -> float:
        total = 0.0
        for corner in itertools.product(range(2), repeat=dims):
            at, weight = [], 1.0
            for axis, k in enumerate(corner):
                low = math.floor(pos[axis])
                at.append(low + k)
                frac = pos[axis] - low
                weight *= frac if k else 1 - frac
            if all(0 <= a < s for a, s in zip(at, space, strict=True)):
                total += weight * image[tuple(at)]
        return total

    for b, o in itertools.product(range(n), range(oc)):
        g = o // opg
        for place in itertools.product(*(range(s) for s in out_space)):
            acc = 0.0 if bias is None else float(bias[o])
            for t, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
                for ci in range(g * cpg, (g + 1) * cpg):
                    og = ci // cpo
                    pos = [place[a] * strides[a] - pads[a] + tap[a] * dilations[a]
                           + off[(b, og, t, a, *place)] for a in range(dims)]
                    acc += (w[(o, ci - g * cpg, *tap)] * sample(x[b, ci], pos)
                            * msk[(b, og, t, *place)])
            y[(b, o, *place)] = acc
    return y


DEFORM_CASES = [  # x shape, out channels, kernel, strides, pads, dilations, group, offset_group
    ((1, 1, 3, 3), 1, (2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 1, 1),
    ((2, 4, 6, 7), 6, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2, 2),
    ((1, 4, 5, 5), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4, 1),
    ((2, 2, 4, 5), 3, (2, 3), (1, 2), (2, 2, 2, 2), (2, 1), 1, 2),
]


def deform_inputs(shape: tuple[int, ...], out_channels: int, kernel: tuple[int, ...],
                  strides: tuple[int, ...], pads: tuple[int, ...], dilations: tuple[int, ...],
                  group: int, offset_group: int) -> dict[str, np.ndarray]:
    dims = len(kernel)
    out = [(shape[2 + a] + pads[a] + pads[a + dims] - (dilations[a] * (kernel[a] - 1) + 1))
           // strides[a] + 1 for a in range(dims)]
    taps = math.prod(kernel)
    return {"x": f32(*shape), "w": f32(out_channels, shape[1] // group, *kernel),
            "offset": f32(shape[0], offset_group * taps * dims, *out, scale=1.5),
            "b": f32(out_channels),
            "mask": RNG.uniform(0, 1, (shape[0], offset_group * taps, *out)).astype(np.float32)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize("case", DEFORM_CASES)
@pytest.mark.parametrize("extras", ["", "b", "mask", "b+mask"])
def test_deform_conv_2d_matches_onnxruntime_and_the_reference(
        device: graphrt.Device, opset: int, case: tuple[Any, ...], extras: str) -> None:
    _, _, kernel, strides, pads, dilations, group, offset_group = case
    data = deform_inputs(*case)
    names = ["x", "w", "offset", "b" if "b" in extras.split("+") else "",
             "mask" if "mask" in extras else ""]
    while not names[-1]:
        names.pop()
    used = {k: data[k] for k in names if k}
    model = model_of("DeformConv", names, used, opset, kernel_shape=list(kernel),
                     strides=list(strides), pads=list(pads), dilations=list(dilations),
                     group=group, offset_group=offset_group)
    (got,) = check(model, used, device, run_reference, 1e-5)
    (want,) = run_ort(model, used)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [
    ((2, 2, 7), 4, (3,), (2,), (1, 2), (2,), 2, 1),
    ((1, 2, 4, 3, 5), 2, (2, 1, 3), (1, 2, 1), (0, 1, 1, 1, 0, 0), (1, 1, 2), 1, 2),
])
def test_deform_conv_1d_and_3d_match_the_definition(device: graphrt.Device,
                                                    case: tuple[Any, ...]) -> None:
    _, _, _, strides, pads, dilations, group, offset_group = case
    data = deform_inputs(*case)
    model = model_of("DeformConv", ["x", "w", "offset", "b", "mask"], data, 22,
                     strides=list(strides), pads=list(pads), dilations=list(dilations),
                     group=group, offset_group=offset_group)
    (got,) = run_graphrt(model, data, device)
    want = naive_deform_conv(data["x"], data["w"], data["offset"], data["b"], data["mask"],
                             list(strides), list(pads), list(dilations), group, offset_group)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # without offsets or mask it is an ordinary convolution
    data["offset"] = np.zeros_like(data["offset"])
    plain = {k: data[k] for k in ("x", "w", "offset", "b")}
    model = model_of("DeformConv", ["x", "w", "offset", "b"], plain, 22, strides=list(strides),
                     pads=list(pads), dilations=list(dilations), group=group,
                     offset_group=offset_group)
    conv = model_of("Conv", ["x", "w", "b"], {k: plain[k] for k in ("x", "w", "b")}, 22,
                    strides=list(strides), pads=list(pads), dilations=list(dilations),
                    group=group)
    (got,) = run_graphrt(model, plain, device)
    (want,) = run_ort(conv, {k: plain[k] for k in ("x", "w", "b")})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "opset", "rtol"), [
    (np.float16, 19, 5e-3), (np.float64, 19, 1e-12), (BF16, 22, 3e-2)])
def test_deform_conv_dtypes(device: graphrt.Device, dtype: Any, opset: int,
                            rtol: float) -> None:
    case = DEFORM_CASES[1]
    data = {k: v.astype(dtype) for k, v in deform_inputs(*case).items()}
    attrs = {"strides": list(case[3]), "pads": list(case[4]), "dilations": list(case[5]),
             "group": case[6], "offset_group": case[7]}
    model = model_of("DeformConv", ["x", "w", "offset", "b", "mask"], data, opset, **attrs)
    (got,) = run_graphrt(model, data, device)
    assert got.dtype == dtype
    want = naive_deform_conv(data["x"], data["w"], data["offset"], data["b"], data["mask"],
                             *attrs.values())  # type: ignore[arg-type]
    scale = np.abs(want).max()
    np.testing.assert_allclose(got.astype(np.float64) / scale, want / scale, rtol=rtol,
                               atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_deform_conv_op_in_batch_blocks(device: graphrt.Device,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import graphrt.ops.vision as vision

    data = deform_inputs(*DEFORM_CASES[1])
    inputs = [data[k] for k in ("x", "w", "offset", "b", "mask")]
    attrs = {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2], "group": 2,
             "offset_group": 2, "bias": True, "mask": True}
    (whole,) = run_op("deform_conv", inputs, attrs, device)
    monkeypatch.setattr(vision, "_BLOCK", 1)  # one image a step
    (blocked,) = run_op("deform_conv", inputs, attrs, device, lowered=True)
    np.testing.assert_array_equal(blocked, whole)


def test_deform_conv_reads_no_nan_offset_as_an_index() -> None:
    data = deform_inputs(*DEFORM_CASES[0])
    data["offset"][0, 0, 0, 0] = np.nan
    data["offset"][0, 1, 1, 1] = 1e30
    (got,) = run_op("deform_conv", [data["x"], data["w"], data["offset"]], {})
    assert got.shape == (1, 1, 2, 2)  # the taps at a NaN or far-away position read zeros


# ---------------------------------------------------------------------------------------------
# LinearAttention (opset 27)


def linear_attention_data(rule: str, batch: int = 2, tokens: int = 5, q_heads: int = 4,
                          kv_heads: int = 2, d_k: int = 3, d_v: int = 4, past: bool = True,
                          per_key_decay: bool = True, scalar_beta: bool = False,
                          dtype: Any = np.float32) -> tuple[list[str], dict[str, np.ndarray]]:
    key = f32(batch, tokens, kv_heads, d_k)
    key /= np.maximum(np.linalg.norm(key, axis=-1, keepdims=True), 1e-6)
    data = {"q": f32(batch, tokens, q_heads * d_k),
            "k": key.reshape(batch, tokens, kv_heads * d_k),
            "v": f32(batch, tokens, kv_heads * d_v)}
    names = ["q", "k", "v", "", "", ""]
    if past:
        data["past"] = f32(batch, kv_heads, d_k, d_v, scale=0.1)
        names[3] = "past"
    if rule in ("gated", "gated_delta"):
        width = kv_heads * d_k if per_key_decay else kv_heads
        data["decay"] = -np.abs(f32(batch, tokens, width, scale=0.1))
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        data["beta"] = RNG.uniform(0, 1, (batch, tokens, 1 if scalar_beta else kv_heads)
                                   ).astype(np.float32)
        names[5] = "beta"
    while not names[-1]:
        names.pop()
    return names, {k: v.astype(dtype) for k, v in data.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize(("q_heads", "kv_heads", "past", "per_key_decay", "scalar_beta"), [
    (4, 4, True, True, False), (4, 2, False, False, True), (3, 1, True, False, False),
    (2, 2, False, True, True)])
def test_linear_attention_matches_the_reference(device: graphrt.Device, rule: str,
                                                q_heads: int, kv_heads: int, past: bool,
                                                per_key_decay: bool,
                                                scalar_beta: bool) -> None:
    names, data = linear_attention_data(rule, q_heads=q_heads, kv_heads=kv_heads, past=past,
                                        per_key_decay=per_key_decay, scalar_beta=scalar_beta)
    model = model_of("LinearAttention", names, data, 27, outputs=2, update_rule=rule,
                     q_num_heads=q_heads, kv_num_heads=kv_heads)
    check(model, data, device, run_reference, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_attention_default_rule_scale_and_decode(device: graphrt.Device) -> None:
    names, data = linear_attention_data("gated_delta", tokens=1)
    model = model_of("LinearAttention", names, data, 27, outputs=2, q_num_heads=4,
                     kv_num_heads=2, scale=0.3, chunk_size=16)
    check(model, data, device, run_reference, 1e-5)
    names, data = linear_attention_data("linear", tokens=0, past=True)
    model = model_of("LinearAttention", names, data, 27, outputs=2, q_num_heads=4,
                     kv_num_heads=2, update_rule="linear")
    out, state = run_graphrt(model, data, device)
    assert out.shape == (2, 0, 16)
    np.testing.assert_array_equal(state, data["past"])


def test_linear_attention_matches_onnxruntime() -> None:
    if not ort_reads_opset(27):
        pytest.skip("the installed onnxruntime does not read opset 27 (LinearAttention)")
    names, data = linear_attention_data("gated_delta")
    model = model_of("LinearAttention", names, data, 27, outputs=2, q_num_heads=4,
                     kv_num_heads=2)
    check(model, data, graphrt.cpu(0), run_ort, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "state", "rtol"), [
    (np.float16, None, 2e-3), (np.float16, np.float32, 2e-3), (BF16, None, 2e-2),
    (np.float32, np.float16, 2e-3)])
def test_linear_attention_low_precision(device: graphrt.Device, dtype: Any, state: Any,
                                        rtol: float) -> None:
    names, data = linear_attention_data("gated_delta", dtype=dtype)
    if state is not None:
        data["past"] = data["past"].astype(state)
    model = model_of("LinearAttention", names, data, 27, outputs=2, q_num_heads=4,
                     kv_num_heads=2)
    out, present = run_graphrt(model, data, device)
    assert out.dtype == dtype and present.dtype == data["past"].dtype
    exact = {k: v.astype(np.float32) for k, v in data.items()}
    want = run_reference(model_of("LinearAttention", names, exact, 27, outputs=2,
                                  q_num_heads=4, kv_num_heads=2), exact)
    for g, w in zip((out, present), want, strict=True):
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_attention_op_on_its_own(device: graphrt.Device) -> None:
    q = k = v = np.ones((1, 2, 2), np.float32)
    attrs = {"q_heads": 1, "kv_heads": 1, "scale": 1.0, "update_rule": "linear"}
    out, state = run_op("linear_attention", [q, k, v], attrs, device)
    np.testing.assert_array_equal(out[0], [[2, 2], [4, 4]])
    np.testing.assert_array_equal(state[0, 0], [[2, 2], [2, 2]])
    lowered = run_op("linear_attention", [q, k, v], attrs, device, lowered=True)
    np.testing.assert_array_equal(lowered[0], out)


# ---------------------------------------------------------------------------------------------
# SwiGLU (opset 28)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "rtol"), [
    (np.float32, 1e-6), (np.float64, 1e-12), (np.float16, 1e-3)])
@pytest.mark.parametrize("alpha", [None, 1.702, -0.5])
def test_swiglu_matches_the_reference(device: graphrt.Device, dtype: Any, rtol: float,
                                      alpha: float | None) -> None:
    data = {"a": f32(3, 4, 5, scale=3).astype(dtype), "b": f32(3, 4, 5).astype(dtype)}
    attrs = {} if alpha is None else {"alpha": alpha}
    model = model_of("SwiGLU", ["a", "b"], data, 28, **attrs)
    check(model, data, device, run_reference, rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_swiglu_of_bfloat16(device: graphrt.Device) -> None:
    data = {"a": f32(2, 8).astype(BF16), "b": f32(2, 8).astype(BF16)}
    (got,) = run_graphrt(model_of("SwiGLU", ["a", "b"], data, 28, alpha=2.0), data, device)
    a, b = (v.astype(np.float64) for v in data.values())
    want = a / (1 + np.exp(-2.0 * a)) * b
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------------------------------
# TensorScatter (opset 24)

TS_DTYPES = [np.float32, np.float16, np.int32, np.bool_, BF16]


def cache_data(shape: tuple[int, ...], axis: int, length: int, dtype: Any,
               indices: list[int] | None) -> dict[str, np.ndarray]:
    new = list(shape)
    new[axis] = length
    data = {"past": RNG.integers(0, 9, shape).astype(dtype),
            "update": RNG.integers(10, 19, new).astype(dtype)}
    if indices is not None:
        data["at"] = np.array(indices, np.int64)
    return data


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "axis", "length", "indices", "mode"), [
    ((2, 1, 4, 5), None, 1, [1, 2], "linear"),
    ((2, 1, 4, 5), -2, 3, None, "linear"),
    ((2, 1, 4, 5), None, 3, [1, 3], "circular"),
    ((2, 1, 4, 5), None, 4, [2, 0], "circular"),
    ((3, 6, 2), 1, 2, [0, 4, 2], "linear"),
    ((3, 6, 2), 1, 2, [5, 4, -1], "circular"),
    ((2, 3, 4), -1, 2, [2, 1], "linear"),
    ((2, 3, 4), 2, 3, [3, 2], "circular"),
    ((2, 5), 1, 2, [3, 0], "linear"),
])
def test_tensor_scatter_matches_the_reference(device: graphrt.Device, shape: tuple[int, ...],
                                              axis: int | None, length: int,
                                              indices: list[int] | None, mode: str) -> None:
    norm = (-2 if axis is None else axis) % len(shape)
    data = cache_data(shape, norm, length, np.float32, indices)
    attrs: dict[str, Any] = {"mode": mode}
    if axis is not None:
        attrs["axis"] = axis
    model = model_of("TensorScatter", list(data), data, 24, **attrs)
    check(model, data, device, run_reference, 0)
    if min(indices or [0]) >= 0:
        check(model, data, device, run_ort, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", TS_DTYPES)
def test_tensor_scatter_keeps_any_dtype_exactly(device: graphrt.Device, dtype: Any) -> None:
    data = cache_data((2, 3, 6, 2), 2, 2, dtype, [4, 5])
    model = model_of("TensorScatter", ["past", "update", "at"], data, 24, mode="circular")
    (got,) = run_graphrt(model, data, device)
    want = data["past"].copy()
    want[0, :, 4:6] = data["update"][0]
    want[1, :, 5] = data["update"][1, :, 0]
    want[1, :, 0] = data["update"][1, :, 1]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_scatter_of_an_empty_update_is_the_past(device: graphrt.Device) -> None:
    data = cache_data((2, 3, 4), 1, 0, np.float32, [1, 2])
    model = model_of("TensorScatter", ["past", "update", "at"], data, 24, axis=1)
    (got,) = run_graphrt(model, data, device)
    np.testing.assert_array_equal(got, data["past"])


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_scatter_linear_write_past_the_end_fails_at_run_time(
        device: graphrt.Device) -> None:
    data = cache_data((2, 4, 3), 1, 2, np.float32, [1, 3])
    module = graphrt.from_onnx(model_of("TensorScatter", ["past", "update", "at"], data, 24,
                                        axis=1)).create(device)
    with pytest.raises(graphrt.ExecutionError, match=r"indices must lie in \[-4, 4\)"):
        module(**data)


# ---------------------------------------------------------------------------------------------
# the shape functions and the converters refuse what the spec does not allow


def infer(name: str, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    op = get_op(name)
    return op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))


def T(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype)


@pytest.mark.parametrize(("name", "types", "attrs", "match"), [
    ("roi_align", [T(1, 1, 4, 4), T(2, 4)], {}, "takes 3 inputs"),
    ("roi_align", [T(1, 4, 4), T(2, 4), T(2, dtype="int64")], {}, "4-D float"),
    ("roi_align", [T(1, 1, 4, 4), T(2, 5), T(2, dtype="int64")], {}, r"rois must be"),
    ("roi_align", [T(1, 1, 4, 4), T(2, 4), T(3, dtype="int64")], {}, "batch_indices must"),
    ("roi_align", [T(1, 1, 4, 4), T(2, 4), T(2)], {}, "integer tensor"),
    ("roi_align", [T(0, 1, 4, 4), T(2, 4), T(2, dtype="int64")], {}, "has no pixel"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2)], {}, "takes 3 inputs"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 1, 2, 2), T(1, 8, 3, 3)], {},
     "must be weight's axis 1"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2), T(1, 8, 3, 3)], {"offset_group": 3},
     "not a multiple of offset_group"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2), T(1, 8, 2, 3)], {}, "offset must be"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 5, 2), T(1, 8, 2, 3)], {}, "kernel spans 5"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2), T(1, 8, 3, 3)], {"strides": [1]},
     "must have 2, 2 and 4 values"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2), T(1, 8, 3, 3), T(3)], {"bias": True},
     r"bias must be \[2\]"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2), T(1, 8, 3, 3), T(1, 8, 3, 3)],
     {"mask": True}, r"mask must be \[1, 4, 3, 3\]"),
    ("deform_conv", [T(1, 2, 4, 4), T(2, 2, 2, 2, dtype="float16"), T(1, 8, 3, 3)], {},
     "x's dtype float32"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 4)], {"q_heads": 1, "kv_heads": 1, "scale": 1},
     r"takes 5 inputs \(query, key, value, decay, beta\)"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 4), T(1, 2, 4)],
     {"q_heads": 3, "kv_heads": 2, "scale": 1, "update_rule": "linear"}, "multiple of"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 6), T(1, 2, 4)],
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "linear"},
     "key's last axis must be"),
    ("linear_attention", [T(1, 2, 4), T(1, 3, 4), T(1, 2, 4)],
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "linear"}, "batch and tokens"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 4), T(1, 2, 4), T(1, 2, 2, 3)],
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "linear", "past": True},
     r"past_state must be a float tensor of shape \[1, 2, 2, 2\]"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 4), T(1, 2, 4), T(1, 2, 3)],
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "gated"}, "decay's last axis"),
    ("linear_attention", [T(1, 2, 4), T(1, 2, 4), T(1, 2, 4), T(1, 2, 3)],
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "delta"}, "beta's last axis"),
    ("linear_attention", [T(1, 2, 4, dtype="int32")] * 3,
     {"q_heads": 2, "kv_heads": 2, "scale": 1, "update_rule": "linear"}, "query must be"),
])
def test_shape_functions_refuse_bad_inputs(name: str, types: list[TensorType],
                                           attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(OpError, match=match):
        infer(name, types, attrs)


X4 = {"x": f32(1, 1, 4, 4), "rois": np.zeros((2, 4), np.float32),
      "batch": np.zeros(2, np.int64)}
DC = deform_inputs(*DEFORM_CASES[0])
DC3 = {k: DC[k] for k in ("x", "w", "offset")}
LA = {"q": f32(1, 2, 4), "k": f32(1, 2, 4), "v": f32(1, 2, 4)}
TS = {"past": f32(2, 4, 3), "update": f32(2, 1, 3)}


@pytest.mark.parametrize(("op", "inputs", "data", "opset", "attrs", "match"), [
    ("RoiAlign", ["x", "rois", "batch"], X4, 16,
     {"coordinate_transformation_mode": "pixel"}, "must be 'half_pixel' or"),
    ("RoiAlign", ["x", "rois", "batch"], X4, 22, {"mode": "min"}, "mode must be 'avg' or"),
    ("RoiAlign", ["x", "rois", "batch"], X4, 22, {"output_height": 0}, "must be >= 1"),
    ("RoiAlign", ["x", "rois", "batch"], X4, 22, {"sampling_ratio": -1}, "must be >= 0"),
    ("RoiAlign", ["x", "rois", "batch"], dict(X4, batch=np.zeros(2, np.int32)), 22, {},
     r"batch_indices must be int64\[2\]"),
    ("RoiAlign", ["x", "rois", "batch"], dict(X4, rois=np.zeros((2, 5), np.float32)), 22, {},
     r"rois must be float32\[num_rois, 4\]"),
    ("RoiAlign", ["x", "rois", "batch"], {k: v.astype(BF16) if v.dtype == np.float32 else v
                                          for k, v in X4.items()}, 16, {},
     r"bfloat16 from opset 22"),
    ("DeformConv", ["x", "w", "offset"], DC3, 19, {"kernel_shape": [3, 3]},
     "differs from W's kernel"),
    ("DeformConv", ["x", "w", "offset"], DC3, 19, {"strides": [1]}, "strides must have 2"),
    ("DeformConv", ["x", "w", "offset"], DC3, 19, {"pads": [1, 1, -1, 0]}, "pads must be >= 0"),
    ("DeformConv", ["x", "w", "offset"], DC3, 19, {"group": 0}, "must be >= 1"),
    ("DeformConv", ["x", "w", "offset"], {k: v.astype(BF16) for k, v in DC3.items()}, 19, {},
     "bfloat16 from opset 22"),
    ("DeformConv", ["x", "w", "offset"], dict(DC3, w=DC3["w"].astype(np.float64)), 22, {},
     "W must have X's dtype float32"),
    ("DeformConv", ["x", "w", "offset"], dict(DC3, offset=np.zeros((1, 8, 3, 3), np.float32)),
     22, {}, "offset must be"),
    ("LinearAttention", ["q", "k", "v"], LA, 27, {"q_num_heads": 3, "kv_num_heads": 2},
     "positive multiple"),
    ("LinearAttention", ["q", "k", "v"], LA, 27,
     {"q_num_heads": 1, "kv_num_heads": 1, "update_rule": "fast"}, "update_rule must be"),
    ("LinearAttention", ["q", "k", "v"], LA, 27, {"q_num_heads": 1, "kv_num_heads": 1},
     "'gated_delta' needs the decay input"),
    ("LinearAttention", ["q", "k", "v", "", "d"], dict(LA, d=f32(1, 2, 1)), 27,
     {"q_num_heads": 1, "kv_num_heads": 1, "update_rule": "linear"},
     "'linear' takes no decay input"),
    ("LinearAttention", ["q", "k", "v"], {k: v.astype(np.float64) for k, v in LA.items()}, 27,
     {"q_num_heads": 1, "kv_num_heads": 1, "update_rule": "linear"}, "query must be one of"),
    ("LinearAttention", ["q", "k", "v"], dict(LA, q=f32(1, 2, 5)), 27,
     {"q_num_heads": 2, "kv_num_heads": 1, "update_rule": "linear"},
     "positive multiple of q_num_heads"),
    ("SwiGLU", ["a", "b"], {"a": f32(2, 3), "b": f32(1, 3)}, 28, {}, "does not broadcast"),
    ("SwiGLU", ["a", "b"], {"a": np.ones(3, np.int32), "b": np.ones(3, np.int32)}, 28, {},
     "A must be one of"),
    ("TensorScatter", ["past", "update"], TS, 24, {"axis": 0}, "must not be 0"),
    ("TensorScatter", ["past", "update"], TS, 24, {"axis": 3}, "out of range"),
    ("TensorScatter", ["past", "update"], TS, 24, {"axis": 1, "mode": "ring"},
     "mode must be 'linear' or"),
    ("TensorScatter", ["past", "update"], dict(TS, update=f32(2, 5, 3)), 24, {"axis": 1},
     "no longer than 4"),
    ("TensorScatter", ["past", "update"], dict(TS, update=f32(2, 1, 2)), 24, {"axis": 1},
     "update must have past_cache's shape"),
    ("TensorScatter", ["past", "update", "at"], dict(TS, at=np.zeros(2, np.int32)), 24,
     {"axis": 1}, r"write_indices must be int64\[2\]"),
    ("TensorScatter", ["past", "update"], dict(TS, update=TS["update"].astype(np.float16)), 24,
     {"axis": 1}, "update must have past_cache's dtype"),
])
def test_bad_models_name_the_node(op: str, inputs: list[str], data: dict[str, np.ndarray],
                                  opset: int, attrs: dict[str, Any], match: str) -> None:
    outputs = 2 if op == "LinearAttention" else 1
    convert_error(model_of(op, inputs, data, opset, outputs=outputs, **attrs), match)


@pytest.mark.parametrize(("op", "data", "opset", "attrs", "match"), [
    ("RoiAlign", X4, 10, {"coordinate_transformation_mode": "half_pixel"},
     "Unrecognized attribute: coordinate_transformation_mode"),
    ("LinearAttention", LA, 27, {"q_num_heads": 1}, "'kv_num_heads' is missing"),
])
def test_the_onnx_checker_refuses_what_the_schema_does_not_know(
        op: str, data: dict[str, np.ndarray], opset: int, attrs: dict[str, Any],
        match: str) -> None:
    outputs = 2 if op == "LinearAttention" else 1
    model = model_of(op, list(data), data, opset, outputs=outputs, **attrs)
    with pytest.raises(ConversionError, match=match):
        graphrt.from_onnx(model)
