"""``benchmarks/inter_op.py`` end to end at one round: it must import what it uses from
``onnx_models``, agree with ONNX Runtime and report both regimes (its figures mean something
only at its default rounds, on a quiet machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def test_the_inter_op_benchmark_runs_and_reports_both_regimes(tmp_path: Path) -> None:
    out = tmp_path / "inter_op.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "inter_op.py"), "--model", "branches1",
         "--repeat", "1", "--block", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    medians = json.loads(out.read_text())["medians_s"]
    assert set(medians) == {"sequential", "2 lanes", "default", "onnxruntime"}
    assert all(set(both) == {"steady", "cold"} and min(both.values()) > 0
               for both in medians.values())
    assert " steady:" in done.stdout and " cold:" in done.stdout
