"""Standard ops: reductions (used by the ONNX frontend; numpy and cupy)."""

from __future__ import annotations
