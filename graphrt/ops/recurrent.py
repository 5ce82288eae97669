"""Standard ops: recurrent layers (numpy and cupy): ``rnn``, ``gru`` and ``lstm``.

One op per cell, each ONNX's layer of the same name (``RNN``, ``GRU``, ``LSTM``): the cells
differ in their gate count, inputs (``lstm``'s cell state and peepholes), outputs (``lstm``'s
``Y_c``) and attributes (``gru``'s ``linear_before_reset``, ``lstm``'s ``input_forget``), so
three ops keep each op's attributes exact (unknown keys refused) and let a device give one cell
its own kernel; the time loop, directions, masking and activations are shared.

Inputs, in order (``D`` directions, ``G`` gates: 1, 3 or 4, ``H = hidden_size``):

* ``X``: ``[seq, batch, input]`` (``layout=1``: ``[batch, seq, input]``).
* ``W``: ``[D, G*H, input]``, ``R``: ``[D, G*H, H]``, ``B``: ``[D, 2*G*H]`` (``Wb`` then
  ``Rb``), gates in ONNX's order: ``z, r, h`` (GRU) and ``i, o, f, c`` (LSTM).
* ``initial_h``: ``[D, batch, H]`` (``layout=1``: ``[batch, D, H]``); ``lstm`` then takes
  ``initial_c`` of the same shape and, where ``peepholes``, ``P``: ``[D, 3*H]`` (``i, o, f``).
* ``sequence_lens`` (int32 or int64, ``[batch]``), last, where the ``sequence_lens`` attribute
  says so: each sequence's length. Steps past it give 0 in ``Y``; ``Y_h``/``Y_c`` hold the
  state after the sequence's last step (0 for a sequence of length 0, as ONNX Runtime gives);
  the reverse direction starts at each sequence's own last step.

Outputs: ``Y`` ``[seq, D, batch, H]`` (``layout=1``: ``[batch, seq, D, H]``), ``Y_h``
(``initial_h``'s shape) and, for ``lstm``, ``Y_c``.

Activations are ONNX's (``Relu``, ``Tanh``, ``Sigmoid``, ``Affine``, ``LeakyRelu``,
``ThresholdedRelu``, ``ScaledTanh``, ``HardSigmoid``, ``Elu``, ``Softsign``, ``Softplus``), one
list for all directions (forward's, then reverse's), with one ``alpha`` and one ``beta`` per
activation (the ONNX converter resolves ONNX's consumption order and defaults). ``clip`` bounds
every gate's input to its activation, peepholes included (not the cell state before ``lstm``'s
``h``, which ONNX Runtime does not clip either).

The loop over time steps is Python: per step one GEMM of the hidden state with ``R`` (two for
GRU without ``linear_before_reset``) and a few in-place elementwise passes over the workspace;
``X @ W^T`` for all steps is one GEMM per direction. float16 computes in float32 and rounds once
into the outputs. The scratch (``X @ W^T``, the gates, the states) is the op's workspace,
planned by the executor; float16 weights are cast to float32 at each call.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> x = np.ones((2, 1, 1), np.float32)                  # seq 2, batch 1, input 1
    >>> w, r = np.ones((1, 1, 1), np.float32), np.zeros((1, 1, 1), np.float32)
    >>> b, h0 = np.zeros((1, 2), np.float32), np.zeros((1, 1, 1), np.float32)
    >>> attrs = RnnAttrs(hidden_size=1, activations=["relu"])
    >>> y, y_h = np.empty((2, 1, 1, 1), np.float32), np.empty((1, 1, 1), np.float32)
    >>> get_op("rnn").compute(np, [x, w, r, b, h0], [y, y_h], attrs)
    >>> y.ravel().tolist(), y_h.ravel().tolist()
    ([1.0, 1.0], [1.0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, accumulator, register_op

__all__ = ["ACTIVATIONS", "GruAttrs", "LstmAttrs", "RecurrentAttrs", "RnnAttrs"]

Activation = Literal["relu", "tanh", "sigmoid", "affine", "leaky_relu", "thresholded_relu",
                     "scaled_tanh", "hard_sigmoid", "elu", "softsign", "softplus"]

ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "sigmoid", "affine", "leaky_relu",
                                "thresholded_relu", "scaled_tanh", "hard_sigmoid", "elu",
                                "softsign", "softplus")
"""The activation names the ops take (ONNX's, in snake case)."""

_GATES = {"rnn": 1, "gru": 3, "lstm": 4}
_DEFAULTS = {"rnn": ("tanh",), "gru": ("sigmoid", "tanh"), "lstm": ("sigmoid", "tanh", "tanh")}
_FLOATS = ("float16", "float32", "float64")


class RecurrentAttrs(Attrs):
    """What every recurrent op takes.

    Attributes:
        hidden_size: ``H``, the hidden state's width.
        direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"`` (then ``D = 2``).
        activations: the activations of every direction (forward's, then reverse's: ``f``
            for ``rnn``, ``f, g`` for ``gru``, ``f, g, h`` for ``lstm``); None: ONNX's
            defaults (tanh; sigmoid, tanh; sigmoid, tanh, tanh).
        activation_alpha, activation_beta: one value per activation (unused ones are
            ignored); None: 0 for each.
        clip: bound of every gate's input to its activation (``[-clip, clip]``; not of the
            cell state before ``lstm``'s ``h``, as in ONNX Runtime); None: no clip.
        layout: 0 (sequence-major tensors) or 1 (batch-major).
        sequence_lens: whether the last input is ``sequence_lens``.
    """

    hidden_size: Annotated[int, Field(ge=1)]
    direction: Literal["forward", "reverse", "bidirectional"] = "forward"
    activations: list[Activation] | None = None
    activation_alpha: list[float] | None = None
    activation_beta: list[float] | None = None
    clip: Annotated[float, Field(gt=0.0)] | None = None
    layout: Literal[0, 1] = 0
    sequence_lens: bool = False


class RnnAttrs(RecurrentAttrs):
    """``rnn``: ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``."""


class GruAttrs(RecurrentAttrs):
    """``gru``; ``linear_before_reset`` applies the reset gate after the product with ``R_h``
    (``r * (H_{t-1} R_h^T + Rb_h)``) instead of before it (``(r * H_{t-1}) R_h^T + Rb_h``)."""

    linear_before_reset: bool = False


class LstmAttrs(RecurrentAttrs):
    """``lstm``; ``input_forget`` couples the forget gate to the input gate (``f = 1 - i``);
    ``peepholes``: the input after ``initial_c`` is ``P``."""

    input_forget: bool = False
    peepholes: bool = False


# --------------------------------------------------------------------------------------------
# shape functions


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _expect(name: str, role: str, t: TensorType, shape: tuple[int, ...], dtype: str) -> None:
    if t.shape != shape:
        raise OpError(f"{name}: {role} must have shape {list(shape)}, given {list(t.shape)}")
    if t.dtype != dtype:
        raise OpError(f"{name}: {role} must have X's dtype {dtype}, given {t.dtype}")


def _directions(attrs: RecurrentAttrs) -> int:
    return 2 if attrs.direction == "bidirectional" else 1


def _roles(name: str, attrs: RecurrentAttrs) -> list[str]:
    roles = ["X", "W", "R", "B", "initial_h"]
    if name == "lstm":
        roles.append("initial_c")
        if isinstance(attrs, LstmAttrs) and attrs.peepholes:
            roles.append("P")
    if attrs.sequence_lens:
        roles.append("sequence_lens")
    return roles


def _check_activations(name: str, attrs: RecurrentAttrs) -> None:
    count = len(_DEFAULTS[name]) * _directions(attrs)
    acts = attrs.activations
    if acts is not None and len(acts) != count:
        raise OpError(f"{name}: direction {attrs.direction!r} takes {count} activations, given "
                      f"{len(acts)} ({', '.join(acts)})")
    given = count if acts is None else len(acts)
    for key in ("activation_alpha", "activation_beta"):
        values = getattr(attrs, key)
        if values is not None and len(values) != given:
            raise OpError(f"{name}: {key} must have one value per activation ({given}), given "
                          f"{len(values)}")


def _infer(name: str) -> Callable[[Sequence[TensorType], Any, Sequence[Any]],
                                  list[TensorType]]:
    def infer(types: Sequence[TensorType], attrs: RecurrentAttrs, data: Sequence[Any]
              ) -> list[TensorType]:
        roles = _roles(name, attrs)
        if len(types) != len(roles):
            raise OpError(f"{name}: expected {len(roles)} inputs ({', '.join(roles)}), given "
                          f"{len(types)}")
        x = types[0]
        if x.dtype not in _FLOATS:
            raise OpError(f"{name}: X must be float16, float32 or float64, given {x.dtype}")
        if x.ndim != 3:
            order = "[batch, seq, input]" if attrs.layout else "[seq, batch, input]"
            raise OpError(f"{name}: X must be 3-D ({order}), given {_show(x)}")
        _check_activations(name, attrs)
        seq, batch = (x.shape[1], x.shape[0]) if attrs.layout else x.shape[:2]
        d, g, h = _directions(attrs), _GATES[name], attrs.hidden_size
        state = (batch, d, h) if attrs.layout else (d, batch, h)
        shapes = {"W": (d, g * h, x.shape[2]), "R": (d, g * h, h), "B": (d, 2 * g * h),
                  "initial_h": state, "initial_c": state, "P": (d, 3 * h)}
        for role, t in zip(roles[1:], types[1:], strict=True):
            if role == "sequence_lens":
                if t.shape != (batch,) or t.dtype not in ("int32", "int64"):
                    raise OpError(f"{name}: sequence_lens must be int32 or int64 of shape "
                                  f"[{batch}] (the batch), given {_show(t)}")
            else:
                _expect(name, role, t, shapes[role], x.dtype)
        y = (batch, seq, d, h) if attrs.layout else (seq, d, batch, h)
        outs = [TensorType(y, x.dtype), TensorType(state, x.dtype)]
        if name == "lstm":
            outs.append(TensorType(state, x.dtype))
        return outs

    return infer


def _workspace(name: str) -> Callable[[Any, Sequence[TensorType], Any], list[TensorType]]:
    """Scratch of one call, in the work dtype: ``X W^T`` for every step (in X's layout), the
    gates of a step, and five ``[batch, H]`` state buffers (the state and the next one, the
    cell state and the next one, a temporary; the cell's are empty but for ``lstm``)."""

    def workspace(xp: Any, types: Sequence[TensorType], attrs: RecurrentAttrs
                  ) -> list[TensorType]:
        x = types[0]
        work = accumulator(x.dtype).name
        gh = _GATES[name] * attrs.hidden_size
        state = (x.shape[0] if attrs.layout else x.shape[1], attrs.hidden_size)
        cell = state if name == "lstm" else (0,)
        return [TensorType((x.shape[0], x.shape[1], gh), work),
                TensorType((state[0], gh), work), TensorType(state, work),
                TensorType(state, work), TensorType(cell, work), TensorType(cell, work),
                TensorType(state, work)]

    return workspace


# --------------------------------------------------------------------------------------------
# activations, in place


def _activate(xp: Any, name: str, alpha: float, beta: float, x: Any) -> None:
    """``x = name(x)`` in place (ONNX's definitions)."""
    if name == "tanh":
        xp.tanh(x, out=x)
    elif name == "sigmoid":  # 1/(1+e^-x) through tanh: no overflow for large |x|
        x *= 0.5
        xp.tanh(x, out=x)
        x *= 0.5
        x += 0.5
    elif name == "relu":
        xp.maximum(x, 0, out=x)
    elif name == "affine":
        x *= alpha
        x += beta
    elif name == "leaky_relu":
        x[...] = xp.where(x >= 0, x, x * alpha)
    elif name == "thresholded_relu":
        x[...] = xp.where(x > alpha, x, 0)
    elif name == "scaled_tanh":
        x *= beta
        xp.tanh(x, out=x)
        x *= alpha
    elif name == "hard_sigmoid":
        x *= alpha
        x += beta
        xp.clip(x, 0, 1, out=x)
    elif name == "elu":
        x[...] = xp.where(x >= 0, x, alpha * xp.expm1(xp.minimum(x, 0)))
    elif name == "softsign":
        x /= xp.abs(x) + 1
    elif name == "softplus":
        xp.logaddexp(x, 0, out=x)
    else:  # pragma: no cover - the attrs model admits only the names above
        raise OpError(f"unknown activation {name!r} (known: {', '.join(ACTIVATIONS)})")


Act = Callable[[Any], None]


def _activations(xp: Any, name: str, attrs: RecurrentAttrs, direction: int) -> list[Act]:
    """The activation functions of ``direction``, each with the clip before it but ``lstm``'s
    ``h`` (of the cell state, not a gate: ONNX Runtime does not clip it)."""
    per = len(_DEFAULTS[name])
    names = list(attrs.activations or _DEFAULTS[name] * _directions(attrs))
    alphas = attrs.activation_alpha or [0.0] * len(names)
    betas = attrs.activation_beta or [0.0] * len(names)
    acts: list[Act] = []
    for k in range(direction * per, (direction + 1) * per):
        clip = None if name == "lstm" and k % per == 2 else attrs.clip

        def act(x: Any, fn: str = names[k], a: float = alphas[k], b: float = betas[k],
                clip: float | None = clip) -> None:
            if clip is not None:
                xp.clip(x, -clip, clip, out=x)
            _activate(xp, fn, a, b, x)

        acts.append(act)
    return acts


# --------------------------------------------------------------------------------------------
# the time loop


def _as(array: Any, dtype: Any) -> Any:
    return array if array.dtype == dtype else array.astype(dtype)


class _Step:
    """What one direction's step needs: the weights in the work dtype and the buffers."""

    def __init__(self, xp: Any, name: str, attrs: RecurrentAttrs, d: int, r: Any, b: Any,
                 p: Any, spaces: Sequence[Any]) -> None:
        self.xp = xp
        self.h_size = h = attrs.hidden_size
        work = spaces[0].dtype
        self.r_t = _as(r[d], work).T  # [H, G*H]
        self.acts = _activations(xp, name, attrs, d)
        self.gates, self.h, self.h_next, self.c, self.c_next, self.temp = spaces[1:]
        self.rb_h = None
        if name == "gru" and isinstance(attrs, GruAttrs) and attrs.linear_before_reset:
            self.rb_h = _as(b[d, 5 * h:], work)
        self.p = None if p is None else _as(p[d], work)


def _rnn_step(s: _Step, xw: Any) -> None:
    xp, g = s.xp, s.gates
    xp.matmul(s.h, s.r_t, out=g)
    g += xw
    s.acts[0](g)
    s.h_next[...] = g


def _gru_step(s: _Step, xw: Any) -> None:
    xp, g, h, hs = s.xp, s.gates, s.h, s.h_size
    f, act_g = s.acts
    if s.rb_h is not None:  # linear before reset: one product with all of R
        xp.matmul(h, s.r_t, out=g)
        zr, cand = g[:, :2 * hs], g[:, 2 * hs:]
        zr += xw[:, :2 * hs]
        f(zr)
        z = g[:, :hs]
        cand += s.rb_h
        cand *= g[:, hs:2 * hs]
    else:  # the gate buffer as two contiguous blocks: [batch, 2H] and [batch, H]
        flat = g.reshape(-1)
        zr = flat[:2 * hs * h.shape[0]].reshape(h.shape[0], 2 * hs)
        cand = flat[2 * hs * h.shape[0]:].reshape(h.shape)
        xp.matmul(h, s.r_t[:, :2 * hs], out=zr)
        zr += xw[:, :2 * hs]
        f(zr)
        z = zr[:, :hs]
        xp.multiply(zr[:, hs:], h, out=s.temp)
        xp.matmul(s.temp, s.r_t[:, 2 * hs:], out=cand)
    cand += xw[:, 2 * hs:]
    act_g(cand)
    # (1 - z) * cand + z * h = cand + z * (h - cand)
    nxt = s.h_next
    xp.subtract(h, cand, out=nxt)
    nxt *= z
    nxt += cand


def _lstm_step(s: _Step, xw: Any, input_forget: bool) -> None:
    xp, g, hs, c, temp = s.xp, s.gates, s.h_size, s.c, s.temp
    f, act_g, act_h = s.acts
    xp.matmul(s.h, s.r_t, out=g)
    g += xw
    gi, go, gf, gc = g[:, :hs], g[:, hs:2 * hs], g[:, 2 * hs:3 * hs], g[:, 3 * hs:]
    p = s.p
    if p is not None:
        xp.multiply(c, p[:hs], out=temp)
        gi += temp
    f(gi)
    if input_forget:
        xp.subtract(1, gi, out=gf)
    else:
        if p is not None:
            xp.multiply(c, p[2 * hs:], out=temp)
            gf += temp
        f(gf)
    act_g(gc)
    cn = s.c_next
    xp.multiply(gf, c, out=cn)
    gi *= gc
    cn += gi
    if p is not None:
        xp.multiply(cn, p[hs:2 * hs], out=temp)
        go += temp
    f(go)
    temp[...] = cn
    act_h(temp)
    xp.multiply(temp, go, out=s.h_next)


def _lengths(xp: Any, lens: Any, seq: int, name: str) -> tuple[int, int]:
    """The least and greatest sequence length (read back once), checked against ``seq``."""
    if lens.size == 0:
        return seq, seq
    low, high = int(lens.min()), int(lens.max())
    if low < 0 or high > seq:
        raise OpError(f"{name}: sequence_lens must lie in [0, {seq}] (the sequence length), "
                      f"given values in [{low}, {high}]")
    return low, high


def _compute(name: str) -> Callable[[Any, Sequence[Any], Sequence[Any], Any], None]:
    n_out = 3 if name == "lstm" else 2
    workspace = _workspace(name)

    def compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: RecurrentAttrs) -> None:
        x, w, r, b, h0 = inputs[:5]
        lstm = name == "lstm"
        peepholes = lstm and isinstance(attrs, LstmAttrs) and attrs.peepholes
        c0 = inputs[5] if lstm else None
        p = inputs[6] if peepholes else None
        lens: Any = inputs[-1] if attrs.sequence_lens else None
        outs = outputs[:n_out]
        spaces = list(outputs[n_out:])
        if not spaces:
            types = [TensorType(tuple(a.shape), str(a.dtype)) for a in inputs]
            spaces = [xp.empty_like(x, shape=t.shape, dtype=np.dtype(t.dtype))
                      for t in workspace(xp, types, attrs)]
        batch_major = attrs.layout == 1
        # sequence-major views: Y [seq, D, batch, H], states [D, batch, H]
        y = outs[0].transpose(1, 2, 0, 3) if batch_major else outs[0]
        states = [o.transpose(1, 0, 2) if batch_major else o for o in outs[1:]]
        h0 = h0.transpose(1, 0, 2) if batch_major else h0
        c0 = c0.transpose(1, 0, 2) if batch_major and c0 is not None else c0
        seq, batch = y.shape[0], y.shape[2]
        if batch == 0:
            return
        low, high = seq, seq
        if lens is not None:
            low, high = _lengths(xp, lens, seq, name)
        masked = lens is not None and low < seq
        if masked:
            y[high:] = 0
        xw_all = spaces[0]
        work = xw_all.dtype
        hs, gh = attrs.hidden_size, _GATES[name] * attrs.hidden_size
        linear = name == "gru" and isinstance(attrs, GruAttrs) and attrs.linear_before_reset
        input_forget = lstm and isinstance(attrs, LstmAttrs) and attrs.input_forget
        x2 = _as(x, work).reshape(-1, x.shape[2])
        for d in range(_directions(attrs)):
            reverse = attrs.direction == "reverse" or d == 1
            # X W^T + Wb + Rb for every step (GRU with linear_before_reset: Rb_h goes later)
            xp.matmul(x2, _as(w[d], work).T, out=xw_all.reshape(-1, gh))
            bias = _as(b[d, :gh], work) + _as(b[d, gh:], work)
            if linear:
                bias[2 * hs:] = b[d, 2 * hs:gh]
            xw_all += bias
            s = _Step(xp, name, attrs, d, r, b, p, spaces)
            s.h[...] = h0[d]
            if lstm and c0 is not None:
                s.c[...] = c0[d]
            order = range(high - 1, -1, -1) if reverse else range(high)
            for t in order:
                xw = xw_all[:, t] if batch_major else xw_all[t]
                if name == "rnn":
                    _rnn_step(s, xw)
                elif name == "gru":
                    _gru_step(s, xw)
                else:
                    _lstm_step(s, xw, input_forget)
                if not masked:
                    s.h, s.h_next = s.h_next, s.h
                    if lstm:
                        s.c, s.c_next = s.c_next, s.c
                    y[t, d] = s.h
                else:
                    m = (lens > t).reshape(batch, 1)  # the sequences still running
                    xp.copyto(s.h, s.h_next, where=m)
                    if lstm:
                        xp.copyto(s.c, s.c_next, where=m)
                    y[t, d] = 0
                    xp.copyto(y[t, d], s.h, where=m, casting="same_kind")
            states[0][d] = s.h
            if lstm:
                states[1][d] = s.c
        if low == 0 and lens is not None:  # no step: ONNX Runtime gives zero states
            empty = (lens == 0).reshape(batch, 1)
            for state in states:
                for d in range(state.shape[0]):
                    xp.copyto(state[d], 0, where=empty)

    return compute


for _name, _attrs in (("rnn", RnnAttrs), ("gru", GruAttrs), ("lstm", LstmAttrs)):
    register_op(OpDef(name=_name, attrs=_attrs, arity=None, infer=_infer(_name),
                      compute=_compute(_name), num_outputs=3 if _name == "lstm" else 2,
                      workspace=_workspace(_name)))
