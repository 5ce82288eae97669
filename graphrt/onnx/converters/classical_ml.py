"""ONNX converters: classical machine learning, the ``ai.onnx.ml`` domain (``TreeEnsemble``,
``TreeEnsembleRegressor``, ``TreeEnsembleClassifier``, ``LabelEncoder``, ``Binarizer``,
``ArrayFeatureExtractor``).

``Binarizer`` and ``ArrayFeatureExtractor`` are standard ops (``greater`` and ``cast``;
``take`` along the last axis). ``LabelEncoder`` becomes ``label_encode`` over its keys sorted
once here (a repeated key keeps its last value, as ONNX says). The three tree ensembles become
one ``tree_ensemble`` over tables built here from the attributes: each node's comparison as a
branch code, its children as rows of one node table (leaves last), each leaf's votes, each
set-membership node's set; the checks a forest needs (children and roots that exist, features
the input has, targets in range, no cycles) happen here, once, and so does the depth that
bounds the walk. Post transforms are ``softmax``, ``sigmoid`` (LOGISTIC) or
``score_transform`` (SOFTMAX_ZERO, PROBIT). graphrt has no string dtype: string keys, values
and class labels are a :class:`~graphrt.ConversionError` naming the node.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> import graphrt
    >>> node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    >>> graph = helper.make_graph(
    ...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    >>> model = helper.make_model(graph, opset_imports=[
    ...     helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    >>> (y,) = graphrt.from_onnx(model).create(graphrt.cpu(0))(
    ...     x=np.array([0.2, 0.5, 0.9], "float32"))
    >>> y.tolist()
    [0.0, 0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ops.classical_ml import BRANCH_CODES, MISSING
from ...schema.dtypes import parse_dtype
from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from ..symint import has_symbols

__all__: list[str] = []

Array = np.ndarray[Any, Any]

Locate = Callable[[Array, Array, str], Array]
"""``locate(tree_ids, node_ids, what)``: the node or leaf number of each pair (``what`` names
the pairs in the error when one does not exist)."""

_AGGREGATES = ("average", "sum", "min", "max")
"""TreeEnsemble's ``aggregate_function`` codes, in order."""

_POST_TRANSFORMS = ("none", "softmax", "logistic", "softmax_zero", "probit")
"""The ``post_transform`` codes of TreeEnsemble, in order (the older ops spell them out)."""

_MODES = ("leq", "lt", "gte", "gt", "eq", "neq", "member")
"""TreeEnsemble's ``nodes_modes`` codes, in order (the older ops spell them ``BRANCH_LEQ``)."""

_OLD_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
              "LEAF")
"""The node modes of TreeEnsembleRegressor and TreeEnsembleClassifier."""

_FLOAT_INPUTS = ("float16", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _strings_refused(n: OnnxNode, what: str) -> Exception:
    return n.fail(f"{what} are strings, and strings are not supported: graphrt has no string "
                  "dtype (numeric keys, values and labels are)")


# ---------------------------------------------------------------------------------------------
# Binarizer, ArrayFeatureExtractor


@converter("ai.onnx.ml.Binarizer", since=1)
def _binarizer(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    dtype = b.dtype(x)
    threshold = float(n.attr("threshold", 0.0))
    if dtype in (*_FLOAT_INPUTS, "bfloat16"):
        bound = np.asarray(threshold).astype(parse_dtype(dtype).numpy)
        above = b.op("greater", [x, b.constant(bound)])[0]
    elif dtype in _INTEGERS:  # x > t for integers is x >= floor(t) + 1, which may not fit the dtype
        info = np.iinfo(np.dtype(dtype))
        least = np.floor(threshold) + 1 if not np.isnan(threshold) else np.inf
        if least > info.max:
            above = b.op("greater", [x, b.constant(np.asarray(info.max, dtype))])[0]
        else:
            bound = np.asarray(max(int(least), int(info.min)), dtype)
            above = b.op("greater_equal", [x, b.constant(bound)])[0]
    else:
        raise n.fail(f"the input must be a number tensor, given {dtype}")
    return b.op("cast", [above], {"dtype": dtype})


@converter("ai.onnx.ml.ArrayFeatureExtractor", since=1)
def _array_feature_extractor(b: Builder, n: OnnxNode) -> list[str]:
    x, indices = n.inputs[0], n.inputs[1]
    shape = b.shape(x)
    if not shape:
        raise n.fail("the input must have at least 1 dimension, given a scalar")
    if len(b.shape(indices)) != 1:
        indices = b.op("reshape", [indices], {"newshape": [-1]})[0]
    (picked,) = b.op("take", [x, indices], {"axis": -1, "mode": "raise"})
    if len(shape) == 1:  # one row, as ONNX's reference and ONNX Runtime give
        return b.op("reshape", [picked], {"newshape": [1, -1]})
    return [picked]


# ---------------------------------------------------------------------------------------------
# LabelEncoder


def _keys(b: Builder, n: OnnxNode, x: str) -> Array:
    """The node's keys in the dtype of input ``x``; integer keys that dtype cannot hold are
    dropped, as they can never match."""
    given = [key for key in ("keys_int64s", "keys_floats", "keys_strings", "keys_tensor")
             if key in n.attrs]
    if len(given) != 1:
        raise n.fail(f"exactly one of keys_int64s, keys_floats, keys_tensor must be given, "
                     f"given {', '.join(given) or 'none'}")
    if given[0] == "keys_strings":
        raise _strings_refused(n, "the keys")
    dtype = b.dtype(x)
    if given[0] == "keys_tensor":
        keys = np.asarray(n.attr("keys_tensor")).reshape(-1)
        if str(keys.dtype) != dtype:
            raise n.fail(f"keys_tensor is {keys.dtype} but the input is {dtype}; they must "
                         "be one dtype")
        return keys
    if given[0] == "keys_floats":
        if dtype not in ("float32", "float64"):
            raise n.fail(f"keys_floats takes a float or double input, given {dtype}")
        return np.asarray(n.attr("keys_floats"), np.float32).astype(dtype)
    if dtype not in _INTEGERS:
        raise n.fail(f"keys_int64s takes an integer input, given {dtype}")
    return np.asarray(n.attr("keys_int64s"), np.int64)


def _values(n: OnnxNode) -> tuple[Array, Array]:
    """The node's values and default, in the dtype of its values."""
    given = [key for key in ("values_int64s", "values_floats", "values_strings",
                             "values_tensor") if key in n.attrs]
    if len(given) != 1:
        raise n.fail(f"exactly one of values_int64s, values_floats, values_tensor must be "
                     f"given, given {', '.join(given) or 'none'}")
    if given[0] == "values_strings":
        raise _strings_refused(n, "the values")
    if given[0] == "values_int64s":
        return (np.asarray(n.attr("values_int64s"), np.int64),
                np.asarray(n.attr("default_int64", -1), np.int64))
    if given[0] == "values_floats":
        return (np.asarray(n.attr("values_floats"), np.float32),
                np.asarray(n.attr("default_float", -0.0), np.float32))
    values = np.asarray(n.attr("values_tensor")).reshape(-1)
    if "default_tensor" not in n.attrs:
        return values, np.asarray(-1 if values.dtype.kind in "iu" else -0.0, values.dtype)
    default = np.asarray(n.attr("default_tensor"))
    if default.size != 1 or default.dtype != values.dtype:
        raise n.fail(f"default_tensor must be one {values.dtype} value (the dtype of "
                     f"values_tensor), given {default.dtype}{list(default.shape)}")
    return values, default.reshape(())


@converter("ai.onnx.ml.LabelEncoder", since=2)  # LabelEncoder-1 maps strings only
def _label_encoder(b: Builder, n: OnnxNode) -> list[str]:
    x = n.inputs[0]
    keys, (values, default) = _keys(b, n, x), _values(n)
    if keys.size != values.size:
        raise n.fail(f"the keys and values must be as many, given {keys.size} keys and "
                     f"{values.size} values")
    if keys.dtype.kind in "iu" and str(keys.dtype) != b.dtype(x):
        info = np.iinfo(np.dtype(b.dtype(x)))
        fits = (keys >= int(info.min)) & (keys <= int(info.max))
        keys, values = keys[fits].astype(b.dtype(x)), values[fits]
    # the last of repeated keys wins: np.unique keeps the first of the reversed keys
    unique, first = np.unique(keys[::-1], return_index=True)
    return b.op("label_encode", [x, b.constant(unique), b.constant(values[::-1][first]),
                                 b.constant(default)])


# ---------------------------------------------------------------------------------------------
# forests


@dataclass(frozen=True)
class _Forest:
    """A forest read from a node's attributes, before its checks.

    Nodes are numbered ``0..n-1`` and leaves ``n..n+L-1``: ``true``, ``false`` and ``roots``
    hold such numbers. ``codes`` are branch codes (see :mod:`graphrt.ops.classical_ml`);
    ``sets`` maps each set-membership node to its values; ``targets`` and ``weights`` are
    each leaf's votes, ``[L, V]``, a target of ``count`` where a leaf has fewer than V.
    """

    features: Array
    codes: Array
    thresholds: Array
    true: Array
    false: Array
    roots: Array
    targets: Array
    weights: Array
    sets: dict[int, Array]


def _ints(n: OnnxNode, key: str, default: list[int] | None = None) -> Array:
    """Integer attribute ``key`` (required unless a ``default`` is given) as int64."""
    return np.asarray(n.attr(key) if default is None else n.attr(key, default), np.int64)


def _same_length(n: OnnxNode, arrays: dict[str, Array]) -> int:
    """The one length of the parallel attributes ``arrays``."""
    lengths = {key: len(value) for key, value in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{key} {length}" for key, length in lengths.items())
        raise n.fail(f"the per-node and per-leaf attributes must have one length each, "
                     f"given {shown}")
    return next(iter(lengths.values()))


def _choice(n: OnnxNode, key: str, default: str, names: tuple[str, ...]) -> str:
    """An enumeration attribute given as its code (TreeEnsemble) or its upper-case name."""
    value = n.attr(key, default)
    if isinstance(value, str) and value.lower() in names:
        return value.lower()
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    raise n.fail(f"{key} must be one of {', '.join(s.upper() for s in names)}, given {value!r}")


def _rows(b: Builder, n: OnnxNode, integers_as: str) -> str:
    """Input 0 as ``[N, F]`` floats (a 1-D input is one row; integers are cast to
    ``integers_as``)."""
    x = n.inputs[0]
    shape, dtype = b.shape(x), b.dtype(x)
    if len(shape) not in (1, 2):
        raise n.fail(f"the input must be [N, F] (or [F]), given shape {list(shape)}")
    if has_symbols(shape[-1]):
        raise n.fail("the input's feature dimension must be static")
    if dtype in _INTEGERS:
        x = b.op("cast", [x], {"dtype": integers_as})[0]
    elif dtype not in _FLOAT_INPUTS:
        raise n.fail(f"the input must be float16, float32, float64 or integers, given {dtype}")
    if len(shape) == 1:
        x = b.op("reshape", [x], {"newshape": [1, int(shape[0])]})[0]
    return x


def _walk_depth(n: OnnxNode, forest: _Forest) -> tuple[int, Array]:
    """The most nodes on a path from a root to a leaf, and which nodes a root reaches.

    Raises:
        ConversionError: the nodes have a cycle.
    """
    count = len(forest.features)
    reached = np.zeros(count, bool)
    frontier = np.unique(forest.roots[forest.roots < count])
    depth = 0
    while frontier.size:
        depth += 1
        if depth > count:
            raise n.fail(f"the trees have a cycle: node {int(frontier[0])} is its own "
                         "descendant")
        reached[frontier] = True
        children = np.concatenate([forest.true[frontier], forest.false[frontier]])
        frontier = np.unique(children[children < count])
    return depth, reached


def _check_forest(n: OnnxNode, forest: _Forest, features: int) -> tuple[int, Array]:
    """The forest's depth and branch codes (unreached nodes: 0), after its checks."""
    count, leaves = len(forest.features), len(forest.targets)
    total = count + leaves
    for what, ids in (("a true branch", forest.true), ("a false branch", forest.false),
                      ("a root", forest.roots)):
        bad = ids[(ids < 0) | (ids >= total)]
        if bad.size:
            raise n.fail(f"{what} names node {int(bad[0])}, but there are {count} nodes "
                         f"and {leaves} leaves")
    depth, reached = _walk_depth(n, forest)
    bad = np.flatnonzero(reached & ((forest.features < 0) | (forest.features >= features)))
    if bad.size:
        raise n.fail(f"node {int(bad[0])} reads feature {int(forest.features[bad[0]])}, but "
                     f"the input has {features} features")
    return depth, np.where(reached, forest.codes, 0)


def _member_tables(forest: _Forest, dtype: str) -> tuple[Array, Array]:
    """All set members (sorted, unique) and the keys ``node * U + i`` of each node's."""
    if not forest.sets:
        return np.zeros(0, dtype), np.zeros(0, np.int64)
    members = np.unique(np.concatenate(list(forest.sets.values())).astype(dtype))
    keys = [node * members.size + np.searchsorted(members, values.astype(dtype))
            for node, values in forest.sets.items()]
    return members, np.unique(np.concatenate(keys).astype(np.int64))


def _one_comparison(codes: Array) -> tuple[str, bool]:
    """The comparison all nodes of branch ``codes`` make, and whether some send missing values
    to the true branch; ``("mixed", False)`` where they make several (or sets, or the older
    ops' BRANCH_NEQ, which sends NaN to the tracked branch)."""
    plain = {code: name for name, code in BRANCH_CODES.items() if name != "member"}
    names, missing = set(), False
    for code in np.unique(codes).tolist():
        name = plain.get(code & ~MISSING if code != BRANCH_CODES["neq"] else code)
        if name is None:
            return "mixed", False
        names.add(name)
        missing |= name != "neq" and bool(code & MISSING)
    if len(names) > 1:
        return "mixed", False
    return (names.pop() if names else "leq"), missing


def _forest(b: Builder, n: OnnxNode, x: str, forest: _Forest, base: Array,
            aggregate: str) -> str:
    """``tree_ensemble`` of ``forest`` over rows ``x``: ``[N, len(base)]`` of base's dtype."""
    depth, codes = _check_forest(n, forest, int(b.shape(x)[1]))
    count, leaves = len(forest.features), len(forest.targets)
    compare, missing = _one_comparison(codes[codes > 0])
    leaf_numbers = np.arange(count, count + leaves)
    nodes = np.stack([np.concatenate([np.where(codes > 0, forest.features, 0),
                                      np.zeros(leaves, np.int64)]),
                      np.concatenate([codes, np.zeros(leaves, np.int64)]),
                      np.concatenate([forest.false, leaf_numbers]),
                      np.concatenate([forest.true, leaf_numbers])]).astype(np.int64)
    dtype = str(forest.thresholds.dtype)
    thresholds = np.concatenate([forest.thresholds, np.zeros(leaves, dtype)])
    members, keys = _member_tables(forest, dtype)
    tables = [nodes, thresholds, forest.roots, forest.targets, forest.weights.astype(base.dtype),
              base, members, keys]
    return b.op("tree_ensemble", [x, *(b.constant(t) for t in tables)],
                {"aggregate": aggregate, "depth": depth, "compare": compare,
                 "missing": missing})[0]


def _post_transform(b: Builder, scores: str, kind: str) -> str:
    """``scores`` transformed along the last axis by ``post_transform`` ``kind``."""
    if kind == "none":
        return scores
    if kind == "softmax":
        return b.op("softmax", [scores], {"axis": -1})[0]
    if kind == "logistic":
        return b.op("sigmoid", [scores])[0]
    return b.op("score_transform", [scores], {"kind": kind})[0]


def _sets(n: OnnxNode, modes: Array) -> dict[int, Array]:
    """Each set-membership node's set: ``membership_values`` cut at its NaNs, in node order."""
    nodes = np.flatnonzero(modes == _MODES.index("member"))
    if "membership_values" not in n.attrs:
        if nodes.size:
            raise n.fail(f"node {int(nodes[0])} is BRANCH_MEMBER but membership_values is "
                         "not given")
        return {}
    values = np.asarray(n.attr("membership_values")).reshape(-1)
    ends = np.flatnonzero(np.isnan(values))
    if ends.size != nodes.size or (values.size and not np.isnan(values[-1])):
        raise n.fail(f"membership_values must hold one NaN-terminated set per BRANCH_MEMBER "
                     f"node: {nodes.size} nodes, given {ends.size} NaN(s) in {values.size} "
                     "values")
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    return {int(node): values[start:end]
            for node, start, end in zip(nodes, starts, ends, strict=True)}


def _children(n: OnnxNode, ids: Array, leafs: Array, count: int, leaves: int, side: str
              ) -> Array:
    """TreeEnsemble's ``nodes_<side>nodeids`` as node/leaf numbers (leaves after nodes)."""
    if not np.isin(leafs, (0, 1)).all():
        raise n.fail(f"nodes_{side}leafs must hold 0 or 1")
    limit = np.where(leafs == 1, leaves, count)
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        i = int(bad[0])
        kind = "leaf" if leafs[i] else "node"
        raise n.fail(f"node {i}'s {side} branch is {kind} {int(ids[i])}, but there are "
                     f"{int(limit[i])} {kind}s")
    return np.where(leafs == 1, ids + count, ids)


def _v5_forest(n: OnnxNode, dtype: str) -> tuple[_Forest, int]:
    """TreeEnsemble's forest (thresholds in ``dtype``) and its number of targets."""
    features = _ints(n, "nodes_featureids")
    modes = np.asarray(n.attr("nodes_modes")).reshape(-1).astype(np.int64)
    thresholds = np.asarray(n.attr("nodes_splits")).reshape(-1)
    count = _same_length(n, {
        "nodes_featureids": features, "nodes_modes": modes, "nodes_splits": thresholds,
        "nodes_truenodeids": _ints(n, "nodes_truenodeids"),
        "nodes_falsenodeids": _ints(n, "nodes_falsenodeids"),
        "nodes_trueleafs": _ints(n, "nodes_trueleafs"),
        "nodes_falseleafs": _ints(n, "nodes_falseleafs")})
    targets, weights = _ints(n, "leaf_targetids"), np.asarray(n.attr("leaf_weights")).ravel()
    leaves = _same_length(n, {"leaf_targetids": targets, "leaf_weights": weights})
    tracks = _ints(n, "nodes_missing_value_tracks_true", [0] * count)
    if len(tracks) != count or not np.isin(tracks, (0, 1)).all():
        raise n.fail(f"nodes_missing_value_tracks_true must be {count} flags (0 or 1)")
    bad = np.flatnonzero((modes < 0) | (modes >= len(_MODES)))
    if bad.size:
        raise n.fail(f"node {int(bad[0])} has mode {int(modes[bad[0]])}; the modes are 0 "
                     f"(BRANCH_LEQ) to {len(_MODES) - 1} (BRANCH_MEMBER)")
    n_targets = int(n.attr("n_targets", int(targets.max()) + 1 if leaves else 1))
    if n_targets < 1 or ((targets < 0) | (targets >= n_targets)).any():
        raise n.fail(f"leaf_targetids must lie in [0, n_targets = {n_targets})")
    true = _children(n, _ints(n, "nodes_truenodeids"), _ints(n, "nodes_trueleafs"), count,
                     leaves, "true")
    false = _children(n, _ints(n, "nodes_falsenodeids"), _ints(n, "nodes_falseleafs"), count,
                      leaves, "false")
    roots = _ints(n, "tree_roots")
    bad = roots[(roots < 0) | (roots >= count)]
    if bad.size:
        raise n.fail(f"tree root {int(bad[0])} is not one of the {count} nodes")
    single = (true[roots] >= count) & (true[roots] == false[roots])  # a tree of one leaf
    codes = np.asarray([BRANCH_CODES[_MODES[m]] for m in modes], np.int64) | (tracks * MISSING)
    forest = _Forest(features, codes, thresholds.astype(dtype), true, false,
                     np.where(single, true[roots], roots), targets.reshape(-1, 1),
                     weights.reshape(-1, 1), _sets(n, modes))
    return forest, n_targets


@converter("ai.onnx.ml.TreeEnsemble", since=5)
def _tree_ensemble(b: Builder, n: OnnxNode) -> list[str]:
    x = _rows(b, n, "float32")
    forest, count = _v5_forest(n, b.dtype(x))
    aggregate = _choice(n, "aggregate_function", "SUM", _AGGREGATES)
    scores = _forest(b, n, x, forest, np.zeros(count, b.dtype(x)), aggregate)
    return [_post_transform(b, scores, _choice(n, "post_transform", "NONE", _POST_TRANSFORMS))]


# ---------------------------------------------------------------------------------------------
# TreeEnsembleRegressor, TreeEnsembleClassifier (ai.onnx.ml 1 and 3)


def _floats(n: OnnxNode, key: str, default: list[float] | None = None) -> Array:
    """``<key>_as_tensor`` (double) where given, else ``<key>`` (float)."""
    if f"{key}_as_tensor" in n.attrs:
        return np.asarray(n.attr(f"{key}_as_tensor")).reshape(-1)
    return np.asarray(n.attr(key) if default is None else n.attr(key, default), np.float32)


def _lookup(n: OnnxNode, keys: Array, wanted: Array, what: str, trees: Array, ids: Array
            ) -> Array:
    """The position of each of ``wanted`` in the sorted ``keys``.

    Raises:
        ConversionError: one is absent; the message names its tree and node ids.
    """
    where = np.searchsorted(keys, wanted)
    hit = where < len(keys)
    hit[hit] = keys[where[hit]] == wanted[hit]
    if not hit.all():
        i = int(np.flatnonzero(~hit)[0])
        raise n.fail(f"{what} names node {int(ids[i])} of tree {int(trees[i])}, which does "
                     "not exist")
    return where


def _numbering(n: OnnxNode, trees: Array, ids: Array, leaf: Array) -> Locate:
    """The look-up of (tree id, node id) pairs' numbers: their rank among the nodes, or
    among the leaves after all nodes.

    Raises:
        ConversionError: a pair is given twice.
    """
    tree_list, rank = np.unique(trees, return_inverse=True)
    id_list, id_rank = np.unique(ids, return_inverse=True)
    span = len(id_list)
    keys = rank * span + id_rank
    order = np.argsort(keys, kind="stable")
    repeated = np.flatnonzero(np.diff(keys[order]) == 0)
    if repeated.size:
        i = int(order[repeated[0]])
        raise n.fail(f"node {int(ids[i])} of tree {int(trees[i])} is given twice")
    inner = ~leaf
    number = np.where(leaf, np.cumsum(leaf) - 1 + int(inner.sum()), np.cumsum(inner) - 1)

    def locate(wanted_trees: Array, wanted_ids: Array, what: str) -> Array:
        tree = np.minimum(np.searchsorted(tree_list, wanted_trees), len(tree_list) - 1)
        node = np.minimum(np.searchsorted(id_list, wanted_ids), span - 1)
        known = (tree_list[tree] == wanted_trees) & (id_list[node] == wanted_ids)
        wanted = np.where(known, tree * span + node, -1)
        found = _lookup(n, keys[order], wanted, what, wanted_trees, wanted_ids)
        return np.asarray(number[order[found]], np.int64)

    return locate


def _old_forest(n: OnnxNode, vote: str, count: int) -> _Forest:
    """The forest of a TreeEnsembleRegressor (``vote="target"``) or TreeEnsembleClassifier
    (``vote="class"``), whose nodes are (tree id, node id) pairs and leaves mode LEAF; a tree
    starts at its first node in the list, as ONNX's reference says."""
    trees, ids = _ints(n, "nodes_treeids"), _ints(n, "nodes_nodeids")
    true_ids, false_ids = _ints(n, "nodes_truenodeids"), _ints(n, "nodes_falsenodeids")
    features, values = _ints(n, "nodes_featureids"), _floats(n, "nodes_values")
    given = [str(m) for m in n.attr("nodes_modes")]
    length = _same_length(n, {
        "nodes_treeids": trees, "nodes_nodeids": ids, "nodes_featureids": features,
        "nodes_values": values, "nodes_modes": np.asarray(given),
        "nodes_truenodeids": true_ids, "nodes_falsenodeids": false_ids})
    unknown = [g for g in given if g not in _OLD_MODES]
    if unknown:
        raise n.fail(f"node mode {unknown[0]!r} is not one of {', '.join(_OLD_MODES)}")
    tracks = _ints(n, "nodes_missing_value_tracks_true", [0] * length)
    if len(tracks) != length or not np.isin(tracks, (0, 1)).all():
        raise n.fail(f"nodes_missing_value_tracks_true must be {length} flags (0 or 1)")
    if not length:
        raise n.fail("the trees have no nodes")
    leaf = np.asarray([m == "LEAF" for m in given], bool)
    inner = ~leaf
    locate = _numbering(n, trees, ids, leaf)
    first = np.unique(trees, return_index=True)[1]
    # NaN takes the tracked branch whatever the mode: BRANCH_NEQ without bit MISSING
    codes = np.asarray([BRANCH_CODES[m.lower().removeprefix("branch_")] & ~MISSING
                        for m in np.asarray(given)[inner]], np.int64).reshape(-1)
    targets, weights = _votes(n, vote, count, locate, int(inner.sum()), int(leaf.sum()))
    return _Forest(features[inner], codes | (tracks[inner] * MISSING), values[inner],
                   locate(trees[inner], true_ids[inner], "a true branch"),
                   locate(trees[inner], false_ids[inner], "a false branch"),
                   locate(trees[first], ids[first], "a root"), targets, weights, {})


def _votes(n: OnnxNode, vote: str, count: int, locate: Locate, inner: int, leaves: int
            ) -> tuple[Array, Array]:
    """Each leaf's votes ``<vote>_ids``, ``<vote>_weights`` as ``[leaves, V]`` tables."""
    trees, nodes = _ints(n, f"{vote}_treeids"), _ints(n, f"{vote}_nodeids")
    ids, weights = _ints(n, f"{vote}_ids"), _floats(n, f"{vote}_weights")
    _same_length(n, {f"{vote}_treeids": trees, f"{vote}_nodeids": nodes, f"{vote}_ids": ids,
                     f"{vote}_weights": weights})
    bad = ids[(ids < 0) | (ids >= count)]
    if bad.size:
        raise n.fail(f"{vote}_ids holds {int(bad[0])}, outside [0, {count})")
    numbers = locate(trees, nodes, f"a {vote} weight")
    on_node = np.flatnonzero(numbers < inner)
    if on_node.size:
        i = int(on_node[0])
        raise n.fail(f"a {vote} weight names node {int(nodes[i])} of tree {int(trees[i])}, "
                     "which is not a leaf")
    order = np.argsort(numbers, kind="stable")
    leaf = numbers[order] - inner
    slot = np.arange(len(leaf)) - np.searchsorted(leaf, leaf)
    width = int(slot.max()) + 1 if len(slot) else 1
    targets = np.full((leaves, width), count, np.int64)
    table = np.zeros((leaves, width), weights.dtype)
    targets[leaf, slot], table[leaf, slot] = ids[order], weights[order]
    return targets, table


def _base_values(n: OnnxNode, count: int, dtype: Any) -> Array:
    """``base_values`` (or its ``_as_tensor``) for each of ``count`` targets: one value is
    every target's, none is 0."""
    base = _floats(n, "base_values", [])
    if base.size not in (0, 1, count):
        raise n.fail(f"base_values must hold 1 or {count} values (or none), given "
                     f"{base.size}")
    return np.broadcast_to(base.astype(dtype), (count,)).copy() if base.size else (
        np.zeros(count, dtype))


@converter("ai.onnx.ml.TreeEnsembleRegressor", since=1)
def _tree_ensemble_regressor(b: Builder, n: OnnxNode) -> list[str]:
    ids = _ints(n, "target_ids", [])
    count = int(n.attr("n_targets", int(ids.max()) + 1 if ids.size else 1))
    if count < 1:
        raise n.fail(f"n_targets must be >= 1, given {count}")
    forest = _old_forest(n, "target", count)
    x = _rows(b, n, str(forest.thresholds.dtype))
    base = _base_values(n, count, forest.weights.dtype)
    aggregate = _choice(n, "aggregate_function", "SUM", _AGGREGATES)
    scores = _forest(b, n, x, forest, base, aggregate)
    scores = _post_transform(b, scores, _choice(n, "post_transform", "NONE", _POST_TRANSFORMS))
    return b.op("cast", [scores], {"dtype": "float32"})


def _binary(b: Builder, scores: str, count: int, post: str) -> str:
    """A binary classifier's scores ``[N, count]`` as ONNX's reference makes them: the first
    column ``s`` becomes ``[1 - s, s]`` (``[-s, s]`` before LOGISTIC, SOFTMAX and
    SOFTMAX_ZERO), followed by the columns after the second."""
    positive = b.op("strided_slice", [scores], {"begin": [0], "end": [1], "axes": [1]})[0]
    if post in ("none", "probit"):
        negative = b.op("subtract", [b.constant(np.ones((), b.dtype(scores))), positive])[0]
    else:
        negative = b.op("negative", [positive])[0]
    rest = [b.op("strided_slice", [scores], {"begin": [2], "end": [count], "axes": [1]})[0]
            ] if count > 2 else []
    return b.op("concatenate", [negative, positive, *rest], {"axis": 1})[0]


@converter("ai.onnx.ml.TreeEnsembleClassifier", since=1)
def _tree_ensemble_classifier(b: Builder, n: OnnxNode) -> list[str]:
    if "classlabels_strings" in n.attrs:
        raise _strings_refused(n, "the class labels (classlabels_strings)")
    labels = [int(v) for v in n.attr("classlabels_int64s", [])]
    if not labels:
        raise n.fail("classlabels_int64s must name at least one class")
    count = len(labels)
    forest = _old_forest(n, "class", count)
    x = _rows(b, n, "float32")
    scores = _forest(b, n, x, forest, _base_values(n, count, forest.weights.dtype), "sum")
    post = _choice(n, "post_transform", "NONE", _POST_TRANSFORMS)
    if len(set(_ints(n, "class_ids").tolist())) == 1:  # binary: one score per row
        if count == 1 and labels != [1]:
            raise n.fail(f"one class label must be 1 (the positive class), given {labels[0]}")
        scores = _binary(b, scores, count, post)
        labels = labels if count > 1 else [0, 1]
    probabilities = b.op("cast", [_post_transform(b, scores, post)], {"dtype": "float32"})[0]
    best = b.op("arg_reduce", [probabilities], {"kind": "max", "axis": 1, "keepdims": False})
    return [b.op("take", [b.constant(np.asarray(labels, np.int64)), best[0]], {"axis": 0})[0],
            probabilities]
