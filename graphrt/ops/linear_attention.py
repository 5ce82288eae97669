"""Standard op: linear attention, a recurrence over a matrix-valued state (used by the ONNX
frontend; numpy and cupy).

``linear_attention`` takes packed ``[B, T, H*D]`` queries, keys and values, an optional
``[B, H_kv, d_k, d_v]`` past state and, by update rule, a log-space decay and an update rate,
and runs ONNX LinearAttention's recurrence one token at a time (vectorized over batch and
heads)::

    linear:       S_t = S_{t-1} + k_t ⊗ v_t
    gated:        S_t = exp(g_t) S_{t-1} + k_t ⊗ v_t
    delta:        S_t = S_{t-1} + β_t k_t ⊗ (v_t - S_{t-1}ᵀ k_t)
    gated_delta:  S_t = exp(g_t) S_{t-1} + β_t k_t ⊗ (v_t - exp(g_t) S_{t-1}ᵀ k_t)
    o_t = scale · q_tᵀ S_t

Query heads share key/value heads in groups (query head ``j`` reads state ``j // (H_q /
H_kv)``). As ONNX's reference does, everything is computed in float32 (float64 inputs in
float64); the output is rounded to the query's dtype, the final state to the past state's
(or, without one, the query's).

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> op = get_op("linear_attention")
    >>> q = k = v = np.ones((1, 2, 2), np.float32)  # B=1, T=2, one head of size 2
    >>> out, state = np.empty((1, 2, 2), np.float32), np.empty((1, 1, 2, 2), np.float32)
    >>> op.compute(np, [q, k, v], [out, state],
    ...            op.attrs(q_heads=1, kv_heads=1, scale=1.0, update_rule="linear"))
    >>> out[0].tolist(), state[0, 0].tolist()
    ([[2.0, 2.0], [4.0, 4.0]], [[2.0, 2.0], [2.0, 2.0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, register_op

__all__ = ["LinearAttentionAttrs"]

_FLOATS = ("float16", "float32", "float64", "bfloat16")


class LinearAttentionAttrs(Attrs):
    """``linear_attention``: inputs ``query``, ``key``, ``value``, then ``past_state`` where
    ``past`` says, ``decay`` for the gated rules and ``beta`` for the delta rules.

    Attributes:
        q_heads, kv_heads: heads packed in the query and in the key and value (``q_heads`` a
            multiple of ``kv_heads``).
        scale: the factor of every output.
        update_rule: ``"linear"``, ``"gated"``, ``"delta"`` or ``"gated_delta"``.
        past: a past state input follows the value.
    """

    q_heads: Annotated[int, Field(ge=1)]
    kv_heads: Annotated[int, Field(ge=1)]
    scale: float
    update_rule: Literal["linear", "gated", "delta", "gated_delta"] = "gated_delta"
    past: bool = False


def _gated(attrs: LinearAttentionAttrs) -> bool:
    return attrs.update_rule in ("gated", "gated_delta")


def _delta(attrs: LinearAttentionAttrs) -> bool:
    return attrs.update_rule in ("delta", "gated_delta")


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _infer(types: Sequence[TensorType], attrs: LinearAttentionAttrs, data: Sequence[Any]
           ) -> list[TensorType]:
    names = ["query", "key", "value"] + (["past_state"] if attrs.past else []) + (
        ["decay"] if _gated(attrs) else []) + (["beta"] if _delta(attrs) else [])
    if len(types) != len(names):
        raise OpError(f"linear_attention ({attrs.update_rule}) takes {len(names)} inputs "
                      f"({', '.join(names)}), given {len(types)}")
    given = dict(zip(names, types, strict=True))
    q, k, v = given["query"], given["key"], given["value"]
    if q.dtype not in _FLOATS:
        raise OpError(f"query must be one of {', '.join(_FLOATS)}, given {q.dtype}")
    for name in ("key", "value", "decay", "beta"):
        if name in given and given[name].dtype != q.dtype:
            raise OpError(f"{name} must have query's dtype {q.dtype}, given {given[name].dtype}")
    for name in names:
        if name != "past_state" and given[name].ndim != 3:
            raise OpError(f"{name} must be 3-D ([batch, tokens, packed]), given "
                          f"{_show(given[name])}")
    q_heads, kv_heads = attrs.q_heads, attrs.kv_heads
    if q_heads % kv_heads:
        raise OpError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")
    batch, tokens = q.shape[:2]
    for name in names:
        t = given[name]
        if name != "past_state" and t.shape[:2] != (batch, tokens):
            raise OpError(f"{name} must have query's batch and tokens ({batch}, {tokens}), "
                          f"given {_show(t)}")
    if q.shape[2] % q_heads or v.shape[2] % kv_heads:
        raise OpError(f"query's last axis ({q.shape[2]}) must be a multiple of q_heads "
                      f"({q_heads}) and value's ({v.shape[2]}) of kv_heads ({kv_heads})")
    d_k, d_v = q.shape[2] // q_heads, v.shape[2] // kv_heads
    if k.shape[2] != kv_heads * d_k:
        raise OpError(f"key's last axis must be kv_heads * d_k = {kv_heads * d_k}, given "
                      f"{_show(k)}")
    state = (batch, kv_heads, d_k, d_v)
    state_dtype = q.dtype
    if attrs.past:
        past = given["past_state"]
        if past.shape != state or past.dtype not in _FLOATS:
            raise OpError(f"past_state must be a float tensor of shape {list(state)} (batch, "
                          f"kv heads, d_k, d_v), given {_show(past)}")
        state_dtype = past.dtype
    if "decay" in given and given["decay"].shape[2] not in (kv_heads, kv_heads * d_k):
        raise OpError(f"decay's last axis must be kv_heads ({kv_heads}) or kv_heads * d_k "
                      f"({kv_heads * d_k}), given {_show(given['decay'])}")
    if "beta" in given and given["beta"].shape[2] not in (kv_heads, 1):
        raise OpError(f"beta's last axis must be kv_heads ({kv_heads}) or 1, given "
                      f"{_show(given['beta'])}")
    return [TensorType((batch, tokens, q_heads * d_v), q.dtype), TensorType(state, state_dtype)]


def _linear_attention(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: LinearAttentionAttrs) -> None:
    rest = list(inputs)
    q, k, v = rest.pop(0), rest.pop(0), rest.pop(0)
    past = rest.pop(0) if attrs.past else None
    decay = rest.pop(0) if _gated(attrs) else None
    beta = rest.pop(0) if _delta(attrs) else None
    out, present = outputs
    batch, tokens = q.shape[:2]
    kv_heads = attrs.kv_heads
    group = attrs.q_heads // kv_heads
    d_k, d_v = present.shape[2], present.shape[3]
    work = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    # token-major views: [T, B, H_kv, (group,) d]
    q4 = q.astype(work).reshape(batch, tokens, kv_heads, group, d_k).transpose(1, 0, 2, 3, 4)
    k4 = k.astype(work).reshape(batch, tokens, kv_heads, d_k).transpose(1, 0, 2, 3)
    v4 = v.astype(work).reshape(batch, tokens, kv_heads, d_v).transpose(1, 0, 2, 3)
    if past is not None:
        state = past.astype(work)
    else:
        state = xp.zeros_like(q, dtype=work, shape=(batch, kv_heads, d_k, d_v))
    gates = rates = None
    if decay is not None:  # [T, B, H_kv, 1 or d_k, 1]: broadcast over d_v
        per_key = decay.shape[2] // kv_heads
        gates = xp.exp(decay.astype(work)).reshape(batch, tokens, kv_heads, per_key, 1)
        gates = gates.transpose(1, 0, 2, 3, 4)
    if beta is not None:  # [T, B, H_kv or 1, 1]
        rates = beta.astype(work).reshape(batch, tokens, beta.shape[2], 1).transpose(1, 0, 2, 3)
    ys = xp.empty_like(state, shape=(tokens, batch, kv_heads, group, d_v))
    for t in range(tokens):
        if gates is not None:
            state *= gates[t]
        v_t = v4[t]
        if rates is not None:  # v_t <- beta_t (v_t - Sᵀ k_t)
            retrieved = xp.matmul(k4[t][:, :, None, :], state)[:, :, 0, :]
            v_t = rates[t] * (v_t - retrieved)
        state += k4[t][:, :, :, None] * v_t[:, :, None, :]
        ys[t] = xp.matmul(q4[t], state)
    ys *= work.type(attrs.scale)
    out[...] = ys.transpose(1, 0, 2, 3, 4).reshape(out.shape).astype(out.dtype)
    present[...] = state.astype(present.dtype)


register_op(OpDef(name="linear_attention", attrs=LinearAttentionAttrs, arity=None,
                  infer=_infer, compute=_linear_attention, num_outputs=2))
