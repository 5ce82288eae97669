"""``benchmarks/gpu_models.py`` end to end on the simulated accelerator (``--smoke``: tiny
models, one round). Its figures mean something only on a GPU; here every part must run, agree
with the cpu and write its JSON with finite numbers (no PyTorch columns off cuda)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]


def numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [float(value)] if isinstance(value, int | float) else []


def test_the_gpu_models_benchmark_runs_on_sim(tmp_path: Path) -> None:
    out = tmp_path / "gpu_models.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_models.py"), "--device", "sim:0",
         "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["machine"]["device"] == "sim:0" and result["errors"] == []
    assert all(math.isfinite(n) for n in numbers(result))

    models = result["models"]
    assert [(r["model"], r["batch"], r["dtype"]) for r in models] == [
        (model, 1, dtype) for model in ("resnet50", "encoder")
        for dtype in ("float32", "float16")]
    for row in models:
        assert row["ms"]["graphrt"] > 0 and row["ms"]["graphrt graph"] > 0
        assert row["ms"]["torch graph"] is None and row["vs_torch_graph"] is None
        assert set(row["create_s"]) == {"first", "again"} and row["convert_s"] > 0
        assert max(row["rel_err"].values()) < 1e-3
        assert row["capture"]["enabled"] and row["capture"]["segments"] >= 1

    copies = result["copies"]
    assert [(r["direction"], r["mib"]) for r in copies] == [
        ("host to device", 1), ("device to host", 1)]
    assert all(r["graphrt_gbps"] > 0 and r["baseline_gbps"] > 0 for r in copies)

    for case in ("resnet50 b1 float32", "encoder b1 float16", "capture: 1 segment"):
        assert case in done.stdout
    assert "host to device" in done.stdout and "device to host" in done.stdout


def test_a_part_can_be_chosen(tmp_path: Path) -> None:
    out = tmp_path / "copies.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_models.py"), "--device", "sim:0",
         "--smoke", "--models", "copies", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["models"] == [] and len(result["copies"]) == 2
    assert "graphrt GB/s" in done.stdout and "rel err" not in done.stdout
