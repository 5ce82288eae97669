"""The graphrt command line: inspect (text, JSON, DOT), validate, errors and dispatch."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from builders import GraphBuilder
from cli_harness import failed, run_cli

import graphrt
from graphrt import cli
from graphrt.devices import CPU, CUDA, SIM
from tests.conftest import COMPAT, EXAMPLES, example_graph

ROOT = Path(__file__).resolve().parents[2]
DUPLEX = str(EXAMPLES / "duplex.json")
SIMPLEX = str(EXAMPLES / "simplex.json")
HETERO = ["--device", "cpu", "--device", "cuda"]

# Bytes of storage (largest entry per storage id, summed) as tests/data/compat/README.md lists them.
COMPAT_BYTES = {
    "nnvm_mobilenet_2018": 15_294_744,
    "nnvm_wrn_rasp": 53_419_064,
    "nnvm_retinaface_mnet25": 54_194_144,
    "relay_fused_mobilenet_2020": 18_247_072,
    "relay_resnet50_tvmc": 112_555_852,
    "relay_deeppose_cpu_nop": 109_164_576,
    "relay_ultraface_byoc_multiout": 1_210_946,
    "relay_tinyyolov3_byoc_multiout": 3_374_254,
    "relay_easy_model_cuda_nop": 31_516,
    "relay_magic_wand_int8": 13_256,
}



def write_graph(tmp_path: Path, graph: dict[str, Any], name: str = "graph.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(graph))
    return str(path)


def section(text: str, title: str) -> list[str]:
    """The indented lines under a ``title:`` line of the inspect text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        body.append(line.strip())
    return body


def cells(line: str) -> list[str]:
    """The cells of a table line (columns are two or more spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def device_row(text: str, device: str) -> tuple[int, int, int]:
    """(op nodes, entries, bytes) of a device in the placement table."""
    match = re.search(rf"^\s+{re.escape(device)}\s+(\d+)\s+(\d+)\s+([\d,]+)$", text, re.M)
    assert match, f"no placement row for {device} in:\n{text}"
    return int(match[1]), int(match[2]), int(match[3].replace(",", ""))


# --- device parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("cpu", graphrt.Device(CPU, 0)), ("CUDA:3", graphrt.Device(CUDA, 3)),
    (" sim:1 ", graphrt.Device(SIM, 1)), ("cuda", graphrt.Device(CUDA, 0)),
])
def test_parse_device(text: str, expected: graphrt.Device) -> None:
    assert cli.parse_device(text) == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("tpu", "unknown device kind 'tpu'"), ("", "unknown device kind ''"),
    ("cuda:", "must be a non-negative integer"), ("cuda:-1", "must be a non-negative integer"),
    ("cuda:x", "must be a non-negative integer"), ("sim:\u0661", "must be a non-negative integer"),
])
def test_parse_device_rejects(text: str, problem: str) -> None:
    with pytest.raises(graphrt.DeviceError, match=re.escape(problem)):
        cli.parse_device(text)


def test_parse_devices_defaults_to_cpu() -> None:
    assert cli.parse_devices(None) == (graphrt.Device(CPU, 0),)
    assert cli.parse_devices(["cpu", "cuda:1"]) == (graphrt.Device(CPU, 0),
                                                    graphrt.Device(CUDA, 1))


# --- inspect: text ---------------------------------------------------------------------------


def test_inspect_text_heterogeneous(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "inspect", DUPLEX, *HETERO)
    assert (status, err) == (0, "")
    inputs = section(out, "inputs: 4")
    assert [line.split() for line in inputs] == [
        ["name", "shape", "dtype", "device"], ["A", "[4]", "float32", "cuda:0"],
        ["B", "[4]", "float32", "cuda:0"], ["C", "[4]", "float32", "cpu:0"],
        ["D", "[4]", "float32", "cuda:0"]]
    outputs = section(out, "outputs: 1")
    assert outputs[1].split() == ["elemwise_add1", "[4]", "float32", "cuda:0"]
    assert "nodes: 9 total, 4 inputs, 5 ops (2 __copy, 0 __nop)" in out.splitlines()
    assert [line.split() for line in section(out, "ops: 3 func_names")] == [
        ["2", "__copy"], ["2", "elemwise_add"], ["1", "elemwise_sub"]]
    assert "placement on cpu:0 (fallback), cuda:0:" in out
    assert device_row(out, "cuda:0") == (3, 6, 80)
    assert device_row(out, "cpu:0") == (2, 3, 48)
    assert "copies: 2 (32 bytes per run)" in out
    assert "node 3 '__copy_add_to_sub': cuda:0 -> cpu:0, 16 bytes" in out
    assert "node 6 '__copy_sub_to_add': cpu:0 -> cuda:0, 16 bytes" in out
    assert "fallbacks: 0" in out


def test_inspect_text_cpu_only_lists_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "inspect", DUPLEX)
    assert status == 0
    assert device_row(out, "cpu:0") == (5, 9, 128)
    assert "cuda:0" not in out
    fallbacks = section(out, "  fallbacks: 6")
    assert [re.match(r"entry (\d+) \(node \d+ '(\w+)'\)", line).groups()  # type: ignore[union-attr]
            for line in fallbacks] == [
        ("0", "A"), ("1", "B"), ("2", "elemwise_add0"), ("6", "__copy_sub_to_add"), ("7", "D"),
        ("8", "elemwise_add1")]
    assert all(line.endswith("no cuda device (type 2) was given; fell back to cpu:0")
               for line in fallbacks)


def test_inspect_text_sim_not_targeted_by_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    # The example graphs target device type 2 (CUDA): a sim device gets nothing.
    status, out, _ = run_cli(capsys, "inspect", DUPLEX, "--device", "cpu", "--device", "sim")
    assert status == 0
    assert device_row(out, "sim:0") == (0, 0, 0)
    assert device_row(out, "cpu:0") == (5, 9, 128)
    assert "fallbacks: 6" in out


def test_inspect_text_retargeted_to_sim(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    path = write_graph(tmp_path, example_graph("duplex", graphrt.sim(0)))
    status, out, _ = run_cli(capsys, "inspect", path, "--device", "cpu", "--device", "sim")
    assert status == 0
    assert device_row(out, "sim:0") == (3, 6, 80)
    assert device_row(out, "cpu:0") == (2, 3, 48)
    assert "node 3 '__copy_add_to_sub': sim:0 -> cpu:0, 16 bytes" in out
    assert "node 6 '__copy_sub_to_add': cpu:0 -> sim:0, 16 bytes" in out
    assert "fallbacks: 0" in out


def test_inspect_counts_nops(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "inspect", str(COMPAT / "relay_deeppose_cpu_nop.json"))
    assert status == 0
    assert "nodes: 167 total, 109 inputs, 58 ops (0 __copy, 2 __nop)" in out
    assert cells(section(out, "outputs: 1")[1]) == ["reshape_nop", "[1, 98, 2]", "float32",
                                                    "cpu:0"]


# --- inspect: JSON ---------------------------------------------------------------------------


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    status, out, err = run_cli(capsys, "inspect", *argv, "--json")
    assert (status, err) == (0, "")
    data: dict[str, Any] = orjson.loads(out)
    return data


def test_inspect_json_heterogeneous(capsys: pytest.CaptureFixture[str]) -> None:
    data = inspect_json(capsys, DUPLEX, *HETERO)
    assert list(data) == ["inputs", "outputs", "nodes", "ops", "placement", "shape_vars"]
    assert data["shape_vars"] == {}  # a static graph
    assert data["inputs"][2] == {"name": "C", "shape": [4], "dtype": "float32", "device": "cpu:0"}
    assert [i["device"] for i in data["inputs"]] == ["cuda:0", "cuda:0", "cpu:0", "cuda:0"]
    assert data["outputs"] == [{"name": "elemwise_add1", "shape": [4], "dtype": "float32",
                                "device": "cuda:0"}]
    assert data["nodes"] == {"total": 9, "inputs": 4, "ops": 5, "__copy": 2, "__nop": 0}
    assert list(data["ops"].items()) == [("__copy", 2), ("elemwise_add", 2), ("elemwise_sub", 1)]
    placement = data["placement"]
    assert placement["devices"] == [
        {"device": "cpu:0", "nodes": 2, "entries": 3, "bytes": 48, "scratch": 0},
        {"device": "cuda:0", "nodes": 3, "entries": 6, "bytes": 80, "scratch": 0}]
    assert [(c["node_id"], c["direction"], c["bytes"]) for c in placement["copies"]] == [
        (3, "cuda:0 -> cpu:0", 16), (6, "cpu:0 -> cuda:0", 16)]
    assert placement["fallbacks"] == []


def test_inspect_json_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    data = inspect_json(capsys, DUPLEX)
    fallbacks = data["placement"]["fallbacks"]
    assert [f["entry_id"] for f in fallbacks] == [0, 1, 2, 6, 7, 8]
    assert {(f["requested_type"], f["device"]) for f in fallbacks} == {(2, "cpu:0")}
    assert data["placement"]["devices"] == [
        {"device": "cpu:0", "nodes": 5, "entries": 9, "bytes": 128, "scratch": 0}]


def test_inspect_json_largest_integers(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    graph = example_graph("simplex")
    graph["attrs"]["device_index"][1][4] = 2**64 - 1
    graph["attrs"]["shape"][1][4] = [0, 2**61 - 1]  # numpy's limit: 4 bytes * 2**61 < 2**63
    data = inspect_json(capsys, write_graph(tmp_path, graph, "big.json"))
    assert data["inputs"][2] == {"name": "C", "shape": [0, 2**61 - 1], "dtype": "float32",
                                 "device": "cpu:0"}
    assert data["placement"]["fallbacks"][-1]["requested_type"] == 2**64 - 1


# --- inspect: DOT ----------------------------------------------------------------------------


def dot_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    status, out, err = run_cli(capsys, "inspect", *argv, "--dot")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "digraph graphrt {" and lines[-1] == "}"
    for line in lines:  # every double quote of a line is closed (escapes skipped)
        assert re.sub(r"\\.", "", line).count('"') % 2 == 0, line
    return lines


def dot_attr(line: str, key: str) -> str:
    match = re.search(rf'\b{key}=("(?:[^"\\]|\\.)*"|\w+)', line)
    assert match, f"no {key} in {line}"
    return match[1]


def node_line(lines: list[str], name: str) -> str:
    found = [line for line in lines if line.lstrip().startswith(f"{name} [")]
    assert len(found) == 1, (name, found)
    return found[0]


def edge_line(lines: list[str], src: int, dst: int) -> str:
    found = [line for line in lines if line.startswith(f"  n{src} -> n{dst}")]
    assert len(found) == 1, (src, dst, found)
    return found[0]


def test_dot_heterogeneous(capsys: pytest.CaptureFixture[str]) -> None:
    lines = dot_lines(capsys, DUPLEX, *HETERO)
    nodes = {nid: node_line(lines, f"n{nid}") for nid in range(9)}
    assert sum(bool(re.match(r"  n\d+ \[", line)) for line in lines) == 9
    assert dot_attr(nodes[2], "label") == r'"elemwise_add0\nelemwise_add"'
    assert dot_attr(nodes[0], "label") == '"A"'
    shapes = {nid: dot_attr(line, "shape") for nid, line in nodes.items()}
    assert shapes == {0: "ellipse", 1: "ellipse", 2: "box", 3: "cds", 4: "ellipse", 5: "box",
                      6: "cds", 7: "ellipse", 8: "box"}
    cpu, cuda = dot_attr(nodes[4], "fillcolor"), dot_attr(nodes[0], "fillcolor")
    assert (cpu, cuda) == ('"#cfe2f3"', '"#f4cccc"')
    assert {nid for nid, line in nodes.items() if dot_attr(line, "fillcolor") == cuda} == {
        0, 1, 2, 6, 7, 8}
    assert dot_attr(node_line(lines, "legend0"), "fillcolor") == cpu
    assert dot_attr(node_line(lines, "legend0"), "label") == '"cpu:0 (fallback)"'
    assert dot_attr(node_line(lines, "legend1"), "fillcolor") == cuda
    assert "  subgraph cluster_legend {" in lines
    assert [nid for nid, line in nodes.items() if "peripheries=2" in line] == [8]
    for src, dst in [(2, 3), (3, 5), (5, 6), (6, 8)]:
        edge = edge_line(lines, src, dst)
        assert dot_attr(edge, "color") == '"red"' and dot_attr(edge, "style") == '"bold"'
        assert dot_attr(edge, "label") == '"16 B"'
    for src, dst in [(0, 2), (1, 2), (4, 5), (7, 8)]:
        assert edge_line(lines, src, dst) == f"  n{src} -> n{dst};"
    assert sum(bool(re.match(r"  n\d+ -> n\d+", line)) for line in lines) == 8
    assert "    { rank=same; legend0 -> legend1 [style=invis]; }" in lines


def test_dot_three_devices_get_three_colours(capsys: pytest.CaptureFixture[str]) -> None:
    lines = dot_lines(capsys, SIMPLEX, "--device", "sim", "--device", "cpu", "--device", "cuda")
    legend = [dot_attr(node_line(lines, f"legend{i}"), "fillcolor") for i in range(3)]
    assert legend == ['"#cfe2f3"', '"#f4cccc"', '"#d9ead3"']
    assert dot_attr(node_line(lines, "legend0"), "label") == '"sim:0 (fallback)"'
    assert dot_attr(node_line(lines, "n0"), "fillcolor") == legend[2]  # A on cuda
    assert dot_attr(node_line(lines, "n4"), "fillcolor") == legend[1]  # C on cpu


def test_dot_escapes_names_and_labels_output_indices(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input('a"b\\c:1', [2])
    split = b.op("split/0", "split", [x], [([1], "float32"), ([1], "float32")])
    y = b.op("line\nbreak", "__nop", [(split, 1)], shape=[1], sids=[2])
    path = write_graph(tmp_path, b.build([y, (split, 0)]))
    lines = dot_lines(capsys, path)
    assert dot_attr(node_line(lines, "n0"), "label") == r'"a\"b\\c:1"'
    assert dot_attr(node_line(lines, "n1"), "label") == r'"split/0\nsplit"'
    nop = node_line(lines, "n2")
    assert dot_attr(nop, "label") == r'"line\nbreak\n__nop"'
    assert dot_attr(nop, "style") == '"filled,dashed"'
    assert "peripheries=2" in nop and "peripheries=2" in node_line(lines, "n1")
    assert dot_attr(edge_line(lines, 1, 2), "label") == '"out 1"'
    assert edge_line(lines, 0, 1) == "  n0 -> n1;"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz (dot) is not installed")
def test_dot_is_accepted_by_graphviz(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input('a"b\\c:1', [2])
    y = b.input("trailing\\", [2])
    z = b.op("<b>{x}|y\n", "add", [x, y], shape=[2])
    named = write_graph(tmp_path, b.build([z]))
    for argv in ([named], [DUPLEX, *HETERO]):
        dot = "\n".join(dot_lines(capsys, *argv))
        rendered = subprocess.run(["dot", "-Tplain"], input=dot, capture_output=True, text=True,
                                  check=False)
        assert (rendered.returncode, rendered.stderr) == (0, "")
        assert rendered.stdout.startswith("graph ")


# --- validate --------------------------------------------------------------------------------


def test_validate_heterogeneous(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "validate", DUPLEX, *HETERO) == (
        0, "ok: 9 nodes, 9 entries, 128 bytes on cpu:0, cuda:0\n", "")


def test_validate_warns_about_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "validate", SIMPLEX)
    assert (status, out) == (0, "ok: 6 nodes, 6 entries, 96 bytes on cpu:0\n")
    assert err.startswith("warning: 3 entries fell back: no cuda device (type 2) was given")


@pytest.mark.parametrize("name", sorted(COMPAT_BYTES))
def test_validate_compat_graphs(capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = COMPAT / f"{name}.json"
    raw = orjson.loads(path.read_bytes())
    status, out, _ = run_cli(capsys, "validate", str(path))
    assert status == 0
    assert out == (f"ok: {len(raw['nodes'])} nodes, {raw['node_row_ptr'][-1]} entries, "
                   f"{COMPAT_BYTES[name]:,} bytes on cpu:0\n")


def test_validate_covers_every_compat_graph() -> None:
    assert sorted(path.stem for path in COMPAT.glob("*.json")) == sorted(COMPAT_BYTES)


def test_validate_malformed_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": [')
    status, out, err = run_cli(capsys, "validate", str(path))
    assert (status, out) == (1, "")
    assert err.startswith("GraphFormatError: graph is not valid JSON")
    assert "Traceback" not in err and err.count("\n") == 1


def test_validate_inconsistent_graph(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = example_graph("simplex")
    graph["nodes"][2]["attrs"]["num_inputs"] = "3"
    status, _, err = run_cli(capsys, "validate", write_graph(tmp_path, graph))
    assert status == 1
    assert err == ("GraphFormatError: node 2 'elemwise_add': num_inputs is 3 but the node lists "
                   "2 inputs\n")


def test_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run_cli(capsys, "validate", str(tmp_path / "nope.json"))
    assert (status, out) == (1, "")
    assert err.startswith("GraphFormatError: cannot read graph file")
    assert "nope.json" in err and "No such file" in err


def test_validate_storage_id_on_two_devices(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    b = GraphBuilder(device_index=True)
    a = b.input("a", [4], sid=0, dev=CPU)
    c = b.input("c", [4], sid=0, dev=CUDA)
    path = write_graph(tmp_path, b.build([a, c]))
    status, out, err = run_cli(capsys, "validate", path, *HETERO)
    assert (status, out) == (1, "")
    assert err.startswith("PlacementError: storage_id 0 is used on two devices")
    assert "on cpu:0" in err and "on cuda:0" in err
    # On cpu alone both fall back to the cpu, but two inputs are live at once: one slot
    # cannot hold both, which the liveness check says.
    err = failed(capsys, "GraphFormatError", "validate", path)
    assert "storage_id 0 is shared by two entries" in err


def test_validate_checks_host_capacity(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    b = GraphBuilder(device_index=True)
    huge = b.input("huge", [2**40, 2**20])  # 4 EiB of float32
    path = write_graph(tmp_path, b.build([huge]))
    status, _, err = run_cli(capsys, "validate", path)
    assert status == 1
    assert err.startswith("PlacementError: entry 0 (output 0 of node 0 'huge') needs "
                          f"{2**62} bytes")
    # A cuda device is planned for, not asked: its capacity is not known without a GPU.
    b = GraphBuilder(device_index=True)
    big = b.input("big", [2**40], dev=CUDA)
    status, out, _ = run_cli(capsys, "validate", write_graph(tmp_path, b.build([big])), *HETERO)
    assert (status, out) == (0, f"ok: 1 nodes, 1 entries, {2**42:,} bytes on cpu:0, cuda:0\n")


@pytest.mark.parametrize("subcommand", ["inspect", "validate"])
def test_bad_device_is_a_usage_error(capsys: pytest.CaptureFixture[str], subcommand: str) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([subcommand, DUPLEX, "--device", "tpu"])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"usage: graphrt {subcommand}" in captured.err
    assert ("error: argument --device: unknown device kind 'tpu' in --device 'tpu' "
            "(known: cpu, cuda, sim") in captured.err


def test_device_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_cli(capsys, "validate", DUPLEX, "--device", "cpu", "--device", "cpu:0")
    assert (status, err) == (1, "PlacementError: device cpu:0 is given twice\n")


# --- usage errors and dispatch ---------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["inspect"],
                                  ["inspect", DUPLEX, "--json", "--dot"],
                                  ["validate", DUPLEX, "--device"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage: graphrt" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert (exc.value.code, capsys.readouterr().out) == (0, f"graphrt {graphrt.__version__}\n")


def test_the_command_table_dispatches_a_new_command(capsys: pytest.CaptureFixture[str]) -> None:
    def configure(parser: argparse.ArgumentParser) -> None:
        cli.add_graph_argument(parser)
        cli.add_placement_options(parser)

    def count(args: argparse.Namespace) -> int:
        source, plan = cli.plan_source(args)
        print(len(source.graph.nodes), *plan.devices)
        return 3

    commands = (*cli.COMMANDS, cli.Command("count", "count the graph's nodes", configure, count))
    assert cli.main(["count", DUPLEX, "--device", "sim:2"], commands) == 3
    assert capsys.readouterr() == ("9 sim:2\n", "")
    with pytest.raises(ValueError, match="'count' is listed twice"):
        cli.build_parser((*commands, commands[-1]))


def test_python_dash_m(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "graphrt", "inspect",
                         "examples/graphs/simplex.json"],
                        cwd=ROOT, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "nodes: 6 total, 3 inputs, 3 ops (1 __copy, 0 __nop)" in ok.stdout
    failed = subprocess.run([sys.executable, "-m", "graphrt", "validate",
                             str(tmp_path / "missing.json")],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert failed.stderr.startswith("GraphFormatError: cannot read graph file")
    assert "Traceback" not in failed.stderr
