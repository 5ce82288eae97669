"""The compiled quantized matrix product (graphrt.kernels.cpu.qmatmul): equal, integer for
integer, to the op's exact reference for weights (2-D, loaded params) and for products of two
activations (batched), per-tensor and per-column ``b``, the 8-bit type pairs; sums that could
pass 2**24 take the reference; and a BERT-style encoder quantized by ONNX Runtime converts
its 24 products to ``qlinear_matmul`` and matches ONNX Runtime."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphrt.devices.frozen import freeze
from graphrt.kernels import chain
from graphrt.kernels.cpu.jit import quantized_kernels
from graphrt.kernels.cpu.qconv import EXACT
from graphrt.kernels.cpu.qmatmul import qmatmul_call
from graphrt.ops import TensorType, get_op

pytestmark = pytest.mark.skipif(quantized_kernels() is None,
                                reason="the compiled kernels are off")
OP = get_op("qlinear_matmul")


def _ints(dtype: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _inputs(a_shape: tuple[int, ...], b_shape: tuple[int, ...], a_dtype: Any, b_dtype: Any,
            per_column: bool, param: bool, rng: np.random.Generator,
            b: np.ndarray | None = None) -> list[np.ndarray]:
    n = b_shape[-1]
    weight = _ints(b_dtype, b_shape, rng) if b is None else b
    if param:
        freeze(weight)
    columns = (n,) if per_column else ()
    return [_ints(a_dtype, a_shape, rng), np.array(0.03, np.float32),
            np.array(rng.integers(-3, 9), a_dtype), weight,
            (rng.random(columns) * 0.01 + 0.001).astype(np.float32),
            rng.integers(0, 4, columns).astype(b_dtype),
            np.array(rng.random() * 2 + 0.5, np.float32),
            np.array(rng.integers(0, 50), np.uint8)]


def _run_both(inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, bool]:
    """The compiled result, the reference's, and whether the compiled call ran the fast
    path (it leaves its float sums in the workspace; the reference does not touch it)."""
    types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
    (out,) = OP.infer(types, OP.attrs(), [None] * len(types))
    reference = OP.positional(np, OP.attrs(), 8)
    want = np.empty(out.shape, out.dtype)
    reference(*inputs, want)
    call = qmatmul_call(types, out, reference)
    assert call is not None
    got = np.full(out.shape, 7, out.dtype)
    spaces = [np.full(t.shape, np.nan, t.dtype) for t in call.workspace]
    call.run(*inputs, got, *spaces)
    call.run(*inputs, got, *spaces)
    return got, want, not np.isnan(spaces[2]).all()


CASES = [  # a, b, b is a loaded weight
    ((7, 40), (40, 33), True),
    ((2, 128, 256), (256, 96), True),
    ((3, 5, 300), (300, 17), True),  # a long sum: exact where the weights allow
    ((2, 4, 16, 64), (2, 4, 64, 16), False),  # attention's scores, two activations
    ((2, 4, 16, 16), (1, 4, 16, 64), False),  # broadcast batch axes
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(np.uint8, np.int8), (np.int8, np.uint8),
                                                  (np.uint8, np.uint8), (np.int8, np.int8)])
def test_equals_the_reference_exactly(case: Any, a_dtype: Any, b_dtype: Any) -> None:
    a_shape, b_shape, param = case
    rng = np.random.default_rng(abs(hash((a_shape, a_dtype, b_dtype))) % 2**32)
    for per_column in (True, False):
        inputs = _inputs(a_shape, b_shape, a_dtype, b_dtype, per_column, param, rng)
        if param and b_shape[0] > 258:  # typical weights: small, so the sums stay exact
            inputs[3] = np.clip(rng.normal(0, 8, b_shape), -127, 127).astype(b_dtype) \
                if b_dtype == np.int8 else rng.integers(0, 24, b_shape).astype(b_dtype)
            inputs[5] = np.zeros_like(inputs[5])
            freeze(inputs[3])
        got, want, fast = _run_both(inputs)
        np.testing.assert_array_equal(got, want)
        assert fast


def test_sums_that_could_pass_the_float32_bound_take_the_reference() -> None:
    rng = np.random.default_rng(3)
    weight = np.where(rng.random((600, 8)) < 0.5, -127, 127).astype(np.int8)
    inputs = _inputs((4, 600), (600, 8), np.uint8, np.int8, False, True, rng, weight)
    inputs[5] = np.array(0, np.int8)
    assert EXACT < 600 * 127 * 255
    got, want, fast = _run_both(inputs)
    np.testing.assert_array_equal(got, want)
    assert not fast
    activations = _inputs((2, 3, 300), (2, 300, 4), np.uint8, np.uint8, False, False, rng)
    got, want, fast = _run_both(activations)  # 300 * 255 * 255 may pass it: the reference
    np.testing.assert_array_equal(got, want)
    assert not fast


def test_what_it_does_not_take_is_left_to_the_reference() -> None:
    rng = np.random.default_rng(4)
    for a_shape, b_shape in (((16,), (16, 4)), ((3, 16), (16,))):
        inputs = _inputs(a_shape, b_shape, np.uint8, np.int8, False, False, rng)
        types = [TensorType(a.shape, str(a.dtype)) for a in inputs]
        (out,) = OP.infer(types, OP.attrs(), [None] * 8)
        assert qmatmul_call(types, out, OP.positional(np, OP.attrs(), 8)) is None
    per_row = _inputs((3, 16), (16, 4), np.uint8, np.int8, False, False, rng)
    per_row[1] = np.full((3, 1), 0.03, np.float32)
    types = [TensorType(a.shape, str(a.dtype)) for a in per_row]
    (out,) = OP.infer(types, OP.attrs(), [None] * 8)
    assert qmatmul_call(types, out, OP.positional(np, OP.attrs(), 8)) is None
    assert chain("cpu", np).prepare(OP, OP.attrs(), types, [out]).provider != "cpu"


def test_a_bert_encoder_quantized_by_onnxruntime_runs_its_products_as_qlinear_matmul(
        tmp_path: Any) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx_harness import run_ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    import graphrt

    path = Path(__file__).resolve().parents[3] / "examples" / "onnx" / "models.py"
    spec = importlib.util.spec_from_file_location("qmatmul_example_models", path)
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    bert_encoder, sample_inputs = models.bert_encoder, models.sample_inputs

    model = bert_encoder(batch=2, seq=16, layers=1, hidden=32, heads=2, vocab=50,
                         max_positions=16)
    batches = iter([sample_inputs(model, seed=s) for s in range(4)])

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    source, target = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(model, str(source))
    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    quantized = onnx.load(str(target))
    bundle = graphrt.from_onnx(quantized)
    functions = bundle.lib.spec().functions
    ops = [step.op for node in bundle.graph.nodes if node.func_name in functions
           for step in functions[node.func_name].body]
    products = sum(node.op_type == "MatMul" for node in quantized.graph.node)
    assert products and ops.count("qlinear_matmul") == products
    feeds = sample_inputs(model, seed=9)
    (want,) = run_ort(quantized, feeds)
    (got,) = bundle.create("cpu")(**feeds)
    # exact integer kernels on both sides: equal but for requantization ties
    assert np.abs(np.asarray(got) - want).max() <= 0.05 * np.abs(want).max()
