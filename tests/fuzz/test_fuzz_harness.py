"""The harness's own bounds: a hang, a runaway allocation, a write outside the case folder and
a non-graphrt exception are each a finding; a graphrt error is a refusal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import graphrt

from .harness import CONFIG, Stats, run_case


def _outcome(body: object) -> tuple[str, Stats]:
    stats = Stats("harness-self-test")
    return run_case(stats, "self-test", body), stats  # type: ignore[arg-type]


def test_a_graphrt_error_is_a_refusal() -> None:
    def body(folder: Path) -> str:
        raise graphrt.GraphFormatError("bad")

    outcome, stats = _outcome(body)
    assert outcome == "refused:GraphFormatError" and not stats.findings


def test_a_hang_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CONFIG, "timeout_s", 0.2)

    def body(folder: Path) -> str:
        fifo = folder / "fifo"
        os.mkfifo(fifo)
        fifo.read_bytes()  # blocks: nobody writes
        return "read"

    start = time.perf_counter()
    outcome, stats = _outcome(body)
    assert outcome == "timeout" and ("timeout" in {f.kind for f in stats.findings.values()})
    assert time.perf_counter() - start < 5


def test_a_runaway_allocation_is_a_memory_error() -> None:
    def body(folder: Path) -> str:
        bytearray((CONFIG.memory_mib + 64) * 2**20)
        return "allocated"

    outcome, _ = _outcome(body)
    assert outcome == "MemoryError"


@pytest.mark.parametrize("write", ["open", "rename", "remove", "mkdir"])
def test_a_write_outside_the_case_folder_is_refused(tmp_path: Path, write: str) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("x")

    def body(folder: Path) -> str:
        inside = folder / "inside.txt"
        inside.write_text("allowed")
        if write == "open":
            outside.write_text("y")
        elif write == "rename":
            os.replace(inside, outside)
        elif write == "remove":
            outside.unlink()
        else:
            (tmp_path / "new").mkdir()
        return "wrote"

    outcome, _ = _outcome(body)
    assert outcome == "write"
    assert outside.read_text() == "x"


def test_other_exceptions_are_findings_with_their_place() -> None:
    def body(folder: Path) -> str:
        return {}["missing"]  # type: ignore[no-any-return]

    outcome, stats = _outcome(body)
    (finding,) = stats.findings.values()
    assert outcome == "KeyError" and "test_fuzz_harness.py" in finding.where
