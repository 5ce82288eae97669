"""Fixtures of the cpu kernel tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def loop_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[Path]:
    """The compiled loops' cache, one folder for the session (each loop compiles once), and
    the compiled path switched on whatever the environment says."""
    folder = tmp_path_factory.getbasetemp() / "graphrt-cache"
    monkeypatch.setenv("GRAPHRT_CACHE_DIR", str(folder))
    monkeypatch.delenv("GRAPHRT_JIT", raising=False)
    yield folder
