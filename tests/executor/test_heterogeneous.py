"""The examples on cpu + sim: results, placement, fallback, copies and device discipline."""

from __future__ import annotations

import numpy as np
import pytest

import graphrt
from graphrt.devices import SimArray
from tests.conftest import EXAMPLE_GRAPHS, example_graph, random_inputs

EXPECTED = {
    "simplex": lambda v: (v["A"] + v["B"]) - v["C"],
    "duplex": lambda v: ((v["A"] + v["B"]) - v["C"]) + v["D"],
}


def test_every_example_graph_has_an_expected_result() -> None:
    assert set(EXAMPLE_GRAPHS) == set(EXPECTED)


@pytest.mark.parametrize("name", EXAMPLE_GRAPHS)
@pytest.mark.parametrize("kind", ["cpu", "sim"])
def test_example_runs_exactly(name: str, kind: str, elemwise_lib: graphrt.Library) -> None:
    accelerator = graphrt.device(kind)
    devices = [graphrt.cpu(0)] + ([accelerator] if kind != "cpu" else [])
    mod = graphrt.create(example_graph(name, accelerator), elemwise_lib, *devices)
    values = random_inputs(mod)
    mod.run(**values)
    out = mod.get_output(0, out=np.empty(4, dtype="float32"))
    np.testing.assert_array_equal(out, EXPECTED[name](values))


def test_duplex_places_entries_on_both_devices(sim: graphrt.Device,
                                               elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("duplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    kinds = [dev.kind for dev in mod.plan.entry_device]
    assert kinds == ["sim", "sim", "sim", "cpu", "cpu", "cpu", "sim", "sim", "sim"]
    assert not mod.plan.fallbacks
    # sid 0 is shared by node 2 and node 6 on sim: one slot, 16 bytes.
    assert mod.plan.pool[0].entries == (2, 6)
    assert mod.plan.bytes_per_device() == {graphrt.cpu(0): 3 * 16, sim: 5 * 16}
    assert isinstance(mod.get_output(0), SimArray)
    assert type(mod.get_input("C")) is np.ndarray


def test_duplex_moves_exactly_the_copied_bytes(sim: graphrt.Device,
                                               elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("duplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    values = random_inputs(mod)
    mod.set_input(**values)
    counters = graphrt.sim_counters(sim)
    counters.reset()
    mod.run()
    # One __copy to the host and one back: 16 bytes each way, nothing else.
    assert (counters.downloads, counters.download_bytes) == (1, 16)
    assert (counters.uploads, counters.upload_bytes) == (1, 16)
    assert counters.device_copies == 0


def test_device_specific_kernels_see_only_their_device(sim: graphrt.Device) -> None:
    seen: list[str] = []

    def on_sim(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        assert all(isinstance(x, SimArray) and x.device == sim for x in (a, b, out))
        seen.append("sim")
        np.add(a, b, out=out)

    def on_cpu(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        assert all(type(x) is np.ndarray for x in (a, b, out))
        seen.append("cpu")
        np.subtract(a, b, out=out)

    lib = graphrt.Library()
    lib.register("elemwise_add", on_sim, device="sim")
    lib.register("elemwise_sub", on_cpu, device="cpu")
    mod = graphrt.create(example_graph("duplex", sim), lib, graphrt.cpu(0), sim)
    values = random_inputs(mod)
    mod.run(**values)
    assert seen == ["sim", "cpu", "sim"]
    np.testing.assert_array_equal(mod.get_output(0, out=np.empty(4, "float32")),
                                  EXPECTED["duplex"](values))


def test_sim_arrays_refuse_host_arrays_in_kernels(sim: graphrt.Device) -> None:
    host_constant = np.ones(4, dtype="float32")
    lib = {"elemwise_add": lambda a, b, out: np.add(a, host_constant, out=out),
           "elemwise_sub": lambda a, b, out: np.subtract(a, b, out=out)}
    mod = graphrt.create(example_graph("simplex", sim), lib, graphrt.cpu(0), sim)
    with pytest.raises(graphrt.ExecutionError, match="on sim:0 cannot be combined") as info:
        mod.run(**random_inputs(mod))
    assert isinstance(info.value.__cause__, TypeError)


def test_fallback_when_the_accelerator_is_not_given(elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("duplex"), elemwise_lib, graphrt.cpu(0))
    assert {dev.kind for dev in mod.plan.entry_device} == {"cpu"}
    assert [f.eid for f in mod.plan.fallbacks] == [0, 1, 2, 6, 7, 8]
    assert all(f.requested == 2 for f in mod.plan.fallbacks)
    assert "no cuda device (type 2) was given; fell back to cpu:0" in mod.plan.fallbacks[0].reason
    values = random_inputs(mod)
    mod.run(**values)
    np.testing.assert_array_equal(mod.get_output(0), EXPECTED["duplex"](values))


def test_strict_placement_refuses_fallback(elemwise_lib: graphrt.Library) -> None:
    with pytest.raises(graphrt.PlacementError,
                       match=r"strict placement: 6 entries would fall back to cpu:0: entry 0 "
                             r"\(output 0 of node 0 'A'\): no cuda device"):
        graphrt.create(example_graph("duplex"), elemwise_lib, graphrt.cpu(0),
                       strict_placement=True)


def test_devices_zero_is_the_fallback_whatever_its_kind(sim: graphrt.Device,
                                                        elemwise_lib: graphrt.Library) -> None:
    # Accelerator code 2 with only sim given: everything on code 2 falls back to sim.
    mod = graphrt.create(example_graph("duplex"), elemwise_lib, sim, graphrt.cpu(0))
    kinds = [dev.kind for dev in mod.plan.entry_device]
    assert kinds == ["sim", "sim", "sim", "cpu", "cpu", "cpu", "sim", "sim", "sim"]
    values = random_inputs(mod)
    mod.run(**values)
    np.testing.assert_array_equal(mod.get_output(0, out=np.empty(4, "float32")),
                                  EXPECTED["duplex"](values))


def test_devices_given_as_text(elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("simplex", graphrt.sim(0)), elemwise_lib, "cpu", "sim:0")
    assert mod.devices == (graphrt.cpu(0), graphrt.sim(0))


def test_default_device_is_cpu(elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("simplex"), elemwise_lib)
    assert mod.devices == (graphrt.cpu(0),)


def test_inputs_from_another_device_are_copied(sim: graphrt.Device,
                                               elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("simplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    backend = graphrt.devices.backend_for(sim)
    c_on_sim = backend.view(backend.allocate(16), (4,), np.dtype("float32"))
    c_on_sim[...] = np.arange(4, dtype="float32").view(SimArray)  # a sim → sim write
    graphrt.sim_counters(sim).reset()
    mod.set_input("C", c_on_sim)  # C lives on cpu: one download
    assert graphrt.sim_counters(sim).downloads == 1
    np.testing.assert_array_equal(mod.get_input("C"), np.arange(4, dtype="float32"))


def test_get_output_into_a_buffer_on_another_device(sim: graphrt.Device,
                                                    elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("simplex", sim), elemwise_lib, graphrt.cpu(0), sim)
    values = random_inputs(mod)
    mod.run(**values)
    backend = graphrt.devices.backend_for(sim)
    out = backend.view(backend.allocate(16), (4,), np.dtype("float32"))
    assert mod.get_output(0, out=out) is out
    np.testing.assert_array_equal(np.asarray(out), EXPECTED["simplex"](values))
