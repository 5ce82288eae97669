"""Run one standard op outside any graph, on cpu or sim, for reference tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import graphrt
from graphrt.devices import backend_for, copier
from graphrt.ops import TensorType, get_op


def blocked(x: np.ndarray) -> np.ndarray:
    """NCHW data as ``[N, C/8, H, W, 8]`` (``NCHW8c``)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // 8, 8, h, w).transpose(0, 1, 3, 4, 2))


def channels_last(x: np.ndarray) -> np.ndarray:
    """NCHW data as NHWC (an OIHW weight as OHWI)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def with_epilogue(want: np.ndarray, residual: np.ndarray | None, relu: bool,
                  clip: tuple[float, float] | None) -> np.ndarray:
    """A convolution's expected result after the fused epilogue: ``+ residual``, relu, clip
    (each where given)."""
    if residual is not None:
        want = want + residual
    if relu:
        want = np.maximum(want, 0)
    if clip is not None:
        want = np.clip(want, *clip)
    return want


def on_device(array: np.ndarray, device: graphrt.Device) -> Any:
    """A copy of ``array`` on ``device`` (a SimArray on sim)."""
    array = np.ascontiguousarray(array).reshape(array.shape)
    backend = backend_for(device)
    target = backend.view(backend.allocate(array.nbytes), array.shape, array.dtype)
    copier(graphrt.cpu(0), device)(array, target)
    return target


def run_op(name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None,
           device: graphrt.Device | None = None, *, lowered: bool = False) -> list[np.ndarray]:
    """Infer the op's outputs, allocate them on ``device``, compute, return host copies.

    ``lowered`` runs the op the way the executor does (``OpDef.positional``: the kernel
    factory where the op has one) instead of ``OpDef.compute``. On sim the op sees only
    SimArrays: mixing in a host array raises TypeError.
    """
    device = device or graphrt.cpu(0)
    op = get_op(name)
    parsed = op.attrs.model_validate(attrs or {})
    types = [TensorType(tuple(a.shape), str(a.dtype)) for a in inputs]
    needs = op.needs_data(len(inputs))
    data = [a if need else None for a, need in zip(inputs, needs, strict=True)]
    out_types = op.infer(types, parsed, data)
    backend = backend_for(device)
    ins = [on_device(a, device) for a in inputs]
    outs = [backend.view(backend.allocate(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize),
                         t.shape, np.dtype(t.dtype)) for t in out_types]
    if lowered:
        op.positional(backend.xp, parsed, len(ins))(*ins, *outs)
    else:
        op.compute(backend.xp, ins, outs, parsed)
    result = []
    for out in outs:
        host = np.empty(out.shape, out.dtype)
        copier(device, graphrt.cpu(0))(out, host)
        result.append(host)
    return result
