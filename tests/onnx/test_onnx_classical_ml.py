"""ONNX's classical machine learning domain (``ai.onnx.ml``): TreeEnsemble (opset 5),
TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3), LabelEncoder (opsets 2 and
4), Binarizer and ArrayFeatureExtractor, converted from one-node models (random forests of every
node mode, missing values and sets included) and compared with ONNX's reference implementation
and ONNX Runtime, on cpu and sim; the standard ops ``tree_ensemble``, ``label_encode`` and
``score_transform`` on their own; and the errors a bad model or input gets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from onnx_harness import close, run_ort, run_reference, typed
from ops_harness import run_op
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError, ExecutionError, InputError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference.ops.aionnxml._common_classifier import (  # noqa: E402
    probit,
    softmax,
    softmax_zero,
)

pytestmark = pytest.mark.filterwarnings(  # ONNX's reference probit of values outside [0, 1]
    "ignore:invalid value encountered in log:RuntimeWarning")

DEVICES = ["cpu", "sim"]
ML = "ai.onnx.ml"


def ml_model(op: str, inputs: dict[str, np.ndarray], outputs: int = 1, ml_opset: int = 5,
             input_types: dict[str, int] | None = None, **attrs: Any) -> Any:
    """A one-node ``ai.onnx.ml`` model whose graph inputs are ``inputs`` (their shapes and
    dtypes; ``input_types`` overrides an element type)."""
    names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, list(inputs), names, name=f"my_{op.lower()}", domain=ML,
                            **attrs)
    types = input_types or {}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(
            name, types.get(name, helper.np_dtype_to_tensor_dtype(value.dtype)), value.shape)
         for name, value in inputs.items()],
        [onnx.ValueInfoProto(name=name) for name in names])
    return typed(helper.make_model(graph, ir_version=ort_ir_version(), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)]), TensorProto.FLOAT)


def run(model: Any, data: dict[str, np.ndarray], device: str = "cpu") -> list[np.ndarray]:
    return [np.array(out) for out in graphrt.from_onnx(model).create(device)(**data)]


def refused(model: Any, *words: str) -> None:
    with pytest.raises(ConversionError) as caught:
        graphrt.from_onnx(model)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def grid(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32",
         nan: float = 0.1) -> np.ndarray:
    """Values on a grid of halves in [-2, 2] (so EQ, NEQ and sets hit), some of them NaN."""
    values = rng.integers(-4, 5, shape) / 2
    values[rng.random(shape) < nan] = np.nan
    return values.astype(dtype)


# ---------------------------------------------------------------------------------------------
# random forests in TreeEnsemble's form


@dataclass
class Forest:
    """TreeEnsemble's attributes of a forest, built tree by tree."""

    features: list[int] = field(default_factory=list)
    modes: list[int] = field(default_factory=list)
    splits: list[float] = field(default_factory=list)
    true: list[int] = field(default_factory=list)
    false: list[int] = field(default_factory=list)
    true_leafs: list[int] = field(default_factory=list)
    false_leafs: list[int] = field(default_factory=list)
    tracks: list[int] = field(default_factory=list)
    members: list[float] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)

    def attrs(self, dtype: str, n_targets: int, **more: Any) -> dict[str, Any]:
        def tensor(values: list[Any], dt: Any) -> Any:
            return numpy_helper.from_array(np.asarray(values, dt))

        attrs = dict(
            nodes_featureids=self.features, nodes_modes=tensor(self.modes, np.uint8),
            nodes_splits=tensor(self.splits, dtype), nodes_truenodeids=self.true,
            nodes_falsenodeids=self.false, nodes_trueleafs=self.true_leafs,
            nodes_falseleafs=self.false_leafs, nodes_missing_value_tracks_true=self.tracks,
            leaf_targetids=self.targets, leaf_weights=tensor(self.weights, dtype),
            tree_roots=self.roots, n_targets=n_targets, **more)
        if self.members:
            attrs["membership_values"] = tensor(self.members, dtype)
        return attrs


def random_forest(rng: np.random.Generator, features: int, trees: int, depth: int,
                  targets: int, modes: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6),
                  single_leaves: bool = False) -> Forest:
    """Trees numbered in pre-order (true branch first), so that ONNX's reference, which reads
    the sets in that order, and the spec (node order) agree; sets never hold 0.0, which the
    reference takes for the end of a set. With ``single_leaves`` some trees are one leaf (a
    node whose branches are that leaf), which ONNX's reference misreads: it takes the leaf
    numbered as the node."""
    f = Forest()

    def leaf() -> int:
        f.targets.append(int(rng.integers(targets)))
        f.weights.append(float(rng.integers(-8, 9) / 4))
        return len(f.weights) - 1

    def node(level: int) -> tuple[int, int]:
        if level == depth or (level and rng.random() < 0.2):
            return 1, leaf()
        i = len(f.features)
        mode = int(rng.choice(modes))
        f.features.append(int(rng.integers(features)))
        f.modes.append(mode)
        f.splits.append(float(rng.integers(-4, 5) / 2))
        f.tracks.append(int(rng.integers(2)))
        if mode == 6:
            chosen = rng.choice([-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2], rng.integers(1, 4),
                                replace=False)
            f.members.extend([*map(float, chosen), np.nan])
        for side in ("true", "false"):
            getattr(f, side).append(0)
            getattr(f, f"{side}_leafs").append(0)
        for side in ("true", "false"):
            is_leaf, index = node(level + 1)
            getattr(f, side)[i] = index
            getattr(f, f"{side}_leafs")[i] = is_leaf
        return 0, i

    for _ in range(trees):
        root = len(f.features)
        is_leaf, index = node(depth if single_leaves and rng.random() < 0.2 else 0)
        if is_leaf:  # a tree that is one leaf: a node whose two branches are that leaf
            f.features.append(0)
            f.modes.append(0)
            f.splits.append(0.0)
            f.tracks.append(0)
            f.true.append(index)
            f.false.append(index)
            f.true_leafs.append(1)
            f.false_leafs.append(1)
        f.roots.append(root)
    return f


def tree_model(x: np.ndarray, forest: Forest, n_targets: int, **attrs: Any) -> Any:
    return ml_model("TreeEnsemble", {"x": x}, **forest.attrs(str(x.dtype), n_targets, **attrs))


AGGREGATES = {"average": 0, "sum": 1, "min": 2, "max": 3}
POST_TRANSFORMS = {"softmax": 1, "logistic": 2, "softmax_zero": 3, "probit": 4}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("aggregate", ["sum", "average"])
def test_tree_ensemble_matches_the_reference(seed: int, dtype: str, aggregate: str) -> None:
    rng = np.random.default_rng(seed)
    forest = random_forest(rng, features=4, trees=7, depth=4, targets=3)
    x = grid(rng, (40, 4), dtype)
    built = tree_model(x, forest, 3, aggregate_function=AGGREGATES[aggregate])
    close(run(built, {"x": x})[0], run_reference(built, {"x": x})[0])


@pytest.mark.parametrize("aggregate", ["min", "max"])
@pytest.mark.parametrize("device", DEVICES)
def test_tree_ensemble_min_and_max_match_the_reference(aggregate: str, device: str) -> None:
    """One target: every row reaches a leaf voting for it (the reference starts a target no
    leaf votes for at the dtype's extreme; graphrt gives 0, as ONNX Runtime does)."""
    rng = np.random.default_rng(7)
    forest = random_forest(rng, features=3, trees=9, depth=5, targets=1)
    x = grid(rng, (50, 3))
    built = tree_model(x, forest, 1, aggregate_function=AGGREGATES[aggregate])
    close(run(built, {"x": x}, device)[0], run_reference(built, {"x": x})[0])


@pytest.mark.parametrize("mode", range(7))
@pytest.mark.parametrize("device", DEVICES)
def test_every_node_mode_matches_the_reference(mode: int, device: str) -> None:
    """Forests of one mode take the one-comparison path (set membership: the mixed one)."""
    rng = np.random.default_rng(mode)
    forest = random_forest(rng, features=2, trees=5, depth=3, targets=2, modes=(mode,))
    forest.tracks = [0] * len(forest.tracks)
    x = grid(rng, (60, 2), "float64")
    built = tree_model(x, forest, 2)
    close(run(built, {"x": x}, device)[0], run_reference(built, {"x": x})[0])


@pytest.mark.parametrize("post", list(POST_TRANSFORMS))
def test_tree_ensemble_post_transforms(post: str) -> None:
    """ONNX's reference leaves post_transform out; its classifiers' transforms applied to its
    scores are what graphrt gives. ONNX Runtime agrees on SOFTMAX_ZERO (it reads codes 1 and
    2 as LOGISTIC and SOFTMAX, the spec's SOFTMAX and LOGISTIC, and its probit is of float32
    sums)."""
    rng = np.random.default_rng(3)
    forest = random_forest(rng, features=3, trees=6, depth=3, targets=3, modes=(0, 1, 4, 5))
    x = grid(rng, (30, 3), nan=0)
    built = tree_model(x, forest, 3, post_transform=POST_TRANSFORMS[post])
    raw = run_reference(tree_model(x, forest, 3), {"x": x})[0]
    transform = {"softmax": softmax, "softmax_zero": softmax_zero, "probit": probit,
                 "logistic": lambda v: 1 / (1 + np.exp(-v))}[post]
    want = np.asarray(transform(raw.copy()), np.float32)
    got = run(built, {"x": x})[0]
    close(got, want, rtol=1e-5, atol=1e-6)
    if post == "softmax_zero":
        close(got, run_ort(built, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_tree_ensemble_matches_onnx_runtime_on_a_bigger_forest() -> None:
    """Trees that are one leaf included (ONNX Runtime reads them as the spec says)."""
    rng = np.random.default_rng(11)
    forest = random_forest(rng, features=6, trees=40, depth=7, targets=4, modes=(0, 1, 2, 3),
                           single_leaves=True)
    x = grid(rng, (500, 6), "float32")
    built = tree_model(x, forest, 4, aggregate_function=0)
    close(run(built, {"x": x})[0], run_ort(built, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_target_no_leaf_votes_for_is_zero() -> None:
    forest = random_forest(np.random.default_rng(0), features=2, trees=2, depth=2, targets=1)
    x = grid(np.random.default_rng(1), (5, 2), nan=0)
    for aggregate in AGGREGATES.values():
        (got,) = run(tree_model(x, forest, 3, aggregate_function=aggregate), {"x": x})
        assert got.shape == (5, 3) and not got[:, 1:].any()


def test_tree_ensemble_takes_empty_batches_and_half_precision() -> None:
    rng = np.random.default_rng(5)
    forest = random_forest(rng, features=2, trees=3, depth=3, targets=2, modes=(0, 6))
    x = grid(rng, (8, 2), "float16")
    built = tree_model(x, forest, 2)
    close(run(built, {"x": x})[0], run_reference(built, {"x": x})[0], rtol=1e-3)
    empty = np.zeros((0, 2), np.float16)
    assert run(tree_model(empty, forest, 2), {"x": empty})[0].shape == (0, 2)


# ---------------------------------------------------------------------------------------------
# TreeEnsembleRegressor, TreeEnsembleClassifier


def old_attrs(forest: Forest, vote: str, as_tensor: bool = False) -> dict[str, Any]:
    """A TreeEnsemble forest (no sets) in the older ops' form: (tree, node) ids, leaves as
    nodes of mode LEAF, one vote per leaf; node ids are shuffled within each tree."""
    names = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    rng = np.random.default_rng(len(forest.features))
    rows: dict[str, list[Any]] = {k: [] for k in (
        "treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids",
        "missing_value_tracks_true")}
    votes: dict[str, list[Any]] = {k: [] for k in ("treeids", "nodeids", "ids", "weights")}
    for tree, root in enumerate(forest.roots):
        order: list[tuple[int, int]] = []  # (is_leaf, index) in pre-order

        def visit(is_leaf: int, index: int, order: list[tuple[int, int]] = order) -> None:
            order.append((is_leaf, index))
            if not is_leaf:
                visit(forest.true_leafs[index], forest.true[index])
                visit(forest.false_leafs[index], forest.false[index])

        single = forest.true_leafs[root] and forest.true[root] == forest.false[root]
        visit(*((1, forest.true[root]) if single else (0, root)))
        ids = {item: int(i) for i, item in zip(
            [0, *rng.permutation(np.arange(1, len(order)))], order, strict=True)}
        for is_leaf, index in order:
            rows["treeids"].append(tree)
            rows["nodeids"].append(ids[is_leaf, index])
            if is_leaf:
                rows["featureids"].append(0)
                rows["modes"].append("LEAF")
                rows["values"].append(0.0)
                rows["truenodeids"].append(0)
                rows["falsenodeids"].append(0)
                rows["missing_value_tracks_true"].append(0)
                votes["treeids"].append(tree)
                votes["nodeids"].append(ids[is_leaf, index])
                votes["ids"].append(forest.targets[index])
                votes["weights"].append(forest.weights[index])
                continue
            rows["featureids"].append(forest.features[index])
            rows["modes"].append(names[forest.modes[index]])
            rows["values"].append(forest.splits[index])
            rows["truenodeids"].append(ids[forest.true_leafs[index], forest.true[index]])
            rows["falsenodeids"].append(ids[forest.false_leafs[index], forest.false[index]])
            rows["missing_value_tracks_true"].append(forest.tracks[index])
    attrs = {f"nodes_{k}": v for k, v in rows.items()}
    attrs |= {f"{vote}_{k}": v for k, v in votes.items()}
    if as_tensor:
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(
            np.asarray(attrs.pop("nodes_values"), np.float64))
        attrs[f"{vote}_weights_as_tensor"] = numpy_helper.from_array(
            np.asarray(attrs.pop(f"{vote}_weights"), np.float64))
    return attrs


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("as_tensor", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_tree_ensemble_regressor_matches_the_reference(aggregate: str, as_tensor: bool,
                                                        device: str) -> None:
    """The older form's missing values take the tracked branch whatever the mode, as its
    spec and reference say (ONNX Runtime's BRANCH_NEQ sends NaN to the true branch, as
    TreeEnsemble does); base values are added to every target (ONNX Runtime leaves a target
    no leaf votes for at 0)."""
    rng = np.random.default_rng(21)
    targets = 1 if aggregate in ("MIN", "MAX") else 2
    forest = random_forest(rng, features=3, trees=6, depth=4, targets=targets,
                           modes=(0, 1, 2, 3, 4, 5), single_leaves=True)
    x = grid(rng, (40, 3))
    attrs = old_attrs(forest, "target", as_tensor)
    built = ml_model("TreeEnsembleRegressor", {"x": x}, ml_opset=3, n_targets=targets,
                     aggregate_function=aggregate, base_values=[0.5, -0.25][:targets],
                     **old_attrs(forest, "target"))  # the reference reads no *_as_tensor
    want = run_reference(built, {"x": x})[0]
    if as_tensor:
        built = ml_model("TreeEnsembleRegressor", {"x": x}, ml_opset=3, n_targets=targets,
                         aggregate_function=aggregate, **attrs,
                         base_values_as_tensor=numpy_helper.from_array(
                             np.asarray([0.5, -0.25][:targets])))
    close(run(built, {"x": x}, device)[0], want)
    x = np.nan_to_num(x).astype(np.float64 if as_tensor else np.float32)  # ONNX Runtime's
    built = ml_model("TreeEnsembleRegressor", {"x": x}, ml_opset=3,  # thresholds are x's type
                     n_targets=targets, aggregate_function=aggregate, **attrs)
    close(run(built, {"x": x})[0], run_ort(built, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_tree_ensemble_regressor_takes_integer_and_1d_inputs(dtype: str) -> None:
    forest = random_forest(np.random.default_rng(2), features=3, trees=4, depth=3, targets=1,
                           modes=(0, 1, 2, 3))
    attrs = old_attrs(forest, "target") | {"post_transform": "NONE"}
    for shape in [(9, 3), (3,)]:
        x = (np.random.default_rng(3).integers(-2, 3, shape)).astype(dtype)
        built = ml_model("TreeEnsembleRegressor", {"x": x}, ml_opset=1, n_targets=1, **attrs)
        floats = x.astype(np.float32)  # the reference gives integers for integers
        want = run_reference(ml_model("TreeEnsembleRegressor", {"x": floats}, ml_opset=1,
                                      n_targets=1, **attrs), {"x": floats})[0]
        close(run(built, {"x": x})[0], want.reshape(-1, 1))


@pytest.mark.parametrize("classes", [1, 2, 3])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_binary_tree_ensemble_classifier_matches_the_reference(classes: int, post: str,
                                                                 device: str) -> None:
    """One class id (gradient boosting's binary case): the scores are [1 - s, s] (or [-s, s]
    before LOGISTIC, SOFTMAX, SOFTMAX_ZERO), then transformed; the label is the best one."""
    rng = np.random.default_rng(classes)
    forest = random_forest(rng, features=3, trees=5, depth=3, targets=1, modes=(0, 3, 5))
    x = grid(rng, (30, 3))
    labels = [1] if classes == 1 else [7, 9, 11][:classes]
    built = ml_model("TreeEnsembleClassifier", {"x": x}, outputs=2, ml_opset=3,
                     classlabels_int64s=labels, post_transform=post, base_values=[0.25],
                     **old_attrs(forest, "class"))
    got, want = run(built, {"x": x}, device), run_reference(built, {"x": x})
    close(got[1], want[1].astype(np.float32), rtol=1e-5, atol=1e-5)
    close(got[0], want[0])


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_a_multiclass_tree_ensemble_classifier_matches_the_reference_and_onnx_runtime(
        post: str) -> None:
    """Leaves voting for every class (a random forest's) and leaves voting for one."""
    rng = np.random.default_rng(4)
    forest = random_forest(rng, features=4, trees=6, depth=4, targets=3, modes=(0, 2))
    attrs = old_attrs(forest, "class", as_tensor=False)
    extra = np.flatnonzero(np.asarray(attrs["class_ids"]) == 0)  # more votes on some leaves
    for key in ("class_treeids", "class_nodeids"):
        attrs[key] = attrs[key] + [attrs[key][i] for i in extra]
    attrs["class_ids"] = attrs["class_ids"] + [2] * len(extra)
    attrs["class_weights"] = attrs["class_weights"] + [0.125] * len(extra)
    x = grid(rng, (50, 4), nan=0)
    built = ml_model("TreeEnsembleClassifier", {"x": x}, outputs=2, ml_opset=3,
                     classlabels_int64s=[3, 4, 5], post_transform=post,
                     base_values=[0.0, 0.5, -0.5], **attrs)
    got, want = run(built, {"x": x}), run_reference(built, {"x": x})
    close(got[1], want[1].astype(np.float32), rtol=1e-5, atol=1e-5)
    close(got[0], want[0])
    ort = run_ort(built, {"x": x})
    close(got[1], ort[1], rtol=1e-5, atol=1e-5)
    close(got[0], ort[0])


# ---------------------------------------------------------------------------------------------
# LabelEncoder, Binarizer, ArrayFeatureExtractor


@pytest.mark.parametrize(("dtype", "keys", "values", "opset"), [
    ("int64", {"keys_int64s": [3, -1, 7, 3]}, {"values_floats": [0.5, 1.5, 2.5, 3.5]}, 2),
    ("float32", {"keys_floats": [0.5, np.nan, -2.0]}, {"values_int64s": [10, 20, 30],
                                                        "default_int64": 99}, 2),
    ("float32", {"keys_floats": [1.0, -0.0]}, {"values_floats": [4.0, 5.0],
                                                "default_float": 7.5}, 4),
    ("int32", {"keys_tensor": np.array([1, 2, 2], np.int32)},
     {"values_tensor": np.array([5.0, 6.0, 7.0]), "default_tensor": np.array([0.5])}, 4),
    ("float64", {"keys_tensor": np.array([0.5, np.nan])},
     {"values_tensor": np.array([1, 2], np.int16),
      "default_tensor": np.array([-7], np.int16)}, 4),
    ("int16", {"keys_int64s": [1, 70000, -2]}, {"values_int64s": [1, 2, 3]}, 4),
])
@pytest.mark.parametrize("device", DEVICES)
def test_label_encoder_matches_the_reference(dtype: str, keys: dict[str, Any],
                                             values: dict[str, Any], opset: int,
                                             device: str) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(-3, 8, 20) / (2 if dtype.startswith("f") else 1),
                        [np.nan, 0.0] if dtype.startswith("f") else [1, 2]]).astype(dtype)
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
             for k, v in {**keys, **values}.items()}
    built = ml_model("LabelEncoder", {"x": x}, ml_opset=opset, **attrs)
    got, want = run(built, {"x": x}, device)[0], run_reference(built, {"x": x})[0]
    key_list = np.asarray(next(iter(keys.values())), np.float64)
    if np.isnan(key_list).any():  # the reference's dict misses NaN; ONNX says a NaN key
        nan = np.isnan(x)         # matches any NaN
        value = np.asarray(next(iter(values.values())))[np.isnan(key_list)][-1]
        assert (got[nan] == value).all()
        got, want = got[~nan], want[~nan]
    close(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
@pytest.mark.parametrize("threshold", [0.0, 0.5, -1.5, 2.0, 1e30, -1e30])
def test_binarizer_matches_the_reference(dtype: str, threshold: float) -> None:
    x = (np.random.default_rng(1).integers(-8, 9, (3, 5)) / (4 if "float" in dtype else 1)
         ).astype(dtype)
    built = ml_model("Binarizer", {"x": x}, ml_opset=1, threshold=threshold)
    close(run(built, {"x": x})[0], run_reference(built, {"x": x})[0])


@pytest.mark.parametrize(("shape", "indices"), [
    ((3, 4), [0, 3, 3]), ((5,), [4, 0]), ((2, 3, 4), [[1, 2]]), ((2, 4), [-1])])
@pytest.mark.parametrize("device", DEVICES)
def test_array_feature_extractor_matches_the_reference(shape: tuple[int, ...],
                                                       indices: list[Any],
                                                       device: str) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    y = np.asarray(indices, np.int64)
    built = ml_model("ArrayFeatureExtractor", {"x": x, "y": y}, ml_opset=1)
    close(run(built, {"x": x, "y": y}, device)[0], run_reference(built, {"x": x, "y": y})[0])


def test_array_feature_extractor_refuses_indices_out_of_range_at_run() -> None:
    x, y = np.ones((2, 3), np.float32), np.array([0, 3], np.int64)
    module = graphrt.from_onnx(ml_model("ArrayFeatureExtractor", {"x": x, "y": y},
                                        ml_opset=1)).create("cpu")
    with pytest.raises(ExecutionError, match=r"indices must lie in \[-3, 3\)"):
        module(x=x, y=y)
    with pytest.raises(InputError):
        module(x=np.ones((2, 4), np.float32), y=y)


# ---------------------------------------------------------------------------------------------
# errors


def small_forest() -> tuple[np.ndarray, Forest]:
    forest = random_forest(np.random.default_rng(0), features=2, trees=2, depth=2, targets=2,
                           modes=(0,))
    return np.zeros((4, 2), np.float32), forest


@pytest.mark.parametrize(("change", "words"), [
    (lambda f: f.features.__setitem__(0, 5), ("reads feature 5", "has 2 features")),
    (lambda f: f.true.__setitem__(0, 50), ("true branch is",)),
    (lambda f: f.roots.append(99), ("tree root 99",)),
    (lambda f: f.targets.__setitem__(0, 9), ("leaf_targetids must lie in [0, n_targets = 2)",)),
    (lambda f: f.modes.__setitem__(0, 9), ("mode 9",)),
    (lambda f: f.modes.__setitem__(0, 6), ("BRANCH_MEMBER", "membership_values")),
    (lambda f: f.splits.pop(), ("one length",)),
    (lambda f: (f.true.__setitem__(1, 0), f.true_leafs.__setitem__(1, 0)), ("cycle",)),
])
def test_tree_ensemble_refuses_a_bad_forest(change: Any, words: tuple[str, ...]) -> None:
    x, forest = small_forest()
    change(forest)
    refused(tree_model(x, forest, 2), "my_treeensemble", *words)


def test_tree_ensemble_refuses_bad_attributes_and_inputs() -> None:
    x, forest = small_forest()
    refused(tree_model(x, forest, 2, aggregate_function=7), "aggregate_function must be one of")
    refused(tree_model(x, forest, 2, post_transform=9), "post_transform must be one of")
    forest.members = [1.0]
    forest.modes[0] = 6
    refused(tree_model(x, forest, 2), "NaN-terminated")
    x3 = np.zeros((2, 2, 2), np.float32)
    refused(tree_model(x3, small_forest()[1], 2), "must be [N, F]")


def test_the_older_tree_ensembles_refuse_a_bad_forest() -> None:
    x = np.zeros((2, 3), np.float32)
    forest = random_forest(np.random.default_rng(0), features=3, trees=2, depth=2, targets=1,
                           modes=(0,))
    attrs = old_attrs(forest, "target")

    def regressor(**changed: Any) -> Any:
        return ml_model("TreeEnsembleRegressor", {"x": x}, ml_opset=3, n_targets=1,
                        **(attrs | changed))

    refused(regressor(nodes_truenodeids=[77] * len(attrs["nodes_truenodeids"])),
            "names node 77 of tree 0, which does not exist")
    refused(regressor(nodes_modes=["BRANCH_XX"] * len(attrs["nodes_modes"])), "BRANCH_XX")
    refused(regressor(target_ids=[4] * len(attrs["target_ids"])), "outside [0, 1)")
    refused(regressor(nodes_nodeids=[0] * len(attrs["nodes_nodeids"])), "given twice")
    refused(regressor(target_nodeids=[0] * len(attrs["target_nodeids"])), "not a leaf")
    refused(regressor(aggregate_function="MEDIAN"), "aggregate_function must be one of")
    classifier = ml_model("TreeEnsembleClassifier", {"x": x}, outputs=2, ml_opset=3,
                          classlabels_strings=["a", "b"], **old_attrs(forest, "class"))
    refused(classifier, "my_treeensembleclassifier", "strings are not supported")


@pytest.mark.parametrize(("attrs", "words"), [
    ({"keys_strings": ["a"], "values_int64s": [1]}, ("the keys are strings",)),
    ({"keys_int64s": [1], "values_strings": ["a"]}, ("the values are strings",)),
    ({"keys_int64s": [1, 2], "values_int64s": [1]}, ("2 keys and 1 values",)),
    ({"values_int64s": [1]}, ("exactly one of keys",)),
    ({"keys_int64s": [1], "keys_floats": [1.0], "values_int64s": [1, 2]}, ("exactly one",)),
    ({"keys_floats": [1.0], "values_int64s": [1]}, ("keys_floats takes a float",)),
])
def test_label_encoder_refuses_strings_and_bad_attributes(attrs: dict[str, Any],
                                                          words: tuple[str, ...]) -> None:
    x = np.zeros(3, np.int64)
    refused(ml_model("LabelEncoder", {"x": x}, ml_opset=4, **attrs), "my_labelencoder", *words)


def test_label_encoder_1_and_string_inputs_are_refused() -> None:
    x = np.zeros(3, np.int64)
    refused(ml_model("LabelEncoder", {"x": x}, ml_opset=1, classes_strings=["a"]),
            "my_labelencoder", "LabelEncoder (opset 1)", "unsupported")
    refused(ml_model("LabelEncoder", {"x": x}, ml_opset=2, input_types={"x": TensorProto.STRING},
                     keys_strings=["a"], values_int64s=[1]), "STRING is not supported")


# ---------------------------------------------------------------------------------------------
# the standard ops on their own


def stump_tables(code: int, threshold: float, members: list[float] | None = None
                 ) -> list[np.ndarray]:
    """One node on feature 0 with branch ``code``: true votes 1.0, false 2.0."""
    values = np.asarray(sorted(members or []), np.float32)
    return [np.array([[0, 0, 0], [code, 0, 0], [2, 1, 2], [1, 1, 2]]),
            np.array([threshold, 0, 0], np.float32), np.array([0]), np.array([[0], [0]]),
            np.array([[1.0], [2.0]], np.float32), np.zeros(1, np.float32), values,
            np.arange(len(values), dtype=np.int64)]


@pytest.mark.parametrize(("code", "threshold", "members", "want"), [
    (3, 0.5, None, [1, 1, 2, 2, 2]),            # BRANCH_LEQ: NaN false
    (3 | 16, 0.5, None, [1, 1, 2, 1, 2]),       # missing values tracked true
    (29, 0.5, None, [1, 2, 1, 1, 1]),           # BRANCH_NEQ: NaN != 0.5
    (13, 0.5, None, [1, 2, 1, 2, 1]),           # the older ops' NEQ: NaN false
    (13, np.nan, None, [1, 1, 1, 2, 1]),        # a NaN threshold: unordered
    (32, 0.0, [0.5, 2.0], [2, 1, 2, 2, 1]),     # a set
    (32 | 16, 0.0, [0.5, 2.0], [2, 1, 2, 1, 1]),
])
@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_the_tree_ensemble_op_branches_by_code(code: int, threshold: float,
                                               members: list[float] | None, want: list[int],
                                               device: graphrt.Device) -> None:
    x = np.array([[0.0], [0.5], [1.0], [np.nan], [2.0]], np.float32)
    (got,) = run_op("tree_ensemble", [x, *stump_tables(code, threshold, members)],
                    {"depth": 1}, device, lowered=True)
    assert got.ravel().tolist() == want


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=["cpu", "sim"])
def test_the_label_encode_and_score_transform_ops(device: graphrt.Device) -> None:
    x = np.array([[2.0, np.nan], [5.0, -1.0]], np.float32)
    keys, values = np.array([-1.0, 2.0, np.nan], np.float32), np.array([10, 20, 30])
    (got,) = run_op("label_encode", [x, keys, values, np.array(-5)], {}, device)
    assert got.tolist() == [[20, 30], [-5, 10]]
    (got,) = run_op("label_encode", [x, keys[:0], values[:0], np.array(-5)], {}, device)
    assert got.tolist() == [[-5, -5], [-5, -5]]
    scores = np.array([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0], [0.25, 0.5, 0.75]], np.float32)
    (got,) = run_op("score_transform", [scores], {"kind": "softmax_zero"}, device)
    np.testing.assert_allclose(got, softmax_zero(scores.copy()), rtol=1e-6)
    (got,) = run_op("score_transform", [scores[2:]], {"kind": "probit"}, device)
    np.testing.assert_allclose(got, probit(scores[2:]), rtol=1e-6)


def test_the_classical_ml_ops_refuse_bad_types() -> None:
    tree, label, score = get_op("tree_ensemble"), get_op("label_encode"), get_op(
        "score_transform")
    tables = [TensorType(t.shape, str(t.dtype)) for t in stump_tables(3, 0.0)]
    x = TensorType((4, 1), "float32")
    cases = [
        (tree, [x, *tables[:-1]], {"depth": 1}, "expected 9 inputs"),
        (tree, [TensorType((4, 1), "int32"), *tables], {"depth": 1}, "x must be a 2-D"),
        (tree, [x, TensorType((3, 3), "int64"), *tables[1:]], {"depth": 1}, "[4, M]"),
        (tree, [x, *tables[:3], TensorType((9, 1), "int64"), *tables[4:]], {"depth": 1},
         "one [L, V] shape"),
        (label, [x, TensorType((2,), "float64"), TensorType((2,), "int64"),
                 TensorType((), "int64")], {}, "keys must be"),
        (label, [x, TensorType((2,), "float32"), TensorType((3,), "int64"),
                 TensorType((), "int64")], {}, "one length"),
        (score, [TensorType((2,), "int32")], {"kind": "probit"}, "float tensor"),
    ]
    for op, types, attrs, words in cases:
        with pytest.raises(OpError, match=None) as caught:
            op.infer(types, op.attrs(**attrs), [None] * len(types))
        assert words in str(caught.value), str(caught.value)
