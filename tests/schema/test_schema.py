"""Graph JSON parsing and validation: every malformed graph is a GraphFormatError naming where."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import graphrt
from graphrt.schema import GraphSpec, load_graph, parse_spec

Mutation = Callable[[dict[str, Any]], None]


def valid_graph() -> dict[str, Any]:
    """Two inputs, ``add0 = add(x, y)``, and a two-output ``split0 = split(add0)``.

    Entries: 0 x, 1 y, 2 add0, 3 split0:0, 4 split0:1.
    """
    return {
        "nodes": [
            {"op": "null", "name": "x", "inputs": []},
            {"op": "null", "name": "y", "inputs": []},
            {"op": "tvm_op", "name": "add0", "inputs": [[0, 0, 0], [1, 0, 0]],
             "attrs": {"func_name": "add", "num_inputs": "2", "num_outputs": "1",
                       "flatten_data": "0"}},
            {"op": "tvm_op", "name": "split0", "inputs": [[2, 0, 0]],
             "attrs": {"func_name": "split", "num_inputs": "1", "num_outputs": "2",
                       "flatten_data": "0"}},
        ],
        "arg_nodes": [0, 1],
        "node_row_ptr": [0, 1, 2, 3, 5],
        "heads": [[3, 0, 0], [3, 1, 0]],
        "attrs": {
            "dltype": ["list_str", ["float32"] * 5],
            "shape": ["list_shape", [[2, 4], [2, 4], [2, 4], [1, 4], [1, 4]]],
            "storage_id": ["list_int", [0, 1, 2, 3, 4]],
            "device_index": ["list_int", [1] * 5],
        },
    }


def mutated(mutation: Mutation, base: Callable[[], dict[str, Any]] = valid_graph
            ) -> dict[str, Any]:
    graph = copy.deepcopy(base())
    mutation(graph)
    return graph


def with_builtin(func_name: str, *, shape: list[int] | None = None, sid: int = 2,
                 inputs: list[list[int]] | None = None, name: str = "builtin0"
                 ) -> dict[str, Any]:
    """The valid graph plus node 4 ``name`` calling ``func_name`` on add0 (entry 5)."""
    graph = valid_graph()
    refs = inputs if inputs is not None else [[2, 0, 0]]
    graph["nodes"].append({"op": "tvm_op", "name": name, "inputs": refs, "attrs": {
        "func_name": func_name, "num_inputs": str(len(refs)), "num_outputs": "1",
        "flatten_data": "0"}})
    graph["node_row_ptr"].append(6)
    graph["heads"] = [[4, 0, 0]]
    graph["attrs"]["dltype"][1].append("float32")
    graph["attrs"]["shape"][1].append(shape if shape is not None else [8])
    graph["attrs"]["storage_id"][1].append(sid)
    graph["attrs"]["device_index"][1].append(1)
    return graph


# -- helpers for mutations -------------------------------------------------------------------

def setter(*path: Any, value: Any) -> Mutation:
    def mutate(graph: dict[str, Any]) -> None:
        target = graph
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def deleter(*path: Any) -> Mutation:
    def mutate(graph: dict[str, Any]) -> None:
        target = graph
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


def column(name: str, eid: int, value: Any) -> Mutation:
    return setter("attrs", name, 1, eid, value=value)


def op_attr(nid: int, key: str, value: Any) -> Mutation:
    return setter("nodes", nid, "attrs", key, value=value)


def truncate_column(name: str) -> Mutation:
    return lambda graph: graph["attrs"][name][1].pop()


def retag(name: str, tag: str) -> Mutation:
    return setter("attrs", name, 0, value=tag)


# -- the valid graph and its positive variants -----------------------------------------------

def test_valid_graph_loads() -> None:
    graph = load_graph(valid_graph())
    assert len(graph.nodes) == 4
    assert len(graph.entries) == 5
    assert graph.arg_nodes == (0, 1)
    assert graph.heads == (3, 4)
    assert graph.input_names == ("x", "y")
    assert graph.nodes[2].func_name == "add"
    assert graph.nodes[2].inputs == (0, 1)
    assert graph.nodes[3].outputs == (3, 4)
    assert graph.nodes[0].func_name is None
    assert not graph.nodes[2].flatten_data
    entry = graph.entries[4]
    assert (entry.eid, entry.nid, entry.index, entry.shape, entry.sid) == (4, 3, 1, (1, 4), 4)
    assert entry.dtype.name == "float32"
    assert entry.device_type == 1
    assert entry.nbytes == 16


def test_output_names_single_and_multi_output() -> None:
    graph = load_graph(valid_graph())
    assert graph.output_names == ("split0:0", "split0:1")
    single = load_graph(mutated(setter("heads", value=[[2, 0, 0], [3, 1, 0], [0, 0]])))
    assert single.output_names == ("add0", "split0:1", "x")


def test_graph_is_immutable() -> None:
    graph = load_graph(valid_graph())
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.nodes = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph.nodes[2].name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph.entries[0].sid = 7  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.nodes[2].attrs["func_name"] = "sub"  # type: ignore[index]
    assert isinstance(graph.nodes, tuple)
    assert isinstance(graph.entries, tuple)
    assert graph.nodes[2].attrs["func_name"] == "add"


def test_spec_is_frozen() -> None:
    spec = parse_spec(valid_graph())
    assert isinstance(spec, GraphSpec)
    with pytest.raises(Exception) as info:  # pydantic's frozen-instance error
        spec.arg_nodes = []  # type: ignore[misc]
    assert not isinstance(info.value, KeyError | IndexError)


def test_metadata_key_is_tolerated() -> None:
    graph = mutated(setter("metadata", value={"anything": [1, "two"]}))
    assert load_graph(graph).input_names == ("x", "y")


@pytest.mark.parametrize("kind", ["str", "bytes", "bytearray", "memoryview", "path", "str_path",
                                  "dict", "spec"])
def test_sources(kind: str, tmp_path: Path) -> None:
    text = json.dumps(valid_graph(), indent=1)
    file = tmp_path / "graph.json"
    file.write_text(text)
    sources: dict[str, Any] = {
        "str": text,
        "bytes": text.encode(),
        "bytearray": bytearray(text.encode()),
        "memoryview": memoryview(text.encode()),
        "path": file,
        "str_path": str(file),
        "dict": valid_graph(),
        "spec": parse_spec(valid_graph()),
    }
    assert load_graph(sources[kind]) == load_graph(valid_graph())


def test_load_graph_passes_a_graph_through() -> None:
    graph = load_graph(valid_graph())
    assert load_graph(graph) is graph


def test_str_with_leading_whitespace_is_json() -> None:
    assert load_graph("\n  " + json.dumps(valid_graph())).input_names == ("x", "y")


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_missing_file(tmp_path: Path, as_path: bool) -> None:
    missing = tmp_path / "no_such_graph.json"
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"cannot read graph file .*no_such_graph\.json.*No such file"):
        load_graph(missing if as_path else str(missing))


def test_directory_is_not_a_graph(tmp_path: Path) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"cannot read graph file"):
        load_graph(tmp_path)


# Path.read_bytes raises ValueError (not OSError) for an embedded NUL byte.
@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_path_with_nul_byte(as_path: bool) -> None:
    source = "graph\x00.json"
    with pytest.raises(graphrt.GraphFormatError, match=r"cannot read graph file"):
        load_graph(Path(source) if as_path else source)


# int() of a str of more than 4300 digits raises ValueError; it must not escape.
@pytest.mark.parametrize("key, nid, name", [("num_outputs", 3, "split0"),
                                            ("num_inputs", 2, "add0")])
def test_count_with_too_many_digits(key: str, nid: int, name: str) -> None:
    with pytest.raises(graphrt.GraphFormatError,
                       match=rf"node {nid} '{name}': attr '{key}' must be a non-negative "
                       r"integer string, given '9+'"):
        load_graph(mutated(op_attr(nid, key, "9" * 5000)))


@pytest.mark.parametrize("source", [123, 1.5, None, ["nodes"]], ids=["int", "float", "None",
                                                                   "list"])
def test_source_of_wrong_type(source: Any) -> None:
    with pytest.raises(graphrt.ArgumentError, match=r"load_graph\(source\): expected a graph as "
                       r"JSON text, bytes, a path or a dict, given"):
        load_graph(source)


def test_parse_spec_refuses_a_built_graph() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"not an already built Graph"):
        parse_spec(load_graph(valid_graph()))


def test_parse_spec_checks_form_only() -> None:
    # A bad reference is a meaning problem: parse_spec accepts it, load_graph refuses it.
    graph = mutated(setter("nodes", 2, "inputs", 0, value=[9, 0, 0]))
    assert parse_spec(graph).nodes[2].inputs[0] == [9, 0, 0]
    with pytest.raises(graphrt.GraphFormatError, match=r"node 2 'add0' input 0: refers to node 9"):
        load_graph(graph)


def test_legacy_attr_spelling() -> None:
    def rename(graph: dict[str, Any]) -> None:
        graph["nodes"][2]["attr"] = graph["nodes"][2].pop("attrs")
    graph = load_graph(mutated(rename))
    assert graph.nodes[2].func_name == "add"
    assert graph.nodes[2].attrs["num_inputs"] == "2"


def test_control_deps_and_extra_node_attrs_are_kept() -> None:
    def extend(graph: dict[str, Any]) -> None:
        graph["nodes"][2]["control_deps"] = []
        graph["nodes"][2]["attrs"]["hash"] = "abc123"
        graph["nodes"][2]["attrs"]["data_layout"] = "NCHW"
    node = load_graph(mutated(extend)).nodes[2]
    assert node.attrs["hash"] == "abc123"
    assert node.attrs["data_layout"] == "NCHW"


def test_flatten_data_one() -> None:
    assert load_graph(mutated(op_attr(2, "flatten_data", "1"))).nodes[2].flatten_data


def test_two_field_refs_and_version_one() -> None:
    def refs(graph: dict[str, Any]) -> None:
        graph["nodes"][2]["inputs"] = [[0, 0], [1, 0, 1]]
        graph["nodes"][3]["inputs"] = [[2, 0]]
        graph["heads"] = [[3, 0], [3, 1, 1]]
    graph = load_graph(mutated(refs))
    assert graph.nodes[2].inputs == (0, 1)
    assert graph.nodes[3].inputs == (2,)
    assert graph.heads == (3, 4)


@pytest.mark.parametrize("scope", ["global", ""])
def test_storage_scope_global(scope: str) -> None:
    graph = load_graph(mutated(setter("attrs", "storage_scope", value=["list_str", [scope] * 5])))
    assert all(entry.scope == "" for entry in graph.entries)


def test_storage_scope_other_is_kept_then_refused_by_the_planner() -> None:
    graph = mutated(setter("attrs", "storage_scope",
                           value=["list_str", ["global"] * 4 + ["texture"]]))
    assert load_graph(graph).entries[4].scope == "texture"
    lib = {"add": lambda *args: None, "split": lambda *args: None}
    with pytest.raises(graphrt.PlacementError, match=r"entry 4 .*storage scope 'texture'"):
        graphrt.create(graph, lib)


def test_scalar_shape() -> None:
    def scalar(graph: dict[str, Any]) -> None:
        graph["attrs"]["shape"][1][1] = []
        graph["attrs"]["dltype"][1][1] = "int16"
    entry = load_graph(mutated(scalar)).entries[1]
    assert entry.shape == ()
    assert entry.nbytes == entry.dtype.itemsize == 2


@pytest.mark.parametrize("dtype, itemsize", [
    ("float16", 2), ("float32", 4), ("float64", 8), ("bfloat16", 2), ("int8", 1), ("int16", 2),
    ("int32", 4), ("int64", 8), ("uint8", 1), ("uint16", 2), ("uint32", 4), ("uint64", 8),
    ("bool", 1),
])
def test_supported_dtypes(dtype: str, itemsize: int) -> None:
    entry = load_graph(mutated(column("dltype", 0, dtype))).entries[0]
    assert entry.dtype.name == dtype
    assert entry.nbytes == 8 * itemsize


def test_no_device_index_column() -> None:
    graph = load_graph(mutated(deleter("attrs", "device_index")))
    assert all(entry.device_type is None for entry in graph.entries)


@pytest.mark.parametrize("name, tag", [("dtype", "list_int"), ("dtype", "size_t"),
                                       ("legacy_sizes", "size_t")],
                         ids=["dtype_list_int", "dtype_size_t", "other_size_t"])
def test_legacy_columns_are_skipped(name: str, tag: str) -> None:
    graph = load_graph(mutated(setter("attrs", name, value=[tag, [0] * 5])))
    assert all(entry.dtype.name == "float32" for entry in graph.entries)


def test_attrs_column_order_does_not_matter() -> None:
    graph = valid_graph()
    graph["attrs"] = dict(reversed(list(graph["attrs"].items())))
    graph = dict(reversed(list(graph.items())))
    assert load_graph(graph) == load_graph(valid_graph())


def test_create_with_malformed_graph() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"node 2 'add0': num_inputs is 3"):
        graphrt.create(mutated(op_attr(2, "num_inputs", "3")), {"add": print, "split": print})


# -- malformed graphs --------------------------------------------------------------------------

TOP_KEYS = ["nodes", "arg_nodes", "node_row_ptr", "heads", "attrs"]

MALFORMED: list[Any] = [
    # top level
    *[pytest.param(deleter(key), rf"malformed graph JSON: {key}: Field required",
                   id=f"missing_{key}") for key in TOP_KEYS],
    pytest.param(setter("bogus", value=1), r"bogus: Extra inputs are not permitted",
                 id="unknown_top_level_key"),
    pytest.param(setter("nodes", value={"0": {}}), r"nodes: Input should be a valid list",
                 id="nodes_not_a_list"),
    pytest.param(setter("attrs", value=[]), r"attrs: Input should be a valid dictionary",
                 id="attrs_not_an_object"),
    # nodes: form
    pytest.param(setter("nodes", 2, "bogus", value=1),
                 r"node 2 'add0' field 'bogus': Extra inputs are not permitted",
                 id="unknown_node_key"),
    pytest.param(setter("nodes", 0, "op", value="relu"),
                 r"node 0 'x' field 'op': Input should be 'null' or 'tvm_op' \(given 'relu'\)",
                 id="op_unknown"),
    pytest.param(deleter("nodes", 1, "op"), r"node 1 'y' field 'op': Field required",
                 id="op_missing"),
    pytest.param(deleter("nodes", 3, "name"), r"node 3 field 'name': Field required",
                 id="name_missing"),
    pytest.param(setter("nodes", 3, "name", value=7),
                 r"node 3 field 'name': Input should be a valid string \(given '7'\)",
                 id="name_not_a_string"),
    pytest.param(setter("nodes", 1, value=None),
                 r"node 1: Input should be a valid dictionary", id="node_not_an_object"),
    pytest.param(op_attr(2, "num_inputs", 2),
                 r"node 2 'add0' field 'attrs.num_inputs': Input should be a valid string "
                 r"\(given '2'\)", id="attr_value_int"),
    pytest.param(op_attr(3, "flatten_data", False),
                 r"node 3 'split0' field 'attrs.flatten_data': Input should be a valid string",
                 id="attr_value_bool"),
    # nodes: op attrs
    *[pytest.param(deleter("nodes", 2, "attrs", key),
                   rf"node 2 'add0': op node lacks required attrs \['{key}'\]",
                   id=f"missing_attr_{key}")
      for key in ("func_name", "num_inputs", "num_outputs", "flatten_data")],
    pytest.param(deleter("nodes", 3, "attrs"),
                 r"node 3 'split0': op node lacks required attrs \['func_name', 'num_inputs', "
                 r"'num_outputs', 'flatten_data'\]", id="op_without_attrs"),
    *[pytest.param(op_attr(2, "num_inputs", text),
                   rf"node 2 'add0': attr 'num_inputs' must be a non-negative integer string, "
                   rf"given '{text}'", id=f"num_inputs_{ident}")
      for ident, text in [("word", "two"), ("negative", "-2"), ("float", "2.0"),
                          ("empty", ""), ("spaced", " 2")]],
    pytest.param(op_attr(3, "num_outputs", "2x"),
                 r"node 3 'split0': attr 'num_outputs' must be a non-negative integer string, "
                 r"given '2x'", id="num_outputs_not_integer"),
    pytest.param(op_attr(3, "num_outputs", "\u0662"),
                 r"node 3 'split0': attr 'num_outputs' must be a non-negative integer string",
                 id="num_outputs_arabic_digit"),
    pytest.param(op_attr(2, "flatten_data", "2"),
                 r"node 2 'add0': attr 'flatten_data' must be \"0\" or \"1\", given '2'",
                 id="flatten_data_2"),
    pytest.param(op_attr(2, "flatten_data", "true"),
                 r"node 2 'add0': attr 'flatten_data' must be \"0\" or \"1\", given 'true'",
                 id="flatten_data_true"),
    pytest.param(op_attr(2, "num_inputs", "3"),
                 r"node 2 'add0': num_inputs is 3 but the node lists 2 inputs",
                 id="num_inputs_disagrees"),
    pytest.param(op_attr(3, "num_inputs", "0"),
                 r"node 3 'split0': num_inputs is 0 but the node lists 1 inputs",
                 id="num_inputs_zero_disagrees"),
    # nodes: inputs
    pytest.param(setter("nodes", 2, "inputs", 1, value=[3, 0, 0]),
                 r"node 2 'add0' input 1: refers to node 3, which is not an earlier node "
                 r"\(valid: 0\.\.1\)", id="input_later_node"),
    pytest.param(setter("nodes", 2, "inputs", 0, value=[2, 0, 0]),
                 r"node 2 'add0' input 0: refers to node 2, which is not an earlier node",
                 id="input_self"),
    pytest.param(setter("nodes", 3, "inputs", 0, value=[42, 0, 0]),
                 r"node 3 'split0' input 0: refers to node 42, which is not an earlier node "
                 r"\(valid: 0\.\.2\)", id="input_nonexistent_node"),
    pytest.param(setter("nodes", 3, "inputs", 0, value=[-1, 0, 0]),
                 r"node 3 'split0' input 0: refers to node -1", id="input_negative_node"),
    pytest.param(setter("nodes", 3, "inputs", 0, value=[2, 1, 0]),
                 r"node 3 'split0' input 0: refers to output 1 of node 2 'add0', which has "
                 r"1 output\(s\)", id="input_nonexistent_output"),
    pytest.param(setter("nodes", 3, "inputs", 0, value=[1, -1, 0]),
                 r"node 3 'split0' input 0: refers to output -1 of node 1 'y'",
                 id="input_negative_output"),
    pytest.param(setter("nodes", 2, "inputs", 1, value=[1]),
                 r"node 2 'add0' field 'inputs\.1': List should have at least 2 items",
                 id="input_ref_1_field"),
    pytest.param(setter("nodes", 2, "inputs", 0, value=[0, 0, 0, 0]),
                 r"node 2 'add0' field 'inputs\.0': List should have at most 3 items",
                 id="input_ref_4_fields"),
    pytest.param(setter("nodes", 2, "inputs", 0, value=[True, 0, 0]),
                 r"node 2 'add0' field 'inputs\.0\.0': Input should be a valid integer "
                 r"\(given 'True'\)", id="input_ref_bool"),
    pytest.param(setter("nodes", 2, "inputs", 0, value=[0, "0", 0]),
                 r"node 2 'add0' field 'inputs\.0\.1': Input should be a valid integer",
                 id="input_ref_str"),
    pytest.param(setter("nodes", 2, "inputs", 0, value=[0, 0.0, 0]),
                 r"node 2 'add0' field 'inputs\.0\.1': Input should be a valid integer",
                 id="input_ref_float"),
    pytest.param(setter("nodes", 1, "inputs", value=[[0, 0, 0]]),
                 r"node 1 'y': an input \(null\) node cannot have inputs",
                 id="null_node_with_inputs"),
    # node_row_ptr
    pytest.param(setter("node_row_ptr", value=[0, 1, 2, 3]),
                 r"node_row_ptr: expected 5 values \(nodes \+ 1\), given 4",
                 id="row_ptr_too_short"),
    pytest.param(setter("node_row_ptr", value=[0, 1, 2, 3, 5, 6]),
                 r"node_row_ptr: expected 5 values \(nodes \+ 1\), given 6",
                 id="row_ptr_too_long"),
    pytest.param(setter("node_row_ptr", 4, value=4),
                 r"node_row_ptr: value 4 is 4, expected 5 \(the running sum",
                 id="row_ptr_wrong_last"),
    pytest.param(setter("node_row_ptr", 2, value=1),
                 r"node_row_ptr: value 2 is 1, expected 2", id="row_ptr_wrong_middle"),
    pytest.param(setter("node_row_ptr", 0, value=1),
                 r"node_row_ptr: value 0 is 1, expected 0", id="row_ptr_wrong_first"),
    pytest.param(setter("node_row_ptr", 1, value=True),
                 r"node_row_ptr\.1: Input should be a valid integer", id="row_ptr_bool"),
    # columns: length and tag
    *[pytest.param(truncate_column(name),
                   rf"attrs column '{name}': expected one value per entry \(5\), given 4",
                   id=f"short_{name}")
      for name in ("dltype", "shape", "storage_id", "device_index")],
    pytest.param(lambda graph: graph["attrs"]["storage_id"][1].append(5),
                 r"attrs column 'storage_id': expected one value per entry \(5\), given 6",
                 id="long_storage_id"),
    pytest.param(setter("attrs", "storage_scope", value=["list_str", ["global"] * 3]),
                 r"attrs column 'storage_scope': expected one value per entry \(5\), given 3",
                 id="short_storage_scope"),
    *[pytest.param(retag(name, tag), rf"attrs\.{name}\.0: Input should be '{right}' "
                   rf"\(given '{tag}'\)", id=f"tag_{name}")
      for name, tag, right in [("dltype", "list_int", "list_str"),
                               ("shape", "list_int", "list_shape"),
                               ("storage_id", "list_str", "list_int"),
                               ("device_index", "size_t", "list_int")]],
    pytest.param(setter("attrs", "dltype", value=["list_str"]), r"attrs\.dltype",
                 id="column_without_values"),
    pytest.param(deleter("attrs", "dltype"), r"attrs\.dltype: Field required",
                 id="missing_dltype"),
    pytest.param(deleter("attrs", "shape"), r"attrs\.shape: Field required", id="missing_shape"),
    pytest.param(deleter("attrs", "storage_id"), r"attrs\.storage_id: Field required",
                 id="missing_storage_id"),
    # columns: values
    *[pytest.param(column("dltype", 3, bad),
                   rf"entry 3 \(output 0 of node 3 'split0'\): unsupported dtype '{bad}' "
                   r"\(supported: .*float32", id=f"dltype_{bad}")
      for bad in ("float8", "int3", "float32x4", "")],
    pytest.param(column("dltype", 1, 32),
                 r"attrs column 'dltype' entry 1: Input should be a valid string",
                 id="dltype_not_a_string"),
    pytest.param(column("shape", 4, [1, -4]),
                 r"entry 4 \(output 1 of node 3 'split0'\): shape \[1, -4\] has a negative "
                 r"dimension", id="negative_dim"),
    pytest.param(column("shape", 0, [2, 4.0]),
                 r"attrs column 'shape' entry 0 dimension 1: Input should be a valid integer "
                 r"\(given '4\.0'\)", id="float_dim"),
    pytest.param(column("shape", 0, [2, True]),
                 r"attrs column 'shape' entry 0 dimension 1: Input should be a valid integer "
                 r"\(given 'True'\)", id="bool_dim"),
    pytest.param(column("shape", 2, 8),
                 r"attrs column 'shape' entry 2: Input should be a valid list",
                 id="shape_not_a_list"),
    pytest.param(column("storage_id", 2, -1),
                 r"entry 2 \(output 0 of node 2 'add0'\): storage_id is -1, must be >= 0",
                 id="negative_storage_id"),
    pytest.param(column("storage_id", 2, True),
                 r"attrs column 'storage_id' entry 2: Input should be a valid integer",
                 id="bool_storage_id"),
    pytest.param(column("storage_id", 2, "2"),
                 r"attrs column 'storage_id' entry 2: Input should be a valid integer",
                 id="str_storage_id"),
    *[pytest.param(column("device_index", 1, code),
                   rf"entry 1 \(output 0 of node 1 'y'\): device_index is {code}; it must be a "
                   r"DLPack device type code", id=f"device_index_{code}")
      for code in (0, -1)],
    pytest.param(setter("attrs", "storage_scope", value=["list_str", [0] * 5]),
                 r"attrs column 'storage_scope' entry 0: Input should be a valid string",
                 id="scope_not_a_string"),
    # legacy / unknown columns
    pytest.param(setter("attrs", "foo", value=["list_str", ["a"] * 5]),
                 r"unknown attrs column 'foo': only 'list_int' or 'size_t' columns can be "
                 r"skipped", id="unknown_column_list_str"),
    pytest.param(setter("attrs", "dtype", value=["list_shape", [[1]] * 5]),
                 r"unknown attrs column 'dtype': only 'list_int' or 'size_t'",
                 id="legacy_column_list_shape"),
    pytest.param(setter("attrs", "dtype", value=[0] * 5),
                 r"unknown attrs column 'dtype': only 'list_int' or 'size_t'",
                 id="legacy_column_untagged"),
    # arg_nodes
    pytest.param(setter("arg_nodes", value=[0, 1, 2]),
                 r"arg_nodes\[2\]: node 2 'add0' is an op node, not an input \(null\) node",
                 id="arg_node_is_op"),
    pytest.param(setter("arg_nodes", value=[0, 1, 9]),
                 r"arg_nodes\[2\]: node id 9 does not exist \(the graph has 4 nodes\)",
                 id="arg_node_nonexistent"),
    pytest.param(setter("arg_nodes", value=[-1, 0, 1]),
                 r"arg_nodes\[0\]: node id -1 does not exist", id="arg_node_negative"),
    pytest.param(setter("arg_nodes", value=[True, 1]),
                 r"arg_nodes\.0: Input should be a valid integer \(given 'True'\)",
                 id="arg_node_bool"),
    pytest.param(setter("nodes", 1, "name", value="x"),
                 r"arg_nodes\[1\]: node 1 'x' has the same name as input node 0; input names "
                 r"must be unique", id="duplicate_input_names"),
    pytest.param(setter("arg_nodes", value=[0, 1, 1]),
                 r"arg_nodes\[2\]: node 1 'y' has the same name as input node 1",
                 id="arg_node_listed_twice"),
    pytest.param(setter("arg_nodes", value=[0]),
                 r"node 1 'y': input \(null\) node is not listed in arg_nodes",
                 id="null_node_not_in_arg_nodes"),
    # heads
    pytest.param(setter("heads", 0, value=[9, 0, 0]),
                 r"heads\[0\]: refers to node 9, which is not an earlier node \(valid: 0\.\.3\)",
                 id="head_nonexistent_node"),
    pytest.param(setter("heads", 1, value=[3, 2, 0]),
                 r"heads\[1\]: refers to output 2 of node 3 'split0', which has 2 output\(s\)",
                 id="head_nonexistent_output"),
    pytest.param(setter("heads", 1, value=[3]),
                 r"heads\.1: List should have at least 2 items", id="head_1_field"),
    pytest.param(setter("heads", 1, value=[3, 1, 0, 0]),
                 r"heads\.1: List should have at most 3 items", id="head_4_fields"),
    pytest.param(setter("heads", 0, value=[3, False, 0]),
                 r"heads\.0\.1: Input should be a valid integer", id="head_bool"),
]


@pytest.mark.parametrize("mutation, match", MALFORMED)
def test_malformed(mutation: Mutation, match: str) -> None:
    graph = mutated(mutation)
    with pytest.raises(graphrt.GraphFormatError, match=match):
        load_graph(graph)


@pytest.mark.parametrize("mutation, match", [
    p for p in MALFORMED if p.id in ("missing_nodes", "op_unknown", "input_later_node",
                                     "negative_dim", "duplicate_input_names")])
def test_malformed_from_json_text(mutation: Mutation, match: str) -> None:
    text = json.dumps(mutated(mutation))
    with pytest.raises(graphrt.GraphFormatError, match=match):
        load_graph(text)
    with pytest.raises(graphrt.GraphFormatError, match=match):
        load_graph(text.encode())


@pytest.mark.parametrize("text, match", [
    ("{not json", r"graph is not valid JSON"),
    ('{"nodes": [', r"graph is not valid JSON"),
    ("[1, 2]", r"graph JSON must be an object, given list"),
    ("[]", r"graph JSON must be an object, given list"),
    (b'"nodes"', r"graph JSON must be an object, given str"),
    (b"42", r"graph JSON must be an object, given int"),
    (b"null", r"graph JSON must be an object, given NoneType"),
    (b"\xff\xfe{}", r"graph is not valid JSON"),
    (b"", r"graph is not valid JSON"),
    ("{}", r"malformed graph JSON: nodes: Field required"),
], ids=["truncated_object", "truncated_list", "list", "empty_list", "string", "number", "null",
        "not_utf8", "empty_bytes", "empty_object"])
def test_invalid_json(text: str | bytes, match: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=match):
        load_graph(text)


def test_invalid_json_file(tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text('{"nodes": [}')
    with pytest.raises(graphrt.GraphFormatError, match=r"graph is not valid JSON"):
        load_graph(file)


def test_validation_error_lists_at_most_five_problems() -> None:
    graph = mutated(retag("storage_id", "list_str"))
    graph["attrs"]["storage_id"][1] = ["a"] * 20
    with pytest.raises(graphrt.GraphFormatError, match=r"and \d+ more problem\(s\)"):
        load_graph(graph)


# -- built-ins ---------------------------------------------------------------------------------

def test_nop_and_copy_are_accepted() -> None:
    nop = load_graph(with_builtin("__nop", shape=[8], sid=2, name="reshape_nop"))
    assert nop.nodes[4].func_name == "__nop"
    assert nop.entries[5].sid == nop.entries[2].sid
    assert nop.output_names == ("reshape_nop",)
    copied = load_graph(with_builtin("__copy", shape=[4, 2], sid=5, name="copy0"))
    assert copied.nodes[4].inputs == (2,)


@pytest.mark.parametrize("graph, match", [
    pytest.param(with_builtin("__nop", shape=[8], sid=5, name="reshape_nop"),
                 r"node 4 'reshape_nop': __nop output 5 uses storage_id 5 but its input 2 uses "
                 r"2; a __nop must alias its input's storage", id="nop_other_sid"),
    pytest.param(with_builtin("__nop", shape=[9], sid=2, name="reshape_nop"),
                 r"node 4 'reshape_nop': __nop input is float32\[2, 4\] but its output is "
                 r"float32\[9\]", id="nop_other_size"),
    pytest.param(with_builtin("__copy", shape=[8], sid=5, name="copy0",
                              inputs=[[2, 0, 0], [0, 0, 0]]),
                 r"node 4 'copy0': __copy takes exactly 1 input and 1 output, given 2 and 1",
                 id="copy_two_inputs"),
    pytest.param(with_builtin("__copy", shape=[3, 3], sid=5, name="copy0"),
                 r"node 4 'copy0': __copy input is float32\[2, 4\] but its output is "
                 r"float32\[3, 3\]; both must hold the same data", id="copy_other_size"),
    pytest.param(mutated(column("dltype", 5, "int32"),
                         lambda: with_builtin("__copy", shape=[2, 4], sid=5, name="copy0")),
                 r"node 4 'copy0': __copy input is float32\[2, 4\] but its output is "
                 r"int32\[2, 4\]", id="copy_other_dtype"),
    pytest.param(mutated(setter("nodes", 3, "attrs", "func_name", value="__copy")),
                 r"node 3 'split0': __copy takes exactly 1 input and 1 output, given 1 and 2",
                 id="copy_two_outputs"),
])
def test_malformed_builtin(graph: dict[str, Any], match: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=match):
        load_graph(graph)
