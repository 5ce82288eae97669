"""ONNX converters for the ops of language models: LinearAttention, SwiGLU and TensorScatter.

``LinearAttention`` (opset 27) becomes the standard op ``linear_attention`` (its recurrence;
``chunk_size`` is a tuning hint and changes nothing). ``SwiGLU`` (opset 28) is ``swish(A) *
B`` (bfloat16 through float32). ``TensorScatter`` (opset 24) is a ``scatter_elements`` of the
update into the cache along the sequence axis, at ``write_indices[b] + i`` (modulo the cache
length in ``circular`` mode); in ``linear`` mode a write past the cache's end is an error at
run time, and a negative position counts from the end, as in ONNX's reference.

Example:
    >>> import numpy as np, graphrt
    >>> from onnx import TensorProto, helper
    >>> node = helper.make_node("TensorScatter", ["past", "new", "at"], ["present"],
    ...                         mode="circular")
    >>> graph = helper.make_graph([node], "g", [
    ...     helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, 4, 1]),
    ...     helper.make_tensor_value_info("new", TensorProto.FLOAT, [2, 2, 1]),
    ...     helper.make_tensor_value_info("at", TensorProto.INT64, [2])],
    ...     [helper.make_tensor_value_info("present", TensorProto.FLOAT, [2, 4, 1])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    >>> module = graphrt.from_onnx(model).create("cpu")
    >>> (y,) = module(past=np.zeros((2, 4, 1), np.float32),
    ...               new=np.array([[[1], [2]], [[3], [4]]], np.float32),
    ...               at=np.array([1, 3], np.int64))
    >>> y[..., 0].tolist()
    [[0.0, 1.0, 2.0, 0.0], [4.0, 0.0, 0.0, 3.0]]
"""

from __future__ import annotations

import math

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from .elementwise import cast_to

_RULES = ("linear", "gated", "delta", "gated_delta")
_LINEAR_ATTENTION_TYPES = ("float16", "bfloat16", "float32")
_SWIGLU_TYPES = ("bfloat16", "float16", "float32", "float64")


def _shown(b: Builder, value: str) -> str:
    return f"{b.dtype(value)}{list(b.shape(value))}"


# --------------------------------------------------------------------------------------------
# LinearAttention
# --------------------------------------------------------------------------------------------


@converter("LinearAttention", since=27)
def linear_attention(b: Builder, n: OnnxNode) -> list[str]:
    """The recurrence of the chosen ``update_rule`` over the tokens, with grouped heads."""
    q, k, v = n.inputs[0], n.inputs[1], n.inputs[2]
    past, decay, beta = n.input(3), n.input(4), n.input(5)
    q_heads, kv_heads = int(n.attr("q_num_heads")), int(n.attr("kv_num_heads"))
    if q_heads < 1 or kv_heads < 1 or q_heads % kv_heads:
        raise n.fail(f"q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads "
                     f"({kv_heads})")
    rule = n.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise n.fail(f"update_rule must be one of {', '.join(map(repr, _RULES))}, given "
                     f"{rule!r}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for name, value, needed in (("decay", decay, gated), ("beta", beta, delta)):
        if needed and value is None:
            raise n.fail(f"update_rule {rule!r} needs the {name} input")
        if not needed and value is not None:
            raise n.fail(f"update_rule {rule!r} takes no {name} input (given {value!r})")
    dtype = b.dtype(q)
    if dtype not in _LINEAR_ATTENTION_TYPES:
        raise n.fail(f"query must be one of {', '.join(_LINEAR_ATTENTION_TYPES)}, given "
                     f"{dtype}")
    for name, value in (("key", k), ("value", v), ("decay", decay), ("beta", beta)):
        if value is not None and b.dtype(value) != dtype:
            raise n.fail(f"{name} must have query's dtype {dtype}, given {b.dtype(value)}")
    if past is not None and b.dtype(past) not in _LINEAR_ATTENTION_TYPES:
        raise n.fail(f"past_state must be one of {', '.join(_LINEAR_ATTENTION_TYPES)}, given "
                     f"{b.dtype(past)}")
    for name, value in (("query", q), ("key", k), ("value", v)):
        if len(b.shape(value)) != 3:
            raise n.fail(f"{name} must be 3-D ([batch, tokens, heads * head size]), given "
                         f"{_shown(b, value)}")
    packed = b.shape(q)[2]
    if packed % q_heads or packed == 0:
        raise n.fail(f"query's last axis ({packed}) must be a positive multiple of "
                     f"q_num_heads ({q_heads})")
    d_k = packed // q_heads
    scale = float(n.attr("scale", 0.0))
    if scale == 0.0:
        scale = 1.0 / math.sqrt(d_k)
    inputs = [q, k, v] + [x for x in (past, decay, beta) if x is not None]
    return b.op("linear_attention", inputs, {
        "q_heads": q_heads, "kv_heads": kv_heads, "scale": scale, "update_rule": rule,
        "past": past is not None}, num_outputs=2)


# --------------------------------------------------------------------------------------------
# SwiGLU
# --------------------------------------------------------------------------------------------


@converter("SwiGLU", since=28)
def swiglu(b: Builder, n: OnnxNode) -> list[str]:
    """``A * sigmoid(alpha * A) * B`` for ``A`` and ``B`` of one shape (no broadcasting)."""
    gate, value = n.inputs[0], n.inputs[1]
    if b.dtype(gate) not in _SWIGLU_TYPES:
        raise n.fail(f"A must be one of {', '.join(_SWIGLU_TYPES)}, given {b.dtype(gate)}")
    if b.type(gate) != b.type(value):
        raise n.fail(f"A and B must have one shape and dtype (SwiGLU does not broadcast), "
                     f"given {_shown(b, gate)} and {_shown(b, value)}")
    dtype = b.dtype(gate)
    if dtype == "bfloat16":  # the standard ops take no bfloat16: float32, rounded once
        gate, value = cast_to(b, gate, "float32"), cast_to(b, value, "float32")
    (swish,) = b.op("swish", [gate], {"alpha": float(n.attr("alpha", 1.0))})
    (out,) = b.op("multiply", [swish, value])
    return [cast_to(b, out, dtype)]


# --------------------------------------------------------------------------------------------
# TensorScatter
# --------------------------------------------------------------------------------------------


@converter("TensorScatter", since=24)
def tensor_scatter(b: Builder, n: OnnxNode) -> list[str]:
    """The past cache with the update written along ``axis`` from each batch entry's write
    index on."""
    past, update, indices = n.inputs[0], n.inputs[1], n.input(2)
    mode = n.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise n.fail(f"mode must be 'linear' or 'circular', given {mode!r}")
    shape, new = b.shape(past), b.shape(update)
    rank = len(shape)
    if rank < 2:
        raise n.fail(f"past_cache must have a batch axis and a sequence axis, given "
                     f"{_shown(b, past)}")
    axis = int(n.attr("axis", -2))
    if not -rank <= axis < rank:
        raise n.fail(f"axis {axis} is out of range for a {rank}-D cache")
    axis %= rank
    if axis == 0:
        raise n.fail("axis must not be 0, the batch axis")
    if b.dtype(update) != b.dtype(past):
        raise n.fail(f"update must have past_cache's dtype {b.dtype(past)}, given "
                     f"{b.dtype(update)}")
    if len(new) != rank or any(new[d] != shape[d] for d in range(rank) if d != axis) or (
            new[axis] > shape[axis]):
        raise n.fail(f"update must have past_cache's shape {list(shape)} but for a sequence "
                     f"axis ({axis}) no longer than {shape[axis]}, given {list(new)}")
    if indices is not None and (b.dtype(indices) != "int64" or b.shape(indices) != shape[:1]):
        raise n.fail(f"write_indices must be int64[{shape[0]}] (one per batch entry), given "
                     f"{_shown(b, indices)}")
    if math.prod(new) == 0:
        return [past]
    length = new[axis]
    steps = b.computed((length,), "int64", "the update's sequence positions",
                       lambda: np.arange(length, dtype=np.int64))
    at_axis = [1] * rank
    at_axis[axis] = length
    (positions,) = b.op("reshape", [steps], {"newshape": at_axis})
    if indices is not None:
        (starts,) = b.op("reshape", [indices], {"newshape": [shape[0]] + [1] * (rank - 1)})
        (positions,) = b.op("add", [starts, positions])
        if mode == "circular":
            (positions,) = b.op("mod", [positions, b.constant(np.int64(shape[axis]))])
    (positions,) = b.op("broadcast_to", [positions], {"shape": list(new)})
    return b.op("scatter_elements", [past, positions, update], {"axis": axis})
