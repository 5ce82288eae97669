"""ONNX converters: tensor."""

from __future__ import annotations
