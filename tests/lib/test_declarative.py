"""Declarative fused functions: the document, its checks, binding at create(), and running."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.devices import backend_for

ADD_RELU = {"inputs": ["a", "b"], "outputs": ["y"], "body": [
    {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
    {"op": "relu", "inputs": ["t"], "outputs": ["y"]}]}
DENSE_SOFTMAX = {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
    {"op": "dense", "inputs": ["x", "w", "b"], "outputs": ["t"]},
    {"op": "softmax", "inputs": ["t"], "outputs": ["y"], "attrs": {"axis": -1}}]}


def document(**functions: Any) -> dict[str, Any]:
    return {"format": "graphrt.lib", "version": 1, "functions": functions}


def add_relu_graph(shape: list[int] | None = None) -> dict[str, Any]:
    g = GraphBuilder()
    a = g.input("a", [2, 3])
    b = g.input("b", [3])
    y = g.op("fused0", "add_relu", [a, b], shape=shape or [2, 3])
    return g.build(heads=[y])


@pytest.mark.parametrize("kind", ["cpu", "sim"])
def test_a_function_runs_like_numpy(kind: str) -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    mod = graphrt.create(add_relu_graph(), lib, graphrt.device(kind))
    a = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    b = np.array([1, 1, 1], "float32")
    mod.run(a=a, b=b)
    out = mod.get_output(0, out=np.empty((2, 3), "float32"))
    np.testing.assert_array_equal(out, np.maximum(a + b, 0))


def test_document_round_trips_without_loss() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU, dense_softmax=DENSE_SOFTMAX))
    again = graphrt.Library.from_json(lib.to_json())
    assert again.spec() == lib.spec()
    assert again.to_json() == lib.to_json()
    assert sorted(again) == ["add_relu", "dense_softmax"]


def test_functions_mix_with_python_kernels() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    lib.register("double", lambda x, out: np.multiply(x, 2, out=out))
    g = GraphBuilder()
    a, b = g.input("a", [3]), g.input("b", [3])
    y = g.op("f", "add_relu", [a, b], shape=[3])
    z = g.op("d", "double", [y], shape=[3])
    mod = graphrt.create(g.build(heads=[z]), lib)
    mod.run(a=np.array([1, -5, 2], "float32"), b=np.ones(3, "float32"))
    np.testing.assert_array_equal(mod.get_output(0), [4, 0, 6])
    assert b"double" not in lib.to_json()  # Python kernels are not serialized


def test_a_device_kernel_overrides_a_function_on_its_device() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    lib.register("add_relu", lambda a, b, out: out.fill(7), device="sim")
    on_sim = graphrt.create(add_relu_graph(), lib, graphrt.sim(0))
    on_cpu = graphrt.create(add_relu_graph(), lib, graphrt.cpu(0))
    for mod in (on_sim, on_cpu):
        mod.run(a=np.ones((2, 3), "float32"), b=np.ones(3, "float32"))
    assert float(on_sim.get_output(0, out=np.empty((2, 3), "float32"))[0, 0]) == 7.0
    assert float(on_cpu.get_output(0)[0, 0]) == 2.0


def test_intermediates_are_allocated_at_create_not_per_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    mod = graphrt.create(add_relu_graph(), lib)
    calls: list[int] = []
    backend = backend_for(graphrt.cpu(0))
    original = backend.allocate
    monkeypatch.setattr(backend, "allocate", lambda n: calls.append(n) or original(n))
    for _ in range(3):
        mod.run(a=np.ones((2, 3), "float32"), b=np.ones(3, "float32"))
    assert calls == []


def mutate(spec: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    target = spec
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return spec


@pytest.mark.parametrize(("function", "match"), [
    (mutate(ADD_RELU, ["body", 1, "op"], "relu6"),
     r"lib function 'f' step 1: unknown op 'relu6' \(known: .*add"),
    (mutate(ADD_RELU, ["body", 1, "attrs"], {"alpha": 1}),
     r"lib function 'f' step 1 \(op 'relu'\): bad attributes: attr alpha: Extra inputs"),
    (mutate(DENSE_SOFTMAX, ["body", 1, "attrs"], {"axis": "last"}),
     r"step 1 \(op 'softmax'\): bad attributes: attr axis: Input should be a valid integer"),
    (mutate(ADD_RELU, ["body", 0, "inputs"], ["a"]),
     r"step 0 \(op 'add'\): takes 2 inputs, given 1"),
    (mutate(ADD_RELU, ["body", 0, "outputs"], ["t", "u"]),
     r"step 0 \(op 'add'\): makes 1 outputs, given 2 names"),
    (mutate(ADD_RELU, ["body", 1, "inputs"], ["nope"]),
     r"step 1 \(op 'relu'\): reads 'nope' before anything defines it"),
    (mutate(ADD_RELU, ["body", 1, "outputs"], ["t"]),
     r"step 1 \(op 'relu'\): writes 't', which is already defined"),
    (mutate(ADD_RELU, ["body", 1, "outputs"], ["a"]), r"writes 'a', which is already defined"),
    (mutate(ADD_RELU, ["outputs"], ["z"]), r"lib function 'f': output 'z' is never written"),
    (mutate(ADD_RELU, ["inputs"], ["a", "a", "b"]), r"input 'a' is listed twice"),
])
def test_malformed_functions_are_refused_at_load(function: dict[str, Any], match: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=match):
        graphrt.Library.from_json(document(f=function))


@pytest.mark.parametrize(("source", "match"), [
    ("{not json", "lib is not valid JSON"),
    ({"format": "graphrt.lib", "version": 2, "functions": {}},
     "version: Value error, unsupported lib version 2"),
    ({"format": "tvm.lib", "functions": {}}, "format: Input should be 'graphrt.lib'"),
    ({"functions": {"f": {"inputs": [], "outputs": ["y"]}}}, r"functions.f.body: Field required"),
    ({"functions": {"f": dict(ADD_RELU, extra=1)}}, "functions.f.extra: Extra inputs"),
    ("/nonexistent/lib.json", "cannot read lib file"),
])
def test_malformed_documents_are_refused(source: Any, match: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=match):
        graphrt.Library.from_json(source)


def test_loading_is_all_or_nothing() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    bad = mutate(ADD_RELU, ["body", 0, "op"], "nope")
    with pytest.raises(graphrt.GraphFormatError):
        lib.load_functions(document(ok=DENSE_SOFTMAX, bad=bad))
    assert sorted(lib) == ["add_relu"]


def test_type_mismatch_with_the_graph_is_found_at_create() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"lib function 'add_relu' at node 2 'fused0': output 'y' is "
                             r"float32\[2, 3\] but the graph's entry is float32\[3, 2\]"):
        graphrt.create(add_relu_graph(shape=[3, 2]), lib)


def test_a_shape_function_refusing_the_nodes_inputs_names_the_step() -> None:
    lib = graphrt.Library.from_json(document(dense_softmax=DENSE_SOFTMAX))
    g = GraphBuilder()
    x, w, b = g.input("x", [2, 5]), g.input("w", [4, 6]), g.input("b", [4])
    y = g.op("head", "dense_softmax", [x, w, b], shape=[2, 4])
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"lib function 'dense_softmax' step 0 \(op 'dense'\) at node 3 "
                             r"'head': .*\(inputs: float32\[2, 5\], float32\[4, 6\], "
                             r"float32\[4\]\)"):
        graphrt.create(g.build(heads=[y]), lib)


def test_node_arity_must_match_the_function() -> None:
    lib = graphrt.Library.from_json(document(add_relu=ADD_RELU))
    g = GraphBuilder()
    a = g.input("a", [3])
    y = g.op("f", "add_relu", [a], shape=[3])
    with pytest.raises(graphrt.GraphFormatError, match=r"takes 2 inputs and makes 1 outputs, "
                                                       r"but the node has 1 and 1"):
        graphrt.create(g.build(heads=[y]), lib)


def test_define_programmatically() -> None:
    lib = graphrt.Library()
    lib.define("add_relu", ADD_RELU)
    assert "add_relu" in lib and len(lib) == 1
    with pytest.raises(ValueError, match="function name"):
        lib.define("__nop", ADD_RELU)


def test_define_refuses_a_malformed_mapping_with_graphrts_error() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"functions.f.body: Field required"):
        graphrt.Library().define("f", {"inputs": ["a"], "outputs": ["y"]})
