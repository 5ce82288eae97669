"""A convolution's epilogue (+ residual, relu) applied as the direct kernels store their
results (graphrt.ops.patterns, conv_epilogue), the declarative functions that fuse into it,
and BLAS held to one thread (graphrt.kernels.cpu.blas_threads)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder
from threadpoolctl import threadpool_info

import graphrt
from graphrt.kernels import NO_EPILOGUE, chain
from graphrt.kernels.cpu import provider
from graphrt.kernels.cpu.blas_threads import blas_held
from graphrt.kernels.cpu.conv import conv_epilogue, run_conv
from graphrt.lib import Library, TensorType
from graphrt.ops import get_op
from graphrt.ops.patterns import EpilogueRun, epilogue_runs

pytest.importorskip("numba")

RNG = np.random.default_rng(43)
F32 = TensorType((2, 8, 4, 4), "float32")

# (x shape, w shape, strides, pads): a direct and a pointwise convolution
CASES = [((2, 5, 9, 11), (21, 5, 3, 3), (1, 1), (1, 1)),
         ((2, 7, 5, 7), (13, 7, 1, 1), (1, 1), (0, 0)),
         ((1, 9, 8, 8), (14, 9, 1, 1), (2, 2), (0, 0))]


def _out_shape(xs: tuple[int, ...], ws: tuple[int, ...], strides: tuple[int, ...],
               pads: tuple[int, ...]) -> tuple[int, ...]:
    return (xs[0], ws[0], *((xs[2 + a] + 2 * pads[a] - ws[2 + a]) // strides[a] + 1
                            for a in range(2)))


def _epilogue_and_steps(case: tuple[Any, ...], residual: bool, relu: bool,
                        clip: tuple[float, float] | None, nan_every: int, scale: float = 1.0
                        ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """Random float32 data, weight, bias and residual (NaN every ``nan_every``-th element) of
    ``case``; the compiled kernel's output with the epilogue; the separate steps' output
    before the activation (conv, then ``+ residual``)."""
    xs, ws, strides, pads = case
    x = RNG.standard_normal(xs).astype(np.float32) * scale
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    shape = _out_shape(xs, ws, strides, pads)
    r = RNG.standard_normal(shape).astype(np.float32)
    r.flat[::nan_every] = np.nan  # NaN stays NaN through relu and clip
    types = [TensorType(xs, "float32"), TensorType(ws, "float32"), TensorType(ws[:1], "float32")]
    kernel = conv_epilogue(np, types, TensorType(shape, "float32"), 1, strides, (1, 1), pads,
                           residual, relu, clip)
    assert kernel is not None
    got = np.full(shape, 7.0, np.float32)
    kernel(x, w, b, *([r] if residual else []), got)
    want = np.empty(shape, np.float32)
    run_conv(np, [x, w, b], [want], 1, strides, (1, 1), pads)
    return (x, w, b, r), got, want + r if residual else want


@pytest.mark.parametrize("case", CASES, ids=["direct", "pointwise", "pointwise-strided"])
@pytest.mark.parametrize(("residual", "relu"), [(True, True), (True, False), (False, True)])
def test_the_epilogue_gives_the_bits_of_the_separate_steps(
        case: tuple[Any, ...], residual: bool, relu: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    strides, pads = case[2:]
    (x, w, b, r), got, want = _epilogue_and_steps(case, residual, relu, None, 7)
    if relu:
        want = np.maximum(want, 0)
    np.testing.assert_array_equal(got, want)
    monkeypatch.setenv("GRAPHRT_JIT", "0")  # the GEMM path adds and rectifies after
    other = np.empty(got.shape, np.float32)
    run_conv(np, [x, w, b], [other], 1, strides, (1, 1), pads, r if residual else None, relu)
    np.testing.assert_allclose(other, want, rtol=1e-5, atol=1e-5)


def test_no_epilogue_kernel_where_the_direct_kernels_do_not_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    types = [TensorType((1, 4, 6, 6), "float32"), TensorType((8, 4, 3, 3), "float32")]
    out = TensorType((1, 8, 6, 6), "float32")
    args = ((1, 1), (1, 1), (1, 1), True, True)
    assert conv_epilogue(np, types, out, 1, *args) is not None
    assert conv_epilogue(np, types, out, 2, *args) is None  # grouped
    f64 = [TensorType(t.shape, "float64") for t in types]
    assert conv_epilogue(np, f64, TensorType(out.shape, "float64"), 1, *args) is None
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    assert conv_epilogue(np, types, out, 1, *args) is None


def _steps(*steps: tuple[str, tuple[str, ...], tuple[str, ...]]
           ) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return list(steps)


def test_epilogue_runs_are_found_only_where_nothing_else_reads_between() -> None:
    types = dict.fromkeys(("t", "u", "r", "v"), F32) | {"s": TensorType((1, 8, 1, 1), "float32")}

    def runs(steps: list[Any], exported: set[str] = frozenset({"y"})) -> list[EpilogueRun]:
        return epilogue_runs(steps, set(exported), types, lambda k: steps[k][0] == "conv2d")

    conv = ("conv2d", ("x", "w"), ("t",))
    assert runs(_steps(conv, ("add", ("t", "r"), ("u",)), ("relu", ("u",), ("y",)))) == [
        EpilogueRun(0, 2, "r", True, "y")]
    assert runs(_steps(conv, ("add", ("t", "r"), ("y",)))) == [
        EpilogueRun(0, 1, "r", False, "y")]
    assert runs(_steps(conv, ("relu", ("t",), ("y",)))) == [EpilogueRun(0, 1, None, True, "y")]
    # the add's result read twice: the add joins, the relu does not
    assert runs(_steps(conv, ("add", ("r", "t"), ("u",)), ("relu", ("u",), ("y",)),
                       ("mul", ("u", "y"), ("z",))), {"z"}) == [
        EpilogueRun(0, 1, "r", False, "u")]
    assert runs(_steps(conv, ("add", ("t", "s"), ("y",)))) == []  # a broadcast add (bias)
    assert runs(_steps(conv, ("relu", ("t",), ("y",))), {"t", "y"}) == []  # t exported
    assert runs(_steps(conv, ("relu", ("t",), ("u",)), ("add", ("t", "u"), ("y",)))) == []
    assert runs(_steps(("dense", ("x", "w"), ("t",)), ("relu", ("t",), ("y",)))) == []
    assert runs(_steps(conv, ("sigmoid", ("t",), ("y",)))) == []
    # ReLU6 and other clips end an epilogue as relu does
    assert runs(_steps(conv, ("clip", ("t",), ("y",)))) == [
        EpilogueRun(0, 1, None, False, "y", clip=True)]
    assert runs(_steps(conv, ("add", ("t", "r"), ("u",)), ("clip", ("u",), ("y",)))) == [
        EpilogueRun(0, 2, "r", False, "y", clip=True)]


def test_a_bias_along_the_last_axis_opens_the_epilogue() -> None:
    """ONNX's MatMul -> Add(bias) [-> Add(residual)] [-> Relu]: the bias first, in that order;
    a vector over another axis, or a 1-D output's same-shaped operand, is no bias."""
    out = TensorType((2, 8, 16), "float32")
    types = {"t": out, "u": out, "v": out, "r": out, "b": TensorType((16,), "float32"),
             "c": TensorType((8, 1), "float32"), "h": TensorType((16,), "float16")}

    def runs(steps: list[Any], exported: set[str] = frozenset({"y"})) -> list[EpilogueRun]:
        return epilogue_runs(steps, set(exported), types, lambda k: steps[k][0] == "matmul")

    mm = ("matmul", ("x", "w"), ("t",))
    assert runs(_steps(mm, ("add", ("b", "t"), ("y",)))) == [
        EpilogueRun(0, 1, None, False, "y", bias="b")]
    assert runs(_steps(mm, ("add", ("t", "b"), ("u",)), ("add", ("u", "r"), ("v",)),
                       ("relu", ("v",), ("y",)))) == [EpilogueRun(0, 3, "r", True, "y", bias="b")]
    assert runs(_steps(mm, ("add", ("t", "b"), ("u",)), ("relu", ("u",), ("y",)))) == [
        EpilogueRun(0, 2, None, True, "y", bias="b")]
    # the biased value read again later (GELU's x * ...): the epilogue stops at the bias
    assert runs(_steps(mm, ("add", ("t", "b"), ("u",)), ("relu", ("u",), ("v",)),
                       ("mul", ("u", "v"), ("y",)))) == [
        EpilogueRun(0, 1, None, False, "u", bias="b")]
    assert runs(_steps(mm, ("add", ("t", "c"), ("y",)))) == []  # not along the last axis
    assert runs(_steps(mm, ("add", ("t", "h"), ("y",)))) == []  # another dtype


def test_a_function_with_relu6_runs_the_clip_in_the_convolutions_store() -> None:
    """conv2d -> clip(0, 6) lowers to one prepared kernel, whose output is the two steps'."""
    g = GraphBuilder()
    ix, iw, ib = g.input("x", [1, 8, 9, 9]), g.input("w", [8, 1, 3, 3]), g.input("b", [8])
    y = g.op("dw", "dw", [ix, iw, ib], shape=[1, 8, 9, 9])
    lib = Library()
    lib.define("dw", {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
        {"op": "conv2d", "inputs": ["x", "w", "b"], "outputs": ["t"],
         "attrs": {"padding": [1, 1, 1, 1], "groups": 8}},
        {"op": "clip", "inputs": ["t"], "outputs": ["y"], "attrs": {"a_min": 0, "a_max": 6}}]})
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32) * 5
    w = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    f32 = [TensorType(s, "float32") for s in ((1, 8, 9, 9), (8, 1, 3, 3), (8,))]
    lowering = lib.resolve("dw", "cpu").lower(f32, [f32[0]], kernels=chain("cpu", np),
                                              where="node 3", fuse=True)
    assert len(lowering.calls) == 1  # the clip runs in the convolution's store
    want = np.empty((1, 8, 9, 9), np.float32)
    run_conv(np, [x, w, b], [want], 8, (1, 1), (1, 1), (1, 1))
    for device in (graphrt.cpu(0), graphrt.sim(0)):  # sim: the steps one by one
        (got,) = graphrt.create(g.build([y]), lib, device)(x=x, w=w, b=b)
        np.testing.assert_allclose(np.asarray(got), np.clip(want, 0, 6), rtol=1e-5,
                                   atol=1e-5)


def _block(relu_first: bool = False) -> tuple[Any, Library]:
    """A ResNet block's second convolution: conv -> add(residual) -> relu."""
    g = GraphBuilder()
    ix, iw, ib = g.input("x", [2, 16, 10, 10]), g.input("w", [24, 16, 3, 3]), g.input("b", [24])
    ir = g.input("r", [2, 24, 10, 10])
    y = g.op("block", "block", [ix, iw, ib, ir], shape=[2, 24, 10, 10])
    lib = Library()
    add = {"op": "add", "inputs": ["r", "t"], "outputs": ["u"]}
    lib.define("block", {"inputs": ["x", "w", "b", "r"], "outputs": ["y"], "body": [
        {"op": "conv2d", "inputs": ["x", "w", "b"], "outputs": ["t"],
         "attrs": {"padding": [1, 1, 1, 1]}},
        *([{"op": "relu", "inputs": ["t"], "outputs": ["u"]},
           {"op": "add", "inputs": ["u", "r"], "outputs": ["y"]}] if relu_first else
          [add, {"op": "relu", "inputs": ["u"], "outputs": ["y"]}])]})
    return g.build(heads=[y]), lib


@pytest.mark.parametrize("relu_first", [False, True])
def test_a_resnet_block_lowers_to_one_call_and_runs_as_on_sim(relu_first: bool) -> None:
    graph, lib = _block(relu_first)
    f32 = [TensorType(s, "float32") for s in ((2, 16, 10, 10), (24, 16, 3, 3), (24,),
                                              (2, 24, 10, 10))]
    lowering = lib.resolve("block", "cpu").lower(f32, [f32[3]], kernels=chain("cpu", np),
                                                 where="node 4", fuse=True)
    # conv with + residual and relu in its store; relu first: conv with relu, then the add
    assert len(lowering.calls) == (2 if relu_first else 1)
    feeds = {"x": RNG.standard_normal((2, 16, 10, 10)).astype(np.float32),
             "w": RNG.standard_normal((24, 16, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(24).astype(np.float32),
             "r": RNG.standard_normal((2, 24, 10, 10)).astype(np.float32)}
    results = []
    for device in (graphrt.cpu(0), graphrt.sim(0)):  # sim: step by step, the reference
        mod = graphrt.create(graph, lib, device)
        mod.run(**feeds)
        results.append(mod.get_output(0, np.empty((2, 24, 10, 10), np.float32)))
    # sim runs the reference (im2col + GEMM), not the cpu's compiled kernels: same values,
    # summed in another order
    np.testing.assert_allclose(*results, rtol=1e-5, atol=1e-4)


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_blas_held_takes_the_lowest_limit_and_restores_the_count_at_the_last_exit() -> None:
    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS library threadpoolctl can control")
    with blas_held(1):
        assert _blas_threads() == [1] * len(before)
        with blas_held(4):  # a higher limit does not raise it
            assert _blas_threads() == [1] * len(before)
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before


def test_a_small_gemm_runs_on_one_blas_thread_in_a_graph_with_compiled_convolutions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The BLAS thread policy is the compiled graph's, decided at create(): a graph whose
    convolutions run on the helper threads runs its small GEMMs on one BLAS thread (numpy's
    product, the spy here, is what both the reference and the product bound to the arrays
    of a graph without them call)."""
    seen: list[list[int]] = []
    real = np.matmul

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    before = _blas_threads()
    a, b = np.ones((4, 64), np.float32), np.ones((64, 8), np.float32)
    op = get_op("matmul")
    types = [TensorType((4, 64), "float32"), TensorType((64, 8), "float32")]
    for crew in (True, False):  # a graph with compiled convolutions, then one without
        cpu = provider.CpuProvider()
        cpu.crew = crew
        prepared = cpu.prepare(op, op.attrs(), types, [TensorType((4, 8), "float32")],
                               NO_EPILOGUE, dynamic=False, xp=np)
        assert prepared is not None
        out = np.empty((4, 8), np.float32)  # b is no param: the product runs on BLAS
        prepared.call(a, b, out, *(np.empty(t.shape, t.dtype) for t in prepared.workspace))
        np.testing.assert_array_equal(out, a @ b)
    assert seen == [[1] * len(before), before]
    assert _blas_threads() == before


def test_preparing_a_compiled_convolution_sets_the_graphs_blas_policy() -> None:
    kernels = chain("cpu", np)
    cpu = kernels.providers[0]
    assert isinstance(cpu, provider.CpuProvider) and not cpu.crew
    f32 = [TensorType(s, "float32") for s in ((1, 8, 6, 6), (16, 8, 3, 3))]
    op = get_op("conv2d")
    prepared = kernels.prepare(op, op.attrs.model_validate({"padding": [1, 1, 1, 1]}), f32,
                               [TensorType((1, 16, 6, 6), "float32")])
    assert prepared is not None and prepared.provider == "cpu" and cpu.crew


@pytest.mark.parametrize("case", CASES, ids=["direct", "pointwise", "pointwise-strided"])
@pytest.mark.parametrize("residual", [False, True])
def test_a_clip_epilogue_gives_the_separate_steps(case: tuple[Any, ...],
                                                  residual: bool) -> None:
    """ReLU6 (clip to (0, 6)) stored by the kernel: full tiles clamped in cache after the
    micro-kernel stores them, partial ones through the scratch tile; NaN stays NaN."""
    (_, _, _, r), got, want = _epilogue_and_steps(case, residual, False, (0.0, 6.0), 5, 4.0)
    np.testing.assert_allclose(got, np.clip(want, 0, 6), rtol=1e-5, atol=1e-5)
    assert np.isnan(got).sum() == (np.isnan(r).sum() if residual else 0)


@pytest.mark.parametrize("groups", [1, 8])
def test_a_kernel_packs_a_weight_again_unless_it_is_a_param(groups: int) -> None:
    """The packing is kept by the weight's identity only where the weight is frozen (a
    param): a weight computed at run time may come back in the same array with new
    values."""
    from graphrt.devices.frozen import freeze

    types = [TensorType((1, 8, 5, 5), "float32"), TensorType((8, 8 // groups, 3, 3),
                                                             "float32")]
    kernel = conv_epilogue(np, types, TensorType((1, 8, 5, 5), "float32"), groups, (1, 1),
                           (1, 1), (1, 1), False, False)
    if kernel is None:
        pytest.skip("the compiled kernels are off")
    x, w = np.ones((1, 8, 5, 5), np.float32), np.ones((8, 8 // groups, 3, 3), np.float32)
    out = np.empty((1, 8, 5, 5), np.float32)
    kernel(x, w, out)  # no workspace: allocated for the call
    first = out[0, 0, 2, 2]
    w *= 2  # the same array, new values: packed again
    kernel(x, w, out)
    assert out[0, 0, 2, 2] == 2 * first
    frozen = w.copy()
    freeze(frozen)
    kernel(x, frozen, out)
    assert out[0, 0, 2, 2] == 2 * first


@pytest.mark.parametrize("case", [*CASES, ((1, 16, 6, 6), (16, 1, 3, 3), (1, 1), (1, 1))],
                         ids=["direct", "pointwise", "pointwise-strided", "depthwise"])
def test_a_kernel_keeps_its_prepared_call_while_the_arrays_are_the_same(
        case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph hands a kernel the same arrays on every run: the job call is prepared once
    and made again on new data (a strided copy remade each time); any other array, or a
    weight that is no param, prepares it again."""
    from graphrt.devices.frozen import freeze
    from graphrt.kernels.cpu import conv

    xs, ws, strides, pads = case
    groups = xs[1] if ws[1] == 1 and xs[1] > 1 else 1
    out_shape = _out_shape(xs, ws, strides, pads)
    types = [TensorType(xs, "float32"), TensorType(ws, "float32")]
    kernel = conv_epilogue(np, types, TensorType(out_shape, "float32"), groups, strides,
                           (1, 1), pads, False, True)
    if kernel is None:
        pytest.skip("the compiled kernels are off")
    prepared: list[Any] = []
    real = conv._call
    monkeypatch.setattr(conv, "_call",  # (the reference's own calls into other outputs aside)
                        lambda *a: (a[5] is out and prepared.append(a)) or real(*a))
    plan = conv.conv_plan(xs, ws, out_shape, "float32", "float32", True, groups, strides,
                          (1, 1), pads, True).direct
    assert plan is not None
    space = [np.empty(plan.workspace, np.float32)] if plan.workspace else []
    x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
    freeze(w)
    out = np.empty(out_shape, np.float32)

    def want() -> np.ndarray:
        return np.maximum(run_reference(x, w), 0)

    def run_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        ref = np.empty(out_shape, np.float32)
        run_conv(np, [x, w], [ref], groups, strides, (1, 1), pads)
        return ref

    for _ in range(3):  # new data in the same arrays, as each run of a graph
        x[...] = RNG.standard_normal(xs)
        kernel(x, w, out, *space)
        np.testing.assert_allclose(out, want(), rtol=1e-5, atol=1e-5)
    assert len(prepared) == 1
    other = x.copy()  # another input array: prepared again
    kernel(other, w, out, *space)
    assert len(prepared) == 2
    loose = w.copy()  # a weight that is no param: prepared on every call
    kernel(other, loose, out, *space)
    loose *= 2
    kernel(other, loose, out, *space)
    assert len(prepared) == 4
    np.testing.assert_allclose(out, np.maximum(run_reference(other, loose), 0),
                               rtol=1e-5, atol=1e-5)
