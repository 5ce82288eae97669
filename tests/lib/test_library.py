"""Library: registration, device-specific resolution, and kernel lookup through create()."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import graphrt

CPU, CUDA, SIM = 1, 2, 12


def generic(*args: Any) -> None:
    """A stand-in kernel."""


def on_cpu(*args: Any) -> None:
    """A stand-in cpu kernel."""


def on_sim(*args: Any) -> None:
    """A stand-in sim kernel."""


# ---------------------------------------------------------------------------------------------
# Registration and lookup


def test_empty() -> None:
    lib = graphrt.Library()
    assert len(lib) == 0
    assert list(lib) == []
    assert "add" not in lib
    assert lib.resolve("add", CPU) is None


def test_mapping_constructor() -> None:
    lib = graphrt.Library({"add": generic, "sub": on_cpu})
    assert len(lib) == 2
    assert "add" in lib
    assert "sub" in lib
    assert lib.resolve("add", CPU) is generic
    assert lib.resolve("add", SIM) is generic
    assert lib.resolve("sub", CUDA) is on_cpu


def test_register_plain_returns_kernel() -> None:
    lib = graphrt.Library()
    assert lib.register("add", generic) is generic
    assert lib.resolve("add", CPU) is generic


def test_register_as_decorator() -> None:
    lib = graphrt.Library()

    @lib.register("mul")
    def mul(a: Any, b: Any, out: Any) -> None:
        np.multiply(a, b, out=out)

    assert callable(mul)
    assert mul.__name__ == "mul"  # the decorator returns the function itself
    assert lib.resolve("mul", CPU) is mul

    @lib.register("mul", device="sim")
    def mul_sim(a: Any, b: Any, out: Any) -> None:
        np.multiply(a, b, out=out)

    assert lib.resolve("mul", SIM) is mul_sim
    assert lib.resolve("mul", CPU) is mul


@pytest.mark.parametrize(
    ("device", "code"),
    [("cpu", CPU), (CPU, CPU), (graphrt.cpu(0), CPU), ("sim", SIM), (SIM, SIM),
     (graphrt.sim(0), SIM), (graphrt.sim(3), SIM), ("sim:1", SIM), (CUDA, CUDA),
     (graphrt.Device(CUDA, 0), CUDA)],
    ids=str,
)
def test_device_specific_wins_on_its_type_only(device: Any, code: int) -> None:
    lib = graphrt.Library({"add": generic})
    lib.register("add", on_sim, device=device)
    assert lib.resolve("add", code) is on_sim
    for other in {CPU, CUDA, SIM} - {code}:
        assert lib.resolve("add", other) is generic
    assert len(lib) == 1
    assert list(lib) == ["add"]


def test_device_specific_without_generic() -> None:
    lib = graphrt.Library()
    lib.register("add", on_sim, device="sim")
    lib.register("add", on_cpu, device=graphrt.cpu(0))
    assert "add" in lib
    assert len(lib) == 1
    assert lib.resolve("add", SIM) is on_sim
    assert lib.resolve("add", CPU) is on_cpu
    assert lib.resolve("add", CUDA) is None


def test_registration_order_does_not_matter() -> None:
    lib = graphrt.Library()
    lib.register("add", on_sim, device=12)
    lib.register("add", generic)
    assert lib.resolve("add", SIM) is on_sim
    assert lib.resolve("add", CPU) is generic


class FalsyKernel:
    """A callable whose truth value is False (as a kernel object with ``__len__`` 0 would be)."""

    def __call__(self, *args: Any) -> None:
        pass

    def __bool__(self) -> bool:
        return False


def test_falsy_kernel_object_resolves() -> None:
    kernel = FalsyKernel()
    lib = graphrt.Library({"add": generic})
    lib.register("add", kernel, device="sim")
    lib.register("only", kernel)
    assert lib.resolve("only", CPU) is kernel
    assert lib.resolve("add", SIM) is kernel


def test_contains() -> None:
    lib = graphrt.Library({"add": generic})
    lib.register("only_sim", on_sim, device="sim")
    assert "add" in lib
    assert "only_sim" in lib
    assert "missing" not in lib
    assert 3 not in lib
    assert None not in lib


def test_iteration_sorted_and_len() -> None:
    lib = graphrt.Library()
    for name in ["zeta", "alpha", "Mid", "beta"]:
        lib.register(name, generic)
    lib.register("gamma", on_sim, device="sim")
    lib.register("alpha", on_cpu, device="cpu")  # no new name
    assert list(lib) == sorted(["zeta", "alpha", "Mid", "beta", "gamma"])
    assert len(lib) == 5
    assert list(lib) == list(lib)  # stable


def test_reregister_replaces() -> None:
    lib = graphrt.Library({"add": generic})
    lib.register("add", on_cpu)
    assert lib.resolve("add", CPU) is on_cpu
    assert len(lib) == 1
    lib.register("add", on_sim, device="sim")
    lib.register("add", generic, device="sim")
    assert lib.resolve("add", SIM) is generic
    assert len(lib) == 1


def test_lambdas_and_callable_objects() -> None:
    class Kernel:
        def __call__(self, *args: Any) -> None:
            pass

    kernel = Kernel()
    lib = graphrt.Library({"k": kernel, "l": lambda *a: None})
    assert lib.resolve("k", CPU) is kernel
    assert callable(lib.resolve("l", CPU))


@pytest.mark.parametrize("name", ["__nop", "__copy", ""])
def test_reserved_or_empty_name(name: str) -> None:
    lib = graphrt.Library()
    with pytest.raises(ValueError):
        lib.register(name, generic)
    with pytest.raises(ValueError):
        lib.register(name, generic, device="sim")
    with pytest.raises(ValueError):
        lib.register(name)
    with pytest.raises(ValueError):
        graphrt.Library({name: generic})
    assert len(lib) == 0


@pytest.mark.parametrize("name", [None, 3, b"add"])
def test_non_str_name(name: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        graphrt.Library().register(name, generic)


@pytest.mark.parametrize("kernel", [3, "add", None, np.zeros(2)])
def test_non_callable(kernel: Any) -> None:
    lib = graphrt.Library()
    if kernel is None:
        # register(name, None) is the decorator form; decorating a non-callable fails.
        with pytest.raises(TypeError):
            lib.register("add")(3)  # type: ignore[type-var]
    else:
        with pytest.raises(TypeError):
            lib.register("add", kernel)
        with pytest.raises(TypeError):
            graphrt.Library({"add": kernel})
        with pytest.raises(TypeError):
            lib.register("add", device="sim")(kernel)
    assert "add" not in lib


@pytest.mark.parametrize("device", ["tpu", "gpu:0", "cpu:x", 1.0, [1], True, object(), b"cpu"])
def test_bad_device(device: Any) -> None:
    lib = graphrt.Library()
    with pytest.raises((TypeError, graphrt.DeviceError)):
        lib.register("add", generic, device=device)
    assert "add" not in lib


RELU = {"inputs": ["x"], "outputs": ["y"],
        "body": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}]}


def test_merged_combines_both_and_changes_neither() -> None:
    base = graphrt.Library({"add": generic})
    base.define("relu1", RELU)
    extra = graphrt.Library()
    extra.register("sub", on_sim, device="sim")
    merged = base.merged(extra)
    assert sorted(merged) == ["add", "relu1", "sub"]
    assert merged.resolve("sub", SIM) is on_sim and merged.resolve("sub", CPU) is None
    assert isinstance(merged.resolve("relu1", CPU), graphrt.lib.FusedFunction)
    assert sorted(base) == ["add", "relu1"] and sorted(extra) == ["sub"]


def test_merged_other_wins_and_python_kernels_win_over_functions() -> None:
    base = graphrt.Library({"add": generic})
    base.define("relu1", RELU)
    merged = base.merged({"add": on_cpu, "relu1": on_sim})
    assert merged.resolve("add", CPU) is on_cpu
    assert merged.resolve("relu1", CPU) is on_sim
    assert merged.spec() == base.spec()  # the declarative part is kept


def test_merged_refuses_what_is_not_a_lib() -> None:
    with pytest.raises(TypeError, match=r"graphrt\.Library or a mapping"):
        graphrt.Library().merged([generic])  # type: ignore[arg-type]


def test_repr() -> None:
    assert "2" in repr(graphrt.Library({"a": generic, "b": generic}))


# ---------------------------------------------------------------------------------------------
# Through graphrt.create

GRAPH: dict[str, Any] = {
    "nodes": [
        {"op": "null", "name": "a", "inputs": []},
        {"op": "null", "name": "b", "inputs": []},
        {
            "op": "tvm_op",
            "name": "add0",
            "inputs": [[0, 0, 0], [1, 0, 0]],
            "attrs": {
                "func_name": "add",
                "num_inputs": "2",
                "num_outputs": "1",
                "flatten_data": "0",
            },
        },
    ],
    "arg_nodes": [0, 1],
    "node_row_ptr": [0, 1, 2, 3],
    "heads": [[2, 0, 0]],
    "attrs": {
        "dltype": ["list_str", ["float32", "float32", "float32"]],
        "shape": ["list_shape", [[3], [3], [3]]],
        "storage_id": ["list_int", [0, 1, 2]],
    },
}


def graph() -> dict[str, Any]:
    return copy.deepcopy(GRAPH)


def add(a: Any, b: Any, out: Any) -> None:
    np.add(a, b, out=out)


def run_add(mod: graphrt.GraphModule) -> np.ndarray:
    a = np.array([1, 2, 3], dtype="float32")
    b = np.array([10, 20, 30], dtype="float32")
    mod.run(a=a, b=b)
    return np.asarray(mod.get_output(0, out=np.empty(3, dtype="float32")))


def test_create_with_dict_lib_on_cpu() -> None:
    mod = graphrt.create(graph(), {"add": add}, graphrt.cpu(0))
    np.testing.assert_array_equal(run_add(mod), [11, 22, 33])


def test_create_with_library_on_cpu() -> None:
    mod = graphrt.create(graph(), graphrt.Library({"add": add}), graphrt.cpu(0))
    np.testing.assert_array_equal(run_add(mod), [11, 22, 33])


def test_create_uses_device_specific_kernel() -> None:
    calls: list[str] = []

    def generic_add(a: Any, b: Any, out: Any) -> None:
        calls.append("generic")
        np.add(a, b, out=out)

    def sim_add(a: Any, b: Any, out: Any) -> None:
        calls.append("sim")
        assert isinstance(out, graphrt.devices.SimArray)
        np.add(a, b, out=out)

    lib = graphrt.Library({"add": generic_add})
    lib.register("add", sim_add, device="sim")
    np.testing.assert_array_equal(run_add(graphrt.create(graph(), lib, graphrt.cpu(0))),
                                  [11, 22, 33])
    assert calls == ["generic"]
    np.testing.assert_array_equal(run_add(graphrt.create(graph(), lib, graphrt.sim(0))),
                                  [11, 22, 33])
    assert calls == ["generic", "sim"]


def test_sim_only_kernel_runs_on_sim() -> None:
    lib = graphrt.Library()
    lib.register("add", add, device="sim")
    mod = graphrt.create(graph(), lib, graphrt.sim(0))
    np.testing.assert_array_equal(run_add(mod), [11, 22, 33])


def test_sim_only_kernel_missing_on_cpu() -> None:
    lib = graphrt.Library()
    lib.register("add", add, device="sim")
    with pytest.raises(graphrt.KernelNotFoundError) as info:
        graphrt.create(graph(), lib, graphrt.cpu(0))
    message = str(info.value)
    assert "'add'" in message
    assert "node 2" in message
    assert "add0" in message
    assert "cpu" in message
    assert "device type 1" in message


def test_missing_kernel_in_dict_lib() -> None:
    with pytest.raises(graphrt.KernelNotFoundError, match="'add'"):
        graphrt.create(graph(), {"sub": add}, graphrt.cpu(0))


def test_missing_kernel_names_every_func_name() -> None:
    g = graph()
    g["nodes"].append(
        {
            "op": "tvm_op",
            "name": "mul0",
            "inputs": [[2, 0, 0], [0, 0, 0]],
            "attrs": {"func_name": "mul", "num_inputs": "2", "num_outputs": "1",
                      "flatten_data": "0"},
        }
    )
    g["node_row_ptr"].append(4)
    g["heads"] = [[3, 0, 0]]
    for column, value in (("dltype", "float32"), ("shape", [3]), ("storage_id", 3)):
        g["attrs"][column][1].append(value)
    with pytest.raises(graphrt.KernelNotFoundError) as info:
        graphrt.create(g, {}, graphrt.cpu(0))
    message = str(info.value)
    assert "'add'" in message
    assert "'mul'" in message
    assert "mul0" in message


@pytest.mark.parametrize("lib", [[("add", add)], "add", None, 3, add])
def test_lib_of_wrong_type(lib: Any) -> None:
    with pytest.raises(TypeError):
        graphrt.create(graph(), lib, graphrt.cpu(0))


def test_dict_lib_with_reserved_name() -> None:
    with pytest.raises(ValueError):
        graphrt.create(graph(), {"add": add, "__copy": add}, graphrt.cpu(0))


def test_dict_lib_with_non_callable() -> None:
    with pytest.raises(TypeError):
        graphrt.create(graph(), {"add": "not a kernel"}, graphrt.cpu(0))
