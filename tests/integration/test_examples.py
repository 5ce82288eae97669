"""The runnable examples run and say what they should."""

from __future__ import annotations

import importlib
import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from bundle_fixtures import read_members

import graphrt
from graphrt import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_run_duplex_prints_an_exact_result_and_the_placement(
        capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "run_duplex.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "matches numpy exactly: True" in printed
    assert "entry 3 __copy_add_to_sub" in printed and "on cpu:0" in printed
    assert ("on sim:0" in printed) or ("on cuda:0" in printed)


def test_run_models_matches_numpy_on_cpu_and_sim(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "run_models.py"), run_name="__main__")
    printed = capsys.readouterr().out
    for line in ("mlp on cpu:0", "mlp on sim:0", "cnn on cpu:0", "cnn on sim:0"):
        assert line in printed
    errors = [float(line.rsplit("= ", 1)[1]) for line in printed.splitlines() if "= " in line]
    assert len(errors) >= 4 and max(errors) < 1e-5


def test_run_dynamic_shows_batches_and_a_slice_that_moves_only_its_bounds(
        capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "run_dynamic.py"), run_name="__main__")
    printed = capsys.readouterr().out
    for n in (1, 7, 64):
        assert f"mlp batch {n:2d} on cpu:0: output ({n}, 10), max |graphrt - numpy| =" in printed
    assert "matches numpy: True; shape function copied 3 tensors, 48 bytes to the host" in printed


def test_model_files_are_what_generate_writes() -> None:
    generate = runpy.run_path(str(EXAMPLES / "models" / "generate.py"))
    makers = {"mlp": generate["mlp"], "cnn": generate["cnn"],
              "mlp_dynamic": lambda: generate["mlp"]("n"),
              "dynamic_slice": generate["dynamic_slice"]}
    for name, make in makers.items():
        graph, lib = make()
        folder = EXAMPLES / "models" / name
        assert json.loads((folder / "graph.json").read_text()) == graph
        assert json.loads((folder / "lib.json").read_text()) == lib


def test_example_bundles_are_what_build_writes(tmp_path: Path) -> None:
    build = runpy.run_path(str(EXAMPLES / "bundles" / "build.py"))
    for name, target in build["TARGETS"].items():
        rebuilt = build["build"](name, tmp_path / target)
        assert read_members(rebuilt) == read_members(EXAMPLES / "bundles" / target)


@pytest.mark.parametrize(("name", "target"), [("mlp", "mlp"), ("cnn", "cnn.grb")])
def test_example_bundles_match_numpy(name: str, target: str) -> None:
    sys.path.insert(0, str(EXAMPLES / "models"))
    try:
        reference = importlib.import_module("reference")
    finally:
        sys.path.remove(str(EXAMPLES / "models"))
    bundle = graphrt.load_bundle(EXAMPLES / "bundles" / target)
    assert bundle.metadata["model"] == name
    values = reference.weights(name, {"shape": {spec.name: spec.shape for spec in
                                                [*bundle.inputs, *bundle.manifest.params]}})
    data = {spec.name: values[spec.name] for spec in bundle.inputs}
    for params_name, array in bundle.params.items():
        assert np.array_equal(array, values[params_name])
    (probs,) = bundle.create(graphrt.sim(0))(**data)
    assert np.max(np.abs(np.asarray(probs) - reference.MODELS[name](values))) < 1e-5


def test_the_readme_main_command_runs_a_bundle(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (EXAMPLES.parent / "README.md").read_text()
    main_command = re.findall(r"```sh\n(.*?)\n```", readme, re.S)[0]
    prefix = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/graphrt "
    assert main_command.startswith(prefix)
    monkeypatch.chdir(EXAMPLES.parent)
    assert cli.main(shlex.split(main_command.removeprefix(prefix))) == 0
    assert "fused_dense_softmax  [8, 10]  float32" in capsys.readouterr().out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_bundle_load_benchmark_runs(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    script = EXAMPLES.parent / "benchmarks" / "bundle_load.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--mib", "2", "--repeat", "1"])
    runpy.run_path(str(script), run_name="__main__")
    printed = capsys.readouterr().out
    assert re.search(r"^load_bundle\s+[\d.]+\s+\d+\s+\d+$", printed, re.M)
    assert re.search(r"^read / load_bundle: time [\d.]+x, peak private memory [\d.]+x$",
                     printed, re.M)
