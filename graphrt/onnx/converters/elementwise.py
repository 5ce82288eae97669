"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations."""

from __future__ import annotations

from .common import simple, unary

for _onnx, _op in [("Add", "add"), ("Sub", "subtract"), ("Mul", "multiply"),
                   ("Div", "divide")]:
    simple(_onnx, _op)

unary("Relu", "relu")
