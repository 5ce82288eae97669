"""run() overhead: a 1000-node chain of tiny kernels, against a bare Python loop.

The baseline calls exactly the same kernels on exactly the same arrays in a plain
``for kernel, args in calls: kernel(*args)`` loop, measured in the same process, interleaved
with graphrt's runs. The goal (issue 2: "run() against the bare loop (<= 1.05x)") is a
ratio run()/bare of at most 1.05.

Usage: ``python benchmarks/run_overhead.py [--nodes 1000] [--repeat 200] [--number 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import graphrt


def chain_graph(n_nodes: int) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [{"op": "null", "name": "x", "inputs": []}]
    for i in range(n_nodes):
        nodes.append({"op": "tvm_op", "name": f"inc{i}", "inputs": [[i, 0, 0]], "attrs": {
            "func_name": "inc", "num_inputs": "1", "num_outputs": "1", "flatten_data": "0"}})
    n = len(nodes)
    return {"nodes": nodes, "arg_nodes": [0], "node_row_ptr": list(range(n + 1)),
            "heads": [[n - 1, 0, 0]], "attrs": {
                "dltype": ["list_str", ["float32"] * n], "shape": ["list_shape", [[4]] * n],
                "storage_id": ["list_int", [0] + [1 + i % 2 for i in range(n_nodes)]]}}


def inc(a: np.ndarray, out: np.ndarray) -> None:
    np.add(a, 1, out=out)


def noop(a: np.ndarray, out: np.ndarray) -> None:
    pass


def time_per_call(fn: Callable[[], None], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--number", type=int, default=5)
    args = parser.parse_args()

    for label, kernel in (("np.add on 4 floats", inc), ("empty kernel (worst case)", noop)):
        compare(label, kernel, args.nodes, args.repeat, args.number)


def compare(label: str, kernel: Callable[..., None], n_nodes: int, repeat: int,
            number: int) -> None:
    mod = graphrt.create(chain_graph(n_nodes), {"inc": kernel}, graphrt.cpu(0))
    mod.set_input("x", np.zeros(4, dtype="float32"))
    calls = list(mod.context._table.steps)

    def bare_loop() -> None:
        for call_kernel, call_args in calls:
            call_kernel(*call_args)

    graphrt_times, bare_times = [], []
    for _ in range(repeat):  # interleaved, so drift hits both alike
        graphrt_times.append(time_per_call(mod.run, number))
        bare_times.append(time_per_call(bare_loop, number))
    ours, bare = statistics.median(graphrt_times), statistics.median(bare_times)
    print(f"{n_nodes}-node chain, kernel: {label}; median of {repeat} x {number} runs")
    print(f"  bare Python loop : {bare * 1e6:9.1f} us/run  ({bare / n_nodes * 1e9:6.0f} ns/node)")
    print(f"  graphrt run()    : {ours * 1e6:9.1f} us/run  ({ours / n_nodes * 1e9:6.0f} ns/node)")
    print(f"  ratio run()/bare : {ours / bare:.3f}  (goal <= 1.05)")


if __name__ == "__main__":
    main()
