"""Placement report, fallback warning, profiler, Chrome trace, debug outputs and benchmark()."""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import orjson
import pytest
from builders import GraphBuilder
from pydantic import BaseModel, ConfigDict, RootModel

import graphrt
from tests.conftest import example_graph, random_inputs


@pytest.fixture
def duplex(sim: graphrt.Device, elemwise_lib: graphrt.Library) -> graphrt.GraphModule:
    mod = graphrt.create(example_graph("duplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    mod.set_input(**random_inputs(mod))
    return mod


# -- placement ----------------------------------------------------------------------------


def test_placement_report_of_duplex(duplex: graphrt.GraphModule) -> None:
    report = duplex.placement()
    assert [(d.device, d.nodes, d.entries, d.bytes) for d in report.devices] == [
        ("cpu:0", 2, 3, 48), ("sim:0", 3, 6, 80)]
    assert [(c.node_id, c.node_name, c.direction, c.bytes) for c in report.copies] == [
        (3, "__copy_add_to_sub", "sim:0 -> cpu:0", 16),
        (6, "__copy_sub_to_add", "cpu:0 -> sim:0", 16)]
    assert report.copy_bytes == 32
    assert report.fallbacks == ()
    assert orjson.loads(orjson.dumps(report.to_dict()))["copies"][0]["direction"] == (
        "sim:0 -> cpu:0")
    assert "copies: 2 (32 bytes per run)" in report.table()


def test_fallbacks_are_reported_and_warned_once(elemwise_lib: graphrt.Library,
                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="graphrt"):
        mod = graphrt.create(example_graph("duplex"), elemwise_lib, graphrt.cpu(0))
        mod.run(**random_inputs(mod))
        mod.placement()
    warnings = [r for r in caplog.records if r.name == "graphrt"]
    assert len(warnings) == 1
    assert warnings[0].getMessage() == (
        "6 of 9 entries fell back to cpu:0 (no cuda device (type 2) was given); see "
        "GraphModule.placement()")
    report = mod.placement()
    assert [(f.entry_id, f.node_name, f.requested_type) for f in report.fallbacks] == [
        (0, "A", 2), (1, "B", 2), (2, "elemwise_add0", 2), (6, "__copy_sub_to_add", 2),
        (7, "D", 2), (8, "elemwise_add1", 2)]
    assert [(d.device, d.nodes, d.bytes) for d in report.devices] == [("cpu:0", 5, 128)]


def test_no_warning_without_fallback(sim: graphrt.Device, elemwise_lib: graphrt.Library,
                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="graphrt"):
        graphrt.create(example_graph("duplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    assert not [r for r in caplog.records if r.name == "graphrt"]


# -- profiler -----------------------------------------------------------------------------


def test_profile_rows_and_aggregates(duplex: graphrt.GraphModule) -> None:
    report = duplex.profile(repeat=4)
    assert [(n.node_id, n.func_name, n.kind, n.device) for n in report.nodes] == [
        (2, "elemwise_add", "op", "sim:0"), (3, "__copy", "copy", "cpu:0"),
        (5, "elemwise_sub", "op", "cpu:0"), (6, "__copy", "copy", "sim:0"),
        (8, "elemwise_add", "op", "sim:0")]
    copy = report.nodes[1]
    assert (copy.source, copy.bytes, copy.input_shapes, copy.output_shapes) == (
        "sim:0", 16, ((4,),), ((4,),))
    assert copy.bandwidth_gbps is not None and copy.bandwidth_gbps > 0
    assert report.nodes[0].bandwidth_gbps is None
    assert all(len(n.times_us) == 4 and min(n.times_us) > 0 for n in report.nodes)
    assert len(report.runs) == 4
    by_func = report.by_func_name()
    assert {name: a.calls for name, a in by_func.items()} == {
        "elemwise_add": 2, "__copy": 2, "elemwise_sub": 1}
    assert sum(a.total_us for a in by_func.values()) == pytest.approx(report.total_us)
    assert sum(a.percent for a in report.by_device().values()) == pytest.approx(100.0)
    assert {name: a.calls for name, a in report.by_device().items()} == {"sim:0": 3, "cpu:0": 2}
    table = report.table()
    assert "sim:0 -> cpu:0: 16 B at" in table and "by func_name" in table
    data = orjson.loads(orjson.dumps(report.to_dict()))
    assert len(data["nodes"]) == 5 and data["by_device"]["sim:0"]["calls"] == 3


def test_profile_leaves_results_as_run_does(duplex: graphrt.GraphModule) -> None:
    duplex.run()
    expected = duplex.get_output(0).view(np.ndarray).copy()
    duplex.profile(repeat=2)
    np.testing.assert_array_equal(duplex.get_output(0).view(np.ndarray), expected)


def test_profile_reports_kernel_errors_like_run() -> None:
    def broken(a: np.ndarray, out: np.ndarray) -> None:
        raise RuntimeError("bad kernel")

    g = GraphBuilder()
    y = g.op("boom", "boom", [g.input("x", [2])], shape=[2])
    mod = graphrt.create(g.build(heads=[y]), {"boom": broken})
    with pytest.raises(graphrt.ExecutionError, match=r"node 1 'boom'.*RuntimeError: bad kernel"):
        mod.profile(repeat=1, warmup=0)
    with pytest.raises(graphrt.InputError, match="repeat must be an int >= 1, given 0"):
        mod.profile(repeat=0)


class TraceEvent(BaseModel):
    """The Chrome trace event format, as ONNX Runtime writes it (complete and metadata)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    ph: Literal["X", "M"]
    pid: int
    tid: int
    args: dict[str, Any]
    cat: str | None = None
    ts: float | None = None
    dur: float | None = None


Trace = RootModel[list[TraceEvent]]


def test_chrome_trace_events_nest_in_their_runs(duplex: graphrt.GraphModule,
                                                tmp_path: Any) -> None:
    report = duplex.profile(repeat=3)
    path = report.save_chrome_trace(tmp_path / "trace.json")
    events = Trace.model_validate_json(path.read_bytes()).root
    complete = [e for e in events if e.ph == "X"]
    runs = [e for e in complete if e.name == "model_run"]
    nodes = [e for e in complete if e.name != "model_run"]
    assert len(runs) == 3 and len(nodes) == 3 * 5
    assert {(e.tid, e.args["name"]) for e in events if e.ph == "M"} == {
        (0, "run"), (1, "cpu:0"), (2, "sim:0")}
    for event in complete:
        assert event.cat in ("Session", "Node", "Copy")
        assert event.ts is not None and event.dur is not None and event.dur >= 0
    for run in runs:  # every node call lies inside exactly one run
        assert run.ts is not None and run.dur is not None
        inside = [e for e in nodes if e.ts is not None and e.dur is not None
                  and run.ts <= e.ts and e.ts + e.dur <= run.ts + run.dur]
        assert len(inside) == 5
    copies = [e for e in nodes if e.cat == "Copy"]
    assert {(e.args["source"], e.args["device"], e.args["bytes"]) for e in copies} == {
        ("sim:0", "cpu:0", 16), ("cpu:0", "sim:0", 16)}
    assert all(e.args["op_name"] and e.args["input_shapes"] for e in nodes)


# -- debug outputs ------------------------------------------------------------------------


def reuse_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [3])
    a = g.op("a", "double", [x], shape=[3], sids=[1])
    b = g.op("b", "double", [a], shape=[3], sids=[2])
    c = g.op("c", "double", [b], shape=[3], sids=[1])  # overwrites a's slot
    r = g.op("r", "__nop", [c], shape=[1, 3], sids=[1])
    return g.build(heads=[r])


DOUBLE = {"double": lambda a, o: np.multiply(a, 2, out=o)}


def test_debug_get_output_sees_overwritten_intermediates() -> None:
    mod = graphrt.create(reuse_graph(), DOUBLE)
    mod.set_input("x", np.ones(3, "float32"))
    np.testing.assert_array_equal(mod.debug_get_output("a"), np.full(3, 2))
    np.testing.assert_array_equal(mod.debug_get_output(2), np.full(3, 4))
    out = np.empty(3, "float32")
    assert mod.debug_get_output("c", out=out) is out
    np.testing.assert_array_equal(out, np.full(3, 8))
    np.testing.assert_array_equal(mod.debug_get_output("x"), np.ones(3))
    np.testing.assert_array_equal(mod.debug_get_output("r"), np.full((1, 3), 8))


@pytest.mark.parametrize(("node", "index", "match"), [
    ("nope", 0, "no node is called 'nope'"),
    (9, 0, "node index 9 is out of range"),
    ("a", 1, r"node 1 'a' has 1 output\(s\), given index 1"),
])
def test_debug_get_output_errors(node: Any, index: int, match: str) -> None:
    mod = graphrt.create(reuse_graph(), DOUBLE)
    with pytest.raises(graphrt.InputError, match=match):
        mod.debug_get_output(node, index)


def test_debug_get_output_refuses_ambiguous_names() -> None:
    g = GraphBuilder()
    y = g.op("same", "double", [g.input("x", [2])], shape=[2])
    z = g.op("same", "double", [y], shape=[2])
    mod = graphrt.create(g.build(heads=[z]), DOUBLE)
    with pytest.raises(graphrt.InputError, match=r"2 nodes are called 'same' \(ids \[1, 2\]\)"):
        mod.debug_get_output("same")


def test_dump_outputs_writes_every_node_as_it_finished(sim: graphrt.Device,
                                                       tmp_path: Any) -> None:
    mod = graphrt.create(reuse_graph(), DOUBLE, sim)
    mod.set_input("x", np.ones(3, "float32"))
    path = mod.dump_outputs(tmp_path / "dump.npz")
    dumped = np.load(path)
    assert sorted(dumped.keys()) == ["a:1:0", "b:2:0", "c:3:0", "r:4:0", "x:0:0"]
    assert [float(dumped[k][0].ravel()[0]) for k in ("x:0:0", "a:1:0", "b:2:0", "c:3:0")] == [
        1.0, 2.0, 4.0, 8.0]
    assert dumped["r:4:0"].shape == (1, 3)
    assert type(dumped["a:1:0"]) is np.ndarray


# -- benchmark ----------------------------------------------------------------------------


def test_benchmark_statistics_and_synchronization(duplex: graphrt.GraphModule,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    backend = graphrt.devices.backend_for(graphrt.sim(0))
    monkeypatch.setattr(backend, "synchronize", lambda: synced.append("sim"))
    result = duplex.benchmark(repeat=4, number=3)
    assert len(result.results) == 4 and result.number == 3
    assert result.min <= result.median <= result.max
    assert result.min <= result.mean <= result.max and result.std >= 0
    assert synced.count("sim") == 2 * 4  # before and after every batch
    assert "Execution time summary (ms)" in str(result)


def test_benchmark_min_repeat_ms_grows_number(duplex: graphrt.GraphModule) -> None:
    result = duplex.benchmark(repeat=2, number=1, min_repeat_ms=5)
    assert result.number > 1
    assert result.mean * result.number * 1e3 >= 2.5  # a batch now lasts about 5 ms or more


def test_benchmark_end_to_end_moves_inputs_and_outputs(duplex: graphrt.GraphModule,
                                                       sim: graphrt.Device) -> None:
    counters = graphrt.sim_counters(sim)
    counters.reset()
    duplex.benchmark(repeat=2, number=2)
    inside = (counters.uploads, counters.downloads)
    counters.reset()
    duplex.benchmark(repeat=2, number=2, end_to_end=True, A=np.ones(4, "float32"))
    # End to end adds, per run, the upload of A and the download of the output (and A is
    # set, so checked, once before timing).
    assert (counters.uploads - inside[0], counters.downloads - inside[1]) == (1 + 4, 4)


def test_benchmark_rejects_bad_counts(duplex: graphrt.GraphModule) -> None:
    with pytest.raises(graphrt.InputError, match="repeat and number must be >= 1"):
        duplex.benchmark(repeat=0)
