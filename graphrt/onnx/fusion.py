"""Fusion of converted steps (TVM's rule) and folding of batch norms into convolutions.

:func:`fold_batch_norms` rewrites a convolution followed by a per-channel affine step
(``batch_norm`` with constant statistics, or a ``multiply``/``divide``/``add``/``subtract``/
``bias_add`` of a per-channel constant) into the convolution alone, with new weights and bias.

:func:`fuse_steps` groups steps the way TVM's ``FuseOps`` names them: every standard op has a
pattern (:func:`op_pattern`; per step for ``quantize`` and ``dequantize``: broadcast when per
tensor, else opaque); an elementwise or broadcast step joins the group of its latest producer
when that group is anchored by an out-elementwise-fusable op (convolution, dense, matmul,
pooling) or is itself elementwise/broadcast/injective; an injective step joins an
elementwise/broadcast/injective group; a reduction joins such a group and closes it.
Groups never cross devices and hold at most :data:`MAX_GROUP` steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from ..ops import OPS, TensorType
from .builder import Builder, ConvertedStep

__all__ = ["MAX_GROUP", "Pattern", "fold_batch_norms", "fuse_steps", "op_pattern"]

Array = np.ndarray[Any, Any]

MAX_GROUP = 32
"""The most steps one fused group holds (TVM's ``max_fuse_depth`` is 256; smaller is saner)."""


class Pattern(IntEnum):
    """TVM's ``OpPatternKind``, in its order (a group's pattern is its steps' maximum)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


_PATTERNS: dict[str, Pattern] = {
    **dict.fromkeys(
        ["abs", "ceil", "floor", "round", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
         "relu", "leaky_relu", "gelu", "erf", "negative", "logical_not", "clip", "cast",
         "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "reciprocal", "softplus", "softsign", "elu", "selu", "celu",
         "hard_sigmoid", "hard_swish", "mish", "isnan", "isinf", "bitwise_not",
         "thresholded_relu", "shrink", "example_negate"], Pattern.ELEMWISE),
    **dict.fromkeys(
        ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "mod",
         "floor_divide", "floor_mod", "equal", "not_equal", "greater", "greater_equal", "less",
         "less_equal", "logical_and", "logical_or", "logical_xor", "where", "bias_add",
         "prelu", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"],
        Pattern.BROADCAST),
    **dict.fromkeys(
        ["reshape", "transpose", "flatten", "expand_dims", "squeeze", "concatenate", "split",
         "strided_slice", "take", "gather", "pad", "layout_transform", "resize2d", "resize",
         "tile", "broadcast_to", "reverse", "depth_to_space", "space_to_depth",
         "reshape_symbolic", "broadcast_to_symbolic"],
        Pattern.INJECTIVE),
    **dict.fromkeys(
        ["sum", "mean", "max", "min", "prod", "reduce", "argmax", "argmin", "arg_reduce"],
        Pattern.REDUCTION),
    **dict.fromkeys(
        ["conv2d", "conv", "conv2d_transpose", "conv_transpose", "dense", "matmul",
         "batch_matmul", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "global_max_pool2d",
         "max_pool", "avg_pool", "lp_pool"], Pattern.OUT_ELEMWISE_FUSABLE),
}


def op_pattern(op: str, attrs: Mapping[str, Any] | None = None,
               inputs: Sequence[TensorType] = ()) -> Pattern:
    """The fusion pattern of standard op ``op`` (of one step of it, with ``attrs`` and input
    types ``inputs``, for an op elementwise only for some of them).

    Ops not in the table are elementwise when their :class:`~graphrt.ops.OpDef` has an
    elementwise body; broadcast when the step has an expression
    (:meth:`~graphrt.ops.OpDef.expression`: a per-tensor ``quantize`` or ``dequantize``,
    whose scale broadcasts), so ``dequantize → add → quantize`` is one group the cpu compiles
    as one loop; else opaque (never fused).

    Example:
        >>> op_pattern("conv2d").name, op_pattern("add").name, op_pattern("softmax").name
        ('OUT_ELEMWISE_FUSABLE', 'BROADCAST', 'OPAQUE')
    """
    pattern = _PATTERNS.get(op)
    if pattern is not None:
        return pattern
    found = OPS.get(op)
    if found is None:
        return Pattern.OPAQUE
    if found.elementwise is not None:
        return Pattern.ELEMWISE
    if found.elementwise_of is not None and attrs is not None and found.expression(
            found.attrs.model_validate(attrs), inputs) is not None:
        return Pattern.BROADCAST
    return Pattern.OPAQUE


# -- batch-norm folding -------------------------------------------------------------------------

_CONVS = ("conv2d", "conv")
_AFFINE = ("batch_norm", "multiply", "divide", "add", "subtract", "bias_add")


@dataclass(frozen=True)
class _Affine:
    """``y = x * scale + shift`` along the channel axis (float64 vectors)."""

    scale: Array
    shift: Array


def _channel_vector(b: Builder, value: str, out: str, channels: int) -> Array | None:
    """The per-channel vector of constant ``value`` broadcast against ``out`` (axis 1)."""
    if not b.is_constant(value) or b.dtype(value) != b.dtype(out):
        return None
    const = b.constants[value]
    out_shape = b.shape(out)
    if const.ndim > len(out_shape):
        return None
    full = (1,) * (len(out_shape) - const.ndim) + tuple(const.shape)
    if any(d != 1 for axis, d in enumerate(full) if axis != 1) or full[1] not in (1, channels):
        return None
    return np.broadcast_to(const.reshape(-1).astype(np.float64), (channels,))


def _affine_of(b: Builder, step: ConvertedStep, value: str, channels: int) -> _Affine | None:
    """``step`` as a per-channel affine map of ``value`` (its only non-constant input)."""
    ones, zeros = np.ones(channels), np.zeros(channels)
    ins = step.inputs
    if step.op == "batch_norm":
        if ins[0] != value or not all(b.is_constant(v) for v in ins[1:]):
            return None
        if step.attrs.get("axis", 1) not in (1, 1 - len(b.shape(value))):
            return None
        if any(b.shape(v) != (channels,) or b.dtype(v) != b.dtype(value) for v in ins[1:]):
            return None
        vectors = [b.constants[v].astype(np.float64) for v in ins[1:]]
        gamma, beta, mean, var = vectors
        scale = gamma / np.sqrt(var + float(step.attrs.get("epsilon", 1e-5)))
        return _Affine(scale, beta - mean * scale)
    if len(ins) != 2 or value not in ins or ins[0] == ins[1]:
        return None
    first = ins[0] == value
    other = ins[1] if first else ins[0]
    vec = _channel_vector(b, other, value, channels)
    if vec is None:
        return None
    if step.op == "bias_add":
        axis = step.attrs.get("axis", 1)
        ok = first and axis in (1, 1 - len(b.shape(value)))
        return _Affine(ones, vec) if ok else None
    if step.op == "multiply":
        return _Affine(vec, zeros)
    if step.op == "add":
        return _Affine(ones, vec)
    if step.op == "subtract" and first:
        return _Affine(ones, -vec)
    if step.op == "divide" and first and np.all(vec != 0):
        return _Affine(1.0 / vec, zeros)
    return None


def _fold_one(b: Builder, conv: ConvertedStep, after: ConvertedStep, outputs: Sequence[str]
              ) -> bool:
    """Fold ``after`` into ``conv`` if it is a per-channel affine map of the conv's output."""
    out = conv.outputs[0]
    if len(conv.inputs) not in (2, 3) or not all(b.is_constant(v) for v in conv.inputs[1:]):
        return False
    if out in outputs or len(conv.outputs) != 1 or after.op not in _AFFINE:
        return False
    if not np.issubdtype(np.dtype(b.dtype(out)), np.floating):
        return False
    weight = b.constants[conv.inputs[1]]
    channels = int(weight.shape[0])
    if len(b.shape(out)) < 2 or b.shape(out)[1] != channels or b.types[after.outputs[0]] != \
            b.types[out] or len(after.outputs) != 1:
        return False
    affine = _affine_of(b, after, out, channels)
    if affine is None:
        return False
    dtype = weight.dtype
    bias = (b.constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) == 3
            else np.zeros(channels))
    if bias.shape != (channels,):
        return False
    scale = affine.scale.reshape((channels,) + (1,) * (weight.ndim - 1))
    new_weight = b.constant((weight.astype(np.float64) * scale).astype(dtype))
    new_bias = b.constant((bias * affine.scale + affine.shift).astype(dtype))
    conv.inputs = [conv.inputs[0], new_weight, new_bias]
    conv.outputs = list(after.outputs)
    return True


def fold_batch_norms(b: Builder, outputs: Sequence[str]) -> None:
    """Fold per-channel affine steps with constant operands into the convolution before them.

    A ``batch_norm`` (constant statistics), or a ``multiply``/``divide``/``add``/``subtract``/
    ``bias_add`` of a per-channel constant, whose input is the output of a ``conv2d``/``conv``
    step with constant weights (and bias) read by nothing else, becomes new weights and a new
    bias of the convolution; the step disappears and the convolution writes its output.
    Repeated until nothing more folds (``conv → batch_norm → add`` folds both).
    """
    while True:
        readers: dict[str, list[int]] = {}
        for index, step in enumerate(b.steps):
            for value in step.inputs:
                readers.setdefault(value, []).append(index)
        folded = False
        for step in b.steps:
            if step.op not in _CONVS or not step.outputs:
                continue
            reading = readers.get(step.outputs[0], [])
            if len(reading) != 1:
                continue
            after = b.steps[reading[0]]
            if _fold_one(b, step, after, outputs):
                del b.steps[reading[0]]
                folded = True
                break
        if not folded:
            return


# -- fusion -------------------------------------------------------------------------------------


@dataclass
class _Group:
    steps: list[int]
    pattern: Pattern
    device: str | None


def _accepts(group: _Group, pattern: Pattern) -> bool:
    """Whether a step of ``pattern`` may join ``group`` (TVM's rule, forward)."""
    if len(group.steps) >= MAX_GROUP:
        return False
    if pattern <= Pattern.BROADCAST:
        return group.pattern <= Pattern.INJECTIVE or group.pattern == \
            Pattern.OUT_ELEMWISE_FUSABLE
    if pattern in (Pattern.INJECTIVE, Pattern.REDUCTION):
        return group.pattern <= Pattern.INJECTIVE
    return False


def fuse_steps(b: Builder, outputs: Sequence[str]) -> list[list[int]]:
    """Group step indices into fused nodes, in execution order.

    Each step, in order, considers the group that made the latest of its inputs (the group
    created last among its producers): its other inputs then come from earlier groups, so the
    groups stay in a valid execution order. It joins that group when :func:`_accepts` allows
    it and both are on the same device; otherwise it starts a group. An elementwise or
    broadcast step that joins a group also takes in its other producers' groups that are
    elementwise or broadcast and whose values it alone reads (:func:`_absorb`): the two
    ``dequantize`` steps of a QDQ residual add read two other nodes' outputs, and end in one
    group with the add and its ``quantize``, as TVM's post-dominator rule has it. A value a
    group makes and a later group (or the graph's outputs) reads becomes an output of the
    group (see :func:`graphrt.onnx.emit.emit`).
    """
    groups: list[_Group] = []
    group_of: dict[str, int] = {}  # value -> index of the group that makes it
    readers = Counter(v for step in b.steps for v in step.inputs)
    readers.update(outputs)
    for index, step in enumerate(b.steps):
        pattern = op_pattern(step.op, step.attrs, [b.types[v] for v in step.inputs
                                                   if v in b.types])  # not a sequence
        producers = [group_of[v] for v in step.inputs if v in group_of]
        target = max(producers) if producers else -1
        if target >= 0 and groups[target].device == step.device and _accepts(
                groups[target], pattern):
            if pattern <= Pattern.BROADCAST:
                for other in sorted(set(producers) - {target}):
                    _absorb(b, groups, target, other, step, readers, group_of)
            group = groups[target]
            group.steps.append(index)
            group.pattern = max(group.pattern, pattern)
        else:
            target = len(groups)
            groups.append(_Group([index], pattern, step.device))
        for value in step.outputs:
            group_of[value] = target
    return [group.steps for group in groups if group.steps]


def _absorb(b: Builder, groups: list[_Group], target: int, other: int, step: ConvertedStep,
            readers: Counter[str], group_of: dict[str, int]) -> None:
    """Move group ``other``'s steps into group ``target`` (which ``step`` joins) when
    ``other`` is elementwise or broadcast, on the same device, and ``step`` is the only
    reader of every value it makes (no graph output among them).

    The execution order stays valid: ``other`` was created before ``target`` (the latest
    producer), so whatever it reads is made before ``target`` runs, and nothing between them
    reads its values. The steps keep their order (their indices, a topological order)."""
    group, taken = groups[target], groups[other]
    made = [v for k in taken.steps for v in b.steps[k].outputs]
    if (taken.pattern > Pattern.BROADCAST or taken.device != group.device
            or len(group.steps) + len(taken.steps) >= MAX_GROUP
            or any(readers[v] != step.inputs.count(v) for v in made)):
        return
    group.steps = sorted(group.steps + taken.steps)
    group.pattern = max(group.pattern, taken.pattern)
    taken.steps = []
    for value in made:
        group_of[value] = target
