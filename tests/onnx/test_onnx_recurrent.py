"""ONNX's recurrent layers (RNN, GRU, LSTM) converted to the standard ops ``rnn``, ``gru`` and
``lstm``, against ONNX Runtime on cpu and sim.

Where ONNX Runtime has no kernel, the oracle changes: ``layout=1`` (batch-major; ONNX Runtime
refuses it) is compared with ONNX Runtime running the same layer sequence-major on transposed
tensors and with ONNX's reference evaluator; float64 (ONNX Runtime has float32 and float16
only) with the reference evaluator, which implements the default activations without
``sequence_lens`` or ``clip``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from onnx_harness import node_model, run_graphrt, run_ort, run_reference
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.onnx.convert import convert_model
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
CELLS = list(GATES)
DIRECTIONS = ["forward", "reverse", "bidirectional"]
DEVICES = {"cpu": graphrt.cpu(0), "sim": graphrt.sim(0)}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6

Arrays = dict[str, np.ndarray | None]


def outputs(op: str) -> int:
    return 3 if op == "LSTM" else 2


def layer(op: str, direction: str = "forward", *, dtype: str = "float32", seed: int = 0,
          bias: bool = True, initial: bool = True, peepholes: bool = False,
          lens: list[int] | None = None, layout: int = 0, seq: int = SEQ, batch: int = BATCH
          ) -> tuple[np.ndarray, Arrays]:
    """X and the node's other inputs (weights as initializers; None: omitted)."""
    rng = np.random.default_rng(seed)
    d, g = (2 if direction == "bidirectional" else 1), GATES[op]

    def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    x = rand(*((batch, seq, INPUT) if layout else (seq, batch, INPUT)))
    state = (batch, d, HIDDEN) if layout else (d, batch, HIDDEN)
    consts: Arrays = {
        "W": rand(d, g * HIDDEN, INPUT, scale=0.5), "R": rand(d, g * HIDDEN, HIDDEN, scale=0.5),
        "B": rand(d, 2 * g * HIDDEN) if bias else None,
        "sequence_lens": None if lens is None else np.array(lens, np.int32),
        "initial_h": rand(*state) if initial else None}
    if op == "LSTM":
        consts["initial_c"] = rand(*state) if initial else None
        consts["P"] = rand(d, 3 * HIDDEN) if peepholes else None
    return x, consts


def make(op: str, x: np.ndarray, consts: Arrays, opset: int = 14, **attrs: Any) -> Any:
    return node_model(op, {"X": x}, consts, opset, outputs(op), hidden_size=HIDDEN, **attrs)


def assert_close(actual: list[np.ndarray], expected: list[np.ndarray], tol: float) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=tol,
                                   atol=tol)


def ort_sequence_major(op: str, x: np.ndarray, consts: Arrays, **attrs: Any
                       ) -> list[np.ndarray]:
    """ONNX Runtime's outputs for a ``layout=1`` layer: the same layer run sequence-major on
    transposed tensors, its outputs transposed back."""
    swapped = {k: (v.transpose(1, 0, 2).copy() if k in ("initial_h", "initial_c") and
                   v is not None else v) for k, v in consts.items()}
    xs = x.transpose(1, 0, 2).copy()
    y, *states = run_ort(make(op, xs, swapped, **attrs), {"X": xs})
    return [y.transpose(2, 0, 1, 3), *(s.transpose(1, 0, 2) for s in states)]


def check(op: str, x: np.ndarray, consts: Arrays, device: str = "cpu", tol: float = 1e-5,
          opset: int = 14, **attrs: Any) -> list[np.ndarray]:
    """graphrt equals ONNX Runtime (sequence-major) on ``device``; returns graphrt's outputs."""
    model = make(op, x, consts, opset, **attrs)
    actual = run_graphrt(model, {"X": x}, DEVICES[device])
    if attrs.get("layout"):
        expected = ort_sequence_major(op, x, consts, **{k: v for k, v in attrs.items()
                                                         if k != "layout"})
    else:
        expected = run_ort(model, {"X": x})
    assert_close(actual, expected, tol)
    return actual


# --------------------------------------------------------------------------------------------
# every cell, direction and optional input against ONNX Runtime

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "no_bias_no_initial_state": {"bias": False, "initial": False},
    "sequence_lens": {"lens": [5, 2, 3]},
    "sequence_lens_with_zero": {"lens": [0, 5, 1]},
    "layout_1": {"layout": 1},
    "layout_1_sequence_lens": {"layout": 1, "lens": [2, 5, 4]},
}


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", CELLS)
def test_a_layer_matches_onnx_runtime(op: str, direction: str, variant: str,
                                      device: str) -> None:
    spec = dict(VARIANTS[variant])
    layout = spec.get("layout", 0)
    x, consts = layer(op, direction, **spec)
    attrs = {"direction": direction, **({"layout": 1} if layout else {})}
    y, y_h, *rest = check(op, x, consts, device, **attrs)
    lens = spec.get("lens")
    if lens is not None:  # past its length a sequence's outputs are 0
        seq_major = y.transpose(1, 2, 0, 3) if layout else y
        for b, n in enumerate(lens):
            assert not seq_major[n:, :, b].any()
            if n == 0:  # no step: the final states are 0, as ONNX Runtime gives
                states = [s.transpose(1, 0, 2) if layout else s for s in (y_h, *rest)]
                assert all(not s[:, b].any() for s in states)


@pytest.mark.parametrize("op", CELLS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_clip_bounds_every_gate_input(op: str, direction: str) -> None:
    x, consts = layer(op, direction, seed=3)
    check(op, x, consts, direction=direction, clip=0.6)


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction: str, device: str) -> None:
    x, consts = layer("GRU", direction, seed=4, lens=[3, 5, 1])
    check("GRU", x, consts, device, direction=direction, linear_before_reset=1)


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("input_forget", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes_and_input_forget(direction: str, input_forget: int,
                                         device: str) -> None:
    x, consts = layer("LSTM", direction, seed=5, peepholes=True, lens=[4, 5, 2])
    check("LSTM", x, consts, device, direction=direction, input_forget=input_forget, clip=2.0)


@pytest.mark.parametrize("device", list(DEVICES))
def test_lstm_input_forget_without_peepholes(device: str) -> None:
    x, consts = layer("LSTM", "bidirectional", seed=6)
    check("LSTM", x, consts, device, direction="bidirectional", input_forget=1)


ACTIVATIONS: list[tuple[str, list[float], list[float]]] = [
    ("Relu", [], []), ("Tanh", [], []), ("Sigmoid", [], []), ("Affine", [0.5], [0.2]),
    ("LeakyRelu", [0.3], []), ("ThresholdedRelu", [0.25], []), ("ScaledTanh", [0.8], [1.3]),
    ("HardSigmoid", [0.3], [0.4]), ("Elu", [0.7], []), ("Softsign", [], []),
    ("Softplus", [], []), ("LeakyRelu", [], []), ("HardSigmoid", [], []), ("Elu", [], []),
]
"""(activation, alpha, beta); empty lists leave the ONNX defaults where both agree."""


def _alpha_beta(alpha: list[float], beta: list[float]) -> dict[str, Any]:
    return {**({"activation_alpha": alpha} if alpha else {}),
            **({"activation_beta": beta} if beta else {})}


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize(("name", "alpha", "beta"), ACTIVATIONS,
                         ids=[f"{n}{'-' + str(a[0]) if a else ''}" for n, a, _ in ACTIVATIONS])
def test_every_rnn_activation(name: str, alpha: list[float], beta: list[float],
                              device: str) -> None:
    x, consts = layer("RNN", "bidirectional", seed=7)
    check("RNN", x, consts, device, direction="bidirectional", activations=[name, name],
          **_alpha_beta(alpha * 2, beta * 2))


@pytest.mark.parametrize("device", list(DEVICES))
def test_gru_and_lstm_with_other_activations_consume_alpha_and_beta_in_order(
        device: str) -> None:
    """alpha and beta go, in order, to the activations that take them (ONNX Runtime)."""
    x, consts = layer("GRU", "bidirectional", seed=8, lens=[5, 3, 4])
    check("GRU", x, consts, device, direction="bidirectional",
          activations=["HardSigmoid", "Softsign", "Sigmoid", "Elu"],
          activation_alpha=[0.3, 0.9], activation_beta=[0.45])
    x, consts = layer("LSTM", "reverse", seed=9, peepholes=True)
    check("LSTM", x, consts, device, direction="reverse",
          activations=["hardsigmoid", "LeakyRelu", "Softplus"],  # names in any case
          activation_alpha=[0.25, 0.1], activation_beta=[0.5], clip=1.5)


def test_activations_that_onnx_runtime_defaults_differently_take_the_onnx_defaults() -> None:
    """Affine (1, 0), ThresholdedRelu (1) and ScaledTanh (1, 1) without alpha/beta take the
    defaults of the ONNX operators of those names (ONNX Runtime uses 0)."""
    x, consts = layer("RNN", seed=10)
    for name, alpha, beta in (("Affine", 1.0, 0.0), ("ThresholdedRelu", 1.0, 0.0),
                              ("ScaledTanh", 1.0, 1.0)):
        implicit = run_graphrt(make("RNN", x, consts, activations=[name]), {"X": x})
        explicit = run_graphrt(make("RNN", x, consts, activations=[name],
                                    activation_alpha=[alpha], activation_beta=[beta]),
                               {"X": x})
        assert_close(implicit, explicit, 0.0)


# --------------------------------------------------------------------------------------------
# dtypes, opsets, omitted outputs


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", CELLS)
def test_float16(op: str, direction: str, device: str) -> None:
    x, consts = layer(op, direction, dtype="float16", seed=11, lens=[5, 4, 2],
                      peepholes=op == "LSTM")
    check(op, x, consts, device, tol=3e-3, direction=direction)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", CELLS)
def test_float64_matches_the_reference_evaluator(op: str, direction: str) -> None:
    x, consts = layer(op, direction, dtype="float64", seed=12)
    model = make(op, x, consts, direction=direction)
    actual = run_graphrt(model, {"X": x})
    expected = run_reference(model, {"X": x})
    assert_close(actual[:2], expected[:2], 1e-12)
    assert actual[0].dtype == np.float64


@pytest.mark.parametrize("op", CELLS)
def test_layout_1_matches_the_reference_evaluator(op: str) -> None:
    x, consts = layer(op, "bidirectional", layout=1, seed=13)
    model = make(op, x, consts, direction="bidirectional", layout=1)
    actual = run_graphrt(model, {"X": x}, graphrt.sim(0))
    assert_close(actual[:2], run_reference(model, {"X": x})[:2], 1e-5)


@pytest.mark.parametrize("opset", [7, 14, 22])
@pytest.mark.parametrize("op", CELLS)
def test_every_opset(op: str, opset: int) -> None:
    x, consts = layer(op, "bidirectional", seed=14, lens=[1, 5, 3])
    check(op, x, consts, opset=opset, direction="bidirectional")


@pytest.mark.parametrize("op", CELLS)
def test_omitted_outputs_and_inputs(op: str) -> None:
    """Only Y_h (or Y and Y_c) wanted; sequence_lens given while initial_h is omitted."""
    x, consts = layer(op, "reverse", seed=15, initial=False, lens=[3, 1, 5])
    wanted = ["", "Y_h"] if op != "LSTM" else ["Y", "", "Y_c"]
    node = helper.make_node(op, [n if v is not None else "" for n, v in
                                 [("X", x), *consts.items()]], wanted, hidden_size=HIDDEN,
                            direction="reverse", name="partial")
    while not node.input[-1]:
        del node.input[-1]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in wanted
         if name],
        [numpy_helper.from_array(v, k) for k, v in consts.items() if v is not None])
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=ort_ir_version()))
    assert_close(run_graphrt(model, {"X": x}), run_ort(model, {"X": x}), 1e-5)


def test_a_constant_full_length_sequence_lens_runs_unmasked() -> None:
    x, consts = layer("GRU", seed=16, lens=[SEQ] * BATCH)
    lib = json.dumps(convert_model(make("GRU", x, consts)).emitted.lib)
    assert '"op": "gru"' in lib and "sequence_lens" not in lib
    check("GRU", x, consts)


def test_sequence_lens_as_a_graph_input_and_a_symbolic_batch() -> None:
    """Lengths given at run time (checked there), batch and sequence bounded by dim_bounds."""
    rng = np.random.default_rng(17)
    w = (rng.standard_normal((1, 4 * HIDDEN, INPUT)) * 0.5).astype("float32")
    r = (rng.standard_normal((1, 4 * HIDDEN, HIDDEN)) * 0.5).astype("float32")
    node = helper.make_node("LSTM", ["X", "W", "R", "", "lens"], ["Y", "Y_h", "Y_c"],
                            hidden_size=HIDDEN, name="dyn")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "N", INPUT]),
         helper.make_tensor_value_info("lens", TensorProto.INT32, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", 1, "N", HIDDEN]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, "N", HIDDEN]),
         helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, [1, "N", HIDDEN])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              ir_version=ort_ir_version())
    module = graphrt.from_onnx(model, dim_bounds={"T": 6, "N": 4}).create(graphrt.cpu(0))
    for t, lens in ((6, [6, 2, 0, 5]), (3, [1, 3]), (1, [1])):
        feeds = {"X": rng.standard_normal((t, len(lens), INPUT)).astype("float32"),
                 "lens": np.array(lens, np.int32)}
        assert_close([np.array(v) for v in module(**feeds)], run_ort(model, feeds), 1e-5)
    with pytest.raises(graphrt.GraphrtError, match=r"sequence_lens must lie in \[0, 3\]"):
        module(X=np.zeros((3, 2, INPUT), np.float32), lens=np.array([4, 1], np.int32))


# --------------------------------------------------------------------------------------------
# models as users export them


def _lstm_weights(rng: np.random.Generator, d: int, inp: int, hidden: int, g: int
                  ) -> list[np.ndarray]:
    return [(rng.standard_normal(shape) * 0.4).astype("float32")
            for shape in ((d, g * hidden, inp), (d, g * hidden, hidden), (d, 2 * g * hidden))]


def torch_like_lstm(batch_first: bool) -> Any:
    """``torch.nn.LSTM(8, 16, num_layers=2, batch_first=...)`` as torch.onnx.export lays it out:
    Slice of h0/c0 per layer, LSTM, Squeeze of the direction axis, Concat of the states."""
    rng = np.random.default_rng(20)
    inits, nodes = [], []
    x = "input"
    if batch_first:
        nodes.append(helper.make_node("Transpose", ["input"], ["x_tm"], perm=[1, 0, 2]))
        x = "x_tm"
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("zero", [0]), ("one", [1]), ("two", [2]), ("axis1", [1]))]
    hs, cs = [], []
    for k, inp in enumerate((8, 16)):
        w, r, b = _lstm_weights(rng, 1, inp, 16, 4)
        inits += [numpy_helper.from_array(v, f"{n}{k}") for n, v in (("W", w), ("R", r),
                                                                    ("B", b))]
        lo, hi = ("zero", "one") if k == 0 else ("one", "two")
        nodes += [helper.make_node("Slice", ["h0", lo, hi, "zero"], [f"h0_{k}"]),
                  helper.make_node("Slice", ["c0", lo, hi, "zero"], [f"c0_{k}"]),
                  helper.make_node("LSTM", [x, f"W{k}", f"R{k}", f"B{k}", "", f"h0_{k}",
                                            f"c0_{k}"], [f"y{k}", f"hn{k}", f"cn{k}"],
                                   hidden_size=16, name=f"/lstm/LSTM_{k}"),
                  helper.make_node("Squeeze", [f"y{k}", "axis1"], [f"x{k + 1}"])]
        x = f"x{k + 1}"
        hs.append(f"hn{k}")
        cs.append(f"cn{k}")
    if batch_first:
        nodes.append(helper.make_node("Transpose", [x], ["output"], perm=[1, 0, 2]))
    else:
        nodes.append(helper.make_node("Identity", [x], ["output"]))
    nodes += [helper.make_node("Concat", hs, ["hn"], axis=0),
              helper.make_node("Concat", cs, ["cn"], axis=0)]
    seq_batch = ["batch", "seq"] if batch_first else ["seq", "batch"]
    graph = helper.make_graph(
        nodes, "torch_lstm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [*seq_batch, 8]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, "batch", 16]),
         helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, "batch", 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [*seq_batch, 16]),
         helper.make_tensor_value_info("hn", TensorProto.FLOAT, [2, "batch", 16]),
         helper.make_tensor_value_info("cn", TensorProto.FLOAT, [2, "batch", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ort_ir_version())


def torch_like_gru() -> Any:
    """``torch.nn.GRU(8, 12, bidirectional=True)`` as torch.onnx.export lays it out: a
    bidirectional GRU with linear_before_reset, then Transpose and Reshape to [seq, batch,
    2*hidden]."""
    rng = np.random.default_rng(21)
    w, r, b = _lstm_weights(rng, 2, 8, 12, 3)
    inits = [numpy_helper.from_array(v, n) for n, v in (("W", w), ("R", r), ("B", b))]
    inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape"))
    nodes = [helper.make_node("GRU", ["input", "W", "R", "B", "", "h0"], ["y", "hn"],
                              hidden_size=12, direction="bidirectional", linear_before_reset=1,
                              name="/gru/GRU"),
             helper.make_node("Transpose", ["y"], ["y_t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["y_t", "shape"], ["output"])]
    graph = helper.make_graph(
        nodes, "torch_gru",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [7, 3, 8]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 3, 12])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [7, 3, 24]),
         helper.make_tensor_value_info("hn", TensorProto.FLOAT, [2, 3, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ort_ir_version())


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("batch_first", [False, True])
def test_a_two_layer_lstm_as_torch_exports_it(batch_first: bool, device: str) -> None:
    model = torch_like_lstm(batch_first)
    rng = np.random.default_rng(22)
    x = rng.standard_normal((3, 9, 8) if batch_first else (9, 3, 8)).astype("float32")
    feeds = {"input": x, "h0": rng.standard_normal((2, 3, 16)).astype("float32"),
             "c0": rng.standard_normal((2, 3, 16)).astype("float32")}
    module = graphrt.from_onnx(model, dim_bounds={"batch": 4, "seq": 9}).create(
        DEVICES[device])
    assert_close([np.array(v) for v in module(**feeds)], run_ort(model, feeds), 1e-5)


@pytest.mark.parametrize("device", list(DEVICES))
def test_a_bidirectional_gru_as_torch_exports_it(device: str) -> None:
    model = torch_like_gru()
    rng = np.random.default_rng(23)
    feeds = {"input": rng.standard_normal((7, 3, 8)).astype("float32"),
             "h0": rng.standard_normal((2, 3, 12)).astype("float32")}
    assert_close(run_graphrt(model, feeds, DEVICES[device]), run_ort(model, feeds), 1e-5)


# --------------------------------------------------------------------------------------------
# clear errors


def _error(op: str, **attrs: Any) -> str:
    x, consts = layer(op, attrs.pop("layer_direction", "forward"))
    with pytest.raises(ConversionError) as caught:
        graphrt.from_onnx(node_model(op, {"X": x}, consts, 14, outputs(op), **attrs))
    message = str(caught.value)
    assert f"my_{op.lower()}" in message and f"({op})" in message, message
    return message


def test_hidden_size_disagreeing_with_w_is_refused() -> None:
    message = _error("LSTM", hidden_size=5)
    assert "hidden_size 5" in message and "[1, 20, 4]" in message and "[1, 24, 4]" in message


def test_an_unknown_activation_is_refused() -> None:
    message = _error("RNN", hidden_size=HIDDEN, activations=["Swish"])
    assert "unknown activation 'Swish'" in message and "LeakyRelu" in message


def test_the_wrong_number_of_activations_is_refused() -> None:
    message = _error("GRU", hidden_size=HIDDEN, activations=["Sigmoid", "Tanh", "Tanh"])
    assert "must name 2 functions" in message and "given 3" in message
    message = _error("LSTM", hidden_size=HIDDEN, direction="bidirectional",
                     layer_direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh"])
    assert "must name 6 functions" in message


def test_a_direction_typo_is_refused() -> None:
    message = _error("GRU", hidden_size=HIDDEN, direction="backward")
    assert "direction must be one of" in message and "'backward'" in message


def test_a_direction_disagreeing_with_w_is_refused() -> None:
    message = _error("RNN", hidden_size=HIDDEN, direction="bidirectional")
    assert "need W of shape [2, 6, 4]" in message and "given [1, 6, 4]" in message


def test_bad_flags_and_clip_are_refused() -> None:
    assert "linear_before_reset must be 0 or 1, given 2" in _error(
        "GRU", hidden_size=HIDDEN, linear_before_reset=2)
    assert "input_forget must be 0 or 1" in _error("LSTM", hidden_size=HIDDEN,
                                                    input_forget=3)
    assert "clip must be > 0, given -1.0" in _error("RNN", hidden_size=HIDDEN, clip=-1.0)


def test_an_opset_older_than_7_is_refused_clearly() -> None:
    """ONNX's version converter has no adapter for the recurrent layers before opset 7."""
    x, consts = layer("GRU")
    model = node_model("GRU", {"X": x}, consts, 3, 2, hidden_size=HIDDEN)
    with pytest.raises(ConversionError, match=r"opset 3 is older .* GRU"):
        graphrt.from_onnx(model)


def test_hidden_size_may_be_omitted() -> None:
    """It is then R's last dimension (ONNX Runtime requires it)."""
    x, consts = layer("LSTM")
    model = node_model("LSTM", {"X": x}, consts, 14, 3)
    assert_close(run_graphrt(model, {"X": x}), run_ort(make("LSTM", x, consts), {"X": x}),
                 1e-5)


# --------------------------------------------------------------------------------------------
# the standard ops themselves


def _types(op: str, **overrides: TensorType) -> list[TensorType]:
    g = GATES[op.upper()]
    types = {"X": TensorType((SEQ, BATCH, INPUT), "float32"),
             "W": TensorType((1, g * HIDDEN, INPUT), "float32"),
             "R": TensorType((1, g * HIDDEN, HIDDEN), "float32"),
             "B": TensorType((1, 2 * g * HIDDEN), "float32"),
             "initial_h": TensorType((1, BATCH, HIDDEN), "float32")}
    if op == "lstm":
        types["initial_c"] = types["initial_h"]
    types.update(overrides)
    return list(types.values())


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
def test_the_ops_infer_their_outputs(op: str) -> None:
    definition = get_op(op)
    attrs = definition.attrs(hidden_size=HIDDEN, layout=0)
    types = definition.infer(_types(op), attrs, [None] * 6)
    assert types[0] == TensorType((SEQ, 1, BATCH, HIDDEN), "float32")
    assert len(types) == (3 if op == "lstm" else 2)
    assert all(t == TensorType((1, BATCH, HIDDEN), "float32") for t in types[1:])


def test_the_ops_refuse_what_does_not_fit() -> None:
    lstm = get_op("lstm")
    attrs = lstm.attrs(hidden_size=HIDDEN)
    with pytest.raises(OpError, match=r"lstm: R must have shape \[1, 24, 6\], given \[1, 24, 5\]"):
        lstm.infer(_types("lstm", R=TensorType((1, 24, 5), "float32")), attrs, [None] * 6)
    with pytest.raises(OpError, match=r"expected 6 inputs \(X, W, R, B, initial_h, initial_c\)"):
        lstm.infer(_types("lstm")[:5], attrs, [None] * 5)
    with pytest.raises(OpError, match="must be float16, float32 or float64, given int32"):
        lstm.infer(_types("lstm", X=TensorType((SEQ, BATCH, INPUT), "int32")), attrs,
                   [None] * 6)
    rnn = get_op("rnn")
    with pytest.raises(OpError, match="takes 2 activations, given 1"):
        rnn.infer(_types("rnn"), rnn.attrs(hidden_size=HIDDEN, direction="bidirectional",
                                           activations=["relu"]), [None] * 5)
    with pytest.raises(OpError, match="sequence_lens must be int32 or int64"):
        rnn.infer([*_types("rnn"), TensorType((BATCH,), "float32")],
                  rnn.attrs(hidden_size=HIDDEN, sequence_lens=True), [None] * 6)
    with pytest.raises(ValueError, match="linear_before_reset"):
        rnn.attrs(hidden_size=HIDDEN, linear_before_reset=True)
