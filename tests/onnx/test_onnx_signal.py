"""ONNX signal processing: DFT (opsets 17 and 20), STFT, the Hann, Hamming and Blackman windows
and MelWeightMatrix, converted from one-node models and compared with ONNX's reference
implementation and ONNX Runtime, on cpu and sim; the standard ops ``dft`` and ``stft`` on their
own; and the errors a bad model gets."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from onnx_harness import close, run_ort, run_reference, typed
from ops_harness import run_op
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

DEVICES = ["cpu", "sim"]


def model(op: str, inputs: list[tuple[str, np.ndarray | None, bool]], opset: int,
          **attrs: Any) -> Any:
    """A one-node model over ``inputs`` in node order: ``(name, value, constant)``, a graph
    input or (``constant``) an initializer; a None value is an omitted input."""
    names = [name if value is not None else "" for name, value, _ in inputs]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["y"], name=f"my_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                       value.shape)
         for name, value, constant in inputs if value is not None and not constant],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(np.asarray(value), name)
         for name, value, constant in inputs if value is not None and constant])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    return typed(built, TensorProto.FLOAT)


def feeds(inputs: list[tuple[str, np.ndarray | None, bool]]) -> dict[str, np.ndarray]:
    return {name: value for name, value, constant in inputs
            if value is not None and not constant}


def run(built: Any, data: dict[str, np.ndarray], device: str) -> np.ndarray:
    (out,) = graphrt.from_onnx(built).create(device)(**data)
    return np.array(out)


def signal(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """Values in [-1, 1), the same for the same shape whatever ran before."""
    rng = np.random.default_rng([17, *shape])
    return rng.uniform(-1, 1, shape).astype(dtype)


def close_to_ort(got: np.ndarray, built: Any, data: dict[str, np.ndarray]) -> None:
    """ONNX Runtime transforms lengths that are not powers of 2 by a direct float32 sum,
    within about 2e-5 of numpy's FFT (the reference's, and graphrt's)."""
    close(got, run_ort(built, data)[0], rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# DFT

# (opset, axis): the attribute at opset 17 (None: its default 1), the input from opset 20
# (None: omitted, its default -2)
AXES = [(17, None), (17, -2), (20, None), (20, 0), (20, -3)]
MODES = [  # (inverse, onesided, complex input)
    (0, 0, False), (0, 0, True), (0, 1, False), (1, 0, False), (1, 0, True), (1, 1, True)]


def dft_model(x: np.ndarray, opset: int, axis: int | None, length: int | None,
              inverse: int, onesided: int) -> Any:
    inputs: list[tuple[str, np.ndarray | None, bool]] = [
        ("x", x, False), ("dft_length", None if length is None else np.array(length), True)]
    attrs: dict[str, Any] = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        inputs.append(("axis", None if axis is None else np.array(axis), True))
    elif axis is not None:
        attrs["axis"] = axis
    return model("DFT", inputs, opset, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [None, 4, 9])
@pytest.mark.parametrize(("opset", "axis"), AXES)
@pytest.mark.parametrize(("inverse", "onesided", "complex_input"), MODES)
def test_dft_matches_the_reference(opset: int, axis: int | None, length: int | None,
                                   inverse: int, onesided: int, complex_input: bool,
                                   device: str) -> None:
    x = signal((2, 6, 5, 2 if complex_input else 1))
    built = dft_model(x, opset, axis, length, inverse, onesided)
    got = run(built, {"x": x}, device)
    close(got, run_reference(built, {"x": x})[0])
    if not (inverse and onesided and length is not None):
        # ONNX Runtime's IRFFT of a given length departs from numpy's irfft (the reference)
        close_to_ort(got, built, {"x": x})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize(("inverse", "onesided", "complex_input"), MODES)
def test_dft_keeps_the_input_dtype(dtype: str, inverse: int, onesided: int,
                                   complex_input: bool, device: str) -> None:
    x = signal((3, 8, 2 if complex_input else 1), dtype)
    built = dft_model(x, 20, None, None, inverse, onesided)
    got = run(built, {"x": x}, device)
    tolerance = 1e-12 if dtype == "float64" else 1e-2
    close(got, run_reference(built, {"x": x})[0], rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_dft_of_bfloat16_is_computed_in_float32(device: str) -> None:
    import ml_dtypes

    x32 = signal((2, 8, 2))
    x = x32.astype(ml_dtypes.bfloat16)
    got = run(dft_model(x, 20, None, None, 0, 0), {"x": x}, device)
    assert got.dtype == ml_dtypes.bfloat16
    want = np.fft.fft(x.astype(np.float32)[..., 0] + 1j * x.astype(np.float32)[..., 1], axis=1)
    np.testing.assert_allclose(got[..., 0].astype(np.float32), want.real, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(got[..., 1].astype(np.float32), want.imag, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_then_its_inverse_gives_the_signal_back(onesided: int, device: str) -> None:
    x = signal((2, 10, 1))
    graph = helper.make_graph(
        [helper.make_node("DFT", ["x"], ["f"], onesided=onesided, axis=1),
         helper.make_node("DFT", ["f", "n"], ["y"], onesided=onesided, inverse=1, axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(np.array(10, np.int64), "n")])
    built = typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                  TensorProto.FLOAT)
    got = run(built, {"x": x}, device)
    if onesided:
        np.testing.assert_allclose(got, x, atol=1e-5)
    else:  # a complex signal whose imaginary part is 0
        np.testing.assert_allclose(got[..., :1], x, atol=1e-5)
        np.testing.assert_allclose(got[..., 1], 0, atol=1e-5)


def test_dft_sizes_given_as_graph_inputs_are_frozen_by_the_backend() -> None:
    import graphrt.onnx.backend as backend

    x = signal((1, 10, 10, 1))
    built = model("DFT", [("x", x, False), ("n", np.array(12), False),
                          ("axis", np.array(2), False)], 20)
    data = {"x": x, "n": np.array(12), "axis": np.array(2)}
    (got,) = backend.prepare(built, "CPU").run(data)
    close(got, run_reference(built, data)[0])


# --------------------------------------------------------------------------------------------
# STFT

WINDOWS = ["none", "none+length", "constant", "constant+length", "input"]


def stft_model(x: np.ndarray, step: int, window: str, onesided: int | None,
               frame_length: int = 12) -> tuple[Any, dict[str, np.ndarray]]:
    weights = np.hanning(frame_length).astype(x.dtype)
    inputs: list[tuple[str, np.ndarray | None, bool]] = [
        ("signal", x, False), ("frame_step", np.array(step), True),
        ("window", None if window.startswith("none") else weights, window != "input"),
        ("frame_length", np.array(frame_length) if window.endswith("length") else None,
         True)]
    attrs = {} if onesided is None else {"onesided": onesided}
    built = model("STFT", inputs, 17, **attrs)
    return built, feeds(inputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("complex_input", [False, True])
@pytest.mark.parametrize("onesided", [None, 0, 1])
@pytest.mark.parametrize("step", [3, 8])
@pytest.mark.parametrize("window", WINDOWS)
def test_stft_matches_the_reference(window: str, step: int, onesided: int | None,
                                    complex_input: bool, device: str) -> None:
    x = signal((2, 32, 2 if complex_input else 1))
    built, data = stft_model(x, step, window, onesided)
    got = run(built, data, device)
    close(got, run_reference(built, data)[0])
    if window != "none":  # ONNX Runtime needs the window or frame_length to size its output
        close_to_ort(got, built, data)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_stft_keeps_the_signal_dtype(dtype: str, device: str) -> None:
    x = signal((1, 40, 1), dtype)
    built, data = stft_model(x, 5, "input", 1, frame_length=16)
    got = run(built, data, device)
    tolerance = 1e-12 if dtype == "float64" else 1e-2
    close(got, run_reference(built, data)[0], rtol=tolerance, atol=tolerance)


# --------------------------------------------------------------------------------------------
# windows

WINDOW_OPS = ["HannWindow", "HammingWindow", "BlackmanWindow"]
OUTPUT_TYPES = {"float32": 1, "float64": 11, "float16": 10, "int32": 6, "uint8": 2}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the reference
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(OUTPUT_TYPES))
@pytest.mark.parametrize("size", [1, 2, 10])
@pytest.mark.parametrize("periodic", [None, 0, 1])
@pytest.mark.parametrize("op", WINDOW_OPS)
def test_window_matches_the_reference(op: str, periodic: int | None, size: int, dtype: str,
                                      device: str) -> None:
    if size == 1 and periodic == 0 and dtype in ("int32", "uint8"):
        pytest.skip("a symmetric window of one point is NaN, which no integer holds")
    attrs: dict[str, Any] = {"output_datatype": OUTPUT_TYPES[dtype]}
    if periodic is not None:
        attrs["periodic"] = periodic
    built = model(op, [("size", np.array(size, np.int32), True)], 17, **attrs)
    got = run(built, {}, device)
    # ONNX's reference computes Hann and Hamming windows in the output dtype, graphrt in
    # float64 rounded once (as ONNX Runtime): within a unit in the last place of float32, a
    # few of float16
    tolerance = 2e-3 if dtype == "float16" else 1e-6
    close(got, run_reference(built, {})[0], rtol=tolerance, atol=tolerance)
    if dtype in ("float32", "float64"):
        close(got, run_ort(built, {})[0], rtol=tolerance, atol=tolerance)


def test_window_is_a_constant_of_the_graph() -> None:
    built = model("HannWindow", [("size", np.array(16), True)], 17)
    bundle = graphrt.from_onnx(built)
    assert all(node.op == "null" for node in bundle.graph.nodes)  # no step: a parameter


def test_window_size_given_as_a_graph_input_is_frozen_by_the_backend() -> None:
    import graphrt.onnx.backend as backend

    built = model("HammingWindow", [("size", np.array(7, np.int64), False)], 17, periodic=0)
    (got,) = backend.prepare(built, "CPU").run({"size": np.array(7, np.int64)})
    close(got, run_reference(built, {"size": np.array(7, np.int64)})[0], atol=1e-6)


# --------------------------------------------------------------------------------------------
# MelWeightMatrix

MEL_CASES = [  # num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz
    (8, 16, 8192, 0.0, 4096.0),
    (10, 64, 16000, 20.0, 8000.0),
    (5, 32, 8000, 300.0, 3000.0),
    (40, 512, 16000, 0.0, 8000.0),
    (3, 7, 100, 10.0, 40.0),
    (1, 1, 10, 0.0, 0.0),
]


def mel_model(case: tuple[int, int, int, float, float], int_type: Any, float_type: Any,
              **attrs: Any) -> Any:
    bins, length, rate, low, high = case
    inputs = [("num_mel_bins", np.array(bins, int_type), True),
              ("dft_length", np.array(length, int_type), True),
              ("sample_rate", np.array(rate, int_type), True),
              ("lower_edge_hertz", np.array(low, float_type), True),
              ("upper_edge_hertz", np.array(high, float_type), True)]
    return model("MelWeightMatrix", inputs, 17, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("int_type", "float_type"), [(np.int64, np.float32),
                                                      (np.int32, np.float64)])
@pytest.mark.parametrize("case", MEL_CASES)
def test_mel_weight_matrix_matches_the_reference(case: tuple[int, int, int, float, float],
                                                 int_type: Any, float_type: Any,
                                                 device: str) -> None:
    built = mel_model(case, int_type, float_type)
    got = run(built, {}, device)
    want = run_reference(built, {})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # the same float64 arithmetic, cast once
    if int_type is np.int64 and float_type is np.float32:  # what ONNX Runtime implements
        close(got, run_ort(built, {})[0], atol=1e-6)


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "uint8"])
def test_mel_weight_matrix_honors_output_datatype(dtype: str) -> None:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    built = mel_model(MEL_CASES[1], np.int64, np.float32, output_datatype=elem)
    got = run(built, {}, "cpu")
    np.testing.assert_array_equal(got, run_reference(built, {})[0])
    assert got.dtype == np.dtype(dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_a_mel_spectrogram_pipeline_matches_onnx_runtime(device: str) -> None:
    """HannWindow → STFT → |.|² → MatMul with MelWeightMatrix, the usual front end of a
    speech model."""
    x = signal((2, 400, 1))
    nodes = [
        helper.make_node("HannWindow", ["size"], ["window"]),
        # onesided is 1 by default, but ONNX's shape inference (which ONNX Runtime runs)
        # takes an absent onesided for 0 and then refuses the MatMul
        helper.make_node("STFT", ["x", "step", "window"], ["spectrum"], onesided=1),
        helper.make_node("Mul", ["spectrum", "spectrum"], ["squares"]),
        helper.make_node("ReduceSum", ["squares", "last"], ["power"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "size", "rate", "low", "high"], ["mel"]),
        helper.make_node("MatMul", ["power", "mel"], ["y"]),
    ]
    consts = {"size": np.array(64, np.int64), "step": np.array(16, np.int64),
              "last": np.array([-1], np.int64), "mels": np.array(12, np.int64),
              "rate": np.array(16000, np.int64), "low": np.array(20.0, np.float32),
              "high": np.array(8000.0, np.float32)}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    built = typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                    ir_version=ort_ir_version()), TensorProto.FLOAT)
    got = run(built, {"x": x}, device)
    assert got.shape == (2, 22, 12)
    close(got, run_ort(built, {"x": x})[0], rtol=1e-4, atol=1e-4)
    close(got, run_reference(built, {"x": x})[0], rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# errors: a ConversionError naming the node


def refused(built: Any, *words: str) -> None:
    with pytest.raises(ConversionError) as caught:
        graphrt.from_onnx(built)
    message = str(caught.value)
    assert "my_" in message, message
    for word in words:
        assert word in message, message


def test_dft_refuses_the_complex_axis_and_axes_out_of_range() -> None:
    x = signal((1, 6, 2))
    refused(dft_model(x, 20, -1, None, 0, 0), "axis -1")
    refused(dft_model(x, 20, 2, None, 0, 0), "axis 2")
    refused(dft_model(x, 17, -4, None, 0, 0), "axis -4")


def test_dft_refuses_one_sided_transforms_of_the_wrong_kind_of_input() -> None:
    refused(dft_model(signal((1, 6, 2)), 20, None, None, 0, 1), "real input")
    refused(dft_model(signal((1, 6, 1)), 20, None, None, 1, 1), "complex input")


def test_dft_refuses_bad_lengths_and_inputs() -> None:
    x = signal((1, 6, 1))
    refused(dft_model(x, 20, None, 0, 0, 0), "dft_length must be >= 1")
    refused(dft_model(signal((1, 1, 2)), 20, None, None, 1, 1), "at least 1 point")
    refused(model("DFT", [("x", x, False), ("n", np.array([4, 5]), True)], 20), "scalar")
    refused(model("DFT", [("x", x, False), ("n", np.array(4.0), True)], 20), "integer")
    refused(model("DFT", [("x", signal((1, 6, 3)), False)], 20), "last dim of 1")
    refused(model("DFT", [("x", signal((6,)), False)], 20), "last dim of 1")
    refused(dft_model(x, 17, None, None, 2, 0), "inverse must be 0 or 1")


def test_dft_refuses_a_length_computed_at_run_time() -> None:
    x = signal((1, 6, 1))
    built = model("DFT", [("x", x, False), ("n", np.array(4), False)], 20)
    with pytest.raises(ConversionError, match="constants="):
        graphrt.from_onnx(built)


def test_stft_refuses_inconsistent_frames() -> None:
    x = signal((1, 32, 1))
    window = model("STFT", [("signal", x, False), ("frame_step", np.array(4), True),
                            ("window", np.ones(8, np.float32), True),
                            ("frame_length", np.array(10), True)], 17)
    refused(window, "8 weights", "frame_length is 10")
    refused(stft_model(x, 0, "input", 1)[0], "frame_step must be >= 1")
    refused(stft_model(x, 4, "none+length", 1, frame_length=40)[0], "does not fit")
    refused(model("STFT", [("signal", signal((32, 1)), False),
                           ("frame_step", np.array(4), True)], 17), "[batch, length")
    refused(model("STFT", [("signal", x, False), ("frame_step", np.array(4), True),
                           ("window", np.ones((2, 4), np.float32), True)], 17), "1-D")
    refused(model("STFT", [("signal", x, False), ("frame_step", np.array(4), True),
                           ("window", np.ones(8, np.float64), True)], 17), "window must be")
    refused(stft_model(x, 4, "input", 2)[0], "onesided must be 0 or 1")


def test_windows_refuse_bad_sizes_and_types() -> None:
    refused(model("HannWindow", [("size", np.array(0), True)], 17), "size must be >= 1")
    refused(model("HannWindow", [("size", np.array(-3), True)], 17), "size must be >= 1")
    refused(model("HannWindow", [("size", np.array(4.0), True)], 17), "integer")
    refused(model("HannWindow", [("size", np.array([4, 4]), True)], 17), "scalar")
    refused(model("HammingWindow", [("size", np.array(4), True)], 17, periodic=3),
            "periodic must be 0 or 1")
    refused(model("BlackmanWindow", [("size", np.array(4), True)], 17, output_datatype=9),
            "BOOL")
    refused(model("BlackmanWindow", [("size", np.array(4), True)], 17, output_datatype=8),
            "STRING")


def test_a_window_past_the_fold_budget_is_refused() -> None:
    refused(model("HannWindow", [("size", np.array(2**40), True)], 17), "bytes")


def test_mel_weight_matrix_refuses_bands_outside_the_spectrogram() -> None:
    refused(mel_model((8, 16, 8000, 0.0, 7000.0), np.int64, np.float32), "outside the 9 bins")
    refused(mel_model((8, 16, 8000, -500.0, 4000.0), np.int64, np.float32), "outside")
    refused(mel_model((8, 16, 8000, -700.0, 4000.0), np.int64, np.float32), "finite")
    refused(mel_model((8, 16, 0, 0.0, 4000.0), np.int64, np.float32), "sample_rate")
    refused(mel_model((0, 16, 8000, 0.0, 4000.0), np.int64, np.float32), "num_mel_bins")
    refused(mel_model((8, 0, 8000, 0.0, 4000.0), np.int64, np.float32), "dft_length")
    refused(mel_model((8, 16, 8000, 0.0, 4000.0), np.float32, np.float32), "integer")
    refused(mel_model((8, 16, 8000, 0.0, 4000.0), np.int64, np.int64), "float")


# --------------------------------------------------------------------------------------------
# the standard ops on their own


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_the_dft_op_matches_numpy(device: graphrt.Device) -> None:
    x = signal((3, 7, 2))
    (got,) = run_op("dft", [x], {"axis": -2, "length": 9}, device, lowered=True)
    want = np.fft.fft(x[..., 0] + 1j * x[..., 1], n=9, axis=1)
    np.testing.assert_allclose(got, np.stack([want.real, want.imag], -1), atol=1e-5)
    (got,) = run_op("dft", [x], {"axis": 1, "inverse": True, "onesided": True}, device)
    want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=12, axis=1)
    np.testing.assert_allclose(got[..., 0], want, atol=1e-5)


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_the_signal_ops_take_empty_tensors(device: graphrt.Device) -> None:
    (got,) = run_op("dft", [signal((0, 5, 1))], {"axis": 1}, device)
    assert got.shape == (0, 5, 2)
    (got,) = run_op("dft", [signal((2, 0, 2))], {"axis": 1, "length": 3}, device)
    assert got.shape == (2, 3, 2) and not got.any()
    (got,) = run_op("stft", [signal((0, 16, 1)), np.ones(4, np.float32)],
                    {"frame_step": 4, "frame_length": 4}, device)
    assert got.shape == (0, 4, 3, 2)


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_the_stft_op_matches_numpy(device: graphrt.Device) -> None:
    x, window = signal((2, 20, 1)), signal((6,))
    (got,) = run_op("stft", [x, window], {"frame_step": 5, "frame_length": 6}, device,
                    lowered=True)
    frames = np.stack([x[:, i * 5:i * 5 + 6, 0] * window for i in range(3)], 1)
    want = np.fft.rfft(frames, axis=-1)
    np.testing.assert_allclose(got, np.stack([want.real, want.imag], -1), atol=1e-5)


def test_the_signal_ops_refuse_bad_types() -> None:
    dft, stft = get_op("dft"), get_op("stft")
    f32 = TensorType((2, 8, 1), "float32")
    cases = [
        (dft, [TensorType((2, 8, 1), "int32")], {"axis": 1}, "must be one of"),
        (dft, [f32, f32], {"axis": 1}, "expected 1 input"),
        (dft, [f32], {"axis": 2}, "out of range"),
        (stft, [f32], {"frame_step": 1, "frame_length": 4}, "expected 2 inputs"),
        (stft, [f32, TensorType((5,), "float32")], {"frame_step": 1, "frame_length": 4},
         "window must be float32[4]"),
        (stft, [f32, TensorType((9,), "float32")], {"frame_step": 1, "frame_length": 9},
         "does not fit"),
    ]
    for op, types, attrs, words in cases:
        with pytest.raises(OpError, match=re.escape(words)):
            op.infer(types, op.attrs(**attrs), [None] * len(types))
