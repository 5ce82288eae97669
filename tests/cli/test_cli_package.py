"""The command line as a package: the command table, ``graphrt bundle``, ``validate --lib``,
the placement options (``--strict-placement``, ``--device-map``), usage errors (status 2), a
closed pipe and directories that are not bundles."""

from __future__ import annotations

import ast
import doctest
import importlib
import json
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from builders import GraphBuilder
from bundle_fixtures import BUNDLES, ROOT, model_parts
from cli_harness import failed, run_cli

import graphrt
from graphrt import cli
from tests.conftest import EXAMPLES

DUPLEX = str(EXAMPLES / "duplex.json")
MLP = str(BUNDLES / "mlp")
CLI_DIR = ROOT / "graphrt" / "cli"
COMMAND_NAMES = ["inspect", "validate", "run", "bench", "bundle", "convert", "serve"]
ADD_SUB_LIB = {"functions": {
    "elemwise_add": {"inputs": ["a", "b"], "outputs": ["y"],
                     "body": [{"op": "add", "inputs": ["a", "b"], "outputs": ["y"]}]},
    "elemwise_sub": {"inputs": ["a", "b"], "outputs": ["y"],
                     "body": [{"op": "subtract", "inputs": ["a", "b"], "outputs": ["y"]}]}}}




def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run; it must exit 2 with the usage on stderr and nothing on stdout. Returns stderr."""
    with pytest.raises(SystemExit) as exc:
        cli.main(list(argv))
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "usage: graphrt" in captured.err
    assert "Traceback" not in captured.err
    return captured.err


def python_m(*argv: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphrt", *argv], cwd=ROOT,
                          capture_output=True, text=True, check=False, **options)


@pytest.fixture
def add_sub_lib(tmp_path: Path) -> str:
    """A declarative lib defining the example graphs' elemwise_add and elemwise_sub."""
    path = tmp_path / "add_sub.json"
    path.write_text(json.dumps(ADD_SUB_LIB))
    return str(path)


def savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    np.savez(path, **arrays)  # type: ignore[arg-type]


def expected_mlp(x: np.ndarray) -> np.ndarray:
    graph, lib, params, _ = model_parts("mlp")
    mod = graphrt.create(graph, graphrt.Library.from_json(lib))
    mod.load_params(params)
    return np.asarray(mod(x=x)[0])


# --- the command table -----------------------------------------------------------------------


def test_the_table_lists_every_command_each_in_its_own_module() -> None:
    assert [command.name for command in cli.COMMANDS] == COMMAND_NAMES
    for command in cli.COMMANDS:
        assert command.handler.__module__ == f"graphrt.cli.{command.name}"
        assert command.configure.__module__ == f"graphrt.cli.{command.name}"
        assert command.help
    with_handlers = sorted(path.stem for path in CLI_DIR.glob("*.py")
                           if re.search(r"^def configure\(", path.read_text(), re.M))
    assert with_handlers == sorted(COMMAND_NAMES)  # no command module outside the table
    printed = python_m("--help")
    assert printed.returncode == 0
    for name in COMMAND_NAMES:
        assert re.search(rf"^    {name}\s", printed.stdout, re.M), printed.stdout


def _relative_imports(path: Path) -> set[str]:
    """The sibling modules of graphrt/cli/ that a module imports (``from .x import ...`` or
    ``from . import x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_no_registration_by_import_and_no_cycle() -> None:
    modules = {path.stem: _relative_imports(path) for path in CLI_DIR.glob("*.py")}
    for name, imports in modules.items():
        if name not in ("__init__", "commands"):
            # only the table knows the commands; no command imports another or the table
            assert not imports & {"commands", *COMMAND_NAMES}, (name, imports)
        assert "__init__" not in imports
    # the import graph among the package's modules has no cycle
    done: set[str] = set()
    while len(done) < len(modules):
        ready = [name for name, imports in modules.items()
                 if name not in done and imports & set(modules) <= done]
        assert ready, f"import cycle among {sorted(set(modules) - done)}"
        done.update(ready)


@pytest.mark.parametrize("module", sorted(
    f"graphrt.cli.{info.name}" for info in pkgutil.iter_modules([str(CLI_DIR)])))
def test_docstring_examples_run(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0 and failures == 0


def test_entry_points_still_lead_to_main() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    target = re.search(r'^graphrt = "([\w.]+):(\w+)"$', pyproject, re.M)
    assert target and getattr(importlib.import_module(target[1]), target[2]) is cli.main
    assert importlib.import_module("graphrt.__main__").main is cli.main
    ok = python_m("validate", "examples/graphs/simplex.json")
    assert (ok.returncode, ok.stdout) == (0, "ok: 6 nodes, 6 entries, 96 bytes on cpu:0\n")


# --- graphrt bundle --------------------------------------------------------------------------


def write_params(folder: Path, kind: str) -> str:
    """The mlp's params as a TVM params blob, a safetensors file or a .npz archive."""
    params = model_parts("mlp")[2]
    if kind == "blob":
        path = folder / "mlp.params"
        path.write_bytes(graphrt.save_params(params))
    elif kind == "safetensors":  # the example bundle's params member is one
        path = folder / "mlp.safetensors"
        shutil.copyfile(BUNDLES / "mlp" / "params.safetensors", path)
    else:
        path = folder / "mlp.npz"
        savez(path, params)
    return str(path)


@pytest.mark.parametrize("params_kind", ["blob", "safetensors", "npz"])
@pytest.mark.parametrize("out_name", ["mlp_dir", "mlp.grb"])
def test_bundle_writes_a_bundle_that_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          params_kind: str, out_name: str) -> None:
    graph, lib, params, data = model_parts("mlp")
    out = tmp_path / out_name
    status, printed, err = run_cli(capsys, "bundle", str(graph), "--lib", str(lib), "--params",
                                   write_params(tmp_path, params_kind), "-o", str(out),
                                   "--metadata", "model=mlp", "--metadata", "source=a=b")
    assert (status, err) == (0, "")
    kind = "zip" if out_name.endswith(".grb") else "directory"
    assert printed.startswith(f"wrote {out}\nbundle: {out} ({kind}, format 1.0, ")
    assert "  params: 6 tensors" in printed and "  inputs to set: x" in printed
    assert out.is_dir() == (kind == "directory")
    bundle = graphrt.load_bundle(out)
    assert dict(bundle.metadata) == {"model": "mlp", "source": "a=b"}
    assert sorted(bundle.params) == sorted(params)
    for name, value in params.items():
        np.testing.assert_array_equal(bundle.params[name], value)
    np.save(tmp_path / "x.npy", data["x"])
    status, printed, _ = run_cli(capsys, "run", str(out), "--input", f"x={tmp_path / 'x.npy'}",
                                 "--output", str(tmp_path / "outputs"))
    assert status == 0 and f"bundle {out} (model mlp) on cpu:0" in printed
    got = np.load(tmp_path / "outputs" / "fused_dense_softmax.npy")
    np.testing.assert_allclose(got, expected_mlp(data["x"]), rtol=1e-6)


def test_bundle_without_params_or_lib(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    status, printed, err = run_cli(capsys, "bundle", DUPLEX, "-o", str(tmp_path / "d.zip"))
    assert status == 0
    assert "  params: 0 tensors" in printed and "  inputs to set: A, B, C, D" in printed
    assert err.startswith("note: the bundle needs external kernels elemwise_add, elemwise_sub")
    assert graphrt.load_bundle(tmp_path / "d.zip").external_kernels == ["elemwise_add",
                                                                        "elemwise_sub"]


def test_bundle_overwrites_only_when_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          add_sub_lib: str) -> None:
    out = str(tmp_path / "d.grb")
    assert run_cli(capsys, "bundle", DUPLEX, "--lib", add_sub_lib, "-o", out)[0] == 0
    err = failed(capsys, "BundleError", "bundle", DUPLEX, "--lib", add_sub_lib, "-o", out)
    assert "exists" in err
    status, _, err = run_cli(capsys, "bundle", DUPLEX, "--lib", add_sub_lib, "-o", out,
                             "--overwrite", "--metadata", "v=2")
    assert (status, err) == (0, "")
    assert graphrt.load_bundle(out).metadata["v"] == "2"


def test_bundle_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph, lib, params, _ = model_parts("mlp")
    out = str(tmp_path / "out")
    base = [str(graph), "--lib", str(lib), "-o", out]
    err = failed(capsys, "BundleError", "bundle", str(tmp_path / "nope.json"), "-o", out)
    assert "cannot read graph" in err and "nope.json" in err
    (tmp_path / "bad.json").write_text('{"nodes": [')
    failed(capsys, "GraphFormatError", "bundle", str(tmp_path / "bad.json"), "-o", out)
    failed(capsys, "GraphFormatError", "bundle", str(graph), "--lib", str(tmp_path / "bad.json"),
           "-o", out)
    err = failed(capsys, "BundleError", "bundle", *base, "--params", str(tmp_path / "no.params"))
    assert "cannot read params file" in err
    err = failed(capsys, "BundleError", "bundle", *base, "--params", str(tmp_path / "no.npz"))
    assert "cannot read params file" in err and ".npz" in err
    savez(tmp_path / "extra.npz", {**params, "z": np.zeros(3, "float32")})
    err = failed(capsys, "BundleError", "bundle", *base, "--params", str(tmp_path / "extra.npz"))
    assert "param 'z' is not an input of the graph" in err
    savez(tmp_path / "wrong.npz", {**params, "b0": np.zeros(7, "float32")})
    err = failed(capsys, "BundleError", "bundle", *base, "--params", str(tmp_path / "wrong.npz"))
    assert "'b0'" in err
    np.save(tmp_path / "one.npy", np.zeros(3))
    shutil.copyfile(tmp_path / "one.npy", tmp_path / "one.npz")
    err = failed(capsys, "BundleError", "bundle", *base, "--params", str(tmp_path / "one.npz"))
    assert "not a .npz archive" in err
    assert not (tmp_path / "out").exists()


def test_bundle_refuses_pickled_params(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    graph, lib, _, _ = model_parts("mlp")
    marker = tmp_path / "pwned"
    savez(tmp_path / "evil.npz", {"w0": np.array([Exploit(str(marker))], dtype=object)})
    err = failed(capsys, "BundleError", "bundle", str(graph), "--lib", str(lib), "--params",
                 str(tmp_path / "evil.npz"), "-o", str(tmp_path / "out"))
    assert "pickle" in err and not marker.exists()


class Exploit:
    """Unpickling this would create a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


# --- validate --lib --------------------------------------------------------------------------


def test_validate_a_graph_against_its_lib(capsys: pytest.CaptureFixture[str],
                                          add_sub_lib: str) -> None:
    status, out, err = run_cli(capsys, "validate", DUPLEX, "--lib", add_sub_lib, "--device",
                               "cpu", "--device", "cuda")
    assert (status, err) == (0, "")
    assert out == (f"ok: lib {add_sub_lib}: every func_name is defined, declarative functions "
                   "type-check on 3 nodes\nok: 9 nodes, 9 entries, 128 bytes on cpu:0, cuda:0\n")


def test_validate_lib_counts_the_scratch(capsys: pytest.CaptureFixture[str]) -> None:
    graph, lib, _, _ = model_parts("mlp")
    plain = run_cli(capsys, "validate", str(graph))[1]
    checked = run_cli(capsys, "validate", str(graph), "--lib", str(lib))[1].splitlines()
    assert checked[0].endswith("type-check on 3 nodes")
    count = re.compile(r"([\d,]+) bytes on cpu:0")
    without, with_lib = (int(count.search(text)[1].replace(",", ""))  # type: ignore[index]
                         for text in (plain, checked[1]))
    scratch = graphrt.create(graph, graphrt.Library.from_json(lib)).plan.scratch.arena
    assert scratch and with_lib == without + sum(scratch.values())
    data = orjson.loads(run_cli(capsys, "inspect", str(graph), "--lib", str(lib), "--json")[1])
    assert data["placement"]["devices"][0]["scratch"] == sum(scratch.values())


def test_validate_lib_missing_a_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    lib = str(model_parts("mlp")[1])
    err = failed(capsys, "KernelNotFoundError", "validate", DUPLEX, "--lib", lib)
    assert "'elemwise_add'" in err and "'elemwise_sub'" in err


def test_validate_lib_whose_intermediates_exceed_the_host(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    lib = tmp_path / "outer.json"
    lib.write_text(json.dumps({"functions": {"outer_sum": {
        "inputs": ["a", "b"], "outputs": ["y"], "body": [
            {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
            {"op": "sum", "inputs": ["t"], "outputs": ["y"]}]}}}))
    g = GraphBuilder()
    a = g.input("a", [2**25, 1])
    b = g.input("b", [1, 2**25])
    y = g.op("outer", "outer_sum", [a, b], shape=[])
    graph = tmp_path / "outer_graph.json"
    graph.write_text(json.dumps(g.build(heads=[y])))
    assert run_cli(capsys, "validate", str(graph))[0] == 0  # without the lib: no scratch known
    err = failed(capsys, "PlacementError", "validate", str(graph), "--lib", str(lib))
    assert ("the intermediates of node 2 'outer' (func_name 'outer_sum') needs "
            f"{2**52} bytes (scratch) on cpu:0, beyond") in err


def test_validate_a_malformed_lib(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = failed(capsys, "GraphFormatError", "validate", DUPLEX, "--lib",
                 str(tmp_path / "none.json"))
    assert "cannot read lib file" in err
    failed(capsys, "GraphFormatError", "validate", DUPLEX, "--lib", DUPLEX)


def test_checking_a_lib_on_the_host_logs_no_fallback(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path, add_sub_lib: str) -> None:
    # The lib is lowered on cpu:0 alone to check it; the fallbacks of that are not the plan's.
    bundle = str(tmp_path / "duplex")
    assert run_cli(capsys, "bundle", DUPLEX, "--lib", add_sub_lib, "-o", bundle)[0] == 0
    for argv in ([bundle], [DUPLEX, "--lib", add_sub_lib]):  # a process: pytest holds logs
        done = python_m("validate", *argv, "--device", "cpu", "--device", "cuda")
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.endswith("ok: 9 nodes, 9 entries, 128 bytes on cpu:0, cuda:0\n")


# --- placement options -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_strict_placement_refuses_a_fallback(capsys: pytest.CaptureFixture[str],
                                             command: str) -> None:
    err = failed(capsys, "PlacementError", command, DUPLEX, "--device", "cpu",
                 "--strict-placement")
    assert "strict placement: 6 entries would fall back to cpu:0" in err
    assert run_cli(capsys, command, DUPLEX, "--device", "cpu", "--device", "cuda",
                   "--strict-placement")[0] == 0
    assert run_cli(capsys, command, DUPLEX, "--strict-placement", "--device-map",
                   "cuda=sim:0")[0] == 0


def test_strict_placement_when_running(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       add_sub_lib: str) -> None:
    bundle = str(tmp_path / "duplex.grb")
    assert run_cli(capsys, "bundle", DUPLEX, "--lib", add_sub_lib, "-o", bundle)[0] == 0
    err = failed(capsys, "PlacementError", "run", bundle, "--strict-placement")
    assert "strict placement" in err
    assert run_cli(capsys, "run", bundle)[0] == 0  # falls back, allowed


def test_device_map_on_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "inspect", DUPLEX, "--device-map", "cuda=sim:0")
    assert (status, err) == (0, "")
    assert "placement on cpu:0 (fallback), sim:0:" in out
    assert re.search(r"^\s+sim:0\s+3\s+6\s+80$", out, re.M)
    assert "remapped by device_map: 1" in out
    assert "device type 2 (cuda) -> sim:0: 6 entries" in out and "fallbacks: 0" in out
    data = orjson.loads(run_cli(capsys, "inspect", DUPLEX, "--device-map", "2=sim:0",
                                "--json")[1])
    assert [i["device"] for i in data["inputs"]] == ["sim:0", "sim:0", "cpu:0", "sim:0"]
    assert len(data["placement"]["remapped"]) == 1


def test_device_map_on_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "validate", DUPLEX, "--device-map", "cuda=sim:0") == (
        0, "ok: 9 nodes, 9 entries, 128 bytes on cpu:0, sim:0\n", "")
    # a mapped device already given keeps its place
    assert run_cli(capsys, "validate", DUPLEX, "--device", "sim", "--device", "cpu",
                   "--device-map", "cuda=sim")[1] == (
        "ok: 9 nodes, 9 entries, 128 bytes on sim:0, cpu:0\n")
    # cpu entries to sim:0, and nothing for cuda's: they fall back to cpu:0
    err = run_cli(capsys, "validate", DUPLEX, "--device-map", "cpu=sim:0")[2]
    assert "6 entries fell back" in err


def test_device_map_on_run_and_bench(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     add_sub_lib: str) -> None:
    bundle = str(tmp_path / "duplex")
    assert run_cli(capsys, "bundle", DUPLEX, "--lib", add_sub_lib, "-o", bundle)[0] == 0
    status, out, err = run_cli(capsys, "run", bundle, "--device-map", "cuda=sim:0",
                               "--output", str(tmp_path / "mapped"))
    assert (status, err) == (0, "")
    assert f"bundle {bundle} on cpu:0, sim:0" in out
    assert run_cli(capsys, "run", bundle, "--output", str(tmp_path / "cpu"))[0] == 0
    name = "elemwise_add1.npy"
    np.testing.assert_array_equal(np.load(tmp_path / "mapped" / name),
                                  np.load(tmp_path / "cpu" / name))
    status, out, _ = run_cli(capsys, "bench", bundle, "--device-map", "cuda=sim:0",
                             "--repeat", "2", "--number", "1")
    assert status == 0 and "on cpu:0, sim:0: 2 samples" in out


def test_device_map_on_the_example_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "run", MLP, "--device-map", "cpu=sim:0")
    assert status == 0 and f"bundle {MLP} (model mlp) on cpu:0, sim:0" in out


# --- usage errors, closed pipes, directories that are not bundles ----------------------------


@pytest.mark.parametrize(("argv", "problem"), [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["inspect", DUPLEX, "--device", "tpu"], "unknown device kind 'tpu'"),
    (["validate", DUPLEX, "--device", "cuda:x"], "must be a non-negative integer"),
    (["inspect", DUPLEX, "--device-map", "cuda"], "expected KIND=DEVICE"),
    (["inspect", DUPLEX, "--device-map", "tpu=cpu"], "device_map key 'tpu'"),
    (["validate", DUPLEX, "--device-map", "cuda=gpu"], "unknown device kind 'gpu'"),
    (["validate", DUPLEX, "--device-map", "cuda=sim", "--device-map", "2=cpu"],
     "--device-map of device type 2 is given twice"),
    (["run", MLP, "--input", "x"], "expected NAME=FILE.npy, given 'x'"),
    (["run", MLP, "--device-map", "=sim"], "expected KIND=DEVICE"),
    (["bench", MLP, "--min-repeat-ms", "-1"], "must be a finite number of milliseconds"),
    (["validate", MLP, "--lib", "lib.json"], "--lib is for a graph JSON file"),
    (["bundle", DUPLEX], "the following arguments are required: -o/--output"),
    (["bundle", DUPLEX, "-o", "x", "--metadata", "novalue"], "expected KEY=VALUE"),
    (["bundle", DUPLEX, "-o", "x", "--metadata", "a=1", "--metadata", "a=2"],
     "--metadata 'a' is given twice"),
])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                             problem: str) -> None:
    assert problem in usage_error(capsys, *argv)


def test_usage_errors_exit_2_from_the_shell() -> None:
    for argv in (["frobnicate"], ["inspect", DUPLEX, "--device", "tpu"]):
        done = python_m(*argv)
        assert done.returncode == 2 and done.stdout == ""
        assert "usage: graphrt" in done.stderr and "Traceback" not in done.stderr


def test_a_closed_pipe_is_quiet() -> None:
    done = subprocess.run(f"{sys.executable} -m graphrt inspect examples/graphs/duplex.json "
                          "| head -1", shell=True, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert (done.stdout, done.stderr) == ("inputs: 4\n", "")


def test_output_larger_than_a_closed_pipe_ends_quietly_with_status_1(tmp_path: Path) -> None:
    g = GraphBuilder()
    x = g.input("x", [4])
    for i in range(2000):  # --dot prints far more than a pipe holds
        x = g.op(f"node_{i}", "relu", [x], shape=[4])
    graph = tmp_path / "long.json"
    graph.write_text(json.dumps(g.build(heads=[x])))
    process = subprocess.Popen([sys.executable, "-m", "graphrt", "inspect", str(graph), "--dot"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # nobody reads: the first write that does not fit fails
    err = process.stderr.read()
    process.stderr.close()
    assert (process.wait(timeout=60), err) == (1, b"")


@pytest.mark.parametrize("command", ["inspect", "validate", "run", "bench"])
def test_an_empty_directory_is_not_a_bundle(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            command: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    err = failed(capsys, "BundleError", command, str(empty))
    assert f"not a bundle: no manifest.json in {empty}" in err


def test_a_directory_of_other_files_is_not_a_bundle(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    err = failed(capsys, "BundleError", "inspect", str(tmp_path))
    assert "not a bundle: no manifest.json" in err and "unexpected member" not in err
