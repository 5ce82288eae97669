"""``benchmarks/peers.py`` end to end on tiny models (``--quick``), and the model builders.

Every workload converts, runs under graphrt, ONNX Runtime and the numpy floor, and agrees
with ONNX Runtime; the JSON carries the rows and the machine. No speed is asserted (speed is
what the benchmark itself reports). Needs no numba.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "peers.py"
WORKLOADS = ["chain", "mlp", "resnet18", "branches", "resnet50", "mobilenet_v2", "bert",
             "resnet18_int8"]


def run_quick(tmp_path: Path, *args: str, hide_numba: bool = False
              ) -> tuple[dict[str, Any], str]:
    out = tmp_path / "peers.json"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if hide_numba:  # as on a machine without it, installed or not
        shadow = tmp_path / "no_numba" / "numba"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text(
            "raise ModuleNotFoundError('numba hidden', name='numba')\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow.parent),
                                                          env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeat", "1",
                           "--block", "2", "--warmup", "0", "--json", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout


def test_every_workload_runs_and_agrees_with_onnxruntime(tmp_path: Path) -> None:
    doc, stdout = run_quick(tmp_path, "--workloads", ",".join(WORKLOADS))
    rows = doc["results"]
    assert sorted({r["workload"] for r in rows}) == sorted(WORKLOADS)
    assert {(r["workload"], r["batch"]) for r in rows if r["workload"] == "mlp"} == {
        ("mlp", 1), ("mlp", 2)}
    for r in rows:
        assert "error" not in r, r
        if r["workload"] == "resnet18_int8":  # against ORT's int8 model; the floor is float32
            assert r["rel_err_graphrt"] < 0.01 and "(numpy column: graphrt's float32" in stdout
        else:
            assert r["rel_err_graphrt"] < 1e-3 and r["rel_err_numpy"] < 1e-3, r
        for key in ("graphrt_ms", "ort_ms", "numpy_ms", "ratio_ort", "ratio_numpy",
                    "graphrt_cold_ms", "ort_cold_ms", "ratio_ort_cold", "convert_s",
                    "create_s", "target"):
            assert r[key] > 0, (key, r)
        assert r["pass"] == (r["ratio_ort"] <= r["target"])
        assert f"<={r['target']:.2f} " in stdout
    env = doc["environment"]
    assert {"cpu", "blas", "numpy", "onnxruntime", "graphrt", "numba", "thread_env",
            "topology", "graphrt_threads"} <= set(env)
    assert env["ort_threads"].startswith(f"intra_op_num_threads={env['graphrt_threads']} ")
    assert {"logical", "physical_cores", "usable", "isa"} <= set(env["topology"])
    assert "steady state" in stdout and "cold" in stdout


def test_workloads_and_batches_select_rows_without_numba(tmp_path: Path) -> None:
    doc, _ = run_quick(tmp_path, "--workloads", "chain,bert", "--batches", "3",
                       hide_numba=True)
    assert [(r["workload"], r["batch"]) for r in doc["results"]] == [
        ("chain", 1), ("bert", 3)]
    assert all("error" not in r for r in doc["results"])
    assert doc["environment"]["numba"] is None


def test_an_unknown_workload_is_refused() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--workloads", "chain,vgg"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "vgg" in done.stderr


def test_model_builders_examples_run() -> None:
    spec = importlib.util.spec_from_file_location("onnx_example_models_doctest",
                                                  ROOT / "examples" / "onnx" / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert result.attempted >= 4 and result.failed == 0
