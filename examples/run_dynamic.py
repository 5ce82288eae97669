"""Dynamic shapes: one module, storage planned once at the bound, any admissible size.

1. The MLP with a dynamic batch ``1 <= n <= 64`` runs batches 1, 7 and 64 in the same module
   (nothing is allocated after ``create()``) and is checked against numpy.
2. A ``dynamic_strided_slice`` cuts a window out of a 4 MiB accelerator tensor, with begin/end
   computed on the accelerator. Its shape function reads only begin/end/strides on the host:
   the byte counts printed show that the sliced tensor never crosses.

Runs on cuda when a GPU is present, otherwise on the simulated accelerator.
Usage: ``python examples/run_dynamic.py``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np

import graphrt

MODELS = Path(__file__).resolve().parent / "models"
sys.path.insert(0, str(MODELS))

import reference  # noqa: E402  (the straight-numpy versions, beside the JSON)


def accelerator() -> graphrt.Device:
    with contextlib.suppress(graphrt.DeviceError):
        return graphrt.cuda(0)
    return graphrt.sim(0)


def dynamic_batch(dev: graphrt.Device) -> None:
    lib = graphrt.Library.from_json(MODELS / "mlp_dynamic" / "lib.json")
    mod = graphrt.create(MODELS / "mlp_dynamic" / "graph.json", lib, dev)
    static = graphrt.create(MODELS / "mlp" / "graph.json", lib)
    weights = reference.weights("mlp", static.get_input_info())
    mod.load_params({k: v for k, v in weights.items() if k != "x"})
    rng = np.random.default_rng(1)
    for n in (1, 7, 64):
        x = rng.standard_normal((n, 64)).astype("float32")
        mod.run(x=x)
        probs = np.empty((n, 10), "float32")
        mod.get_output(0, out=probs)
        error = float(np.max(np.abs(probs - reference.MODELS["mlp"]({**weights, "x": x}))))
        memory = mod.memory()
        print(f"mlp batch {n:2d} on {dev}: output {probs.shape}, max |graphrt - numpy| = "
              f"{error:.2e}, storage used {memory.used[dev]:,} of {memory.planned[dev]:,} "
              "bytes planned")
        if error > 1e-5:
            raise SystemExit(f"mlp batch {n} on {dev} disagrees with numpy")


def dynamic_slice(dev: graphrt.Device) -> None:
    graph = json.loads((MODELS / "dynamic_slice" / "graph.json").read_text())
    graph["attrs"]["device_index"][1] = [dev.type_code] * len(graph["nodes"])
    lib = graphrt.Library.from_json(MODELS / "dynamic_slice" / "lib.json")
    mod = graphrt.create(graph, lib, graphrt.cpu(0), dev)
    x = np.random.default_rng(2).random((4096, 256), dtype=np.float32)
    mod.set_input(x=x)
    start, size, step = np.array([100, 16]), np.array([1000, 64]), np.array([3, 2])
    mod.run(start=start, size=size, step=step)
    window = np.empty(mod.get_output(0).shape, "float32")
    mod.get_output(0, out=window)
    expected = np.sqrt(x[100:1100:3, 16:80:2])
    moved = mod.last_run_transfers().shape_functions
    print(f"dynamic_strided_slice on {dev}: output {window.shape}, matches numpy: "
          f"{np.allclose(window, expected)}; shape function copied {moved.count} tensors, "
          f"{moved.to_host_bytes} bytes to the host (x is {x.nbytes:,} bytes)")


def main() -> None:
    for dev in (graphrt.cpu(0), accelerator()):
        dynamic_batch(dev)
    dynamic_slice(accelerator())


if __name__ == "__main__":
    main()
