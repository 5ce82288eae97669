"""Stacks of products of two activations on the compiled micro-kernel
(graphrt.kernels.cpu.batch_product): every edge of the tiles against float64, the epilogue,
where it does not apply, the BLAS policy of its graph, and an encoder that runs with no
product on BLAS."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.kernels import NO_EPILOGUE, Epilogue
from graphrt.kernels.cpu.batch_product import batch_product_call
from graphrt.ops import TensorType, get_op

pytest.importorskip("numba")

RNG = np.random.default_rng(11)


def _types(*arrays: np.ndarray) -> list[TensorType]:
    return [TensorType(a.shape, str(a.dtype)) for a in arrays]


def _reference(op: str = "batch_matmul") -> Any:
    return get_op(op).positional(np, get_op(op).attrs(), 2)


@pytest.mark.parametrize("lead, m, k, n", [((1,), 1, 1, 1), ((2,), 7, 5, 17), ((3,), 13, 33, 40),
                                           ((4,), 128, 64, 128), ((2, 3), 6, 1, 16),
                                           ((5,), 1, 3, 2), ((2, 2), 30, 128, 64),
                                           ((1,), 64, 0, 5),
                                           ((3,), 4, 9, 20)])  # short rows read from before
def test_it_matches_float64_at_every_tile_edge(lead: tuple[int, ...], m: int, k: int,
                                               n: int) -> None:
    a = RNG.standard_normal((*lead, m, k)).astype(np.float32)
    b = RNG.standard_normal((*lead, k, n)).astype(np.float32)
    prepared = batch_product_call("batch_matmul", None, _types(a, b),
                                  TensorType((*lead, m, n), "float32"), NO_EPILOGUE,
                                  _reference())
    if k == 0:  # nothing to sum: the reference's zeros
        assert prepared is None
        return
    assert prepared is not None and prepared.workspace == ()  # both read in place
    out = np.full((*lead, m, n), np.nan, np.float32)
    prepared.call(a, b, out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("epilogue", [Epilogue(relu=True), Epilogue(residual=True),
                                      Epilogue(residual=True, clip=(-1.0, 1.0))])
@pytest.mark.parametrize("packing", [True, False])
def test_the_epilogue_is_applied_on_both_paths(epilogue: Epilogue, packing: bool) -> None:
    a = RNG.standard_normal((3, 25, 12)).astype(np.float32)
    b = RNG.standard_normal((3, 12, 37)).astype(np.float32)
    r = RNG.standard_normal((3, 25, 37)).astype(np.float32)
    r.flat[::13] = np.nan  # NaN stays NaN through relu and clip
    prepared = batch_product_call("matmul", None, _types(a, b),
                                  TensorType((3, 25, 37), "float32"), epilogue,
                                  _reference("matmul"), lambda: packing)
    assert prepared is not None
    out = np.empty((3, 25, 37), np.float32)
    prepared.call(a, b, *([r] if epilogue.residual else []), out)
    want = a @ b + (r if epilogue.residual else 0)
    if epilogue.relu:
        want = np.where(want < 0, 0, want)
    if epilogue.clip is not None:
        want = np.clip(want, *epilogue.clip)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_where_it_does_not_apply_it_answers_none() -> None:
    f32 = np.zeros((2, 4, 8), np.float32)
    g32 = np.zeros((2, 8, 3), np.float32)
    out = TensorType((2, 4, 3), "float32")
    ref = _reference()
    assert batch_product_call("batch_matmul", None, _types(f32, g32), out, NO_EPILOGUE,
                              ref) is not None
    half = [f32.astype(np.float16), g32.astype(np.float16)]
    assert batch_product_call("batch_matmul", None, _types(*half),
                              TensorType((2, 4, 3), "float16"), NO_EPILOGUE, ref) is None
    for transposed in ({"transpose_a": True}, {"transpose_b": True}):
        attrs = get_op("batch_matmul").attrs(**transposed)
        assert batch_product_call("batch_matmul", attrs, _types(f32, g32), out, NO_EPILOGUE,
                                  ref) is None
    broadcast = np.zeros((1, 8, 3), np.float32)  # leading dimensions broadcast
    assert batch_product_call("batch_matmul", None, _types(f32, broadcast), out, NO_EPILOGUE,
                              ref) is None
    flat = np.zeros((8, 3), np.float32)  # a 2-D right operand: dense's
    assert batch_product_call("matmul", None, _types(f32, flat), out, NO_EPILOGUE,
                              ref) is None
    assert batch_product_call("dense", None, _types(f32, g32), out, NO_EPILOGUE, ref) is None


def test_while_the_graph_runs_blas_the_reference_runs() -> None:
    a = RNG.standard_normal((2, 9, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 20)).astype(np.float32)
    calls: list[bool] = []
    reference = _reference()

    def spy(*arrays: Any) -> None:
        calls.append(True)
        reference(*arrays)

    for packing in (True, False):
        prepared = batch_product_call("batch_matmul", None, _types(a, b),
                                      TensorType((2, 9, 20), "float32"), NO_EPILOGUE, spy,
                                      lambda packing=packing: packing)
        assert prepared is not None
        out = np.empty((2, 9, 20), np.float32)
        prepared.call(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert calls == [True]  # once: where packing() was false


def test_an_encoder_runs_its_products_off_blas_and_matches_the_reference() -> None:
    """Attention's products take this kernel, so every product of the encoder runs on the
    helper threads (none on BLAS), and so do its row and elementwise kernels."""
    pytest.importorskip("onnx")
    sys.path.insert(0, str(Path(__file__).parents[3] / "examples" / "onnx"))
    import models  # type: ignore[import-not-found]

    from graphrt.kernels.cpu import provider as cpu_provider

    made: list[cpu_provider.CpuProvider] = []
    real = cpu_provider.CpuProvider.__init__

    def spy(self: cpu_provider.CpuProvider) -> None:
        real(self)
        made.append(self)

    model = models.bert_encoder(batch=2, seq=16, layers=1, hidden=32, heads=2, vocab=100)
    feeds = models.sample_inputs(model)
    bundle = graphrt.from_onnx(model)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_provider.CpuProvider, "__init__", spy)
        module = bundle.create("cpu")
    assert made and not any(p.blas_gemms for p in made)
    got = [np.asarray(o) for o in module(**feeds)]
    want = [np.asarray(o) for o in bundle.create("sim")(**feeds)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
