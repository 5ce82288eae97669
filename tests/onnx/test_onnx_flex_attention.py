"""ONNX FlexAttention (ai.onnx.preview) against ONNX's reference evaluator: each modifier kind,
grouped heads, head sizes, dtypes and softmax precisions, and the conversion errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_harness import run_graphrt, run_reference

import graphrt
from graphrt.errors import ConversionError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]
RNG = np.random.default_rng(11)
F32 = TensorProto.FLOAT
DIMS = ["B", "H", "L", "S"]


def mod_graph(nodes: list[Any], inputs: tuple[str, ...] = ("s",), outputs: tuple[str, ...] = ("t",),
              consts: dict[str, Any] | None = None, elem: int = F32) -> Any:
    """A modifier subgraph ``inputs -> outputs`` of ``nodes`` with scalar initializers."""
    return helper.make_graph(
        nodes, "mod", [helper.make_tensor_value_info(i, elem, DIMS) for i in inputs],
        [helper.make_tensor_value_info(o, elem, DIMS) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()])


def add_bias(value: float = 0.5, elem: int = F32) -> Any:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    return mod_graph([helper.make_node("Add", ["s", "b"], ["t"])], consts={"b": dtype.type(value)},
                     elem=elem)


def causal(elem: int = F32) -> Any:
    """``where(q_idx >= k_idx, s, -inf)`` with the indices built from ``s``'s shape."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    return mod_graph([
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["L"], axis=0),
        helper.make_node("Gather", ["shape", "three"], ["S"], axis=0),
        helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
        helper.make_node("Reshape", ["qr", "qshape"], ["qi"]),
        helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
        helper.make_node("Reshape", ["kr", "kshape"], ["ki"]),
        helper.make_node("GreaterOrEqual", ["qi", "ki"], ["keep"]),
        helper.make_node("Where", ["keep", "s", "ninf"], ["t"])],
        consts={"zero": np.int64(0), "one": np.int64(1), "two": np.int64(2),
                "three": np.int64(3), "qshape": np.array([1, 1, -1, 1], np.int64),
                "kshape": np.array([1, 1, 1, -1], np.int64), "ninf": dtype.type(-np.inf)},
        elem=elem)


def soft_cap(cap: float = 2.0) -> Any:
    return mod_graph([helper.make_node("Div", ["s", "cap"], ["x"]),
                      helper.make_node("Tanh", ["x"], ["y"]),
                      helper.make_node("Mul", ["y", "cap"], ["t"])],
                     consts={"cap": np.float32(cap)})


def scale_probs(value: float = 0.5) -> Any:
    return mod_graph([helper.make_node("Mul", ["s", "c"], ["t"])], consts={"c": np.float32(value)})


def flex_model(q: np.ndarray, k: np.ndarray, v: np.ndarray, **attrs: Any) -> Any:
    elem = helper.np_dtype_to_tensor_dtype(q.dtype)
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], name="my_flex",
                            domain="ai.onnx.preview", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, elem, x.shape)
                      for n, x in (("q", q), ("k", k), ("v", v))],
        [helper.make_tensor_value_info("y", elem, ["b", "h", "l", "e"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                   helper.make_opsetid("ai.onnx.preview", 1)])


def qkv(hq: int = 4, hkv: int = 4, lq: int = 5, s: int = 6, e: int = 8, ev: int = 8,
        dtype: str = "float32") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (RNG.standard_normal((2, hq, lq, e)).astype(dtype),
            RNG.standard_normal((2, hkv, s, e)).astype(dtype),
            RNG.standard_normal((2, hkv, s, ev)).astype(dtype))


def check(q: np.ndarray, k: np.ndarray, v: np.ndarray, rtol: float = 1e-5,
          device: graphrt.Device | None = None, **attrs: Any) -> np.ndarray:
    model = flex_model(q, k, v, **attrs)
    data = {"q": q, "k": k, "v": v}
    (got,), (want,) = run_graphrt(model, data, device), run_reference(model, data)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=rtol)
    return got


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_plain_matches_reference(dtype: str) -> None:
    check(*qkv(dtype=dtype), rtol=2e-3 if dtype == "float16" else 1e-5)


@pytest.mark.parametrize("mods", [
    pytest.param({"score_mod": add_bias()}, id="bias"),
    pytest.param({"score_mod": causal()}, id="causal"),
    pytest.param({"score_mod": soft_cap()}, id="soft_cap"),
    pytest.param({"prob_mod": scale_probs()}, id="prob_mod"),
    pytest.param({"score_mod": causal(), "prob_mod": scale_probs()}, id="both"),
])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
def test_mods_match_reference(mods: dict[str, Any], heads: tuple[int, int]) -> None:
    check(*qkv(*heads, ev=3), scale=0.3, **mods)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_on_device(device: graphrt.Device) -> None:
    check(*qkv(4, 2), device=device, score_mod=causal())


def test_float16_computes_the_mods_in_float32() -> None:
    y = check(*qkv(4, 2, dtype="float16"), rtol=2e-3, score_mod=causal())
    assert y.dtype == np.float16


def test_bfloat16_inputs_match_reference() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in qkv(4, 2))
    y = check(q, k, v, rtol=2e-2, score_mod=causal())
    assert y.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("precision, elem, rtol", [
    (TensorProto.DOUBLE, TensorProto.DOUBLE, 1e-5),
    (TensorProto.FLOAT16, TensorProto.FLOAT16, 5e-3),
    (TensorProto.BFLOAT16, TensorProto.BFLOAT16, 3e-2)])
def test_softmax_precision_sets_the_mods_dtype(precision: int, elem: int, rtol: float) -> None:
    check(*qkv(4, 2), rtol=rtol, softmax_precision=precision, score_mod=causal(elem))


def test_causal_mask_zeroes_the_future() -> None:
    q, k, v = qkv(2, 2, lq=4, s=4)
    model = flex_model(q, k, v, score_mod=causal())
    (y,) = run_graphrt(model, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(y[:, :, 0], v[:, :, 0], rtol=1e-6)  # row 0 sees key 0 only


def _fails(match: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, **attrs: Any) -> None:
    with pytest.raises(ConversionError, match=match):
        graphrt.from_onnx(flex_model(q, k, v, **attrs))


def test_mod_with_two_inputs_names_the_node() -> None:
    bad = mod_graph([helper.make_node("Add", ["s", "u"], ["t"])], inputs=("s", "u"))
    _fails(r"my_flex.*score_mod must take 1 input and give 1 output.*takes 2", *qkv(),
           score_mod=bad)


def test_mod_with_two_outputs_names_the_node() -> None:
    bad = mod_graph([helper.make_node("Identity", ["s"], ["t"]),
                     helper.make_node("Identity", ["s"], ["u"])], outputs=("t", "u"))
    _fails(r"my_flex.*prob_mod must take 1 input.*gives 2", *qkv(), prob_mod=bad)


def test_mod_changing_the_shape_names_the_node() -> None:
    bad = mod_graph([helper.make_node("ReduceMax", ["s"], ["t"], keepdims=1)])
    _fails(r"my_flex.*score_mod must keep the shape \[2, 4, 5, 6\]", *qkv(), score_mod=bad)


def test_mod_with_an_unconvertible_node_names_it() -> None:
    bad = mod_graph([helper.make_node("NoSuchOp", ["s"], ["t"], domain="my.ops")])
    model = flex_model(*qkv(), score_mod=bad)
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(ConversionError, match=r"my_flex.*my\.ops\.NoSuchOp.*no converter"):
        graphrt.from_onnx(model)


def test_mod_that_is_not_a_graph_names_the_node() -> None:
    _fails(r"my_flex.*score_mod", *qkv(), score_mod=1.5)


@pytest.mark.parametrize("shapes, match", [
    (((2, 4, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8)), r"multiple of K's heads"),
    (((2, 4, 5, 8), (2, 4, 6, 7), (2, 4, 6, 8)), r"one head size"),
    (((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 7, 8)), r"same heads and sequence length"),
    (((2, 4, 5, 8), (1, 4, 6, 8), (1, 4, 6, 8)), r"one batch size"),
    (((4, 5, 8), (4, 6, 8), (4, 6, 8)), r"must be 4-D"),
])
def test_bad_shapes_name_the_node(shapes: tuple[tuple[int, ...], ...], match: str) -> None:
    q, k, v = (np.zeros(s, np.float32) for s in shapes)
    _fails(rf"my_flex.*{match}", q, k, v)


def test_bad_softmax_precision_names_the_node() -> None:
    _fails(r"my_flex.*softmax_precision 7", *qkv(), softmax_precision=TensorProto.INT64)
