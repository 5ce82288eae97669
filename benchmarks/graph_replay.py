"""Graph replay (create(..., cuda_graph=True)) against node-by-node launching, issue 15.

A chain of 200 small elementwise kernels (``[256]`` float32, alternately ``x + 1`` and
``x * 2``) on one device, run by two modules made from the same graph: one launching node by
node, one replaying its recording. Each run is timed to completion (the device synchronized
after it), interleaved, medians over ``--repeat`` batches of ``--number`` runs; the per-node
host overhead is the run's time divided by the nodes (the kernels themselves take about a
microsecond each on a GPU, so the run's time is launch overhead). The issue's goals, on an
NVIDIA GPU: replay at most 1 us per node, and at least 10x faster than launching node by node.

On ``--device sim:0`` (the simulated accelerator, whose replay calls the same numpy kernels
again) the figures mean nothing; it checks that the benchmark runs.

Usage: ``python benchmarks/graph_replay.py [--device cuda:0] [--nodes 200] [--repeat 30]
[--number 20] [--json results.json]``
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import graphrt
from graphrt.devices import backend_for


def chain_graph(nodes: int, device: graphrt.Device, size: int) -> dict[str, Any]:
    """x -> x + 1 -> 2x -> ... (``nodes`` kernels), every entry on ``device``."""
    graph_nodes: list[dict[str, Any]] = [{"op": "null", "name": "x", "inputs": []}]
    for i in range(nodes):
        graph_nodes.append({"op": "tvm_op", "name": f"k{i}", "inputs": [[i, 0, 0]], "attrs": {
            "func_name": "add_one" if i % 2 == 0 else "double", "num_inputs": "1",
            "num_outputs": "1", "flatten_data": "0"}})
    n = len(graph_nodes)
    return {"nodes": graph_nodes, "arg_nodes": [0], "node_row_ptr": list(range(n + 1)),
            "heads": [[n - 1, 0, 0]], "attrs": {
                "dltype": ["list_str", ["float32"] * n], "shape": ["list_shape", [[size]] * n],
                "storage_id": ["list_int", [0] + [1 + i % 2 for i in range(nodes)]],
                "device_index": ["list_int", [device.type_code] * n]}}


def library(device: graphrt.Device) -> graphrt.Library:
    xp = backend_for(device).xp
    lib = graphrt.Library()
    lib.register("add_one", lambda x, out: xp.add(x, 1, out=out), device=device.kind)
    lib.register("double", lambda x, out: xp.multiply(x, 2, out=out), device=device.kind)
    return lib


def expected(x: np.ndarray, nodes: int) -> np.ndarray:
    y = x.astype(np.float64)
    for i in range(nodes):
        y = y + 1 if i % 2 == 0 else y * 2
    return y


def per_run(run: Callable[[], None], sync: Callable[[], None], number: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(number):
        run()
    sync()
    return (time.perf_counter() - start) / number


def measure(device: graphrt.Device, nodes: int, size: int, repeat: int, number: int
            ) -> dict[str, Any]:
    graph, lib = chain_graph(nodes, device, size), library(device)
    modules = {"node by node": graphrt.create(graph, lib, "cpu", device),
               "replay": graphrt.create(graph, lib, "cpu", device, cuda_graph=True)}
    x = (np.arange(size, dtype=np.float32) % 7) * 1e-30  # stays finite through 2**100
    for mod in modules.values():
        mod.set_input("x", x)
        for _ in range(3):  # a warm-up run, the recording, a replay
            mod.run()
        got = mod.get_output(0, out=np.empty(size, np.float32))
        np.testing.assert_allclose(got, expected(x, nodes), rtol=1e-5)
    report = modules["replay"].capture_report()
    assert report is not None
    if not report.enabled:
        raise SystemExit(f"graph capture is off: {report.reason}")
    backend = backend_for(device)
    times: dict[str, list[float]] = {name: [] for name in modules}
    for r in range(repeat):
        order = list(modules) if r % 2 == 0 else list(reversed(modules))
        for name in order:
            times[name].append(per_run(modules[name].run, backend.synchronize, number))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"device": str(device), "nodes": nodes, "size": size, "repeat": repeat,
            "number": number, "run_us": {k: v * 1e6 for k, v in medians.items()},
            "per_node_us": {k: v * 1e6 / nodes for k, v in medians.items()},
            "speedup": medians["node by node"] / medians["replay"],
            "segments": report.segments, "captures": report.captures}


def gpu_name(device: graphrt.Device) -> str:
    if device.kind != "cuda":
        return "none (simulated)"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    device = graphrt.device(args.device)
    result = measure(device, args.nodes, args.size, args.repeat, args.number)
    result["gpu"] = gpu_name(device)
    result["python"] = platform.python_version()
    print(f"device {result['device']} ({result['gpu']}), {args.nodes} nodes of "
          f"[{args.size}] float32, median of {args.repeat} x {args.number} runs, interleaved")
    for name, us in result["run_us"].items():
        print(f"  {name:13s} {us:10.1f} us per run  {result['per_node_us'][name]:7.3f} us "
              "per node")
    goal = "PASS" if result["speedup"] >= 10 and result["per_node_us"]["replay"] <= 1 else "MISS"
    print(f"  replay is {result['speedup']:.1f}x faster ({result['segments']} recorded segment; "
          f"goal <= 1 us per node and >= 10x: {goal})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
