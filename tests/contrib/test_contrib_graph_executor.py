"""``graphrt.contrib.graph_executor``: TVM's graph-executor API.

The first tests are written as one writes them for TVM (its heterogeneous runtime tests run
the same duplex graph): only the import differs. Then what graphrt refuses where TVM was silent,
and the migration guide's code blocks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import graphrt
import graphrt.contrib
from graphrt.contrib import graph_executor  # TVM: from tvm.contrib import graph_executor
from graphrt.devices import SimArray
from tests.conftest import example_graph
from tests.executor.test_heterogeneous import EXPECTED

ROOT = Path(__file__).resolve().parents[2]
MIGRATION = ROOT / "docs" / "migration-from-tvm.md"
DOC_BLOCKS = re.findall(r"^```python\n(.*?)^```", MIGRATION.read_text(), re.S | re.M)
SHAPE = (4,)


def duplex_target(kind: str) -> tuple[str, Any]:
    """The duplex graph JSON (text, as TVM takes it) and the ``device`` argument for ``kind``:
    one cpu, or ``[cpu, sim]`` with the graph's accelerator entries pointed at sim (as TVM's
    own heterogeneous test points them at its accelerator)."""
    if kind == "cpu":
        return orjson.dumps(example_graph("duplex")).decode(), graph_executor.cpu(0)
    accelerator = graphrt.sim(0)
    graph = orjson.dumps(example_graph("duplex", accelerator)).decode()
    return graph, [graph_executor.cpu(0), accelerator]


@pytest.fixture(params=["cpu", "cpu+sim"])
def target(request: pytest.FixtureRequest) -> tuple[str, Any]:
    graphrt.sim_counters(graphrt.sim(0)).reset()
    return duplex_target(request.param)


def accelerator_of(dev: Any) -> graphrt.Device:
    """Where the graph's additions run: the last device given."""
    last: graphrt.Device = dev[-1] if isinstance(dev, list) else dev
    return last


def values(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(size=SHAPE).astype("float32") for name in "ABCD"}


# -- a TVM script, only the import changed -----------------------------------------------------


def test_duplex_runs_as_it_did_in_tvm(target: tuple[str, Any],
                                      elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    mod = graph_executor.create(graph, elemwise_lib, dev)
    params = values()
    tensor_a, tensor_b, tensor_c, tensor_d = (params[k] for k in "ABCD")
    mod.set_input(**params)
    mod.run()
    out = mod.get_output(0, graph_executor.empty(SHAPE))
    np.testing.assert_equal(out.numpy(), (tensor_a + tensor_b) - tensor_c + tensor_d)

    # inputs given as device arrays, one of them by key/value keywords
    dev_tensor = accelerator_of(dev)
    mod.set_input("A", graph_executor.array(tensor_b, dev_tensor))
    mod.set_input(key="B", value=graph_executor.array(tensor_a, dev_tensor))
    mod.run(C=graph_executor.array(tensor_d), D=tensor_c)
    out = mod.get_output(0)
    assert out.device == dev_tensor
    np.testing.assert_equal(out.asnumpy(), (tensor_b + tensor_a) - tensor_d + tensor_c)
    np.testing.assert_equal(out.numpy(), EXPECTED["duplex"]({"A": tensor_b, "B": tensor_a,
                                                             "C": tensor_d, "D": tensor_c}))


def test_module_functions_by_name(target: tuple[str, Any],
                                  elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    mod = graph_executor.create(graph, elemwise_lib, dev)
    v = values(1)
    mod["load_params"](graphrt.save_params({"C": v["C"], "D": v["D"]}))
    mod["set_input"]("A", v["A"])
    mod["set_input"]("B", v["B"])
    mod["run"]()
    np.testing.assert_equal(mod["get_output"](0).numpy(), EXPECTED["duplex"](v))
    assert mod["get_num_outputs"]() == 1
    assert mod["get_num_inputs"]() == 4
    assert mod["get_input_index"]("C") == 2
    assert mod["get_input_index"]("nope") == -1
    np.testing.assert_equal(mod["get_input"]("C").numpy(), v["C"])
    info = mod["get_input_info"]()  # TVM's map, not the method's pair
    assert info["shape"]["A"] == SHAPE and info["dtype"]["D"] == "float32"
    mod.set_input("A", np.zeros(4, "float32"), A=v["A"])  # as TVM: params after the key
    np.testing.assert_equal(mod.get_input("A").numpy(), v["A"])
    outputs = mod["run_from_inputs"](1, 0, "A", v["B"], "B", v["A"])
    assert [o.device for o in outputs] == [graphrt.cpu(0)]
    np.testing.assert_equal(outputs[0].numpy(), EXPECTED["duplex"](v))


def test_params_blob_loads_once(target: tuple[str, Any], elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    mod = graph_executor.create(graph, elemwise_lib, dev)
    v = values(2)
    params_bytes = graphrt.save_params({"C": v["C"], "D": v["D"]})
    mod.load_params(bytearray(params_bytes))
    mod.run(A=v["A"], B=v["B"])
    np.testing.assert_equal(mod.get_output(0).numpy(), EXPECTED["duplex"](v))
    mod.load_params({"D": graph_executor.array(np.zeros(4, "float32"))})  # a dict works too
    mod.run()
    np.testing.assert_equal(mod.get_output(0).numpy(), v["A"] + v["B"] - v["C"])


def test_input_info_is_a_pair_of_dicts(target: tuple[str, Any],
                                       elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    mod = graph_executor.create(graph, elemwise_lib, dev)
    shape_dict, dtype_dict = mod.get_input_info()
    assert type(shape_dict) is dict and type(dtype_dict) is dict
    assert shape_dict == {name: SHAPE for name in "ABCD"}
    assert dtype_dict == dict.fromkeys("ABCD", "float32")
    assert mod.get_output_info() == ({"elemwise_add1": SHAPE}, {"elemwise_add1": "float32"})
    assert mod.get_num_inputs() == 4 and mod.get_num_outputs() == 1
    assert mod.get_input_index("D") == 3 and mod.get_output_index("elemwise_add1") == 0


def test_ndarray_numpy_and_copyto(sim: graphrt.Device, elemwise_lib: graphrt.Library) -> None:
    graph, dev = duplex_target("cpu+sim")
    mod = graph_executor.create(graph, elemwise_lib, dev)
    v = values(3)
    mod.run(**v)
    y = mod.get_output(0)
    assert isinstance(y, graph_executor.NDArray) and isinstance(y.array, SimArray)
    assert (y.shape, y.dtype, y.ndim, y.device) == (SHAPE, "float32", 1, sim)
    counters = graphrt.sim_counters(sim)
    counters.reset()
    expected = EXPECTED["duplex"](v)
    np.testing.assert_equal(y.numpy(), expected)
    assert counters.downloads == 1  # numpy() is one copy to the host

    host = y.copyto(graph_executor.cpu(0))
    assert host.device == graphrt.cpu(0) and isinstance(host.array, np.ndarray)
    assert not isinstance(host.array, SimArray)
    np.testing.assert_equal(host.array, expected)
    on_sim = host.copyto("sim:0")
    assert on_sim.device == sim and not np.shares_memory(on_sim.array, y.array)
    buffer = graph_executor.empty(SHAPE, "float32", sim)
    assert y.copyto(buffer) is buffer
    np.testing.assert_equal(buffer.numpy(), expected)
    np.testing.assert_equal(np.asarray(buffer), expected)

    buffer[:] = np.zeros(4, "float32")
    np.testing.assert_equal(buffer.numpy(), 0)
    assert buffer.copyfrom(host) is buffer
    np.testing.assert_equal(buffer.numpy(), expected)
    np.testing.assert_equal(np.asarray(host), expected)
    assert np.shares_memory(np.asarray(host), host.array)  # host arrays are read in place
    assert "shape=(4,), sim:0" in repr(y)

    # get_output into an NDArray on another device, and into a numpy array
    out = graph_executor.empty(SHAPE, "float32")
    assert mod.get_output(0, out) is out
    np.testing.assert_equal(out.numpy(), expected)
    native = np.empty(4, "float32")
    assert mod.get_output(0, native) is native
    np.testing.assert_equal(native, expected)
    np.testing.assert_equal(mod.debug_get_output("elemwise_sub").numpy(),
                            v["A"] + v["B"] - v["C"])
    kept = graph_executor.empty(SHAPE)
    assert mod.debug_get_output(5, kept) is kept


def test_share_params_reads_the_other_modules_weights(target: tuple[str, Any],
                                                      elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    v = values(4)
    params_bytes = graphrt.save_params({"C": v["C"], "D": v["D"]})
    first = graph_executor.create(graph, elemwise_lib, dev)
    first.load_params(params_bytes)
    second = graph_executor.create(graph, elemwise_lib, dev)
    second.share_params(first, params_bytes)
    for name in "CD":
        assert np.shares_memory(second.get_input(name).array, first.get_input(name).array)
    second.run(A=v["A"], B=v["B"])
    np.testing.assert_equal(second.get_output(0).numpy(), EXPECTED["duplex"](v))

    third = graph_executor.create(graph, elemwise_lib, dev)
    third["share_params"](first.module, params_bytes)  # TVM's raw function took the module
    assert np.shares_memory(third.get_input("D").array, first.get_input("D").array)
    fresh = graph_executor.create(graph, elemwise_lib, dev)
    with pytest.raises(graphrt.InputError, match="the other module has no param 'C' loaded"):
        second.share_params(fresh, params_bytes)
    with pytest.raises(graphrt.InputError, match="needs a GraphModule"):
        second.share_params("first", params_bytes)  # type: ignore[arg-type]


def test_benchmark_times_run(target: tuple[str, Any], elemwise_lib: graphrt.Library) -> None:
    graph, dev = target
    mod = graph_executor.create(graph, elemwise_lib, dev)
    v = values(5)
    timer_dev = accelerator_of(dev)
    result = mod.benchmark(timer_dev, repeat=3, number=2, **v)
    assert len(result.results) == 3 and result.mean > 0 and result.min <= result.median
    np.testing.assert_equal(mod.get_output(0).numpy(), EXPECTED["duplex"](v))
    result = mod.benchmark(timer_dev, func_name="run", repeat=2, number=1, min_repeat_ms=1,
                           end_to_end=True, A=v["B"], B=v["A"])
    assert len(result.results) == 2
    with pytest.raises(graphrt.InputError, match="benchmark times 'run' only"):
        mod.benchmark(timer_dev, func_name="get_output")
    with pytest.raises(graphrt.InputError, match="not one this module runs on"):
        mod.benchmark(graphrt.sim(7))
    with pytest.raises(graphrt.InputError, match="repeat"):
        mod.benchmark(timer_dev, repeat=0)


def test_wrapping_a_graphrt_module(elemwise_lib: graphrt.Library) -> None:
    native = graphrt.create(example_graph("duplex"), elemwise_lib, graphrt.cpu(0))
    mod = graph_executor.GraphModule(native)
    assert mod.module is native
    assert graph_executor.GraphModule(mod).module is native
    v = values(6)
    mod.run(**v)
    np.testing.assert_equal(mod.get_output(0).numpy(), native.get_output(0))
    assert "graph_executor.GraphModule over <GraphModule 9 nodes" in repr(mod)


def test_zero_copy_functions_by_name(elemwise_lib: graphrt.Library) -> None:
    graph, dev = duplex_target("cpu")
    mod = graph_executor.create(graph, elemwise_lib, dev)
    v = values(7)
    a = graph_executor.array(v["A"])
    mod["set_input_zero_copy"]("A", a)
    y = np.empty(4, "float32")
    mod["set_output_zero_copy"](0, y)
    mod.run(B=v["B"], C=v["C"], D=v["D"])
    np.testing.assert_equal(y, EXPECTED["duplex"](v))
    assert np.shares_memory(mod.get_input("A").array, a.array)


@pytest.mark.cuda
def test_duplex_on_cpu_and_cuda_as_in_tvm(elemwise_lib: graphrt.Library) -> None:
    import cupy

    graph = orjson.dumps(example_graph("duplex")).decode()  # compiled for cuda: type 2
    dev = [graph_executor.cpu(0), graph_executor.cuda(0)]
    mod = graph_executor.create(graph, elemwise_lib, dev)
    params = values(8)
    mod.set_input(**params)
    mod.run()
    y = mod.get_output(0)
    assert y.device == graphrt.cuda(0) and isinstance(y.array, cupy.ndarray)
    np.testing.assert_equal(y.numpy(), EXPECTED["duplex"](params))
    on_gpu = graph_executor.array(params["A"], dev[1])
    assert isinstance(on_gpu.array, cupy.ndarray)
    mod.run(A=on_gpu)
    out = mod.get_output(0, graph_executor.empty(SHAPE, "float32", dev[1]))
    np.testing.assert_equal(out.copyto(dev[0]).numpy(), EXPECTED["duplex"](params))
    assert mod.benchmark(dev[1], repeat=2, number=2).mean > 0


# -- what graphrt refuses ----------------------------------------------------------------------


def test_unknown_functions_names_and_values_are_input_errors(
        elemwise_lib: graphrt.Library) -> None:
    graph, dev = duplex_target("cpu")
    mod = graph_executor.create(graph, elemwise_lib, dev)
    with pytest.raises(graphrt.InputError, match=r"no function 'time_evaluator'; its functions "
                                                 r"are: debug_get_output, get_input, "):
        mod["time_evaluator"]
    with pytest.raises(graphrt.InputError, match="no function 0"):
        mod[0]  # type: ignore[index]
    with pytest.raises(graphrt.InputError, match=r"unknown input 'a'; the graph's inputs are: "
                                                 r"'A', 'B', 'C', 'D'"):
        mod.set_input("a", np.zeros(4, "float32"))  # TVM ignored it
    with pytest.raises(graphrt.InputError, match="unknown input"):
        mod["set_input"]("a", np.zeros(4, "float32"))
    with pytest.raises(graphrt.InputError, match="unknown input"):
        mod.run(a=np.zeros(4, "float32"))
    with pytest.raises(graphrt.InputError, match=r"expected shape \(4,\) float32"):
        mod.set_input("A", np.zeros((2, 2), "float32"))  # TVM reinterpreted it
    with pytest.raises(graphrt.InputError, match="float32"):
        mod.set_input("A", np.zeros(4, "float64"))  # TVM cast it
    with pytest.raises(graphrt.InputError, match="a value but no key"):
        mod.set_input(value=np.zeros(4, "float32"))
    with pytest.raises(graphrt.InputError, match="unknown input"):
        mod.get_input("nope")  # TVM returned None
    with pytest.raises(graphrt.InputError, match="out of range"):
        mod.get_output(1)
    with pytest.raises(graphrt.InputError, match="out buffer"):
        mod.get_output(0, graph_executor.empty((3,)))
    with pytest.raises(graphrt.InputError, match="input name"):
        mod.get_input_index(0)  # type: ignore[arg-type]
    with pytest.raises(graphrt.InputError, match="not inputs of the graph"):
        mod.load_params(graphrt.save_params({"E": np.zeros(4, "float32")}))
    with pytest.raises(graphrt.InputError, match="params must be"):
        mod.load_params("params.bin")  # type: ignore[arg-type]
    with pytest.raises(graphrt.GraphFormatError, match="not a params blob"):
        mod.load_params(b"\0" * 16)
    with pytest.raises(graphrt.InputError, match="a params blob is bytes"):
        mod.share_params(mod, "params.bin")  # type: ignore[arg-type]
    with pytest.raises(graphrt.InputError, match="key, value pairs"):
        mod["run_from_inputs"](1, 0, "A")
    with pytest.raises(graphrt.InputError, match="int device type and id"):
        mod["run_from_inputs"]("cpu", 0)
    with pytest.raises(graphrt.DeviceError, match="no backend for device type 4"):
        mod["run_from_inputs"](4, 0)
    # the module is still usable
    mod.run(**values())
    np.testing.assert_equal(mod.get_output(0).numpy(), EXPECTED["duplex"](values()))


def test_create_refuses_tvm_libraries_and_unknown_devices(
        elemwise_lib: graphrt.Library) -> None:
    graph, _ = duplex_target("cpu")
    with pytest.raises(graphrt.InputError, match="native code for TVM's runtime ABI"):
        graph_executor.create(graph, "deploy_lib.so", graph_executor.cpu(0))  # type: ignore[arg-type]
    with pytest.raises(graphrt.InputError, match="given object"):
        graph_executor.create(graph, object(), graph_executor.cpu(0))  # type: ignore[arg-type]
    with pytest.raises(graphrt.KernelNotFoundError, match="elemwise_add"):
        graph_executor.create(graph, {}, graph_executor.cpu(0))
    with pytest.raises(graphrt.DeviceError, match="list of devices"):
        graph_executor.create(graph, elemwise_lib, 1)  # type: ignore[arg-type]
    with pytest.raises(graphrt.DeviceError, match="empty list"):
        graph_executor.create(graph, elemwise_lib, [])
    with pytest.raises(graphrt.DeviceError, match="unknown device kind 'tpu'"):
        graph_executor.create(graph, elemwise_lib, ["cpu", "tpu:0"])
    with pytest.raises(graphrt.DeviceError, match="given int"):
        graph_executor.create(graph, elemwise_lib, [graph_executor.cpu(0), 2])  # type: ignore[list-item]
    with pytest.raises(graphrt.GraphFormatError):
        graph_executor.create("{}", elemwise_lib, graph_executor.cpu(0))
    with pytest.raises(graphrt.InputError, match=r"wraps a graphrt\.GraphModule"):
        graph_executor.GraphModule(object())  # type: ignore[arg-type]
    with pytest.raises(graphrt.PlacementError, match="strict placement"):
        graph_executor.create(graph, elemwise_lib, "cpu", strict_placement=True)


def test_arrays_refuse_what_does_not_fit() -> None:
    a = graph_executor.array(np.zeros(4, "float32"), "sim")
    with pytest.raises(graphrt.InputError, match=r"expected shape \(4,\) float32, given "
                                                 r"\(3,\) float32"):
        a.copyfrom(np.zeros(3, "float32"))
    with pytest.raises(graphrt.InputError, match=r"given .* int64"):
        a.copyfrom(np.zeros(4, "int64"))  # never cast
    with pytest.raises(graphrt.InputError, match="copyto target"):
        a.copyto(graph_executor.empty((5,), "float32"))
    with pytest.raises(graphrt.InputError, match="NDArray or a device"):
        a.copyto(3)  # type: ignore[arg-type]
    with pytest.raises(graphrt.DeviceError):
        a.copyto("tpu")
    with pytest.raises(graphrt.InputError, match="only arr"):
        a[0] = 1.0
    with pytest.raises(graphrt.InputError, match="non-negative ints"):
        graph_executor.empty((-1,))
    with pytest.raises(graphrt.InputError, match="unsupported dtype"):
        graph_executor.empty((2,), "complex64")
    with pytest.raises(graphrt.InputError, match="unsupported dtype"):
        graph_executor.empty((2,), np.complex64)
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(a, copy=False)
    assert graph_executor.empty(3, "bfloat16").dtype == "bfloat16"
    assert graph_executor.array(np.zeros(2, bool)).dtype == "bool"
    strided = np.arange(8, dtype="float32")[::2]
    np.testing.assert_equal(a.copyfrom(strided).numpy(), strided)


# -- documentation -----------------------------------------------------------------------------


def test_the_migration_guide_has_runnable_blocks() -> None:
    assert len(DOC_BLOCKS) >= 4
    assert all("from graphrt" in block or "import graphrt" in block for block in DOC_BLOCKS)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_migration_guide_blocks_run_as_written(index: int, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.chdir(ROOT)
    code = compile(DOC_BLOCKS[index], f"{MIGRATION.name}, python block {index + 1}", "exec")
    exec(code, {"__name__": "__main__"})
