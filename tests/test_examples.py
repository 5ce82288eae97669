"""The runnable examples run and say what they should."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


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
