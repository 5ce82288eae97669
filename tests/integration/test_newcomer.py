"""What trips a newcomer: names several outputs share, pointing a graph at another device,
inputs never set, and how long ``import graphrt`` takes."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from tests.conftest import elemwise_lib, example_graph, random_inputs  # noqa: F401
from tests.executor.test_heterogeneous import EXPECTED


def double(a: np.ndarray, out: np.ndarray) -> None:
    np.multiply(a, 2, out=out)


def alike_outputs() -> dict[str, Any]:
    """Two outputs from nodes called ``reshape_nop``, and one entry listed twice in heads."""
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("reshape_nop", "double", [x], shape=[4])
    b = g.op("reshape_nop", "double", [a], shape=[4])
    c = g.op("tail", "double", [b], shape=[4])
    return g.build(heads=[a, b, c, c])


def test_outputs_that_would_share_a_name_get_unique_ones_and_none_is_lost() -> None:
    mod = graphrt.create(alike_outputs(), {"double": double})
    names = mod.graph.output_names
    assert names == ("reshape_nop#0", "reshape_nop#1", "tail#2", "tail#3")
    info = mod.get_output_info()
    assert list(info["shape"]) == list(names)  # every output, none lost
    mod.run(x=np.ones(4, "float32"))
    np.testing.assert_array_equal(mod.get_output("reshape_nop#1"), np.full(4, 4, "float32"))
    assert mod.get_output_index("tail#3") == 3
    for call in (lambda: mod.get_output("reshape_nop"), lambda: mod.get_output_index("tail")):
        with pytest.raises(graphrt.InputError, match=r"output name '(reshape_nop|tail)' is "
                           r"ambiguous.*'(reshape_nop|tail)#\d', '(reshape_nop|tail)#\d'"):
            call()


def test_device_map_runs_a_cuda_graph_on_sim_and_reports_it(
        elemwise_lib: graphrt.Library) -> None:  # noqa: F811 (the fixture)
    graph = example_graph("duplex", graphrt.Device(2, 0))  # device_index says cuda
    mod = graphrt.create(graph, elemwise_lib, "cpu", device_map={"cuda": "sim:0"})
    assert mod.devices == (graphrt.cpu(0), graphrt.sim(0))
    assert {str(dev) for dev in mod.plan.entry_device} == {"cpu:0", "sim:0"}
    report = mod.placement()
    (remap,) = report.remapped
    assert (remap.requested_type, remap.device, remap.entries) == (2, "sim:0", 6)
    assert "device type 2 (cuda) -> sim:0: 6 entries" in report.table()
    assert not mod.plan.fallbacks
    values = random_inputs(mod)
    mod.run(**values)
    np.testing.assert_array_equal(mod.get_output(0, out=np.empty(4, "float32")),
                                  EXPECTED["duplex"](values))


@pytest.mark.parametrize(("mapping", "error", "message"), [
    ({"tpu": "cpu"}, graphrt.DeviceError, "device_map key 'tpu' is not a device kind"),
    ({"cuda": "qpu:0"}, graphrt.DeviceError, "unknown device kind 'qpu'"),
    ("cuda=sim", graphrt.DeviceError, "device_map must be a mapping"),
])
def test_a_bad_device_map_is_a_clear_error(elemwise_lib: graphrt.Library,  # noqa: F811
                                           mapping: Any, error: type[Exception],
                                           message: str) -> None:
    with pytest.raises(error, match=message):
        graphrt.create(example_graph("duplex"), elemwise_lib, "cpu", device_map=mapping)


def test_inputs_never_set_warn_once_or_refuse(caplog: pytest.LogCaptureFixture) -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    w = g.input("w", [4])
    y = g.op("mul", "mul", [x, w], shape=[4])
    graph = g.build(heads=[y])
    lib = {"mul": lambda a, b, out: np.multiply(a, b, out=out)}
    mod = graphrt.create(graph, lib)
    with caplog.at_level(logging.WARNING, logger="graphrt"):
        mod.run(x=np.ones(4, "float32"))
        mod.run()
    warnings = [r.getMessage() for r in caplog.records if "never set" in r.getMessage()]
    assert warnings == [warnings[0]] and "'w'" in warnings[0] and "'x'" not in warnings[0]
    strict = graphrt.create(graph, lib, require_inputs=True)
    with pytest.raises(graphrt.InputError, match=r"inputs never set: 'x', 'w'"):
        strict.run()
    strict.load_params({"w": np.full(4, 3, "float32")})
    with pytest.raises(graphrt.InputError, match=r"inputs never set: 'x'; set them"):
        strict.run()
    (out,) = strict(x=np.ones(4, "float32"))
    np.testing.assert_array_equal(out, np.full(4, 3, "float32"))


def test_import_graphrt_loads_no_pydantic_lib_executor_or_bundle_code() -> None:
    heavy = ("pydantic", "orjson", "graphrt.bundle", "graphrt.lib", "graphrt.executor",
             "graphrt.schema", "graphrt.cli")
    code = ("import sys, graphrt; print(sorted(m for m in sys.modules if m.startswith("
            f"{heavy!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert callable(graphrt.create) and "create" in dir(graphrt)  # there on first use
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        graphrt.nothing  # noqa: B018


@pytest.mark.parametrize("reader", ["graph", "lib", "manifest"])
def test_graphs_libs_and_manifests_read_json_the_same_way(reader: str, tmp_path: Any) -> None:
    from graphrt.bundle.manifest import parse_manifest
    from graphrt.lib.declarative import parse_library_spec

    read = {"graph": graphrt.load_graph, "lib": parse_library_spec,
            "manifest": parse_manifest}[reader]
    error = graphrt.BundleError if reader == "manifest" else graphrt.GraphFormatError
    with pytest.raises(error, match="is not valid JSON"):
        read(b"{not json")
    with pytest.raises(error, match="is not valid JSON"):
        read("  {not json")  # text, not a path: it starts with '{'
    with pytest.raises(error, match=r"malformed .*: .*\(given '5'\)"):
        read(b'{"format": "graphrt.bundle", "format_version": "1.0", "nodes": 5, '
             b'"functions": 5, "members": 5}')
    if reader != "manifest":
        with pytest.raises(error, match=rf"cannot read {reader} file .*no-such"):
            read(str(tmp_path / "no-such.json"))


def test_index_lookups_refuse_names_that_are_not_str() -> None:
    mod = graphrt.create(alike_outputs(), {"double": double})
    for lookup in (mod.get_input_index, mod.get_output_index):
        for bad in ([1], 3, None):
            with pytest.raises(graphrt.InputError, match="name is a str, given"):
                lookup(bad)  # type: ignore[arg-type]
    assert mod.get_input_index("x") == 0 and mod.get_input_index("nope") == -1


def test_output_aliases_group_every_shared_name() -> None:
    graph = graphrt.load_graph(alike_outputs())
    assert dict(graph.output_aliases) == {"reshape_nop": ("reshape_nop#0", "reshape_nop#1"),
                                          "tail": ("tail#2", "tail#3")}
