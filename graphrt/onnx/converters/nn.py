"""ONNX converters: nn."""

from __future__ import annotations
