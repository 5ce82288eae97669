"""ONNX's own conformance suite (``onnx.backend.test``) run through ``graphrt.onnx.backend``.

The node, simple, pytorch-converted and pytorch-operator categories run on cpu. Each test
falls in one of four classes, decided from its model:

- **excluded**: it uses an op family or a data type graphrt deliberately does not support
  (strings, optional values, training); :data:`EXCLUDED` gives every pattern its reason.
  These are not run.
- **unsupported**: it uses an op graphrt has no converter for (yet). The test checks that
  preparing the model fails with a :class:`graphrt.ConversionError` naming that op: the
  clear error a user gets.
- **random**: it draws random numbers (``Bernoulli`` and its expansion). ONNX compares them
  with numpy's global random state, which no runtime reproduces (ONNX's own comment says so),
  so the test checks the outputs' shape, dtype and that every value is 0 or 1.
- **supported**: every op has a converter. The test must pass, except the few listed in
  :data:`KNOWN_FAILURES` with their reason, which are expected to fail (strictly: one that
  starts passing must leave the list).

``python benchmarks/onnx_backend_suite.py`` prints the pass counts next to ONNX Runtime's.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

onnx = pytest.importorskip("onnx")

with warnings.catch_warnings():  # building the node test cases warns about overflows
    warnings.simplefilter("ignore")
    import onnx.backend.test
    from onnx.backend.test.loader import load_model_tests

import graphrt  # noqa: E402
import graphrt.onnx.backend as backend  # noqa: E402
from graphrt.onnx.model import MIN_OPSET, OnnxNode  # noqa: E402
from graphrt.onnx.registry import find_converter  # noqa: E402

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")

# Op families graphrt deliberately does not support: op type (domain-qualified outside the
# default domain) → reason.
_FAMILIES: dict[str, tuple[str, ...]] = {
    "optional values: graphrt's graphs carry tensors only": (
        "OptionalGetElement", "OptionalHasElement", "Optional"),
    "strings: graphrt has no string dtype": (
        "StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch",
        "TfIdfVectorizer"),
    "training optimizers": (
        "ai.onnx.preview.training.Adagrad", "ai.onnx.preview.training.Adam",
        "ai.onnx.preview.training.Momentum"),
}
EXCLUDED_OPS = {op: reason for reason, ops in _FAMILIES.items() for op in ops}

# Ops that draw random numbers: their tests check the kind of values, not the values.
RANDOM_OPS = frozenset({"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike", "Multinomial"})

# Element types graphrt has no dtype for.
_MISSING_TYPES = {
    getattr(onnx.TensorProto, name): name
    for name in ("STRING", "COMPLEX64", "COMPLEX128")
    if hasattr(onnx.TensorProto, name)}

EXCLUDED: dict[str, str] = {
    "Dropout in training mode draws a random mask: outputs are not reproducible":
        r"^test_training_dropout",
}
"""Test-name patterns excluded beyond the op families and data types, with the reason."""

KNOWN_FAILURES: dict[str, str] = {
    r"^test_attention_4d_causal_fp16(_expanded)?$":
        "graphrt sums float16 softmax denominators in float32 and rounds once; ONNX's "
        "reference rounds in float16, and 2 of 192 outputs differ by 2 float16 ulps, just "
        "over the test's rtol of 1e-3",
}
"""Test names (regex) of supported ops that fail today, with the reason: each one is a bug."""


def _types_in(model: Any) -> set[int]:
    graph = model.graph
    found = {t.data_type for t in graph.initializer}
    for value_info in [*graph.input, *graph.output, *graph.value_info]:
        found.add(value_info.type.tensor_type.elem_type)
        found.add(value_info.type.sequence_type.elem_type.tensor_type.elem_type)
    for node in graph.node:
        for attr in node.attribute:
            if attr.name in ("to", "output_dtype", "dtype") and attr.type == attr.INT:
                found.add(attr.i)
            if attr.type == attr.TENSOR:
                found.add(attr.t.data_type)
    return found


def _op_name(node: Any) -> str:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    return f"{domain}.{node.op_type}" if domain else node.op_type


def classify(name: str, model: Any) -> tuple[str, str]:
    """``("excluded", reason)``, ``("unsupported", op)``, ``("random", "")`` or
    ``("supported", "")``."""
    for reason, pattern in EXCLUDED.items():
        if re.search(pattern, name):
            return "excluded", reason
    ops = [_op_name(node) for node in model.graph.node]
    for op in ops:
        if op in EXCLUDED_OPS:
            return "excluded", EXCLUDED_OPS[op]
    graph = model.graph
    if any(vi.type.WhichOneof("value") not in ("tensor_type", "sequence_type")
           for vi in [*graph.input, *graph.output]):
        return "excluded", "optional values: graphrt's graphs carry tensors only"
    missing = sorted(_MISSING_TYPES[t] for t in _types_in(model) if t in _MISSING_TYPES)
    if missing:
        return "excluded", f"data types graphrt lacks ({', '.join(missing)})"
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version
              for o in model.opset_import}
    opsets[""] = max(opsets.get("", MIN_OPSET), MIN_OPSET)  # older models are upgraded
    for node in model.graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        view = OnnxNode(_op_name(node), node.name, (), (), {}, opsets.get(domain, 0), 0)
        if find_converter(view) is None:
            return "unsupported", _op_name(node)
    if any(op in RANDOM_OPS for op in ops):
        return "random", ""
    return "supported", ""


DATA: dict[str, Any] = {}
"""Test name → ONNX's data sets (inputs, expected outputs) of the random tests."""


def _load_cases() -> dict[str, tuple[str, Any, str, str]]:
    """Test name → (kind, model, class, detail)."""
    cases = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            for case in load_model_tests(kind=kind):
                model = case.model if case.model is not None else onnx.load(
                    f"{case.model_dir}/model.onnx")
                cases[case.name] = (kind, model, *classify(case.name, model))
                if cases[case.name][2] == "random":
                    DATA[case.name] = case.data_sets
    return cases


CASES = _load_cases()


def _names(cls: str, kind: str | None = None) -> list[str]:
    return sorted(name for name, (k, _, c, _) in CASES.items()
                  if c == cls and (kind is None or k == kind))


def _runner_functions() -> dict[str, Any]:
    """Test name → ONNX's own test function for it on cpu (its loading, inputs, tolerances)."""
    suite = onnx.backend.test.BackendTest(backend, __name__)
    functions = {}
    for case in suite.test_cases.values():
        for attr in dir(case):
            if attr.startswith("test_") and attr.endswith("_cpu"):
                functions[attr[:-4]] = getattr(case, attr)
    return functions


_RUNNERS = _runner_functions()


def _supported_params() -> list[Any]:
    params = []
    for name in _names("supported"):
        reasons = [why for pattern, why in KNOWN_FAILURES.items() if re.search(pattern, name)]
        marks = [pytest.mark.xfail(reason=reasons[0], strict=True)] if reasons else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _supported_params())
def test_a_supported_model_matches_the_reference(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _RUNNERS[name](None)


@pytest.mark.parametrize("name", _names("unsupported"))
def test_an_unsupported_op_is_a_clear_conversion_error(name: str) -> None:
    _, model, _, op = CASES[name]
    with pytest.raises(graphrt.ConversionError) as caught:
        backend.prepare(model, "CPU")
    assert op in str(caught.value) and "not supported" in str(caught.value)


@pytest.mark.parametrize("name", _names("random"))
def test_a_random_op_model_gives_values_of_the_right_kind(name: str) -> None:
    _, model, _, _ = CASES[name]
    rep = backend.prepare(model, "CPU")
    assert DATA[name], f"{name}: ONNX gives no data set"
    for inputs, expected in DATA[name]:
        outputs = rep.run(inputs)
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected, strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
            assert ((got == 0) | (got == 1)).all(), got


def test_the_supported_share_of_node_tests_is_at_least_60_percent() -> None:
    node = [name for name, case in CASES.items() if case[0] == "node"]
    runnable = [n for n in _names("supported", "node")
                if not any(re.search(p, n) for p in KNOWN_FAILURES)]
    assert len(runnable) >= 0.6 * len(node), (len(runnable), len(node))


def test_every_exclusion_has_a_reason_and_matches_something() -> None:
    excluded = [(name, reason) for name, (_, _, c, reason) in CASES.items() if c == "excluded"]
    assert all(reason for _, reason in excluded)
    for reason, pattern in EXCLUDED.items():
        assert reason and any(re.search(pattern, name) for name in CASES), pattern

