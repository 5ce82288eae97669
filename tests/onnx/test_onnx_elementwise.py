"""The elementwise ONNX converters and the standard ops they added (``activations.py``).

* ONNX models of one node, converted and run on cpu, against ONNX Runtime (or ONNX's reference
  evaluator where ONNX Runtime lacks the op at that opset), across the opsets where the op
  changed; output dtypes must match exactly.
* Every new standard op in a declarative function on cpu and sim, against numpy.
* The ops' CUDA expressions compiled as C++ (when a compiler is present) against ``compute``.
* Conversion errors name the node.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from builders import GraphBuilder
from ops_harness import run_op
from ort_compat import for_ort

import graphrt
from graphrt.kernels.cuda.elementwise import _C_TYPES
from graphrt.ops import OPS, OpError, TensorType, activations, get_op

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

rng = np.random.default_rng(20240607)
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOAT, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL


def uniform(shape: tuple[int, ...], low: float = -3.0, high: float = 3.0,
            dtype: Any = "float32") -> np.ndarray:
    return rng.uniform(low, high, shape).astype(dtype)


def integers(shape: tuple[int, ...], low: int, high: int, dtype: str) -> np.ndarray:
    return rng.integers(low, high, shape, endpoint=True).astype(dtype)


def nonzero(shape: tuple[int, ...], low: int, high: int, dtype: str) -> np.ndarray:
    values = integers(shape, low, high, dtype)
    return np.where(values == 0, np.asarray(3, dtype), values)


SPECIAL32 = np.array([-np.inf, -3.5, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.5, np.inf,
                      np.nan], "float32")

# --------------------------------------------------------------------------------------------
# ONNX models of one node
# --------------------------------------------------------------------------------------------


def make_model(op_type: str, opset: int, inputs: dict[str, np.ndarray],
               attrs: dict[str, Any] | None = None, outputs: int = 1,
               initializers: dict[str, np.ndarray] | None = None,
               node_inputs: list[str] | None = None, out_types: list[int] | None = None) -> Any:
    """A model of one ``op_type`` node; output types come from ONNX's shape inference, or
    from ``out_types`` where it gives none."""
    initializers = initializers or {}
    names = node_inputs if node_inputs is not None else [*inputs, *initializers]
    out_names = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op_type, names, out_names, name="the_node", **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for name, a in inputs.items()],
        [onnx.ValueInfoProto(name=name) for name in out_names],
        [numpy_helper.from_array(a, name) for name, a in initializers.items()])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shape = next(iter(inputs.values())).shape
    for k, output in enumerate(inferred.graph.output):
        if output.type.WhichOneof("value") is None and out_types:  # old Dropout masks
            output.CopyFrom(helper.make_tensor_value_info(output.name, out_types[k], shape))
    return inferred


def run_graphrt(model: Any, feeds: dict[str, np.ndarray], device: str = "cpu"
                ) -> list[np.ndarray]:
    module = graphrt.from_onnx(model).create(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [np.asarray(out) for out in module(**feeds)]


def run_reference(model: Any, feeds: dict[str, np.ndarray], oracle: str) -> list[np.ndarray]:
    if oracle == "ort":
        session = ort.InferenceSession(for_ort(model).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return [np.asarray(out) for out in session.run(None, feeds)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [np.asarray(out) for out in ReferenceEvaluator(model).run(None, feeds)]


def assert_matches(got: list[np.ndarray], want: list[np.ndarray], rtol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=rtol,
                                       atol=rtol * 1e-2, equal_nan=True)


class Case:
    """One differential case: a node, its inputs, the oracle and the tolerance."""

    def __init__(self, op_type: str, opset: int, *inputs: np.ndarray, oracle: str = "ort",
                 rtol: float | None = None, outputs: int = 1, init: dict[str, Any] | None
                 = None, node_inputs: list[str] | None = None,
                 out_types: list[int] | None = None, **attrs: Any) -> None:
        self.op_type, self.opset, self.oracle, self.outputs = op_type, opset, oracle, outputs
        self.inputs = {f"x{k}": a for k, a in enumerate(inputs)}
        self.attrs, self.init, self.node_inputs = attrs, init or {}, node_inputs
        self.out_types = out_types
        narrow = any(a.dtype in (np.float16, BF16) for a in inputs)
        self.rtol = rtol if rtol is not None else (2e-3 if narrow else 2e-6)
        dtypes = "_".join(str(a.dtype) for a in inputs)
        extra = "_".join(f"{k}{v}" for k, v in attrs.items())
        self.id = f"{op_type}{opset}_{dtypes}{'_' + extra if extra else ''}"

    def model(self) -> Any:
        return make_model(self.op_type, self.opset, self.inputs, self.attrs, self.outputs,
                          self.init, self.node_inputs, self.out_types)


S = (3, 4)
CASES: list[Case] = []
# Arithmetic: integer Div truncates toward zero; broadcasting since opset 7.
for _op in ("Add", "Sub", "Mul", "Div"):
    for _opset in (7, 13, 14):
        CASES.append(Case(_op, _opset, uniform(S), uniform((4,), 0.5, 3.0)))
    CASES.append(Case(_op, 14, nonzero(S, -50, 50, "int32"), nonzero((4,), -7, 7, "int32")))
    CASES.append(Case(_op, 14, nonzero(S, -100, 100, "int8"), nonzero(S, -9, 9, "int8")))
    CASES.append(Case(_op, 14, nonzero(S, 0, 250, "uint8"), nonzero(S, 1, 9, "uint8")))
    CASES.append(Case(_op, 14, uniform(S, dtype="float16"), uniform(S, 0.5, 2, "float16")))
CASES += [
    Case("Div", 14, nonzero(S, -2**40, 2**40, "int64"), nonzero(S, -1000, 1000, "int64")),
    Case("Pow", 7, uniform(S, 0.1, 3), uniform(S, -2, 2)),
    Case("Pow", 12, uniform(S, 0.1, 3), integers(S, -3, 3, "int64")),
    Case("Pow", 13, integers(S, -5, 5, "int32"), uniform(S, 0, 3)),
    Case("Pow", 15, integers(S, -9, 9, "int64"), integers((4,), 0, 5, "int64")),
    Case("Pow", 15, uniform(S, 0.1, 3), integers(S, 0, 4, "uint8"), oracle="reference"),
    Case("Pow", 15, uniform(S, 0.5, 2, "float16"), uniform(S, -2, 2, "float16")),
    Case("Mod", 10, nonzero(S, -30, 30, "int32"), nonzero((4,), -7, 7, "int32")),
    Case("Mod", 13, nonzero(S, -30, 30, "int64"), nonzero(S, -7, 7, "int64"), fmod=1),
    Case("Mod", 13, uniform(S, -9, 9), uniform(S, 0.5, 3) * np.sign(uniform(S)), fmod=1),
    Case("Mod", 13, nonzero(S, 0, 200, "uint8"), nonzero(S, 1, 9, "uint8")),
    Case("Mod", 28, uniform(S, -9, 9), uniform(S, 0.5, 3) * np.sign(uniform(S)),
         oracle="reference"),
    Case("Mod", 28, SPECIAL32, np.float32(-2.0) * np.ones(13, "float32"), oracle="reference"),
]
# Variadic ops: same shapes before opset 8, broadcasting after.
for _op in ("Max", "Min", "Sum", "Mean"):
    CASES.append(Case(_op, 7, uniform(S), uniform(S), uniform(S)))
    CASES.append(Case(_op, 8, uniform((2, 1, 4)), uniform(S), uniform((4,))))
    CASES.append(Case(_op, 13, uniform(S)))
    CASES.append(Case(_op, 13, uniform(S, dtype="float16"), uniform((4,), dtype="float16")))
for _op in ("Max", "Min"):
    CASES.append(Case(_op, 12, integers(S, -100, 100, "int8"), integers((4,), -100, 100, "int8")))
    CASES.append(Case(_op, 13, integers(S, 0, 10**6, "uint32"), integers(S, 0, 10**6, "uint32")))
# Activations.
for _op, _opsets in [("Relu", (7, 14)), ("Sigmoid", (7, 13)), ("Tanh", (7, 13)),
                     ("Exp", (7, 13)), ("Neg", (7, 13)), ("Abs", (7, 13)), ("Floor", (7, 13)),
                     ("Ceil", (7, 13)), ("Softplus", (7, 22)), ("Softsign", (7, 22)),
                     ("Erf", (9, 13)), ("Sign", (9, 13)), ("Round", (11, 22)),
                     ("HardSwish", (14, 22)), ("Mish", (18, 22)), ("Sin", (7, 22)),
                     ("Cos", (7, 22)), ("Tan", (7, 22)), ("Atan", (7, 22)),
                     ("Sinh", (9, 22)), ("Cosh", (9, 22)), ("Asinh", (9, 22))]:
    for _opset in _opsets:
        CASES.append(Case(_op, _opset, uniform((2, 3, 4), -4, 4)))
for _op, _low, _high in [("Log", 0.01, 9), ("Sqrt", 0, 9), ("Reciprocal", 0.1, 9),
                         ("Asin", -1, 1), ("Acos", -1, 1), ("Acosh", 1, 9),
                         ("Atanh", -0.99, 0.99)]:
    CASES.append(Case(_op, 7 if _op in ("Log", "Sqrt", "Reciprocal", "Asin", "Acos") else 9,
                      uniform(S, _low, _high)))
    CASES.append(Case(_op, 13 if _op in ("Log", "Sqrt", "Reciprocal") else 22,
                      uniform(S, _low, _high)))
CASES += [
    Case("Relu", 14, integers(S, -9, 9, "int8")),
    Case("Neg", 13, integers(S, -9, 9, "int32")),
    Case("Abs", 13, integers(S, -9, 9, "int16")),
    Case("Abs", 13, integers(S, 0, 200, "uint8")),
    Case("Sign", 13, integers(S, -9, 9, "int64")),
    Case("Round", 11, np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, -3.51], "float32")),
    Case("Relu", 14, uniform(S, dtype="float16"), oracle="reference"),
    Case("LeakyRelu", 7, uniform(S)),
    Case("LeakyRelu", 16, uniform(S), alpha=0.3),
    Case("Elu", 7, uniform(S)),
    Case("Elu", 22, uniform(S), alpha=0.5),
    Case("Selu", 7, uniform(S)),
    Case("Selu", 22, uniform(S), alpha=2.0, gamma=3.0),
    Case("Celu", 12, uniform(S)),
    Case("Celu", 12, uniform(S), alpha=2.5),
    Case("HardSigmoid", 7, uniform(S, -6, 6)),
    Case("HardSigmoid", 22, uniform(S, -6, 6), alpha=0.4, beta=0.3),
    Case("ThresholdedRelu", 10, uniform(S)),
    Case("ThresholdedRelu", 22, uniform(S), alpha=0.5),
    Case("Shrink", 9, uniform(S)),
    Case("Shrink", 9, uniform(S), bias=1.5, lambd=1.0),
    Case("Shrink", 9, integers(S, -9, 9, "int32"), bias=1.5, lambd=2.0),
    Case("Gelu", 20, uniform(S), rtol=1e-5),  # ORT's erf is a few ulp off
    Case("Gelu", 20, uniform(S), approximate="tanh", rtol=1e-5),
    Case("Swish", 24, uniform(S), oracle="reference"),
    Case("Swish", 24, uniform(S), alpha=0.5, oracle="reference"),
    Case("PRelu", 7, uniform((2, 3, 4)), uniform((4,))),
    Case("PRelu", 9, uniform((2, 3, 4)), uniform((3, 1))),
    Case("PRelu", 16, integers((2, 3, 4), -9, 9, "int32"), integers((4,), -3, 3, "int32")),
    Case("Celu", 28, uniform(S).astype(BF16), oracle="reference", rtol=1e-2),
    Case("Sigmoid", 13, uniform(S).astype(BF16), oracle="reference", rtol=1e-2),
    Case("Add", 14, uniform(S).astype(BF16), uniform(S).astype(BF16), oracle="reference",
         rtol=1e-2),
]
# Clip: attributes before opset 11, optional inputs after; integers from 12; min > max.
CASES += [
    Case("Clip", 7, uniform(S)),
    Case("Clip", 7, uniform(S), min=-0.5, max=0.7),
    Case("Clip", 7, uniform(S), min=-0.5),
    Case("Clip", 7, uniform(S, dtype="float16"), max=0.7),
    Case("Clip", 11, uniform(S), init={"lo": np.float32(-1), "hi": np.float32(0.5)}),
    Case("Clip", 11, uniform(S), init={"hi": np.float32(0.5)}, node_inputs=["x0", "", "hi"]),
    Case("Clip", 12, integers(S, -100, 100, "int8"),
         init={"lo": np.int8(-5), "hi": np.int8(7)}),
    Case("Clip", 13, integers(S, -100, 100, "int64"), init={"lo": np.int64(-5)}),
    Case("Clip", 13, uniform(S), init={"lo": np.float32(1), "hi": np.float32(-1)}),
    Case("Clip", 13, uniform(S), np.array(-0.25, "float32"), np.array(0.75, "float32")),
    Case("Clip", 13, integers(S, -9, 9, "int32"), np.array(4, "int32"), np.array(-4, "int32")),
]
# Comparisons, logic, bitwise.
for _op, _versions in [("Equal", (7, 11, 13, 19)), ("Less", (7, 9, 13)),
                       ("Greater", (7, 9, 13)), ("LessOrEqual", (12, 16)),
                       ("GreaterOrEqual", (12, 16))]:
    for _opset in _versions:
        _dtype = "int32" if _op == "Equal" and _opset < 11 else "float32"
        _a = integers(S, -3, 3, _dtype)
        CASES.append(Case(_op, _opset, _a, np.concatenate([_a[:2], _a[:1] * 0 + 1])))
    CASES.append(Case(_op, _versions[-1], integers(S, 0, 3, "uint16"),
                      integers((4,), 0, 3, "uint16")))
CASES += [Case("Equal", 13, integers(S, 0, 1, "bool"), integers((4,), 0, 1, "bool"))]
for _op in ("And", "Or", "Xor"):
    CASES.append(Case(_op, 7, integers((2, 3, 4), 0, 1, "bool"), integers((3, 1), 0, 1, "bool")))
CASES.append(Case("Not", 7, integers(S, 0, 1, "bool")))
for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    CASES.append(Case(_op, 18, integers(S, -100, 100, "int16"), integers((4,), -100, 100,
                                                                         "int16")))
    CASES.append(Case(_op, 18, integers(S, 0, 2**40, "uint64"), integers(S, 0, 2**40, "uint64")))
CASES += [
    Case("BitwiseNot", 18, integers(S, -100, 100, "int32")),
    Case("BitwiseNot", 18, integers(S, 0, 255, "uint8")),
    Case("BitShift", 11, integers(S, 0, 255, "uint8"), integers(S, 0, 7, "uint8"),
         direction="LEFT"),
    Case("BitShift", 11, integers(S, 0, 2**31, "uint32"), integers((4,), 0, 31, "uint32"),
         direction="RIGHT"),
    Case("BitShift", 11, integers(S, 0, 255, "uint8"), integers(S, 8, 20, "uint8"),
         direction="LEFT", oracle="reference"),
    Case("BitShift", 28, integers(S, -128, 127, "int8"), integers(S, -2, 10, "int8"),
         direction="RIGHT", oracle="reference"),
    Case("BitShift", 28, integers(S, -128, 127, "int8"), integers(S, -2, 10, "int8"),
         direction="LEFT", oracle="reference"),
    Case("Where", 9, integers((2, 3, 4), 0, 1, "bool"), uniform((3, 4)), uniform((4,))),
    Case("Where", 16, integers(S, 0, 1, "bool"), integers(S, -9, 9, "int64"),
         integers((1,), -9, 9, "int64")),
    Case("IsNaN", 9, SPECIAL32),
    Case("IsNaN", 20, SPECIAL32.astype("float16")),
    Case("IsInf", 10, SPECIAL32),
    Case("IsInf", 20, SPECIAL32, detect_negative=0),
    Case("IsInf", 20, SPECIAL32, detect_positive=0),
    Case("IsInf", 20, SPECIAL32, detect_positive=0, detect_negative=0),
]
# Identity, Cast, CastLike, Dropout.
CASES += [Case("Identity", _opset, uniform(S)) for _opset in (7, 13, 16, 21)]
_CAST_SOURCES = [uniform(S, -300, 300), uniform(S, -9, 9, "float64"),
                 uniform(S, -9, 9, "float16"), integers(S, -2**31, 2**31 - 1, "int64"),
                 integers(S, 0, 255, "uint8"), integers(S, 0, 1, "bool"),
                 np.array([0.0, -0.0, 0.5, -0.7, np.inf, np.nan], "float32")]
for _source in _CAST_SOURCES:
    for _to in ("FLOAT", "DOUBLE", "FLOAT16", "INT8", "INT32", "INT64", "UINT8", "UINT16",
                "BOOL"):
        if not np.isfinite(_source).all() and _to not in ("FLOAT", "DOUBLE", "FLOAT16",
                                                          "BOOL"):
            continue
        CASES.append(Case("Cast", 13, _source, to=getattr(onnx.TensorProto, _to)))
CASES += [
    Case("Cast", 6, uniform(S, -9, 9), to=onnx.TensorProto.INT32),
    Case("Cast", 19, uniform(S), to=onnx.TensorProto.FLOAT16, saturate=0, oracle="reference"),
    Case("Cast", 21, uniform(S), to=onnx.TensorProto.BFLOAT16, oracle="reference"),
    Case("Cast", 21, uniform(S).astype(BF16), to=onnx.TensorProto.FLOAT, oracle="reference"),
    Case("Cast", 21, uniform(S, -9, 9).astype(BF16), to=onnx.TensorProto.INT32,
         oracle="reference"),
    Case("Cast", 21, integers(S, 0, 1, "bool"), to=onnx.TensorProto.BFLOAT16,
         oracle="reference"),
    Case("CastLike", 15, uniform(S, -9, 9), integers((1,), 0, 0, "int16")),
    Case("CastLike", 21, integers(S, -9, 9, "int32"), uniform((2,), dtype="float64")),
    # Masks: ONNX Runtime fills them with False before opset 12 (and True after); ONNX's
    # reference and graphrt give True, "kept", which opset 12 defines (output = data * mask).
    Case("Dropout", 7, uniform(S), ratio=0.3),
    Case("Dropout", 10, uniform(S), outputs=2, out_types=[FLOAT, BOOL], oracle="reference"),
    Case("Dropout", 12, uniform(S), outputs=2, init={"ratio": np.array(0.2, "float32")}),
    Case("Dropout", 13, uniform(S), outputs=2, init={"ratio": np.array(0.2, "float32"),
                                                     "training": np.array(False)}),
    Case("Dropout", 22, uniform(S)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_node_matches_the_reference(case: Case) -> None:
    model = case.model()
    assert_matches(run_graphrt(model, case.inputs),
                   run_reference(model, case.inputs, case.oracle), case.rtol)


def test_case_ids_are_unique_enough_to_read() -> None:
    assert len(CASES) > 250
    assert {c.op_type for c in CASES} >= {
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Relu",
        "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
        "Tanh", "Softplus", "Softsign", "Erf", "Gelu", "Exp", "Log", "Sqrt", "Reciprocal",
        "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Clip", "Where", "Equal", "Less",
        "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Sin", "Cos",
        "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "IsNaN",
        "IsInf", "Mish", "Swish", "ThresholdedRelu", "Shrink", "BitShift", "BitwiseAnd",
        "BitwiseOr", "BitwiseXor", "BitwiseNot", "Identity", "Cast", "CastLike", "Dropout"}


def test_integer_division_truncates_toward_zero_unlike_numpy() -> None:
    a = np.array([7, -7, 7, -7, 0, -1], "int32")
    b = np.array([2, 2, -2, -2, 5, 3], "int32")
    (got,) = run_graphrt(make_model("Div", 14, {"x0": a, "x1": b}), {"x0": a, "x1": b})
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0])
    (mod,) = run_graphrt(make_model("Mod", 13, {"x0": a, "x1": b}), {"x0": a, "x1": b})
    np.testing.assert_array_equal(mod, [1, 1, -1, -1, 0, 2])  # Python's sign rule
    (fmod,) = run_graphrt(make_model("Mod", 13, {"x0": a, "x1": b}, {"fmod": 1}),
                          {"x0": a, "x1": b})
    np.testing.assert_array_equal(fmod, [1, -1, 1, -1, 0, -1])  # C's


def test_a_runtime_clip_bound_and_the_sim_device() -> None:
    x = uniform((2, 5))
    lo, hi = np.float32(-0.5), np.float32(0.25)
    model = make_model("Clip", 13, {"x": x, "lo": lo, "hi": hi})
    for device in ("cpu", "sim"):
        (got,) = run_graphrt(model, {"x": x, "lo": lo, "hi": hi}, device)
        np.testing.assert_array_equal(got, np.clip(x, lo, hi))


def test_dropout_masks_are_ones_of_the_versions_dtype() -> None:
    x = uniform(S)
    old = run_graphrt(make_model("Dropout", 7, {"x": x}, outputs=2, out_types=[FLOAT, FLOAT]),
                      {"x": x})
    new = run_graphrt(make_model("Dropout", 13, {"x": x}, outputs=2), {"x": x})
    assert old[1].dtype == np.float32 and (old[1] == 1).all()
    assert new[1].dtype == np.bool_ and new[1].all()
    np.testing.assert_array_equal(new[0], x)


def test_max_of_one_input_and_identity_make_no_step() -> None:
    x = uniform(S)
    for op in ("Max", "Identity", "Sum"):
        converted = graphrt.onnx.convert_model(make_model(op, 13, {"x": x}))
        assert converted.emitted.graph["nodes"][-1]["op"] == "null"


# --------------------------------------------------------------------------------------------
# Conversion errors name the node
# --------------------------------------------------------------------------------------------

ERRORS = [
    ("Gelu", 20, [uniform(S)], {"approximate": "erf"}, "'approximate' must be 'none' or"),
    ("BitShift", 11, [integers(S, 0, 9, "uint8")] * 2, {"direction": "UP"}, "'direction'"),
    ("BitShift", 18, [integers(S, 0, 9, "int8")] * 2, {"direction": "LEFT"},
     "unsigned integers before opset 28"),
    ("Mod", 13, [uniform(S)] * 2, {"fmod": 2}, "'fmod' must be 0 or 1"),
    ("Mod", 13, [uniform(S)] * 2, {}, "fmod=0 takes integer inputs before opset 28"),
    ("IsInf", 20, [uniform(S)], {"detect_positive": 3}, "'detect_positive' must be 0 or 1"),
    ("Celu", 12, [uniform(S)], {"alpha": 0.0}, "nonzero alpha"),
    ("PRelu", 16, [uniform((4,)), uniform((3, 4))], {}, "does not broadcast to the input"),
    ("Cast", 25, [uniform(S)], {"to": onnx.TensorProto.FLOAT6E2M3},
     "FLOAT6E2M3 is not supported"),
    ("Cast", 25, [uniform(S)], {"to": onnx.TensorProto.FLOAT6E3M2}, "FLOAT6E3M2 is not supported"),
    ("Cast", 21, [uniform(S)], {"to": onnx.TensorProto.STRING}, "STRING is not supported"),
    ("Max", 7, [uniform(S), uniform((4,))], {}, "one shape before opset 8"),
    ("Pow", 7, [uniform(S), uniform(S, dtype="float64")], {}, "before opset 12"),
]


@pytest.mark.parametrize(("op_type", "opset", "inputs", "attrs", "message"), ERRORS,
                         ids=[f"{e[0]}-{e[4][:20]}" for e in ERRORS])
def test_a_bad_node_is_a_conversion_error_naming_it(
        op_type: str, opset: int, inputs: list[np.ndarray], attrs: dict[str, Any],
        message: str) -> None:
    feeds = {f"x{k}": a for k, a in enumerate(inputs)}
    model = make_model(op_type, opset, feeds, attrs) if op_type != "Cast" else \
        _untyped_output_model(op_type, opset, feeds, attrs)
    with pytest.raises(graphrt.ConversionError, match=re.escape(message)) as caught:
        graphrt.from_onnx(model)
    assert "'the_node'" in str(caught.value)


def _untyped_output_model(op_type: str, opset: int, inputs: dict[str, np.ndarray],
                          attrs: dict[str, Any]) -> Any:
    """A Cast model whose output is typed float32 (the real type graphrt refuses anyway)."""
    model = make_model("Identity", opset, inputs)
    node = model.graph.node[0]
    node.op_type = op_type
    node.attribute.extend([helper.make_attribute(k, v) for k, v in attrs.items()])
    return model


def test_an_opset_6_prelu_slope_is_per_channel() -> None:
    x, slope = uniform((2, 3, 4)), uniform((3,))
    model = make_model("PRelu", 7, {"x": x, "slope": slope})
    model.graph.initializer.append(numpy_helper.from_array(slope, "slope"))  # IR 3: an input
    model.opset_import[0].version = 6
    model.ir_version = 3
    (got,) = run_graphrt(model, {"x": x})
    s = slope.reshape(3, 1)
    np.testing.assert_allclose(got, np.where(x < 0, x * s, x), rtol=1e-6)


def test_dropout_in_training_mode_is_refused() -> None:
    x = uniform(S)
    model = make_model("Dropout", 13, {"x": x}, initializers={"training": np.array(True)},
                       node_inputs=["x", "", "training"])
    with pytest.raises(graphrt.ConversionError, match="training_mode is true") as caught:
        graphrt.from_onnx(model)
    assert "'the_node'" in str(caught.value)


# --------------------------------------------------------------------------------------------
# The new standard ops on cpu and sim
# --------------------------------------------------------------------------------------------

NEW_OPS = sorted(name for name, op in OPS.items() if op.compute.__module__ ==
                 activations.__name__)


def run_function(op: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None,
                 device: str) -> np.ndarray:
    """``op`` as the one step of a declarative function, in a graph run on ``device``."""
    definition = get_op(op)
    parsed = definition.attrs.model_validate(attrs or {})
    (out,) = definition.infer([TensorType(a.shape, str(a.dtype)) for a in inputs], parsed,
                              [None] * len(inputs))
    names = [f"a{k}" for k in range(len(inputs))]
    step: dict[str, Any] = {"op": op, "inputs": names, "outputs": ["y"]}
    if attrs:
        step["attrs"] = attrs
    lib = graphrt.Library.from_json({"format": "graphrt.lib", "version": 1, "functions": {
        "f": {"inputs": names, "outputs": ["y"], "body": [step]}}})
    g = GraphBuilder()
    refs = [g.input(name, list(a.shape), str(a.dtype)) for name, a in zip(names, inputs,
                                                                            strict=True)]
    y = g.op("f", "f", list(refs), shape=list(out.shape), dtype=out.dtype)
    module = graphrt.create(g.build(heads=[y]), lib, graphrt.device(device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        module.run(**dict(zip(names, inputs, strict=True)))
    return np.asarray(module.get_output(0, out=np.empty(out.shape, out.dtype)))


def _softplus(x: Any) -> Any:
    return np.logaddexp(0, x)


def _shift(x: np.ndarray, y: np.ndarray, left: bool) -> np.ndarray:
    """ONNX 28's BitShift on Python ints."""
    bits = x.dtype.itemsize * 8
    out = []
    for a, s in zip(x.tolist(), y.tolist(), strict=True):
        if 0 <= s < bits:
            out.append(a << s if left else a >> s)
        else:
            out.append(-1 if (not left and a < 0) else 0)
    mask = (1 << bits) - 1
    wrapped = [(v & mask) - ((v & mask) >> (bits - 1) << bits if x.dtype.kind == "i" else 0)
               for v in out]
    return np.array(wrapped, x.dtype)


F = np.concatenate([SPECIAL32, uniform((20,), -6, 6)])
G = np.array([3.0, 1.5, 0.5, -0.5, -2.0], "float32")
I8 = np.array([-128, -100, -7, -1, 0, 1, 5, 64, 127], "int8")
SHIFTS = np.array([-3, -1, 0, 1, 3, 7, 8, 9, 100], "int8")

# op → (inputs, attrs, numpy reference of float64/int inputs)
REFERENCES: dict[str, list[tuple[list[np.ndarray], dict[str, Any] | None, Any]]] = {
    "sin": [([F], None, np.sin)], "cos": [([F], None, np.cos)], "tan": [([F], None, np.tan)],
    "asin": [([F], None, np.arcsin)], "acos": [([F], None, np.arccos)],
    "atan": [([F], None, np.arctan)], "sinh": [([F], None, np.sinh)],
    "cosh": [([F], None, np.cosh)], "asinh": [([F], None, np.arcsinh)],
    "acosh": [([F], None, np.arccosh)], "atanh": [([F], None, np.arctanh)],
    "reciprocal": [([F], None, lambda x: 1 / x)],
    "softplus": [([F], None, _softplus)],
    "softsign": [([F], None, lambda x: x / (1 + np.abs(x)))],
    "mish": [([F], None, lambda x: x * np.tanh(_softplus(x)))],
    "hard_swish": [([F], None, lambda x: x * np.clip(x / 6 + 0.5, 0, 1))],
    "elu": [([F], None, lambda x: np.where(x > 0, x, np.expm1(x))),
            ([F], {"alpha": 0.5}, lambda x: np.where(x > 0, x, 0.5 * np.expm1(x)))],
    "selu": [([F], {"alpha": 2.0, "gamma": 3.0},
              lambda x: 3.0 * np.where(x > 0, x, 2.0 * np.expm1(x)))],
    "celu": [([F], {"alpha": 2.0}, lambda x: np.maximum(x, 0) + np.minimum(
        0, 2.0 * np.expm1(x / 2.0)))],
    "hard_sigmoid": [([F], {"alpha": 0.3, "beta": 0.4}, lambda x: np.clip(0.3 * x + 0.4, 0, 1))],
    "thresholded_relu": [([F], {"alpha": 0.5}, lambda x: np.where(x > 0.5, x, 0))],
    "swish": [([F], {"alpha": 2.0}, lambda x: x / (1 + np.exp(-2.0 * x)))],
    "isnan": [([F], None, np.isnan)],
    "isinf": [([F], None, np.isinf), ([F], {"detect_negative": False}, np.isposinf),
              ([F], {"detect_positive": False}, np.isneginf),
              ([F], {"detect_positive": False, "detect_negative": False},
               lambda x: np.zeros(x.shape, bool))],
    "sign": [([F], None, np.sign), ([I8], None, np.sign)],
    "shrink": [([F], {"bias": 0.5, "lambd": 1.0}, lambda x: np.where(
        x < -1, x + 0.5, np.where(x > 1, x - 0.5, 0))),
        ([I8], {"bias": 1.5, "lambd": 2.0}, lambda x: np.trunc(np.where(
            x < -2, x + 1.5, np.where(x > 2, x - 1.5, 0))))],
    "bitwise_not": [([I8], None, np.invert)],
    "prelu": [([F.reshape(3, 11), G[:1].reshape(1, 1)], None,
               lambda x, s: np.where(x < 0, x * s, x)),
              ([I8.reshape(3, 3), I8[:3].reshape(3, 1)], None,
               lambda x, s: np.where(x < 0, x * s, x))],
    "trunc_divide": [([I8, np.array([3, -3, 2, -2, 0, 7, -1, 5, 9], "int8")], None,
                      lambda a, b: np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b))))],
    "fmod": [([I8, np.array([3, -3, 2, -2, 0, 7, -1, 5, 9], "int8")], None,
              lambda a, b: np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))),
             ([F, np.full(F.shape, -1.5, "float32")], None, np.fmod)],
    "bitwise_and": [([I8, I8[::-1].copy()], None, np.bitwise_and)],
    "bitwise_or": [([I8, I8[::-1].copy()], None, np.bitwise_or)],
    "bitwise_xor": [([I8, I8[::-1].copy()], None, np.bitwise_xor)],
    "left_shift": [([I8, SHIFTS], None, lambda x, y: _shift(x, y, left=True))],
    "right_shift": [([I8, SHIFTS], None, lambda x, y: _shift(x, y, left=False)),
                    ([I8.astype("uint8"), SHIFTS.astype("uint8")], None,
                     lambda x, y: _shift(x, y, left=False))],
    "logical_xor": [([np.array([[True], [False]]), np.array([True, False])], None,
                     np.logical_xor)],
    "cast_bfloat16": [([F], {"dtype": "bfloat16"}, lambda x: x),
                      ([F.astype(BF16)], {"dtype": "float64"}, lambda x: x)],
}


def _reference_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [a if a.dtype.kind in "biu" else a.astype("float64") for a in inputs]


def test_every_new_op_has_a_reference_test() -> None:
    assert sorted(REFERENCES) == NEW_OPS


REFERENCE_CASES = [(op, k) for op in sorted(REFERENCES) for k in range(len(REFERENCES[op]))]


@pytest.mark.parametrize("device", ["cpu", "sim"])
@pytest.mark.parametrize(("op", "k"), REFERENCE_CASES)
def test_a_new_op_matches_numpy(op: str, k: int, device: str) -> None:
    inputs, attrs, reference = REFERENCES[op][k]
    got = run_function(op, inputs, attrs, device)
    with np.errstate(all="ignore"):
        want = np.asarray(reference(*_reference_inputs(inputs)))
    if want.dtype.kind in "biu":
        assert got.dtype == (inputs[0].dtype if want.dtype.kind != "b" else np.bool_)
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    else:
        rtol = 1e-2 if got.dtype == BF16 else 2e-6
        np.testing.assert_allclose(got.astype("float64"), want, rtol=rtol, atol=1e-6,
                                   equal_nan=True)


@pytest.mark.parametrize("dtype", ["float16", "float64", "bfloat16"])
@pytest.mark.parametrize("op", ["softplus", "mish", "elu", "celu", "swish", "hard_swish",
                                "sin", "isnan"])
def test_new_float_ops_take_every_float_dtype(op: str, dtype: str) -> None:
    x = uniform((7,), -4, 4, dtype)
    (wide,) = run_op(op, [x.astype("float32")])
    (got,) = run_op(op, [x])
    assert got.dtype == (np.bool_ if op == "isnan" else x.dtype)
    np.testing.assert_allclose(got.astype("float64"), wide.astype("float64"),
                               rtol=1e-2 if dtype != "float64" else 1e-6, atol=1e-3)


@pytest.mark.parametrize(("op", "inputs", "want"), [
    ("softplus", [np.array(-2.0, "float32")], math.log1p(math.exp(-2.0))),
    ("elu", [np.array(-2.0, "float32")], math.expm1(-2.0)),
    ("shrink", [np.array(-2, "int32")], -2),
    ("sign", [np.array(-2, "int32")], -1),
    ("prelu", [np.array(-2.0, "float32"), np.array(-2.0, "float32")], 4.0),
    ("left_shift", [np.array(-2, "int32"), np.array(3, "int32")], -16),
])
def test_new_ops_take_0d_inputs(op: str, inputs: list[np.ndarray], want: float) -> None:
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        (got,) = run_op(op, inputs, device=device)
        assert got.shape == () and got.dtype == inputs[0].dtype
        assert float(got) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("op", "types", "attrs", "message"), [
    ("sin", [TensorType((2,), "int32")], {}, "sin expects float input(s), but input 0 is int32"),
    ("sign", [TensorType((2,), "bool")], {}, "sign expects int, uint or float"),
    ("bitwise_and", [TensorType((2,), "int8"), TensorType((2,), "int16")], {},
     "needs inputs of one dtype"),
    ("bitwise_or", [TensorType((2,), "float32")] * 2, {}, "expects integer input(s)"),
    ("prelu", [TensorType((2,), "float32"), TensorType((3,), "float32")], {},
     "do not broadcast"),
    ("logical_xor", [TensorType((2,), "int8")] * 2, {}, "expects bool input(s)"),
    ("celu", [TensorType((2,), "float32")], {"alpha": 0.0}, "nonzero alpha"),
    ("cast_bfloat16", [TensorType((2,), "float32")], {"dtype": "int8"},
     "converts to or from bfloat16"),
    ("cast_bfloat16", [TensorType((2,), "float32")], {"dtype": "float8"},
     "unsupported target dtype"),
    ("elu", [TensorType((2,), "float32")] * 2, {}, "elu takes 1 input(s), got 2"),
])
def test_shape_functions_refuse(op: str, types: list[TensorType], attrs: dict[str, Any],
                                message: str) -> None:
    definition = get_op(op)
    with pytest.raises(OpError, match=re.escape(message)):
        definition.infer(types, definition.attrs.model_validate(attrs), [None] * len(types))


# --------------------------------------------------------------------------------------------
# CUDA expressions, compiled as C++ on the host
# --------------------------------------------------------------------------------------------

_FLOAT_GRID = [-4.0, -3.0, -2.5, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 1.5, 2.5, 3.0, 4.0, 30.0,
               math.inf, -math.inf, math.nan]
_INT_GRID = [-128, -100, -9, -7, -3, -1, 0, 1, 2, 3, 5, 7, 8, 9, 31, 32, 63, 64, 100, 127]


def _grid(dtype: str) -> list[Any]:
    if dtype == "bool":
        return [False, True]
    if dtype.startswith("float"):
        return _FLOAT_GRID
    info = np.iinfo(dtype)
    return [v for v in _INT_GRID if info.min <= v <= info.max] + [int(info.max)]


def _c_literal(value: Any, c_type: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "-INFINITY"
        return f"({c_type}){value.hex()}"
    return f"({c_type}){value}LL"


def _accepts(name: str, dtype: str) -> bool:
    op = get_op(name)
    try:
        op.infer([TensorType((1,), dtype)] * (op.arity or 1), op.attrs(), [None] * 2)
    except OpError:
        return False
    return True


EXPRESSION_CASES = [(name, dtype) for name in NEW_OPS if OPS[name].elementwise
                    for dtype in sorted(_C_TYPES) if _accepts(name, dtype)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], list[str]]:
    """Every (op, dtype) expression evaluated by a C++ program over its input grid."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler to check the CUDA expressions with")
    lines = ["#include <cmath>", "#include <cstdio>", "using namespace std;", "int main() {"]
    for name, dtype in EXPRESSION_CASES:
        c_type, arity = _C_TYPES[dtype], get_op(name).arity or 1
        grids = np.meshgrid(*[np.array(_grid(dtype), dtype=object)] * arity, indexing="ij")
        expression = re.sub(r"\bin(\d+)\b", r"x\1", get_op(name).elementwise or "")
        out_type = "bool" if name in ("isnan", "logical_xor") else c_type
        lines.append(f'printf("== {name} {dtype}\\n");')
        for values in zip(*[g.ravel() for g in grids], strict=True):
            args = " ".join(f"{c_type} x{k} = {_c_literal(v, c_type)};"
                            for k, v in enumerate(values))
            lines.append(f'{{ {args} {out_type} y = ({out_type})({expression}); '
                         f'printf("%.17g\\n", (double)y); }}' if out_type.startswith(
                             ("float", "double")) else
                         f'{{ {args} {out_type} y = ({out_type})({expression}); '
                         f'printf("%lld\\n", (long long)y); }}')
    lines += ["return 0;", "}"]
    folder = Path(tmp_path_factory.mktemp("expressions"))
    (folder / "e.cpp").write_text("\n".join(lines))
    subprocess.run([compiler, "-std=c++20", "-O0", "-w", "-o", str(folder / "e"),
                    str(folder / "e.cpp")], check=True, capture_output=True)
    output = subprocess.run([str(folder / "e")], check=True, capture_output=True,
                            text=True).stdout
    results: dict[tuple[str, str], list[str]] = {}
    for block in output.split("== ")[1:]:
        head, *printed = block.strip().splitlines()
        name, dtype = head.split()
        results[(name, dtype)] = printed
    return results


def test_there_are_expressions_to_check() -> None:
    assert len(EXPRESSION_CASES) > 40


@pytest.mark.parametrize(("name", "dtype"), EXPRESSION_CASES)
def test_an_expression_agrees_with_compute(name: str, dtype: str,
                                           compiled: dict[tuple[str, str], list[str]]) -> None:
    arity = get_op(name).arity or 1
    grids = np.meshgrid(*[np.array(_grid(dtype), dtype=dtype)] * arity, indexing="ij")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (got,) = run_op(name, [g.ravel() for g in grids])
    c_values = compiled[(name, dtype)]
    assert len(c_values) == got.size
    if got.dtype.kind in "biu":
        want = np.array([int(v) for v in c_values]).astype(got.dtype)
        np.testing.assert_array_equal(got, want)
    else:
        want_f = np.array([float(v) for v in c_values])
        rtol = 1e-6 if dtype == "float32" else 1e-13
        np.testing.assert_allclose(got.astype("float64"), want_f, rtol=rtol, atol=1e-30,
                                   equal_nan=True)
