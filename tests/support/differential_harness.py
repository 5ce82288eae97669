"""Differential testing of graphrt's standard ops against ONNX Runtime one-node models.

graphrt's side runs the op the way the executor does (``OpDef.positional``, the lowered kernel),
on cpu or sim; ONNX Runtime's side runs a one-node ONNX model on its CPU provider. Outputs are
compared with the tolerance of their dtype (:data:`TOLERANCE`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx_harness import node_model, run_ort
from ops_harness import run_op

import graphrt

TOLERANCE: dict[str, tuple[float, float]] = {
    # dtype: (rtol, atol). float32: a few ulps of float32 (2**-23 ~ 1.2e-7) for ops that ORT
    # and numpy compute with different (both correctly rounded or vectorized) libm routines.
    "float32": (1e-5, 1e-6),
    # float16: 2 ulps (2**-10 ~ 9.8e-4 per ulp); graphrt and ORT both compute in float32 and
    # round once, so they differ by at most the last rounding, plus libm differences.
    "float16": (2e-3, 2e-3),
    "float64": (1e-12, 1e-12),
}
"""Relative and absolute tolerance per output dtype; integer and bool outputs compare exactly."""

OPSET = 21
"""The ONNX opset of the reference models (ONNX Runtime 1.17+ implements it)."""


def run_kernel(name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None,
               device: graphrt.Device | None = None) -> list[np.ndarray]:
    """Standard op ``name`` run through its lowered kernel (``OpDef.positional``) on ``device``."""
    return run_op(name, inputs, attrs, device, lowered=True)


def run_onnx(op_type: str, inputs: dict[str, np.ndarray],
             consts: dict[str, np.ndarray | None] | None = None, *, opset: int = OPSET,
             n_outputs: int = 1, **attrs: Any) -> list[np.ndarray]:
    """ONNX Runtime's result of one ``op_type`` node (``consts`` become initializers)."""
    model = node_model(op_type, inputs, consts or {}, opset, n_outputs, **attrs)
    return run_ort(model, inputs)


def assert_close(got: np.ndarray, want: np.ndarray, *, what: str = "",
                 tolerance: tuple[float, float] | None = None) -> None:
    """``got`` equals ``want`` in shape and dtype, and in value within its dtype's tolerance
    (exactly for integers and bools; NaN matches NaN, inf matches inf of the same sign)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != reference {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != reference {want.dtype}"
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = tolerance or TOLERANCE[str(got.dtype)]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=what)
