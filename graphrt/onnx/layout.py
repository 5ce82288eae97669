"""Blocked layouts for chains of convolutions on the cpu (MLAS's NCHWc, TVM's
``AlterOpLayout`` to ``conv2d_NCHWc``).

The cpu's compiled convolutions hold 8 output channels of a pixel in one vector register;
stored NCHW, each such vector is scattered over 8 channel planes, and the next convolution
gathers them back (a depthwise one through 8x8 transposes). :func:`block_layouts` lets the
tensors between convolutions stay blocked instead, ``[N, C/8, H, W, 8]`` (``NCHW8c``): a
``conv2d`` step whose data is such a tensor gets ``data_layout="NCHW8c"``, one whose output is
gets ``out_layout="NCHW8c"``, and the value's type becomes 5-D. The graph says so: the layout
is in the convolutions' attributes and the tensors' shapes, as TVM's graphs said it.

A value is blocked where all of this holds, else it stays NCHW:

- a cpu ``conv2d`` (float32, static shape, one group or depthwise) with a multiple of 8
  output channels makes it, or a cpu ``clip`` or ``relu`` of a blocked value, or a cpu
  ``add`` of two blocked values of one shape (the residual sum), which are the same on either
  layout, or a cpu ``max_pool2d`` of a blocked value (``layout="NCHW8c"``: ResNet's stem
  pool, whose NCHW output had kept the stem's stores and the first stage's residual sums
  NCHW);
- every step that reads it is such a convolution reading it as its data, such an
  elementwise step whose output is blocked too, or a cpu global pool (whose ``[N, C, 1, 1]``
  output is the same bytes either way: ``layout="NCHW8c"``);
- it is no graph output.

So a chain is entered by its first convolution (NCHW data, blocked output) and left by its
last (blocked data, NCHW output): no ``layout_transform`` step is needed, and a model with no
two convolutions in a row is unchanged. It runs only where the compiled convolutions are
there (numba, and ``GRAPHRT_JIT`` not 0): the reference runs blocked layouts through
temporaries, correct but slower than NCHW.

Example:
    >>> import numpy as np
    >>> from graphrt.onnx.builder import Builder, TensorType
    >>> b = Builder()
    >>> x = b.input("x", TensorType((1, 8, 6, 6), "float32"))
    >>> conv = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
    >>> (y,) = b.op("conv2d", [x, b.constant(np.ones((16, 8, 3, 3), np.float32))], conv)
    >>> (z,) = b.op("relu", [y])
    >>> (out,) = b.op("conv2d", [z, b.constant(np.ones((8, 16, 3, 3), np.float32))], conv)
    >>> for step in b.steps:
    ...     step.device = "cpu"
    >>> block_layouts(b, [out])
    >>> [(step.attrs.get("data_layout"), step.attrs.get("out_layout")) for step in b.steps
    ...  if step.op == "conv2d"]
    [(None, 'NCHW8c'), ('NCHW8c', None)]
    >>> b.shape(y), b.shape(z), b.shape(out)
    ((1, 2, 6, 6, 8), (1, 2, 6, 6, 8), (1, 8, 6, 6))
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ops import TensorType
from .builder import Builder, ConvertedStep

__all__ = ["GLOBAL_POOLS", "LANES", "block_layouts"]

LANES = 8
"""Channels of a block: one AVX2 vector of float32 (``NCHW8c``)."""
BLOCKED = "NCHW8c"
_SAME_ON_EITHER = frozenset({"clip", "relu"})  # elementwise, of one input and attributes
GLOBAL_POOLS = frozenset({"global_avg_pool2d", "global_max_pool2d"})
"""The global pools, whose ``[N, C, 1, 1]`` output is the same bytes from any layout."""


def block_layouts(b: Builder, outputs: Sequence[str]) -> None:
    """Block the values between the cpu's convolutions, as the module docstring says: set
    the ``conv2d`` steps' ``data_layout`` / ``out_layout`` and the blocked values' types."""
    readers: dict[str, list[ConvertedStep]] = {}
    for step in b.steps:
        for value in step.inputs:
            readers.setdefault(value, []).append(step)
    made_by: dict[str, ConvertedStep] = {}
    blocked: set[str] = set()
    for step in b.steps:
        if step.device != "cpu" or len(step.outputs) != 1 or not _plain(b, step.outputs[0]):
            continue
        made_by[step.outputs[0]] = step
        if _blockable_conv(b, step) or (
                step.op in _SAME_ON_EITHER and len(step.inputs) == 1
                and step.inputs[0] in blocked) or (
                step.op == "max_pool2d" and step.attrs.get("layout", "NCHW") == "NCHW"
                and step.inputs[0] in blocked) or (
                step.op == "add" and len(step.inputs) == 2
                and all(value in blocked for value in step.inputs)
                and b.shape(step.inputs[0]) == b.shape(step.inputs[1])):
            blocked.add(step.outputs[0])
    exported = set(outputs)
    while True:  # drop values read where blocked data cannot go, until none is dropped
        dropped = {value for value in blocked
                   if value in exported
                   or not all(value in blocked for value in _elementwise_inputs(made_by[value]))
                   or not all(_reads_blocked(b, reader, value, blocked)
                              for reader in readers.get(value, []))}
        if not dropped:
            break
        blocked -= dropped
    for value in blocked:
        n, c, h, w = b.shape(value)
        b.types[value] = TensorType((n, c // LANES, h, w, LANES), b.dtype(value))
    for step in b.steps:
        if step.op == "conv2d":
            if step.inputs[0] in blocked:
                step.attrs["data_layout"] = BLOCKED
            if step.outputs[0] in blocked:
                step.attrs["out_layout"] = BLOCKED
        elif step.op in (*GLOBAL_POOLS, "max_pool2d") and step.inputs[0] in blocked:
            step.attrs["layout"] = BLOCKED


def _plain(b: Builder, value: str) -> bool:
    """A float32 NCHW value of static shape."""
    tensor = b.types.get(value)
    return (tensor is not None and tensor.dtype == "float32" and len(tensor.shape) == 4
            and value not in b.symbolic_dims)


def _compiled_conv(b: Builder, step: ConvertedStep) -> bool:
    """A cpu ``conv2d`` the compiled kernels run: one group, or depthwise."""
    if step.op != "conv2d" or step.device != "cpu" or not _plain(b, step.inputs[0]):
        return False
    groups = int(step.attrs.get("groups", 1))
    (o, per_group, *_), c = b.shape(step.inputs[1]), b.shape(step.inputs[0])[1]
    return groups == 1 or (groups == c == o and per_group == 1)


def _blockable_conv(b: Builder, step: ConvertedStep) -> bool:
    """A compiled convolution whose output channels are whole blocks."""
    return _compiled_conv(b, step) and b.shape(step.inputs[1])[0] % LANES == 0


def _elementwise_inputs(step: ConvertedStep) -> list[str]:
    """The inputs of a blocked elementwise step (all of them must be blocked); none of a
    convolution's (its data may be either)."""
    return [] if step.op == "conv2d" else step.inputs


def _reads_blocked(b: Builder, reader: ConvertedStep, value: str, blocked: set[str]) -> bool:
    """Whether ``reader`` can read ``value`` blocked: a compiled convolution reading it as
    its data only (its channels are whole blocks, ``value`` being blockable), or a blocked
    elementwise step."""
    if reader.op == "conv2d":
        return (_compiled_conv(b, reader) and reader.inputs[0] == value
                and value not in reader.inputs[1:])
    if reader.op in GLOBAL_POOLS:
        return reader.device == "cpu" and "layout" not in reader.attrs
    return bool(reader.outputs) and reader.outputs[0] in blocked
