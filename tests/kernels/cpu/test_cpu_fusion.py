"""Compiled elementwise fusion on cpu (graphrt.kernels.cpu.loops, numba): results against the
numpy path, broadcasting, dtypes, the fallback without numba and the disk cache."""

from __future__ import annotations

import builtins
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.kernels import chain
from graphrt.kernels.cpu import jit
from graphrt.kernels.cpu import loops as cpu_fusion
from graphrt.lib import Library, TensorType
from graphrt.lib.lowering import Lowering
from graphrt.ops import elementwise_runs

RNG = np.random.default_rng(17)

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def cache(loop_cache: Path) -> Path:
    return loop_cache


def _function(body: list[tuple[str, list[str], str]], inputs: list[str]) -> Any:
    lib = Library()
    return lib.define("f", {"inputs": inputs, "outputs": [body[-1][2]], "body": [
        {"op": op, "inputs": ins, "outputs": [out]} for op, ins, out in body]})


def _run(lowering: Lowering, inputs: list[np.ndarray[Any, Any]], out: TensorType
         ) -> np.ndarray[Any, Any]:
    y = np.empty(out.shape, out.dtype)
    arrays = [*inputs, y, *(np.empty(t.shape, t.dtype) for t in lowering.intermediates)]
    for call in lowering.calls:
        call.kernel(*(arrays[i] for i in call.args))
    return y


def _both(body: list[tuple[str, list[str], str]], inputs: dict[str, np.ndarray[Any, Any]]
          ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]:
    """(fused result, numpy-path result, calls of the fused lowering)."""
    fn = _function(body, list(inputs))
    types = [TensorType(a.shape, str(a.dtype)) for a in inputs.values()]
    out = fn._types([*types, types[0]], "test")[body[-1][2]]
    fused = fn.lower(types, [out], kernels=chain("cpu", np), where="test", fuse=True)
    plain = fn.lower(types, [out], kernels=chain("cpu", np), where="test", fuse=False)
    arrays = list(inputs.values())
    return _run(fused, arrays, out), _run(plain, arrays, out), len(fused.calls)


ARITHMETIC = [("add", ["a", "b"], "t0"), ("multiply", ["t0", "c"], "t1"),
              ("subtract", ["d", "t1"], "t2"), ("divide", ["t2", "b"], "y")]


def _arithmetic_inputs(dtype: str, shapes: tuple[tuple[int, ...], ...]
                       ) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {name: np.asarray(rng.standard_normal(shape) + 3, dtype)
            for name, shape in zip("abcd", shapes, strict=True)}


@pytest.mark.parametrize("shapes", [
    ((2, 3, 4),) * 4,                             # same shape
    ((2, 3, 4), (1,), (4,), ()),                  # scalar, trailing row, 0-d
    ((2, 3, 4), (2, 1, 1), (3, 4), (1, 3, 4)),    # leading block, trailing block
    ((2, 3, 4), (2, 1, 1), (3, 4), (1, 1, 4)),    # two splits: left unfused
    ((2, 3, 4), (1, 3, 1), (2, 3, 4), (1,)),      # a middle axis: left unfused
    ((0, 4), (4,), (1,), (0, 4)),                 # empty
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arithmetic_is_bitwise_the_numpy_path(shapes: tuple[tuple[int, ...], ...],
                                              dtype: str) -> None:
    fused, plain, calls = _both(ARITHMETIC, _arithmetic_inputs(dtype, shapes))
    assert fused.dtype == plain.dtype and fused.shape == plain.shape
    assert np.array_equal(fused, plain)
    assert calls == (4 if shapes[1] == (1, 3, 1) or shapes[3] == (1, 1, 4) else 1)


def test_integers_wrap_around_as_numpy() -> None:
    body = [("add", ["a", "b"], "t0"), ("multiply", ["t0", "b"], "t1"),
            ("subtract", ["t1", "a"], "y")]
    for dtype in ("int8", "int32", "int64", "uint8"):
        info = np.iinfo(dtype)
        a = np.array([info.max, info.min, 7, 0], dtype)
        b = np.array([info.max, 3, -1 if info.min else 2, 5], dtype)
        fused, plain, calls = _both(body, {"a": a, "b": b})
        assert calls == 1 and np.array_equal(fused, plain), dtype


def test_comparisons_select_and_logic() -> None:
    body = [("greater", ["a", "b"], "m"), ("less", ["a", "c"], "n"),
            ("logical_and", ["m", "n"], "k"), ("where", ["k", "a", "b"], "t"),
            ("maximum", ["t", "c"], "u"), ("relu", ["u"], "y")]
    rng = np.random.default_rng(1)
    values = {k: rng.standard_normal((5, 6)).astype("float32") for k in "abc"}
    values["a"][0, :3] = [np.nan, np.inf, -np.inf]
    fused, plain, calls = _both(body, values)
    assert calls == 1 and np.array_equal(fused, plain, equal_nan=True)


def test_transcendental_runs_agree_with_the_numpy_path() -> None:
    # BERT's exact gelu: 0.5 * x * (1 + erf(x / sqrt 2)), after the bias add.
    body = [("add", ["x", "bias"], "h"), ("divide", ["h", "root2"], "s"), ("erf", ["s"], "e"),
            ("add", ["e", "one"], "p"), ("multiply", ["h", "p"], "q"),
            ("multiply", ["q", "half"], "g"), ("sigmoid", ["g"], "z"), ("tanh", ["z"], "w"),
            ("exp", ["w"], "y")]
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 8)) * 4).astype("float32")
    x[0, :4] = [np.nan, np.inf, -np.inf, 40.0]
    constants = {"root2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    inputs = {"x": x, "bias": rng.standard_normal(8).astype("float32"),
              **{k: np.array([v], "float32") for k, v in constants.items()}}
    with np.errstate(invalid="ignore"):  # inf * 0 on the numpy path
        fused, plain, calls = _both(body, inputs)
    assert calls == 1
    np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-7)
    assert np.array_equal(np.isnan(fused), np.isnan(plain))


def test_two_steps_compile_where_the_output_is_large_enough_to_share() -> None:
    """An attention's scale and mask (divide by a scalar, add a row): one loop from
    PARALLEL_ELEMENTS elements, bitwise numpy's; below, two numpy calls."""
    body = [("divide", ["s", "scale"], "t"), ("add", ["t", "mask"], "y")]
    for rows, fused_calls in [(jit.PARALLEL_ELEMENTS // 128, 1), (4, 2)]:
        inputs = {"s": RNG.standard_normal((1, rows, 128)).astype("float32"),
                  "scale": np.array(8.0, "float32"),
                  "mask": RNG.standard_normal((1, 1, 128)).astype("float32")}
        fused, plain, calls = _both(body, inputs)
        assert calls == fused_calls
        np.testing.assert_array_equal(fused, plain)


def test_float32_erf_is_within_six_ulps_of_the_exact_value() -> None:
    import math

    x = np.concatenate([np.linspace(-6, 6, 20001), [0.0, -0.0, 1e-30, -1e-30, 1e-8, 3.9, 4.0,
                                                   4.1, 1e30, np.inf, -np.inf, np.nan]])
    x32 = x.astype("float32")
    body = [("multiply", ["x", "one"], "t"), ("erf", ["t"], "y")]
    fused, _, calls = _both(body, {"x": x32, "one": np.ones(1, "float32")})
    assert calls == 1
    exact = np.array([math.erf(v) for v in x32.astype("float64")])
    finite = ~np.isnan(exact)
    ulps = np.abs(fused[finite] - exact[finite]) / np.spacing(
        np.abs(exact[finite]).astype("float32")).astype("float64")
    assert ulps.max() <= 6  # evaluated in float32 (5.2 at worst: docs/performance.md)
    assert np.isnan(fused[~finite]).all()
    assert fused[x32 == np.inf][0] == 1 and fused[x32 == -np.inf][0] == -1


def test_float16_and_float_to_int_casts_stay_on_numpy() -> None:
    body = [("add", ["a", "b"], "t0"), ("multiply", ["t0", "b"], "t1"),
            ("subtract", ["t1", "a"], "y")]
    half = {k: np.ones(4, "float16") for k in "ab"}
    assert _both(body, half)[2] == 3
    steps = [("in0 + in1", ("a", "b"), ("t0",)), ("in0 * in1", ("t0", "b"), ("t1",)),
             ("in0", ("t1",), ("y",))]  # cast to int32
    f32, i32 = TensorType((4,), "float32"), TensorType((4,), "int32")
    python = cpu_fusion.python_steps(steps, {"a": f32, "b": f32, "t0": f32, "t1": f32,
                                             "y": i32})
    assert [form is None for form, _, _ in python] == [False, False, True]


def test_two_step_runs_without_math_are_left_to_numpy() -> None:
    # a residual add and relu: not worth importing numba at create()
    body = [("add", ["a", "b"], "t"), ("relu", ["t"], "y")]
    assert _both(body, {k: np.ones((2, 2), "float32") for k in "ab"})[2] == 2
    body = [("add", ["a", "b"], "t"), ("exp", ["t"], "y")]
    assert _both(body, {k: np.ones((2, 2), "float32") for k in "ab"})[2] == 1


def test_dynamic_nodes_are_not_fused_on_cpu() -> None:
    fn = _function(ARITHMETIC, list("abcd"))
    f32 = TensorType((2, 3), "float32")
    lowering = fn.lower([f32] * 4, [f32], kernels=chain("cpu", np), where="test", fuse=True,
                        dynamic=True)
    assert len(lowering.calls) == 4


def _chain(n: int) -> Any:
    from onnx import TensorProto, helper

    nodes, constants = [], []
    for i in range(n):
        constants.append(helper.make_tensor(f"c{i}", TensorProto.FLOAT, [1],
                                            [1.0001 if i % 2 else 0.001]))
        nodes.append(helper.make_node("Mul" if i % 2 else "Add",
                                      ["x" if i == 0 else f"t{i - 1}", f"c{i}"],
                                      ["y" if i == n - 1 else f"t{i}"]))
    shape = [1, 16]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_1000_node_chain_runs_as_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnx")
    bundle = graphrt.from_onnx(_chain(1000))
    x = np.random.default_rng(3).random((1, 16), dtype=np.float32)
    fused = np.asarray(bundle.create()(x=x)[0])
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    plain = np.asarray(bundle.create()(x=x)[0])
    assert np.array_equal(fused, plain)  # the same float32 operations in the same order


def test_a_chain_compiles_to_a_table_not_straight_line_code() -> None:
    n = 40
    steps = [("in0 + in1" if i % 2 else "in0 * in1", ("x" if i == 0 else f"t{i - 1}",
              f"c{i}"), (f"t{i}",)) for i in range(n)]
    types = {"x": TensorType((5,), "float32"),
             **{f"c{i}": TensorType((1,), "float32") for i in range(n)},
             **{f"t{i}": TensorType((5,), "float32") for i in range(n)}}
    python = cpu_fusion.python_steps(steps, types)
    (run,) = elementwise_runs(python, {f"t{n - 1}"})
    loop = cpu_fusion.loop_source(run, python, types)
    assert loop is not None and loop.wrapper is not None
    assert len(loop.kernel.splitlines()) < 40
    ((_, kernel),) = cpu_fusion.fused_runs(steps, {f"t{n - 1}"}, types)
    x = np.arange(5, dtype="float32")
    constants = [np.array([1.5 + i], "float32") for i in range(n)]
    y = np.empty(5, "float32")
    kernel(x, *constants, y)
    expected = x
    for i, c in enumerate(constants):
        expected = expected + c if i % 2 else expected * c
    assert np.array_equal(y, expected)


def test_without_numba_the_numpy_path_is_taken_and_logged_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real_import = builtins.__import__

    def no_numba(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "numba" or name.startswith("numba."):
            raise ImportError("No module named 'numba'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numba)
    monkeypatch.setattr(cpu_fusion, "_LOADED", {})
    monkeypatch.setattr(cpu_fusion, "_LOGGED", set())
    monkeypatch.setattr(jit, "_WARNED", [])
    with caplog.at_level(logging.INFO, logger="graphrt.kernels.cpu.loops"):
        for _ in range(2):
            fused, plain, calls = _both(ARITHMETIC, _arithmetic_inputs("float32", ((3,),) * 4))
            assert calls == 4 and np.array_equal(fused, plain)
    infos = [r.getMessage() for r in caplog.records if r.name == "graphrt.kernels.cpu.loops"]
    assert len(infos) == 1 and "numba cannot be imported" in infos[0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the compiled cpu kernels cannot run" in warnings[0]


def test_an_unusable_cache_dir_falls_back_with_a_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GRAPHRT_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cpu_fusion, "_LOADED", {})
    monkeypatch.setattr(cpu_fusion, "_LOGGED", set())
    with caplog.at_level(logging.INFO, logger="graphrt.kernels.cpu.loops"):
        _, _, calls = _both(ARITHMETIC, _arithmetic_inputs("float64", ((3,),) * 4))
    assert calls == 4
    assert "could not compile" in caplog.records[0].getMessage()


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHRT_CACHE_DIR", "/x/y")
    assert cpu_fusion.cache_dir() == Path("/x/y")
    monkeypatch.delenv("GRAPHRT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x")
    assert cpu_fusion.cache_dir() == Path("/x/graphrt")


_CHILD = """
import numpy as np
from graphrt.kernels import chain
from graphrt.kernels.cpu import jit
from graphrt.kernels.cpu import loops as cpu_fusion
from graphrt.lib import Library, TensorType
from graphrt.ops import elementwise_runs
fn = Library().define("f", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
    {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
    {"op": "exp", "inputs": ["t"], "outputs": ["u"]},
    {"op": "multiply", "inputs": ["u", "b"], "outputs": ["y"]}]})
f32 = TensorType((7,), "float32")
(call,) = fn.lower([f32, f32], [f32], kernels=chain("cpu", np), where="child", fuse=True).calls
stats = call.kernel.bound.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_a_second_process_loads_the_compiled_loop_from_disk(tmp_path: Path) -> None:
    env = {**os.environ, "GRAPHRT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GRAPHRT_JIT", None)
    runs = [subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["0", "1"], ["1", "0"]]  # compiled, then loaded
    assert len(list((tmp_path / "cache").glob("graphrt_fused_*.py"))) == 1


@pytest.mark.parametrize("shapes", [((200, 300), (200, 300)), ((200, 300), (300,)),
                                    ((200, 300), (200, 1))])
def test_on_the_helper_threads_a_loop_is_the_same_bits(
        shapes: tuple[tuple[int, ...], ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop over :data:`~graphrt.kernels.cpu.jit.PARALLEL_ELEMENTS` elements or more runs
    in blocks (of elements, or of rows where an input is read along trailing or leading axes)
    on the helper threads where its graph lets it: the same bits as on the caller alone."""
    steps = [("in0 + in1", ("a", "b"), ("t",)), ("erf(in0)", ("t",), ("u",)),
             ("in0 * in1", ("u", "a"), ("y",))]
    types = {"a": TensorType(shapes[0], "float32"), "b": TensorType(shapes[1], "float32"),
             "t": TensorType(shapes[0], "float32"), "u": TensorType(shapes[0], "float32"),
             "y": TensorType(shapes[0], "float32")}
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    spread: list[bool] = []
    real = cpu_fusion.run_jobs

    def spy(jobs: Any, parallel: bool, args: tuple[Any, ...]) -> None:
        spread.append(parallel)
        real(jobs, parallel, args)

    monkeypatch.setattr(cpu_fusion, "run_jobs", spy)
    outs = []
    for parallel in (False, True):
        ((_, kernel),) = cpu_fusion.fused_runs(steps, {"y"}, types,
                                               lambda parallel=parallel: parallel)
        y = np.full(shapes[0], np.nan, np.float32)
        kernel(a, b, y)
        outs.append(y)
    assert spread == [False, True]
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[1], np.vectorize(math.erf)(a + b) * a, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("shapes", [((8, 6), (8, 6)), ((8, 6), (8, 1)), ((8, 6), (6,))])
def test_the_loop_indexes_its_range_from_zero(shapes: tuple[tuple[int, ...], ...]) -> None:
    """The arrays read along the loop are sliced to the job's range and indexed from 0:
    numba wraps negative indices around, and over ``range(lo, hi)`` LLVM could not rule them
    out, so the loop did not vectorize (a QDQ residual add ran 3.6x as long)."""
    steps = [("in0 + in1", ("a", "b"), ("t",)), ("in0 * in1", ("t", "a"), ("y",))]
    types = {"a": TensorType(shapes[0], "float32"), "b": TensorType(shapes[1], "float32"),
             "t": TensorType(shapes[0], "float32"), "y": TensorType(shapes[0], "float32")}
    python = cpu_fusion.python_steps(steps, types)
    (run,) = elementwise_runs(python, {"y"})
    source = cpu_fusion.loop_source(run, python, types)
    assert source is not None
    assert "range(lo, hi)" not in source.kernel and "range(hi - lo)" in source.kernel
    assert "yv = y.reshape(n)[lo" in source.kernel


def _small_loop() -> cpu_fusion.BoundLoop:
    """``y = (a + b) * a - b`` over 6 float32 elements, compiled."""
    steps = [("in0 + in1", ("a", "b"), ("t",)), ("in0 * in1", ("t", "a"), ("u",)),
             ("in0 - in1", ("u", "b"), ("y",))]
    f32 = TensorType((2, 3), "float32")
    ((_, kernel),) = cpu_fusion.fused_runs(steps, {"y"}, dict(a=f32, b=f32, t=f32, u=f32, y=f32))
    assert isinstance(kernel, cpu_fusion.BoundLoop)
    return kernel


def test_a_small_loop_bound_once_reads_its_arrays_as_they_are_at_each_call() -> None:
    kernel = _small_loop()
    a, b = (RNG.standard_normal((2, 3)).astype("float32") for _ in range(2))
    y = np.empty((2, 3), "float32")
    call, args = kernel.bind_arrays((a, b, y))
    for _ in range(2):  # the contents change between calls; the memory stays
        call(*args)
        assert np.array_equal(y, (a + b) * a - b)
        a[...] = RNG.standard_normal((2, 3))
    call, args = kernel.bind_arrays((a.copy(), b.ravel().copy(), np.empty(6, "float32")))
    expected = (a + b) * a - b
    del a, b
    np.zeros(1 << 16, "float32")  # the step alone holds the arrays its addresses point into
    call(*args)
    assert np.array_equal(call.arrays[2].reshape(2, 3), expected)  # type: ignore[attr-defined]


def _read_only() -> np.ndarray[Any, Any]:
    array = np.zeros((2, 3), "float32")
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(("k", "array"), [
    (0, np.zeros((2, 3), "float64")),
    (1, np.zeros(5, "float32")),
    (0, np.zeros((3, 4), "float32")[:2, :3]),
    (2, _read_only()),
    (1, [0.0] * 6),
])
def test_binding_a_small_loop_to_a_wrong_array_names_it(k: int, array: Any) -> None:
    arrays: list[Any] = [np.zeros((2, 3), "float32") for _ in range(3)]
    arrays[k] = array
    with pytest.raises(TypeError, match=f"fused loop array {k}: expected a C-contiguous"):
        _small_loop()(*arrays)


def test_a_chain_of_bound_loops_follows_new_params_and_new_inputs() -> None:
    """The steps of a module hold its arrays' addresses: loading params replaces the arrays
    (the steps that read them are bound again), setting an input writes into its array."""
    pytest.importorskip("onnx")
    module = graphrt.from_onnx(_chain(40)).create()
    x = RNG.random((1, 16), dtype=np.float32)

    def expected(constants: list[float]) -> np.ndarray[Any, Any]:
        value = x
        for i, c in enumerate(constants):
            value = value * np.float32(c) if i % 2 else value + np.float32(c)
        return value

    first = [1.0001 if i % 2 else 0.001 for i in range(40)]
    assert np.array_equal(np.asarray(module(x=x)[0]), expected(first))
    second = [0.5 if i % 2 else 1.0 for i in range(40)]
    module.load_params({f"c{i}": np.array([c], "float32") for i, c in enumerate(second)})
    x = RNG.random((1, 16), dtype=np.float32)
    assert np.array_equal(np.asarray(module(x=x)[0]), expected(second))
