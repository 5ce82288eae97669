"""Channels-last (NHWC) tensors between the convolutions on cuda: PyTorch's ``channels_last``,
TVM's ``ConvertLayout`` to NHWC, ONNX Runtime's ``prefer_nhwc``.

cuDNN's tensor-core convolutions read and write NHWC: over NCHW they transpose on the fly or
take slower kernels (a 3x3 convolution of 64 channels at 56x56, batch 32, replayed on an H200:
32 us NHWC against 73 us NCHW in float16, 49 against 91 in float32).
:func:`channels_last_layouts` lays the tensors between a model's cuda convolutions out NHWC,
once, in the graph:

- a cuda 2-D convolution of float16 or float32 data of static shape, with a constant weight,
  becomes a ``conv2d`` with ``data_layout`` and ``out_layout`` ``"NHWC"``, and its weight,
  transposed here once, ``kernel_layout="OHWI"``;
- its output is NHWC, and so is the output of a cuda step that is the same on either layout:
  an elementwise op of NHWC values of one shape (and constants of one element), or a 2-D max
  or average pool (a ``max_pool2d`` or ``avg_pool2d`` with ``layout="NHWC"``); a global pool
  (or the mean or max over H and W that float16 models convert to) reads NHWC data as it is,
  as a ``global_avg_pool2d`` or ``global_max_pool2d`` with ``layout="NHWC"`` (its
  ``[N, C, 1, 1]`` output is the same bytes either way);
- any other step reading such a value, or a graph output, reads an NCHW copy made once by a
  ``layout_transform`` after the value's maker; a convolution whose data is NCHW reads a
  ``layout_transform`` of it to NHWC.

A chain (the values linked by steps that read and write NHWC) stays NCHW where its layout
transforms would outnumber its convolutions: one convolution between NCHW steps is not worth
two transposes. ResNet-50 becomes one chain of 53 convolutions entered by one transform of the
image and left by its global pool.

Example:
    >>> import numpy as np
    >>> from graphrt.onnx.builder import Builder, TensorType
    >>> b = Builder()
    >>> x = b.input("x", TensorType((1, 8, 6, 6), "float16"))
    >>> conv = {"padding": [1, 1, 1, 1]}
    >>> (y,) = b.op("conv2d", [x, b.constant(np.ones((16, 8, 3, 3), np.float16))], conv)
    >>> (z,) = b.op("relu", [y])
    >>> (out,) = b.op("conv2d", [z, b.constant(np.ones((8, 16, 3, 3), np.float16))], conv)
    >>> for step in b.steps:
    ...     step.device = "cuda"
    >>> channels_last_layouts(b, [out])
    >>> [step.op for step in b.steps]
    ['layout_transform', 'conv2d', 'relu', 'conv2d', 'layout_transform']
    >>> b.shape(z), b.shape(out)
    ((1, 6, 6, 16), (1, 8, 6, 6))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from ..ops import TensorType
from .builder import Builder, ConvertedStep
from .layout import GLOBAL_POOLS

__all__ = ["channels_last_layouts"]

_ELEMENTWISE = frozenset({
    "relu", "clip", "leaky_relu", "sigmoid", "tanh", "gelu", "elu", "selu", "celu",
    "hard_sigmoid", "hard_swish", "mish", "softplus", "negative", "abs", "exp", "sqrt",
    "add", "subtract", "multiply", "divide", "maximum", "minimum"})
"""Ops that compute each element from the same element of their inputs, whatever the layout."""
_POOLS = frozenset({"max_pool2d", "avg_pool2d"})
_TO_NHWC = {"src_layout": "NCHW", "dst_layout": "NHWC"}
_TO_NCHW = {"src_layout": "NHWC", "dst_layout": "NCHW"}

Form = tuple[str, dict[str, Any]]
"""A step as the 2-D op that reads NHWC: its name and attributes (without the layouts)."""


@dataclass
class _Plan:
    """What :func:`channels_last_layouts` decided."""

    device: str
    forms: dict[int, Form]
    """Each ``device`` step that has an NHWC form, by ``id``."""
    convs: set[int] = field(default_factory=set)
    """The convolutions that go NHWC."""
    nhwc: set[str] = field(default_factory=set)
    """The values that are NHWC."""

    def reads_nhwc(self, step: ConvertedStep, index: int) -> bool:
        """Whether ``step`` reads its input ``index`` as NHWC (that input being NHWC)."""
        if id(step) in self.convs:
            return index == 0
        form = self.forms.get(id(step))
        if form is not None and form[0] in GLOBAL_POOLS:
            return True
        return bool(step.outputs) and step.outputs[0] in self.nhwc


def channels_last_layouts(b: Builder, outputs: Sequence[str], device: str = "cuda") -> None:
    """Lay the tensors between ``device``'s convolutions out NHWC, as the module docstring
    says: set the layouts of the convolutions and pools, transpose their weights, add the
    ``layout_transform`` steps and change the NHWC values' types."""
    plan = _Plan(device, {id(step): form for step in b.steps if step.device == device
                  for form in [_form(b, step)] if form is not None})
    plan.convs = {id(step) for step in b.steps if _convertible(b, step, plan)}
    if not plan.convs:
        return
    plan.nhwc = _nhwc_values(b, plan)
    readers: dict[str, list[tuple[ConvertedStep, int]]] = {}
    for step in b.steps:
        for index, value in enumerate(step.inputs):
            readers.setdefault(value, []).append((step, index))
    exported = set(outputs)
    while True:  # drop the chains not worth their transforms, until none is dropped
        chains = _chains(b, plan)
        convs: Counter[str] = Counter()
        transforms: dict[str, set[str]] = {}  # chain -> the values it transforms, in or out
        for step in b.steps:
            if id(step) in plan.convs:
                chain = chains[step.outputs[0]]
                convs[chain] += 1
                if step.inputs[0] not in plan.nhwc:
                    transforms.setdefault(chain, set()).add(step.inputs[0])
        for value in plan.nhwc:
            if value in exported or not all(plan.reads_nhwc(step, index)
                                            for step, index in readers.get(value, [])):
                transforms.setdefault(chains[value], set()).add(value)
        dropped = {chain for chain, values in transforms.items()
                   if len(values) > convs[chain]}
        if not dropped:
            break
        plan.nhwc = {value for value in plan.nhwc if chains[value] not in dropped}
        plan.convs = {id(step) for step in b.steps
                      if id(step) in plan.convs and step.outputs[0] in plan.nhwc}
    if plan.convs:
        _rewrite(b, plan, readers, exported)


def _plain_image(b: Builder, value: str) -> bool:
    """A float16 or float32 4-D value of static shape."""
    tensor = b.types.get(value)
    return (tensor is not None and tensor.dtype in ("float16", "float32")
            and len(tensor.shape) == 4 and value not in b.symbolic_dims)


def _form(b: Builder, step: ConvertedStep) -> Form | None:
    """The 2-D op that computes ``step`` and reads NHWC, or None: ``conv2d`` for a 2-D
    ``conv``, ``max_pool2d`` or ``avg_pool2d`` for a 2-D ``max_pool`` or ``avg_pool`` that
    fits them, a global pool for a mean or max over H and W that keeps them."""
    attrs, op = step.attrs, step.op
    if any(attrs.get(key, "NCHW") != "NCHW" for key in ("data_layout", "out_layout", "layout")
           ) or attrs.get("kernel_layout", "OIHW") != "OIHW" or not step.inputs or len(
            step.outputs) != 1 or not _plain_image(b, step.inputs[0]):
        return None
    if op in ("conv2d", *_POOLS, *GLOBAL_POOLS):
        return op, dict(attrs)
    if op == "conv":
        return "conv2d", {"strides": attrs.get("strides") or [1, 1],
                          "padding": attrs.get("padding") or [0, 0, 0, 0],
                          "dilation": attrs.get("dilation") or [1, 1],
                          "groups": attrs.get("groups", 1)}
    if op in ("max_pool", "avg_pool"):
        kernel, pads = list(attrs["kernel"]), list(attrs.get("padding") or [0, 0, 0, 0])
        if (attrs.get("indices") or attrs.get("column_major")
                or list(attrs.get("dilation") or [1, 1]) != [1, 1]
                or any(p >= kernel[i % 2] for i, p in enumerate(pads))):
            return None
        form = {"pool_size": kernel, "strides": attrs.get("strides") or kernel,
                "padding": pads, "ceil_mode": attrs.get("ceil_mode", False)}
        if op == "avg_pool":
            form["count_include_pad"] = attrs.get("count_include_pad", False)
        return op + "2d", form
    if (op == "reduce" and attrs.get("kind") in ("mean", "max") and attrs.get("keepdims")
            and sorted(a % 4 for a in attrs.get("axes") or []) == [2, 3]):
        return f"global_{'avg' if attrs['kind'] == 'mean' else 'max'}_pool2d", {}
    return None


def _convertible(b: Builder, step: ConvertedStep, plan: _Plan) -> bool:
    """A convolution of an NCHW image by a constant weight."""
    form = plan.forms.get(id(step))
    return (form is not None and form[0] == "conv2d" and _plain_image(b, step.outputs[0])
            and b.is_constant(step.inputs[1]) and step.inputs[0] not in step.inputs[1:])


def _nhwc_values(b: Builder, plan: _Plan) -> set[str]:
    """The values made by the convolutions, and by steps the same on either layout whose
    image inputs are such values."""
    nhwc: set[str] = set()
    for step in b.steps:
        if id(step) in plan.convs or (step.device == plan.device and len(step.outputs) == 1
              and _plain_image(b, step.outputs[0]) and _follows(b, step, plan, nhwc)):
            nhwc.add(step.outputs[0])
    return nhwc


def _follows(b: Builder, step: ConvertedStep, plan: _Plan, nhwc: set[str]) -> bool:
    """Whether ``step`` computes the same on NHWC inputs: a pool of an NHWC value, or an
    elementwise op of NHWC values of its output's shape and constants of one element."""
    form = plan.forms.get(id(step))
    if form is not None and form[0] in _POOLS:
        return step.inputs[0] in nhwc
    if step.op not in _ELEMENTWISE:
        return False
    shape = b.shape(step.outputs[0])
    return any(value in nhwc for value in step.inputs) and all(
        (value in nhwc and b.shape(value) == shape)
        or (b.is_constant(value) and prod(b.shape(value)) == 1)
        for value in step.inputs)


def _chains(b: Builder, plan: _Plan) -> dict[str, str]:
    """Each NHWC value's chain, named by one of its values: the values linked by steps that
    read and write NHWC (a union-find)."""
    parent = {value: value for value in plan.nhwc}

    def root(value: str) -> str:
        while parent[value] != value:
            parent[value] = parent[parent[value]]
            value = parent[value]
        return value

    for step in b.steps:
        if not step.outputs or step.outputs[0] not in plan.nhwc:
            continue
        for value in step.inputs[:1] if id(step) in plan.convs else step.inputs:
            if value in plan.nhwc:
                parent[root(value)] = root(step.outputs[0])
    return {value: root(value) for value in plan.nhwc}


def _nhwc_type(tensor: TensorType) -> TensorType:
    n, c, h, w = tensor.shape
    return TensorType((n, h, w, c), tensor.dtype)


def _rewrite(b: Builder, plan: _Plan, readers: dict[str, list[tuple[ConvertedStep, int]]],
             exported: set[str]) -> None:
    """Set the layouts, transpose the weights, add the transforms and retype the values."""
    accepting = {(id(step), index) for value in plan.nhwc
                 for step, index in readers.get(value, []) if plan.reads_nhwc(step, index)}
    exits = {value for value in plan.nhwc if value in exported or not all(
        (id(step), index) in accepting for step, index in readers.get(value, []))}
    entries: dict[str, str] = {}  # an NCHW convolution input -> its NHWC transform
    weights: dict[str, str] = {}  # an OIHW weight -> its OHWI transpose
    renamed: dict[str, str] = {}  # an NHWC value also read as NCHW -> its NHWC name
    steps: list[ConvertedStep] = []
    for step in b.steps:
        data = step.inputs[0] if step.inputs else ""
        for index, value in enumerate(step.inputs):
            if value in renamed and (id(step), index) in accepting:
                step.inputs[index] = renamed[value]
        form = plan.forms.get(id(step))
        if id(step) in plan.convs and form is not None:
            if data not in plan.nhwc:
                if data not in entries:
                    entries[data] = b.value("nhwc", _nhwc_type(b.type(data)))
                    steps.append(ConvertedStep("layout_transform", [data], [entries[data]],
                                               dict(_TO_NHWC), step.source, step.device))
                step.inputs[0] = entries[data]
            weight = step.inputs[1]
            if weight not in weights:  # one transpose of a weight that convolutions share
                weights[weight] = b.constant(np.ascontiguousarray(
                    b.constant_value(weight).transpose(0, 2, 3, 1)))
            step.inputs[1] = weights[weight]
            step.op, step.attrs = form[0], {**form[1], "data_layout": "NHWC",
                                            "out_layout": "NHWC", "kernel_layout": "OHWI"}
        elif form is not None and (id(step), 0) in accepting:  # a pool or a global pool
            step.op, step.attrs = form[0], {**form[1], "layout": "NHWC"}
        steps.append(step)
        if not step.outputs or step.outputs[0] not in plan.nhwc:
            continue
        out = step.outputs[0]
        if out in exits:
            renamed[out] = b.value("nhwc", _nhwc_type(b.type(out)))
            step.outputs[0] = renamed[out]
            steps.append(ConvertedStep("layout_transform", [renamed[out]], [out],
                                       dict(_TO_NCHW), step.source, step.device))
        else:
            b.types[out] = _nhwc_type(b.type(out))
    b.steps[:] = steps
