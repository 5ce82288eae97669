"""Liveness: live ranges, the storage-id check at create() and in ``graphrt validate``, and
the storage-id planner (on every example and compat graph, and on random DAGs)."""

from __future__ import annotations

import copy
import json
import re
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder
from cli_harness import failed, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphrt
from graphrt.schema import Graph, load_graph
from graphrt.storage import (
    BEFORE_RUN,
    StorageAssignment,
    alias_roots,
    assign_storage_ids,
    check_storage_ids,
    live_ranges,
    plan_storage_ids,
)
from tests.conftest import COMPAT, EXAMPLES, MODELS

GRAPH_FILES = sorted([*EXAMPLES.glob("*.json"), *MODELS.glob("*/graph.json"),
                      *COMPAT.glob("*.json")])

LIB = {"double": lambda a, o: np.multiply(a, 2, out=o),
       "add": lambda a, b, o: np.add(a, b, out=o)}


def clashing_graph() -> dict[str, Any]:
    """``a`` and ``b`` share storage id 1 while both are still to be read by ``add``."""
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("double_a", "double", [x], shape=[4], sids=[1])
    b = g.op("double_b", "double", [x], shape=[4], sids=[1])
    y = g.op("add", "add", [a, b], shape=[4], sids=[2])
    return g.build(heads=[y])


CLASH = (r"storage_id 1 is shared by two entries live at the same time, so one would overwrite "
         r"the other: entry 1 \(output 0 of node 1 'double_a'\) float32\[4\] \(written by node "
         r"1 'double_a', last read by node 3 'add'\) and entry 2 \(output 0 of node 2 "
         r"'double_b'\) float32\[4\] \(written by node 2 'double_b', last read by node 3 'add'\)")


# -- the check at create() and in validate ---------------------------------------------------


def test_create_refuses_two_live_entries_on_one_storage_id() -> None:
    with pytest.raises(graphrt.GraphFormatError, match=CLASH):
        graphrt.create(clashing_graph(), LIB)


def test_the_same_graph_with_its_own_ids_runs() -> None:
    graph = clashing_graph()
    graph["attrs"]["storage_id"][1] = [0, 1, 3, 2]
    mod = graphrt.create(graph, LIB)
    mod.run(x=np.ones(4, "float32"))
    np.testing.assert_array_equal(mod.get_output(0), np.full(4, 4, "float32"))


def test_validate_refuses_two_live_entries_on_one_storage_id(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "clash.json"
    path.write_text(json.dumps(clashing_graph()))
    err = failed(capsys, "GraphFormatError", "validate", str(path))
    assert re.search(CLASH, err)
    assert "entry 1 " in err and "entry 2 " in err and "node 1 'double_a'" in err


def test_validate_accepts_every_example_graph(capsys: pytest.CaptureFixture[str]) -> None:
    for path in [*EXAMPLES.glob("*.json"), *MODELS.glob("*/graph.json")]:
        status, out, err = run_cli(capsys, "validate", str(path))
        assert status == 0 and out.startswith("ok: "), (path, err)


def test_a_node_may_not_write_into_its_own_input() -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("a", "double", [x], shape=[4], sids=[1])
    b = g.op("b", "double", [a], shape=[4], sids=[1])  # TVM never shares a node's in and out
    y = g.op("y", "double", [b], shape=[4], sids=[2])
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"storage_id 1 .*entry 1 .*last read by node 2 'b'.*entry 2 "
                             r"\(output 0 of node 2 'b'\)"):
        graphrt.create(g.build(heads=[y]), LIB)


def test_a_nop_aliases_its_input_and_the_slot_is_reused_once_both_are_dead() -> None:
    g = GraphBuilder()
    x = g.input("x", [2, 2])
    a = g.op("a", "double", [x], shape=[2, 2], sids=[1])
    r = g.op("reshape_nop", "__nop", [a], shape=[4], sids=[1])
    b = g.op("b", "double", [r], shape=[4], sids=[2])
    c = g.op("c", "add", [r, b], shape=[4], sids=[3])  # the alias is read after the __nop
    y = g.op("y", "double", [c], shape=[4], sids=[1])  # a and r are dead: reuse is fine
    graph = g.build(heads=[y])
    check_storage_ids(load_graph(graph))
    mod = graphrt.create(graph, LIB)
    mod.run(x=np.ones((2, 2), "float32"))
    np.testing.assert_array_equal(mod.get_output(0), np.full(4, 12, "float32"))
    graph["attrs"]["storage_id"][1][3] = 1  # b would overwrite a's alias, still read by c
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"storage_id 1 .*entry 1 \(output 0 of node 1 'a'\) float32\[2, 2\] "
                             r"with its __nop alias entries 2 \(written by node 1 'a', last read "
                             r"by node 4 'c'\) and entry 3 \(output 0 of node 3 'b'\)"):
        graphrt.create(graph, LIB)


def test_a_nop_alias_keeps_its_root_alive() -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("a", "double", [x], shape=[4], sids=[1])
    r = g.op("reshape_nop", "__nop", [a], shape=[2, 2], sids=[1])
    b = g.op("b", "double", [x], shape=[4], sids=[1])  # a is dead but its alias r is not
    y = g.op("y", "add", [r, b], shape=[2, 2], sids=[2])
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"storage_id 1 .*entry 1 \(output 0 of node 1 'a'\) float32\[4\] "
                             r"with its __nop alias entries 2 \(written by node 1 'a', last read "
                             r"by node 4 'y'\)"):
        graphrt.create(g.build(heads=[y]), LIB)


def test_an_input_keeps_its_storage_through_the_run() -> None:
    g = GraphBuilder()
    x = g.input("x", [4], sid=0)
    a = g.op("a", "double", [x], shape=[4], sids=[1])
    y = g.op("y", "double", [a], shape=[4], sids=[0])  # x is never read again, but a 2nd run is
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"storage_id 0 .*entry 0 \(output 0 of node 0 'x'\) float32\[4\] "
                             r"\(set before the run \(an input or param\), kept after the run"):
        graphrt.create(g.build(heads=[y]), LIB)


def test_two_inputs_on_one_storage_id_are_refused() -> None:
    g = GraphBuilder()
    a = g.input("a", [4], sid=0)
    c = g.input("c", [4], sid=0)
    with pytest.raises(graphrt.GraphFormatError, match=r"storage_id 0 .*entry 0 .*entry 1 "):
        graphrt.create(g.build(heads=[a, c]), LIB)


def test_an_output_may_reuse_the_slot_of_an_entry_dead_before_it() -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("a", "double", [x], shape=[4], sids=[1])
    b = g.op("b", "double", [a], shape=[4], sids=[2])
    y = g.op("y", "double", [b], shape=[4], sids=[1])  # as TVM does (compat README, quirk 7)
    mod = graphrt.create(g.build(heads=[y]), LIB)
    mod.run(x=np.ones(4, "float32"))
    np.testing.assert_array_equal(mod.get_output(0), np.full(4, 8, "float32"))


def test_an_unread_output_of_a_node_may_not_share_with_its_sibling() -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    pair = g.op("split", "split", [x], outputs=[([4], "float32"), ([4], "float32")],
                sids=[1, 1])
    y = g.op("y", "double", [(pair, 1)], shape=[4], sids=[2])
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"storage_id 1 .*entry 1 \(output 0 of node 1 'split'\) "
                             r"float32\[4\] \(written by node 1 'split', never read\) and entry "
                             r"2 \(output 1 of node 1 'split'\)"):
        check_storage_ids(load_graph(g.build(heads=[y])))


def test_a_dynamic_graph_is_checked_and_named_by_its_symbolic_shapes() -> None:
    g = GraphBuilder()
    x = g.input("x", ["n", 4])
    a = g.op("a", "double", [x], shape=["n", 4], sids=[1])
    b = g.op("b", "double", [x], shape=["n", 4], sids=[1])
    y = g.op("y", "add", [a, b], shape=["n", 4], sids=[2])
    graph = load_graph(g.build(heads=[y], shape_vars={"n": {"min": 1, "max": 8}}))
    assert graph.is_dynamic
    with pytest.raises(graphrt.GraphFormatError, match=r"float32\['n', 4\]"):
        check_storage_ids(graph)
    for path in MODELS.glob("*/graph.json"):
        check_storage_ids(load_graph(path))


def test_the_message_counts_other_shared_ids() -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    a = g.op("a", "double", [x], shape=[4], sids=[1])
    b = g.op("b", "double", [x], shape=[4], sids=[1])
    c = g.op("c", "double", [x], shape=[4], sids=[2])
    d = g.op("d", "double", [x], shape=[4], sids=[2])
    y = g.op("y", "add", [a, b], shape=[4], sids=[3])
    z = g.op("z", "add", [c, d], shape=[4], sids=[4])
    with pytest.raises(graphrt.GraphFormatError,
                       match=r"^storage_id 1 .*\(1 other storage ids are shared the same way\)$"):
        check_storage_ids(load_graph(g.build(heads=[y, z])))


# -- every real graph ------------------------------------------------------------------------


@pytest.mark.parametrize("path", GRAPH_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_and_compat_graph_passes_and_plans(path: Path) -> None:
    graph = load_graph(path)
    check_storage_ids(graph)
    plan = plan_storage_ids(graph)
    assert_valid_assignment(graph, plan)
    check_storage_ids(with_storage_ids(path, plan))


def test_the_compat_corpus_is_there() -> None:
    assert len(list(COMPAT.glob("*.json"))) == 10


def test_live_ranges_of_the_duplex_graph() -> None:
    graph = load_graph(EXAMPLES / "duplex.json")
    assert live_ranges(graph) == [(BEFORE_RUN, 2), (BEFORE_RUN, 2), (2, 3), (3, 5),
                                  (BEFORE_RUN, 5), (5, 6), (6, 8), (BEFORE_RUN, 8), (8, 9)]


def test_a_nop_graph_has_alias_roots() -> None:
    graph = load_graph(COMPAT / "relay_deeppose_cpu_nop.json")
    roots = alias_roots(graph)
    nops = [node for node in graph.nodes if node.func_name == "__nop"]
    assert len(nops) == 2
    for node in nops:
        assert roots[node.outputs[0]] == roots[node.inputs[0]] != node.outputs[0]
    last = live_ranges(graph)[graph.heads[0]]
    assert last == (nops[-1].nid, len(graph.nodes))


# -- the planner ------------------------------------------------------------------------------


def with_storage_ids(source: Path | dict[str, Any], plan: StorageAssignment[Any]) -> Graph:
    """The graph again with the planned storage ids written into its JSON."""
    document = (json.loads(source.read_text()) if isinstance(source, Path)
                else copy.deepcopy(source))
    document["attrs"]["storage_id"][1] = list(plan.storage_ids)
    return load_graph(document)


def assert_valid_assignment(graph: Graph, plan: StorageAssignment[Any]) -> None:
    """Checked by brute force, independently of the planner's sweep."""
    ranges = live_ranges(graph)
    roots = alias_roots(graph)
    pinned = {graph.nodes[nid].outputs[0] for nid in graph.arg_nodes} | set(graph.heads)
    groups: dict[int, list[int]] = {}
    for eid, root in enumerate(roots):
        groups.setdefault(root, []).append(eid)
    span = {root: (min(ranges[e][0] for e in members), max(ranges[e][1] for e in members))
            for root, members in groups.items()}
    is_pinned = {root: any(e in pinned for e in members) for root, members in groups.items()}
    for members in groups.values():
        assert len({plan.storage_ids[e] for e in members}) == 1
        for e in members:
            assert plan.slot_bytes[plan.storage_ids[e]] >= graph.entries[e].nbytes
            assert plan.slot_devices[plan.storage_ids[e]] == graph.entries[e].device_type
    for r1, r2 in combinations(groups, 2):
        if plan.storage_ids[r1] != plan.storage_ids[r2]:
            continue
        assert not (is_pinned[r1] or is_pinned[r2]), (r1, r2)
        (s1, e1), (s2, e2) = span[r1], span[r2]
        assert e1 < s2 or e2 < s1, (r1, span[r1], r2, span[r2])
    assert sorted(set(plan.storage_ids)) == list(range(len(plan.slot_bytes)))
    assert plan.lower_bound_bytes <= plan.pool_bytes <= plan.naive_bytes
    assert plan.pool_bytes == sum(plan.pool_bytes_per_device.values())
    for device, bound in plan.lower_bound_per_device.items():
        assert bound <= plan.pool_bytes_per_device[device]


@st.composite
def random_graphs(draw: st.DrawFn) -> dict[str, Any]:
    """A random DAG: inputs, ops of 1 to 3 outputs, __nop reshapes, on 1 or 2 device types,
    with arbitrary (often clashing) storage ids."""
    two_devices = draw(st.booleans())
    g = GraphBuilder(device_index=two_devices)
    entries: list[tuple[int, int, int, int]] = []  # (nid, index, size in elements, device)
    n_inputs = draw(st.integers(1, 3))
    for i in range(n_inputs):
        size = draw(st.integers(0, 6))
        dev = draw(st.sampled_from([1, 2])) if two_devices else 1
        nid = g.input(f"in{i}", [size], sid=draw(st.integers(0, 8)), dev=dev)
        entries.append((nid, 0, size, dev))
    for k in range(draw(st.integers(1, 12))):
        dev = draw(st.sampled_from([1, 2])) if two_devices else 1
        candidates = [i for i, e in enumerate(entries) if e[3] == dev] or [0]
        if draw(st.integers(0, 4)) == 0 and any(entries[i][3] == dev for i in candidates):
            src = draw(st.sampled_from(candidates))
            nid_src, index, size, _ = entries[src]
            sid = g.entries[src][2]
            nid = g.op(f"nop{k}", "__nop", [(nid_src, index)], shape=[1, size], sids=[sid],
                       dev=dev)
            entries.append((nid, 0, size, dev))
            continue
        picks = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3))
        n_out = draw(st.integers(1, 3))
        sizes = [draw(st.integers(0, 6)) for _ in range(n_out)]
        sids: list[int | None] = [draw(st.integers(0, 8)) for _ in range(n_out)]
        nid = g.op(f"op{k}", "f", [(entries[p][0], entries[p][1]) for p in picks],
                   outputs=[([s], "float32") for s in sizes], sids=sids, dev=dev)
        entries.extend((nid, i, s, dev) for i, s in enumerate(sizes))
    heads = draw(st.lists(st.integers(0, len(entries) - 1), min_size=1, max_size=3))
    return g.build(heads=[(entries[h][0], entries[h][1]) for h in heads])


def clashes_by_brute_force(graph: Graph) -> bool:
    """Whether two values on one storage id overlap: every pair of entries, no sweep."""
    ranges = live_ranges(graph)
    roots = alias_roots(graph)
    inputs = {graph.nodes[nid].outputs[0] for nid in graph.arg_nodes}
    end = len(graph.nodes)
    live = [(start, end if eid in inputs else stop) for eid, (start, stop) in enumerate(ranges)]
    for a, b in combinations(range(len(graph.entries)), 2):
        if roots[a] == roots[b] or graph.entries[a].sid != graph.entries[b].sid:
            continue
        span_a = [live[e] for e in range(len(live)) if roots[e] == roots[a]]
        span_b = [live[e] for e in range(len(live)) if roots[e] == roots[b]]
        sa, ea = min(s for s, _ in span_a), max(e for _, e in span_a)
        sb, eb = min(s for s, _ in span_b), max(e for _, e in span_b)
        if sa <= eb and sb <= ea:
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_the_check_agrees_with_brute_force_on_random_dags(document: dict[str, Any]) -> None:
    graph = load_graph(document)
    if clashes_by_brute_force(graph):
        with pytest.raises(graphrt.GraphFormatError, match=r"^storage_id \d+ is shared by two"):
            check_storage_ids(graph)
    else:
        check_storage_ids(graph)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_the_planner_on_random_dags(document: dict[str, Any]) -> None:
    graph = load_graph(document)
    plan = plan_storage_ids(graph)
    assert_valid_assignment(graph, plan)
    check_storage_ids(with_storage_ids(document, plan))


@st.composite
def random_lifetimes(draw: st.DrawFn) -> tuple[list[int], list[str], list[int], list[int],
                                               set[int]]:
    n = draw(st.integers(1, 25))
    sizes = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    devices = draw(st.lists(st.sampled_from(["cpu", "gpu"]), min_size=n, max_size=n))
    defined = sorted(draw(st.lists(st.integers(-1, 15), min_size=n, max_size=n)))
    last = [d + draw(st.integers(-2, 10)) for d in defined]
    pinned = set(draw(st.lists(st.integers(0, n - 1), max_size=n)))
    return sizes, devices, defined, last, pinned


@settings(max_examples=500, deadline=None)
@given(random_lifetimes())
def test_assign_storage_ids_on_random_lifetimes(
        case: tuple[list[int], list[str], list[int], list[int], set[int]]) -> None:
    sizes, devices, defined, last, pinned = case
    plan = assign_storage_ids(sizes, devices, defined, last, pinned)
    span = [(d, max(d, u)) for d, u in zip(defined, last, strict=True)]
    for a, b in combinations(range(len(sizes)), 2):
        if plan.storage_ids[a] == plan.storage_ids[b]:
            assert a not in pinned and b not in pinned
            assert devices[a] == devices[b]
            assert span[a][1] < span[b][0] or span[b][1] < span[a][0]
    for eid, sid in enumerate(plan.storage_ids):
        assert plan.slot_bytes[sid] >= sizes[eid]
        assert plan.slot_devices[sid] == devices[eid]
    assert plan.naive_bytes == sum(sizes)
    assert plan.lower_bound_bytes <= plan.pool_bytes <= plan.naive_bytes
    # the bound is the peak: some step has that many bytes live (pinned counted throughout)
    for device, bound in plan.lower_bound_per_device.items():
        base = sum(sizes[e] for e in pinned if devices[e] == device)
        steps = {d for d, _ in span} or {0}
        peak = max(sum(sizes[e] for e in range(len(sizes)) if e not in pinned
                       and devices[e] == device and span[e][0] <= t <= span[e][1])
                   for t in steps)
        assert bound == base + peak


def test_best_fit_then_growing_the_largest_free_slot() -> None:
    # x(pinned) -> a(100), b(40) both dead after step 1; c(30) takes b's slot (smallest >= 30),
    # d(120) grows a's slot (no free slot fits; the largest free one grows)
    plan = assign_storage_ids(sizes=[8, 100, 40, 30, 120, 8], devices=[0] * 6,
                              defined_at=[-1, 0, 0, 2, 2, 3], last_use=[1, 1, 1, 3, 3, 4],
                              pinned=[0, 5])
    assert plan.storage_ids == (0, 1, 2, 2, 1, 3)
    assert plan.slot_bytes == (8, 120, 40, 8)
    assert (plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes) == (176, 166, 306)


def test_aliases_are_one_value() -> None:
    # a(16) -> nop r(16) read at step 3; b written at step 2 may not take a's slot
    plan = assign_storage_ids([16, 16, 16, 16, 16], [1] * 5, [-1, 0, 1, 2, 3],
                              [0, 1, 3, 3, 4], pinned=[0, 4], aliases={2: 1})
    assert plan.storage_ids[1] == plan.storage_ids[2] != plan.storage_ids[3]
    assert plan.naive_bytes == 64


def test_assign_storage_ids_refuses_inconsistent_arguments() -> None:
    with pytest.raises(ValueError, match="one value per entry"):
        assign_storage_ids([1, 2], [0], [0, 1], [1, 2], [])
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        assign_storage_ids([1, 2], [0, 0], [0, 1], [1, 2], [5])
    with pytest.raises(ValueError, match="negative size"):
        assign_storage_ids([1, -2], [0, 0], [0, 1], [1, 2], [])
    with pytest.raises(ValueError, match="on device"):
        assign_storage_ids([1, 1], [0, 1], [0, 1], [1, 2], [], aliases={1: 0})
    with pytest.raises(ValueError, match="a mask of 1 bools; it needs one per entry"):
        assign_storage_ids([1, 1], [0, 0], [0, 1], [1, 2], [True])


def test_pinned_as_ids_or_as_a_mask_is_the_same() -> None:
    args = ([4, 4, 4, 4], [0] * 4, [-1, 0, 1, 2], [0, 1, 2, 3])
    by_ids = assign_storage_ids(*args, [0, 3])
    by_mask = assign_storage_ids(*args, [True, False, False, True])
    assert by_ids == by_mask
    assert assign_storage_ids(*args, [False] * 4).storage_ids == (0, 1, 0, 1)  # nothing pinned
