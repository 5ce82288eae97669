"""ONNX's ``FlexAttention`` (ai.onnx.preview): attention with user subgraphs over the scores.

``Y = prob_mod(softmax(score_mod(Q·Kᵀ·scale))) · V`` over 4-D heads, with grouped key/value
heads. ``score_mod`` and ``prob_mod`` are graph attributes taking the whole
``[B, Hq, L, S]`` tensor and giving one of the same shape; each is converted inline (its index
tables, built from the tensor's shape, fold to constants). As ONNX's reference does, Q and K are
each scaled by ``sqrt(scale)`` in their dtype and multiplied in it; the scores, both mods, the
softmax and the product with V run in ``softmax_precision`` (float32 for float16 and bfloat16
inputs, else the input dtype), and Y is rounded to V's dtype. Without mods, and when that
precision is the input dtype, the node is the standard op ``attention``.

Example:
    >>> from onnx import TensorProto, helper
    >>> mod = helper.make_graph(
    ...     [helper.make_node("Add", ["s", "bias"], ["t"])], "score_mod",
    ...     [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
    ...     [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    ...     [helper.make_tensor("bias", TensorProto.FLOAT, [], [0.5])])
    >>> node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"],
    ...                         domain="ai.onnx.preview", score_mod=mod)
    >>> x = helper.make_tensor_value_info
    >>> graph = helper.make_graph(
    ...     [node], "g", [x(n, TensorProto.FLOAT, [1, 2, 3, 4]) for n in "qkv"],
    ...     [x("y", TensorProto.FLOAT, [1, 2, 3, 4])])
    >>> model = helper.make_model(graph, opset_imports=[
    ...     helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    >>> import graphrt, numpy as np
    >>> ones = np.ones((1, 2, 3, 4), np.float32)
    >>> graphrt.from_onnx(model).create("cpu")(q=ones, k=ones, v=ones)[0].shape
    (1, 2, 3, 4)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...schema import parse_dtype
from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from .attention import SOFTMAX_DTYPES
from .control_flow import convert_subgraph
from .elementwise import apply, cast_to

__all__: list[str] = []

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _check_inputs(b: Builder, n: OnnxNode, q: str, k: str, v: str) -> None:
    shapes = [b.shape(x) for x in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise n.fail(f"Q, K and V must be 4-D ([batch, heads, seq, head_size]), given "
                     f"{', '.join(str(list(s)) for s in shapes)}")
    dtypes = {b.dtype(x) for x in (q, k, v)}
    if len(dtypes) != 1 or b.dtype(q) not in _FLOATS:
        raise n.fail(f"Q, K and V must share one float dtype ({', '.join(_FLOATS)}), given "
                     f"{b.dtype(q)}, {b.dtype(k)}, {b.dtype(v)}")
    (batch, q_heads, _, head), (kb, kv_heads, kv_len, k_head), (vb, v_heads, v_len, _) = shapes
    if kb != batch or vb != batch:
        raise n.fail(f"Q, K and V must have one batch size, given {batch}, {kb}, {vb}")
    if (v_heads, v_len) != (kv_heads, kv_len):
        raise n.fail(f"K and V must have the same heads and sequence length, given "
                     f"{list(shapes[1])} and {list(shapes[2])}")
    if k_head != head:
        raise n.fail(f"Q and K must have one head size, given {head} and {k_head}")
    if kv_heads < 1 or q_heads % kv_heads:
        raise n.fail(f"Q's heads ({q_heads}) must be a multiple of K's heads ({kv_heads})")


def _grouped_matmul(b: Builder, a: str, c: str, transpose_b: bool) -> str:
    """``a @ c`` (``c`` transposed when asked) where ``a`` has ``[B, Hq, M, K]`` heads and ``c``
    ``[B, Hkv, ., .]`` ones: query head ``h`` meets key/value head ``h // (Hq / Hkv)``, by
    broadcasting over a group axis rather than repeating ``c``."""
    batch, q_heads, rows, inner = b.shape(a)
    kv_heads = b.shape(c)[1]
    attrs = {"transpose_b": transpose_b}
    if q_heads == kv_heads:
        return b.op("matmul", [a, c], attrs)[0]
    group = q_heads // kv_heads
    (a,) = b.op("reshape", [a], {"newshape": [batch, kv_heads, group, rows, inner]})
    (c,) = b.op("expand_dims", [c], {"axis": 2})
    (out,) = b.op("matmul", [a, c], attrs)
    return b.op("reshape", [out], {"newshape": [batch, q_heads, rows, b.shape(out)[-1]]})[0]


def _modify(b: Builder, n: OnnxNode, key: str, x: str) -> str:
    """``x`` through the node's graph attribute ``key`` (absent: ``x`` itself)."""
    graph: Any = n.attr(key, None)
    if graph is None:
        return x
    if not hasattr(graph, "node"):
        raise n.fail(f"{key} must be a graph attribute, given {type(graph).__name__}")
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise n.fail(f"{key} must take 1 input and give 1 output (the [B, Hq, L, S] tensor), "
                     f"it takes {len(graph.input)} and gives {len(graph.output)}")
    (out,) = convert_subgraph(b, graph, {graph.input[0].name: x}, n)
    if b.shape(out) != b.shape(x):
        raise n.fail(f"{key} must keep the shape {list(b.shape(x))}, gives "
                     f"{list(b.shape(out))}")
    return cast_to(b, out, b.dtype(x))


@converter("ai.onnx.preview.FlexAttention", since=1, until=1)
def flex_attention(b: Builder, n: OnnxNode) -> list[str]:
    """``prob_mod(softmax(score_mod(Q·Kᵀ·scale))) · V``, the mods converted inline."""
    if len(n.inputs) != 3 or not all(n.inputs):
        raise n.fail(f"takes 3 inputs (Q, K, V), given {list(n.inputs)}")
    q, k, v = n.inputs
    _check_inputs(b, n, q, k, v)
    dtype = b.dtype(q)
    scale = n.attr("scale", None)
    if scale is None:
        scale = 1.0 / math.sqrt(b.shape(q)[3])
    precision = n.attr("softmax_precision", None)
    if precision is not None and precision not in SOFTMAX_DTYPES:
        raise n.fail(f"softmax_precision {precision} is not a float type (1, 10, 11 or 16)")
    work = (SOFTMAX_DTYPES[precision] if precision is not None
            else "float64" if dtype == "float64" else "float32")
    mods = n.attr("score_mod", None) is not None or n.attr("prob_mod", None) is not None
    if not mods and work == dtype:
        return b.op("attention", [q, k, v], {"scale": float(scale), "softmax_dtype": work})
    root = b.constant(np.asarray(np.sqrt(np.float32(scale)), dtype=parse_dtype(dtype).numpy))
    qs, ks = apply(b, "multiply", [q, root]), apply(b, "multiply", [k, root])
    scores = cast_to(b, _grouped_matmul(b, qs, ks, transpose_b=True), work)
    scores = _modify(b, n, "score_mod", scores)
    probs = _modify(b, n, "prob_mod", apply(b, "softmax", [scores], {"axis": -1}))
    y = _grouped_matmul(b, probs, cast_to(b, v, work), transpose_b=False)
    return [cast_to(b, y, dtype)]
