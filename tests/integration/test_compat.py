"""The compatibility corpus: ten graphs TVM's codegen really produced load, plan and run on cpu.

The graphs live in ``tests/data/compat/graphs``; their facts (node and entry counts, pool bytes,
storage ids) and where each came from are the table of ``tests/data/compat/README.md``. Kernels
are stand-ins that check what they receive against the graph's own columns (read here with
plain ``json``, independently of graphrt) and write a deterministic value into every output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from math import prod
from typing import Any

import numpy as np
import pytest

import graphrt
from tests.conftest import COMPAT as GRAPHS


@dataclass(frozen=True)
class Facts:
    """One row of the README table."""

    nulls: int
    ops: int
    entries: int
    heads: int
    nbytes: int  # "bytes (max/sid)"
    sids: int
    device_index: int | None  # the one code every entry carries, or None when absent


FACTS = {
    "nnvm_mobilenet_2018": Facts(84, 59, 143, 1, 15_294_744, 90, None),
    "nnvm_wrn_rasp": Facts(192, 508, 700, 1, 53_419_064, 200, None),
    "nnvm_retinaface_mnet25": Facts(167, 103, 270, 9, 54_194_144, 177, None),
    "relay_fused_mobilenet_2020": Facts(57, 32, 89, 1, 18_247_072, 61, None),
    "relay_resnet50_tvmc": Facts(109, 106, 215, 1, 112_555_852, 115, 1),
    "relay_deeppose_cpu_nop": Facts(109, 58, 167, 1, 109_164_576, 115, None),
    "relay_ultraface_byoc_multiout": Facts(11, 13, 30, 2, 1_210_946, 22, None),
    "relay_tinyyolov3_byoc_multiout": Facts(1, 7, 11, 2, 3_374_254, 6, None),
    "relay_easy_model_cuda_nop": Facts(10, 16, 26, 1, 31_516, 17, 2),
    "relay_magic_wand_int8": Facts(18, 10, 28, 1, 13_256, 22, 1),
}
NAMES = sorted(FACTS)
BUILTINS = ("__nop", "__copy")


@cache
def raw(name: str) -> dict[str, Any]:
    """The graph JSON as plain Python data (not through graphrt)."""
    data: dict[str, Any] = json.loads((GRAPHS / f"{name}.json").read_bytes())
    return data


def raw_eid(name: str, ref: list[int]) -> int:
    return int(raw(name)["node_row_ptr"][ref[0]]) + ref[1]


def raw_entry(name: str, eid: int) -> tuple[tuple[int, ...], str, int]:
    """(shape, dltype, storage_id) of an entry, from the JSON columns."""
    attrs = raw(name)["attrs"]
    return (tuple(attrs["shape"][1][eid]), attrs["dltype"][1][eid],
            attrs["storage_id"][1][eid])


@dataclass
class Recorder:
    """Stand-in kernels for every func_name of a graph; records each call in order."""

    calls: list[tuple[str, tuple[np.ndarray, ...]]] = field(default_factory=list)

    def kernel(self, func_name: str) -> Any:
        def run(*args: Any) -> None:
            assert all(isinstance(arg, np.ndarray) for arg in args), (
                f"{func_name} got {[type(arg).__name__ for arg in args]}")
            self.calls.append((func_name, args))
        return run

    def library(self, name: str) -> graphrt.Library:
        funcs = {node["attrs"]["func_name"] for node in raw(name)["nodes"]
                 if node["op"] == "tvm_op"}
        return graphrt.Library({func: self.kernel(func) for func in funcs
                                if func not in BUILTINS})


def op_nodes(name: str) -> list[tuple[int, dict[str, Any]]]:
    """The op nodes a kernel runs for (built-ins excluded), in execution order."""
    return [(nid, node) for nid, node in enumerate(raw(name)["nodes"])
            if node["op"] == "tvm_op" and node["attrs"]["func_name"] not in BUILTINS]


def fill_outputs(name: str, recorder: Recorder) -> None:
    """Write a deterministic value, depending on the node and its inputs, into every output.

    Done after the run from the recorded arrays (the kernels only record), in node order, which
    is what a kernel writing at call time would produce too.
    """
    for position, ((_, node), (_, args)) in enumerate(zip(op_nodes(name), recorder.calls,
                                                          strict=True)):
        n_in = len(node["inputs"])
        seed = sum(int(arg.reshape(-1)[0]) for arg in args[:n_in] if arg.size)
        for out in args[n_in:]:
            out[...] = (position + seed) % 7 + 1


def build(name: str, *devices: graphrt.Device, **kwargs: Any
          ) -> tuple[graphrt.GraphModule, Recorder]:
    recorder = Recorder()
    mod = graphrt.create(GRAPHS / f"{name}.json", recorder.library(name),
                         *(devices or (graphrt.cpu(0),)), **kwargs)
    return mod, recorder


def test_corpus_is_complete() -> None:
    assert sorted(path.stem for path in GRAPHS.glob("*.json")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_loads_with_readme_facts(name: str) -> None:
    facts = FACTS[name]
    graph = graphrt.load_graph(GRAPHS / f"{name}.json")
    nulls = [node.nid for node in graph.nodes if node.op == "null"]
    assert (len(nulls), len(graph.nodes) - len(nulls)) == (facts.nulls, facts.ops)
    assert len(graph.entries) == facts.entries == raw(name)["node_row_ptr"][-1]
    assert len(graph.heads) == facts.heads
    assert len({entry.sid for entry in graph.entries}) == facts.sids
    assert list(graph.arg_nodes) == nulls  # README quirk 16: arg_nodes lists the null nodes
    assert {entry.device_type for entry in graph.entries} == {facts.device_index}
    for eid, entry in enumerate(graph.entries):
        shape, dltype, sid = raw_entry(name, eid)
        assert (entry.shape, entry.dtype.name, entry.sid) == (shape, dltype, sid)
    for node in graph.nodes:
        assert node.func_name == raw(name)["nodes"][node.nid].get("attrs", {}).get("func_name")
    assert graph.heads == tuple(raw_eid(name, ref) for ref in raw(name)["heads"])


@pytest.mark.parametrize("name", NAMES)
def test_plans_with_readme_bytes(name: str) -> None:
    facts = FACTS[name]
    mod, _ = build(name)
    pool = mod.plan.pool
    assert sum(slot.nbytes for slot in pool.values()) == facts.nbytes
    assert len(pool) == facts.sids
    assert sorted(pool) == list(range(facts.sids))  # README: sids are dense in every file
    assert all(slot.device == graphrt.cpu(0) for slot in pool.values())
    assert set(mod.plan.entry_device) == {graphrt.cpu(0)}
    # every slot is as big as its biggest entry (max bytes, not elements or first dtype)
    for slot in pool.values():
        sizes = [prod(raw_entry(name, eid)[0]) * np.dtype(raw_entry(name, eid)[1]).itemsize
                 for eid in slot.entries]
        assert slot.nbytes == max(sizes)
    if facts.device_index == 2:
        assert mod.plan.fallbacks
    else:
        assert mod.plan.fallbacks == ()


@pytest.mark.parametrize("name", NAMES)
def test_runs_on_cpu_with_stand_in_kernels(name: str) -> None:
    mod, recorder = build(name)
    mod.run()
    ops = op_nodes(name)
    assert len(recorder.calls) == len(ops)  # no kernel call for __nop / __copy
    for (nid, node), (func_name, args) in zip(ops, recorder.calls, strict=True):
        attrs = node["attrs"]
        assert func_name == attrs["func_name"]
        assert len(args) == int(attrs["num_inputs"]) + int(attrs["num_outputs"])
        first = raw(name)["node_row_ptr"][nid]
        eids = [raw_eid(name, ref) for ref in node["inputs"]]
        eids += range(first, first + int(attrs["num_outputs"]))
        for eid, arg in zip(eids, args, strict=True):
            shape, dltype, _ = raw_entry(name, eid)
            expected = (prod(shape),) if attrs["flatten_data"] == "1" else shape
            assert (arg.shape, arg.dtype) == (expected, np.dtype(dltype)), (
                f"node {nid} {node['name']!r} entry {eid}")
    fill_outputs(name, recorder)
    info = mod.get_output_info()
    for i, ref in enumerate(raw(name)["heads"]):
        shape, dltype, _ = raw_entry(name, raw_eid(name, ref))
        out = mod.get_output(i)
        assert isinstance(out, np.ndarray)
        assert (out.shape, out.dtype) == (shape, np.dtype(dltype))
        assert np.all((out >= 1) & (out <= 7))  # written by a stand-in kernel
        copied = mod.get_output(i, out=np.zeros(shape, dltype))
        np.testing.assert_array_equal(copied, out)
        assert tuple(info["shape"][mod.graph.output_names[i]]) == shape


def test_wrn_rasp_flatten_data_gives_1d_arrays() -> None:
    name = "nnvm_wrn_rasp"
    flat = [nid for nid, node in op_nodes(name) if node["attrs"]["flatten_data"] == "1"]
    assert len(flat) == 316  # README quirk 4
    mod, recorder = build(name)
    mod.run()
    calls = dict(zip((nid for nid, _ in op_nodes(name)), recorder.calls, strict=True))
    assert all(arg.ndim == 1 for nid in flat for arg in calls[nid][1])


def test_cuda_graph_falls_back_to_cpu() -> None:
    name = "relay_easy_model_cuda_nop"
    mod, _ = build(name)
    fallbacks = mod.plan.fallbacks
    assert len(fallbacks) == FACTS[name].entries  # every entry asked for cuda
    assert {f.eid for f in fallbacks} == set(range(FACTS[name].entries))
    assert all(f.requested == 2 and f.device == graphrt.cpu(0) for f in fallbacks)
    assert "fell back to cpu:0" in fallbacks[0].reason
    assert set(mod.plan.entry_device) == {graphrt.cpu(0)}
    assert set(mod.plan.node_device) == {graphrt.cpu(0)}
    mod.run()


def test_cuda_graph_strict_placement_refuses() -> None:
    with pytest.raises(graphrt.PlacementError,
                       match=r"strict placement: 26 entries would fall back to cpu:0"):
        build("relay_easy_model_cuda_nop", strict_placement=True)


@pytest.mark.parametrize("name, nops, head_is_nop", [("relay_deeppose_cpu_nop", 2, True),
                                                     ("relay_easy_model_cuda_nop", 1, False)])
def test_nop_output_aliases_its_input(name: str, nops: int, head_is_nop: bool) -> None:
    mod, recorder = build(name)
    mod.run()
    fill_outputs(name, recorder)
    graph = mod.graph
    # The array each entry's producing kernel wrote, from the recorded calls.
    written: dict[int, np.ndarray] = {}
    for (nid, node), (_, args) in zip(op_nodes(name), recorder.calls, strict=True):
        outputs = graph.nodes[nid].outputs
        written.update(zip(outputs, args[len(node["inputs"]):], strict=True))
    nop_nodes = [node for node in graph.nodes if node.func_name == "__nop"]
    assert len(nop_nodes) == nops
    consumed: dict[int, list[np.ndarray]] = {}  # entry id -> arrays kernels got for it
    for (nid, _), (_, args) in zip(op_nodes(name), recorder.calls, strict=True):
        for eid, arg in zip(graph.nodes[nid].inputs, args, strict=False):
            consumed.setdefault(eid, []).append(arg)
    for node in nop_nodes:
        (src,), (dst,) = node.inputs, node.outputs
        assert graph.entries[src].sid == graph.entries[dst].sid
        assert graph.entries[src].shape != graph.entries[dst].shape  # a reshape
        assert dst in consumed or dst in graph.heads
        for arg in consumed.get(dst, []):  # whoever reads the __nop output reads src's memory
            assert arg.shape == graph.entries[dst].shape
            assert np.shares_memory(arg, written[src])
    head = graph.nodes[graph.entries[graph.heads[0]].nid]
    assert (head.func_name == "__nop") is head_is_nop
    if not head_is_nop:
        return
    # deeppose: the graph output is a __nop's output, the very memory its input's kernel wrote.
    producer_out = written[head.inputs[0]]
    out = mod.get_output(0)
    assert np.shares_memory(out, producer_out)
    np.testing.assert_array_equal(out.reshape(-1), producer_out.reshape(-1))
    producer_out.reshape(-1)[0] = 42  # writing through one is visible in the other
    assert out.reshape(-1)[0] == 42


@pytest.mark.parametrize("name, multi", [("relay_ultraface_byoc_multiout", {1: 7}),
                                         ("relay_tinyyolov3_byoc_multiout",
                                          {1: 2, 3: 2, 7: 2})])
def test_multi_output_nodes(name: str, multi: dict[int, int]) -> None:
    mod, recorder = build(name)
    graph = mod.graph
    assert {node.nid: len(node.outputs) for node in graph.nodes
            if len(node.outputs) > 1} == multi
    info = mod.get_output_info()
    assert list(info["shape"]) == list(graph.output_names)
    for i, ref in enumerate(raw(name)["heads"]):
        shape, dltype, _ = raw_entry(name, raw_eid(name, ref))
        output_name = graph.output_names[i]
        expected_name = (f"{raw(name)['nodes'][ref[0]]['name']}:{ref[1]}"
                         if ref[0] in multi else raw(name)["nodes"][ref[0]]["name"])
        assert output_name == expected_name
        assert tuple(info["shape"][output_name]) == shape
        assert info["dtype"][output_name] == dltype
        assert mod.get_output_index(output_name) == i
    mod.run()
    # Consumers of output k > 0 of a multi-output node get that very entry's array.
    for (nid, node), (_, args) in zip(op_nodes(name), recorder.calls, strict=True):
        for ref, arg in zip(node["inputs"], args, strict=False):
            if ref[0] in multi:
                shape, dltype, _ = raw_entry(name, raw_eid(name, ref))
                assert (arg.shape, arg.dtype) == (shape, np.dtype(dltype)), f"node {nid}"


def test_tinyyolov3_heads_come_from_one_node() -> None:
    mod, _ = build("relay_tinyyolov3_byoc_multiout")
    assert raw("relay_tinyyolov3_byoc_multiout")["heads"] == [[7, 0, 0], [7, 1, 0]]
    assert mod.graph.output_names == ("tvmgen_default_mera_drp_9:0",
                                      "tvmgen_default_mera_drp_9:1")
    assert mod.get_num_outputs() == 2


def test_magic_wand_int8_input() -> None:
    mod, _ = build("relay_magic_wand_int8")
    info = mod.get_input_info()
    name = "serving_default_input_1:0"
    assert mod.get_input_index(name) == 0
    assert info["dtype"][name] == "int8"
    shape, dltype, _ = raw_entry("relay_magic_wand_int8", 0)
    assert tuple(info["shape"][name]) == shape and dltype == "int8"
    for param in ("p0", "p6", "p7"):  # README: 0-d params
        assert tuple(info["shape"][param]) == ()
    with pytest.raises(graphrt.InputError):
        mod.set_input(name, np.zeros(shape, "float32"))  # never silently cast
    mod.set_input(name, np.full(shape, -3, "int8"))
    assert (mod.get_input(name) == -3).all()


def test_magic_wand_sid_shared_across_dtypes() -> None:
    mod, _ = build("relay_magic_wand_int8")
    dtypes = {mod.graph.entries[eid].dtype.name for eid in mod.plan.pool[2].entries}
    assert {"int16", "int8"} <= dtypes
    assert mod.plan.pool[2].nbytes == 768  # int16 [1,1,128,3]
    assert {mod.graph.entries[eid].dtype.name
            for eid in mod.plan.pool[18].entries} == {"int8", "float32"}


def _random_value(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.standard_normal(shape)).astype(dtype)
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(info.min, info.max, size=shape, endpoint=True), dtype=dtype)


@pytest.mark.parametrize("name", ["relay_easy_model_cuda_nop", "relay_magic_wand_int8"])
def test_set_every_input_and_run_twice(name: str) -> None:
    mod, recorder = build(name)
    info = mod.get_input_info()
    rng = np.random.default_rng(0)
    values = {key: _random_value(rng, tuple(shape), info["dtype"][key])
              for key, shape in info["shape"].items()}
    assert len(values) == FACTS[name].nulls == mod.get_num_inputs()
    for key, value in values.items():
        mod.set_input(key, value)
    for key, value in values.items():
        np.testing.assert_array_equal(mod.get_input(key), value)
    results = []
    for _ in range(2):
        recorder.calls.clear()
        mod.run()
        fill_outputs(name, recorder)
        results.append([np.array(mod.get_output(i), copy=True)
                        for i in range(mod.get_num_outputs())])
    for first, second in zip(*results, strict=True):
        np.testing.assert_array_equal(first, second)
    # params set with the mapping API are the same inputs
    mod.load_params({key: value for key, value in values.items() if key.startswith("p")})
    for key, value in values.items():
        np.testing.assert_array_equal(mod.get_input(key), value)
