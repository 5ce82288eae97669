"""``benchmarks/graph_replay.py`` end to end on the simulated accelerator (its figures mean
something only on a GPU; here it must run, agree with the reference and write its JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_replay_benchmark_runs_on_sim(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "graph_replay.py"), "--device", "sim:0",
         "--nodes", "20", "--repeat", "2", "--number", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["device"] == "sim:0" and result["nodes"] == 20
    assert set(result["per_node_us"]) == {"node by node", "replay"}
    assert result["segments"] == 1 and result["captures"] == 1
    assert "us per node" in done.stdout
