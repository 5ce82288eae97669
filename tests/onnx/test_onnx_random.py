"""ONNX's random ops (RandomUniform, RandomNormal, their Like forms, Bernoulli, Multinomial):
seeded runs repeat, unseeded runs differ, the draws have the asked distribution, dtype and
shape, a random step is never folded at conversion, and bad attributes are clear errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_harness import typed

import graphrt
from graphrt.errors import ConversionError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from graphrt.onnx.builder import Builder  # noqa: E402

DEVICES = ["cpu", "sim"]


def model(op: str, inputs: dict[str, tuple[np.ndarray, bool]] | None = None, opset: int = 22,
          **attrs: Any) -> Any:
    """A one-node model: each input a graph input, or (``True``) an initializer."""
    inputs = inputs or {}
    node = helper.make_node(op, list(inputs), ["y"], name="my_random", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                       value.shape)
         for name, (value, constant) in inputs.items() if not constant],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(value, name)
         for name, (value, constant) in inputs.items() if constant])
    return typed(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]),
                 TensorProto.FLOAT)


def module(built: Any, device: str = "cpu") -> Any:
    return graphrt.from_onnx(built).create(device)


def draw(built: Any, device: str = "cpu", **feeds: np.ndarray) -> np.ndarray:
    (out,) = module(built, device)(**feeds)
    return np.array(out)


PROBS = np.linspace(0.05, 0.95, 2000).astype(np.float32)
LOGITS = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32)) + 3.0
CASES = {
    "RandomUniform": lambda **a: model("RandomUniform", shape=[40, 50], **a),
    "RandomNormal": lambda **a: model("RandomNormal", shape=[40, 50], **a),
    "RandomUniformLike": lambda **a: model("RandomUniformLike",
                                           {"x": (np.zeros((40, 50), np.float32), False)}, **a),
    "RandomNormalLike": lambda **a: model("RandomNormalLike",
                                          {"x": (np.zeros((40, 50), np.float32), True)}, **a),
    "Bernoulli": lambda **a: model("Bernoulli", {"p": (PROBS, True)}, **a),
    "Multinomial": lambda **a: model("Multinomial", {"x": (LOGITS, True)}, sample_size=500,
                                     **a),
}
FEEDS = {"RandomUniformLike": {"x": np.zeros((40, 50), np.float32)}}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(CASES))
def test_a_seeded_op_gives_the_same_values_on_every_run(op: str, device: str) -> None:
    built = CASES[op](seed=3.0)
    feeds = FEEDS.get(op, {})
    runs = module(built, device)
    first, second = np.array(runs(**feeds)[0]), np.array(runs(**feeds)[0])
    again = draw(built, "cpu", **feeds)  # another conversion, another device
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, again)
    other = draw(CASES[op](seed=4.0), device, **feeds)
    assert (first != other).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(CASES))
def test_an_unseeded_op_draws_fresh_values_on_every_run(op: str, device: str) -> None:
    runs = module(CASES[op](), device)
    feeds = FEEDS.get(op, {})
    first, second = np.array(runs(**feeds)[0]), np.array(runs(**feeds)[0])
    assert first.shape == second.shape and (first != second).any()


def test_an_unseeded_draw_on_a_constant_input_is_a_step_not_a_folded_constant() -> None:
    built = model("RandomUniformLike", {"c": (np.zeros((8, 8), np.float32), True)})
    bundle = graphrt.from_onnx(built)
    assert [node.op for node in bundle.graph.nodes] == ["null", "tvm_op"]  # a param, a step
    runs = bundle.create("cpu")
    first, second = np.array(runs()[0]), np.array(runs()[0])
    assert (first != second).any()
    b = Builder()
    const = b.constant(np.zeros((2, 2), np.float32))
    (out,) = b.op("random_uniform_like", [const], {"seed": 1.0})
    assert not b.is_constant(out) and [step.op for step in b.steps] == ["random_uniform_like"]


def test_two_equal_unseeded_nodes_draw_apart_and_two_equal_seeded_ones_alike() -> None:
    for seed, apart in (({}, True), ({"seed": 5.0}, False)):
        nodes = [helper.make_node("RandomUniform", [], [name], shape=[64], **seed)
                 for name in ("a", "b")]
        graph = helper.make_graph(nodes, "g", [], [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, [64]) for name in "ab"])
        built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        a, b = graphrt.from_onnx(built).create("cpu")()
        assert bool((np.array(a) != np.array(b)).any()) is apart


def test_the_normal_draws_have_the_asked_mean_and_deviation() -> None:
    y = draw(model("RandomNormal", shape=[400, 500], mean=3.0, scale=2.0, seed=11.0))
    assert y.dtype == np.float32 and y.shape == (400, 500)
    assert abs(y.mean() - 3.0) < 0.02 and abs(y.std() - 2.0) < 0.02
    x = np.zeros((1000, 200), np.float64)
    z = draw(model("RandomNormalLike", {"x": (x, False)}, scale=0.5, seed=2.0), x=x)
    assert z.dtype == np.float64 and abs(z.mean()) < 0.01 and abs(z.std() - 0.5) < 0.01


def test_the_uniform_draws_fill_their_bounds_evenly() -> None:
    y = draw(model("RandomUniform", shape=[200_000], low=-2.0, high=5.0, seed=5.0,
                   dtype=TensorProto.DOUBLE))
    assert y.dtype == np.float64 and y.min() >= -2.0 and y.max() < 5.0
    assert abs(y.mean() - 1.5) < 0.03 and abs(y.std() - 7 / np.sqrt(12)) < 0.03
    counts = np.histogram(y, bins=7, range=(-2, 5))[0]
    assert np.all(np.abs(counts / y.size - 1 / 7) < 0.01)


def test_the_bernoulli_rate_follows_the_probabilities() -> None:
    p = np.full((100_000,), 0.3, np.float32)
    y = draw(model("Bernoulli", {"p": (p, False)}, seed=1.0), p=p)
    assert y.dtype == np.float32 and set(np.unique(y)) <= {0.0, 1.0}
    assert abs(y.mean() - 0.3) < 0.01
    edges = np.array([0.0, 1.0, 0.0, 1.0], np.float64)
    assert draw(model("Bernoulli", {"p": (edges, False)}), p=edges).tolist() == [0, 1, 0, 1]


def test_the_multinomial_frequencies_follow_the_unnormalized_log_probabilities() -> None:
    y = draw(model("Multinomial", {"x": (LOGITS, False)}, sample_size=100_000, seed=9.0,
                   dtype=TensorProto.INT64), x=LOGITS)
    assert y.dtype == np.int64 and y.shape == (2, 100_000)
    for row, want in zip(y, ([0.1, 0.2, 0.7], [0.5, 0.25, 0.25]), strict=True):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, want, atol=0.01)
    odd = np.array([[-np.inf, 0.0, -np.inf], [-np.inf, -np.inf, -np.inf]], np.float32)
    z = draw(model("Multinomial", {"x": (odd, False)}, sample_size=300), x=odd)
    assert z.dtype == np.int32 and (z[0] == 1).all() and set(np.unique(z[1])) == {0, 1, 2}


@pytest.mark.parametrize(("code", "dtype"), [(TensorProto.FLOAT16, "float16"),
                                             (TensorProto.FLOAT, "float32"),
                                             (TensorProto.DOUBLE, "float64"),
                                             (TensorProto.BFLOAT16, "bfloat16")])
def test_the_float_ops_make_each_float_dtype(code: int, dtype: str) -> None:
    for op in ("RandomUniform", "RandomNormal"):
        y = draw(model(op, shape=[3, 0, 2] if dtype == "float64" else [3, 4], dtype=code,
                       seed=1.0))
        assert str(y.dtype) == dtype
        assert y.shape == ((3, 0, 2) if dtype == "float64" else (3, 4))
    x = np.zeros((2, 5), np.int32)
    y = draw(model("RandomUniformLike", {"x": (x, False)}, dtype=code), x=x)
    assert str(y.dtype) == dtype and y.shape == (2, 5) and ((y >= 0) & (y <= 1)).all()


def test_the_like_ops_take_the_dtype_of_a_float_input_and_bernoulli_any_output_dtype() -> None:
    x = np.zeros((4,), np.float16)
    assert draw(model("RandomNormalLike", {"x": (x, False)}), x=x).dtype == np.float16
    p = np.full((6,), 0.5, np.float64)
    for code, dtype in ((TensorProto.BOOL, np.bool_), (TensorProto.INT32, np.int32),
                        (TensorProto.UINT8, np.uint8), (TensorProto.FLOAT16, np.float16)):
        y = draw(model("Bernoulli", {"p": (p, False)}, dtype=code), p=p)
        assert y.dtype == dtype and y.shape == (6,) and set(np.unique(y.astype(int))) <= {0, 1}


@pytest.mark.parametrize(("built", "expected"), [
    (lambda: model("RandomNormal", shape=[2], seed=float("nan")), "seed must be a finite"),
    (lambda: model("RandomUniform", shape=[2], high=float("inf")), "high must be a finite number"),
    (lambda: model("RandomNormal", shape=[2, -1]), "negative dimension"),
    (lambda: model("RandomNormal", shape=[2], dtype=TensorProto.INT32),
     "dtype int32 is not supported"),
    (lambda: model("RandomUniformLike", {"x": (np.zeros(2, np.int64), False)}),
     "give dtype"),
    (lambda: model("Multinomial", {"x": (LOGITS, False)}, sample_size=-1),
     "sample_size must be >= 0"),
    (lambda: model("Multinomial", {"x": (LOGITS, False)}, dtype=TensorProto.FLOAT),
     "dtype float32 is not supported"),
    (lambda: model("Multinomial", {"x": (np.zeros(3, np.float32), False)}),
     "log-probabilities [batch, classes]"),
])
def test_a_bad_attribute_is_a_conversion_error_naming_the_node(built: Any, expected: str
                                                              ) -> None:
    with pytest.raises(ConversionError) as caught:
        graphrt.from_onnx(built())
    assert "my_random" in str(caught.value) and expected in str(caught.value)


def test_a_random_step_stays_on_a_host_device_when_cuda_comes_first() -> None:
    """Seeded draws are numpy's on every device, so placement keeps them off cuda (which would
    also record their host copy into a CUDA graph)."""
    from graphrt.onnx.convert import convert_model

    x = np.zeros(4, "float32")
    converted = convert_model(model("RandomNormalLike", {"x": (x, False)}, seed=3.0),
                              devices=["cuda", "cpu"])
    (decision,) = [d for d in converted.placement if "random" in d["func_name"]]
    assert decision["device"] == "cpu"
