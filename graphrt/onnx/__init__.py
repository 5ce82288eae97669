"""The ONNX frontend: ``graphrt.from_onnx(model)`` converts an ONNX model into a bundle.

Needs the optional ``onnx`` package (``pip install 'graphrt[onnx]'``); the runtime never
imports this package, so a converted bundle runs without it.

Example:
    >>> import graphrt
    >>> bundle = graphrt.from_onnx("resnet50.onnx")  # doctest: +SKIP
    >>> mod = bundle.create("cpu")  # doctest: +SKIP
"""

from __future__ import annotations

from .convert import Converted, convert_model, from_onnx
from .registry import supported_table

__all__ = ["Converted", "convert_model", "from_onnx", "supported_table"]
