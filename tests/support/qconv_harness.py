"""Run the compiled quantized convolution (graphrt.kernels.cpu.qconv) beside the op's exact
reference, for the kernel tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphrt.kernels.cpu.qconv import qconv_call
from graphrt.ops import TensorType, get_op

OP = get_op("qlinear_conv")


def integers(dtype: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values over the whole range of an integer ``dtype``."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def run_both(inputs: list[np.ndarray], strides: tuple[int, ...], dilation: tuple[int, ...],
             pads: tuple[int, ...], groups: int = 1
             ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The compiled call's result (run twice: again on the packed weight and a dirty
    workspace), the reference's, and the workspace arrays the call was given (filled with
    NaN or 3 before)."""
    attrs = OP.attrs(strides=list(strides), dilation=list(dilation), padding=list(pads),
                     groups=groups)
    types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
    (out,) = OP.infer(types, attrs, [None] * len(types))
    reference = OP.positional(np, attrs, len(inputs))
    want = np.empty(out.shape, out.dtype)
    reference(*inputs, want)
    call = qconv_call(attrs, types, out, reference)
    assert call is not None
    got = np.full(out.shape, 7, out.dtype)
    spaces = [np.full(t.shape, np.nan if t.dtype == "float32" else 3, t.dtype)
              for t in call.workspace]
    call.run(*inputs, got, *spaces)
    call.run(*inputs, got, *spaces)
    return got, want, spaces
