"""ONNX converters: the recurrent layers ``RNN``, ``GRU`` and ``LSTM``.

Each becomes its standard op (``rnn``, ``gru``, ``lstm``, see :mod:`graphrt.ops.recurrent`) at
every opset graphrt converts (7, 14 and 22; models of opset 1 to 6, GRU-1/3 and LSTM-1, are
upgraded by ONNX's version converter first, see :func:`graphrt.onnx.model.load_model`).

What the converter settles so the op need not:

* omitted ``B``, ``initial_h`` and ``initial_c`` become zeros; ``P`` and ``sequence_lens`` are
  passed only when given (``sequence_lens`` not even then when it is a constant holding the
  full length everywhere);
* ``hidden_size`` may be omitted (it is then ``R``'s last dimension) and must agree with
  ``W`` and ``R``; ``direction`` must agree with their first dimension;
* activation names are ONNX's, read case-insensitively as ONNX Runtime does, and their count
  must be the cell's (1, 2 or 3) per direction; ``activation_alpha`` and
  ``activation_beta`` are consumed in order by the activations that take them (ONNX Runtime's
  reading of "consumed in the order of activation functions"), and an activation they do not
  reach takes its ONNX operator's default (LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid
  0.2 and 0.5, Elu 1, Affine 1 and 0, ScaledTanh 1 and 1; ONNX Runtime uses 0 for the last
  three).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..builder import Builder
from ..model import MIN_OPSET, OnnxNode
from ..registry import converter

_ACTIVATIONS: dict[str, tuple[str, float | None, float | None]] = {
    # ONNX name (lower case) -> (op's name, default alpha, default beta); None: not used
    "relu": ("relu", None, None),
    "tanh": ("tanh", None, None),
    "sigmoid": ("sigmoid", None, None),
    "affine": ("affine", 1.0, 0.0),
    "leakyrelu": ("leaky_relu", 0.01, None),
    "thresholdedrelu": ("thresholded_relu", 1.0, None),
    "scaledtanh": ("scaled_tanh", 1.0, 1.0),
    "hardsigmoid": ("hard_sigmoid", 0.2, 0.5),
    "elu": ("elu", 1.0, None),
    "softsign": ("softsign", None, None),
    "softplus": ("softplus", None, None),
}
_ONNX_NAMES = ("Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
               "HardSigmoid, Elu, Softsign, Softplus")
_GATES = {"rnn": 1, "gru": 3, "lstm": 4}
_DEFAULTS = {"rnn": ["tanh"], "gru": ["sigmoid", "tanh"], "lstm": ["sigmoid", "tanh", "tanh"]}
"""Per cell: its gate count and its activations (ONNX's defaults, one direction)."""
_DIRECTIONS = ("forward", "reverse", "bidirectional")
_FLOATS = ("float16", "float32", "float64")


def _flag(n: OnnxNode, key: str) -> bool:
    value = n.attr(key, 0)
    if value not in (0, 1):
        raise n.fail(f"{key} must be 0 or 1, given {value!r}")
    return bool(value)


def _activations(n: OnnxNode, op: str, directions: int
                 ) -> tuple[list[str] | None, list[float] | None, list[float] | None]:
    """The op's activations and their per-activation alpha and beta (None: the defaults)."""
    names = n.attr("activations", None)
    alphas = [float(v) for v in n.attr("activation_alpha", [])]
    betas = [float(v) for v in n.attr("activation_beta", [])]
    per = len(_DEFAULTS[op])
    if names is None:
        if alphas or betas:
            names = _DEFAULTS[op] * directions
        else:
            return None, None, None
    names = list(names)
    if len(names) != per * directions:
        direction = n.attr("direction", "forward")
        raise n.fail(f"activations must name {per * directions} functions ({per} per direction, "
                     f"direction {direction!r}), given {len(names)}: {names}")
    resolved, alpha, beta = [], [], []
    next_alpha, next_beta = iter(alphas), iter(betas)
    for name in names:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise n.fail(f"unknown activation {name!r} (expected one of {_ONNX_NAMES})")
        fn, default_alpha, default_beta = entry
        resolved.append(fn)
        alpha.append(0.0 if default_alpha is None else next(next_alpha, default_alpha))
        beta.append(0.0 if default_beta is None else next(next_beta, default_beta))
    return resolved, alpha, beta


def _zeros(b: Builder, shape: tuple[int, ...], dtype: str) -> str:
    return b.filled(0, shape, dtype)


@converter("RNN", "GRU", "LSTM", since=MIN_OPSET)
def recurrent(b: Builder, n: OnnxNode) -> list[str]:
    """RNN, GRU and LSTM (opsets 7, 14 and 22: ``layout`` from 14)."""
    op = n.op_type.lower()
    x, w, r = n.inputs[0], n.input(1), n.input(2)
    if w is None or r is None:
        raise n.fail("inputs W and R are required")
    dtype = b.dtype(x)
    if dtype not in _FLOATS:
        raise n.fail(f"X must be {', '.join(_FLOATS)}, given {dtype}")
    direction = n.attr("direction", "forward")
    if direction not in _DIRECTIONS:
        raise n.fail(f"direction must be one of {', '.join(map(repr, _DIRECTIONS))}, given "
                     f"{direction!r}")
    layout = n.attr("layout", 0)
    if layout not in (0, 1):
        raise n.fail(f"layout must be 0 (sequence-major) or 1 (batch-major), given {layout!r}")
    d, g = (2 if direction == "bidirectional" else 1), _GATES[op]
    x_shape, w_shape, r_shape = b.shape(x), b.shape(w), b.shape(r)
    if len(x_shape) != 3:
        raise n.fail(f"X must be 3-D, given shape {list(x_shape)}")
    if len(w_shape) != 3 or len(r_shape) != 3:
        raise n.fail(f"W and R must be 3-D, given shapes {list(w_shape)} and {list(r_shape)}")
    hidden = n.attr("hidden_size", None)
    hidden = int(r_shape[2]) if hidden is None else int(hidden)
    if hidden < 1:
        raise n.fail(f"hidden_size must be >= 1, given {hidden}")
    batch = x_shape[0] if layout else x_shape[1]
    expected_w = (d, g * hidden, x_shape[2])
    if w_shape != expected_w or r_shape != (d, g * hidden, hidden):
        raise n.fail(f"hidden_size {hidden} and direction {direction!r} need W of shape "
                     f"{list(expected_w)} and R of shape {[d, g * hidden, hidden]} ({g} gate(s) "
                     f"of {hidden} per direction), given {list(w_shape)} and {list(r_shape)}")
    state = (batch, d, hidden) if layout else (d, batch, hidden)
    bias = n.input(3)
    inputs = [x, w, r, bias if bias is not None else _zeros(b, (d, 2 * g * hidden), dtype)]
    initial_h = n.input(5)
    inputs.append(initial_h if initial_h is not None else _zeros(b, state, dtype))
    attrs: dict[str, Any] = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "lstm":
        initial_c = n.input(6)
        inputs.append(initial_c if initial_c is not None else _zeros(b, state, dtype))
        peepholes = n.input(7)
        if peepholes is not None:
            inputs.append(peepholes)
            attrs["peepholes"] = True
        attrs["input_forget"] = _flag(n, "input_forget")
    if op == "gru":
        attrs["linear_before_reset"] = _flag(n, "linear_before_reset")
    lens = n.input(4)
    seq = x_shape[1] if layout else x_shape[0]
    if lens is not None and not (b.is_constant(lens) and bool(
            np.all(b.constant_value(lens) == seq))):
        inputs.append(lens)
        attrs["sequence_lens"] = True
    activations, alpha, beta = _activations(n, op, d)
    if activations is not None:
        attrs.update(activations=activations, activation_alpha=alpha, activation_beta=beta)
    clip = n.attr("clip", None)
    if clip is not None:
        if not float(clip) > 0:
            raise n.fail(f"clip must be > 0, given {clip!r}")
        attrs["clip"] = float(clip)
    return b.op(op, inputs, attrs)
