"""Hardening of the public API (issue 13): argument types, outputs no run wrote, memory limits
and failed allocations, and dynamic dimensions written as expressions.

Every case asserts graphrt's own error class and that the message names what was wrong, and,
where a module is involved, that the module still runs afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.bundle import bundle_from_parts, prepare_bundle
from graphrt.bundle.interface import check_params_fit
from graphrt.contrib import graph_executor
from graphrt.devices import host_memory
from graphrt.devices.base import Backend
from graphrt.devices.cpu_backend import CpuBackend
from graphrt.devices.sim_backend import SimBackend
from graphrt.schema import parse_dim

ROOT = Path(__file__).resolve().parents[2]


def add(a: Any, b: Any, out: Any) -> None:
    np.add(a, b, out=out)


def relu(x: Any, out: Any) -> None:
    np.maximum(x, 0, out=out)


def add_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x, y = g.input("x", [4]), g.input("y", [4])
    return g.build([g.op("add", "add", [x, y], shape=[4])])


X = np.arange(4, dtype="float32")


@pytest.fixture
def mod() -> graphrt.GraphModule:
    return graphrt.create(add_graph(), {"add": add})


def still_works(mod: graphrt.GraphModule) -> None:
    mod.run(x=X, y=X)
    np.testing.assert_array_equal(mod.get_output(0), 2 * X)


# -- 1. argument types -----------------------------------------------------------------------

Call = Callable[[graphrt.GraphModule], object]

# (call, error class, message fragment). ArgumentError is also an InputError and a TypeError.
MODULE_CASES: list[tuple[str, Call, type[Exception], str]] = [
    ("set_input None key", lambda m: m.set_input(None, X), graphrt.ArgumentError,
     r"set_input\(key, value\): expected the input's name .* given None"),
    ("set_input float key", lambda m: m.set_input(1.5, X), graphrt.ArgumentError,
     r"input key must be a name \(str\) or a position \(int\), given 1.5"),
    ("set_input bytes key", lambda m: m.set_input(b"x", X), graphrt.ArgumentError,
     r"given b'x'"),
    ("set_input bool key", lambda m: m.set_input(True, X), graphrt.ArgumentError,
     r"given True"),
    ("set_input None value", lambda m: m.set_input("x", None), graphrt.ArgumentError,
     r"input 'x' \(node 0\): value: expected an array of numbers .* given None"),
    ("set_input text value", lambda m: m.set_input("x", "abcd"), graphrt.ArgumentError,
     r"input 'x' .* given 'abcd'"),
    ("set_input object value", lambda m: m.set_input("x", object()), graphrt.ArgumentError,
     r"input 'x' .* given object"),
    ("run None value", lambda m: m.run(x=None), graphrt.ArgumentError, r"input 'x'"),
    ("get_input None key", lambda m: m.get_input(None), graphrt.ArgumentError,
     r"input key must be a name"),
    ("get_input int out", lambda m: m.get_input("x", out=5), graphrt.ArgumentError,
     r"out buffer for input 'x': expected an array .* given 5"),
    ("get_output str index", lambda m: m.get_output("0"), graphrt.InputError,
     r"unknown output '0'"),
    ("get_output float index", lambda m: m.get_output(1.5), graphrt.ArgumentError,
     r"output key must be a name .* given 1.5"),
    ("get_output bool index", lambda m: m.get_output(True), graphrt.ArgumentError,
     r"output key .* given True"),
    ("get_output int out", lambda m: m.get_output(0, out=5), graphrt.ArgumentError,
     r"out buffer for output 0 \('add'\): expected an array"),
    ("get_output list out", lambda m: m.get_output(0, out=[0.0] * 4), graphrt.ArgumentError,
     r"out buffer for output 0 .* given \[0.0, 0.0, 0.0, 0.0\]"),
    ("get_input_index None", lambda m: m.get_input_index(None), graphrt.ArgumentError,
     r"an input name is a str, given NoneType None"),
    ("get_output_index int", lambda m: m.get_output_index(5), graphrt.ArgumentError,
     r"an output name is a str, given int 5"),
    ("load_params None", lambda m: m.load_params(None), graphrt.ArgumentError,
     r"params must be a TVM params blob \(bytes\) or a mapping"),
    ("load_params int key", lambda m: m.load_params({5: X}), graphrt.ArgumentError,
     r"load_params\(params\): expected a mapping whose keys are param names .* given 5"),
    ("share_params None", lambda m: m.share_params(None, b""), graphrt.ArgumentError,
     r"share_params needs a GraphModule to share from, given NoneType"),
    ("benchmark str repeat", lambda m: m.benchmark(repeat="3"), graphrt.ArgumentError,
     r"repeat: expected an int >= 1, given '3'"),
    ("benchmark bool repeat", lambda m: m.benchmark(repeat=True), graphrt.ArgumentError,
     r"repeat: expected an int >= 1, given True"),
    ("benchmark float number", lambda m: m.benchmark(number=1.5), graphrt.ArgumentError,
     r"number: expected an int >= 1, given 1.5"),
    ("benchmark zero number", lambda m: m.benchmark(number=0), graphrt.InputError,
     r"repeat and number must be >= 1"),
    ("benchmark str min_repeat_ms", lambda m: m.benchmark(min_repeat_ms="5"),
     graphrt.ArgumentError, r"min_repeat_ms: expected None or a number"),
    ("benchmark nan min_repeat_ms", lambda m: m.benchmark(min_repeat_ms=float("nan")),
     graphrt.InputError, r"min_repeat_ms must be a finite number >= 0, given nan"),
    ("benchmark negative min_repeat_ms", lambda m: m.benchmark(min_repeat_ms=-1),
     graphrt.InputError, r"min_repeat_ms must be a finite number >= 0, given -1"),
    ("profile str repeat", lambda m: m.profile(repeat="3"), graphrt.ArgumentError,
     r"repeat: expected an int >= 1, given '3'"),
    ("profile None warmup", lambda m: m.profile(warmup=None), graphrt.ArgumentError,
     r"warmup: expected an int >= 0, given None"),
    ("profile zero repeat", lambda m: m.profile(repeat=0), graphrt.InputError,
     r"repeat must be an int >= 1, given 0"),
    ("set_input_zero_copy None key", lambda m: m.set_input_zero_copy(None, X),
     graphrt.ArgumentError, r"input key must be a name"),
    ("set_input_zero_copy list", lambda m: m.set_input_zero_copy("x", [0.0] * 4),
     graphrt.ArgumentError, r"zero-copy input 'x': expected an array"),
    ("set_output_zero_copy int", lambda m: m.set_output_zero_copy(0, 5),
     graphrt.ArgumentError, r"zero-copy output 0 \('add'\): expected an array .* given 5"),
    ("invoke_with_outputs None inputs", lambda m: m.invoke_with_outputs(None, [None]),
     graphrt.ArgumentError, r"inputs must be a mapping of names or indexes"),
    ("invoke_with_outputs str outputs", lambda m: m.invoke_with_outputs({}, "a"),
     graphrt.ArgumentError, r"outputs must be a sequence of 1 arrays .* given str"),
    ("invoke_with_outputs None outputs", lambda m: m.invoke_with_outputs({}, None),
     graphrt.ArgumentError, r"given NoneType"),
    ("invoke_with_outputs too many", lambda m: m.invoke_with_outputs({}, [None, None]),
     graphrt.InputError, r"outputs must be a sequence of 1 arrays .* given 2"),
    ("debug_get_output float node", lambda m: m.debug_get_output(1.5), graphrt.ArgumentError,
     r"node key must be a name"),
    ("debug_get_output str index", lambda m: m.debug_get_output(2, index="0"),
     graphrt.ArgumentError, r"debug_get_output\(index=...\): expected an int >= 0, given '0'"),
    ("dump_outputs None", lambda m: m.dump_outputs(None), graphrt.ArgumentError,
     r"dump_outputs\(path\): expected a path"),
]


@pytest.mark.parametrize(("call", "error", "match"), [case[1:] for case in MODULE_CASES],
                         ids=[case[0] for case in MODULE_CASES])
def test_module_methods_check_their_arguments(mod: graphrt.GraphModule, call: Call,
                                              error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(mod)
    still_works(mod)


def test_argument_errors_are_input_and_type_errors(mod: graphrt.GraphModule) -> None:
    with pytest.raises(graphrt.InputError):
        mod.set_input(None, X)
    with pytest.raises(TypeError):
        mod.benchmark(repeat="3")


def test_set_input_with_neither_key_nor_value_is_a_no_op(mod: graphrt.GraphModule) -> None:
    mod.set_input()
    still_works(mod)


LIB_CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("create lib None", lambda: graphrt.create(add_graph(), None), graphrt.ArgumentError,
     r"lib: expected a graphrt.Library or a mapping of names to kernels, given None"),
    ("create lib list", lambda: graphrt.create(add_graph(), [add]), graphrt.ArgumentError,
     r"lib: expected .* given \[<function add"),
    ("create kernel int", lambda: graphrt.create(add_graph(), {"add": 5}),
     graphrt.ArgumentError, r"kernel 'add': expected a callable, given 5"),
    ("create kernel name int", lambda: graphrt.create(add_graph(), {5: add}),
     graphrt.ArgumentError, r"a kernel name: expected a non-empty str, given 5"),
    ("create strict_placement str",
     lambda: graphrt.create(add_graph(), {"add": add}, strict_placement="yes"),
     graphrt.ArgumentError, r"create\(strict_placement=...\): expected True or False"),
    ("create require_inputs int",
     lambda: graphrt.create(add_graph(), {"add": add}, require_inputs=1),
     graphrt.ArgumentError, r"create\(require_inputs=...\): expected True or False, given 1"),
    ("create device int", lambda: graphrt.create(add_graph(), {"add": add}, 5),
     graphrt.ArgumentError, r"device: expected a Device or text like 'cuda:0', given 5"),
    ("create device_map int", lambda: graphrt.create(add_graph(), {"add": add}, device_map=5),
     graphrt.ArgumentError, r"device_map: expected a mapping of device kinds"),
    ("Library int", lambda: graphrt.Library(5), graphrt.ArgumentError,
     r"Library\(kernels\): expected a mapping of func_name to kernel, given 5"),
    ("register int name", lambda: graphrt.Library().register(5, add), graphrt.ArgumentError,
     r"a kernel name: expected a non-empty str, given 5"),
    ("register int kernel", lambda: graphrt.Library().register("a", 5), graphrt.ArgumentError,
     r"kernel 'a': expected a callable, given 5"),
    ("register float device", lambda: graphrt.Library().register("a", add, device=1.5),
     graphrt.ArgumentError, r"register\(device=...\): expected a kind .* given 1.5"),
    ("define int name", lambda: graphrt.Library().define(5, {}), graphrt.ArgumentError,
     r"a function name: expected a non-empty str, given 5"),
    ("merged int", lambda: graphrt.Library().merged(5), graphrt.ArgumentError,
     r"lib: expected a graphrt.Library or a mapping"),
    ("shape func int name",
     lambda: graphrt.Library().register_shape_func(5, add, []), graphrt.ArgumentError,
     r"a kernel name: expected a non-empty str, given 5"),
    ("shape func int fn",
     lambda: graphrt.Library().register_shape_func("a", 5, []), graphrt.ArgumentError,
     r"the shape function of 'a': expected a callable, given 5"),
    ("shape func int flags",
     lambda: graphrt.Library().register_shape_func("a", add, 5), graphrt.ArgumentError,
     r"data_dependent of 'a': expected a sequence of bools, one per input, given 5"),
    ("shape func str flags",
     lambda: graphrt.Library().register_shape_func("a", add, "tf"), graphrt.ArgumentError,
     r"data_dependent of 'a'"),
    ("reserved name", lambda: graphrt.Library().register("__copy", add), ValueError,
     r"a kernel name must be a non-empty str other than the built-ins"),
]


@pytest.mark.parametrize(("call", "error", "match"), [case[1:] for case in LIB_CASES],
                         ids=[case[0] for case in LIB_CASES])
def test_create_and_library_check_their_arguments(call: Callable[[], object],
                                                  error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


FACTORIES = [graphrt.cpu, graphrt.sim, graphrt.cuda]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ordinal", ["0", 1.5, True, None])
def test_device_ordinal_of_the_wrong_kind(factory: Any, ordinal: object) -> None:
    with pytest.raises(graphrt.ArgumentError,
                       match=rf"{factory.__name__}\(ordinal\): expected a non-negative int"):
        factory(ordinal)
    with pytest.raises(graphrt.DeviceError):  # and still the DeviceError it always was
        factory(ordinal)


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ordinal", [-1, 1 << 40, pytest.param(10 ** 5000, id="huge")])
def test_device_ordinal_out_of_range(factory: Any, ordinal: int) -> None:
    with pytest.raises(graphrt.DeviceError, match="must be a non-negative int below"):
        factory(ordinal)


@pytest.mark.parametrize(("spec", "error", "match"), [
    (5, graphrt.ArgumentError, r"device: expected a Device or text like 'cuda:0', given 5"),
    (None, graphrt.ArgumentError, r"given None"),
    ("cpu:" + "9" * 5000, graphrt.DeviceError, r"must be a non-negative integer below"),
    ("cpu:99999999999", graphrt.DeviceError, r"must be a non-negative integer below"),
    ("x" * 500, graphrt.DeviceError, r"unknown device kind .*\(500 chars\)"),
])
def test_device_text(spec: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        graphrt.device(spec)  # type: ignore[arg-type]


def test_sim_counters_takes_text_and_checks_it() -> None:
    assert graphrt.sim_counters("sim:0") is graphrt.sim_counters(graphrt.sim(0))
    with pytest.raises(graphrt.ArgumentError, match="device: expected a Device"):
        graphrt.sim_counters(None)  # type: ignore[arg-type]
    with pytest.raises(graphrt.DeviceError, match="not a sim device"):
        graphrt.sim_counters("cpu")


@pytest.fixture(scope="module")
def mlp_bundle() -> graphrt.Bundle:
    models = ROOT / "examples" / "models" / "mlp"
    return bundle_from_parts(prepare_bundle(models / "graph.json", models / "lib.json"))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda b: b.create(lib=5), graphrt.ArgumentError,
     r"lib: expected a graphrt.Library or a mapping of names to kernels, given 5"),
    (lambda b: b.create(lib={"x": 5}), graphrt.ArgumentError, r"kernel 'x': expected a callable"),
    (lambda b: b.create(strict=True), graphrt.ArgumentError,
     r"Bundle.create: unknown option 'strict'; the options are strict_placement"),
    (lambda b: b.create(strict_placement="no"), graphrt.ArgumentError,
     r"create\(strict_placement=...\)"),
    (lambda b: b.create(3), graphrt.ArgumentError, r"device: expected a Device"),
    (lambda b: b.save(None), graphrt.ArgumentError, r"Bundle.save\(path\): expected a path"),
])
def test_bundle_methods_check_their_arguments(mlp_bundle: graphrt.Bundle, call: Any,
                                              error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(mlp_bundle)
    assert isinstance(mlp_bundle.create(), graphrt.GraphModule)


@pytest.fixture
def tvm_mod() -> graph_executor.GraphModule:
    return graph_executor.create(add_graph(), {"add": add}, graph_executor.cpu(0))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda m: m.set_input(None, X), graphrt.ArgumentError, r"a value but no key"),
    (lambda m: m.get_input_index(None), graphrt.ArgumentError,
     r"get_input_index takes an input name \(str\), given None"),
    (lambda m: m.get_output_index(3), graphrt.ArgumentError, r"takes an output name"),
    (lambda m: m["run_from_inputs"]("cpu", 0), graphrt.ArgumentError,
     r"an int device type and id, given 'cpu', 0"),
    (lambda m: m["run_from_inputs"](1, -1), graphrt.DeviceError,
     r"cpu device ordinal must be a non-negative int below"),
    pytest.param(lambda m: m["run_from_inputs"](1, 10 ** 5000), graphrt.DeviceError,
                 r"must be a non-negative int below", id="huge-ordinal"),
    (lambda m: m[5], graphrt.InputError, r"has no function 5"),
    (lambda m: m.benchmark(graph_executor.cpu(0), repeat="3"), graphrt.ArgumentError,
     r"repeat: expected an int >= 1"),
    (lambda m: m.benchmark(3), graphrt.ArgumentError, r"a device is a graphrt Device"),
    (lambda m: m.get_output(0, 5), graphrt.ArgumentError, r"out buffer for output 0"),
])
def test_contrib_module_checks_its_arguments(tvm_mod: graph_executor.GraphModule, call: Any,
                                             error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(tvm_mod)
    tvm_mod.run(x=X, y=X)
    np.testing.assert_array_equal(tvm_mod.get_output(0).numpy(), 2 * X)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: graph_executor.create(add_graph(), 5, "cpu"), graphrt.ArgumentError,
     r"libmod must be a graphrt.Library"),
    (lambda: graph_executor.create(add_graph(), {"add": add}, 5), graphrt.ArgumentError,
     r"list of devices"),
    (lambda: graph_executor.GraphModule(5), graphrt.ArgumentError,
     r"wraps a graphrt.GraphModule"),
    (lambda: graph_executor.empty("3"), graphrt.ArgumentError, r"a shape is a sequence"),
    (lambda: graph_executor.empty((3,), object), graphrt.InputError, r"dtype"),
    (lambda: graph_executor.empty((1 << 62, 1 << 62)), graphrt.PlacementError,
     r"cannot allocate \d+ bytes on cpu:0 for an NDArray of shape"),
    (lambda: graph_executor.array(X).copyto(3), graphrt.ArgumentError,
     r"copyto target must be an NDArray or a device"),
])
def test_contrib_functions_check_their_arguments(call: Callable[[], object],
                                                 error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# -- 2. get_output after a run that wrote elsewhere ------------------------------------------


def test_get_output_after_a_call_refuses_the_older_result(mod: graphrt.GraphModule) -> None:
    assert not mod.get_output(0).any()  # before the first run: zeros, as in TVM
    (y,) = mod(x=X, y=X)
    np.testing.assert_array_equal(y, 2 * X)
    with pytest.raises(graphrt.InputError, match=r"output 0 \('add'\): the last run wrote it "
                                                 r"into the arrays the caller"):
        mod.get_output(0)
    with pytest.raises(graphrt.InputError, match="the last run wrote it"):
        mod.get_output(0, out=np.empty(4, "float32"))
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0), 2 * X)


def test_get_output_after_invoke_with_outputs(mod: graphrt.GraphModule) -> None:
    mod.run(x=X, y=X)
    y = np.empty(4, "float32")
    mod.invoke_with_outputs({"x": 3 * X, "y": X}, [y])
    np.testing.assert_array_equal(y, 4 * X)
    with pytest.raises(graphrt.InputError, match="invoke_with_outputs"):
        mod.get_output(0)
    mod.invoke_with_outputs({"x": X, "y": X.copy()}, [None])  # unbound: into the module
    np.testing.assert_array_equal(mod.get_output(0), 2 * X)


def test_get_output_checks_out_before_anything_else(mod: graphrt.GraphModule) -> None:
    mod(x=X, y=X)
    with pytest.raises(graphrt.ArgumentError, match="out buffer for output 0"):
        mod.get_output(0, out="no")


# -- 3. memory ---------------------------------------------------------------------------------


def big_graph(nbytes: int) -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [nbytes // 4], "float32")
    return g.build([g.op("r", "relu", [x], shape=[nbytes // 4])])


RLIMIT_SCRIPT = """
import resource, sys
sys.path[:0] = TESTS
import graphrt
from tests.integration.test_hardening_api import big_graph
from graphrt.devices.base import Backend
used = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
            if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (used + 200 * 2**20, resource.RLIM_INFINITY))
for check in (True, False):  # the planned capacity first, then the allocation itself
    if not check:
        Backend.capacity = lambda self: None
    try:
        graphrt.create(big_graph(2**30), {"relu": lambda x, out: None})
    except graphrt.PlacementError as err:
        print("PlacementError:", err)
"""
"""Creates a graph needing 1 GiB under an address-space limit 200 MiB above current use."""


@pytest.mark.skipif(not Path("/proc/self/status").exists() or sys.platform != "linux",
                    reason="needs Linux resource limits and /proc")
def test_create_under_an_address_space_limit_is_a_placement_error() -> None:
    script = RLIMIT_SCRIPT.replace("TESTS", repr([str(ROOT), str(ROOT / "tests" / "support")]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    planned, allocated = result.stdout.splitlines()
    assert "needs 1073741824 bytes (storage_id 0) on cpu:0, beyond" in planned
    assert ("cannot allocate 1073741824 bytes on cpu:0 for storage_id 0 (entry 0 (output 0 of "
            "node 0 'x'))") in allocated
    assert "MemoryError" in allocated


@pytest.fixture
def failing_allocate(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the cpu and sim backends fail every allocation of a size in the returned list."""
    sizes: list[int] = []

    def failing(original: Any) -> Any:
        def allocate(self: Backend, nbytes: int) -> Any:
            if nbytes in sizes:
                raise MemoryError("out of memory (test)")
            return original(self, nbytes)
        return allocate

    for cls in (CpuBackend, SimBackend):
        monkeypatch.setattr(cls, "allocate", failing(cls.allocate))
    return sizes


@pytest.mark.parametrize("dev", ["cpu:0", "sim:0"])
def test_failed_allocation_names_storage_id_bytes_and_device(
        failing_allocate: list[int], dev: str) -> None:
    g = GraphBuilder()
    x = g.input("x", [1000], "float32")
    graph = g.build([g.op("r", "relu", [x], shape=[1000])])
    failing_allocate.append(4000)
    with pytest.raises(graphrt.PlacementError,
                       match=rf"cannot allocate 4000 bytes on {dev} for storage_id 0 \(entry 0 "
                             rf"\(output 0 of node 0 'x'\)\) \(MemoryError: out of memory"):
        graphrt.create(graph, {"relu": relu}, dev)
    failing_allocate.clear()
    mod = graphrt.create(graph, {"relu": relu}, dev)
    mod.run(x=np.full(1000, -1, "float32"))


def test_failed_allocation_of_a_param_and_a_fresh_output(failing_allocate: list[int],
                                                         mod: graphrt.GraphModule) -> None:
    failing_allocate.append(16)
    with pytest.raises(graphrt.PlacementError, match=r"16 bytes on cpu:0 for param 'x'"):
        mod.load_params({"x": X})
    with pytest.raises(graphrt.PlacementError, match=r"for a fresh output \(entry 2"):
        mod(x=X, y=X)
    failing_allocate.clear()
    still_works(mod)


def test_host_memory_limit_is_the_least_source(monkeypatch: pytest.MonkeyPatch) -> None:
    def sources(available: int | None, rlimits: list[int], cgroup: int | None) -> None:
        monkeypatch.setattr(host_memory, "available_memory", lambda: available)
        monkeypatch.setattr(host_memory, "rlimit_headroom", lambda: iter(rlimits))
        monkeypatch.setattr(host_memory, "cgroup_headroom", lambda: cgroup)

    sources(64 << 30, [], None)
    assert host_memory.host_memory_limit() == 64 << 30
    sources(64 << 30, [300 << 20, 8 << 30], 2 << 30)
    assert host_memory.host_memory_limit() == 300 << 20
    sources(64 << 30, [], 1 << 30)
    assert host_memory.host_memory_limit() == 1 << 30
    sources(None, [-5], None)  # already over a limit: nothing left
    assert host_memory.host_memory_limit() == 0
    sources(None, [], None)
    assert host_memory.host_memory_limit() is None
    # and the planner uses it for host devices
    sources(1000, [], None)
    with pytest.raises(graphrt.PlacementError, match=r"needs 4000 bytes .* on sim:0, beyond "
                                                     r"1000 bytes"):
        graphrt.create(big_graph(4000), {"relu": relu}, "sim")


def test_rlimit_headroom_subtracts_what_the_process_uses(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    resource = pytest.importorskip("resource")
    limits = {resource.RLIMIT_AS: (3 << 30, resource.RLIM_INFINITY),
              resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    monkeypatch.setattr(resource, "getrlimit", limits.__getitem__)
    (tmp_path / "status").write_text("Name:\tpython\nVmSize:\t 1048576 kB\nVmData:\t 10 kB\n")
    monkeypatch.setattr(host_memory, "PROC_SELF", tmp_path)
    assert list(host_memory.rlimit_headroom()) == [(3 << 30) - (1 << 30)]
    limits[resource.RLIMIT_DATA] = (1 << 20, resource.RLIM_INFINITY)
    assert list(host_memory.rlimit_headroom()) == [2 << 30, (1 << 20) - 10 * 1024]
    (tmp_path / "status").unlink()  # usage unknown: the whole limit
    assert list(host_memory.rlimit_headroom()) == [3 << 30, 1 << 20]


@pytest.mark.parametrize(("proc_cgroup", "files", "expected"), [
    ("0::/user.slice/app\n", {"user.slice/app/memory.max": "1073741824\n",
                              "user.slice/app/memory.current": "73741824\n"}, 1_000_000_000),
    ("0::/user.slice/app\n", {"user.slice/app/memory.max": "max\n"}, None),
    ("0::/hidden\n", {"memory.max": "2000\n", "memory.current": "500"}, 1500),  # namespaced
    ("4:memory:/docker/abc\n2:cpu:/\n", {"memory/docker/abc/memory.limit_in_bytes": "5000\n",
                                         "memory/docker/abc/memory.usage_in_bytes": "1000\n"},
     4000),
    ("4:memory:/x\n", {"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),
    ("4:cpuacct,memory:/x\n", {"memory/memory.limit_in_bytes": "8000\n"}, 8000),
    ("", {}, None),
])
def test_cgroup_headroom_v1_and_v2(tmp_path: Path, proc_cgroup: str, files: dict[str, str],
                                   expected: int | None) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    (proc / "cgroup").write_text(proc_cgroup)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert host_memory.cgroup_headroom(root, proc) == expected


def test_host_memory_limit_on_this_machine() -> None:
    for limit in (host_memory.host_memory_limit(),
                  graphrt.devices.backend_for(graphrt.cpu(0)).capacity()):
        assert limit is None or limit >= 0


# -- 4. dynamic dimensions written as expressions --------------------------------------------


@pytest.mark.parametrize(("text", "canonical", "is_variable"), [
    ("n", "n", True), ("(n)", "n", True), ("((n))", "n", True), (" n", "n", True),
    ("n\t", "n", True), ("2*n", "2 * n", False), ("n+1", "n + 1", False),
    ("n*n", "n * n", False), ("n // 2", "n // 2", False), ("(n + 1) * 2", "( n + 1 ) * 2", False),
])
def test_expression_text_is_canonical(text: str, canonical: str, is_variable: bool) -> None:
    expr = parse_dim(text)
    assert (expr.text, expr.is_variable) == (canonical, is_variable)


def dynamic_graph(expr: str, *, with_x: bool = True) -> dict[str, Any]:
    """Inputs x: [n, 3] (binds n) and y: [expr, 3]; output relu(y)."""
    g = GraphBuilder()
    if with_x:
        g.input("x", ["n", 3])
    y = g.input("y", [expr, 3])
    return g.build([g.op("r", "relu", [y], shape=[expr, 3])],
                   shape_vars={"n": {"min": 1, "max": 256}})


def ones(rows: int) -> np.ndarray[Any, Any]:
    return np.ones((rows, 3), "float32")


@pytest.mark.parametrize(("expr", "n", "rows"), [
    ("n", 4, 4), ("(n)", 4, 4), ("((n))", 7, 7), (" n", 4, 4), ("2*n", 4, 8), ("n+1", 4, 5),
    ("n*n", 5, 25), ("n // 2", 9, 4), ("n - 1", 1, 0), ("2 * (n + 1)", 3, 8),
    ("0*n + 3", 100, 3),
])
def test_every_expression_form_binds_and_runs(expr: str, n: int, rows: int) -> None:
    mod = graphrt.create(dynamic_graph(expr), {"relu": relu})
    (out,) = mod(x=ones(n), y=-ones(rows))
    assert out.shape == (rows, 3) and not out.any()
    mod.run(x=ones(n), y=ones(rows))
    np.testing.assert_array_equal(mod.get_output(0), ones(rows))


@pytest.mark.parametrize(("expr", "match"), [
    ("-n", r"entry 1 \(output 0 of node 1 'y'\).*unexpected '-' in dimension '-n'"),
    ("n ** 2", r"entry 1 .*unexpected"),
    ("n//0", r"entry 1 .*'n//0'.*divisor .* can be 0"),
    ("n // (n - n)", r"entry 1 .*divisor"),
    ("m + 1", r"entry 1 .*uses \['m'\], not declared"),
    ("n٣", r"entry 1 .*cannot read dimension"),
    ("\u00a0n", r"entry 1 .*cannot read dimension"),
    ("()", r"entry 1 .*unexpected"),
    ("8", r"entry 1 .*has no variable"),
])
def test_expressions_outside_the_grammar_are_refused_at_load(expr: str, match: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=match):
        graphrt.create(dynamic_graph(expr), {"relu": relu})


def test_an_expression_no_input_binds_is_refused_at_load() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"\('2 \* n'\): variable 'n' is never "
                                                       r"bound"):
        graphrt.create(dynamic_graph("2*n", with_x=False), {"relu": relu})


@pytest.mark.parametrize(("expr", "rows", "match"), [
    ("2*n", 10**6, r"input 'y' \(node 1\): dimension 0 = 2 \* n is 1000000, outside the values "
                   r"\[2, 512\] it takes for n in \[1, 256\]"),
    ("n+1", 1, r"dimension 0 = n \+ 1 is 1, outside the values \[2, 257\]"),
    ("n*n", 70000, r"n \* n is 70000, outside the values \[1, 65536\]"),
    ("0*n + 3", 4, r"outside the values \[3, 3\]"),
    ("(n)", 300, r"dimension 0 binds shape variable 'n' to 300, outside its bounds \[1, 256\]"),
])
def test_set_input_refuses_a_size_the_expression_cannot_take(expr: str, rows: int,
                                                             match: str) -> None:
    mod = graphrt.create(dynamic_graph(expr), {"relu": relu})
    with pytest.raises(graphrt.InputError, match=match):
        mod.set_input("y", ones(rows))
    mod.run(x=ones(2), y=ones(parse_dim(expr).evaluate({"n": 2})))


@pytest.mark.parametrize(("expr", "n", "rows", "match"), [
    ("2*n", 4, 7, r"input 'y' dimension 0 is 7, but '2 \* n' = 8 with n=4"),
    ("n+1", 4, 4, r"input 'y' dimension 0 is 4, but 'n \+ 1' = 5 with n=4"),
    ("(n)", 4, 5, r"inputs disagree on shape variable 'n' \(bounds \[1, 256\]\): input 'x' "
                  r"dimension 0 gives 4, input 'y' dimension 0 gives 5"),
    ("n - 5", 3, 0, r"'n - 5' = -2 with n=3"),
])
def test_run_refuses_sizes_the_inputs_disagree_on(expr: str, n: int, rows: int,
                                                  match: str) -> None:
    mod = graphrt.create(dynamic_graph(expr), {"relu": relu})
    mod.set_input("x", ones(n))
    mod.set_input("y", ones(rows))
    with pytest.raises(graphrt.InputError, match=match):
        mod.run()
    n_ok = 6
    mod.run(x=ones(n_ok), y=ones(parse_dim(expr).evaluate({"n": n_ok})))


def test_an_intermediate_expression_below_zero_is_an_input_error() -> None:
    g = GraphBuilder()
    x = g.input("x", ["n", 3])
    graph = g.build([g.op("r", "relu", [x], shape=["n - 5", 3])],
                    shape_vars={"n": {"min": 1, "max": 256}})

    def head(a: Any, out: Any) -> None:
        np.maximum(a[:out.shape[0]], 0, out=out)

    mod = graphrt.create(graph, {"relu": head})
    with pytest.raises(graphrt.InputError, match=r"entry 1 \(output 0 of node 1 'r'\) dimension "
                                                 r"0 \('n - 5'\) is -2, outside \[0, 251\]"):
        mod.run(x=ones(3))
    (out,) = mod(x=ones(8))
    assert out.shape == (3, 3)


# -- 5. fuzz finding F2: user names in messages are cut -------------------------------------

LONG = "9" * 5000
MLP = ROOT / "examples" / "models" / "mlp"


@pytest.mark.parametrize(("edit", "match"), [
    (lambda f: f.update(outputs=[LONG]), r"output '9+\.\.\. \(5000 chars\) is never written"),
    (lambda f: f["body"][0].update(inputs=[LONG, *f["body"][0]["inputs"][1:]]),
     r"reads '9+\.\.\. \(5000 chars\) before anything defines it"),
    (lambda f: f.update(inputs=[LONG, LONG]), r"input '9+\.\.\. \(5000 chars\) is listed twice"),
])
def test_lib_messages_cut_long_names(edit: Callable[[dict[str, Any]], None],
                                     match: str) -> None:
    lib = json.loads((MLP / "lib.json").read_text())
    edit(lib["functions"]["fused_dense_relu"])
    with pytest.raises(graphrt.GraphFormatError, match=match) as caught:
        graphrt.Library.from_json(lib)
    assert len(str(caught.value)) < 400


def test_bundle_interface_messages_cut_long_names() -> None:
    graph = graphrt.load_graph(MLP / "graph.json")
    with pytest.raises(graphrt.BundleError, match=r"param '9+\.\.\. \(5000 chars\) is not an "
                                                  r"input") as caught:
        check_params_fit(graph, {LONG: ((1,), "float32")}, "params")
    assert len(str(caught.value)) < 600


def test_module_messages_cut_long_keys(mod: graphrt.GraphModule) -> None:
    with pytest.raises(graphrt.InputError, match=r"no node is called '9+\.\.\. \(5000 chars\)"):
        mod.debug_get_output(LONG)
    with pytest.raises(graphrt.InputError, match=r"unknown input '9+\.\.\. \(5000 chars\)"):
        mod.set_input(LONG, X)
    still_works(mod)


def _mlp_lib() -> dict[str, Any]:
    return json.loads((Path(__file__).parents[2] / "examples/models/mlp/lib.json").read_text())


def _long_output(lib: dict[str, Any]) -> None:
    lib["functions"]["fused_dense_relu"]["outputs"] = ["9" * 5000]


def _long_op(lib: dict[str, Any]) -> None:
    lib["functions"]["fused_dense_relu"]["body"][0]["op"] = "q" * 5000


def _long_attr(lib: dict[str, Any]) -> None:
    lib["functions"]["fused_dense_relu"]["body"][0]["attrs"] = {"q" * 5000: 1}


@pytest.mark.parametrize("mutate", [_long_output, _long_op, _long_attr],
                         ids=lambda f: f.__name__)
def test_long_user_names_are_cut_in_messages(mutate: Callable[[dict[str, Any]], None]) -> None:
    lib = _mlp_lib()
    mutate(lib)
    with pytest.raises(graphrt.GraphFormatError) as info:
        graphrt.Library.from_json(lib)
    assert len(str(info.value)) < 2000
