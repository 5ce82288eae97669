"""ONNX converters: resize."""

from __future__ import annotations
