"""The executor split: one compiled graph, run contexts per thread, params held once, one
runner, lowered declarative functions with planned scratch, and results that are never
garbage."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.devices.base import Backend
from graphrt.executor.compiled import run_calls
from tests.conftest import MODELS, host

sys.path.insert(0, str(MODELS))

import reference

DEVICES = ["cpu", "sim"]


@pytest.fixture(scope="module")
def mlp_values() -> dict[str, np.ndarray]:
    mod = graphrt.create(MODELS / "mlp" / "graph.json",
                         graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    return reference.weights("mlp", mod.get_input_info())


def mlp(device: str, values: dict[str, np.ndarray]) -> graphrt.GraphModule:
    mod = graphrt.create(MODELS / "mlp" / "graph.json",
                         graphrt.Library.from_json(MODELS / "mlp" / "lib.json"), device)
    mod.load_params({name: value for name, value in values.items() if name != "x"})
    return mod


def weights_of(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: value for name, value in values.items() if name != "x"}


def inputs_for(thread: int, count: int, like: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + thread)
    return [rng.standard_normal(like.shape).astype(like.dtype) for _ in range(count)]



# -- concurrency -------------------------------------------------------------------------------

THREADS, RUNS = 8, 1000


@pytest.mark.parametrize("device", DEVICES)
def test_eight_threads_times_a_thousand_runs_never_see_another_threads_data(
        device: str, mlp_values: dict[str, np.ndarray]) -> None:
    mod = mlp(device, mlp_values)
    x = mlp_values["x"]
    feeds = [inputs_for(t, 4, x) for t in range(THREADS)]
    expected = [[host(mod(x=feed)[0]) for feed in thread_feeds] for thread_feeds in feeds]
    for thread_feeds, thread_expected in zip(feeds, expected, strict=True):
        for feed, out in zip(thread_feeds, thread_expected, strict=True):
            np.testing.assert_allclose(out, reference.mlp({**mlp_values, "x": feed}),
                                       rtol=1e-5, atol=1e-6)
    wrong: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            start.wait()
            out = np.empty(expected[t][0].shape, expected[t][0].dtype)
            backend = graphrt.devices.backend_for(graphrt.device(device))
            bound = backend.view(backend.allocate(out.nbytes), out.shape, out.dtype)
            on_device = [backend.view(backend.allocate(f.nbytes), f.shape, f.dtype)
                         for f in feeds[t]]
            for feed, target in zip(feeds[t], on_device, strict=True):
                backend.upload(feed, target)
            for r in range(RUNS):
                k = r % 4
                style = (t + r) % 3
                if style == 0:
                    got = host(mod(x=feeds[t][k])[0])
                elif style == 1:
                    mod.run(x=feeds[t][k])
                    got = mod.get_output(0, out=out).copy()
                else:
                    mod.invoke_with_outputs({"x": on_device[k]}, [bound])
                    got = host(bound)
                if not np.allclose(got, expected[t][k], rtol=1e-5, atol=1e-6):
                    wrong.append((t, r))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert wrong == []


def test_weights_are_held_once_however_many_contexts(mlp_values: dict[str, np.ndarray],
                                                      allocations: list[int]) -> None:
    mod = mlp("cpu", mlp_values)
    cpu = graphrt.cpu(0)
    weights = sum(w.nbytes for w in weights_of(mlp_values).values())
    one = mod.memory()
    assert one.contexts == 1 and one.params[cpu] == weights
    assert one.context[cpu] + one.params[cpu] == one.planned[cpu]  # no slot of its own for them
    allocations.clear()
    ready, done = threading.Barrier(9), threading.Event()
    reports = []

    def worker() -> None:
        mod(x=mlp_values["x"])
        ready.wait()
        done.wait()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    ready.wait()
    reports.append(mod.memory())
    done.set()
    for thread in threads:
        thread.join()
    eight = reports[0]
    assert eight.contexts == 9 and eight.params == one.params  # weights once
    assert eight.total(cpu) == weights + 9 * one.context[cpu]
    outputs = sum(mod(x=mlp_values["x"])[0].nbytes for _ in range(8))  # mod() returns fresh
    allocations_by_contexts = sum(allocations) - outputs * 2
    assert allocations_by_contexts == 8 * one.context[cpu]  # no weights among them


def test_a_context_is_freed_when_its_thread_or_clone_goes(mlp_values: dict[str, np.ndarray]
                                                          ) -> None:
    mod = mlp("cpu", mlp_values)
    refs: list[weakref.ref[Any]] = []

    def worker() -> None:
        mod.run(x=mlp_values["x"])
        refs.append(weakref.ref(mod.context))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    gc.collect()
    assert refs[0]() is None
    clone = mod.clone()
    clone.run(x=mlp_values["x"])
    ref = weakref.ref(clone.context)
    del clone
    assert ref() is None  # no reference cycle: freed at once, without the cycle collector


def test_a_clone_shares_the_compiled_graph_and_params(mlp_values: dict[str, np.ndarray]) -> None:
    mod = mlp("sim", mlp_values)
    clone = mod.clone()
    assert clone.compiled is mod.compiled
    x = mlp_values["x"]
    np.testing.assert_array_equal(host(clone(x=x)[0]), host(mod(x=x)[0]))
    mod.set_input(x=np.zeros_like(x))  # per context: the clone keeps its own input
    clone.run()
    np.testing.assert_array_equal(host(clone.get_output(0)), host(mod(x=x)[0]))


def test_share_params_reads_the_other_modules_memory(mlp_values: dict[str, np.ndarray]) -> None:
    first = mlp("cpu", mlp_values)
    second = graphrt.create(MODELS / "mlp" / "graph.json",
                            graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    blob = graphrt.save_params(weights_of(mlp_values))
    second.share_params(first, blob)
    for name in weights_of(mlp_values):
        assert np.shares_memory(second.get_input(name), first.get_input(name))
    x = mlp_values["x"]
    np.testing.assert_array_equal(second(x=x)[0], first(x=x)[0])
    fresh = graphrt.create(MODELS / "mlp" / "graph.json",
                           graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    with pytest.raises(graphrt.InputError, match="the other module has no param 'w0' loaded"):
        second.share_params(fresh, blob)
    with pytest.raises(graphrt.InputError, match="needs a GraphModule"):
        second.share_params("first", blob)  # type: ignore[arg-type]


def test_params_loaded_while_threads_run_are_never_torn(mlp_values: dict[str, np.ndarray]
                                                        ) -> None:
    mod = mlp("cpu", mlp_values)
    x = mlp_values["x"]
    other = {name: value * 2 for name, value in weights_of(mlp_values).items()}
    results = {host(mod(x=x)[0]).tobytes()}
    mod.load_params(other)
    results.add(host(mod(x=x)[0]).tobytes())
    assert len(results) == 2
    seen: list[bytes] = []
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            seen.append(mod(x=x)[0].tobytes())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for k in range(200):
        mod.load_params(other if k % 2 else weights_of(mlp_values))
    stop.set()
    for thread in threads:
        thread.join()
    assert seen and set(seen) <= results


def test_set_input_of_a_param_overrides_it_in_the_calling_thread_only(
        mlp_values: dict[str, np.ndarray]) -> None:
    mod = mlp("cpu", mlp_values)
    x = mlp_values["x"]
    before = mod(x=x)[0]
    mod.set_input(b2=np.ones_like(mlp_values["b2"]))
    changed = mod(x=x)[0]
    assert not np.array_equal(changed, before)
    other: list[np.ndarray] = []
    thread = threading.Thread(target=lambda: other.append(mod(x=x)[0]))
    thread.start()
    thread.join()
    np.testing.assert_array_equal(other[0], before)
    mod.load_params({"b2": mlp_values["b2"]})  # the latest write wins, here too
    np.testing.assert_array_equal(mod(x=x)[0], before)


# -- results are never garbage -----------------------------------------------------------------

def two_outputs(fail: list[bool]) -> graphrt.GraphModule:
    def double(a: np.ndarray, out: np.ndarray) -> None:
        np.multiply(a, 2, out=out)

    def flaky(a: np.ndarray, out: np.ndarray) -> None:
        if fail[0]:
            raise ValueError("flaky kernel failed")
        np.add(a, 1, out=out)

    g = GraphBuilder()
    x = g.input("x", [4])
    first = g.op("first", "double", [x], shape=[4])
    second = g.op("second", "flaky", [first], shape=[4])
    return graphrt.create(g.build(heads=[first, second]), {"double": double, "flaky": flaky})


def test_outputs_a_failed_run_did_not_finish_raise_until_a_run_completes() -> None:
    fail = [False]
    mod = two_outputs(fail)
    x = np.arange(4, dtype="float32")
    mod.run(x=x)
    fail[0] = True
    with pytest.raises(graphrt.ExecutionError, match="flaky kernel failed") as err:
        mod.run(x=x + 10)
    assert err.value.node_id == 2 and isinstance(err.value.__cause__, ValueError)
    np.testing.assert_array_equal(mod.get_output(0), (x + 10) * 2)  # finished before the error
    with pytest.raises(graphrt.ExecutionError, match=r"output 1 \('second'\) was not computed "
                       r"by the last run .*flaky kernel failed.*; run again"):
        mod.get_output(1)
    fail[0] = False
    mod.run()
    np.testing.assert_array_equal(mod.get_output(1), (x + 10) * 2 + 1)


def test_debug_get_output_marks_what_it_did_not_run() -> None:
    mod = two_outputs([False])
    mod.run(x=np.ones(4, "float32"))
    np.testing.assert_array_equal(mod.debug_get_output("first"), np.full(4, 2, "float32"))
    with pytest.raises(graphrt.ExecutionError, match="debug_get_output ran the graph only up"):
        mod.get_output(1)
    mod.run()
    np.testing.assert_array_equal(mod.get_output(1), np.full(4, 3, "float32"))


def test_a_kernel_reshaping_its_arrays_cannot_change_the_contexts_views() -> None:
    def rude(a: np.ndarray, out: np.ndarray) -> None:  # its own arrays stay reshaped
        np.multiply(a.reshape(-1), 3, out=out.reshape(-1))
        out.shape = (2, 2)
        a.shape = (4, 1)

    g = GraphBuilder()
    x = g.input("x", [4])
    y = g.op("rude", "rude", [x], shape=[4])
    mod = graphrt.create(g.build(heads=[y]), {"rude": rude})
    for _ in range(2):
        mod.run(x=np.arange(4, dtype="float32"))
        assert mod.get_output(0).shape == (4,) and mod.get_input("x").shape == (4,)
    got = mod.get_output(0)
    got.shape = (2, 2)  # nor can the caller reshape what get_output returned
    assert mod.get_output(0).shape == (4,)


# -- one runner --------------------------------------------------------------------------------

def dynamic_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", ["n", 4])
    y = g.op("boom", "boom", [x], shape=["n", 4])
    return g.build(heads=[y], shape_vars={"n": {"min": 1, "max": 8}})


def test_a_kernel_error_on_a_dynamic_graph_is_wrapped_like_on_a_static_one() -> None:
    def boom(a: np.ndarray, out: np.ndarray) -> None:
        raise RuntimeError("kaboom")

    mod = graphrt.create(dynamic_graph(), {"boom": boom})
    with pytest.raises(graphrt.ExecutionError, match=r"node 1 'boom' \(func_name 'boom'\) "
                       r"failed on cpu:0: RuntimeError: kaboom") as err:
        mod.run(x=np.zeros((3, 4), "float32"))
    assert isinstance(err.value.__cause__, RuntimeError) and err.value.node_id == 1
    with pytest.raises(graphrt.ExecutionError, match="kaboom"):
        mod.dump_outputs(Path("unused.npz"))  # the dumper's runs are wrapped alike
    with pytest.raises(graphrt.ExecutionError, match="kaboom"):
        mod.profile(repeat=1)


def test_the_profiler_lists_shape_functions_and_their_copies(sim: graphrt.Device,
                                                             tmp_path: Path) -> None:
    from tests.executor.test_dynamic_shapes import WINDOW, X, slice_graph, slice_lib

    mod = graphrt.create(slice_graph(sim.type_code), slice_lib(), graphrt.cpu(0), sim)
    mod.set_input(x=X)
    mod.set_input(**WINDOW)
    report = mod.profile(repeat=3)
    shape_rows = [node for node in report.nodes if node.kind == "shape"]
    assert len(shape_rows) == 1
    (row,) = shape_rows
    assert row.node_id == 5 and row.bytes == 48 and row.source == str(sim)
    assert row.name.endswith("[shape function]") and len(row.times_us) == 3
    assert "[shape function]" in report.table()
    trace = report.chrome_trace()
    assert any(event.get("cat") == "ShapeFunction" and event["args"]["bytes"] == 48
               for event in trace)
    order = [(node.node_id, node.kind) for node in report.nodes]
    assert order.index((5, "shape")) == order.index((5, "op")) - 1


# -- lowered declarative functions -------------------------------------------------------------

def chain_lib() -> graphrt.Library:
    lib = graphrt.Library()
    lib.define("add1", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["y"]}]})
    lib.define("add_mul_relu", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
        {"op": "multiply", "inputs": ["t", "b"], "outputs": ["u"]},
        {"op": "relu", "inputs": ["u"], "outputs": ["y"]}]})
    return lib


def chain(func: str, nodes: int, size: int = 100) -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [size])
    c = g.input("c", [size])
    for i in range(nodes):
        x = g.op(f"n{i}", func, [x, c], shape=[size], sids=[2 + i % 2])
    return g.build(heads=[x])


def test_a_one_op_function_runs_as_a_plain_kernel() -> None:
    mod = graphrt.create(chain("add1", 3), chain_lib())
    steps = mod.context._table.steps
    assert all(fn is not run_calls and len(args) == 3 for fn, args in steps)
    assert mod.plan.scratch.arena == {}
    (y,) = mod(x=np.ones(100, "float32"), c=np.full(100, 2, "float32"))
    np.testing.assert_array_equal(y, np.full(100, 7, "float32"))


@pytest.mark.parametrize("device", DEVICES)
def test_intermediates_are_planned_scratch_shared_across_nodes(
        device: str, allocations: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHRT_JIT", "0")  # on cpu, numba would fuse the run: no scratch
    dev = graphrt.device(device)
    mod = graphrt.create(chain("add_mul_relu", 5), chain_lib(), device)
    # Two intermediates of 400 bytes per node, live at once: 2 x 448 (64-aligned), for all 5.
    assert mod.plan.scratch.arena == {dev: 896}
    assert mod.memory().context[dev] == 4 * 400 + 896  # x, c, the two alternating slots, arena
    usage = mod.placement().to_dict()["devices"][0]
    assert usage["bytes"] == mod.plan.bytes_per_device()[dev] and usage["scratch"] == 896
    assert 896 in allocations  # the arena, allocated by the context
    x, c = np.linspace(-1, 1, 100, dtype="float32"), np.full(100, 0.5, "float32")
    expected = x
    for _ in range(5):
        expected = np.maximum((expected + c) * c, 0)
    allocations.clear()
    (y,) = mod(x=x, c=c)
    np.testing.assert_allclose(host(y), expected, rtol=1e-6)
    assert allocations == [y.nbytes]  # the fresh output mod() returns; no intermediate


def test_a_function_asking_for_a_petabyte_fails_at_create_before_allocating(
        allocations: list[int]) -> None:
    lib = graphrt.Library()
    lib.define("outer_sum", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
        {"op": "sum", "inputs": ["t"], "outputs": ["y"]}]})
    g = GraphBuilder()
    a = g.input("a", [2**25, 1])
    b = g.input("b", [1, 2**25])
    y = g.op("outer", "outer_sum", [a, b], shape=[])
    with pytest.raises(graphrt.PlacementError, match=r"the intermediates of node 2 'outer' "
                       r"\(func_name 'outer_sum'\) needs 4503599627370496 bytes \(scratch\) on "
                       r"cpu:0, beyond"):
        graphrt.create(g.build(heads=[y]), lib)
    assert allocations == []


def test_validate_counts_a_bundles_scratch(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from graphrt.cli import main

    monkeypatch.setenv("GRAPHRT_JIT", "0")  # numba would fuse the run: no scratch

    path = graphrt.save_bundle(tmp_path / "chain.grb", chain("add_mul_relu", 5), chain_lib(),
                               {})
    assert main(["validate", str(path)]) == 0
    planned = 4 * 400 + 896  # four slots (x, c and two alternating) and the arena
    assert f"{planned:,} bytes on cpu:0" in capsys.readouterr().out


# -- staging comes from the backends -----------------------------------------------------------

def test_shape_function_staging_is_allocated_by_the_backend_when_a_context_is_made(
        sim: graphrt.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.executor.test_dynamic_shapes import WINDOW, X, slice_graph, slice_lib

    staged: list[int] = []
    backend_class = type(graphrt.devices.backend_for(sim))
    original: Callable[..., Any] = backend_class.allocate_host

    def counted(self: Backend, nbytes: int) -> Any:
        staged.append(nbytes)
        return original(self, nbytes)

    monkeypatch.setattr(backend_class, "allocate_host", counted)
    mod = graphrt.create(slice_graph(sim.type_code), slice_lib(), graphrt.cpu(0), sim)
    assert len(staged) == 3 and mod.memory().staging == sum(staged)
    staged.clear()
    for _ in range(3):
        mod.run(x=X, **WINDOW)
    assert staged == []
