"""Inter-op parallelism: independent branches run at once (``create(inter_op_threads=...)``)
and give what a sequential run gives, storage ids shared by liveness and scratch included."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.executor.parallel import (
    MIN_GRAPH_SHARE,
    MIN_WAVE_SAVING,
    describe_plan,
    function_flops,
)
from graphrt.kernels.cpu.blas_threads import blas_held

N = 24  # small matrices: BLAS runs them on one thread, so both runs are bitwise alike
BRANCHES = 4

SPEC = {"functions": {
    # two intermediates: each branch needs scratch, which lanes must not share
    "mm_relu_scale": {"inputs": ["x", "w"], "outputs": ["y"], "body": [
        {"op": "matmul", "inputs": ["x", "w"], "outputs": ["t"]},
        {"op": "relu", "inputs": ["t"], "outputs": ["r"]},
        {"op": "multiply", "inputs": ["r", "w"], "outputs": ["y"]}]},
    "mm": {"inputs": ["x", "w"], "outputs": ["y"], "body": [
        {"op": "matmul", "inputs": ["x", "w"], "outputs": ["y"]}]},
    "add": {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["y"]}]},
}}


def branches_graph(n: int = N, branches: int = BRANCHES, *, shared: bool = True
                   ) -> dict[str, Any]:
    """x -> ``branches`` x (mm_relu_scale -> mm) -> a chain of adds. With ``shared``, the
    first node of every branch writes storage id 100 (valid in node order: each is read
    before the next branch writes it), as a liveness planner gives them."""
    g = GraphBuilder()
    x = g.input("x", [n, n])
    weights = [(g.input(f"w{b}a", [n, n]), g.input(f"w{b}b", [n, n])) for b in range(branches)]
    acc = None
    for b, (wa, wb) in enumerate(weights):
        h = g.op(f"first{b}", "mm_relu_scale", [x, wa], shape=[n, n],
                 sids=[100 if shared else None])
        y = g.op(f"second{b}", "mm", [h, wb], shape=[n, n])
        acc = y if acc is None else g.op(f"sum{b}", "add", [acc, y], shape=[n, n])
    assert acc is not None
    return g.build([acc])


def library() -> graphrt.Library:
    return graphrt.Library.from_json(SPEC)


def feeds(n: int = N, branches: int = BRANCHES, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {"x": rng.standard_normal((n, n)).astype("float32")}
    for b in range(branches):
        for k in "ab":
            values[f"w{b}{k}"] = rng.standard_normal((n, n)).astype("float32")
    return values


def run(mod: graphrt.GraphModule, values: dict[str, np.ndarray]) -> np.ndarray:
    mod.run(**values)
    return np.array(mod.get_output(0))


def test_branches_run_in_parallel_and_equal_sequential_bitwise() -> None:
    graph, values = branches_graph(), feeds()
    seq = graphrt.create(graph, library(), inter_op_threads=0)
    par = graphrt.create(graph, library(), inter_op_threads=2)
    assert seq.compiled.parallel is None
    plan = par.compiled.parallel
    assert plan is not None and plan.threads == 2
    nids = [p.nid for p in par.compiled.programs]
    first = {par.graph.nodes[nid].name for nid in nids}
    assert {f"first{b}" for b in range(BRANCHES)} <= first
    shown = describe_plan(plan, nids)
    assert shown.startswith("parallel: ")
    with blas_held(1):
        expected = run(seq, values)
        for _ in range(3):
            np.testing.assert_array_equal(run(par, values), expected)


def test_storage_ids_shared_by_liveness_are_split_for_a_parallel_run() -> None:
    graph = branches_graph()
    seq = graphrt.create(graph, library(), inter_op_threads=0)
    par = graphrt.create(graph, library(), inter_op_threads=2)
    firsts = [node.outputs[0] for node in par.graph.nodes if node.name.startswith("first")]
    assert {seq.graph.entries[eid].sid for eid in firsts} == {100}
    # the first node of each branch runs in one wave: no two of them may share storage
    assert len({par.graph.entries[eid].sid for eid in firsts}) == BRANCHES
    assert par.memory().context[graphrt.cpu(0)] > seq.memory().context[graphrt.cpu(0)]


def test_each_lane_has_its_own_scratch() -> None:
    par = graphrt.create(branches_graph(), library(), inter_op_threads=2)
    plan = par.compiled.parallel
    assert plan is not None
    lanes = {plan.lane_of[i] for i, p in enumerate(par.compiled.programs) if p.scratch}
    assert lanes == {0, 1}
    seq = graphrt.create(branches_graph(), library(), inter_op_threads=0)
    arena = seq.plan.scratch.arena[graphrt.cpu(0)]
    grown = par.memory().context[graphrt.cpu(0)] - seq.memory().context[graphrt.cpu(0)]
    assert grown >= arena  # a second arena (and the split storage ids)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_any_number_of_threads_gives_the_same_result(threads: int) -> None:
    graph, values = branches_graph(shared=False), feeds(seed=threads)
    with blas_held(1):
        expected = run(graphrt.create(graph, library(), inter_op_threads=1), values)
        mod = graphrt.create(graph, library(), inter_op_threads=threads)
        assert mod.compiled.parallel is not None
        np.testing.assert_array_equal(run(mod, values), expected)


def test_calls_and_zero_copy_outputs_go_through_the_parallel_run() -> None:
    graph, values = branches_graph(), feeds()
    with blas_held(1):
        expected = run(graphrt.create(graph, library(), inter_op_threads=0), values)
        par = graphrt.create(graph, library(), inter_op_threads=2)
        (called,) = par(**values)
        np.testing.assert_array_equal(called, expected)
        out = np.empty_like(expected)
        inputs: dict[int | str, Any] = dict(values)
        par.invoke_with_outputs(inputs, [out])
        np.testing.assert_array_equal(out, expected)


def test_hooked_runs_stay_sequential_and_agree() -> None:
    graph, values = branches_graph(), feeds()
    par = graphrt.create(graph, library(), inter_op_threads=2)
    with blas_held(1):
        expected = run(par, values)
        report = par.profile(repeat=2)
        assert len(report.nodes) == len(par.compiled.programs)
        np.testing.assert_array_equal(np.array(par.get_output(0)), expected)
        last = par.graph.entries[par.graph.heads[0]].nid
        np.testing.assert_array_equal(par.debug_get_output(last), expected)


def test_concurrent_threads_each_get_their_own_run() -> None:
    graph = branches_graph()
    par = graphrt.create(graph, library(), inter_op_threads=2)
    seq = graphrt.create(graph, library(), inter_op_threads=0)
    results: dict[int, bool] = {}

    def worker(seed: int) -> None:
        values = feeds(seed=seed)
        ok = True
        for _ in range(5):
            ok &= bool(np.allclose(run(par, values), run(seq.clone(), values), rtol=1e-5))
        results[seed] = ok

    with blas_held(1):
        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == {0: True, 1: True, 2: True}


def failing_lib(fail_in: str) -> graphrt.Library:
    def matmul(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        np.matmul(x, w, out=out)

    def broken(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        raise ValueError("this branch is broken")

    def add(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.add(a, b, out=out)

    lib = graphrt.Library()
    lib.register("mm", matmul)
    lib.register("mm_relu_scale", broken if fail_in == "first" else matmul)
    lib.register("add", add)
    return lib


def test_an_exception_in_a_branch_is_the_sequential_execution_error() -> None:
    graph, values = branches_graph(), feeds()
    errors = []
    for threads in (0, 2):
        mod = graphrt.create(graph, failing_lib("first"), inter_op_threads=threads)
        assert (mod.compiled.parallel is not None) == (threads == 2)
        with pytest.raises(graphrt.ExecutionError) as info:
            mod.run(**values)
        errors.append(info.value)
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(graphrt.ExecutionError, match="not computed"):
            mod.get_output(0)
    seq, par = errors
    assert (par.node_id, par.node_name, par.func_name, str(par)) == (
        seq.node_id, seq.node_name, seq.func_name, str(seq))


def test_a_failed_parallel_run_leaves_the_module_usable() -> None:
    graph, values = branches_graph(), feeds()
    par = graphrt.create(graph, failing_lib("first"), inter_op_threads=2)
    with pytest.raises(graphrt.ExecutionError):
        par.run(**values)
    good = graphrt.create(graph, failing_lib("none"), inter_op_threads=2)
    assert good.compiled.parallel is not None
    with blas_held(1):
        expected = run(graphrt.create(graph, failing_lib("none"), inter_op_threads=0), values)
        np.testing.assert_array_equal(run(good, values), expected)


def test_auto_runs_small_branches_and_chains_sequentially(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("graphrt.executor.parallel.available_cores", lambda: 8)
    monkeypatch.setattr("graphrt.executor.parallel.AUTO_PARALLEL", True)
    assert graphrt.create(branches_graph(), library()).compiled.parallel is None
    g = GraphBuilder()
    x = g.input("x", [N, N])
    w = g.input("w", [N, N])
    y = x
    for k in range(5):
        y = g.op(f"mm{k}", "mm", [y, w], shape=[N, N])
    chain = g.build([y])
    assert graphrt.create(chain, library(), inter_op_threads=4).compiled.parallel is None


def test_auto_estimate_runs_big_branches_in_parallel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    n = 256  # 4 branches of 2 x 33 Mflop matmuls: one wave saves 3 x 33 Mflop on 4 lanes
    assert 2 * 2 * n**3 >= MIN_WAVE_SAVING
    monkeypatch.setattr("graphrt.executor.parallel.available_cores", lambda: 8)
    monkeypatch.setattr("graphrt.executor.parallel.AUTO_PARALLEL", True)
    plan = graphrt.create(branches_graph(n), library()).compiled.parallel
    assert plan is not None and plan.threads == 4 and plan.blas_threads == 2
    total, saved = plan.flops
    assert saved >= MIN_GRAPH_SHARE * total
    monkeypatch.setattr("graphrt.executor.parallel.available_cores", lambda: 1)
    assert graphrt.create(branches_graph(n), library()).compiled.parallel is None
    monkeypatch.setattr("graphrt.executor.parallel.available_cores", lambda: 8)
    monkeypatch.setattr("graphrt.executor.parallel.AUTO_PARALLEL", False)  # as shipped
    assert graphrt.create(branches_graph(n), library()).compiled.parallel is None
    mod = graphrt.create(branches_graph(n), library(), inter_op_threads=2)
    assert mod.compiled.parallel is not None and mod.compiled.parallel.blas_threads == 8 // 2


def test_python_kernels_count_no_flops_so_auto_stays_sequential(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("graphrt.executor.parallel.available_cores", lambda: 8)
    monkeypatch.setattr("graphrt.executor.parallel.AUTO_PARALLEL", True)
    mod = graphrt.create(branches_graph(256), failing_lib("none"))
    assert mod.compiled.parallel is None


def test_flops_of_a_function() -> None:
    fn = library().resolve("mm_relu_scale", 1)
    assert isinstance(fn, graphrt.lib.FusedFunction)
    t = graphrt.lib.TensorType((8, 16), "float32")
    w = graphrt.lib.TensorType((16, 16), "float32")
    assert function_flops(fn, [t, w], [graphrt.lib.TensorType((8, 16), "float32")]) == (
        2 * 8 * 16 * 16)


@pytest.mark.parametrize("value", [-1, 65, 1.5, "2", True, [2]])
def test_inter_op_threads_must_be_a_count(value: Any) -> None:
    with pytest.raises(graphrt.ArgumentError, match="inter_op_threads"):
        graphrt.create(branches_graph(), library(), inter_op_threads=value)


def test_sequential_options_and_other_devices_have_no_plan() -> None:
    graph = branches_graph()
    for threads in (0, 1):
        assert graphrt.create(graph, library(), inter_op_threads=threads).compiled.parallel is None
    assert graphrt.create(graph, library(), "sim", inter_op_threads=2).compiled.parallel is None


def test_bundles_pass_the_option(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, outs = [], [], []
    for b in range(3):  # two deep: the importer folds the Sum into each branch's last one
        for k in range(2):
            inits.append(numpy_helper.from_array(
                rng.standard_normal((N, N)).astype("float32"), f"w{b}{k}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{b}0"], [f"h{b}"]))
        nodes.append(helper.make_node("MatMul", [f"h{b}", f"w{b}1"], [f"y{b}"]))
        outs.append(f"y{b}")
    nodes.append(helper.make_node("Sum", outs, ["y"]))
    model = helper.make_model(helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, N])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    bundle = graphrt.from_onnx(model)
    x = rng.standard_normal((N, N)).astype("float32")
    with blas_held(1):
        (expected,) = bundle.create("cpu", inter_op_threads=0)(x=x)
        par = bundle.create("cpu", inter_op_threads=2)
        assert par.compiled.parallel is not None
        (got,) = par(x=x)
    np.testing.assert_array_equal(got, expected)
