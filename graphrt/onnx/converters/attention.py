"""ONNX converters: attention."""

from __future__ import annotations
