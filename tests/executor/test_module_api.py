"""GraphModule's TVM-compatible API: inputs, params, outputs, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import graphrt
from tests.conftest import example_graph, random_inputs


@pytest.fixture
def mod(elemwise_lib: graphrt.Library) -> graphrt.GraphModule:
    return graphrt.create(example_graph("duplex"), elemwise_lib, graphrt.cpu(0))


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype="float32")


def test_counts_indexes_and_info(mod: graphrt.GraphModule) -> None:
    assert mod.get_num_inputs() == 4
    assert mod.get_num_outputs() == 1
    assert [mod.get_input_index(n) for n in ("A", "B", "C", "D", "nope")] == [0, 1, 2, 3, -1]
    assert mod.get_output_index("elemwise_add1") == 0
    assert mod.get_output_index("elemwise_sub") == -1
    assert mod.get_input_info() == {
        "shape": {name: (4,) for name in "ABCD"},
        "dtype": {name: "float32" for name in "ABCD"},
    }
    assert mod.get_output_info() == {"shape": {"elemwise_add1": (4,)},
                                     "dtype": {"elemwise_add1": "float32"}}


def test_set_input_by_name_index_and_keywords(mod: graphrt.GraphModule) -> None:
    mod.set_input("A", f32(1, 1, 1, 1))
    mod.set_input(1, f32(2, 2, 2, 2))
    mod.set_input(C=f32(3, 3, 3, 3), D=f32(4, 4, 4, 4))
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0), f32(4, 4, 4, 4))
    np.testing.assert_array_equal(mod.get_input("B"), f32(2, 2, 2, 2))
    np.testing.assert_array_equal(mod.get_input(3), f32(4, 4, 4, 4))


def test_set_input_copies_the_value(mod: graphrt.GraphModule) -> None:
    """A host numpy input of the exact type goes the short way (one copy per input, no
    checks beyond shape and dtype); it must still be a copy, taken by name or position."""
    a = f32(1, 1, 1, 1)
    mod.set_input("A", a)
    mod.set_input(1, f32(2, 2, 2, 2))
    mod.run(C=f32(3, 3, 3, 3), D=f32(4, 4, 4, 4))
    a[:] = 100  # the caller's array is not what the graph reads
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0), f32(4, 4, 4, 4))
    np.testing.assert_array_equal(mod.get_input("A"), f32(1, 1, 1, 1))
    assert not np.shares_memory(mod.get_input("A"), a)


def test_run_with_inputs_and_inputs_persist(mod: graphrt.GraphModule) -> None:
    values = random_inputs(mod)
    mod.run(**values)
    first = mod.get_output(0).copy()
    mod.run()  # inputs stay set between runs
    np.testing.assert_array_equal(mod.get_output(0), first)
    mod.run(D=values["D"] + 1)
    np.testing.assert_array_equal(mod.get_output(0), first + 1)


def test_get_output_is_overwritten_by_the_next_run(mod: graphrt.GraphModule) -> None:
    mod.run(A=f32(1, 1, 1, 1), B=f32(0, 0, 0, 0), C=f32(0, 0, 0, 0), D=f32(0, 0, 0, 0))
    view = mod.get_output(0)
    kept = mod.get_output(0, out=np.empty(4, "float32"))
    mod.run(A=f32(5, 5, 5, 5))
    np.testing.assert_array_equal(view, f32(5, 5, 5, 5))
    np.testing.assert_array_equal(kept, f32(1, 1, 1, 1))


def test_get_output_by_name(mod: graphrt.GraphModule) -> None:
    mod.run(**random_inputs(mod))
    by_name, by_index = mod.get_output("elemwise_add1"), mod.get_output(0)
    assert by_name.ctypes.data == by_index.ctypes.data and by_name.shape == by_index.shape


def test_torch_tensors_are_accepted_as_inputs_and_out_buffers(mod: graphrt.GraphModule) -> None:
    torch = pytest.importorskip("torch")
    values = {name: torch.full((4,), float(i)) for i, name in enumerate("ABCD")}
    mod.run(**values)
    out = torch.empty(4)
    assert mod.get_output(0, out=out) is out
    assert out.tolist() == [0 + 1 - 2 + 3] * 4


@pytest.mark.parametrize(("call", "match"), [
    (lambda m: m.set_input("X", f32(1, 2, 3, 4)),
     r"unknown input 'X'; the graph's inputs are: 'A', 'B', 'C', 'D'"),
    (lambda m: m.set_input(7, f32(1, 2, 3, 4)), r"input index 7 is out of range: .* 4 inputs"),
    (lambda m: m.set_input(-1, f32(1, 2, 3, 4)), r"input index -1 is out of range"),
    (lambda m: m.set_input(True, f32(1, 2, 3, 4)), r"input key must be a name .* given True"),
    (lambda m: m.set_input(1.0, f32(1, 2, 3, 4)), r"input key must be a name .* given 1.0"),
    (lambda m: m.set_input("A", f32(1, 2, 3)),
     r"input 'A' \(node 0\): expected shape \(4,\) float32, given shape \(3,\) float32"),
    (lambda m: m.set_input("A", np.zeros((4, 1), "float32")),
     r"expected shape \(4,\) float32, given shape \(4, 1\) float32"),
    (lambda m: m.set_input("A", np.zeros(4, "float64")),
     r"expected shape \(4,\) float32, given shape \(4,\) float64"),
    (lambda m: m.set_input("A", np.zeros(4, "int32")), r"given shape \(4,\) int32"),
    (lambda m: m.set_input("A", [1.0, 2.0, 3.0, 4.0]), r"given shape \(4,\) float64"),
    (lambda m: m.run(Z=f32(1, 2, 3, 4)), r"unknown input 'Z'"),
    (lambda m: m.get_input("nope"), r"unknown input 'nope'"),
    (lambda m: m.get_output(1), r"output index 1 is out of range: the graph has 1 outputs"),
    (lambda m: m.get_output("nope"), r"unknown output 'nope'; the graph's outputs are: "
                                      r"'elemwise_add1'"),
    (lambda m: m.get_output(0, out=np.empty(3, "float32")),
     r"out buffer for output 0 \('elemwise_add1'\): expected shape \(4,\) float32, given "
     r"shape \(3,\) float32"),
    (lambda m: m.get_output(0, out=np.empty(4, "float16")), r"given shape \(4,\) float16"),
    (lambda m: m.load_params({"W": f32(1, 2, 3, 4)}),
     r"params \['W'\] are not inputs of the graph"),
    (lambda m: m.load_params([1, 2]), r"params must be a TVM params blob \(bytes\) or a mapping"),
])
def test_bad_input_raises_input_error(mod: graphrt.GraphModule, call: object,
                                      match: str) -> None:
    with pytest.raises(graphrt.InputError, match=match):
        call(mod)  # type: ignore[operator]


def test_read_only_out_buffer_is_refused(mod: graphrt.GraphModule) -> None:
    out = np.empty(4, "float32")
    out.setflags(write=False)
    with pytest.raises(graphrt.InputError, match="read-only"):
        mod.get_output(0, out=out)


def test_failed_set_input_changes_nothing(mod: graphrt.GraphModule) -> None:
    mod.set_input(A=f32(1, 1, 1, 1), B=f32(2, 2, 2, 2))
    with pytest.raises(graphrt.InputError, match="input 'B'"):
        mod.set_input(A=f32(9, 9, 9, 9), B=np.zeros(4, "float64"))
    np.testing.assert_array_equal(mod.get_input("A"), f32(1, 1, 1, 1))
    with pytest.raises(graphrt.InputError):
        mod.run(A=f32(9, 9, 9, 9), Z=f32(1, 1, 1, 1))
    np.testing.assert_array_equal(mod.get_input("A"), f32(1, 1, 1, 1))


def test_load_params_from_blob_and_mapping(mod: graphrt.GraphModule) -> None:
    mod.load_params(graphrt.save_params({"C": f32(1, 2, 3, 4), "D": f32(5, 6, 7, 8)}))
    np.testing.assert_array_equal(mod.get_input("C"), f32(1, 2, 3, 4))
    np.testing.assert_array_equal(mod.get_input("D"), f32(5, 6, 7, 8))
    mod.load_params({"D": f32(0, 0, 0, 0)})
    np.testing.assert_array_equal(mod.get_input("D"), f32(0, 0, 0, 0))


def test_load_params_is_all_or_nothing(mod: graphrt.GraphModule) -> None:
    mod.load_params({"C": f32(1, 1, 1, 1)})
    blob = graphrt.save_params({"C": f32(2, 2, 2, 2), "D": np.zeros(3, "float32")})
    with pytest.raises(graphrt.InputError, match="input 'D'"):
        mod.load_params(blob)
    with pytest.raises(graphrt.GraphFormatError, match="truncated"):
        mod.load_params(blob[:-5])
    np.testing.assert_array_equal(mod.get_input("C"), f32(1, 1, 1, 1))


def test_repr_names_the_shape_of_the_module(mod: graphrt.GraphModule) -> None:
    assert repr(mod) == "<GraphModule 9 nodes, 5 steps, 4 inputs, 1 outputs on cpu:0>"


def test_inputs_named_like_set_input_parameters() -> None:
    from builders import GraphBuilder

    g = GraphBuilder()
    key = g.input("key", [2])
    value = g.input("value", [2])
    out = g.op("add0", "add", [key, value], shape=[2])
    mod = graphrt.create(g.build(heads=[out]), {"add": lambda a, b, o: np.add(a, b, out=o)})
    mod.load_params({"key": f32(1, 2), "value": f32(3, 4)})
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0), f32(4, 6))
    mod.run(key=f32(0, 0), value=f32(1, 1))
    np.testing.assert_array_equal(mod.get_output(0), f32(1, 1))
