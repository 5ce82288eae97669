"""What the fuzz targets start from, and the steps every loaded graph goes through.

The seeds: the example graphs and models, and the compatibility corpus of real TVM graphs in
``tests/data/compat/graphs`` (where each came from: ``tests/data/compat/README.md``).
"""

from __future__ import annotations

import random
from functools import cache
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import orjson

import graphrt

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
COMPAT = ROOT / "tests" / "data" / "compat" / "graphs"
MODELS = ("mlp", "cnn", "mlp_dynamic", "dynamic_slice")
MAX_INPUT_ELEMENTS = 1 << 20


def graph_files() -> list[Path]:
    """Every seed graph: examples, example models, and the compat corpus."""
    files = sorted((EXAMPLES / "graphs").glob("*.json"))
    files += [EXAMPLES / "models" / name / "graph.json" for name in MODELS]
    files += sorted(COMPAT.glob("*.json"))
    return files


@cache
def seed_bytes(path: Path) -> bytes:
    return path.read_bytes()


@cache
def seed_document(path: Path) -> Any:
    return orjson.loads(seed_bytes(path))


def _ignore(*arrays: Any) -> None:
    """A kernel that accepts anything and writes nothing."""


def permissive_lib(graph: graphrt.Graph) -> graphrt.Library:
    """A kernel for every func_name of ``graph``, accepting any arguments."""
    names = {node.func_name for node in graph.nodes if node.func_name}
    return graphrt.Library({name: _ignore for name in names
                            if name not in ("__nop", "__copy")})


DEVICE_CHOICES: tuple[tuple[tuple[str, ...], dict[str, str] | None], ...] = (
    (("cpu",), None), (("cpu",), None), (("cpu", "sim"), None), (("sim", "cpu"), None),
    (("cpu",), {"cuda": "sim:0"}),
)


def create(graph: Any, lib: Any, rng: random.Random) -> graphrt.GraphModule:
    """``graphrt.create`` on devices picked by ``rng`` (cpu; cpu and sim; a device map)."""
    devices, device_map = rng.choice(DEVICE_CHOICES)
    return graphrt.create(graph, lib, *devices, device_map=device_map)


def _concrete(shape: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(dim if isinstance(dim, int) and dim >= 0 else 2 for dim in shape)


def exercise(module: graphrt.GraphModule, rng: random.Random) -> str:
    """Set every input to zeros (or random values) of its shape, run once, read the outputs."""
    info = module.get_input_info()
    for name, shape in info["shape"].items():
        dims = _concrete(tuple(shape))
        if prod(dims) > MAX_INPUT_ELEMENTS:
            continue
        dtype = np.dtype(info["dtype"][name]) if info["dtype"][name] != "bfloat16" else None
        if dtype is None:
            continue
        value = np.zeros(dims, dtype) if rng.random() < 0.8 else (
            np.random.default_rng(rng.randrange(2**32)).standard_normal(dims).astype(dtype))
        module.set_input(name, value)
    module.run()
    for index in range(module.get_num_outputs()):
        module.get_output(index)
    return "ran"
