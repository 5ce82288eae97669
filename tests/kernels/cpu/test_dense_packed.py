"""Products by a param weight on the compiled micro-kernel (graphrt.kernels.cpu.dense): every
edge of the tiles, the bias folded into the packing, the epilogue, the reference where the
weight is not a param, and whole graphs that lower to it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.devices.frozen import freeze
from graphrt.kernels import NO_EPILOGUE, Epilogue, chain
from graphrt.kernels.cpu.dense import MIN_ROWS, dense_call
from graphrt.lib import Library, TensorType
from graphrt.ops import get_op

pytest.importorskip("numba")

RNG = np.random.default_rng(5)


def _frozen(array: np.ndarray) -> np.ndarray:
    copy = array.copy()
    freeze(copy)
    return copy


def _types(*arrays: np.ndarray) -> list[TensorType]:
    return [TensorType(a.shape, str(a.dtype)) for a in arrays]


def _call(prepared: Any, *arrays: np.ndarray) -> None:
    """The prepared kernel on ``arrays`` (inputs, residual, output) and its workspace."""
    workspace = [np.empty(t.shape, t.dtype) for t in prepared.workspace]
    prepared.call(*arrays, *workspace)


def _reference(op: str, attrs: Any, n_in: int) -> Any:
    return get_op(op).positional(np, attrs, n_in)


@pytest.mark.parametrize("m, k, n", [(16, 3, 5), (17, 64, 16), (23, 33, 47), (64, 1024, 96),
                                     (301, 300, 40),  # many rows: on it too
                                     (130, 7, 33),  # then fewer rows: a row at a time
                                     (1, 1, 1), (1, 1280, 1000), (2, 33, 47), (15, 8, 17),
                                     (3, 2, 16), (10, 5, 16), (66, 1024, 16),
                                     (3, 40, 128), (15, 300, 64)])  # 4 panels at a time
@pytest.mark.parametrize("bias", [True, False])
def test_dense_matches_numpy_at_every_tile_edge(m: int, k: int, n: int, bias: bool) -> None:
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = _frozen(RNG.standard_normal((n, k)).astype(np.float32))
    b = _frozen(RNG.standard_normal(n).astype(np.float32))
    inputs = [x, w, b] if bias else [x, w]
    op = get_op("dense")
    prepared = dense_call("dense", op.attrs(), _types(*inputs), TensorType((m, n), "float32"),
                      NO_EPILOGUE, _reference("dense", op.attrs(), len(inputs)))
    assert prepared is not None
    out = np.full((m, n), np.nan, np.float32)
    _call(prepared, *inputs, out)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_by_a_2d_param_flattens_the_leading_axes(transpose_b: bool) -> None:
    a = RNG.standard_normal((2, 9, 40)).astype(np.float32)
    b = _frozen(RNG.standard_normal((24, 40) if transpose_b else (40, 24)).astype(np.float32))
    op = get_op("matmul")
    attrs = op.attrs(transpose_b=transpose_b)
    prepared = dense_call("matmul", attrs, _types(a, b), TensorType((2, 9, 24), "float32"),
                      NO_EPILOGUE, _reference("matmul", attrs, 2))
    assert prepared is not None
    out = np.empty((2, 9, 24), np.float32)
    _call(prepared, a, b, out)
    np.testing.assert_allclose(out, a @ (b.T if transpose_b else b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("epilogue", [Epilogue(relu=True), Epilogue(residual=True),
                                      Epilogue(residual=True, relu=True),
                                      Epilogue(clip=(0.0, 6.0)),
                                      Epilogue(residual=True, clip=(-1.0, 1.0))])
@pytest.mark.parametrize("frozen", [True, False])
def test_the_epilogue_is_applied_on_both_paths(epilogue: Epilogue, frozen: bool) -> None:
    """Frozen: in the kernel's stores; a weight fed at run time: after the reference."""
    for m in (29, 3):  # the tiles of 6 rows, then a row at a time
        for n in (37, 101):  # 101: a row's first 4 panels at once, then 2, then a short one
            for k in (20, 300):  # 300: on AVX-512, 12 rows at a time (tall_panel), then 6
                _check_epilogue(epilogue, frozen, m, n, k)


def _check_epilogue(epilogue: Epilogue, frozen: bool, m: int, n: int, k: int) -> None:
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    r = RNG.standard_normal((m, n)).astype(np.float32)
    r.flat[::11] = np.nan  # NaN stays NaN through relu and clip
    if frozen:
        w, b = _frozen(w), _frozen(b)
    op = get_op("dense")
    prepared = dense_call("dense", op.attrs(), _types(x, w, b), TensorType((m, n), "float32"),
                      epilogue, _reference("dense", op.attrs(), 3))
    assert prepared is not None
    out = np.empty((m, n), np.float32)
    _call(prepared, x, w, b, *([r] if epilogue.residual else []), out)
    want = x @ w.T + b + (r if epilogue.residual else 0)
    if epilogue.relu:
        want = np.where(want < 0, 0, want)
    if epilogue.clip is not None:
        want = np.clip(want, *epilogue.clip)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_where_the_packed_product_does_not_apply_the_reference_runs() -> None:
    op = get_op("dense")
    x16, w16 = np.zeros((32, 8), np.float16), np.zeros((4, 8), np.float16)
    assert dense_call("dense", op.attrs(), _types(x16, w16), TensorType((32, 4), "float16"),
                      NO_EPILOGUE, _reference("dense", op.attrs(), 2)) is None
    x, w = np.zeros((MIN_ROWS - 1, 8), np.float32), np.zeros((4, 8), np.float32)
    few = dense_call("dense", op.attrs(), _types(x, w), TensorType((MIN_ROWS - 1, 4),
                                                                   "float32"),
                     NO_EPILOGUE, _reference("dense", op.attrs(), 2))
    assert few is not None and few.workspace == ()  # the data is read in place
    matmul = get_op("matmul")
    a, b = np.zeros((2, 32, 8), np.float32), np.zeros((2, 8, 4), np.float32)
    assert dense_call("matmul", matmul.attrs(), _types(a, b),
                      TensorType((2, 32, 4), "float32"), NO_EPILOGUE,
                      _reference("matmul", matmul.attrs(), 2)) is None  # a 3-D weight


def test_a_param_loaded_again_is_packed_again() -> None:
    """The packing is derived from the loaded weight: new params give new results."""
    op = get_op("dense")
    x = RNG.standard_normal((20, 8)).astype(np.float32)
    prepared = dense_call("dense", op.attrs(), _types(x, x[:4]), TensorType((20, 4), "float32"),
                      NO_EPILOGUE, _reference("dense", op.attrs(), 2))
    assert prepared is not None
    out = np.empty((20, 4), np.float32)
    for scale in (1.0, 2.0):
        w = _frozen(np.full((4, 8), scale, np.float32))
        _call(prepared, x, w, out)
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)


def test_the_cpu_chain_prepares_it_with_the_epilogue() -> None:
    kernels = chain("cpu", np)
    op = get_op("dense")
    types = [TensorType((32, 16), "float32"), TensorType((8, 16), "float32")]
    prepared = kernels.prepare(op, op.attrs(), types, [TensorType((32, 8), "float32")],
                               Epilogue(relu=True))
    assert prepared is not None and prepared.provider == "cpu"


def test_an_mlp_graph_runs_on_it_and_matches_onnx_runtime() -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from graphrt.onnx.convert import convert_model

    w1 = RNG.standard_normal((48, 32)).astype(np.float32) / 6
    w2 = RNG.standard_normal((48, 24)).astype(np.float32) / 6
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(RNG.standard_normal(48).astype(np.float32), "b1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    lib = convert_model(model, shapes={"x": [40, 32]}).emitted.lib
    assert any(step["op"] == "dense" for f in lib["functions"].values() for step in f["body"])
    module = graphrt.from_onnx(model, shapes={"x": [40, 32]}).create("cpu")
    x = RNG.standard_normal((40, 32)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):  # the second run uses the packed weights kept from the first
        (got,) = module(x=x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    del onnx


def test_few_rows_take_blas_where_the_graph_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix-vector product runs on the helpers only where ``few_rows()`` allows it (a
    graph with compiled convolutions); else on BLAS, as the reference does (BLAS's threaded
    kernel is the faster there)."""
    from graphrt.kernels.cpu import dense

    op = get_op("dense")
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    w = _frozen(RNG.standard_normal((4, 8)).astype(np.float32))
    calls: list[str] = []
    run_jobs = dense.run_jobs

    def spy(jobs: Any, *args: Any) -> None:
        calls.append(jobs.__name__)
        run_jobs(jobs, *args)

    monkeypatch.setattr(dense, "run_jobs", spy)
    for allowed in (True, False):
        prepared = dense_call("dense", op.attrs(), _types(x, w), TensorType((2, 4), "float32"),
                              NO_EPILOGUE, _reference("dense", op.attrs(), 2),
                              few_rows=lambda allowed=allowed: allowed)
        assert prepared is not None
        out = np.empty((2, 4), np.float32)
        _call(prepared, x, w, out)
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)
    assert calls == ["row_jobs"]


@pytest.mark.parametrize(("name", "transposed", "bias", "lead"),
                         [("dense", True, False, (3,)), ("dense", True, True, (2, 3)),
                          ("matmul", False, False, (3,)), ("matmul", True, False, (3,)),
                          ("matmul", False, False, (2, 3))])
def test_on_blas_it_makes_the_references_calls_and_reads_the_arrays_anew(
        name: str, transposed: bool, bias: bool, lead: tuple[int, ...]) -> None:
    """Where the product takes BLAS in a graph without compiled kernels, its numpy calls are
    bound to the arrays once and give the reference's bits; new values in the same arrays
    are read, other arrays rebind it, and the reference runs for a strided result."""
    op = get_op(name)
    attrs = op.attrs(transpose_b=True) if name == "matmul" and transposed else op.attrs()
    x = RNG.standard_normal((*lead, 8)).astype(np.float32)
    w = RNG.standard_normal((5, 8) if transposed else (8, 5)).astype(np.float32)
    inputs = [x, w, RNG.standard_normal(5).astype(np.float32)] if bias else [x, w]
    out_shape = (*x.shape[:-1], 5)
    reference = _reference(op.name, attrs, len(inputs))
    prepared = dense_call(op.name, attrs, _types(*inputs), TensorType(out_shape, "float32"),
                          Epilogue(relu=True), reference, few_rows=lambda: False,
                          plain_blas=lambda: True)
    assert prepared is not None
    for _ in range(2):  # the second time with new values in the same arrays
        inputs[0][...] = RNG.standard_normal(x.shape)
        out, want = np.empty(out_shape, np.float32), np.empty(out_shape, np.float32)
        _call(prepared, *inputs, out)
        reference(*inputs, want)
        np.testing.assert_array_equal(out, np.maximum(want, 0))
    other = np.empty(out_shape, np.float32)
    _call(prepared, *inputs, other)  # another result: bound again
    np.testing.assert_array_equal(other, out)
    strided = np.empty((*out_shape[:-1], 10), np.float32)[..., ::2]
    _call(prepared, *inputs, strided)  # not a view's worth: the reference
    np.testing.assert_array_equal(strided, out)


def test_strided_data_is_read_anew_on_every_call() -> None:
    """Data that is not C-contiguous is copied per call, never kept from an earlier one."""
    op = get_op("dense")
    base = RNG.standard_normal((30, 16)).astype(np.float32)
    x = base[:, ::2]  # 30 x 8, strided
    w = _frozen(RNG.standard_normal((20, 8)).astype(np.float32))
    prepared = dense_call("dense", op.attrs(), _types(np.ascontiguousarray(x), w),
                          TensorType((30, 20), "float32"), NO_EPILOGUE,
                          _reference("dense", op.attrs(), 2))
    assert prepared is not None
    out = np.empty((30, 20), np.float32)
    for _ in range(2):  # the same arrays, new values
        base[...] = RNG.standard_normal(base.shape)
        _call(prepared, x, w, out)
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-4, atol=1e-4)


def test_packed_weights_start_a_cache_line() -> None:
    """Every packed weight of the compiled kernels starts a 64-byte line, so that a panel's
    64-byte rows are whole lines (dense, direct/pointwise/depthwise and integer packs)."""
    from graphrt.devices import ALIGNMENT
    from graphrt.kernels.cpu.conv import _pack_weight
    from graphrt.kernels.cpu.dense import pack_columns
    from graphrt.kernels.cpu.integer_plan import pack_integer
    from graphrt.kernels.cpu.jit import direct_conv

    kernels = direct_conv()
    assert kernels is not None
    packs = [pack_columns(RNG.standard_normal((k, 40)).astype(np.float32), False, None)
             for k in (3, 64, 100)]
    for blocked in (False, True):
        for block in (16, 8, 6):
            packs.append(_pack_weight(kernels, np.ones((24, 16, 3, 3), np.float32), block,
                                      blocked))
    integer = pack_integer(np.ones((20, 8, 3, 3), np.int8), np.zeros(20, np.int8))
    assert integer is not None
    packs.append(integer.weights)
    assert all(pack.ctypes.data % ALIGNMENT == 0 for pack in packs)


@pytest.mark.parametrize("blocks, k, threads", [(86, 512, 2), (86, 512, 4), (171, 256, 2),
                                                 (11, 1024, 2), (300, 64, 3), (2, 64, 2)])
def test_rows_split_in_a_multiple_of_the_threads_chunks_that_fit_the_cache(
        blocks: int, k: int, threads: int) -> None:
    """The caller's claims and the helpers' meet at a chunk's edge: the chunks' count is a
    multiple of the threads, each chunk of data within the bytes one job keeps in cache."""
    from graphrt.kernels.cpu.dense import _CHUNK_BYTES, _chunk

    chunk = _chunk(blocks, k, threads)
    assert -(-blocks // chunk) % threads == 0
    assert chunk * 6 * (k + 1) * 4 <= _CHUNK_BYTES
    assert _chunk(86, 512, 1) == 29  # one thread: as even as may be, no more chunks


def test_a_product_split_for_two_threads_and_for_one_gives_the_same_bits() -> None:
    """The split follows the threads a call may use (a run context's cap included), bound
    once per count; every tile sums in the same order either way."""
    from graphrt.kernels.cpu.crew import threads_held

    x = RNG.standard_normal((512, 256)).astype(np.float32)  # on the helpers: 6M multiply-adds
    w = _frozen(RNG.standard_normal((256, 48)).astype(np.float32))
    op = get_op("matmul")
    prepared = dense_call("matmul", op.attrs(), _types(x, w), TensorType((512, 48), "float32"),
                          NO_EPILOGUE, _reference("matmul", op.attrs(), 2))
    assert prepared is not None
    outs = [np.empty((512, 48), np.float32) for _ in range(3)]
    _call(prepared, x, w, outs[0])
    with threads_held(1):
        _call(prepared, x, w, outs[1])
    _call(prepared, x, w, outs[2])
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[0], x @ w, rtol=1e-4, atol=1e-3)


def test_the_residual_hint_is_a_level_2_prefetch_that_changes_nothing() -> None:
    """The hint a residual product gives a tile ahead (``kernel_parts.prefetch``) compiles
    to x86's ``prefetcht1`` (into the level-2 cache) and leaves the data as it was."""
    import platform

    import numba

    from graphrt.kernels.cpu.kernel_parts import prefetch

    @numba.njit
    def hinted(x: np.ndarray) -> float:
        for at in range(0, x.size, 16):
            prefetch(x, at)
        return float(x.sum())

    x = np.arange(100, dtype=np.float32)
    before = x.copy()
    assert hinted(x) == 4950.0
    np.testing.assert_array_equal(x, before)
    if platform.machine() in ("x86_64", "AMD64"):
        assert "prefetcht1" in next(iter(hinted.inspect_asm().values()))


@pytest.mark.parametrize("epilogue", [Epilogue(bias=True), Epilogue(bias=True, relu=True),
                                      Epilogue(bias=True, residual=True),
                                      Epilogue(bias=True, residual=True, clip=(-1.0, 1.0))])
@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("rows", [(29,), (2, 20), (3,)])  # tiles of 6 rows; a row at a time
def test_a_matmul_takes_the_add_of_a_bias_after_it(epilogue: Epilogue, frozen: bool,
                                                    rows: tuple[int, ...]) -> None:
    """ONNX's MatMul -> Add(bias): packed with the weight where it is a param, else added
    after the reference's product, as the add step would (bitwise)."""
    k, n = 20, 37
    x = RNG.standard_normal((*rows, k)).astype(np.float32)
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    r = RNG.standard_normal((*rows, n)).astype(np.float32)
    if frozen:
        w, b = _frozen(w), _frozen(b)
    op = get_op("matmul")
    out_type = TensorType((*rows, n), "float32")
    prepared = dense_call("matmul", op.attrs(), _types(x, w), out_type, epilogue,
                          _reference("matmul", op.attrs(), 2))
    assert prepared is not None
    out = np.empty(out_type.shape, np.float32)
    _call(prepared, x, w, b, *([r] if epilogue.residual else []), out)
    want = np.matmul(x, w) + b
    if epilogue.residual:
        want += r
    if epilogue.relu:
        want = np.maximum(want, 0)
    if epilogue.clip is not None:
        want = np.clip(want, *epilogue.clip)
    if frozen:
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_array_equal(out, want)  # the reference's calls, in the same order


def test_a_dense_with_a_bias_of_its_own_takes_no_second_one() -> None:
    x, w, b = (np.zeros(s, np.float32) for s in ((32, 8), (4, 8), (4,)))
    op = get_op("dense")
    assert dense_call("dense", op.attrs(), _types(x, w, b), TensorType((32, 4), "float32"),
                      Epilogue(bias=True), _reference("dense", op.attrs(), 3)) is None


def test_an_onnx_matmul_and_add_lower_to_one_call_on_the_cpu() -> None:
    """The encoder's projections (MatMul -> Add(bias) -> Add(residual)) run as one kernel:
    the product stores its sums with the bias and the residual added."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = RNG.standard_normal((16, 24)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Add", ["b", "p"], ["q"]),  # the bias first, as exporters write
             helper.make_node("Add", ["q", "r"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 30, 16]),
                     helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 30, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 30, 24])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = graphrt.from_onnx(onnx.ModelProto.FromString(model.SerializeToString())).create(
        graphrt.cpu(0))
    x = RNG.standard_normal((2, 30, 16)).astype(np.float32)
    r = RNG.standard_normal((2, 30, 24)).astype(np.float32)
    (y,) = module(x=x, r=r)
    np.testing.assert_allclose(y, x @ w + b + r, rtol=1e-4, atol=1e-4)


def test_matmul_and_the_adds_of_a_bias_and_a_residual_lower_to_one_call() -> None:
    lib = Library()
    fn = lib.define("projection", {"inputs": ["x", "w", "b", "r"], "outputs": ["y"], "body": [
        {"op": "matmul", "inputs": ["x", "w"], "outputs": ["p"]},
        {"op": "add", "inputs": ["b", "p"], "outputs": ["q"]},
        {"op": "add", "inputs": ["q", "r"], "outputs": ["y"]}]})
    types = [TensorType(s, "float32") for s in ((2, 30, 16), (16, 24), (24,), (2, 30, 24))]
    lowering = fn.lower(types, [types[-1]], kernels=chain("cpu", np), where="test", fuse=True)
    assert len(lowering.calls) == 1


def test_a_thread_cap_keeps_the_helpers_and_only_inter_op_lanes_give_them_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``create(threads=N)`` holds BLAS down too (``threads_held``), but it is no lane: a
    product under it still runs on the caller and its helpers (on a larger machine it ran
    on the caller alone, at half the speed under ``threads=2``); under the executor's lanes
    it runs alone."""
    from graphrt.kernels.cpu import dense
    from graphrt.kernels.cpu.blas_threads import blas_held
    from graphrt.kernels.cpu.crew import threads_held

    seen: list[bool] = []
    real = dense.run_jobs
    monkeypatch.setattr(dense, "run_jobs", lambda jobs, parallel, args: (
        seen.append(parallel), real(jobs, parallel, args)))
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    w = _frozen(RNG.standard_normal((256, 256)).astype(np.float32))
    op = get_op("dense")
    prepared = dense_call("dense", op.attrs(), _types(x, w), TensorType((256, 256), "float32"),
                          NO_EPILOGUE, _reference("dense", op.attrs(), 2))
    assert prepared is not None
    out = np.empty((256, 256), np.float32)
    _call(prepared, x, w, out)
    with threads_held(2):
        _call(prepared, x, w, out)
    with blas_held(2, lanes=True):
        _call(prepared, x, w, out)
    assert seen == [True, True, False]
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-4, atol=1e-3)

