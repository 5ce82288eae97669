"""The command line on bundles: run, bench, and inspect/validate given a bundle; errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder
from bundle_fixtures import (
    BUNDLES,
    ROOT,
    model_parts,
    read_members,
    replace_member,
    save_model,
    write_directory,
)
from cli_harness import failed, run_cli

import graphrt
import graphrt.cli.bench as cli_bench
from graphrt import cli
from tests.conftest import EXAMPLES, strict_add, strict_sub

MLP = str(BUNDLES / "mlp")
CNN = str(BUNDLES / "cnn.grb")




def expected_mlp(x: np.ndarray) -> np.ndarray:
    graph, lib, params, _ = model_parts("mlp")
    mod = graphrt.create(graph, graphrt.Library.from_json(lib))
    mod.load_params(params)
    return mod(x=x)[0]


# --- run -------------------------------------------------------------------------------------


def test_run_with_random_inputs_prints_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "run", MLP)
    assert status == 0 and err == ""
    assert out.startswith(f"bundle {MLP} (model mlp) on cpu:0\n")
    assert re.search(r"^  x\s+\[8, 64\]\s+float32\s+random \(seed 0\)$", out, re.M)
    row = re.search(r"^  fused_dense_softmax\s+\[8, 10\]\s+float32\s+min (\S+)\s+mean (\S+)\s+"
                    r"max (\S+)$", out, re.M)
    assert row, out
    x = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    probs = expected_mlp(x)
    assert float(row[1]) == pytest.approx(probs.min(), rel=1e-5)
    assert float(row[2]) == pytest.approx(0.1, rel=1e-5)  # softmax rows sum to 1
    assert float(row[3]) == pytest.approx(probs.max(), rel=1e-5)
    assert re.search(r"^ran in [\d.]+ ms", out, re.M)


def test_run_inputs_from_files_and_outputs_to_a_folder(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    x = model_parts("mlp")[3]["x"]
    np.save(tmp_path / "x.npy", x)
    status, out, _ = run_cli(capsys, "run", MLP, "--input", f"x={tmp_path / 'x.npy'}",
                             "--output", str(tmp_path / "out" / "deep"))
    assert status == 0
    assert f"from {tmp_path / 'x.npy'}" in out
    written = tmp_path / "out" / "deep" / "fused_dense_softmax.npy"
    assert f"wrote {written}" in out
    assert np.array_equal(np.load(written), expected_mlp(x))


@pytest.mark.parametrize("bundle", [MLP, CNN])
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_run_the_example_bundles(capsys: pytest.CaptureFixture[str], bundle: str,
                                 device: str) -> None:
    status, out, _ = run_cli(capsys, "run", bundle, "--device", device, "--seed", "3")
    assert status == 0 and f"on {device}:0" in out and "random (seed 3)" in out


def test_run_names_output_files_safely(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    graph = GraphBuilder()
    x = graph.input("x", [2])
    graph.op("../../evil", "twice", [x], shape=[2])
    graph.op("ok:1", "twice", [x], shape=[2])
    lib = graphrt.Library()
    lib.define("twice", {"inputs": ["a"], "outputs": ["y"],
                         "body": [{"op": "add", "inputs": ["a", "a"], "outputs": ["y"]}]})
    bundle = graphrt.save_bundle(tmp_path / "bundle", graph.build(heads=[1, 2]), lib)
    out_dir = tmp_path / "sandbox" / "out"
    assert run_cli(capsys, "run", str(bundle), "--output", str(out_dir))[0] == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["evil.npy", "ok_1.npy"]
    assert not (tmp_path / "evil.npy").exists() and sorted(
        p.name for p in (tmp_path / "sandbox").iterdir()) == ["out"]


def test_run_refuses_pickled_inputs_without_unpickling(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = np.array([Exploit(str(marker))], dtype=object)
    np.save(tmp_path / "x.npy", payload, allow_pickle=True)
    err = failed(capsys, "InputError", "run", MLP, "--input", f"x={tmp_path / 'x.npy'}")
    assert "cannot read" in err and "pickle" in err
    assert not marker.exists()


class Exploit:
    """Unpickling this would create a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


def write_inputs(folder: Path) -> None:
    np.save(folder / "x.npy", np.zeros((8, 64), "float32"))
    np.save(folder / "wrong.npy", np.zeros((8, 63), "float32"))
    np.savez(folder / "x.npz", x=np.zeros((8, 64), "float32"))


@pytest.mark.parametrize(("argv", "error", "problem"), [
    (["--input", "y=x.npy"], "InputError", "'y' is not an input of the bundle (its inputs: x)"),
    (["--input", "x=missing.npy"], "InputError", "cannot read 'missing.npy'"),
    (["--input", "x=wrong.npy"], "InputError", "shape"),
    (["--input", "x=x.npz"], "InputError", "is an .npz archive"),
])
def test_run_input_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch, argv: list[str], error: str,
                          problem: str) -> None:
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path)
    assert problem in failed(capsys, error, "run", MLP, *argv)


@pytest.mark.parametrize(("argv", "problem"), [
    (["--input", "x"], "argument --input: expected NAME=FILE.npy, given 'x'"),
    (["--input", "x=x.npy", "--input", "x=x.npy"], "--input 'x' is given twice"),
    (["--device", "tpu"], "unknown device kind 'tpu'"),
])
def test_run_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                 problem: str) -> None:
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", MLP, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: graphrt run" in err and problem in err


def test_run_a_bundle_needing_external_kernels(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    lib = {"elemwise_add": strict_add, "elemwise_sub": strict_sub}
    path = graphrt.save_bundle(tmp_path / "s.grb", EXAMPLES / "simplex.json", lib)
    err = failed(capsys, "BundleError", "run", str(path))
    assert "'elemwise_add'" in err and "lib=" in err


@pytest.mark.parametrize("subcommand", ["run", "bench"])
def test_run_and_bench_need_a_bundle(capsys: pytest.CaptureFixture[str], subcommand: str) -> None:
    err = failed(capsys, "BundleError", subcommand, str(EXAMPLES / "simplex.json"))
    assert "is not a bundle" in err


def test_run_an_output_folder_that_cannot_be_made(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    failed(capsys, "FileExistsError", "run", MLP, "--output", str(tmp_path / "file"))


# --- bench -----------------------------------------------------------------------------------


def test_bench_prints_percentiles_and_host_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "bench", CNN, "--repeat", "4", "--number", "2")
    assert status == 0 and err == ""  # stderr is not a terminal: no progress bar
    assert out.startswith(f"bench {CNN} on cpu:0: 4 samples of 2 runs\n")
    values = {name: float(value) for name, value in
              re.findall(r"^  (median|p10|p90)\s+([\d.]+) ms$", out, re.M)}
    assert set(values) == {"median", "p10", "p90"}
    assert 0 < values["p10"] <= values["median"] <= values["p90"]
    overhead = re.search(r"^  host overhead\s+([\d.]+) ms per run \(([\d.]+)% of the median\)",
                         out, re.M)
    assert overhead and float(overhead[1]) < values["median"]


def test_bench_progress_bar_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_cli(capsys, "bench", MLP, "--repeat", "3", "--number", "1",
                             "--progress")
    assert status == 0
    assert err.endswith("\n") and "bench [" in err and "] 3/3" in err


def test_bench_progress_bar_on_a_terminal_for_long_runs(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(cli_bench, "LONG_RUN_S", 0.0)
    assert "] 2/2" in run_cli(capsys, "bench", MLP, "--repeat", "2", "--number", "1")[2]
    assert run_cli(capsys, "bench", MLP, "--repeat", "2", "--number", "1",
                   "--no-progress")[2] == ""
    monkeypatch.setattr(cli_bench, "LONG_RUN_S", 1e9)
    assert run_cli(capsys, "bench", MLP, "--repeat", "2", "--number", "1")[2] == ""


def test_bench_calibrates_number_and_times_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "bench", MLP, "--repeat", "2", "--min-repeat-ms", "2",
                             "--end-to-end", "--device", "sim")
    assert status == 0
    match = re.search(r"on sim:0: 2 samples of (\d+) runs, end to end", out)
    assert match and int(match[1]) >= 1


@pytest.mark.parametrize("argv", [["--repeat", "0"], ["--number", "-3"], ["--repeat", "x"]])
def test_bench_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", MLP, *argv])
    assert exc.value.code == 2 and "must be a positive integer" in capsys.readouterr().err


def test_host_overhead_is_what_the_steps_do_not_account_for() -> None:
    module = graphrt.load_bundle(MLP).create()
    overhead = cli_bench.host_overhead(module, repeat=5)
    run = module.benchmark(repeat=3, number=20).median
    assert 0 <= overhead < run


# --- inspect and validate on bundles ---------------------------------------------------------


@pytest.mark.parametrize("bundle", [MLP, CNN])
def test_inspect_a_bundle(capsys: pytest.CaptureFixture[str], bundle: str) -> None:
    status, out, _ = run_cli(capsys, "inspect", bundle)
    assert status == 0
    kind = "zip" if bundle.endswith(".grb") else "directory"
    assert out.startswith(f"bundle: {bundle} ({kind}, format 1.0, written by graphrt ")
    assert re.search(r"^  digest: sha256:[0-9a-f]{64}", out, re.M)
    assert re.search(r"^    params\.safetensors\s+[\d,]+ bytes  sha256:[0-9a-f]{16}$", out, re.M)
    assert "  params: 6 tensors" in out and "  external kernels: none" in out
    model = "mlp" if bundle == MLP else "cnn"
    assert f"    model: {model}" in out
    assert "nodes: " in out and "placement on cpu:0 (fallback):" in out


def test_inspect_a_bundle_as_json_and_dot(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "inspect", CNN, "--json")
    data = json.loads(out)
    assert status == 0 and next(iter(data)) == "bundle"
    assert data["bundle"]["kind"] == "zip" and data["bundle"]["metadata"]["model"] == "cnn"
    assert data["bundle"]["params"]["count"] == 6 and len(data["bundle"]["digest"]) == 64
    assert data["inputs"][0]["name"] == "data"
    status, out, _ = run_cli(capsys, "inspect", CNN, "--dot")
    assert status == 0 and out.startswith("digraph graphrt {")


def test_inspect_tells_a_bundles_params_from_the_inputs_to_set(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "inspect", MLP)
    assert status == 0
    assert "inputs: 7 (1 to set, 6 params)" in out
    assert re.search(r"^  x\s+\[8, 64\]\s+float32\s+cpu:0$", out, re.M)
    assert re.search(r"^  w0\s+\[128, 64\]\s+float32\s+cpu:0\s+param$", out, re.M)
    assert "nodes: 10 total, 7 inputs (6 params), 3 ops" in out
    status, out, _ = run_cli(capsys, "inspect", MLP, "--json")
    data = json.loads(out)
    assert [t.get("param", False) for t in data["inputs"]] == [False] + [True] * 6
    assert data["nodes"]["params"] == 6
    status, out, _ = run_cli(capsys, "inspect", str(EXAMPLES / "duplex.json"))
    assert "inputs: 4\n" in out and "param" not in out  # a graph alone has no params


@pytest.mark.parametrize("bundle", [MLP, CNN])
def test_validate_a_bundle(capsys: pytest.CaptureFixture[str], bundle: str) -> None:
    status, out, err = run_cli(capsys, "validate", bundle, "--device", "cpu", "--device", "cuda")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (f"ok: bundle {bundle}: 4 members verified (sha256), 6 params fit the "
                        f"graph, declarative functions type-check on "
                        f"{3 if bundle == MLP else 5} nodes")
    assert lines[1].startswith("ok: ") and lines[1].endswith("on cpu:0, cuda:0")


def test_validate_notes_external_kernels(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    lib = {"elemwise_add": strict_add, "elemwise_sub": strict_sub}
    path = graphrt.save_bundle(tmp_path / "s", EXAMPLES / "simplex.json", lib)
    status, _, err = run_cli(capsys, "validate", str(path))
    assert status == 0 and "needs external kernels elemwise_add, elemwise_sub" in err


@pytest.mark.parametrize("subcommand", ["validate", "inspect", "run", "bench"])
def test_a_tampered_bundle_fails_every_subcommand(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path, subcommand: str) -> None:
    (tmp_path / "src").mkdir()
    members = read_members(save_model(tmp_path / "src", "mlp"))
    members["graph.json"] = members["graph.json"].replace(b'"x"', b'"y"')
    bundle = write_directory(tmp_path / "tampered", members)
    err = failed(capsys, "BundleError", subcommand, str(bundle))
    assert "member 'graph.json' fails its checksum" in err


def test_validate_a_lib_that_does_not_fit_the_graph(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    members = read_members(save_model(tmp_path / "src", "mlp"))
    lib = json.loads(members["lib.json"])
    lib["functions"]["fused_dense_softmax"]["body"].insert(1, {
        "op": "sum", "inputs": ["t"], "outputs": ["s"], "attrs": {"axis": [1]}})
    lib["functions"]["fused_dense_softmax"]["body"][2]["inputs"] = ["s"]
    replace_member(members, "lib.json", json.dumps(lib).encode())
    bundle = write_directory(tmp_path / "misfit", members)
    err = failed(capsys, "BundleError", "validate", str(bundle))
    assert "member 'lib.json'" in err and "'fused_dense_softmax'" in err


# --- the console script and python -m -------------------------------------------------------


def test_console_script_and_python_dash_m_run_a_bundle(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("graphrt")
    commands = [[sys.executable, "-m", "graphrt"]]
    if script.exists():
        commands.append([str(script)])
    for command in commands:
        ok = subprocess.run([*command, "run", "examples/bundles/mlp"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
        assert ok.returncode == 0, ok.stderr
        assert "fused_dense_softmax  [8, 10]  float32" in ok.stdout
        bad = subprocess.run([*command, "run", str(tmp_path / "absent")], cwd=ROOT,
                             capture_output=True, text=True, check=False,
                             env={**os.environ, "PYTHONWARNINGS": "error"})
        assert bad.returncode == 1 and bad.stderr.startswith("BundleError: no bundle at")
        assert "Traceback" not in bad.stderr
