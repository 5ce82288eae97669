"""Graph features: multi-output nodes, __nop aliasing, flatten_data, storage sharing, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.devices import SimArray


def split2(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    lo[...] = x[: len(lo)]
    hi[...] = x[len(lo):]


def add(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.add(a, b, out=out)


def double(a: np.ndarray, out: np.ndarray) -> None:
    np.multiply(a, 2, out=out)


def multi_output_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [6])
    s = g.op("split", "split2", [x], [([2], "float32"), ([4], "float32")])
    d = g.op("double", "double", [(s, 1)], shape=[4])
    return g.build(heads=[(s, 0), d, (s, 1)])


def test_multi_output_node_feeds_consumers_and_heads() -> None:
    mod = graphrt.create(multi_output_graph(), {"split2": split2, "double": double})
    x = np.arange(6, dtype="float32")
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), x[:2])
    np.testing.assert_array_equal(mod.get_output(1), x[2:] * 2)
    np.testing.assert_array_equal(mod.get_output(2), x[2:])
    # Per entry, not per node (TVM reported the node's first output for every head).
    assert mod.get_output_info()["shape"] == {"split:0": (2,), "double": (4,), "split:1": (4,)}
    assert mod.get_output_index("split:1") == 2


def nop_graph(*, nop_is_head: bool) -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [2, 3])
    y = g.op("double", "double", [x], shape=[2, 3], sids=[1])
    r = g.op("reshape_nop", "__nop", [y], shape=[6], sids=[1])
    if nop_is_head:
        return g.build(heads=[r])
    z = g.op("double2", "double", [r], shape=[6], sids=[2])
    return g.build(heads=[z, r])


def test_nop_is_an_alias_and_runs_no_step() -> None:
    mod = graphrt.create(nop_graph(nop_is_head=False), {"double": double})
    assert len(mod.context._table.steps) == 2
    x = np.arange(6, dtype="float32").reshape(2, 3)
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), x.reshape(6) * 4)
    reshaped = mod.get_output(1)
    assert reshaped.shape == (6,)
    np.testing.assert_array_equal(reshaped, x.reshape(6) * 2)
    assert mod.plan.pool[1].entries == (1, 2)


def test_nop_as_the_last_node_returns_the_aliased_data() -> None:
    mod = graphrt.create(nop_graph(nop_is_head=True), {"double": double})
    x = np.arange(6, dtype="float32").reshape(2, 3)
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), x.reshape(6) * 2)


@pytest.mark.parametrize("flatten", [False, True])
def test_flatten_data_passes_1d_views(flatten: bool) -> None:
    shapes: list[tuple[tuple[int, ...], ...]] = []

    def record(a: np.ndarray, out: np.ndarray) -> None:
        shapes.append((a.shape, out.shape))
        out[...] = a + 1

    g = GraphBuilder()
    x = g.input("x", [2, 3])
    y = g.op("inc", "inc", [x], shape=[2, 3], flatten=flatten)
    mod = graphrt.create(g.build(heads=[y]), {"inc": record})
    mod.run(x=np.zeros((2, 3), "float32"))
    assert shapes == ([((6,), (6,))] if flatten else [((2, 3), (2, 3))])
    assert mod.get_output(0).shape == (2, 3)
    np.testing.assert_array_equal(mod.get_output(0), np.ones((2, 3), "float32"))


def test_storage_id_shared_across_dtypes_is_sized_in_bytes() -> None:
    g = GraphBuilder()
    x = g.input("x", [4], "int8")
    a = g.op("widen", "widen", [x], shape=[4], dtype="int32", sids=[1])
    b = g.op("narrow", "narrow", [a], shape=[4], dtype="int16", sids=[2])
    c = g.op("again", "narrow", [b], shape=[2], dtype="int8", sids=[1])  # reuses sid 1
    lib = {"widen": lambda i, o: np.copyto(o, i, casting="safe"),
           "narrow": lambda i, o: np.copyto(o, i[: o.size], casting="unsafe")}
    mod = graphrt.create(g.build(heads=[c]), lib)
    assert mod.plan.pool[1].nbytes == 16  # int32[4], the largest entry of sid 1
    mod.run(x=np.array([1, 2, 3, 4], "int8"))
    np.testing.assert_array_equal(mod.get_output(0), np.array([1, 2], "int8"))


def test_scalar_and_empty_entries() -> None:
    g = GraphBuilder()
    x = g.input("x", [])
    e = g.input("e", [0, 3])
    y = g.op("double", "double", [x], shape=[])
    z = g.op("double_e", "double", [e], shape=[0, 3])
    mod = graphrt.create(g.build(heads=[y, z]), {"double": double})
    assert mod.plan.pool[0].nbytes == 4
    mod.run(x=np.float32(2.5) * np.ones((), "float32"), e=np.zeros((0, 3), "float32"))
    assert mod.get_output(0) == np.float32(5.0)
    assert mod.get_output(1).shape == (0, 3)


def test_a_thousand_node_chain() -> None:
    g = GraphBuilder()
    node = g.input("x", [3])
    for i in range(1000):
        node = g.op(f"inc{i}", "inc", [node], shape=[3], sids=[1 + i % 2])
    mod = graphrt.create(g.build(heads=[node]), {"inc": lambda a, o: np.add(a, 1, out=o)})
    mod.run(x=np.zeros(3, "float32"))
    np.testing.assert_array_equal(mod.get_output(0), np.full(3, 1000, "float32"))


class Flaky:
    def __init__(self) -> None:
        self.fail = True

    def __call__(self, a: np.ndarray, out: np.ndarray) -> None:
        if self.fail:
            raise ValueError("boom")
        np.multiply(a, 2, out=out)


def test_kernel_error_names_the_node_and_leaves_the_module_usable() -> None:
    flaky = Flaky()
    g = GraphBuilder()
    x = g.input("x", [2])
    y = g.op("first", "double", [x], shape=[2])
    z = g.op("second", "flaky", [y], shape=[2])
    mod = graphrt.create(g.build(heads=[z]), {"double": double, "flaky": flaky})
    with pytest.raises(graphrt.ExecutionError,
                       match=r"node 2 'second' \(func_name 'flaky'\) failed on cpu:0: "
                             r"ValueError: boom") as info:
        mod.run(x=np.ones(2, "float32"))
    err = info.value
    assert (err.node_id, err.node_name, err.func_name, err.device) == (2, "second", "flaky",
                                                                       "cpu:0")
    assert isinstance(err.__cause__, ValueError)
    flaky.fail = False
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0), np.full(2, 4, "float32"))


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_kernel_raising_a_graphrt_error_is_named_like_any_other(device: str) -> None:
    """An InputError (any graphrt error) from inside a kernel is the kernel's failure: it
    gets the node, func_name and device, and keeps the original as its cause."""
    def picky(a: Any, out: Any) -> None:
        raise graphrt.InputError("picky wants another input")

    g = GraphBuilder()
    y = g.op("check", "picky", [g.input("x", [2])], shape=[2])
    mod = graphrt.create(g.build(heads=[y]), {"picky": picky}, device)
    with pytest.raises(graphrt.ExecutionError,
                       match=rf"node 1 'check' \(func_name 'picky'\) failed on {device}:0: "
                             r"InputError: picky wants another input") as info:
        mod.run(x=np.ones(2, "float32"))
    assert (info.value.node_id, info.value.device) == (1, f"{device}:0")
    assert isinstance(info.value.__cause__, graphrt.InputError)


def test_kernels_receive_their_node_arrays_in_order() -> None:
    seen: list[tuple[Any, ...]] = []
    g = GraphBuilder()
    a = g.input("a", [2])
    b = g.input("b", [2])
    c = g.op("add0", "add", [a, b], shape=[2])
    mod = graphrt.create(g.build(heads=[c]), {"add": lambda *args: seen.append(args)})
    mod.run()
    (args,) = seen
    views = [mod.get_input("a"), mod.get_input("b"), mod.get_output(0)]
    assert all(arr.ctypes.data == view.ctypes.data and arr.shape == view.shape
               for arr, view in zip(args, views, strict=True))


# -- placement errors ---------------------------------------------------------------------


def two_device_graph(*, shared_sid: bool = False, with_copy: bool = True) -> dict[str, Any]:
    g = GraphBuilder(device_index=True)
    x = g.input("x", [4], dev=12)
    y = g.op("on_sim", "double", [x], shape=[4], dev=12, sids=[1])
    if with_copy:
        y = g.op("to_host", "__copy", [y], shape=[4], dev=1, sids=[1 if shared_sid else 2])
    z = g.op("on_cpu", "double", [y], shape=[4], dev=1, sids=[3])
    return g.build(heads=[z])


def test_two_device_graph_runs() -> None:
    sim = graphrt.sim(0)
    mod = graphrt.create(two_device_graph(), {"double": double}, graphrt.cpu(0), sim)
    x = np.ones(4, "float32")
    mod.run(x=x)
    np.testing.assert_array_equal(mod.get_output(0), x * 4)
    assert isinstance(mod.get_input("x"), SimArray)


def test_storage_id_on_two_devices_is_refused() -> None:
    with pytest.raises(graphrt.PlacementError,
                       match=r"storage_id 1 is used on two devices: by entry 1 \(output 0 of "
                             r"node 1 'on_sim'\) on sim:0 and by entry 2 .* on cpu:0"):
        graphrt.create(two_device_graph(shared_sid=True), {"double": double}, graphrt.cpu(0),
                       graphrt.sim(0))


def test_reading_another_devices_entry_without_copy_is_refused() -> None:
    with pytest.raises(graphrt.PlacementError,
                       match=r"node 2 'on_cpu' runs on cpu:0 but its input entry 1 .* is on "
                             r"sim:0; a __copy node must move it first"):
        graphrt.create(two_device_graph(with_copy=False), {"double": double}, graphrt.cpu(0),
                       graphrt.sim(0))


def test_same_graph_on_cpu_only_needs_no_copy_device() -> None:
    mod = graphrt.create(two_device_graph(with_copy=False), {"double": double})
    assert len(mod.plan.fallbacks) == 2


def test_storage_beyond_the_device_fails_before_allocation() -> None:
    g = GraphBuilder()
    x = g.input("x", [2])
    y = g.op("huge", "double", [x], shape=[2**31, 2**31])
    with pytest.raises(graphrt.PlacementError,
                       match=r"entry 1 \(output 0 of node 1 'huge'\) needs 18446744073709551616 "
                             r"bytes \(storage_id 1\) on cpu:0, beyond"):
        graphrt.create(g.build(heads=[y]), {"double": double})


def test_total_beyond_the_device_names_the_largest_slot() -> None:
    from graphrt.schema import load_graph
    from graphrt.storage import plan_storage

    g = GraphBuilder()
    x = g.input("x", [100], "uint8")
    y = g.op("big", "double", [x], shape=[200], dtype="uint8")
    graph = load_graph(g.build(heads=[y]))
    cpu = graphrt.cpu(0)
    with pytest.raises(graphrt.PlacementError,
                       match=r"the graph needs 300 bytes on cpu:0, which holds 250; the largest "
                             r"slot is storage_id 1 \(200 bytes"):
        plan_storage(graph, [cpu], capacity={cpu: 250})
    assert plan_storage(graph, [cpu], capacity={cpu: 300}).bytes_per_device() == {cpu: 300}


def test_unsupported_storage_scope_is_refused() -> None:
    graph = multi_output_graph()
    graph["attrs"]["storage_scope"] = ["list_str", ["global", "", "global.texture", "global"]]
    with pytest.raises(graphrt.PlacementError, match=r"entry 2 .* storage scope "
                                                     r"'global.texture'"):
        graphrt.create(graph, {"split2": split2, "double": double})


@pytest.mark.parametrize(("devices", "match"), [
    ((graphrt.cpu(0), graphrt.cpu(0)), "device cpu:0 is given twice"),
    (("tpu",), "unknown device kind 'tpu'"),
])
def test_bad_device_lists(devices: tuple[Any, ...], match: str) -> None:
    with pytest.raises(graphrt.GraphrtError, match=match):
        graphrt.create(multi_output_graph(), {"split2": split2, "double": double}, *devices)


def test_missing_kernels_are_all_named() -> None:
    with pytest.raises(graphrt.KernelNotFoundError,
                       match=r"the lib has no kernel for 'split2' needed by node 1 'split' on "
                             r"cpu:0 \(device type 1\); 'double' needed by node 2 'double'"):
        graphrt.create(multi_output_graph(), {})
