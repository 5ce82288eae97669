"""Symbolic dimensions in graph JSON: parsing, bounds, and the schema's checks."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GraphBuilder

import graphrt
from graphrt.schema import load_graph, parse_dim


@pytest.mark.parametrize(("text", "env", "value", "bounds"), [
    ("n", {"n": 5}, 5, (1, 64)),
    ("2*n + 1", {"n": 5}, 11, (3, 129)),
    ("(n + m) * 4", {"n": 2, "m": 3}, 20, (8, 384)),
    ("n // 2", {"n": 7}, 3, (0, 32)),
    ("n - m", {"n": 9, "m": 3}, 6, (-31, 63)),
])
def test_expressions_evaluate_and_bound(text: str, env: dict[str, int], value: int,
                                        bounds: tuple[int, int]) -> None:
    expr = parse_dim(text)
    assert expr.evaluate(env) == value
    assert expr.bounds({"n": (1, 64), "m": (1, 32)}) == bounds
    assert expr.variables == frozenset(env)
    assert expr.is_variable == (text == "n")


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty"), ("n +", "ends too early"), ("(n", "closing parenthesis"),
    ("n ** 2", "unexpected"), ("__import__('os')", "cannot read"), ("8", "no variable"),
    ("n; m", "cannot read"), ("n" * 300, "longer than"),
])
def test_malformed_expressions_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_dim(text)


def _dynamic(batch: Any = "n", shape_vars: Any = None, out: Any = None) -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [batch, 4])
    y = g.op("y", "relu", [x], shape=out or [batch, 4])
    return g.build([y], shape_vars if shape_vars is not None else {"n": {"max": 64, "min": 1}})


def test_a_dynamic_graph_plans_at_its_bounds() -> None:
    graph = load_graph(_dynamic(out=["2*n", 2]))
    x, y = graph.entries
    assert graph.is_dynamic and graph.shape_vars["n"].max == 64
    assert (x.shape, x.shape_text, x.nbytes) == ((64, 4), ("n", 4), 64 * 4 * 4)
    assert (y.shape, y.shape_text) == ((128, 2), ("2 * n", 2))
    assert graph.var_binders == {"n": 0}


def test_a_static_graph_is_unchanged() -> None:
    graph = load_graph(_dynamic(8, {}))
    assert not graph.is_dynamic
    assert all(e.dims is None for e in graph.entries)
    assert graph.entries[0].shape_text == (8, 4)


@pytest.mark.parametrize(("graph", "message"), [
    (_dynamic("k"), r"uses \['k'\], not declared in the graph's shape_vars"),
    (_dynamic(shape_vars={"n": {"max": 4, "min": 8}}), "min 8 is above max 4"),
    (_dynamic(shape_vars={"n": {"max": -1}}), "greater than or equal to 0"),
    (_dynamic(shape_vars={"n": {"max": 4, "step": 2}}), "step"),
    (_dynamic(shape_vars={"n": {"max": 4}, "2x": {"max": 1}}), "'2x' is not a valid variable"),
    (_dynamic("n +"), r"entry 0 \(output 0 of node 0 'x'\): dimension 0 of shape"),
    (_dynamic(out=["n // (n - n)", 4]), "divisor in a dimension expression can be 0"),
])
def test_bad_symbolic_graphs_name_the_problem(graph: dict[str, Any], message: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=message):
        load_graph(graph)


def test_a_variable_nothing_binds_is_refused() -> None:
    g = GraphBuilder()
    x = g.input("x", ["2*n", 4])
    y = g.op("y", "relu", [x], shape=["2*n", 4])
    with pytest.raises(graphrt.GraphFormatError, match="variable 'n' is never bound"):
        load_graph(g.build([y], {"n": {"max": 8}}))


def test_a_variable_used_before_the_node_that_binds_it_is_refused() -> None:
    g = GraphBuilder()
    x = g.input("x", [8])
    a = g.op("a", "relu", [x], shape=["2*k"])  # uses k, bound only by node 2
    b = g.op("b", "nonzero", [x], shape=["k"])
    with pytest.raises(graphrt.GraphFormatError, match="uses variable 'k' before node 2 'b'"):
        load_graph(g.build([a, b], {"k": {"max": 8}}))
