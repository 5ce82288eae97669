"""Convolutions through cuDNN's frontend on a real GPU (skipped cleanly without one, or
without ``nvidia-cudnn-frontend``): each geometry and epilogue against the host reference, and
a model whose convolutions CUDA graphs now record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_harness import channels_last as nhwc

import graphrt
from graphrt.kernels import Epilogue, chain
from graphrt.kernels.cuda.cudnn_conv import cudnn_module
from graphrt.ops import TensorType, get_op
from graphrt.ops.convolution import run_conv

pytestmark = pytest.mark.cuda
cupy = pytest.importorskip("cupy")

GEOMETRIES = [  # (x shape, w shape, conv2d attrs)
    ((2, 8, 12, 12), (16, 8, 3, 3), {"padding": (1, 1, 1, 1)}),
    ((1, 3, 17, 15), (8, 3, 7, 7), {"strides": (2, 2), "padding": (3, 3, 3, 3)}),
    ((2, 16, 9, 9), (16, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 16}),
    ((1, 8, 10, 10), (8, 4, 3, 3), {"padding": (2, 0, 1, 2), "groups": 2,
                                    "dilation": (2, 1)}),
    ((1, 4, 9, 9), (6, 4, 1, 1), {"strides": (2, 2)}),
    ((2, 8, 10, 10), (16, 8, 1, 1), {"strides": (2, 2)}),  # ResNet's downsampling: the
]                                                          # last row is never read


@pytest.fixture(autouse=True)
def _cudnn() -> None:
    if cudnn_module() is None:
        pytest.skip("nvidia-cudnn-frontend is not installed")


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
@pytest.mark.parametrize(("bias", "residual", "relu"),
                         [(False, False, False), (True, False, True), (True, True, True)])
def test_cudnn_convolution_matches_the_host_reference(geometry: int, dtype: str, bias: bool,
                                                      residual: bool, relu: bool,
                                                      channels_last: bool) -> None:
    """NCHW, or NHWC data and output with an OHWI weight (declared to cuDNN by their
    strides): the host's NCHW convolution, transposed. cuDNN fuses no residual add over NCHW;
    over NHWC in float16 it does (verified on an H200 for ResNet-50's 53 convolutions)."""
    xs, ws, raw = GEOMETRIES[geometry]
    op = get_op("conv2d")
    layouts = ({"data_layout": "NHWC", "out_layout": "NHWC", "kernel_layout": "OHWI"}
               if channels_last else {})
    attrs = op.attrs.model_validate({**raw, **layouts})
    rng = np.random.default_rng(geometry)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    host = ([nhwc(x), nhwc(w)] if channels_last else [x, w]) + (
        [rng.standard_normal(ws[:1]).astype(dtype)] if bias else [])
    types = [TensorType(a.shape, dtype) for a in host]
    (out,) = op.infer(types, attrs, [None] * len(types))
    prepared = chain("cuda", cupy).prepare(op, attrs, types, [out], Epilogue(residual, relu))
    assert prepared is not None or (residual and not (channels_last and dtype == "float16"))
    if prepared is None:  # the steps run one by one
        return
    assert prepared.provider == "cudnn" and prepared.capturable
    extra = rng.standard_normal(out.shape).astype(dtype)
    nchw = np.empty((xs[0], ws[0], *(out.shape[1:3] if channels_last else out.shape[2:])),
                    np.float32)
    run_conv(np, [x.astype(np.float32), w.astype(np.float32),
                  *[a.astype(np.float32) for a in host[2:]]], [nchw], attrs.groups,
             attrs.strides, attrs.dilation, attrs.padding[:2])
    want = nhwc(nchw) if channels_last else nchw
    if residual:
        want += extra.astype(np.float32)
    if relu:
        want = np.maximum(want, 0)
    got = cupy.full(out.shape, 7, dtype)
    spaces = [cupy.empty(t.shape, t.dtype) for t in prepared.workspace]
    prepared.call(*map(cupy.asarray, host), *([cupy.asarray(extra)] if residual else []), got,
                  *spaces)
    tolerance = 1e-4 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(got.get().astype(np.float32), want, rtol=tolerance,
                               atol=tolerance * 4)


def _conv_stack(channels: int = 8) -> Any:
    """Conv → Relu → Conv → Add (residual) → Relu: the ResNet block's convolutions."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(
        (rng.standard_normal((channels, channels, 3, 3)) * 0.2).astype(np.float32), f"w{i}")
        for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    shape = [2, channels, 16, 16]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=8), onnx


def test_a_cuda_graph_records_the_cudnn_convolutions_and_replays_them() -> None:
    model, _ = _conv_stack()
    x = np.random.default_rng(6).standard_normal((2, 8, 16, 16)).astype(np.float32)
    (want,) = graphrt.from_onnx(model).create(graphrt.cpu(0))(x=x)
    mod = graphrt.from_onnx(model, devices=["cuda"]).create(graphrt.cuda(0), cuda_graph=True)
    for _ in range(3):
        mod.run(x=x)
        got = mod.get_output(0, out=np.empty(want.shape, want.dtype))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays >= 1, report
    assert not report.eager_nodes, report


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_resnet_converted_for_cuda_runs_nhwc_in_one_recording(dtype: str) -> None:
    """Converted for cuda, ResNet's tensors are NHWC between its image and its global pool:
    every convolution on cuDNN, the max pool on its NHWC kernel, all of it recorded in one
    CUDA graph (a convolution off cuDNN would run between recordings: CuPy's GEMMs refuse
    capture), and the cpu's results."""
    pytest.importorskip("onnx")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[3] / "examples" / "onnx"))
    import models  # type: ignore[import-not-found]

    model = models.resnet18(batch=2, image=64, classes=10, width=16, dtype=dtype)
    feeds = models.sample_inputs(model)
    (want,) = graphrt.from_onnx(model).create(graphrt.cpu(0))(**feeds)
    bundle = graphrt.from_onnx(model, devices=["cuda"])
    mod = bundle.create(graphrt.cuda(0), cuda_graph=True)
    for _ in range(3):
        (got,) = mod(**feeds)
        tolerance = 1e-3 if dtype == "float32" else 3e-2
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                   rtol=tolerance, atol=tolerance)
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays >= 1, report
    assert not report.eager_nodes, report  # a convolution off cuDNN would run between
