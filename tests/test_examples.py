"""The runnable examples run and say what they should."""

from __future__ import annotations

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
