"""The ONNX frontend's placement: preferred device types, overrides by op type and node name,
``__copy`` nodes where values cross devices, ``device_index``, params on their readers' device,
per-device storage ids, and the report of every decision."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.devices.base import KIND_CODES
from graphrt.onnx import convert_model, placement
from graphrt.schema import COPY, load_graph
from graphrt.storage import check_storage_ids

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(3)
W = RNG.standard_normal(3).astype("float32")


def f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype("float32")


def host(array: Any) -> Array:
    """An output as a plain numpy array (outputs on sim are sim-tagged arrays)."""
    return np.asarray(array).view(np.ndarray)


def tiny() -> Any:
    """y = transpose(relu(x + w) * w) - x2; z = relu(x + w) (a second output)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["a"], name="add0"),
         helper.make_node("Relu", ["a"], ["r"], name="relu0"),
         helper.make_node("Mul", ["r", "w"], ["m"], name="mul0"),
         helper.make_node("Transpose", ["m"], ["t"], name="tr0", perm=[1, 0]),
         helper.make_node("Sub", ["t", "x2"], ["y"], name="sub0"),
         helper.make_node("Relu", ["a"], ["z"], name="relu1")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def expected(x: Array, x2: Array) -> tuple[Array, Array]:
    r = np.maximum(x + W, 0)
    return (r * W).T - x2, r


def check_runs(bundle: graphrt.Bundle) -> None:
    x, x2 = f32(2, 3), f32(3, 2)
    mod = bundle.create(graphrt.sim(0), graphrt.cpu(0), strict_placement=True)
    y, z = (host(v) for v in mod(x=x, x2=x2))
    want_y, want_z = expected(x, x2)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)


def op_nodes(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return [node for node in graph["nodes"] if node["op"] == "tvm_op"]


def device_codes(graph: dict[str, Any]) -> list[int]:
    return list(graph["attrs"]["device_index"][1])


def node_device(graph: dict[str, Any], nid: int) -> int:
    row = [0]
    for node in graph["nodes"]:
        row.append(row[-1] + int(node.get("attrs", {}).get("num_outputs", 1)))
    return device_codes(graph)[row[nid]]


def test_an_op_type_override_sends_its_nodes_to_cpu_with_copies_both_ways() -> None:
    converted = convert_model(tiny(), devices=["sim", "cpu"],
                                           placement={"Transpose": "cpu"})
    graph = converted.emitted.graph
    nodes = op_nodes(graph)
    assert [n["attrs"]["func_name"] for n in nodes] == [
        "fused_add_nn_relu_multiply_nn_relu", COPY, "fused_transpose", COPY, "fused_subtract"]
    assert set(device_codes(graph)) == {KIND_CODES["sim"], KIND_CODES["cpu"]}
    ids = {n["name"]: i for i, n in enumerate(graph["nodes"])}
    assert node_device(graph, ids["fused_transpose"]) == KIND_CODES["cpu"]
    assert node_device(graph, ids["y"]) == KIND_CODES["sim"]
    assert node_device(graph, ids["x"]) == KIND_CODES["sim"]  # its first reader's device
    assert node_device(graph, ids["w"]) == KIND_CODES["sim"]  # a param on its reader's device
    # one decision per op node, copies included
    assert [d["node"] for d in converted.placement] == [n["name"] for n in nodes]
    reasons = {d["node"]: (d["device"], d["reason"]) for d in converted.placement}
    assert reasons["fused_transpose"] == ("cpu", "override by op type Transpose")
    assert reasons["y"] == ("sim", "first of devices that implements it")
    copies = [d for d in converted.placement if d["func_name"] == COPY]
    assert [(d["device"], d["reason"]) for d in copies] == [
        ("cpu", "copy from sim to cpu"), ("sim", "copy from cpu to sim")]
    bundle = graphrt.from_onnx(tiny(), devices=["sim", "cpu"], placement={"Transpose": "cpu"})
    assert bundle.metadata["placement"] == converted.placement
    check_storage_ids(load_graph(graph))
    check_runs(bundle)


def test_a_node_name_override_wins_over_its_op_type() -> None:
    converted = convert_model(
        tiny(), devices=["sim", "cpu"], placement={"Relu": "cpu", "relu1": "sim"})
    placed = [(d["func_name"], d["device"], d["reason"]) for d in converted.placement]
    assert placed == [
        ("fused_add_nn_relu", "sim",
         "first of devices that implements it; override by node name 'relu1'"),
        (COPY, "cpu", "copy from sim to cpu"),
        ("fused_nn_relu", "cpu", "override by op type Relu"),
        (COPY, "sim", "copy from cpu to sim"),
        ("fused_multiply_transpose_subtract", "sim", "first of devices that implements it")]
    check_runs(graphrt.from_onnx(tiny(), devices=["sim", "cpu"],
                                 placement={"Relu": "cpu", "relu1": "sim"}))


def test_a_param_read_on_two_devices_is_a_param_on_each() -> None:
    graph = convert_model(tiny(), devices=["sim", "cpu"],
                                       placement={"mul0": "cpu"}).emitted.graph
    params = [i for i, n in enumerate(graph["nodes"]) if n["op"] == "null"
              and n["name"].startswith("w")]
    assert sorted(node_device(graph, i) for i in params) == [KIND_CODES["cpu"],
                                                             KIND_CODES["sim"]]
    check_runs(graphrt.from_onnx(tiny(), devices=["sim", "cpu"], placement={"mul0": "cpu"}))


def test_devices_without_overrides_put_everything_on_the_first_implementing_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    converted = convert_model(tiny(), devices=["sim", "cpu"])
    assert {d["device"] for d in converted.placement} == {"sim"}
    assert COPY not in {d["func_name"] for d in converted.placement}
    assert set(device_codes(converted.emitted.graph)) == {KIND_CODES["sim"]}
    # an op that only cpu implements goes to cpu, the next listed device
    real = placement.supports
    monkeypatch.setattr(placement, "supports",  # the kernels of sim no longer run transpose
                        lambda kind, op: real(kind, op) and (kind, op.name) != ("sim",
                                                                                 "transpose"))
    converted = convert_model(tiny(), devices=["sim", "cpu"])
    placed = {d["func_name"]: d for d in converted.placement}
    assert placed["fused_transpose"]["device"] == "cpu"
    assert placed["fused_transpose"]["reason"] == "first of devices that implements it"
    check_runs(graphrt.from_onnx(tiny(), devices=["sim", "cpu"]))
    with pytest.raises(graphrt.ConversionError, match="no sim implementation"):
        convert_model(tiny(), devices=["sim", "cpu"],
                                   placement={"Transpose": "sim"})
    with pytest.raises(graphrt.ConversionError, match="none of the devices"):
        convert_model(tiny(), devices=["sim"])


def test_one_device_writes_no_device_index_and_no_placement_metadata() -> None:
    bundle = graphrt.from_onnx(tiny(), devices=["sim"])
    assert "placement" not in bundle.metadata
    assert all(entry.device_type is None for entry in bundle.graph.entries)
    converted = convert_model(tiny())
    assert "device_index" not in converted.emitted.graph["attrs"]
    assert {d["device"] for d in converted.placement} == {"cpu"}


def test_storage_ids_are_never_shared_across_devices() -> None:
    graph = convert_model(tiny(), devices=["sim", "cpu"],
                                       placement={"Transpose": "cpu"}).emitted.graph
    device_of_sid: dict[int, int] = {}
    for sid, code in zip(graph["attrs"]["storage_id"][1], device_codes(graph), strict=True):
        assert device_of_sid.setdefault(sid, code) == code


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"devices": ["sim", "cpu"], "placement": {"Softmx": "cpu"}},
     "neither a node name nor an op type"),
    ({"devices": ["sim"], "placement": {"Relu": "cpu"}}, "not among the devices"),
    ({"devices": ["tpu"]}, "unknown device type 'tpu'"),
    ({"devices": ["cpu", "cpu"]}, "listed twice"),
    ({"devices": []}, "devices is empty"),
])
def test_bad_placement_options_are_conversion_errors(kwargs: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(graphrt.ConversionError, match=message):
        convert_model(tiny(), **kwargs)
