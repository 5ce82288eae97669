"""Run the example MLP and CNN from JSON alone: graph JSON + declarative lib JSON.

No Python kernel is involved: every func_name resolves to a declarative fused function of the
standard op set. Weights are generated deterministically. Each model runs on cpu and on sim
(and on cuda when a GPU is present) and is checked against the same model in straight numpy.
Usage: ``python examples/run_models.py``.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np

import graphrt

MODELS = Path(__file__).resolve().parent / "models"
sys.path.insert(0, str(MODELS))

import reference  # noqa: E402  (the straight-numpy versions, beside the JSON)


def devices() -> list[graphrt.Device]:
    found = [graphrt.cpu(0), graphrt.sim(0)]
    with contextlib.suppress(graphrt.DeviceError):  # no GPU: cpu and sim only
        found.append(graphrt.cuda(0))
    return found


def main() -> None:
    for name in ("mlp", "cnn"):
        lib = graphrt.Library.from_json(MODELS / name / "lib.json")
        for dev in devices():
            mod = graphrt.create(MODELS / name / "graph.json", lib, dev)
            values = reference.weights(name, mod.get_input_info())
            mod.run(**values)
            probs = mod.get_output(0, out=np.empty(mod.get_output_info()["shape"][
                mod.graph.output_names[0]], dtype="float32"))
            expected = reference.MODELS[name](values)
            error = float(np.max(np.abs(probs - expected)))
            print(f"{name} on {dev}: output {probs.shape}, classes {probs.argmax(axis=1)}, "
                  f"max |graphrt - numpy| = {error:.2e}")
            if error > 1e-5:
                raise SystemExit(f"{name} on {dev} disagrees with numpy")


if __name__ == "__main__":
    main()
