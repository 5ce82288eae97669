"""Every docstring example in the package runs and prints what it says (one test per module)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import graphrt

ROOT = Path(__file__).resolve().parents[2]
NEEDS_CUPY = {"graphrt.devices.cuda_backend"}


def modules_with_examples() -> list[str]:
    """Modules whose docstrings hold examples; a package whose extra is not installed here
    (``graphrt.serve`` without starlette: it says so with a GraphrtError) is left out."""
    names = ["graphrt", *(info.name for info in pkgutil.walk_packages(
        graphrt.__path__, "graphrt.", onerror=lambda name: None))]
    found = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except graphrt.GraphrtError:  # its parent package needs an extra that is missing
            continue
        assert spec is not None and spec.origin is not None
        if ">>>" in Path(spec.origin).read_text(encoding="utf-8"):
            found.append(name)
    return found


MODULES = modules_with_examples()


def test_the_public_api_modules_have_examples() -> None:
    for name in ("graphrt", "graphrt.errors", "graphrt.params", "graphrt.executor.module",
                 "graphrt.lib.library", "graphrt.bundle.bundle", "graphrt.onnx.convert",
                 "graphrt.contrib.graph_executor", "graphrt.devices"):
        assert name in MODULES, name


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in NEEDS_CUPY:
        pytest.importorskip("cupy")
    monkeypatch.chdir(ROOT)  # examples name files such as examples/graphs/simplex.json
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:  # an extra's package (starlette for graphrt.serve)
        if (err.name or "graphrt").startswith("graphrt"):
            raise
        pytest.skip(f"{name} needs {err.name}, which this environment lacks")
    failures, _ = doctest.testmod(module, report=True)
    assert failures == 0
