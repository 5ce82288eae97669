"""Models exported by PyTorch's own exporter (``torch.onnx.export``, the default dynamo
exporter) convert with a dynamic batch and match PyTorch: ``examples/onnx/export_torch.py``,
as docs/onnx.md tells a user to run it. Skips cleanly without torch and onnxscript (and
without a torchvision that loads beside the installed torch, for ResNet-18)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")
pytest.importorskip("onnxscript")

FILE = Path(__file__).resolve().parents[2] / "examples" / "onnx" / "export_torch.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("export_torch_example", FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_an_exported_mlp_converts_with_a_dynamic_batch_and_matches_torch(tmp_path: Path) -> None:
    bundle = _load().check("mlp", tmp_path / "mlp.onnx")
    assert bundle.graph.is_dynamic


def test_an_exported_torchvision_resnet18_matches_torch(tmp_path: Path) -> None:
    from ..support import torchvision_cpu

    try:
        torchvision_cpu.load()  # a CUDA build beside the CPU torch: its ops defined in Python
    except (ImportError, RuntimeError) as err:
        pytest.skip(f"torchvision does not load beside this torch: {err}")
    _load().check("resnet18", tmp_path / "resnet18.onnx")
