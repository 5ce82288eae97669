"""The ONNX frontend's fusion (TVM's rule) and batch-norm folding: which groups become nodes,
how they are named, shared functions, extra outputs, and folded results equal to unfolded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pytest
from ort_compat import for_ort

import graphrt
from graphrt.bundle import bundle_from_parts
from graphrt.bundle.save import prepare_bundle
from graphrt.onnx import convert_model
from graphrt.onnx.builder import Builder, TensorType
from graphrt.onnx.emit import Emitted, emit
from graphrt.onnx.fusion import MAX_GROUP, Pattern, fold_batch_norms, fuse_steps, op_pattern
from graphrt.onnx.placement import place_steps
from graphrt.onnx.registry import CONVERTERS

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(7)

needs_nn = pytest.mark.skipif(
    not {"Conv", "BatchNormalization"} <= set(CONVERTERS),
    reason="the Conv and BatchNormalization converters are not registered")


def f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype("float32")


def lower(b: Builder, outputs: Sequence[str], *, fuse: bool = True) -> Emitted:
    """The passes of ``convert_model`` on a hand-built builder (everything on cpu)."""
    if fuse:
        fold_batch_norms(b, outputs)
    place_steps(b, ["cpu"], {}, {})
    groups = fuse_steps(b, outputs) if fuse else [[i] for i in range(len(b.steps))]
    return emit(b, outputs, groups, [f"y{i}" for i in range(len(outputs))], ["cpu"])


def run(emitted: Emitted, **inputs: Array) -> list[Array]:
    parts = prepare_bundle(emitted.graph, orjson.dumps(emitted.lib), emitted.params, {})
    return list(bundle_from_parts(parts).create("cpu")(**inputs))


def ops(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return [node for node in graph["nodes"] if node["op"] == "tvm_op"]


def model(nodes: list[Any], inputs: dict[str, list[int]], outputs: dict[str, list[int]],
          weights: dict[str, Array] | None = None, opset: int = 17) -> Any:
    graph = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [onnx.numpy_helper.from_array(v, k) for k, v in (weights or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort(m: Any, feeds: dict[str, Array]) -> list[Array]:
    ort_mod = pytest.importorskip("onnxruntime")
    session = ort_mod.InferenceSession(for_ort(m).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


# -- patterns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "pattern"), [
    ("relu", Pattern.ELEMWISE), ("add", Pattern.BROADCAST), ("bias_add", Pattern.BROADCAST),
    ("reshape", Pattern.INJECTIVE), ("transpose", Pattern.INJECTIVE),
    ("concatenate", Pattern.INJECTIVE), ("sum", Pattern.REDUCTION),
    ("conv2d", Pattern.OUT_ELEMWISE_FUSABLE), ("dense", Pattern.OUT_ELEMWISE_FUSABLE),
    ("batch_matmul", Pattern.OUT_ELEMWISE_FUSABLE), ("softmax", Pattern.OPAQUE),
    ("layer_norm", Pattern.OPAQUE), ("no_such_op", Pattern.OPAQUE)])
def test_each_standard_op_has_tvms_pattern(op: str, pattern: Pattern) -> None:
    assert op_pattern(op) is pattern


# -- fusion on builders -----------------------------------------------------------------------


def conv_block(b: Builder, x: str, channels: int = 4) -> tuple[str, dict[str, Array]]:
    """conv2d(x, w) + bias, relu: what a Conv+Add+Relu model converts to."""
    w = f32(channels, 3, 3, 3)
    bias = f32(channels)
    (c,) = b.op("conv2d", [x, b.constant(w)], {"padding": [1, 1, 1, 1]})
    (a,) = b.op("bias_add", [c, b.constant(bias)], {"axis": 1})
    (r,) = b.op("relu", [a])
    return r, {"w": w, "bias": bias}


def test_conv_bias_relu_is_one_node_named_the_tvm_way() -> None:
    b = Builder()
    x = b.input("x", TensorType((1, 3, 6, 6), "float32"))
    y, _ = conv_block(b, x)
    emitted = lower(b, [y])
    (node,) = ops(emitted.graph)
    assert node["attrs"]["func_name"] == "fused_nn_conv2d_nn_bias_add_nn_relu"
    assert node["name"] == "y0"  # the node making an output is named after it
    xv = f32(1, 3, 6, 6)
    (fused,) = run(emitted, x=xv)
    b2 = Builder()
    y2, _ = conv_block(b2, b2.input("x", TensorType((1, 3, 6, 6), "float32")))
    b2.constants.update(b.constants)  # same weights
    (plain,) = run(lower(b2, [y2], fuse=False), x=xv)
    np.testing.assert_allclose(fused, plain, rtol=1e-6)


def test_an_injective_op_does_not_join_a_convolution_but_starts_a_group() -> None:
    b = Builder()
    x = b.input("x", TensorType((1, 3, 6, 6), "float32"))
    r, _ = conv_block(b, x)
    (t,) = b.op("reshape", [r], {"newshape": [1, -1]})
    (y,) = b.op("sigmoid", [t])
    groups = fuse_steps(b, [y])
    assert [[b.steps[i].op for i in g] for g in groups] == [
        ["conv2d", "bias_add", "relu"], ["reshape", "sigmoid"]]


def test_a_reduction_closes_its_group_and_the_reused_value_becomes_an_extra_output() -> None:
    b = Builder()
    x = b.input("x", TensorType((4, 5), "float32"))
    (e,) = b.op("exp", [x])
    (s,) = b.op("sum", [e], {"axis": [1], "keepdims": True})
    (y,) = b.op("divide", [e, s])  # softmax by hand: e is read after the reduction
    emitted = lower(b, [y])
    first, second = ops(emitted.graph)
    assert first["attrs"]["func_name"] == "fused_exp_sum"
    assert first["attrs"]["num_outputs"] == "2"  # e and s
    assert second["attrs"]["func_name"] == "fused_divide"
    xv = f32(4, 5)
    (got,) = run(emitted, x=xv)
    want = np.exp(xv) / np.exp(xv).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_elementwise_step_takes_in_the_groups_whose_values_it_alone_reads() -> None:
    """exp(x) and exp(y) are groups of their own until the add reads both: it joins the
    latest and takes in the other (TVM's post-dominator rule); a group whose value another
    step also reads stays apart."""
    b = Builder()
    x, z = (b.input(n, TensorType((3,), "float32")) for n in ("x", "z"))
    (ex,) = b.op("exp", [x])
    (ez,) = b.op("exp", [z])
    (y,) = b.op("add", [ex, ez])
    assert [[b.steps[i].op for i in g] for g in fuse_steps(b, [y])] == [["exp", "exp", "add"]]
    xv, zv = f32(3), f32(3)
    (got,) = run(lower(b, [y]), x=xv, z=zv)
    np.testing.assert_allclose(got, np.exp(xv) + np.exp(zv), rtol=1e-6)
    (w,) = b.op("tanh", [ex])  # ex is read twice now: its group stays its own
    assert [[b.steps[i].op for i in g] for g in fuse_steps(b, [y, w])] == [
        ["exp"], ["exp", "add"], ["tanh"]]


def test_groups_are_capped() -> None:
    b = Builder()
    v = b.input("x", TensorType((3,), "float32"))
    for _ in range(MAX_GROUP + 5):
        (v,) = b.op("tanh", [v])
    groups = fuse_steps(b, [v])
    assert [len(g) for g in groups] == [MAX_GROUP, 5]
    xv = f32(3)
    (got,) = run(lower(b, [v]), x=xv)
    want = xv
    for _ in range(MAX_GROUP + 5):
        want = np.tanh(want)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_groups_never_cross_devices() -> None:
    b = Builder()
    x = b.input("x", TensorType((3,), "float32"))
    (a,) = b.op("exp", [x])
    (c,) = b.op("tanh", [a])
    b.steps[0].device, b.steps[1].device = "sim", "cpu"
    assert fuse_steps(b, [c]) == [[0], [1]]


# -- batch-norm folding -----------------------------------------------------------------------


def conv_bn(b: Builder, x: str, stats: dict[str, Array], *, bias: bool) -> str:
    ins = [x, b.constant(stats["w"])] + ([b.constant(stats["b"])] if bias else [])
    (c,) = b.op("conv2d", ins, {"strides": [2, 2], "padding": [1, 0, 1, 0]})
    (n,) = b.op("batch_norm", [c, *(b.constant(stats[k]) for k in
                                    ("gamma", "beta", "mean", "var"))], {"epsilon": 1e-3})
    (y,) = b.op("relu", [n])
    return y


def bn_stats(channels: int = 5) -> dict[str, Array]:
    return {"w": f32(channels, 3, 3, 3), "b": f32(channels), "gamma": f32(channels),
            "beta": f32(channels), "mean": f32(channels),
            "var": RNG.uniform(0.5, 2.0, channels).astype("float32")}


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_the_convolution_and_computes_the_same(bias: bool) -> None:
    stats, xv = bn_stats(), f32(2, 3, 7, 7)
    results = []
    for fuse in (True, False):
        b = Builder()
        y = conv_bn(b, b.input("x", TensorType((2, 3, 7, 7), "float32")), stats, bias=bias)
        emitted = lower(b, [y], fuse=fuse)
        results.append(run(emitted, x=xv)[0])
        if fuse:
            assert [s.op for s in b.steps] == ["conv2d", "relu"]
            assert [n["attrs"]["func_name"] for n in ops(emitted.graph)] == [
                "fused_nn_conv2d_nn_relu"]
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("devices", [["cpu"], ["cuda", "cpu"]])
def test_batch_norms_fold_for_every_device(devices: list[str]) -> None:
    """Folding is no cpu matter: a model converted for cuda folds its batch norms too."""
    stats = bn_stats(4)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                              ["y"])]
    m = model(nodes, {"x": [1, 3, 6, 6]}, {"y": [1, 4, 6, 6]}, stats)
    bundle = graphrt.from_onnx(m, devices=devices)
    functions = bundle.lib.spec().functions
    steps = [step.op for node in bundle.graph.nodes if node.func_name in functions
             for step in functions[node.func_name].body]
    assert steps == ["conv2d"]


def test_per_channel_multiply_and_add_fold_too_in_either_operand_order() -> None:
    stats, xv = bn_stats(4), f32(1, 3, 5, 5)
    results = []
    for fuse in (True, False):
        b = Builder()
        x = b.input("x", TensorType((1, 3, 5, 5), "float32"))
        (c,) = b.op("conv2d", [x, b.constant(stats["w"]), b.constant(stats["b"])])
        (m,) = b.op("multiply", [b.constant(stats["gamma"].reshape(4, 1, 1)), c])
        (a,) = b.op("add", [m, b.constant(stats["beta"].reshape(1, 4, 1, 1))])
        (s,) = b.op("subtract", [a, b.constant(stats["mean"].reshape(4, 1, 1))])
        results.append(run(lower(b, [s], fuse=fuse), x=xv)[0])
        if fuse:
            assert [st.op for st in b.steps] == ["conv2d"]
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


def test_no_folding_when_the_conv_output_is_read_elsewhere_or_not_per_channel() -> None:
    stats = bn_stats(4)
    b = Builder()
    x = b.input("x", TensorType((1, 3, 5, 5), "float32"))
    (c,) = b.op("conv2d", [x, b.constant(stats["w"])])
    (m,) = b.op("multiply", [c, b.constant(f32(1, 1, 3, 3))])  # varies along H and W
    (c2,) = b.op("conv2d", [x, b.constant(stats["w"])])
    (a,) = b.op("add", [c2, b.constant(stats["b"].reshape(4, 1, 1))])
    (r,) = b.op("relu", [c2])  # a second reader of c2
    fold_batch_norms(b, [m, a, r])
    assert [s.op for s in b.steps] == ["conv2d", "multiply", "conv2d", "add", "relu"]


def test_an_output_conv_is_not_folded() -> None:
    stats = bn_stats(4)
    b = Builder()
    x = b.input("x", TensorType((1, 3, 5, 5), "float32"))
    (c,) = b.op("conv2d", [x, b.constant(stats["w"])])
    (a,) = b.op("add", [c, b.constant(stats["b"].reshape(4, 1, 1))])
    fold_batch_norms(b, [c, a])
    assert [s.op for s in b.steps] == ["conv2d", "add"]


# -- ONNX models ------------------------------------------------------------------------------


def chain_model() -> Any:
    return model(
        [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
         helper.make_node("Mul", ["a", "a"], ["m"], name="mul"),
         helper.make_node("Relu", ["m"], ["r"], name="relu"),
         helper.make_node("Sub", ["r", "w"], ["y"], name="sub")],
        {"x": [2, 3]}, {"y": [2, 3]}, {"w": f32(3)})


def test_an_elementwise_chain_is_one_node_and_matches_onnxruntime() -> None:
    m = chain_model()
    bundle = graphrt.from_onnx(m)
    (node,) = ops(convert_model(m).emitted.graph)
    assert node["attrs"]["func_name"] == "fused_add_multiply_nn_relu_subtract"
    xv = f32(2, 3)
    (got,) = bundle.create("cpu")(x=xv)
    np.testing.assert_allclose(got, ort(m, {"x": xv})[0], rtol=1e-6)


def test_fuse_false_keeps_one_node_per_standard_op() -> None:
    m = chain_model()
    graph = convert_model(m, fuse=False).emitted.graph
    assert [n["attrs"]["func_name"] for n in ops(graph)] == [
        "fused_add", "fused_multiply", "fused_nn_relu", "fused_subtract"]
    xv = f32(2, 3)
    (got,) = graphrt.from_onnx(m, fuse=False).create("cpu")(x=xv)
    np.testing.assert_allclose(got, ort(m, {"x": xv})[0], rtol=1e-6)


def test_identical_functions_are_shared_between_nodes() -> None:
    m = model(
        [helper.make_node("Add", ["x1", "w"], ["a1"]), helper.make_node("Relu", ["a1"], ["y1"]),
         helper.make_node("Add", ["x2", "w"], ["a2"]), helper.make_node("Relu", ["a2"], ["y2"])],
        {"x1": [4], "x2": [4]}, {"y1": [4], "y2": [4]}, {"w": f32(4)})
    converted = convert_model(m)
    nodes = ops(converted.emitted.graph)
    assert [n["attrs"]["func_name"] for n in nodes] == ["fused_add_nn_relu"] * 2
    assert [n["name"] for n in nodes] == ["y1", "y2"]
    assert list(converted.emitted.lib["functions"]) == ["fused_add_nn_relu"]
    x1, x2 = f32(4), f32(4)
    got = graphrt.from_onnx(m).create("cpu")(x1=x1, x2=x2)
    for g, want in zip(got, ort(m, {"x1": x1, "x2": x2}), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_a_value_read_outside_its_group_is_an_extra_output() -> None:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["s"], keepdims=1),
         helper.make_node("Mul", ["a", "s"], ["y"])],
        {"x": [2, 3]}, {"y": [2, 3]}, {"w": f32(3)})
    nodes = ops(convert_model(m).emitted.graph)
    assert [n["attrs"]["func_name"] for n in nodes] == ["fused_add_nn_relu_sum",
                                                         "fused_multiply"]
    assert nodes[0]["attrs"]["num_outputs"] == "2"  # a (read by the multiply) and s
    xv = f32(2, 3)
    (got,) = graphrt.from_onnx(m).create("cpu")(x=xv)
    np.testing.assert_allclose(got, ort(m, {"x": xv})[0], rtol=1e-5)


def conv_bn_model(with_bias: bool = True, rank: int = 2) -> Any:
    """Conv (spatial ``rank``) → BatchNormalization → Add of a per-channel constant → Relu."""
    stats = bn_stats(4)
    space = [6, 5, 4][:rank]
    weights = {"w": f32(4, 3, *[3] * rank), "gamma": stats["gamma"], "beta": stats["beta"],
               "mean": stats["mean"], "var": stats["var"], "b2": f32(4, *[1] * rank)}
    conv_in = ["x", "w"]
    if with_bias:
        weights["b"] = stats["b"]
        conv_in.append("b")
    return model(
        [helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1] * (2 * rank)),
         helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                          ["n"], name="bn", epsilon=1e-3),
         helper.make_node("Add", ["n", "b2"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        {"x": [1, 3, *space]}, {"y": [1, 4, *space]}, weights)


@needs_nn
@pytest.mark.parametrize(("with_bias", "rank"), [(True, 2), (False, 2), (True, 1),
                                                 (False, 3)])
def test_conv_batch_norm_add_relu_folds_and_matches_unfolded_and_onnxruntime(
        with_bias: bool, rank: int) -> None:
    m = conv_bn_model(with_bias, rank)
    (node,) = ops(convert_model(m).emitted.graph)
    op = "conv2d" if rank == 2 else "conv"
    assert node["attrs"]["func_name"] == f"fused_nn_{op}_nn_relu"  # BN and Add folded
    unfused = [n["attrs"]["func_name"] for n in ops(convert_model(m, fuse=False).emitted.graph)]
    assert unfused == [f"fused_nn_{op}", "fused_nn_batch_norm", "fused_add", "fused_nn_relu"]
    xv = f32(1, 3, *[6, 5, 4][:rank])
    (folded,) = graphrt.from_onnx(m).create("cpu")(x=xv)
    (plain,) = graphrt.from_onnx(m, fuse=False).create("cpu")(x=xv)
    np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(folded, ort(m, {"x": xv})[0], rtol=1e-4, atol=1e-5)


@needs_nn
def test_conv_bias_relu_from_onnx_is_one_node_and_runs_on_sim() -> None:
    m = model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Add", ["c", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        {"x": [1, 3, 5, 5]}, {"y": [1, 2, 3, 3]}, {"w": f32(2, 3, 3, 3), "b": f32(2, 1, 1)})
    converted = convert_model(m, devices=["sim", "cpu"])
    (node,) = ops(converted.emitted.graph)
    # the add of a per-channel constant became the convolution's bias
    assert node["attrs"]["func_name"] == "fused_nn_conv2d_nn_relu"
    xv = f32(1, 3, 5, 5)
    (got,) = graphrt.from_onnx(m, devices=["sim", "cpu"]).create(graphrt.sim(0),
                                                                  graphrt.cpu(0))(x=xv)
    np.testing.assert_allclose(np.asarray(got).view(np.ndarray), ort(m, {"x": xv})[0],
                               rtol=1e-5, atol=1e-6)
