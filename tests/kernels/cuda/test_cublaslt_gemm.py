"""Matrix products through nvmath-python's cuBLASLt on a real GPU (skipped cleanly without one,
or without ``nvmath-python``): each op, layout and epilogue against numpy, operands that move
between calls, and a BERT-style encoder recorded into CUDA graphs but for its gather."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.kernels import Epilogue, chain
from graphrt.kernels.cuda.cublaslt_gemm import nvmath_matmul
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.cuda
cupy = pytest.importorskip("cupy")

MODELS = Path(__file__).resolve().parents[3] / "examples" / "onnx" / "models.py"

CASES = [  # (op, input shapes, attrs)
    ("dense", [(64, 96), (48, 96), (48,)], {}),
    ("dense", [(2, 8, 96), (40, 96)], {}),
    ("dense", [(96,), (24, 96), (24,)], {}),
    ("matmul", [(64, 96), (96, 48)], {}),
    ("matmul", [(2, 16, 96), (96, 48)], {}),
    ("matmul", [(2, 4, 16, 32), (2, 4, 32, 16)], {}),
    ("matmul", [(2, 4, 32, 16), (2, 4, 32, 16)], {"transpose_a": True}),
    ("matmul", [(2, 4, 16, 32), (2, 4, 16, 32)], {"transpose_b": True}),
    ("matmul", [(16, 32), (3, 32, 8)], {}),
    ("batch_matmul", [(3, 16, 32), (3, 32, 8)], {}),
]


@pytest.fixture(autouse=True)
def _nvmath() -> None:
    if nvmath_matmul() is None:
        pytest.skip("nvmath-python is not installed")


def _want(name: str, arrays: list[np.ndarray], attrs: Any) -> np.ndarray:
    if name == "dense":
        out = arrays[0] @ arrays[1].T
        return out + arrays[2] if len(arrays) == 3 else out
    a, b = arrays
    if attrs.transpose_a:
        a = a.swapaxes(-1, -2)
    if attrs.transpose_b:
        b = b.swapaxes(-1, -2)
    return np.matmul(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize(("residual", "relu"), [(False, False), (False, True), (True, True)])
def test_cublaslt_product_matches_numpy(case: int, dtype: str, residual: bool,
                                        relu: bool) -> None:
    name, shapes, raw = CASES[case]
    op = get_op(name)
    attrs = op.attrs.model_validate(raw)
    types = [TensorType(s, dtype) for s in shapes]
    (out,) = op.infer(types, attrs, [None] * len(types))
    prepared = chain("cuda", cupy).prepare(op, attrs, types, [out], Epilogue(residual, relu))
    assert prepared is not None and prepared.provider == "cublaslt" and prepared.capturable
    rng = np.random.default_rng(case)
    host = [(rng.standard_normal(s) * 0.5).astype(dtype) for s in shapes]
    extra = rng.standard_normal(out.shape).astype(dtype)
    want = _want(name, [a.astype(np.float64) for a in host], attrs)
    if residual:
        want = want + extra
    if relu:
        want = np.maximum(want, 0)
    tolerance = 1e-4 if dtype == "float32" else 2e-2
    for _ in range(2):  # new operand addresses each time: the plan is re-pointed
        got = cupy.full(out.shape, 7, dtype)
        prepared.call(*map(cupy.asarray, host), *([cupy.asarray(extra)] if residual else []),
                      got)
        np.testing.assert_allclose(got.get().astype(np.float64), want, rtol=tolerance,
                                   atol=tolerance * 8)


def test_a_clip_epilogue_and_broadcasting_both_ways_go_to_the_next_provider() -> None:
    op = get_op("matmul")
    attrs = op.attrs.model_validate({})
    both = [TensorType((2, 1, 4, 8), "float32"), TensorType((1, 3, 8, 4), "float32")]
    (out,) = op.infer(both, attrs, [None, None])
    assert chain("cuda", cupy).prepare(op, attrs, both, [out]).provider == "reference"
    plain = [TensorType((4, 8), "float32"), TensorType((8, 4), "float32")]
    clipped = chain("cuda", cupy).prepare(op, attrs, plain, [TensorType((4, 4), "float32")],
                                          Epilogue(clip=(0.0, 6.0)))
    assert clipped is None


def _models() -> Any:
    pytest.importorskip("onnx")
    spec = importlib.util.spec_from_file_location("example_models", MODELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("example_models", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_encoder_records_into_cuda_graphs_but_its_gather(dtype: str) -> None:
    models = _models()
    model = models.bert_encoder(batch=2, seq=32, layers=2, dtype=dtype)
    feeds = models.sample_inputs(model)
    bundle = graphrt.from_onnx(model)
    want = [w.astype(np.float32) for w in bundle.create(graphrt.cpu(0))(**feeds)]
    mod = bundle.create(graphrt.cuda(0), cuda_graph=True)
    for _ in range(3):
        got = [cupy.asnumpy(g).astype(np.float32) for g in mod(**feeds)]
        for g, w in zip(got, want, strict=True):
            scale = max(float(np.abs(w).max()), 1.0)
            assert float(np.abs(g - w).max()) / scale < (1e-4 if dtype == "float32" else 3e-2)
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays >= 1, report
    # the embedding's gather checks its indices on the host: every other node is recorded
    assert report.segments <= 2 and report.eager_steps == 1, report


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("shapes", "raw"), [
    ([(64, 96), (96, 48)], {}), ([(2, 16, 96), (96, 48)], {}),
    ([(2, 16, 96), (48, 96)], {"transpose_b": True})], ids=["2d", "batched-a", "transposed-b"])
@pytest.mark.parametrize(("residual", "relu"), [(False, False), (True, True)])
def test_a_bias_after_matmul_is_the_bias_epilogue(shapes: list, raw: dict, dtype: str,
                                                 residual: bool, relu: bool) -> None:
    """ONNX's MatMul -> Add(bias) [-> Add(residual) -> Relu] as one cuBLASLt call."""
    op = get_op("matmul")
    attrs = op.attrs.model_validate(raw)
    types = [TensorType(s, dtype) for s in shapes]
    (out,) = op.infer(types, attrs, [None, None])
    epilogue = Epilogue(residual, relu, bias=True)
    prepared = chain("cuda", cupy).prepare(op, attrs, types, [out], epilogue)
    assert prepared is not None and prepared.provider == "cublaslt"
    rng = np.random.default_rng(7)
    host = [(rng.standard_normal(s) * 0.5).astype(dtype) for s in shapes]
    bias = rng.standard_normal(out.shape[-1:]).astype(dtype)
    extra = rng.standard_normal(out.shape).astype(dtype)
    want = _want("matmul", [a.astype(np.float64) for a in host], attrs) + bias
    if residual:
        want = want + extra
    if relu:
        want = np.maximum(want, 0)
    got = cupy.full(out.shape, 7, dtype)
    prepared.call(*map(cupy.asarray, host), cupy.asarray(bias),
                  *([cupy.asarray(extra)] if residual else []), got)
    tolerance = 1e-4 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(got.get().astype(np.float64), want, rtol=tolerance,
                               atol=tolerance * 8)


def test_a_bias_after_a_product_of_two_batches_is_left_to_the_steps() -> None:
    op = get_op("matmul")
    attrs = op.attrs.model_validate({})
    types = [TensorType((2, 8, 16), "float32"), TensorType((2, 16, 4), "float32")]
    (out,) = op.infer(types, attrs, [None, None])
    assert chain("cuda", cupy).prepare(op, attrs, types, [out], Epilogue(bias=True)) is None
