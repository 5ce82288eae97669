"""Standard ops: activations (used by the ONNX frontend; numpy and cupy)."""

from __future__ import annotations
