"""Standard ops: classical machine learning (the ONNX ``ai.onnx.ml`` domain's tree ensembles,
label encoders and score transforms), over tables the ONNX frontend builds once at conversion.

* ``tree_ensemble``: every row of ``x`` (``[N, F]``) walked down every tree of a forest at
  once, all trees and rows advancing one level per step (``depth`` steps), then the reached
  leaves' votes aggregated per target: ``[N, C]``. The forest is given as tensors (constants
  of the graph, so a big forest is a parameter, not an attribute):

  ================  ===========  ==========================================================
  input             shape        meaning
  ================  ===========  ==========================================================
  ``nodes``         ``[4, M]``   rows: each node's feature, branch code, false child and
                                 true child; the last ``L`` nodes are the leaves (their
                                 children are themselves)
  ``thresholds``    ``[M]``      the value each node compares its feature with
  ``roots``         ``[T]``      the node each tree starts at
  ``leaf_targets``  ``[L, V]``   the target of each of a leaf's ``V`` votes (``C``: no vote)
  ``leaf_weights``  ``[L, V]``   the weight of each vote; the output's dtype
  ``base_values``   ``[C]``      added to each target's aggregate
  ``members``       ``[U]``      every value of a set-membership node's set, sorted, unique
  ``member_keys``   ``[K]``      ``node * U + i`` for each value ``members[i]`` of ``node``'s
                                 set, sorted
  ================  ===========  ==========================================================

  A node's branch code is a bit mask: the branch is true when the comparison of its feature
  value ``v`` with its threshold ``t`` gives one of the code's bits: 1 ``v < t``, 2
  ``v == t``, 4 ``v > t``, 8 unordered with ``v`` not NaN (``t`` is NaN), 16 ``v`` is NaN,
  32 ``v`` is in the node's set. ONNX's ``BRANCH_LEQ`` is 3, ``BRANCH_LT`` 1, ``BRANCH_GTE``
  6, ``BRANCH_GT`` 4, ``BRANCH_EQ`` 2, ``BRANCH_NEQ`` 29 (``v != t``), ``BRANCH_MEMBER`` 32;
  a node whose missing values go to the true branch adds 16. Where every node has the same
  plain comparison, ``compare`` names it and each step makes that one comparison (and, with
  ``missing``, sends NaN to the true branch of the nodes whose code has bit 16).
  Aggregates: ``sum``, ``average`` (the sum over the number of trees), ``min`` and ``max``
  (a target no reached leaf votes for gets 0, as ONNX Runtime gives), each plus
  ``base_values``; sums accumulate in float64 and are cast once.

* ``label_encode``: each element of ``x`` looked up in sorted unique ``keys`` (of ``x``'s
  dtype; NaN keys sort last and match NaN): the ``values`` entry at its position, or
  ``default`` (a 0-d tensor of ``values``' dtype) when absent. ONNX ``LabelEncoder``.

* ``score_transform``: the post transforms of ONNX's tree and linear classifiers that are
  not standard ops, along the last axis: ``softmax_zero`` (a softmax in which values within
  1e-7 of zero stay near zero, and a row summing to 0 gives 0.5 everywhere) and ``probit``
  (``sqrt(2) * erfinv(2 v - 1)`` with the approximation of ``erfinv`` ONNX's reference and
  ONNX Runtime use), computed in float64 and cast once.

Example (one tree: ``x[0] <= 0.5`` votes 1.0 for target 0, else 2.0):
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("tree_ensemble")
    >>> attrs = op.attrs(aggregate="sum", depth=1, compare="leq")
    >>> nodes = np.array([[0, 0, 0], [3, 0, 0], [2, 1, 2], [1, 1, 2]])  # node, leaf, leaf
    >>> tables = [nodes, np.array([0.5, 0.0, 0.0]), np.array([0]),
    ...           np.array([[0], [0]]), np.array([[1.0], [2.0]], "float32"),
    ...           np.zeros(1, "float32"), np.zeros(0, "float32"), np.zeros(0, "int64")]
    >>> x = np.array([[0.25], [0.75]], "float32")
    >>> [t.shape for t in op.infer([TensorType(a.shape, str(a.dtype)) for a in [x, *tables]],
    ...                            attrs, [None] * 9)]
    [(2, 1)]
    >>> y = np.empty((2, 1), "float32")
    >>> op.compute(np, [x, *tables], [y], attrs)
    >>> y.ravel().tolist()
    [1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, register_op
from .elementwise import NoAttrs
from .indexing import _same_device

__all__ = ["BRANCH_CODES", "ScoreTransformAttrs", "TreeEnsembleAttrs"]

_FLOATS = ("float16", "float32", "float64", "bfloat16")
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

LESS, EQUAL, GREATER, UNORDERED, MISSING, MEMBER = 1, 2, 4, 8, 16, 32
"""The bits of a node's branch code (see the module's description)."""

BRANCH_CODES: dict[str, int] = {
    "leq": LESS | EQUAL, "lt": LESS, "gte": EQUAL | GREATER, "gt": GREATER, "eq": EQUAL,
    "neq": LESS | GREATER | UNORDERED | MISSING, "member": MEMBER}
"""The branch code of each comparison a tree node makes (plus :data:`MISSING` where missing
values take the true branch)."""

_COMPARISONS = {"leq": "less_equal", "lt": "less", "gte": "greater_equal", "gt": "greater",
                "eq": "equal", "neq": "not_equal"}

_BLOCK = 1 << 22
"""Elements of a ``[rows, trees]`` step the tree walk makes at once (rows go in blocks)."""


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _expect(op: str, what: str, t: TensorType, ndim: int, dtypes: Sequence[str]) -> None:
    if t.ndim != ndim or t.dtype not in dtypes:
        raise OpError(f"{op}: {what} must be a {ndim}-D tensor of {', '.join(dtypes)}, given "
                      f"{_show(t)}")


# --------------------------------------------------------------------------------------------
# tree_ensemble


class TreeEnsembleAttrs(Attrs):
    """``tree_ensemble``: how the votes of the reached leaves combine per target, the number
    of steps that takes every tree's deepest path to its leaf, the one comparison all nodes
    make (``"mixed"``: each node's branch code says) and whether, with one comparison, NaN
    takes the true branch of the nodes whose code has :data:`MISSING`."""

    aggregate: Literal["sum", "average", "min", "max"] = "sum"
    depth: Annotated[int, Field(ge=0)]
    compare: Literal["mixed", "leq", "lt", "gte", "gt", "eq", "neq"] = "mixed"
    missing: bool = False


def _tree_infer(types: Sequence[TensorType], attrs: TreeEnsembleAttrs, data: Sequence[Any]
                ) -> list[TensorType]:
    if len(types) != 9:
        raise OpError(f"tree_ensemble: expected 9 inputs (x, nodes, thresholds, roots, "
                      f"leaf_targets, leaf_weights, base_values, members, member_keys), given "
                      f"{len(types)}")
    x, nodes, thresholds, roots, targets, weights, base, members, keys = types
    name = "tree_ensemble"
    _expect(name, "x", x, 2, _FLOATS)
    _expect(name, "nodes", nodes, 2, ("int64",))
    _expect(name, "thresholds", thresholds, 1, _FLOATS)
    _expect(name, "roots", roots, 1, ("int64",))
    _expect(name, "leaf_targets", targets, 2, ("int64",))
    _expect(name, "leaf_weights", weights, 2, _FLOATS)
    _expect(name, "base_values", base, 1, (weights.dtype,))
    _expect(name, "members", members, 1, _FLOATS)
    _expect(name, "member_keys", keys, 1, ("int64",))
    m, leaves = nodes.shape[1], targets.shape[0]
    if nodes.shape[0] != 4 or thresholds.shape != (m,):
        raise OpError(f"tree_ensemble: nodes must be [4, M] and thresholds [M], given "
                      f"{_show(nodes)} and {_show(thresholds)}")
    if weights.shape != targets.shape or leaves > m:
        raise OpError(f"tree_ensemble: leaf_targets and leaf_weights must be one [L, V] shape "
                      f"with L <= {m} (the leaves are the last nodes), given "
                      f"{_show(targets)} and {_show(weights)}")
    if roots.shape[0] and not leaves:
        raise OpError("tree_ensemble: trees need leaves, given none")
    return [TensorType((x.shape[0], base.shape[0]), weights.dtype)]


def _branch(xp: Any, v: Any, t: Any, code: Any, node: Any, members: Any, keys: Any) -> Any:
    """Whether each node, at feature values ``v`` and thresholds ``t``, takes its true branch
    by its branch ``code`` (``node``: the nodes, for the set-membership test)."""
    less, equal, greater, missing = v < t, v == t, v > t, xp.isnan(v)
    unordered = ~(less | equal | greater | missing)
    bits = less.astype(np.uint8)
    bits |= equal.astype(np.uint8) << 1
    bits |= greater.astype(np.uint8) << 2
    bits |= unordered.astype(np.uint8) << 3
    bits |= missing.astype(np.uint8) << 4
    if keys.shape[0]:  # the set test, only where a node has a set
        where = xp.flatnonzero(code & MEMBER)
        member = xp.zeros_like(less)
        member.reshape(-1)[where] = _is_member(xp, v.reshape(-1)[where],
                                               node.reshape(-1)[where], members, keys)
        bits |= member.astype(np.uint8) << 5
    return (bits & code) != 0


def _is_member(xp: Any, v: Any, node: Any, members: Any, keys: Any) -> Any:
    """Whether ``v`` is in the set of ``node`` (a look-up of ``v`` among all members, then of
    the pair (node, member) among the sets' pairs)."""
    count = members.shape[0]
    position = _same_device(xp, v, xp.minimum(xp.searchsorted(members, v), count - 1))
    found = xp.take(members, position) == v
    key = node * count + position
    where = _same_device(xp, key, xp.minimum(xp.searchsorted(keys, key), keys.shape[0] - 1))
    return found & (xp.take(keys, where) == key)


def _walk(xp: Any, x: Any, tables: Sequence[Any], attrs: TreeEnsembleAttrs) -> Any:
    """The node each tree ends at for each row of ``x``: ``[rows, trees]``.

    Every gather is a ``take`` from a flat array (the node table's rows are contiguous),
    which numpy runs several times faster than fancy indexing of 2-D tables."""
    nodes, thresholds, roots, members, keys = tables
    rows, features, count = x.shape[0], x.shape[1], nodes.shape[1]
    table, values = nodes.reshape(-1), x.reshape(-1)
    at = _same_device(xp, roots, xp.broadcast_to(roots, (rows, roots.shape[0])))
    starts = _same_device(xp, roots, xp.arange(rows, dtype=np.int64) * features)[:, None]
    for _ in range(attrs.depth):
        value = xp.take(values, xp.take(table, at) + starts)
        threshold = xp.take(thresholds, at)
        if attrs.compare == "mixed":
            true = _branch(xp, value, threshold, xp.take(table, at + count), at, members, keys)
        else:
            true = getattr(xp, _COMPARISONS[attrs.compare])(value, threshold)
            if attrs.missing:
                true |= xp.isnan(value) & ((xp.take(table, at + count) & MISSING) != 0)
        at = xp.take(table, at + (true.astype(np.int64) + 2) * count)
    return at


def _aggregate(xp: Any, targets: Any, weights: Any, count: int, attrs: TreeEnsembleAttrs
               ) -> Any:
    """The votes ``weights`` for ``targets`` (``[rows, trees, V]``, target ``count`` is no
    vote) aggregated per row and target: ``[rows, count]``."""
    rows, trees = targets.shape[0], targets.shape[1]
    if attrs.aggregate in ("sum", "average"):
        span = count + 1
        offsets = _same_device(xp, targets, xp.arange(rows, dtype=np.int64) * span)
        where = (targets + offsets[:, None, None]).reshape(-1)
        sums = xp.bincount(where, weights=weights.reshape(-1).astype(np.float64),
                           minlength=rows * span).reshape(rows, span)[:, :count]
        return sums / trees if attrs.aggregate == "average" and trees else sums
    pick = xp.min if attrs.aggregate == "min" else xp.max
    fill = np.inf if attrs.aggregate == "min" else -np.inf
    result = xp.zeros((rows, count), dtype=weights.dtype)
    for target in range(count):
        votes = targets == target
        best = pick(xp.where(votes, weights, fill), axis=(1, 2))
        result[:, target] = xp.where(votes.any(axis=(1, 2)), best, 0)
    return result


def _tree_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: TreeEnsembleAttrs) -> None:
    x, nodes, thresholds, roots, targets, weights, base, members, keys = inputs
    out = outputs[0]
    if out.size == 0:
        return
    count, first_leaf = base.shape[0], nodes.shape[1] - targets.shape[0]
    tables = (nodes, thresholds, roots, members, keys)
    block = max(1, _BLOCK // max(1, roots.shape[0] * targets.shape[1]))
    offset = base.astype(np.float64)
    for start in range(0, x.shape[0], block):
        leaf = _walk(xp, x[start:start + block], tables, attrs) - first_leaf
        scores = _aggregate(xp, xp.take(targets, leaf, axis=0), xp.take(weights, leaf, axis=0),
                            count, attrs)
        out[start:start + block] = _same_device(xp, offset, scores) + offset


register_op(OpDef(name="tree_ensemble", attrs=TreeEnsembleAttrs, arity=9, infer=_tree_infer,
                  compute=_tree_compute))


# --------------------------------------------------------------------------------------------
# label_encode


def _label_infer(types: Sequence[TensorType], attrs: NoAttrs, data: Sequence[Any]
                 ) -> list[TensorType]:
    if len(types) != 4:
        raise OpError(f"label_encode: expected 4 inputs (x, keys, values, default), given "
                      f"{len(types)}")
    x, keys, values, default = types
    numbers = (*_INTS, *_FLOATS)
    if x.dtype not in numbers or values.dtype not in numbers:
        raise OpError(f"label_encode: x and values must be numbers, given {_show(x)} and "
                      f"{_show(values)}")
    _expect("label_encode", "keys", keys, 1, (x.dtype,))
    _expect("label_encode", "values", values, 1, (values.dtype,))
    _expect("label_encode", "default", default, 0, (values.dtype,))
    if keys.shape != values.shape:
        raise OpError(f"label_encode: keys and values must have one length, given "
                      f"{_show(keys)} and {_show(values)}")
    return [TensorType(x.shape, values.dtype)]


def _label_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                   attrs: NoAttrs) -> None:
    x, keys, values, default = inputs
    out = outputs[0]
    if out.size == 0:
        return
    if keys.shape[0] == 0:
        out[...] = default
        return
    position = _same_device(xp, x, xp.minimum(xp.searchsorted(keys, x), keys.shape[0] - 1))
    key = keys[position]
    found = key == x
    if x.dtype.kind == "f":
        found |= xp.isnan(key) & xp.isnan(x)
    out[...] = xp.where(found, values[position], default)


register_op(OpDef(name="label_encode", attrs=NoAttrs, arity=4, infer=_label_infer,
                  compute=_label_compute))


# --------------------------------------------------------------------------------------------
# score_transform


class ScoreTransformAttrs(Attrs):
    """``score_transform``: which transform (see the module's description)."""

    kind: Literal["softmax_zero", "probit"]


def _score_infer(types: Sequence[TensorType], attrs: ScoreTransformAttrs,
                 data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"score_transform: expected 1 input, given {len(types)}")
    (x,) = types
    if x.dtype not in _FLOATS or x.ndim < 1:
        raise OpError(f"score_transform: the scores must be a float tensor of at least 1 "
                      f"dimension, given {_show(x)}")
    return [x]


def _softmax_zero(xp: Any, v: Any) -> Any:
    top = v.max(axis=-1, keepdims=True)
    terms = xp.where(xp.abs(v) > 1e-7, xp.exp(v - top), v * xp.exp(-top))
    total = terms.sum(axis=-1, keepdims=True)
    return xp.where(total == 0, 0.5, terms / xp.where(total == 0, 1, total))


def _probit(xp: Any, v: Any) -> Any:
    """``sqrt(2) * erfinv(2 v - 1)``, with ``erfinv`` approximated as ONNX's reference does
    (Winitzki's formula, a = 0.147; 0 where ``(1 - x) (1 + x)`` is 0)."""
    x = 2 * v - 1
    spread = (1 - x) * (1 + x)
    with np.errstate(invalid="ignore"):  # outside [0, 1]: NaN, as the reference gives
        log = xp.log(xp.where(spread == 0, 1, spread))
        a = 2 / (np.pi * 0.147) + 0.5 * log
        root = xp.sqrt(xp.sqrt(a * a - log / 0.147) - a)
    return xp.where(spread == 0, 0, xp.where(x < 0, -root, root) * 1.41421356)


def _score_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                   attrs: ScoreTransformAttrs) -> None:
    out = outputs[0]
    if out.size == 0:
        return
    v = inputs[0].astype(np.float64)
    transform = _softmax_zero if attrs.kind == "softmax_zero" else _probit
    out[...] = transform(xp, v)


register_op(OpDef(name="score_transform", attrs=ScoreTransformAttrs, arity=1,
                  infer=_score_infer, compute=_score_compute))
