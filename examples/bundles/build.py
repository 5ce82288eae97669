"""Build the example bundles from examples/models/: the MLP as a directory, the CNN as one file.

Each bundle holds the model's graph JSON, its declarative lib, deterministic weights (the same
``reference.weights`` that ``examples/run_models.py`` checks against numpy) and a manifest.
The data input (``x``, ``data``) is left out of the params: it is the bundle's input. The
bundles are checked in; this script rewrites them byte for byte.
Usage: ``python examples/bundles/build.py``, then ``graphrt run examples/bundles/mlp``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

import graphrt

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "models"
sys.path.insert(0, str(MODELS))

import reference  # noqa: E402  (the deterministic weights, beside the model JSON)

DATA_INPUTS = {"mlp": "x", "cnn": "data"}
TARGETS = {"mlp": "mlp", "cnn": "cnn.grb"}
"""Where each bundle goes under examples/bundles/: a directory, and a single zip file."""


def model_values(name: str) -> dict[str, np.ndarray[Any, Any]]:
    """Every graph input of the model: its weights and a deterministic data input."""
    lib = graphrt.Library.from_json(MODELS / name / "lib.json")
    mod = graphrt.create(MODELS / name / "graph.json", lib)
    return reference.weights(name, mod.get_input_info())


def build(name: str, target: Path) -> Path:
    """Write the bundle of example model ``name`` to ``target`` (replacing it)."""
    values = model_values(name)
    params = {key: value for key, value in values.items() if key != DATA_INPUTS[name]}
    metadata = {"model": name, "source": f"examples/models/{name} (graph.json, lib.json); "
                f"weights: examples/models/reference.py weights('{name}', seed 0)",
                "data_input": DATA_INPUTS[name]}
    return graphrt.save_bundle(target, MODELS / name / "graph.json", MODELS / name / "lib.json",
                               params, metadata, overwrite=True)


def main() -> None:
    for name, target in TARGETS.items():
        path = build(name, HERE / target)
        size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else (
            path.stat().st_size)
        print(f"wrote {path.relative_to(HERE.parent.parent)} ({size:,} bytes)")


if __name__ == "__main__":
    main()
