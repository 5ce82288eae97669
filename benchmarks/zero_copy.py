"""Zero-copy binding against copying inputs in and outputs out, on a graph with big tensors.

The graph is ``y = -x`` on ``--mib`` MiB float32 tensors. The copying path is
``set_input(x); run(); get_output(0, out=y)``; the zero-copy path binds ``x`` and ``y`` once
(``set_input_zero_copy``/``set_output_zero_copy``) and calls ``run()``. Both are timed in the
same process, interleaved, on cpu; then both run once on sim with the copy counters on, to show
which bytes each path moves.

Usage: ``python benchmarks/zero_copy.py [--mib 64] [--repeat 20]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import graphrt
from graphrt.devices import backend_for


def negate_graph(n: int, device_type: int) -> dict[str, Any]:
    return {
        "nodes": [{"op": "null", "name": "x", "inputs": []},
                  {"op": "tvm_op", "name": "neg", "inputs": [[0, 0, 0]], "attrs": {
                      "func_name": "neg", "num_inputs": "1", "num_outputs": "1",
                      "flatten_data": "0"}}],
        "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]],
        "attrs": {"dltype": ["list_str", ["float32", "float32"]],
                  "shape": ["list_shape", [[n], [n]]], "storage_id": ["list_int", [0, 1]],
                  "device_index": ["list_int", [device_type, device_type]]}}


LIB = {"neg": lambda x, out: np.negative(x, out=out)}


def on(dev: graphrt.Device, n: int) -> Any:
    backend = backend_for(dev)
    return backend.view(backend.allocate(4 * n), (n,), np.dtype("float32"))


def paths(dev: graphrt.Device, n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    copying = graphrt.create(negate_graph(n, dev.type_code), LIB, dev)
    zero_copy = graphrt.create(negate_graph(n, dev.type_code), LIB, dev)
    x, y = on(dev, n), on(dev, n)
    zero_copy.set_input_zero_copy("x", x)
    zero_copy.set_output_zero_copy(0, y)

    def copy_path() -> None:
        copying.set_input("x", x)
        copying.run()
        copying.get_output(0, out=y)

    return copy_path, zero_copy.run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    n = args.mib * 2**20 // 4

    copy_path, zero_path = paths(graphrt.cpu(0), n)
    copy_times, zero_times = [], []
    for _ in range(args.repeat):
        for fn, times in ((copy_path, copy_times), (zero_path, zero_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    copied, zero = statistics.median(copy_times), statistics.median(zero_times)
    print(f"y = -x on {args.mib} MiB float32 tensors, cpu, median of {args.repeat} runs")
    print(f"  set_input + run + get_output(out=) : {copied * 1e3:8.2f} ms")
    print(f"  zero-copy bound run                : {zero * 1e3:8.2f} ms")
    print(f"  speed-up                           : {copied / zero:.2f}x")

    sim = graphrt.sim(0)
    counters = graphrt.sim_counters(sim)
    for label, fn in zip(("copying", "zero-copy"), paths(sim, n), strict=True):
        counters.reset()
        fn()
        moved = counters.upload_bytes + counters.download_bytes + counters.device_copy_bytes
        print(f"  sim, {label:<9} path moves {moved:>11,} bytes per run "
              f"({counters.device_copies} device copies, {counters.uploads} uploads, "
              f"{counters.downloads} downloads)")


if __name__ == "__main__":
    main()
