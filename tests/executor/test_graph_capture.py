"""Graph capture (create(..., cuda_graph=True)), exercised on the sim device, which simulates
it: recordings replay the same calls on the same memory and refuse host reads meanwhile."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.executor.capture import MAX_GRAPHS
from graphrt.kernels import ReferenceProvider
from tests.conftest import MODELS, example_graph, host

SIM = graphrt.devices.SIM


def chain_graph(length: int = 6, dev: int = SIM) -> dict[str, Any]:
    """x -> add 1 -> double -> add 1 -> ... (length kernels), all on ``dev``."""
    g = GraphBuilder(device_index=True)
    ref = g.input("x", [4, 3], dev=dev)
    for i in range(length):
        ref = g.op(f"k{i}", "add_one" if i % 2 == 0 else "double", [ref], shape=[4, 3], dev=dev)
    return g.build([ref])


def chain_reference(x: np.ndarray, length: int = 6) -> np.ndarray:
    for i in range(length):
        x = x + 1 if i % 2 == 0 else x * 2
    return x


def counting_lib(calls: list[str] | None = None) -> graphrt.Library:
    log = calls if calls is not None else []

    def add_one(x: Any, out: Any) -> None:
        log.append("add_one")
        np.add(x, 1, out=out)

    def double(x: Any, out: Any) -> None:
        log.append("double")
        np.multiply(x, 2, out=out)

    return graphrt.Library({"add_one": add_one, "double": double})


def sim_array(value: np.ndarray, device: graphrt.Device) -> Any:
    array = graphrt.devices.allocate(device, value.nbytes, "a test array")
    view = graphrt.devices.backend_for(device).view(array, value.shape, value.dtype)
    graphrt.devices.backend_for(device).upload(value, view)
    return view


def test_the_second_run_records_and_later_runs_replay(sim: graphrt.Device) -> None:
    mod = graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=True)
    rng = np.random.default_rng(0)
    for run in range(4):
        x = rng.standard_normal((4, 3)).astype("float32")
        mod.run(x=x)  # set_input copies into the same slot: the recording stays valid
        np.testing.assert_allclose(host(mod.get_output(0)), chain_reference(x), rtol=1e-6)
        report = mod.capture_report()
        assert report is not None and report.enabled and report.reason is None
        assert (report.captures, report.replays) == ((0, 0), (1, 0), (1, 1), (1, 2))[run]
    assert report.segments == 1 and report.eager_steps == 0 and report.cached == 1


def test_without_the_option_there_is_no_report(sim: graphrt.Device) -> None:
    mod = graphrt.create(chain_graph(), counting_lib(), "cpu", sim)
    assert mod.capture_report() is None


def test_a_replay_launches_the_recorded_kernels(sim: graphrt.Device) -> None:
    calls: list[str] = []
    mod = graphrt.create(chain_graph(4), counting_lib(calls), "cpu", sim, cuda_graph=True)
    for _ in range(3):
        mod.run(x=np.ones((4, 3), "float32"))
    assert calls == ["add_one", "double"] * 6  # warm-up, recording (runs once), replay


def test_cpu_nodes_and_copies_split_the_recording_into_segments(sim: graphrt.Device,
                                                                elemwise_lib: graphrt.Library
                                                                ) -> None:
    graph = example_graph("duplex", sim)
    plain = graphrt.create(graph, elemwise_lib, "cpu", sim)
    mod = graphrt.create(graph, elemwise_lib, "cpu", sim, cuda_graph=True)
    rng = np.random.default_rng(1)
    for _ in range(3):
        values = {name: rng.standard_normal(shape).astype("float32")
                  for name, shape in plain.get_input_info()["shape"].items()}
        plain.run(**values)
        mod.run(**values)
        for i in range(plain.get_num_outputs()):
            np.testing.assert_array_equal(host(mod.get_output(i)), host(plain.get_output(i)))
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays == 1
    assert report.segments >= 1 and report.eager_steps >= 1  # copies and cpu kernels between


def test_zero_copy_inputs_record_once_per_memory_and_replay_from_the_cache(
        sim: graphrt.Device) -> None:
    mod = graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=True)
    first, second = (sim_array(np.full((4, 3), v, "float32"), sim) for v in (1.0, 2.0))
    for array, value in ((first, 1.0), (second, 2.0), (first, 1.0), (second, 2.0)):
        mod.set_input_zero_copy("x", array)
        for _ in range(3):
            mod.run()
            np.testing.assert_allclose(host(mod.get_output(0)),
                                       chain_reference(np.full((4, 3), value, "float32")))
    report = mod.capture_report()
    assert report is not None
    assert report.captures == 2 and report.cached == 2  # each buffer recorded once
    assert report.replays == 2 * 1 + 2 * 3  # the buffers' first turns replay once each


def test_the_cache_keeps_the_latest_recordings_only(sim: graphrt.Device) -> None:
    mod = graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=True)
    arrays = [sim_array(np.full((4, 3), i, "float32"), sim) for i in range(MAX_GRAPHS + 2)]
    for i, array in enumerate(arrays):
        mod.set_input_zero_copy("x", array)
        mod.run()
        mod.run()
        np.testing.assert_allclose(host(mod.get_output(0)),
                                   chain_reference(np.full((4, 3), i, "float32")))
    report = mod.capture_report()
    assert report is not None and report.cached == MAX_GRAPHS
    assert report.captures == MAX_GRAPHS + 2
    mod.set_input_zero_copy("x", arrays[0])  # dropped: a warm-up run again, then a recording
    mod.run()
    mod.run()
    report = mod.capture_report()
    assert report is not None and report.captures == MAX_GRAPHS + 3


def test_dynamic_shapes_record_once_per_bound_shape(sim: graphrt.Device) -> None:
    graph = graphrt.create(MODELS / "mlp_dynamic" / "graph.json",
                           graphrt.Library.from_json(MODELS / "mlp_dynamic" / "lib.json"), sim)
    mod = graphrt.create(MODELS / "mlp_dynamic" / "graph.json",
                         graphrt.Library.from_json(MODELS / "mlp_dynamic" / "lib.json"), sim,
                         cuda_graph=True)
    info = graph.get_input_info()
    rng = np.random.default_rng(2)
    params = {name: rng.standard_normal(shape).astype("float32") * 0.1
              for name, shape in info["shape"].items() if name != "x"}
    graph.set_input(**params)
    mod.set_input(**params)
    features = info["shape"]["x"][1]
    for batch in (2, 5, 2, 5, 2, 5):
        x = rng.standard_normal((batch, features)).astype("float32")
        graph.run(x=x)
        mod.run(x=x)
        np.testing.assert_array_equal(host(mod.get_output(0)), host(graph.get_output(0)))
    report = mod.capture_report()
    assert report is not None and report.enabled
    assert report.captures == 2 and report.cached == 2 and report.replays == 2


def test_a_kernel_that_reads_the_device_on_the_host_runs_alone_between_recordings(
        sim: graphrt.Device, caplog: pytest.LogCaptureFixture) -> None:
    """Its recording fails, naming it: it runs step by step from then on and the kernels
    around it are recorded in two segments (decided per kernel, not for the whole context)."""
    calls: list[str] = []

    def scale_by_first(x: Any, out: Any) -> None:
        calls.append("scale")
        np.multiply(x, x.reshape(-1)[0].item(), out=out)  # a host synchronization on cuda

    lib = counting_lib(calls)
    lib.register("scale_by_first", scale_by_first)
    g = GraphBuilder(device_index=True)
    ref = g.input("x", [3], dev=SIM)
    for name, func in (("k0", "add_one"), ("scale", "scale_by_first"), ("k2", "double")):
        ref = g.op(name, func, [ref], shape=[3], dev=SIM)
    mod = graphrt.create(g.build([ref]), lib, "cpu", sim, cuda_graph=True)
    x = np.array([2.0, 3.0, 4.0], "float32")
    with caplog.at_level(logging.WARNING, logger="graphrt"):
        for run in range(5):
            calls.clear()
            mod.run(x=x)
            np.testing.assert_array_equal(host(mod.get_output(0)), (x + 1) * 3 * 2)
            # the run whose recording failed is right too (sim's recording ran some kernels
            # before it failed, and the segment then ran step by step); replays once each
            if run == 4:
                assert sorted(calls) == ["add_one", "double", "scale"], calls
    report = mod.capture_report()
    assert report is not None and report.enabled and report.reason is None
    assert report.segments == 2 and report.eager_nodes == ("scale",) and report.replays >= 1
    ((name, why),) = report.eager_reasons
    assert name == "scale" and "reads device memory on the host" in why
    warned = [r.getMessage() for r in caplog.records if "scale" in r.getMessage()]
    assert len(warned) == 1 and "step by step" in warned[0], warned


def test_a_kernel_known_not_to_record_has_its_reason_in_the_report(
        sim: graphrt.Device) -> None:
    g = GraphBuilder(device_index=True)
    ref = g.op("k0", "add_one", [g.input("x", [3], dev=SIM)], shape=[3], dev=SIM)
    back = g.op("to_host", "__copy", [ref], shape=[3], dev=1)
    mod = graphrt.create(g.build([back]), counting_lib(), "cpu", sim, cuda_graph=True)
    for _ in range(3):
        mod.run(x=np.ones(3, "float32"))
    report = mod.capture_report()
    assert report is not None and report.eager_nodes == ("to_host",)
    assert "a copy between devices" in report.eager_reasons[0][1]


def test_a_failing_kernel_names_its_node_and_capture_stays_on(sim: graphrt.Device) -> None:
    failing = {"on": False}

    def add_one(x: Any, out: Any) -> None:
        if failing["on"]:
            raise ValueError("broken")
        np.add(x, 1, out=out)

    lib = graphrt.Library({"add_one": add_one, "double": lambda x, out: np.multiply(x, 2,
                                                                                     out=out)})
    mod = graphrt.create(chain_graph(), lib, "cpu", sim, cuda_graph=True)
    mod.run(x=np.ones((4, 3), "float32"))
    failing["on"] = True
    with pytest.raises(graphrt.ExecutionError, match="k0") as info:
        mod.run()  # the recording run
    assert info.value.node_name == "k0"
    failing["on"] = False
    mod.run()
    mod.run()
    report = mod.capture_report()
    assert report is not None and report.enabled and report.captures == 1
    assert report.replays == 1


def test_a_graph_without_a_recording_device_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="graphrt"):
        mod = graphrt.create(chain_graph(dev=graphrt.devices.CPU), counting_lib(), "cpu",
                             cuda_graph=True)
    x = np.ones((4, 3), "float32")
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), chain_reference(x))
    report = mod.capture_report()
    assert report is not None and not report.enabled
    assert report.reason is not None and "cpu kernels are plain calls" in report.reason
    assert any("graph capture is off" in r.getMessage() for r in caplog.records)


def test_capture_is_decided_per_prepared_kernel(sim: graphrt.Device,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A node whose prepared kernel is not capturable runs alone between recorded segments,
    on a device that records work; a graph of only such nodes records nothing, and says
    why."""
    real = ReferenceProvider.prepare

    def prepare(self: ReferenceProvider, op: Any, *args: Any, **kwargs: Any) -> Any:
        prepared = real(self, op, *args, **kwargs)
        if prepared is None or op.name != "relu":
            return prepared
        return dataclasses.replace(prepared, capturable=False)

    monkeypatch.setattr(ReferenceProvider, "prepare", prepare)
    lib = counting_lib()
    lib.define("relu1", {"inputs": ["x"], "outputs": ["y"],
                         "body": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}]})
    g = GraphBuilder(device_index=True)
    ref = g.input("x", [4, 3], dev=SIM)
    for name, func in (("k0", "add_one"), ("r", "relu1"), ("k1", "double")):
        ref = g.op(name, func, [ref], shape=[4, 3], dev=SIM)
    mod = graphrt.create(g.build([ref]), lib, "cpu", sim, cuda_graph=True)
    x = np.arange(-6, 6, dtype="float32").reshape(4, 3)
    for _ in range(3):
        mod.run(x=x)
        np.testing.assert_array_equal(host(mod.get_output(0)), np.maximum(x + 1, 0) * 2)
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays == 1
    assert report.segments == 2 and report.eager_steps == 1  # relu runs between the two
    assert report.eager_nodes == ("r",)  # named in the report
    only = GraphBuilder(device_index=True)
    only_ref = only.op("r", "relu1", [only.input("x", [4, 3], dev=SIM)], shape=[4, 3], dev=SIM)
    alone = graphrt.create(only.build([only_ref]), lib, "cpu", sim, cuda_graph=True)
    alone.run(x=x)
    report = alone.capture_report()
    assert report is not None and not report.enabled
    assert report.reason is not None and "not capturable" in report.reason


def test_profiling_and_debugging_still_go_node_by_node(sim: graphrt.Device) -> None:
    mod = graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=True)
    x = np.ones((4, 3), "float32")
    mod.run(x=x)
    mod.run()
    profile = mod.profile(repeat=2)
    assert len(profile.nodes) == 6
    np.testing.assert_allclose(host(mod.debug_get_output("k2")), chain_reference(x, 3))
    mod.run()
    np.testing.assert_allclose(host(mod.get_output(0)), chain_reference(x))


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_the_option_takes_a_bool(value: Any, sim: graphrt.Device) -> None:
    with pytest.raises(graphrt.ArgumentError, match="cuda_graph"):
        graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=value)


def test_it_does_not_combine_with_inter_op_threads(sim: graphrt.Device) -> None:
    with pytest.raises(graphrt.ArgumentError, match="inter_op_threads=2"):
        graphrt.create(chain_graph(), counting_lib(), "cpu", sim, cuda_graph=True,
                       inter_op_threads=2)


def test_a_bundle_passes_the_option_on(sim: graphrt.Device) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 17)])
    assert onnx.checker.check_model(model) is None
    mod = graphrt.from_onnx(model).create(sim, cuda_graph=True)
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    for _ in range(3):
        (y,) = mod(x=x)
        np.testing.assert_array_equal(host(y), np.maximum(x, 0))
    report = mod.capture_report()
    assert report is not None and report.enabled
