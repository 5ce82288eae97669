"""A torchvision detection model as users export it: SSDlite (MobileNetV3 backbone, random
weights, nothing downloaded) through ``torch.onnx.export``, whose post-processing is
data-dependent (score thresholds through NonZero, TopK of ``min(300, found)`` candidates,
NonMaxSuppression, a slice to the detections kept). It converts once and matches ONNX
Runtime's boxes, scores and labels, with the number of detections found at run time. A
segmentation model (LR-ASPP, whose head resizes to sizes computed from the input's shape)
converts with a dynamic batch and matches at every batch within its bound.
Skips cleanly without torch and torchvision (see ``tests/support/torchvision_cpu.py`` for
torchvision beside a CPU-only torch)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

import graphrt  # noqa: E402

from ..support import torchvision_cpu  # noqa: E402


def _torchvision() -> Any:
    """torchvision, seeded, or a clean skip where it cannot load."""
    try:
        torchvision = torchvision_cpu.load()
    except (ImportError, RuntimeError) as err:
        pytest.skip(f"torchvision does not load beside this torch: {err}")
    torch.manual_seed(0)
    return torchvision


def _export(path: Path, score_thresh: float, head_std: float | None) -> Path:
    model = _torchvision().models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=5, score_thresh=score_thresh).eval()
    if head_std is not None:  # scores that spread, so the threshold keeps some and not others
        with torch.no_grad():
            for parameter in model.head.classification_head.parameters():
                parameter.normal_(0.0, head_std)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([torch.rand(3, 320, 320)],), path, input_names=["image"],
                          output_names=["boxes", "scores", "labels"], dynamo=False,
                          opset_version=17)
    return path


@pytest.mark.parametrize("score_thresh, head_std", [(0.001, None), (0.9, 0.5)])
def test_ssdlite_converts_and_matches_onnx_runtime(tmp_path: Path, score_thresh: float,
                                                   head_std: float | None) -> None:
    path = _export(tmp_path / "ssdlite.onnx", score_thresh, head_std)
    bundle = graphrt.from_onnx(path)
    bounds = {name: var.max for name, var in bundle.graph.shape_vars.items()}
    assert any(name.startswith("non_max_suppression") for name in bounds)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    module = bundle.create("cpu")
    for seed, scale in [(0, 1.0), (1, 0.5), (2, 0.0)]:
        image = (np.random.default_rng(seed).random((3, 320, 320)) * scale).astype(np.float32)
        want = session.run(None, {"image": image})
        got = module(image=image)
        for name, g, w in zip(("boxes", "scores", "labels"), got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name}, image {seed}")
        # fewer detections than the 300 planned: the counts came from the data
        assert 0 < len(want[0]) < 300


def test_a_segmentation_model_with_a_dynamic_batch(tmp_path: Path) -> None:
    model = _torchvision().models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=4).eval()
    path = tmp_path / "lraspp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.rand(1, 3, 128, 128),), path, input_names=["x"],
                          output_names=["out"], dynamo=False, opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "out": {0: "batch"}})
    module = graphrt.from_onnx(path, dim_bounds={"batch": 3}).create("cpu")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 2, 3):
        x = np.random.default_rng(batch).random((batch, 3, 128, 128)).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(np.asarray(module(x=x)[0]), want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"batch {batch}")
