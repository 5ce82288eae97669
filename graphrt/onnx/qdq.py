"""QDQ-format quantized models: a convolution or a matrix product between dequantize and
quantize steps becomes the integer ``qlinear_conv`` or ``qlinear_matmul`` (ONNX Runtime's QDQ
fusion).

A model quantized in the QDQ format (ONNX Runtime's ``quantize_static``, the default) keeps
float operators and wraps them: ``DequantizeLinear`` of the 8-bit activation and of the 8-bit
weight (and of the int32 bias) feed a float ``Conv`` whose output goes straight to
``QuantizeLinear``. Run as written, every convolution is computed in float on dequantized
copies, with a pass per dequantize and quantize. :func:`fuse_qdq` rewrites each such pattern
into one ``qlinear_conv`` on the 8-bit values (its int32 sum requantized once), as the
``QOperator`` format would have it:

    dequantize(xq, xs, xz) ──┐
    dequantize(wq, ws, wz) ──┼─ conv ─ [relu] ─ quantize(ys, yz) ─→ yq
    dequantize(bq, xs·ws) ───┘
        ⇒ qlinear_conv(xq, xs, xz, wq, ws, wz, ys, yz, bq) ─ [maximum(·, yz)] ─→ yq

A max pool between a dequantize and a quantize of the same scale and zero point runs on the
8-bit values (ONNX Runtime's QDQ rule for MaxPool): dequantizing is monotone, so the maximum
of the dequantized window is the dequantized maximum, and the quantize gives back the 8-bit
value exactly (``(x - z) * s / s`` is within two float32 roundings of ``x - z``); a window
in the padding alone gives ``-inf``, which quantizes to the dtype's lowest value, the 8-bit
pool's padding.

Likewise ``dequantize(a) → matmul → quantize`` with ``b`` a dequantized activation (the
attention's products) or a constant weight a dequantize made, per tensor or per column,
becomes ``qlinear_matmul(aq, as, az, bq, bs, bz, ys, yz)`` (no relu between, no transposes).

What must hold for a convolution, else the steps stay as they are: the weight (and bias)
are constants made by a dequantize at conversion (the 8-bit weight is read back from that
step, see :attr:`Builder.made <graphrt.onnx.builder.Builder.made>`); the activation's and
the output's scales and zero points are constant and per tensor, the weight's per tensor or
per output channel (``axis`` 0); the bias, if any, is int32 with zero point 0 and the scale
``xs * ws`` (within float32 rounding); the convolution's output is read by the quantize (or
a relu read only by it) alone, is float32 and no graph output. A relu between becomes
``maximum(yq, yz)``: quantizing is monotone and maps 0 to ``yz``, so the two agree exactly.

The result differs from the float path only where the float path's own rounding (the float32
convolution, then the division by ``ys``) lands on the other side of a half: by one
quantization step, on rare ties, as ONNX Runtime's fused kernels do.

Example:
    >>> import numpy as np
    >>> from graphrt.onnx.builder import Builder, TensorType
    >>> b = Builder()
    >>> x = b.input("x", TensorType((1, 2, 4, 4), "uint8"))
    >>> one = lambda v, t: b.constant(np.array(v, t))
    >>> (xf,) = b.op("dequantize", [x, one(0.1, "float32"), one(3, "uint8")])
    >>> (wf,) = b.op("dequantize", [b.constant(np.ones((3, 2, 1, 1), np.int8)),
    ...                             one(0.5, "float32"), one(0, "int8")])
    >>> (yf,) = b.op("conv2d", [xf, wf], {"strides": [1, 1], "padding": [0, 0, 0, 0],
    ...                                   "dilation": [1, 1], "groups": 1})
    >>> (yq,) = b.op("quantize", [yf, one(0.2, "float32"), one(5, "uint8")])
    >>> fuse_qdq(b, [yq])
    >>> [step.op for step in b.steps]
    ['qlinear_conv']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .builder import Builder, ConvertedStep

__all__ = ["fuse_qdq"]

_CONVS = ("conv2d", "conv")
_CONV_ATTRS = ("strides", "padding", "dilation", "groups")
_INTS = ("int8", "uint8")
_MAX_POOLS = ("max_pool2d", "max_pool")


def fuse_qdq(b: Builder, outputs: Sequence[str]) -> None:
    """Rewrite every dequantize → conv → [relu →] quantize of ``b`` into ``qlinear_conv``,
    dequantize → matmul → quantize into ``qlinear_matmul``, and a max pool between a
    dequantize and a quantize alike onto the 8-bit values (see the module docstring);
    other steps are left alone."""
    made_by = {out: step for step in b.steps for out in step.outputs}
    readers: dict[str, list[ConvertedStep]] = {}
    for step in b.steps:
        for value in step.inputs:
            readers.setdefault(value, []).append(step)
    replaced: dict[int, list[ConvertedStep]] = {}  # id of the conv step → its replacement
    dropped: set[int] = set()
    for step in b.steps:
        if step.op in _CONVS:
            found = _pattern(b, step, made_by, readers, outputs)
        elif step.op == "matmul":
            found = _matmul_pattern(b, step, made_by, readers, outputs)
        elif step.op in _MAX_POOLS:
            found = _pool_pattern(b, step, made_by, readers, outputs)
        else:
            continue
        if found is None:
            continue
        new, removed = found
        replaced[id(step)] = new
        dropped.update(id(s) for s in removed)
    if not replaced:
        return
    steps: list[ConvertedStep] = []
    for step in b.steps:
        if id(step) in replaced:
            steps.extend(replaced[id(step)])
        elif id(step) not in dropped:
            steps.append(step)
    b.steps[:] = _without_dead_dequantizes(steps, outputs)


def _pattern(b: Builder, conv: ConvertedStep, made_by: dict[str, ConvertedStep],
             readers: dict[str, list[ConvertedStep]], outputs: Sequence[str]
             ) -> tuple[list[ConvertedStep], list[ConvertedStep]] | None:
    """The replacement steps of ``conv`` and the steps they replace, or None."""
    if len(conv.outputs) != 1 or len(conv.inputs) not in (2, 3):
        return None
    activation = _activation(b, made_by.get(conv.inputs[0]))
    weight = _weight(b, b.made.get(conv.inputs[1]), 3, False)
    if activation is None or weight is None:
        return None
    bias: list[str] = []
    if len(conv.inputs) == 3:
        found = _bias(b, b.made.get(conv.inputs[2]), activation[1], weight[1])
        if found is None:
            return None
        bias = [found]
    tail = _tail(b, conv.outputs[0], readers, outputs)
    if tail is None:
        return None
    quantize, relu = tail
    attrs: dict[str, Any] = {key: conv.attrs[key] for key in _CONV_ATTRS if key in conv.attrs}
    y_scale, y_zero = quantize.inputs[1], _zero(b, quantize)
    out = quantize.outputs[0]
    inputs = [*activation, *weight, y_scale, y_zero, *bias]
    removed = [quantize] + ([relu] if relu is not None else [])
    if relu is None:
        return [ConvertedStep("qlinear_conv", inputs, [out], attrs, conv.source,
                              conv.device)], removed
    summed = b.value("qlinear_conv", b.type(out))  # the output before the relu
    return [ConvertedStep("qlinear_conv", inputs, [summed], attrs, conv.source, conv.device),
            ConvertedStep("maximum", [summed, y_zero], [out], {}, relu.source, relu.device)
            ], removed


def _matmul_pattern(b: Builder, matmul: ConvertedStep, made_by: dict[str, ConvertedStep],
                    readers: dict[str, list[ConvertedStep]], outputs: Sequence[str]
                    ) -> tuple[list[ConvertedStep], list[ConvertedStep]] | None:
    """The ``qlinear_matmul`` replacing dequantize → matmul → quantize, and the steps it
    replaces, or None: ``a`` a per-tensor dequantized activation, ``b`` one too or a constant
    weight a dequantize made, per tensor or per column (``axis`` its last)."""
    if matmul.attrs.get("transpose_a") or matmul.attrs.get("transpose_b"):
        return None
    if len(matmul.outputs) != 1 or len(matmul.inputs) != 2:
        return None
    a = _activation(b, made_by.get(matmul.inputs[0]))
    right = matmul.inputs[1]
    w = (_activation(b, made_by.get(right)) if not b.is_constant(right)
         else _weight(b, b.made.get(right), 2, True))
    if a is None or w is None:
        return None
    tail = _tail(b, matmul.outputs[0], readers, outputs)
    if tail is None or tail[1] is not None:  # a relu between: left as it is
        return None
    quantize = tail[0]
    inputs = [*a, *w, quantize.inputs[1], _zero(b, quantize)]
    return [ConvertedStep("qlinear_matmul", inputs, [quantize.outputs[0]], {},
                          matmul.source, matmul.device)], [quantize]


def _pool_pattern(b: Builder, pool: ConvertedStep, made_by: dict[str, ConvertedStep],
                  readers: dict[str, list[ConvertedStep]], outputs: Sequence[str]
                  ) -> tuple[list[ConvertedStep], list[ConvertedStep]] | None:
    """The max pool of the 8-bit values replacing dequantize → max pool → quantize (the
    quantize's scale and zero point the dequantize's, the scale positive), and the quantize
    it replaces, or None."""
    if len(pool.outputs) != 1 or len(pool.inputs) != 1 or pool.attrs.get("indices"):
        return None
    activation = _activation(b, made_by.get(pool.inputs[0]))
    tail = _tail(b, pool.outputs[0], readers, outputs)
    if activation is None or tail is None or tail[1] is not None:
        return None
    (xq, xs, xz), quantize = activation, tail[0]
    ys, yz = quantize.inputs[1], _zero(b, quantize)
    scale = b.constants[xs].reshape(-1)
    if not (b.dtype(quantize.outputs[0]) == b.dtype(xq) == b.dtype(yz) == b.dtype(xz)
            and np.isfinite(scale).all() and (scale > 0).all()
            and all(np.array_equal(b.constants[p].reshape(-1), b.constants[q].reshape(-1))
                    for p, q in ((xs, ys), (xz, yz)))):
        return None
    return [ConvertedStep(pool.op, [xq], [quantize.outputs[0]], dict(pool.attrs),
                          pool.source, pool.device)], [quantize]


def _scalar(b: Builder, name: str) -> str:
    """A one-element constant as a 0-d one (others as they are)."""
    value = b.constants[name]
    return b.constant(value.reshape(())) if value.size == 1 and value.ndim else name


def _per_tensor(b: Builder, name: str) -> bool:
    return b.is_constant(name) and b.constants[name].size == 1


def _zero(b: Builder, step: ConvertedStep) -> str:
    """The zero point of a quantize or dequantize step (a constant 0 where it has none)."""
    if len(step.inputs) == 3:
        return step.inputs[2]
    dtype = step.attrs.get("dtype", "uint8") if step.op == "quantize" else \
        b.dtype(step.inputs[0])
    return b.constant(np.zeros((), dtype))


def _plain(step: ConvertedStep) -> bool:
    """A dequantize or quantize with no blocks (per tensor or per axis)."""
    return not step.attrs.get("block_size", 0)


def _activation(b: Builder, step: ConvertedStep | None) -> list[str] | None:
    """``[xq, xs, xz]`` of a per-tensor dequantize of 8-bit data into float32."""
    if step is None or step.op != "dequantize" or not _plain(step):
        return None
    if step.attrs.get("dtype", "float32") != "float32" or b.dtype(step.inputs[0]) not in _INTS:
        return None
    if not all(_per_tensor(b, name) for name in step.inputs[1:]):
        return None
    if b.dtype(step.inputs[1]) != "float32":
        return None
    return [step.inputs[0], step.inputs[1], _zero(b, step)]


def _weight(b: Builder, step: ConvertedStep | None, rank: int, last: bool
            ) -> list[str] | None:
    """``[wq, ws, wz]`` of the constant 8-bit weight (of ``rank`` axes at least) a dequantize
    made, per tensor or per slice along its first axis (a convolution's output channels) or
    its ``last`` (a product's columns)."""
    if step is None or step.op != "dequantize" or not _plain(step):
        return None
    wq = step.inputs[0]
    if not b.is_constant(wq) or b.dtype(wq) not in _INTS or len(b.shape(wq)) < rank:
        return None
    if step.attrs.get("dtype", "float32") != "float32" or b.dtype(step.inputs[1]) != "float32":
        return None
    params = step.inputs[1:]
    if not all(b.is_constant(p) for p in params):
        return None
    ndim = len(b.shape(wq))
    along = ndim - 1 if last else 0
    slices = b.shape(wq)[along]
    per_slice = step.attrs.get("axis", 1) % ndim == along and all(
        b.shape(p) == (slices,) for p in params)
    if not (per_slice or {b.constants[p].size for p in params} == {1}):
        return None
    return [wq, _scalar(b, params[0]), _scalar(b, _zero(b, step))]


def _bias(b: Builder, step: ConvertedStep | None, x_scale: str, w_scale: str) -> str | None:
    """The int32 bias a dequantize with zero point 0 and scale ``xs * ws`` made."""
    if step is None or step.op != "dequantize" or not _plain(step):
        return None
    bq = step.inputs[0]
    if not b.is_constant(bq) or b.dtype(bq) != "int32" or len(b.shape(bq)) != 1:
        return None
    if not b.is_constant(step.inputs[1]):
        return None
    if len(step.inputs) == 3 and (not b.is_constant(step.inputs[2])
                                  or np.any(b.constants[step.inputs[2]] != 0)):
        return None
    expected = (b.constants[x_scale].astype(np.float32).reshape(())
                * b.constants[w_scale].astype(np.float32))
    scale = np.broadcast_to(b.constants[step.inputs[1]].astype(np.float32).reshape(-1),
                            (b.shape(bq)[0],))
    if not np.allclose(scale, np.broadcast_to(expected.reshape(-1), scale.shape),
                       rtol=1e-6, atol=0):
        return None
    return bq


def _tail(b: Builder, value: str, readers: dict[str, list[ConvertedStep]],
          outputs: Sequence[str]) -> tuple[ConvertedStep, ConvertedStep | None] | None:
    """The per-tensor quantize into 8 bits that alone reads float32 ``value`` (or the relu
    that alone reads it and is itself read by such a quantize alone), and the relu."""
    relu = None
    reading = readers.get(value, [])
    if value in outputs or len(reading) != 1 or b.dtype(value) != "float32":
        return None
    step = reading[0]
    if step.op == "relu":
        relu = step
        value = step.outputs[0]
        reading = readers.get(value, [])
        if value in outputs or len(reading) != 1:
            return None
        step = reading[0]
    if step.op != "quantize" or step.inputs[0] != value or not _plain(step):
        return None
    if step.attrs.get("dtype", "uint8") not in _INTS or step.attrs.get("precision"):
        return None
    if not all(_per_tensor(b, name) for name in step.inputs[1:]):
        return None
    if b.dtype(step.inputs[1]) != "float32":
        return None
    return step, relu


def _without_dead_dequantizes(steps: list[ConvertedStep], outputs: Sequence[str]
                              ) -> list[ConvertedStep]:
    """``steps`` less the dequantizes whose output nothing reads any more."""
    read = set(outputs)
    for step in steps:
        read.update(step.inputs)
    return [s for s in steps if s.op != "dequantize" or any(o in read for o in s.outputs)]

