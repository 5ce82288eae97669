"""Dynamic shapes: storage planned once at the bounds, variables bound per run, shape functions
that copy to the host only the inputs whose values they read."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.cli import main
from graphrt.lib import TensorType
from tests.conftest import MODELS, host

sys.path.insert(0, str(MODELS))

import reference

DEVICES = ["cpu", "sim"]



# -- the dynamic-batch MLP ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp_weights() -> dict[str, np.ndarray]:
    static = graphrt.create(MODELS / "mlp" / "graph.json",
                            graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    weights = reference.weights("mlp", static.get_input_info())
    return {name: value for name, value in weights.items() if name != "x"}


def mlp_module(device: str, weights: dict[str, np.ndarray]) -> graphrt.GraphModule:
    mod = graphrt.create(MODELS / "mlp_dynamic" / "graph.json",
                         graphrt.Library.from_json(MODELS / "mlp_dynamic" / "lib.json"), device)
    mod.load_params(weights)
    return mod


def batch(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + n).standard_normal((n, 64)).astype("float32")


@pytest.mark.parametrize("device", DEVICES)
def test_one_module_runs_batches_1_7_64_with_no_allocation_after_create(
        device: str, mlp_weights: dict[str, np.ndarray], allocations: list[int]) -> None:
    mod = mlp_module(device, mlp_weights)
    planned = sum(mod.plan.bytes_per_device().values())
    assert sum(allocations) >= planned  # create() allocated through the counted path
    allocations.clear()
    for n in (1, 7, 64, 7, 1):
        x = batch(n)
        mod.run(x=x)
        out = mod.get_output(0)
        assert out.shape == (n, 10)
        expected = reference.MODELS["mlp"]({**mlp_weights, "x": x})
        np.testing.assert_allclose(host(out), expected, rtol=1e-5, atol=1e-6)
        into = np.empty((n, 10), "float32")
        mod.get_output(0, out=into)
        np.testing.assert_array_equal(into, host(out))
    assert allocations == []
    assert sum(mod.plan.bytes_per_device().values()) == planned


@pytest.mark.parametrize("device", DEVICES)
def test_memory_reports_planned_and_last_run_use(device: str,
                                                  mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module(device, mlp_weights)
    dev = graphrt.device(device)
    mod.run(x=batch(64))
    at_bound = mod.memory()
    assert at_bound.used == at_bound.planned
    mod.run(x=batch(7))
    report = mod.memory()
    assert report.planned == at_bound.planned
    weights_bytes = sum(w.nbytes for w in mlp_weights.values())
    activations = 4 * 7 * (64 + 128 + 128 + 10)
    scratch = mod.plan.scratch.arena.get(dev, 0)  # the fused functions' intermediates
    assert report.used[dev] == weights_bytes + activations + scratch
    assert 0 < report.used_fraction(dev) < 1
    assert f"{report.used[dev]:,}" in report.table()
    assert report.to_dict()[str(dev)]["planned"] == report.planned[dev]


@pytest.mark.parametrize(("n", "bound"), [(65, "64"), (0, "64")])
def test_a_batch_outside_the_bound_is_an_input_error(n: int, bound: str,
                                                     mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module("cpu", mlp_weights)
    mod.run(x=batch(3))
    with pytest.raises(graphrt.InputError, match=rf"input 'x'.*dimension 0 binds shape variable "
                       rf"'n' to {n}, outside its bounds \[1, {bound}\]"):
        mod.set_input("x", np.zeros((n, 64), "float32"))
    with pytest.raises(graphrt.InputError, match="outside its bounds"):
        mod.run(x=np.zeros((n, 64), "float32"))
    mod.run()  # still usable, still batch 3
    assert mod.get_output(0).shape == (3, 10)


@pytest.mark.parametrize(("shape", "dtype", "message"), [
    ((4, 63), "float32", r"dimension 1 must be 64 \(shape \['n', 64\]\)"),
    ((4,), "float32", r"expected a 2-D shape \['n', 64\]"),
    ((4, 64), "float64", r"expected dtype float32 \(shape \['n', 64\]\), given float64"),
])
def test_a_dynamic_input_checks_rank_fixed_dims_and_dtype(
        shape: tuple[int, ...], dtype: str, message: str,
        mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module("cpu", mlp_weights)
    with pytest.raises(graphrt.InputError, match=message):
        mod.set_input("x", np.zeros(shape, dtype))


def test_info_shows_symbolic_dims(mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module("cpu", mlp_weights)
    assert mod.get_input_info()["shape"]["x"] == ("n", 64)
    assert mod.get_input_info()["shape"]["w0"] == (128, 64)
    assert mod.get_output_info()["shape"]["fused_dense_softmax"] == ("n", 10)


@pytest.mark.parametrize("device", DEVICES)
def test_calling_the_module_returns_outputs_at_their_actual_shape(
        device: str, mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module(device, mlp_weights)
    (first,) = mod(x=batch(5))
    (second,) = mod(x=batch(2))
    assert first.shape == (5, 10) and second.shape == (2, 10)
    expected = reference.MODELS["mlp"]({**mlp_weights, "x": batch(5)})
    np.testing.assert_allclose(host(first), expected, rtol=1e-5, atol=1e-6)


def test_a_dynamic_input_binds_zero_copy_and_a_dynamic_output_cannot(
        mlp_weights: dict[str, np.ndarray]) -> None:
    mod = mlp_module("cpu", mlp_weights)
    x = batch(9)
    mod.set_input_zero_copy("x", x)
    mod.run()
    assert mod.get_input("x").ctypes.data == x.ctypes.data
    expected = reference.MODELS["mlp"]({**mlp_weights, "x": x})
    np.testing.assert_allclose(mod.get_output(0), expected, rtol=1e-5, atol=1e-6)
    x2 = batch(3)
    mod.invoke_with_outputs({"x": x2}, [None])
    assert mod.get_output(0).shape == (3, 10)
    mod.run()  # back to the persistent binding: batch 9
    assert mod.get_output(0).shape == (9, 10)
    with pytest.raises(graphrt.InputError, match=r"shape \['n', 10\] changes from run to run"):
        mod.set_output_zero_copy(0, np.empty((9, 10), "float32"))
    with pytest.raises(graphrt.InputError, match="outside its bounds"):
        mod.set_input_zero_copy("x", np.zeros((100, 64), "float32"))


def residual_graph() -> tuple[dict[str, Any], graphrt.Library]:
    """x -> t = relu(x) -> y = relu(x + t): node y's declarative function reads the bound
    input and an entry sized by the same variable, which is resized only when a run starts."""
    g = GraphBuilder()
    x = g.input("x", ["n", 4])
    t = g.op("t", "relu1", [x], shape=["n", 4])
    y = g.op("y", "add_relu", [x, t], shape=["n", 4])
    lib = graphrt.Library()
    lib.define("relu1", {"inputs": ["a"], "outputs": ["b"],
                         "body": [{"op": "relu", "inputs": ["a"], "outputs": ["b"]}]})
    lib.define("add_relu", {"inputs": ["a", "b"], "outputs": ["c"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["s"]},
        {"op": "relu", "inputs": ["s"], "outputs": ["c"]}]})
    return g.build([y], {"n": {"max": 8}}), lib


@pytest.mark.parametrize("device", DEVICES)
def test_zero_copy_inputs_below_the_bound_bind_and_run_at_every_batch(device: str) -> None:
    """Binding an input of a new shape re-prepares the steps that read it once the run's
    shapes are known, not at the bind (where the others still have the old ones)."""
    graph, lib = residual_graph()
    mod = graphrt.create(graph, lib, device)
    dev = mod.devices[0]
    for n in (3, 8, 1, 8, 3):
        x = np.linspace(-1, 1, n * 4, dtype="float32").reshape(n, 4)
        want = np.maximum(x + np.maximum(x, 0), 0)
        bound = graphrt.devices.allocate(dev, x.nbytes, "a test input")
        bound = graphrt.devices.backend_for(dev).view(bound, x.shape, x.dtype)
        graphrt.devices.backend_for(dev).upload(x, bound)
        mod.set_input_zero_copy("x", bound)
        mod.run()
        np.testing.assert_array_equal(host(mod.get_output(0)), want)
        mod.set_input("x", np.zeros((2, 4), "float32"))  # unbound, other shape
        mod.invoke_with_outputs({"x": bound}, [None])
        np.testing.assert_array_equal(host(mod.get_output(0)), want)


def test_debug_outputs_and_profile_follow_the_last_shapes(
        mlp_weights: dict[str, np.ndarray], tmp_path: Path) -> None:
    mod = mlp_module("cpu", mlp_weights)
    x = batch(6)
    mod.set_input("x", x)
    hidden = mod.debug_get_output("fused_dense_relu_0")
    assert hidden.shape == (6, 128)
    np.testing.assert_allclose(hidden, np.maximum(x @ mlp_weights["w0"].T + mlp_weights["b0"], 0),
                               rtol=1e-5, atol=1e-6)
    saved = np.load(mod.dump_outputs(tmp_path / "out.npz"))
    assert saved["fused_dense_softmax:9:0"].shape == (6, 10)
    assert saved["x:0:0"].shape == (6, 64)
    report = mod.profile(repeat=2, warmup=0)
    assert len(report.nodes) == 3
    assert report.nodes[0].output_shapes == ((6, 128),)  # the shapes it ran with


# -- shared variables and expressions ----------------------------------------------------------

def concat_graph() -> dict[str, Any]:
    g = GraphBuilder()
    a = g.input("a", ["n", 4])
    b = g.input("b", ["m", 4])
    scale = g.input("scale", ["n", 4])
    ab = g.op("ab", "concat", [a, b], shape=["n + m", 4])
    y = g.op("y", "mul", [a, scale], shape=["n", 4])
    return g.build([ab, y], {"n": {"max": 8, "min": 1}, "m": {"max": 5}})


CONCAT_LIB = {"concat": lambda a, b, out: np.concatenate([a, b], out=out),
              "mul": lambda a, b, out: np.multiply(a, b, out=out)}


@pytest.mark.parametrize("device", DEVICES)
def test_expression_dims_are_planned_at_their_bound_and_evaluated_per_run(device: str) -> None:
    mod = graphrt.create(concat_graph(), CONCAT_LIB, device)
    assert mod.graph.entries[3].shape == (13, 4)
    a, b = np.ones((3, 4), "float32"), np.full((0, 4), 2, "float32")
    mod.run(a=a, b=b, scale=np.full((3, 4), 3, "float32"))
    assert host(mod.get_output(0)).shape == (3, 4)
    mod.run(b=np.full((5, 4), 2, "float32"))
    ab = host(mod.get_output(0))
    assert ab.shape == (8, 4) and (ab[3:] == 2).all()
    np.testing.assert_array_equal(host(mod.get_output(1)), np.full((3, 4), 3))


def test_inputs_disagreeing_on_a_variable_name_both() -> None:
    mod = graphrt.create(concat_graph(), CONCAT_LIB)
    mod.set_input(a=np.ones((3, 4), "float32"))  # each alone is fine
    mod.set_input(scale=np.ones((2, 4), "float32"))
    with pytest.raises(graphrt.InputError, match=r"inputs disagree on shape variable 'n' "
                       r"\(bounds \[1, 8\]\): input 'a' dimension 0 gives 3, input 'scale' "
                       r"dimension 0 gives 2"):
        mod.run()
    mod.run(scale=np.ones((3, 4), "float32"))
    assert mod.get_output(1).shape == (3, 4)


def test_an_input_with_an_expression_dim_is_checked_against_its_value() -> None:
    g = GraphBuilder()
    x = g.input("x", ["n", 2])
    pairs = g.input("pairs", ["2*n"])
    y = g.op("y", "flat_add", [x, pairs], shape=["n", 2])
    lib = {"flat_add": lambda x, p, out: np.add(x, p.reshape(x.shape), out=out)}
    mod = graphrt.create(g.build([y], {"n": {"max": 6}}), lib)
    mod.run(x=np.ones((3, 2), "float32"), pairs=np.arange(6, dtype="float32"))
    np.testing.assert_array_equal(mod.get_output(0), np.arange(6).reshape(3, 2) + 1)
    with pytest.raises(graphrt.InputError, match=r"input 'pairs' dimension 0 is 5, but "
                       r"'2 \* n' = 6 with n=3"):
        mod.run(pairs=np.arange(5, dtype="float32"))


# -- shape functions ---------------------------------------------------------------------------

def slice_graph(device_type: int, rows: int = 4096) -> dict[str, Any]:
    graph = json.loads((MODELS / "dynamic_slice" / "graph.json").read_text())
    graph["attrs"]["device_index"][1] = [device_type] * len(graph["nodes"])
    graph["shape_vars"]["rows"]["max"] = rows
    return graph


def slice_lib() -> graphrt.Library:
    return graphrt.Library.from_json(MODELS / "dynamic_slice" / "lib.json")


X = np.random.default_rng(0).random((4096, 256), dtype=np.float32)
WINDOW = {"start": np.array([100, 16]), "size": np.array([1000, 64]), "step": np.array([3, 2])}


def test_on_sim_only_begin_end_strides_cross_to_the_host(sim: graphrt.Device) -> None:
    mod = graphrt.create(slice_graph(sim.type_code), slice_lib(), graphrt.cpu(0), sim)
    mod.set_input(x=X)
    mod.set_input(**WINDOW)
    counters = graphrt.sim_counters(sim)
    counters.reset()
    mod.run()
    assert (counters.downloads, counters.download_bytes) == (3, 3 * 2 * 8)
    assert counters.uploads == 0 and counters.device_copies == 0
    moved = mod.last_run_transfers()
    assert moved.shape_functions == graphrt.TransferStats(3, 48, 48, 0)
    assert moved.copy_nodes == graphrt.TransferStats()
    out = mod.get_output(0)
    np.testing.assert_allclose(host(out), np.sqrt(X[100:1100:3, 16:80:2]))


@pytest.mark.parametrize(("start", "size", "step"), [
    ([0, 0], [4096, 256], [1, 1]), ([-10, 5], [30, 1], [1, 7]), ([4095, 255], [-5000, -300],
                                                                  [-1, -2]),
    ([50, 50], [0, 10], [1, 1]), ([5000, 0], [10, 10], [1, 1]),
])
@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_slice_matches_python_slicing(device: str, start: list[int], size: list[int],
                                              step: list[int]) -> None:
    dev = graphrt.device(device)
    devices = {graphrt.cpu(0), dev}
    mod = graphrt.create(slice_graph(dev.type_code), slice_lib(), *sorted(devices, key=str))
    begin, count, stride = np.array(start), np.array(size), np.array(step)
    end = begin + count
    mod.run(x=X, start=begin, size=count, step=stride)
    expected = np.sqrt(X[begin[0]:end[0]:stride[0], begin[1]:end[1]:stride[1]])
    assert host(mod.get_output(0)).shape == expected.shape
    np.testing.assert_allclose(host(mod.get_output(0)), expected)


def test_marking_the_whole_op_data_dependent_copies_the_sliced_tensor(sim: graphrt.Device
                                                                      ) -> None:
    lib = slice_lib()
    per_input = lib.shape_function("fused_dynamic_slice")
    assert per_input is not None and per_input.data_dependent == (False, True, True, True)
    lib.register_shape_func("fused_dynamic_slice", per_input.fn, [True] * 4)
    mod = graphrt.create(slice_graph(sim.type_code), lib, graphrt.cpu(0), sim)
    mod.run(x=X, **WINDOW)
    assert mod.last_run_transfers().shape_functions.to_host_bytes == X.nbytes + 48


def test_a_computed_shape_above_the_bound_is_an_execution_error(sim: graphrt.Device) -> None:
    mod = graphrt.create(slice_graph(sim.type_code, rows=64), slice_lib(), graphrt.cpu(0), sim)
    with pytest.raises(graphrt.ExecutionError, match=r"node 5 'window'.*dimension 0 is 100, "
                       r"which binds shape variable 'rows' outside its bounds \[0, 64\]") as err:
        mod.run(x=np.zeros((4096, 256), "float32"), start=np.array([0, 0]),
                size=np.array([100, 10]), step=np.array([1, 1]))
    assert err.value.node_id == 5 and err.value.func_name == "fused_dynamic_slice"
    mod.run(size=np.array([64, 10]))  # the module stays usable
    assert mod.get_output(0).shape == (64, 10)


def nonzero_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [16])
    kept = g.op("kept", "positive", [x], shape=["k"])
    y = g.op("y", "double", [kept], shape=["k"])
    return g.build([y], {"k": {"max": 16}})


def python_nonzero_lib(with_shape_function: bool = True) -> graphrt.Library:
    lib = graphrt.Library({"positive": lambda x, out: np.copyto(out, x[x > 0]),
                           "double": lambda x, out: np.multiply(x, 2, out=out)})
    if with_shape_function:
        lib.register_shape_func("positive", lambda types, data: [(int((data[0] > 0).sum()),)],
                                [True])
    return lib


@pytest.mark.parametrize("device", DEVICES)
def test_a_python_kernel_with_a_shape_function_binds_a_variable(device: str) -> None:
    mod = graphrt.create(nonzero_graph(), python_nonzero_lib(), device)
    x = np.array([1, -2, 3, 0, 5, -1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 7], "float32")
    mod.run(x=x)
    np.testing.assert_array_equal(host(mod.get_output(0)), 2 * x[x > 0])
    mod.run(x=-np.abs(x))
    assert mod.get_output(0).shape == (0,)
    transfers = mod.last_run_transfers().shape_functions
    assert transfers.to_host_bytes == (64 if device == "sim" else 0)


def test_a_node_binding_a_variable_without_a_shape_function_is_refused() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"node 1 'kept' binds shape variable "
                       r"'k'.*kernel 'positive' needs a shape function"):
        graphrt.create(nonzero_graph(), python_nonzero_lib(with_shape_function=False))


def test_a_shape_function_declaring_the_wrong_arity_is_refused() -> None:
    lib = python_nonzero_lib()
    lib.register_shape_func("positive", lambda types, data: [(1,)], [True, False])
    with pytest.raises(graphrt.GraphFormatError, match="declares data dependence for 2 inputs, "
                       "the node has 1"):
        graphrt.create(nonzero_graph(), lib)


def test_a_failing_shape_function_names_its_node() -> None:
    lib = python_nonzero_lib()

    def broken(types: list[TensorType], data: list[Any]) -> list[tuple[int, ...]]:
        raise RuntimeError("cannot size this")

    lib.register_shape_func("positive", broken, [True])
    mod = graphrt.create(nonzero_graph(), lib)
    with pytest.raises(graphrt.ExecutionError, match=r"node 1 'kept'.*shape function on the host "
                       r"failed: RuntimeError: cannot size this"):
        mod.run(x=np.ones(16, "float32"))


def test_a_static_graph_with_a_data_dependent_node_checks_its_shape_each_run() -> None:
    g = GraphBuilder()
    x = g.input("x", [10])
    begin, end, stride = (g.input(name, [1], "int64") for name in ("begin", "end", "strides"))
    y = g.op("y", "slice", [x, begin, end, stride], shape=[4])
    lib = graphrt.Library()
    lib.define("slice", {"inputs": ["x", "b", "e", "s"], "outputs": ["y"], "body": [
        {"op": "dynamic_strided_slice", "inputs": ["x", "b", "e", "s"], "outputs": ["y"]}]})
    mod = graphrt.create(g.build([y]), lib)
    x_values = np.arange(10, dtype="float32")
    mod.run(x=x_values, begin=np.array([2]), end=np.array([6]), strides=np.array([1]))
    np.testing.assert_array_equal(mod.get_output(0), [2, 3, 4, 5])
    with pytest.raises(graphrt.ExecutionError, match=r"output 0 has shape \[5\], but the graph "
                       "gives dimension 0 as 4"):
        mod.run(end=np.array([7]))


def test_a_static_graph_runs_on_the_static_path() -> None:
    mod = graphrt.create(MODELS / "mlp" / "graph.json",
                         graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    assert mod.compiled.shapes is None and mod.context._dynamic is None
    assert mod.memory().used == mod.memory().planned
    assert mod.last_run_transfers() == graphrt.TransferLog()


def test_a_function_reading_an_intermediate_on_the_host_is_refused() -> None:
    with pytest.raises(graphrt.GraphFormatError, match="needs the values of 'e2' on the host"):
        graphrt.Library().define("bad", {"inputs": ["x", "b", "e", "s"], "outputs": ["y"],
                                         "body": [
            {"op": "add", "inputs": ["e", "e"], "outputs": ["e2"]},
            {"op": "dynamic_strided_slice", "inputs": ["x", "b", "e2", "s"], "outputs": ["y"]}]})


def test_copy_nodes_move_the_actual_bytes_and_are_counted_apart(sim: graphrt.Device) -> None:
    g = GraphBuilder(device_index=True)
    x = g.input("x", ["n", 4])
    on_sim = g.op("to_sim", "__copy", [x], shape=["n", 4], dev=sim.type_code)
    y = g.op("y", "negate", [on_sim], shape=["n", 4], dev=sim.type_code)
    back = g.op("to_cpu", "__copy", [y], shape=["n", 4])
    mod = graphrt.create(g.build([back], {"n": {"max": 32}}),
                         {"negate": lambda a, out: np.negative(a, out=out)}, graphrt.cpu(0), sim)
    counters = graphrt.sim_counters(sim)
    for n in (3, 32):
        counters.reset()
        x_values = np.arange(4 * n, dtype="float32").reshape(n, 4)
        mod.run(x=x_values)
        np.testing.assert_array_equal(mod.get_output(0), -x_values)
        moved = mod.last_run_transfers()
        assert moved.copy_nodes == graphrt.TransferStats(2, 32 * n, 16 * n, 16 * n)
        assert moved.shape_functions == graphrt.TransferStats()
        assert (counters.upload_bytes, counters.download_bytes) == (16 * n, 16 * n)
    result = mod.benchmark(repeat=2, number=1, end_to_end=True, x=np.ones((5, 4), "float32"))
    assert result.number == 1 and mod.get_output(0).shape == (5, 4)


def test_inputs_making_a_dimension_negative_are_an_input_error() -> None:
    g = GraphBuilder()
    a = g.input("a", ["n"])
    b = g.input("b", ["m"])
    y = g.op("y", "head", [a, b], shape=["n - m"])
    mod = graphrt.create(g.build([y], {"n": {"max": 8}, "m": {"max": 4}}),
                         {"head": lambda a, b, out: np.copyto(out, a[:out.shape[0]])})
    mod.run(a=np.arange(5, dtype="float32"), b=np.zeros(2, "float32"))
    np.testing.assert_array_equal(mod.get_output(0), [0, 1, 2])
    with pytest.raises(graphrt.InputError, match=r"entry 2 \(output 0 of node 2 'y'\) "
                       r"dimension 0 \('n - m'\) is -1"):
        mod.run(a=np.arange(1, dtype="float32"), b=np.zeros(2, "float32"))


def test_a_dynamic_graph_travels_in_a_bundle_and_runs_from_the_cli(
        tmp_path: Path, mlp_weights: dict[str, np.ndarray],
        capsys: pytest.CaptureFixture[str]) -> None:
    path = graphrt.save_bundle(tmp_path / "mlp_dynamic.grb",
                               MODELS / "mlp_dynamic" / "graph.json",
                               graphrt.Library.from_json(MODELS / "mlp_dynamic" / "lib.json"),
                               mlp_weights)
    bundle = graphrt.load_bundle(path)
    assert [spec.shape for spec in bundle.inputs] == [["n", 64]]
    assert [spec.shape for spec in bundle.outputs] == [["n", 10]]
    mod = bundle.create("sim")
    x = batch(7)
    (probs,) = mod(x=x)
    np.testing.assert_allclose(host(probs), reference.MODELS["mlp"]({**mlp_weights, "x": x}),
                               rtol=1e-5, atol=1e-6)
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    assert "[7, 10]" in capsys.readouterr().out
    assert main(["run", str(path)]) == 0  # random x at the bound
    assert "[64, 10]" in capsys.readouterr().out
    assert main(["inspect", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "[n, 64]" in printed and "shape variables: 1 <= n <= 64" in printed
