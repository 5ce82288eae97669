"""Zero-copy inputs, caller-owned outputs, invoke_with_outputs and __call__ (cpu and sim)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.devices import backend_for

KINDS = ["cpu", "sim"]


def address(array: Any) -> int:
    return backend_for(graphrt.devices.locate(array)[0]).data_ptr(graphrt.devices.locate(array)[1])


class Recorder:
    """Generic kernels that note the address of every array they receive."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def kernel(self, name: str, fn: Any) -> Any:
        def run(*args: Any) -> None:
            self.calls.append((name, [address(a) for a in args]))
            fn(*args)
        return run

    def lib(self) -> dict[str, Any]:
        return {"double": self.kernel("double", lambda a, o: np.multiply(a, 2, out=o)),
                "add": self.kernel("add", lambda a, b, o: np.add(a, b, out=o))}

    def addresses(self, name: str) -> list[list[int]]:
        return [addrs for called, addrs in self.calls if called == name]


def setup(kind: str, build: Any) -> tuple[graphrt.GraphModule, Recorder, graphrt.Device]:
    dev = graphrt.device(kind)
    g = GraphBuilder(device_index=True)
    heads = build(g, dev.type_code)
    rec = Recorder()
    devices = [graphrt.cpu(0)] + ([dev] if kind != "cpu" else [])
    return graphrt.create(g.build(heads=heads), rec.lib(), *devices), rec, dev


def array_on(dev: graphrt.Device, values: Any, dtype: str = "float32") -> Any:
    """A fresh array on ``dev`` holding ``values``."""
    host = np.asarray(values, dtype=dtype)
    backend = backend_for(dev)
    array = backend.view(backend.allocate(host.nbytes), host.shape, host.dtype)
    graphrt.devices.copier(graphrt.cpu(0), dev)(host, array)
    return array


def host(array: Any) -> np.ndarray:
    return np.array(array.view(np.ndarray) if isinstance(array, np.ndarray) else array)


# -- graphs -------------------------------------------------------------------------------


def input_through_nop(g: GraphBuilder, dev: int) -> list[Any]:
    x = g.input("x", [2, 3], dev=dev, sid=0)
    r = g.op("reshape_nop", "__nop", [x], shape=[6], sids=[0], dev=dev)
    y = g.op("double", "double", [r], shape=[6], dev=dev)
    return [y]


def input_is_output(g: GraphBuilder, dev: int) -> list[Any]:
    x = g.input("x", [4], dev=dev)
    y = g.op("double", "double", [x], shape=[4], dev=dev)
    return [y, x]


def output_is_nop(g: GraphBuilder, dev: int) -> list[Any]:
    x = g.input("x", [2, 2], dev=dev)
    y = g.op("double", "double", [x], shape=[2, 2], sids=[1], dev=dev)
    r = g.op("reshape_nop", "__nop", [y], shape=[4], sids=[1], dev=dev)
    return [r]


def output_feeds_node(g: GraphBuilder, dev: int) -> list[Any]:
    x = g.input("x", [4], dev=dev)
    y = g.op("double", "double", [x], shape=[4], dev=dev)
    z = g.op("add", "add", [y, x], shape=[4], dev=dev)
    return [y, z]


def output_reuses_sid(g: GraphBuilder, dev: int) -> list[Any]:
    x = g.input("x", [4], dev=dev, sid=0)
    a = g.op("a", "double", [x], shape=[4], sids=[1], dev=dev)
    b = g.op("b", "double", [a], shape=[4], sids=[2], dev=dev)
    c = g.op("c", "add", [b, x], shape=[4], sids=[1], dev=dev)  # reuses a's slot
    return [c]


# -- the cases of the issue ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_zero_copy_input_feeding_a_nop(kind: str) -> None:
    mod, rec, dev = setup(kind, input_through_nop)
    x = array_on(dev, np.arange(6).reshape(2, 3))
    mod.set_input_zero_copy("x", x)
    mod.run()
    assert rec.addresses("double")[-1][0] == address(x)  # the __nop view reads x itself
    np.testing.assert_array_equal(host(mod.get_output(0)), np.arange(6) * 2)
    x[...] = array_on(dev, np.ones((2, 3)))  # the caller changes its array: no stale data
    mod.run()
    np.testing.assert_array_equal(host(mod.get_output(0)), np.full(6, 2))
    assert mod.get_input("x") is x


@pytest.mark.parametrize("kind", KINDS)
def test_input_that_is_also_an_output(kind: str) -> None:
    mod, _, dev = setup(kind, input_is_output)
    x = array_on(dev, [1, 2, 3, 4])
    mod.set_input_zero_copy("x", x)
    mod.run()
    assert address(mod.get_output(1)) == address(x)
    y = array_on(dev, np.zeros(4))
    mod.set_output_zero_copy(1, y)  # no kernel writes it: copied at the end of the run
    mod.run()
    np.testing.assert_array_equal(host(y), [1, 2, 3, 4])
    assert mod.get_output(1) is y
    mod.set_output_zero_copy(1, x)  # the very same buffer is allowed, and costs nothing wrong
    mod.run()
    np.testing.assert_array_equal(host(mod.get_output(1)), [1, 2, 3, 4])
    np.testing.assert_array_equal(host(mod.get_output(0)), [2, 4, 6, 8])


@pytest.mark.parametrize("kind", KINDS)
def test_output_that_is_a_nop_view(kind: str) -> None:
    mod, rec, dev = setup(kind, output_is_nop)
    out = array_on(dev, np.zeros(4))
    mod.set_output_zero_copy(0, out)
    mod.run(x=np.arange(4, dtype="float32").reshape(2, 2))
    assert rec.addresses("double")[-1][1] == address(out)  # the kernel wrote into out
    assert mod.get_output(0) is out
    np.testing.assert_array_equal(host(out), [0, 2, 4, 6])


@pytest.mark.parametrize("kind", KINDS)
def test_output_feeding_another_node(kind: str) -> None:
    mod, rec, dev = setup(kind, output_feeds_node)
    y = array_on(dev, np.zeros(4))
    mod.set_output_zero_copy(0, y)
    mod.run(x=np.arange(4, dtype="float32"))
    assert rec.addresses("double")[-1][1] == address(y)
    assert rec.addresses("add")[-1][0] == address(y)  # the consumer reads the caller's array
    np.testing.assert_array_equal(host(y), [0, 2, 4, 6])
    np.testing.assert_array_equal(host(mod.get_output(1)), [0, 3, 6, 9])


@pytest.mark.parametrize("kind", KINDS)
def test_output_sharing_a_storage_id_with_an_earlier_entry(kind: str) -> None:
    mod, rec, dev = setup(kind, output_reuses_sid)
    c = array_on(dev, np.full(4, -1))
    mod.set_output_zero_copy(0, c)
    mod.run(x=np.ones(4, dtype="float32"))
    node_a, node_b = rec.addresses("double")
    assert node_a[1] != address(c)  # the earlier tenant of the slot keeps module memory
    assert node_b[0] == node_a[1]
    assert rec.addresses("add")[-1][2] == address(c)
    np.testing.assert_array_equal(host(c), np.full(4, 5))


@pytest.mark.parametrize("kind", KINDS)
def test_rebinding_and_clearing_between_runs(kind: str) -> None:
    mod, _, dev = setup(kind, input_is_output)
    first, second = array_on(dev, np.ones(4)), array_on(dev, np.full(4, 3))
    mod.set_input_zero_copy("x", first)
    mod.run()
    np.testing.assert_array_equal(host(mod.get_output(0)), np.full(4, 2))
    mod.set_input_zero_copy(0, second)
    mod.run()
    np.testing.assert_array_equal(host(mod.get_output(0)), np.full(4, 6))
    mod.set_input_zero_copy("x", None)  # cleared: module-owned storage again
    mod.run(x=np.full(4, 5, dtype="float32"))
    np.testing.assert_array_equal(host(mod.get_output(0)), np.full(4, 10))
    np.testing.assert_array_equal(host(second), np.full(4, 3))  # never written


@pytest.mark.parametrize("kind", KINDS)
def test_set_input_after_zero_copy_leaves_the_callers_array_alone(kind: str) -> None:
    mod, _, dev = setup(kind, input_is_output)
    x = array_on(dev, np.ones(4))
    mod.set_input_zero_copy("x", x)
    mod.set_input("x", np.full(4, 7, dtype="float32"))
    mod.run()
    np.testing.assert_array_equal(host(x), np.ones(4))
    np.testing.assert_array_equal(host(mod.get_output(0)), np.full(4, 14))


@pytest.mark.parametrize("kind", KINDS)
def test_per_call_binding_does_not_leak(kind: str) -> None:
    mod, rec, dev = setup(kind, output_feeds_node)
    x = array_on(dev, [1, 2, 3, 4])
    y, z = array_on(dev, np.zeros(4)), array_on(dev, np.zeros(4))
    assert mod.invoke_with_outputs({"x": x}, [y, z]) == [y, z]
    assert rec.addresses("double")[-1] == [address(x), address(y)]
    np.testing.assert_array_equal(host(z), [3, 6, 9, 12])
    mod.run(x=np.zeros(4, dtype="float32"))  # bindings are gone: y, z and x stay as they were
    np.testing.assert_array_equal(host(y), [2, 4, 6, 8])
    np.testing.assert_array_equal(host(x), [1, 2, 3, 4])
    assert address(mod.get_output(0)) not in (address(y), address(x))
    np.testing.assert_array_equal(host(mod.get_output(1)), np.zeros(4))


@pytest.mark.parametrize("kind", KINDS)
def test_per_call_binding_restores_persistent_ones(kind: str) -> None:
    mod, _, dev = setup(kind, output_feeds_node)
    persistent, once = array_on(dev, np.zeros(4)), array_on(dev, np.zeros(4))
    mod.set_output_zero_copy(0, persistent)
    mod.invoke_with_outputs({}, [once, None])
    assert mod.get_output(0) is persistent
    mod.run(x=np.ones(4, dtype="float32"))
    np.testing.assert_array_equal(host(persistent), np.full(4, 2))


@pytest.mark.parametrize("kind", KINDS)
def test_call_returns_fresh_arrays_written_in_place(kind: str) -> None:
    mod, rec, dev = setup(kind, output_feeds_node)
    y1, z1 = mod(x=np.ones(4, dtype="float32"))
    assert rec.addresses("double")[-1][1] == address(y1)
    assert rec.addresses("add")[-1][2] == address(z1)
    y2, _ = mod(x=np.full(4, 2, dtype="float32"))
    np.testing.assert_array_equal(host(y1), np.full(4, 2))  # not overwritten by the next call
    np.testing.assert_array_equal(host(y2), np.full(4, 4))
    assert graphrt.devices.locate(y1)[0] == dev


def test_call_copies_an_output_that_is_an_input() -> None:
    mod, _, _ = setup("cpu", input_is_output)
    _, x_out = mod(x=np.arange(4, dtype="float32"))
    np.testing.assert_array_equal(x_out, np.arange(4))
    assert address(x_out) != address(mod.get_input("x"))


def test_zero_copy_moves_no_bytes_on_sim() -> None:
    mod, _, dev = setup("sim", output_feeds_node)
    x, y, z = (array_on(dev, np.ones(4)) for _ in range(3))
    counters = graphrt.sim_counters(dev)
    counters.reset()
    mod.invoke_with_outputs({"x": x}, [y, z])
    assert (counters.uploads, counters.downloads, counters.device_copies) == (0, 0, 0)


def test_torch_tensors_bind_without_a_copy() -> None:
    torch = pytest.importorskip("torch")
    mod, rec, _ = setup("cpu", output_feeds_node)
    x = torch.arange(4, dtype=torch.float32)
    y, z = torch.zeros(4), torch.zeros(4)
    mod.set_input_zero_copy("x", x)
    mod.set_output_zero_copy(0, y)
    mod.set_output_zero_copy(1, z)
    mod.run()
    assert rec.addresses("double")[-1] == [x.data_ptr(), y.data_ptr()]
    assert z.tolist() == [0.0, 3.0, 6.0, 9.0]
    assert mod.get_output(1) is z


# -- rejections ---------------------------------------------------------------------------


def misaligned(n: int) -> np.ndarray:
    raw = np.zeros(4 * n + 4, dtype=np.uint8)
    start = 1 if raw.ctypes.data % 4 == 0 else 0
    return raw[start:start + 4 * n].view(np.float32)


@pytest.mark.parametrize(("call", "match"), [
    (lambda m, d: m.set_input_zero_copy("x", np.zeros(4, "float32")),
     r"zero-copy input 'x': zero-copy needs an array on sim:0, given one on cpu:0"),
    (lambda m, d: m.set_input_zero_copy("x", array_on(d, np.zeros(4), "float64")),
     r"zero-copy input 'x': expected shape \(4,\) float32, given shape \(4,\) float64"),
    (lambda m, d: m.set_input_zero_copy("x", array_on(d, np.zeros(5))),
     r"expected shape \(4,\) float32, given shape \(5,\) float32"),
    (lambda m, d: m.set_input_zero_copy("x", array_on(d, np.zeros(8))[::2]),
     r"zero-copy needs C-contiguous memory, given strides \(8,\)"),
    (lambda m, d: m.set_output_zero_copy(5, array_on(d, np.zeros(4))),
     r"output index 5 is out of range"),
    (lambda m, d: m.set_input_zero_copy("nope", array_on(d, np.zeros(4))),
     r"unknown input 'nope'"),
    (lambda m, d: m.invoke_with_outputs({}, [array_on(d, np.zeros(4))]),
     r"outputs must be a sequence of 2 arrays \(one per graph output\), given 1"),
    (lambda m, d: m.invoke_with_outputs([], [None, None]), r"inputs must be a mapping"),
])
def test_bind_rejections(call: Any, match: str) -> None:
    mod, _, dev = setup("sim", output_feeds_node)
    with pytest.raises(graphrt.InputError, match=match):
        call(mod, dev)


def test_misaligned_and_read_only_memory_is_refused() -> None:
    mod, _, _ = setup("cpu", output_feeds_node)
    with pytest.raises(graphrt.InputError, match=r"is not aligned to 4 bytes, the size of "
                                                 r"float32, which kernels need"):
        mod.set_input_zero_copy("x", misaligned(4))
    read_only = np.zeros(4, "float32")
    read_only.setflags(write=False)
    mod.set_input_zero_copy("x", read_only)  # inputs are only read
    with pytest.raises(graphrt.InputError, match=r"zero-copy output 0 \('double'\): the array "
                                                 r"is read-only"):
        mod.set_output_zero_copy(0, read_only)


def test_overlapping_buffers_are_refused() -> None:
    mod, _, _ = setup("cpu", output_feeds_node)
    shared = np.zeros(8, "float32")
    mod.set_output_zero_copy(0, shared[:4])
    with pytest.raises(graphrt.InputError, match="zero-copy output 0 and output 1 overlap"):
        mod.set_output_zero_copy(1, shared[2:6])
    with pytest.raises(graphrt.InputError, match="input 'x' and output 0 overlap"):
        mod.set_input_zero_copy("x", shared[:4])
    mod.set_output_zero_copy(1, shared[4:])  # adjacent is fine


def test_failed_bind_keeps_the_previous_binding() -> None:
    mod, rec, _ = setup("cpu", output_feeds_node)
    x = np.arange(4, dtype="float32")
    mod.set_input_zero_copy("x", x)
    with pytest.raises(graphrt.InputError):
        mod.set_input_zero_copy("x", np.zeros(4, "float64"))
    with pytest.raises(graphrt.InputError):
        mod.invoke_with_outputs({"x": np.zeros(3, "float32")}, [None, None])
    mod.run()
    assert rec.addresses("double")[-1][0] == address(x)
    assert mod.get_input("x") is x
