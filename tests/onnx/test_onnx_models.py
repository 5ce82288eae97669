"""Whole models through ``graphrt.from_onnx`` against ONNX Runtime.

ResNet-50, MobileNetV2 and a BERT encoder from ``examples/onnx/models.py`` (exporter-style
layouts with seeded random weights) must match ONNX Runtime to max|err| / max|ref| < 1e-3 in
float32 and < 1e-2 in float16, with and without fusion, with symbolic batch and sequence
dimensions, and split over two devices.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from ort_compat import for_ort

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

import graphrt  # noqa: E402

FILE = Path(__file__).resolve().parents[2] / "examples" / "onnx" / "models.py"
F32_TOL = 1e-3
F16_TOL = 1e-2  # float16 graphrt against float32 ONNX Runtime on the same rounded weights


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_example_models", FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


models = _load()


@functools.cache
def build(name: str, **kwargs: Any) -> Any:
    """One model per (builder, arguments), built once per session."""
    maker: Callable[..., Any] = {"resnet50": models.resnet50, "mobilenet_v2": models.mobilenet_v2,
                                 "bert": models.bert_encoder}[name]
    return maker(**kwargs)


SESSIONS: dict[int, tuple[Any, Any]] = {}


def ort_run(model: Any, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    """ONNX Runtime's first output; one session per model object (the models are cached)."""
    if id(model) not in SESSIONS:
        SESSIONS[id(model)] = (model, onnxruntime.InferenceSession(
            for_ort(model).SerializeToString(), providers=["CPUExecutionProvider"]))
    return np.asarray(SESSIONS[id(model)][1].run(None, dict(feeds))[0])


def graphrt_run(bundle: graphrt.Bundle, feeds: Mapping[str, np.ndarray],
                *devices: graphrt.Device) -> np.ndarray:
    (y,) = bundle.create(*(devices or (graphrt.cpu(0),)))(**feeds)
    return np.array(np.asarray(y).view(np.ndarray))


def rel_err(y: np.ndarray, ref: np.ndarray) -> float:
    assert y.shape == ref.shape, (y.shape, ref.shape)
    ref32 = ref.astype(np.float32)
    return float(np.abs(y.astype(np.float32) - ref32).max() / np.abs(ref32).max())


def upcast(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()}


# --- the models themselves (no converter involved) --------------------------------------------

def test_resnet50_has_the_v15_layout() -> None:
    model = build("resnet50", image=64)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == ops.count("BatchNormalization") == 53
    assert ops.count("Add") == 16 and ops.count("MaxPool") == 1 and ops[-1] == "Gemm"
    strided = {n.name for n in model.graph.node if n.op_type == "Conv"
               and list(n.attribute[[a.name for a in n.attribute].index("strides")].ints)
               == [2, 2]}
    # v1.5: the stride sits in the 3x3 of the first block of stages 2-4 (and its shortcut).
    for stage in (2, 3, 4):
        assert f"/layer{stage}/layer{stage}.0/conv2/Conv" in strided
        assert f"/layer{stage}/layer{stage}.0/conv1/Conv" not in strided
    weights = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 25_000_000 < weights < 26_000_000  # 25.6M with the batch-norm statistics


def test_mobilenet_v2_uses_depthwise_convs_and_relu6() -> None:
    model = build("mobilenet_v2", image=64)
    onnx.checker.check_model(model, full_check=True)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    depthwise = [n for n in convs if next(a.i for a in n.attribute if a.name == "group") > 1]
    assert len(convs) == 52 and len(depthwise) == 17
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert len(clips) == 35 and all(len(n.input) == 3 for n in clips)
    assert sum(n.op_type == "Add" for n in model.graph.node) == 10


def test_bert_layer_norm_forms_agree_in_onnxruntime() -> None:
    fused, decomposed = build("bert", layers=2, opset=17), build("bert", layers=2, opset=13)
    ops17 = {n.op_type for n in fused.graph.node}
    ops13 = {n.op_type for n in decomposed.graph.node}
    assert "LayerNormalization" in ops17 and "LayerNormalization" not in ops13
    assert {"ReduceMean", "Pow", "Sqrt", "Erf", "Shape", "Gather", "Unsqueeze", "Concat",
            "Reshape", "Transpose", "Softmax", "Slice"} <= ops13
    for model in (fused, decomposed):
        onnx.checker.check_model(model, full_check=True)
    feeds = models.sample_inputs(fused, seed=1)
    assert rel_err(ort_run(fused, feeds), ort_run(decomposed, feeds)) < 1e-5


# --- graphrt against ONNX Runtime --------------------------------------------------------------

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "resnet50-224": ("resnet50", {}),
    "mobilenet_v2-224": ("mobilenet_v2", {}),
    "bert-opset17": ("bert", {}),
    "bert-opset13": ("bert", {"opset": 13, "layers": 2}),
    "bert-additive-mask": ("bert", {"mask": "additive", "batch": 2, "seq": 64, "layers": 2}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_float32_matches_onnxruntime(case: str) -> None:
    name, kwargs = CASES[case]
    model = build(name, **kwargs)
    feeds = models.sample_inputs(model, seed=2)
    y = graphrt_run(graphrt.from_onnx(model), feeds)
    assert rel_err(y, ort_run(model, feeds)) < F32_TOL


@pytest.mark.parametrize(("name", "kwargs"), [
    ("resnet50", {"image": 64}), ("mobilenet_v2", {"image": 64}), ("bert", {"layers": 2})])
def test_fuse_false_agrees_with_fused(name: str, kwargs: dict[str, Any]) -> None:
    model = build(name, **kwargs)
    feeds = models.sample_inputs(model, seed=3)
    fused = graphrt.from_onnx(model)
    unfused = graphrt.from_onnx(model, fuse=False)
    assert len(unfused.graph.nodes) > len(fused.graph.nodes)
    y_fused, y_unfused = graphrt_run(fused, feeds), graphrt_run(unfused, feeds)
    assert rel_err(y_unfused, ort_run(model, feeds)) < F32_TOL
    assert rel_err(y_fused, y_unfused) < F32_TOL


@pytest.mark.parametrize(("name", "kwargs"), [
    ("resnet50", {"image": 64}), ("mobilenet_v2", {"image": 96}), ("bert", {"layers": 2}),
    ("bert", {"layers": 2, "opset": 13})])
def test_float16_matches_onnxruntime(name: str, kwargs: dict[str, Any]) -> None:
    half = build(name, dtype="float16", **kwargs)
    feeds = models.sample_inputs(half, seed=4)
    y = graphrt_run(graphrt.from_onnx(half), feeds)
    assert y.dtype == np.float16
    assert rel_err(y, ort_run(build(name, **kwargs), upcast(feeds))) < F16_TOL
    assert rel_err(y, ort_run(half, feeds)) < F16_TOL


def test_bert_with_symbolic_batch_and_sequence_runs_at_other_sizes() -> None:
    model = build("bert", symbolic=True, layers=2)
    bundle = graphrt.from_onnx(model, dim_bounds={"batch": 4, "seq": 128})
    mod = bundle.create(graphrt.cpu(0))
    for batch, seq in ((4, 128), (2, 77), (1, 5)):
        feeds = models.sample_inputs(model, {"batch": batch, "seq": seq}, seed=batch)
        (y,) = mod(**feeds)
        assert y.shape == (batch, seq, 256)
        assert rel_err(np.array(y), ort_run(model, feeds)) < F32_TOL


@pytest.mark.parametrize(("name", "kwargs"), [
    ("resnet50", {"image": 64, "symbolic": True}),
    ("bert", {"layers": 2, "symbolic": ("batch",)})])
def test_symbolic_batch_runs_at_every_batch_up_to_the_bound(name: str,
                                                            kwargs: dict[str, Any]) -> None:
    model = build(name, **kwargs)
    mod = graphrt.from_onnx(model, dim_bounds={"batch": 4}).create(graphrt.cpu(0))
    for batch in (1, 3, 4):
        feeds = models.sample_inputs(model, {"batch": batch}, seed=batch)
        (y,) = mod(**feeds)
        assert y.shape[0] == batch
        assert rel_err(np.array(y), ort_run(model, feeds)) < F32_TOL


@pytest.mark.parametrize("name", ["bert", "mobilenet_v2"])
def test_mixed_placement_on_sim_and_cpu_matches_cpu_only(name: str) -> None:
    model = build(name, layers=2) if name == "bert" else build(name, image=64)
    pinned = "Softmax" if name == "bert" else "GlobalAveragePool"
    feeds = models.sample_inputs(model, seed=5)
    mixed = graphrt.from_onnx(model, devices=["sim", "cpu"], placement={pinned: "cpu"})
    mod = mixed.create(graphrt.sim(0), graphrt.cpu(0))
    assert {dev.kind for dev in mod.plan.entry_device} == {"sim", "cpu"}
    # One copy to the host before each pinned op and one back after it, nothing else.
    copies = mod.placement().copies
    assert len(copies) == (4 if name == "bert" else 2)
    assert {(c.src, c.dst) for c in copies} == {("sim:0", "cpu:0"), ("cpu:0", "sim:0")}
    (y,) = mod(**feeds)
    y_mixed = np.array(np.asarray(y).view(np.ndarray))
    y_cpu = graphrt_run(graphrt.from_onnx(model), feeds)
    # float32 rounding only: sim runs the reference convolutions (GEMMs), cpu the direct
    # kernels, and each sums in its own order (1.03e-6 seen for MobileNetV2)
    assert rel_err(y_mixed, y_cpu) < 2e-6
    assert rel_err(y_mixed, ort_run(model, feeds)) < F32_TOL


def test_planned_activation_pool_is_near_its_lower_bound() -> None:
    bundle = graphrt.from_onnx(build("resnet50", image=64))
    memory: dict[str, int] = dict(bundle.metadata["memory"])  # type: ignore[arg-type]
    # The three figures count the params too (each pinned in its own slot): take them out.
    params = sum(int(a.nbytes) for a in bundle.params.values())
    planned, lower, naive = (memory[k] - params for k in (
        "planned_bytes", "lower_bound_bytes", "one_buffer_per_entry_bytes"))
    assert 0 < lower <= planned <= 1.5 * lower
    assert planned < naive / 4
