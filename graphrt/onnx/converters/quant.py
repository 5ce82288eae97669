"""ONNX converters: quant."""

from __future__ import annotations
