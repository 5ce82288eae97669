"""Running one ONNX model through graphrt, ONNX Runtime and ONNX's reference evaluator, for the
ONNX frontend's differential tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphrt

ort = pytest.importorskip("onnxruntime")
reference = pytest.importorskip("onnx.reference")


def run_graphrt(model: Any, data: dict[str, np.ndarray],
                device: graphrt.Device | None = None) -> list[np.ndarray]:
    """``model`` converted by ``graphrt.from_onnx`` and run once on ``device`` (cpu)."""
    module = graphrt.from_onnx(model).create(device or graphrt.cpu(0))
    return [np.array(out) for out in module(**data)]


def run_ort(model: Any, data: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run by ONNX Runtime on its CPU provider."""
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, data))


def run_reference(model: Any, data: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run by ONNX's reference evaluator (where ONNX Runtime departs from the spec)."""
    return list(reference.ReferenceEvaluator(model).run(None, data))
