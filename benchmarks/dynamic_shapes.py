"""Dynamic shapes: what crosses to the host for a shape function, and what a varying batch costs.

1. Device-to-host bytes per run of the example ``dynamic_strided_slice`` graph (a window of a
   4 MiB accelerator tensor), with the shape function's data dependence declared per input
   (begin/end/strides only, as graphrt's ops do) against the whole op marked data-dependent (as
   TVM's VM did before per-input dependence): bytes from the module's transfer log, checked
   against the sim device's own counters, and the run time of both, interleaved.
2. The dynamic-batch MLP (one module, planned for n <= 64) against static modules compiled for
   each batch, interleaved: the per-run price of binding shapes at run time.

Runs on sim, and on cuda too when a GPU is present.
Usage: ``python benchmarks/dynamic_shapes.py [--repeat 200]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import runpy
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import graphrt

MODELS = Path(__file__).resolve().parents[1] / "examples" / "models"


def median_times(fns: dict[str, Callable[[], None]], repeat: int,
                 sync: Callable[[], None]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(repeat):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def accelerators() -> list[graphrt.Device]:
    found = [graphrt.sim(0)]
    with contextlib.suppress(graphrt.DeviceError):
        found.append(graphrt.cuda(0))
    return found


def slice_transfers(dev: graphrt.Device, repeat: int) -> None:
    graph = json.loads((MODELS / "dynamic_slice" / "graph.json").read_text())
    graph["attrs"]["device_index"][1] = [dev.type_code] * len(graph["nodes"])
    per_input = graphrt.Library.from_json(MODELS / "dynamic_slice" / "lib.json")
    whole_op = graphrt.Library.from_json(MODELS / "dynamic_slice" / "lib.json")
    function = per_input.shape_function("fused_dynamic_slice")
    assert function is not None
    whole_op.register_shape_func("fused_dynamic_slice", function.fn, [True] * 4)
    x = np.random.default_rng(0).random((4096, 256), dtype=np.float32)
    window = {"start": np.array([100, 16]), "size": np.array([1000, 64]),
              "step": np.array([3, 2])}
    modules = {}
    print(f"dynamic_strided_slice of a {x.nbytes:,}-byte tensor on {dev}")
    for label, lib in (("per-input dependence", per_input), ("whole op data-dependent", whole_op)):
        mod = graphrt.create(graph, lib, graphrt.cpu(0), dev)
        mod.run(x=x, **window)
        counters = graphrt.sim_counters(dev) if dev.kind == "sim" else None
        if counters is not None:
            counters.reset()
        mod.run()
        moved = mod.last_run_transfers().shape_functions.to_host_bytes
        if counters is not None:
            assert counters.download_bytes == moved, (counters, moved)
        print(f"  {label:<24}: {moved:>10,} bytes device->host per run")
        modules[label] = mod
    backend = graphrt.devices.backend_for(dev)
    times = median_times({k: m.run for k, m in modules.items()}, repeat, backend.synchronize)
    first, second = times.values()
    print(f"  run time: {first * 1e3:.3f} ms vs {second * 1e3:.3f} ms "
          f"(whole op / per input = {second / first:.2f}x)")
    moved = [m.last_run_transfers().shape_functions.to_host_bytes for m in modules.values()]
    print(f"  bytes ratio (whole op / per input): {moved[1] / moved[0]:,.0f}x")


def batch_overhead(dev: graphrt.Device, repeat: int) -> None:
    generate: dict[str, Any] = runpy.run_path(str(MODELS / "generate.py"))
    lib = graphrt.Library.from_json(MODELS / "mlp" / "lib.json")
    dynamic = graphrt.create(generate["mlp"]("n")[0], lib, dev)
    rng = np.random.default_rng(0)
    print(f"MLP on {dev}: one dynamic module (n <= 64) vs a static module per batch, "
          f"median of {repeat} runs")
    for n in (1, 7, 64):
        static = graphrt.create(generate["mlp"](n)[0], lib, dev)
        values = {name: rng.standard_normal(shape).astype("float32")
                  for name, shape in static.get_input_info()["shape"].items()}
        static.set_input(**values)
        dynamic.set_input(**values)
        times = median_times({"static": static.run, "dynamic": dynamic.run}, repeat,
                             graphrt.devices.backend_for(dev).synchronize)
        print(f"  batch {n:2d}: static {times['static'] * 1e6:8.1f} us, dynamic "
              f"{times['dynamic'] * 1e6:8.1f} us, dynamic / static = "
              f"{times['dynamic'] / times['static']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for dev in accelerators():
        slice_transfers(dev, args.repeat)
    for dev in (graphrt.cpu(0), *accelerators()):
        batch_overhead(dev, args.repeat)


if __name__ == "__main__":
    main()
