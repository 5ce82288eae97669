"""Running the graphrt command in-process, for the CLI tests."""

from __future__ import annotations

import pytest

from graphrt import cli


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``graphrt ARGV``: its exit status, stdout and stderr."""
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def failed(capsys: pytest.CaptureFixture[str], error: str, *argv: str) -> str:
    """Run; it must exit 1 with ``error: ...`` on stderr and no traceback. Returns stderr."""
    status, out, err = run_cli(capsys, *argv)
    assert (status, out) == (1, ""), err
    assert err.startswith(f"{error}: "), err
    assert "Traceback" not in err and err.count("\n") == 1
    return err
