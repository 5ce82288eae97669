"""The compiled path is the default install's (issue 30, item 1): numba is a core dependency,
a convolution model lowers to the compiled kernel with only the core dependencies, and where
the compiled kernels cannot run one warning per process says why and what it costs."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphrt.kernels import chain
from graphrt.kernels.cpu import jit
from graphrt.ops import TensorType, get_op

ROOT = Path(__file__).resolve().parents[3]


def test_numba_is_a_core_dependency() -> None:
    """Read from pyproject.toml (what ``pip install -e .`` installs), not from an installed
    distribution's metadata, which a checkout run from PYTHONPATH does not have."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r"^dependencies = \[(.*?)\]", text, re.MULTILINE | re.DOTALL)
    assert found is not None
    core = re.findall(r'"([^"]+)"', found.group(1))  # tomllib is Python 3.11's
    assert any(r.replace(" ", "").startswith("numba>=") for r in core), core


def test_a_convolution_lowers_to_the_compiled_kernel_by_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAPHRT_JIT", raising=False)
    conv = get_op("conv2d")
    attrs = conv.attrs.model_validate({"padding": (1, 1, 1, 1)})
    x, w = TensorType((1, 8, 16, 16), "float32"), TensorType((8, 8, 3, 3), "float32")
    out = conv.infer([x, w], attrs, [None, None])
    prepared = chain("cpu", np).prepare(conv, attrs, [x, w], out)
    assert prepared is not None and prepared.provider == "cpu"


def test_a_missing_numba_warns_once_per_process_with_the_cost(tmp_path: Path) -> None:
    """numba hidden as on a machine without it: two creates, one warning, same results."""
    shadow = tmp_path / "numba"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('numba hidden')\n")
    script = (
        "import logging, numpy as np, graphrt\n"
        "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s')\n"
        "lib = graphrt.Library.from_json(open('examples/models/cnn/lib.json').read())\n"
        "for _ in range(2):\n"
        "    mod = graphrt.create(open('examples/models/cnn/graph.json').read(), lib)\n"
        "print('created')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={"PYTHONPATH": os.pathsep.join(  # the shadow first
                              [str(tmp_path), *os.environ.get("PYTHONPATH", "").split(
                                  os.pathsep)]).rstrip(os.pathsep), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, done.stderr
    assert "the compiled cpu kernels cannot run (numba cannot be imported" in warnings[0]
    assert "numpy paths" in warnings[0] and "1.6x" in warnings[0]


def test_graphrt_jit_0_is_asked_for_and_gives_no_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    monkeypatch.setattr(jit, "_WARNED", [])
    with caplog.at_level(logging.INFO, logger="graphrt"):
        assert jit.load_numba(lambda reason: None) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert jit._WARNED == []
