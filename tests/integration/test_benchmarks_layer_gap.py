"""``benchmarks/layer_gap.py``'s pieces on a tiny model: ONNX Runtime's convolutions found in
its own optimized graph and each run alone, their layers matched to graphrt's with channels
rounded up to 16, and the kinds. No speed is asserted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import layer_gap  # noqa: E402


def _model() -> Any:
    """x (1, 3, 16, 16) → 3x3 conv to 24, relu → 1x1 conv to 48 → y."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w0", (24, 3, 3, 3)), ("w1", (48, 24, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48, 16, 16])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_ort_convolutions_run_alone_and_match_graphrt_layers() -> None:
    feeds = {"x": np.ones((1, 3, 16, 16), np.float32)}
    nodes, empty = layer_gap.ort_conv_nodes(_model(), feeds)
    empty()
    assert len(nodes) == 2
    layers = {layer_gap.blocks16(layer) for _, layer, _ in nodes}
    # graphrt's layers as its profile gives them (the second reads 24 channels, blocked)
    ours = {layer_gap.blocks16(((24, 3, 3, 3), (1, 3, 16, 16), (1, 24, 16, 16))),
            layer_gap.blocks16(((48, 24, 1, 1), layer_gap.nchw((1, 3, 16, 16, 8)),
                                (1, 48, 16, 16)))}
    assert layers == ours
    for _, _, make in nodes:
        run = make()  # a session of the node alone, opened now
        assert layer_gap.timed(run) > 0
        assert np.isfinite(run()[0]).all()


def test_channels_round_up_to_blocks_of_16_and_kinds_survive() -> None:
    assert layer_gap.blocks16(((24, 144, 1, 1), (1, 144, 56, 56), (1, 24, 56, 56))) == (
        (32, 144, 1, 1), (1, 144, 56, 56), (1, 32, 56, 56))
    depthwise = ((96, 1, 3, 3), (1, 96, 112, 112), (1, 96, 56, 56))
    assert layer_gap.blocks16(depthwise) == depthwise
    assert layer_gap.conv_kind(layer_gap.blocks16(depthwise)) == "depthwise"
    stem = ((32, 3, 3, 3), (1, 3, 224, 224), (1, 32, 112, 112))
    assert layer_gap.blocks16(stem) == stem and layer_gap.conv_kind(stem) == "kxk"
