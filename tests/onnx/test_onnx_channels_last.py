"""Channels-last tensors between cuda's convolutions (graphrt.onnx.channels_last): which
values of a model converted for cuda become NHWC, where the layout transforms go, what stays
NCHW (a lone convolution, a weight computed at run time, dynamic shapes, other devices, the
switch off), and that the NHWC graph computes what the NCHW one does. Converted for cuda, the
graphs run here on ``sim``, whose reference reads NHWC through NCHW copies."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.onnx.builder import Builder, TensorType
from graphrt.onnx.channels_last import channels_last_layouts
from graphrt.onnx.convert import convert_model

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "onnx"))
import models  # type: ignore[import-not-found]  # noqa: E402


def _steps(bundle: graphrt.Bundle) -> list[tuple[str, dict[str, Any]]]:
    """(op, attrs) of every step the graph's nodes run, in order."""
    functions = bundle.lib.spec().functions
    return [(step.op, step.attrs) for node in bundle.graph.nodes
            if node.func_name in functions for step in functions[node.func_name].body]


def _same_results(bundle: graphrt.Bundle, model: Any, dtype: str) -> None:
    """``bundle`` (converted for cuda) on sim computes what the model converted for the cpu
    computes there."""
    feeds = models.sample_inputs(model)
    want = graphrt.from_onnx(model).create(graphrt.cpu(0))(**feeds)
    got = bundle.create(graphrt.sim(0))(**feeds)
    tolerance = 2e-2 if dtype == "float16" else 1e-4
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                                   rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_resnet_for_cuda_is_one_nhwc_chain_from_its_image_to_its_global_pool(
        dtype: str) -> None:
    model = models.resnet18(batch=2, image=32, classes=10, width=8, dtype=dtype)
    bundle = graphrt.from_onnx(model, devices=["cuda"])
    steps = _steps(bundle)
    ops = Counter(op for op, _ in steps)
    # one transform of the image; every convolution NHWC with an OHWI weight; the stem's
    # max pool and the global pool (a mean over H and W in float16) read NHWC
    assert ops["layout_transform"] == 1 and ops["conv2d"] == 20 and "conv" not in ops
    assert steps[0] == ("layout_transform", {"src_layout": "NCHW", "dst_layout": "NHWC"})
    assert all((attrs["data_layout"], attrs["out_layout"], attrs["kernel_layout"])
               == ("NHWC", "NHWC", "OHWI") for op, attrs in steps if op == "conv2d")
    pools = [(op, attrs.get("layout")) for op, attrs in steps if "pool" in op]
    assert pools == [("max_pool2d", "NHWC"), ("global_avg_pool2d", "NHWC")]
    assert (2, 16, 16, 8) in [entry.shape for entry in bundle.graph.entries]
    _same_results(bundle, model, dtype)


def test_mobilenet_v2s_depthwise_and_clipped_convolutions_go_nhwc_too() -> None:
    model = models.mobilenet_v2(batch=1, image=32, classes=10)
    bundle = graphrt.from_onnx(model, devices=["cuda"])
    steps = _steps(bundle)
    convs = [attrs for op, attrs in steps if op == "conv2d"]
    assert len(convs) == 52 and all(attrs["data_layout"] == "NHWC" for attrs in convs)
    assert any(attrs.get("groups", 1) > 1 for attrs in convs)  # the depthwise ones
    assert Counter(op for op, _ in steps)["layout_transform"] == 1
    _same_results(bundle, model, "float32")


def test_the_switch_other_devices_and_dynamic_shapes_keep_nchw() -> None:
    model = models.resnet18(batch=1, image=32, classes=10, width=8)
    for bundle in (graphrt.from_onnx(model, devices=["cuda"], channels_last=False),
                   graphrt.from_onnx(model, devices=["cuda"], fuse=False),
                   graphrt.from_onnx(model, devices=["sim"]),
                   graphrt.from_onnx(models.resnet18(image=32, classes=10, width=8,
                                                     symbolic=True),
                                     devices=["cuda"], dim_bounds={"batch": 2})):
        steps = _steps(bundle)
        assert not any(op == "layout_transform" for op, _ in steps)
        assert not any(attrs.get("data_layout") == "NHWC" or attrs.get("layout") == "NHWC"
                       for _, attrs in steps)


def _model(nodes: list[Any], inits: list[Any], inputs: dict[str, list[int]],
           outputs: dict[str, list[int]]) -> Any:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v)
                     for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _weight(name: str, shape: tuple[int, ...], seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def test_a_lone_convolution_is_not_worth_two_transforms() -> None:
    """x → conv → softmax over the channels: NHWC would cost a transform in and one out for
    one convolution."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Softmax", ["c"], ["y"], axis=1)],
                   [_weight("w", (8, 4, 3, 3))], {"x": [1, 4, 6, 6]}, {"y": [1, 8, 6, 6]})
    steps = _steps(graphrt.from_onnx(model, devices=["cuda"]))
    assert [op for op, _ in steps if op in ("conv2d", "layout_transform")] == ["conv2d"]
    assert steps[0][1].get("data_layout", "NCHW") == "NCHW"


def test_a_value_also_read_as_nchw_gets_one_transform_back_and_keeps_its_name() -> None:
    """c feeds a convolution (NHWC) and is a graph output and a softmax's input (NCHW): one
    transform back serves both, and the graph output keeps its name and NCHW shape."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "w2"], ["e"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["r"], ["s"], axis=1),
             helper.make_node("Add", ["e", "s"], ["y"])]
    model = _model(nodes, [_weight("w0", (8, 4, 3, 3)), _weight("w1", (8, 8, 3, 3), 1),
                           _weight("w2", (8, 8, 3, 3), 2)],
                   {"x": [2, 4, 6, 6]}, {"y": [2, 8, 6, 6], "r": [2, 8, 6, 6]})
    bundle = graphrt.from_onnx(model, devices=["cuda"])
    transforms = [attrs["dst_layout"] for op, attrs in _steps(bundle)
                  if op == "layout_transform"]
    assert sorted(transforms) == ["NCHW", "NCHW", "NHWC"]  # x in; r and e out
    assert [(spec.name, spec.shape) for spec in bundle.outputs] == [("y", [2, 8, 6, 6]),
                                                                   ("r", [2, 8, 6, 6])]
    _same_results(bundle, model, "float32")


def test_a_weight_computed_at_run_time_keeps_its_convolution_nchw() -> None:
    b = Builder()
    x = b.input("x", TensorType((1, 4, 6, 6), "float32"))
    w = b.input("w", TensorType((4, 4, 3, 3), "float32"))
    (y,) = b.op("conv2d", [x, w], {"padding": [1, 1, 1, 1]})
    (z,) = b.op("conv2d", [y, w], {"padding": [1, 1, 1, 1]})
    for step in b.steps:
        step.device = "cuda"
    channels_last_layouts(b, [z])
    assert [step.op for step in b.steps] == ["conv2d", "conv2d"]
    assert b.shape(y) == (1, 4, 6, 6)


def test_the_placement_report_says_why_a_transform_is_there() -> None:
    model = models.resnet18(batch=1, image=32, classes=10, width=8)
    converted = convert_model(model, devices=["cuda", "cpu"])
    reasons = [entry["reason"] for entry in converted.placement
               if "layout_transform" in entry["func_name"]]
    assert reasons and all("NHWC" in reason for reason in reasons)


def test_graphrt_convert_lays_cuda_out_nhwc_unless_told_not_to(tmp_path: Path) -> None:
    from graphrt.cli import main

    source = tmp_path / "resnet.onnx"
    onnx.save(models.resnet18(batch=1, image=32, classes=10, width=8), source)
    for flags, transforms in (([], 1), (["--no-channels-last"], 0)):
        target = tmp_path / f"r{transforms}.grb"
        assert main(["convert", str(source), "-o", str(target), "--devices", "cuda",
                     *flags]) == 0
        steps = _steps(graphrt.load_bundle(target))
        assert Counter(op for op, _ in steps)["layout_transform"] == transforms


def test_two_convolutions_of_one_input_share_its_transform_and_their_weight() -> None:
    """x → two convolutions by w → add → y: one transform in and one out for two
    convolutions (worth it), and the weight they share transposed once."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w"], ["b"], pads=[1, 1, 1, 1], dilations=[1, 1],
                              strides=[1, 1]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = _model(nodes, [_weight("w", (8, 4, 3, 3))], {"x": [1, 4, 6, 6]},
                   {"y": [1, 8, 6, 6]})
    bundle = graphrt.from_onnx(model, devices=["cuda"])
    steps = _steps(bundle)
    assert Counter(op for op, _ in steps)["layout_transform"] == 2
    assert all(attrs["data_layout"] == "NHWC" for op, attrs in steps if op == "conv2d")
    assert [value.shape for value in bundle.params.values()] == [(8, 3, 3, 4)]
    _same_results(bundle, model, "float32")
