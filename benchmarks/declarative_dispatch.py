"""Declarative-function dispatch: lowered declarative functions against plain Python kernels.

Every figure is a ratio against a baseline measured in the same process, interleaved with it
(the order alternates from repeat to repeat, so drift and warm-up hit both alike), and the
medians of ``--repeat`` samples of ``--number`` calls each are compared. The graph is a chain
of ``--nodes`` nodes, each ``y_i = f(y_{i-1}, c)`` on float32 [4] arrays (``y_{-1} = x``):

a. per-node dispatch: ``f`` is a one-op declarative function (``add``), which is lowered to a
   direct positional kernel, against the plain kernel ``lambda a, b, out: np.add(a, b,
   out=out)``; each module's prepared steps are called in a bare ``for fn, args, _ in steps``
   loop, so the figure is what one node costs, without run()'s own loop. An inline
   ``np.add(a, b, out=out)`` over the same arrays is shown as the floor. Goal: ratio
   declarative/plain <= 1.10.
b. the same two modules, whole ``run()`` times, and their ratio.
c. ``f`` is a 3-op declarative function (add -> multiply -> relu, its two intermediates
   planned as scratch) against a plain kernel making the same three numpy calls into
   preallocated temporaries; ``run()`` per node, and the ratio. The benchmark runs with
   ``GRAPHRT_JIT=0``, so that the three steps stay three calls (numba would fuse them).

Outputs of each declarative chain and its plain twin are checked equal before timing. The
results are also printed as one JSON line at the end (``--json``: only that line).

Usage: ``python benchmarks/declarative_dispatch.py [--nodes 1000] [--repeat 200] [--number 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

# Before numpy loads OpenBLAS: a core type forced from outside would skew the kernels' cost.
os.environ.pop("OPENBLAS_CORETYPE", None)
# c. measures a lowering of three calls over planned scratch: with numba the cpu's provider
# fuses the three elementwise steps into one compiled loop (one call), which is not what is
# measured here (benchmarks/peers.py measures the fused path).
os.environ["GRAPHRT_JIT"] = "0"

import numpy as np

import graphrt

N = 4
"""Elements per tensor: tiny, so dispatch, not arithmetic, dominates."""

ONE_OP = {"inputs": ["a", "b"], "outputs": ["y"], "body": [
    {"op": "add", "inputs": ["a", "b"], "outputs": ["y"]}]}

THREE_OPS = {"inputs": ["a", "b"], "outputs": ["y"], "body": [
    {"op": "add", "inputs": ["a", "b"], "outputs": ["t"]},
    {"op": "multiply", "inputs": ["t", "b"], "outputs": ["u"]},
    {"op": "relu", "inputs": ["u"], "outputs": ["y"]}]}


def chain_graph(n_nodes: int, func_name: str) -> dict[str, Any]:
    """Inputs ``x`` and ``c``, then ``n_nodes`` two-input nodes: ``y_i = f(y_{i-1}, c)``."""
    nodes: list[dict[str, Any]] = [{"op": "null", "name": "x", "inputs": []},
                                   {"op": "null", "name": "c", "inputs": []}]
    for i in range(n_nodes):
        prev = 0 if i == 0 else len(nodes) - 1
        nodes.append({"op": "tvm_op", "name": f"f{i}", "inputs": [[prev, 0, 0], [1, 0, 0]],
                      "attrs": {"func_name": func_name, "num_inputs": "2", "num_outputs": "1",
                                "flatten_data": "0"}})
    n = len(nodes)
    return {"nodes": nodes, "arg_nodes": [0, 1], "node_row_ptr": list(range(n + 1)),
            "heads": [[n - 1, 0, 0]], "attrs": {
                "dltype": ["list_str", ["float32"] * n], "shape": ["list_shape", [[N]] * n],
                "storage_id": ["list_int", [0, 1] + [2 + i % 2 for i in range(n_nodes)]]}}


def plain_add() -> Callable[..., None]:
    return lambda a, b, out: np.add(a, b, out=out)


def plain_three_ops() -> Callable[..., None]:
    """add -> multiply -> relu, as the declarative ops compute them, into two temporaries."""
    t = np.empty(N, dtype="float32")
    u = np.empty(N, dtype="float32")

    def kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.add(a, b, out=t)
        np.multiply(t, b, out=u)
        np.maximum(u, 0, out=out)

    return kernel


def build(n_nodes: int, declarative: dict[str, Any] | None,
          kernel: Callable[..., None] | None) -> graphrt.GraphModule:
    lib = graphrt.Library()
    if declarative is not None:
        lib.define("f", declarative)
    else:
        lib.register("f", kernel)
    mod = graphrt.create(chain_graph(n_nodes, "f"), lib, graphrt.cpu(0))
    mod.set_input("x", np.linspace(-1.0, 1.0, N, dtype="float32"))
    mod.set_input("c", np.array([0.5, -0.25, 0.125, 1.0], dtype="float32"))
    return mod


def lowered_direct(mod: graphrt.GraphModule) -> list[bool]:
    """Per lowered node: whether its function runs as a direct kernel."""
    return [p.lowering.direct for p in mod.compiled.programs if p.lowering is not None]


def check_same(declarative: graphrt.GraphModule, plain: graphrt.GraphModule, what: str) -> None:
    declarative.run()
    plain.run()
    got = np.array(declarative.get_output(0))
    np.testing.assert_array_equal(got, np.array(plain.get_output(0)),
                                  err_msg=f"{what}: declarative and plain chains disagree")
    if not np.all(np.isfinite(got)):
        raise AssertionError(f"{what}: non-finite output {got}")


def steps_loop(mod: graphrt.GraphModule) -> Callable[[], None]:
    """A bare loop over the module's prepared steps (what run() executes, minus its loop)."""
    steps = list(mod.context._table.steps)

    def loop() -> None:
        for fn, args in steps:
            fn(*args)

    return loop


def inline_add(mod: graphrt.GraphModule) -> Callable[[], None]:
    """``np.add`` called inline on the arrays of the module's steps: no kernel wrapper at all."""
    arrays = [args for _, args in mod.context._table.steps]
    add = np.add

    def loop() -> None:
        for a, b, out in arrays:
            add(a, b, out=out)

    return loop


def time_per_call(fn: Callable[[], None], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def interleaved(fns: Sequence[Callable[[], None]], repeat: int, number: int) -> list[float]:
    """Median seconds per call of each of ``fns``, sampled in turn, order alternating."""
    samples: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for _ in range(number):  # warm-up
        for fn in fns:
            fn()
    for _ in range(repeat):
        for index in order:
            samples[index].append(time_per_call(fns[index], number))
        order.reverse()
    return [statistics.median(s) for s in samples]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        found = [f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')}, "
                 f"{p.get('num_threads')} threads)"
                 for p in threadpool_info() if p.get("user_api") == "blas"]
        if found:
            return "; ".join(found)
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')} (build info)"
    except Exception:  # older numpy, or another layout: not worth failing over
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    n, repeat, number = args.nodes, args.repeat, args.number
    say = (lambda *_: None) if args.json else print

    env = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
           "numpy": np.__version__, "blas": blas_info(), "graphrt": graphrt.__version__}
    say(f"cpu: {env['cpu']} ({env['cores']} cores); python {env['python']}, numpy "
        f"{env['numpy']}, graphrt {env['graphrt']}; blas: {env['blas']}")

    decl1, plain1 = build(n, ONE_OP, None), build(n, None, plain_add())
    decl3, plain3 = build(n, THREE_OPS, None), build(n, None, plain_three_ops())
    if not all(lowered_direct(decl1)) or any(lowered_direct(decl3)):
        raise AssertionError("expected the one-op function direct, the 3-op one not")
    check_same(decl1, plain1, "one-op chain")
    check_same(decl3, plain3, "3-op chain")
    say(f"{n}-node chains of y = f(y, c) on float32[{N}]; outputs checked equal; medians of "
        f"{repeat} x {number} calls, interleaved")

    # a. per-node dispatch: the prepared steps in a bare loop
    d_steps, p_steps, floor = interleaved(
        [steps_loop(decl1), steps_loop(plain1), inline_add(decl1)], repeat, number)
    a = {"declarative_ns": d_steps / n * 1e9, "plain_ns": p_steps / n * 1e9,
         "inline_np_add_ns": floor / n * 1e9, "ratio": d_steps / p_steps, "goal": 1.10}
    say("a. one-op declarative (add, lowered direct) vs plain kernel, per-node dispatch")
    say(f"  inline np.add (floor)    : {a['inline_np_add_ns']:7.0f} ns/node")
    say(f"  plain lambda kernel      : {a['plain_ns']:7.0f} ns/node")
    say(f"  declarative one-op       : {a['declarative_ns']:7.0f} ns/node")
    say(f"  ratio declarative/plain  : {a['ratio']:.3f}  (goal <= 1.10)")

    # b. the same modules, whole run()
    d_run, p_run = interleaved([decl1.run, plain1.run], repeat, number)
    b = {"declarative_us": d_run * 1e6, "plain_us": p_run * 1e6, "ratio": d_run / p_run}
    say("b. the same chains, whole run()")
    say(f"  plain kernels   run()    : {b['plain_us']:8.1f} us/run  "
        f"({p_run / n * 1e9:5.0f} ns/node)")
    say(f"  declarative     run()    : {b['declarative_us']:8.1f} us/run  "
        f"({d_run / n * 1e9:5.0f} ns/node)")
    say(f"  ratio declarative/plain  : {b['ratio']:.3f}")

    # c. a 3-op declarative function against the same three numpy calls in one kernel
    d3, p3 = interleaved([decl3.run, plain3.run], repeat, number)
    c = {"declarative_ns": d3 / n * 1e9, "plain_ns": p3 / n * 1e9, "ratio": d3 / p3}
    say("c. 3-op declarative (add -> multiply -> relu, scratch intermediates) vs plain, run()")
    say(f"  plain kernel, 3 np calls : {c['plain_ns']:7.0f} ns/node")
    say(f"  declarative 3-op         : {c['declarative_ns']:7.0f} ns/node")
    say(f"  ratio declarative/plain  : {c['ratio']:.3f}")

    result = {"benchmark": "declarative_dispatch", "nodes": n, "repeat": repeat,
              "number": number, "env": env, "one_op_dispatch": a, "one_op_run": b,
              "three_op_run": c}
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
