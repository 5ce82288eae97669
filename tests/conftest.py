"""Shared fixtures: example graphs retargeted to an accelerator, kernels, the cuda marker."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import graphrt
from graphrt.devices import locate

# The compiled-fusion cache of this test session (subprocesses inherit it): the tests never
# write into the user's ~/.cache.
os.environ.setdefault("GRAPHRT_CACHE_DIR", tempfile.mkdtemp(prefix="graphrt-test-cache-"))

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "graphs"
MODELS = EXAMPLES.parent / "models"
EXAMPLE_GRAPHS = sorted(path.stem for path in EXAMPLES.glob("*.json"))
COMPAT = Path(__file__).resolve().parent / "data" / "compat" / "graphs"
"""The compatibility corpus: ten graphs TVM's codegen really produced (where each came from:
``tests/data/compat/README.md``)."""


def gpu_available() -> bool:
    try:
        graphrt.cuda(0)
    except graphrt.DeviceError:
        return False
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run the fuzz targets' long budget (also GRAPHRT_FUZZ_LONG=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and cupy (pip install 'graphrt[cuda]')")
    for item in items:
        # The marker, not the keyword: every test under tests/kernels/cuda has "cuda" among
        # its keywords (its folder's name), the pure planning tests there included.
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def example_graph(name: str, accelerator: graphrt.Device | None = None) -> dict[str, Any]:
    """An example graph as a dict; its accelerator entries (code 2) moved to ``accelerator``."""
    graph: dict[str, Any] = orjson.loads((EXAMPLES / f"{name}.json").read_bytes())
    if accelerator is not None and "device_index" in graph["attrs"]:
        codes = graph["attrs"]["device_index"][1]
        graph["attrs"]["device_index"][1] = [
            accelerator.type_code if code == graphrt.devices.CUDA else code for code in codes]
    return graph


def _same_device(*arrays: Any) -> None:
    devices = {locate(array)[0] for array in arrays}
    if len(devices) != 1:
        raise AssertionError(f"kernel received arrays of several devices: {devices}")


def strict_add(a: Any, b: Any, out: Any) -> None:
    _same_device(a, b, out)
    np.add(a, b, out=out)


def strict_sub(a: Any, b: Any, out: Any) -> None:
    _same_device(a, b, out)
    np.subtract(a, b, out=out)


@pytest.fixture
def elemwise_lib() -> graphrt.Library:
    """Generic add/sub kernels that refuse arrays of mixed devices."""
    return graphrt.Library({"elemwise_add": strict_add, "elemwise_sub": strict_sub})


@pytest.fixture
def sim() -> graphrt.Device:
    device = graphrt.sim(0)
    graphrt.sim_counters(device).reset()
    return device


def random_inputs(mod: graphrt.GraphModule, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    info = mod.get_input_info()
    return {name: rng.standard_normal(shape).astype(info["dtype"][name])
            for name, shape in info["shape"].items()}


@pytest.fixture
def allocations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every ``Backend.allocate`` call's byte count, on cpu and sim."""
    from graphrt.devices import Backend, backend_for

    calls: list[int] = []
    for cls in {type(backend_for(graphrt.device(d))) for d in ("cpu", "sim")}:
        original = cls.allocate

        def counted(self: Backend, nbytes: int, _original: Any = original) -> Any:
            calls.append(nbytes)
            return _original(self, nbytes)

        monkeypatch.setattr(cls, "allocate", counted)
    yield calls


def host(array: Any) -> np.ndarray:
    """A numpy copy of a cpu or sim array."""
    out = np.empty(array.shape, array.dtype)
    np.copyto(out, np.asarray(array).view(np.ndarray))
    return out
