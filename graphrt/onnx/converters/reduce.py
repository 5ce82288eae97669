"""ONNX converters: reduce."""

from __future__ import annotations
