"""Several threads on one module: every result checked, weights held once, throughput.

The example MLP (``examples/models/mlp``, weights loaded once with ``load_params``) runs from
``--threads`` threads at once, ``--runs`` runs each, each thread with its own inputs, through
``mod(**inputs)``, ``run`` + ``get_output(out=)`` and ``invoke_with_outputs`` in turn; every
result is compared with the one the same input gave alone. Then memory: what one module holds
with 1 and with ``--threads`` live contexts (the params once), against the baseline of one
module per thread (each with its own copy of the weights). Last, runs per second from one
thread and from ``--threads`` threads (numpy releases the GIL in BLAS, so a larger model can
use several cores; this 2-layer MLP mostly measures that nothing serializes or breaks).

Usage: ``python benchmarks/concurrency.py [--device cpu] [--threads 8] [--runs 1000]``
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.pop("OPENBLAS_CORETYPE", None)  # before numpy loads OpenBLAS

import numpy as np

import graphrt
from graphrt.devices import backend_for

MODELS = Path(__file__).resolve().parents[1] / "examples" / "models"
sys.path.insert(0, str(MODELS))

import reference  # noqa: E402


def host(array: Any) -> np.ndarray[Any, Any]:
    return np.asarray(array).view(np.ndarray).copy()


def build(device: str) -> tuple[graphrt.GraphModule, dict[str, np.ndarray[Any, Any]]]:
    lib = graphrt.Library.from_json(MODELS / "mlp" / "lib.json")
    mod = graphrt.create(MODELS / "mlp" / "graph.json", lib, device)
    values = reference.weights("mlp", mod.get_input_info())
    mod.load_params({name: v for name, v in values.items() if name != "x"})
    return mod, values


def stress(mod: graphrt.GraphModule, x: np.ndarray[Any, Any], device: str, threads: int,
           runs: int) -> tuple[int, int, float]:
    """(wrong results, runs made, seconds) with ``threads`` threads of ``runs`` runs."""
    feeds = [[np.random.default_rng(10 * t + k).standard_normal(x.shape).astype(x.dtype)
              for k in range(4)] for t in range(threads)]
    expected = [[host(mod(x=feed)[0]) for feed in fs] for fs in feeds]
    wrong = [0] * threads
    barrier = threading.Barrier(threads + 1)
    backend = backend_for(graphrt.device(device))

    def worker(t: int) -> None:
        out = np.empty_like(expected[t][0])
        bound = backend.view(backend.allocate(out.nbytes), out.shape, out.dtype)
        placed = []
        for feed in feeds[t]:
            target = backend.view(backend.allocate(feed.nbytes), feed.shape, feed.dtype)
            backend.upload(feed, target)
            placed.append(target)
        barrier.wait()
        for r in range(runs):
            k, style = r % 4, (t + r) % 3
            if style == 0:
                got = host(mod(x=feeds[t][k])[0])
            elif style == 1:
                mod.run(x=feeds[t][k])
                got = mod.get_output(0, out=out)
            else:
                mod.invoke_with_outputs({"x": placed[k]}, [bound])
                got = host(bound)
            wrong[t] += not np.allclose(got, expected[t][k], rtol=1e-5, atol=1e-6)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    return sum(wrong), threads * runs, time.perf_counter() - start


def memory_with(mod: graphrt.GraphModule, threads: int) -> graphrt.MemoryReport:
    """The module's memory report while ``threads`` more threads hold a context."""
    ready, done = threading.Barrier(threads + 1), threading.Event()

    def hold() -> None:
        mod.run()
        ready.wait()
        done.wait()

    pool = [threading.Thread(target=hold) for _ in range(threads)]
    for thread in pool:
        thread.start()
    ready.wait()
    report = mod.memory()
    done.set()
    for thread in pool:
        thread.join()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    mod, values = build(args.device)
    dev = graphrt.device(args.device)
    x = values["x"]
    wrong, runs, seconds = stress(mod, x, args.device, args.threads, args.runs)
    print(f"stress on {dev}: {args.threads} threads x {args.runs} runs = {runs} runs, "
          f"{wrong} wrong, {seconds:.2f} s")
    one = mod.memory()
    many = memory_with(mod, args.threads - 1)
    weights = sum(v.nbytes for name, v in values.items() if name != "x")
    print(f"weights: {weights:,} bytes; one context (activations + scratch): "
          f"{one.context[dev]:,} bytes")
    print(f"{'contexts':>9} {'params held':>14} {'total held':>14} {'one module per thread':>22}")
    for report in (one, many):
        baseline = report.contexts * (weights + report.context[dev])
        print(f"{report.contexts:>9} {report.params[dev]:>14,} {report.total(dev):>14,} "
              f"{baseline:>22,}")
    single = stress(mod, x, args.device, 1, args.runs)
    parallel = stress(mod, x, args.device, args.threads, args.runs)
    rate = [made / secs for _, made, secs in (single, parallel)]
    print(f"throughput: 1 thread {rate[0]:,.0f} runs/s, {args.threads} threads "
          f"{rate[1]:,.0f} runs/s ({rate[1] / rate[0]:.2f}x); wrong: "
          f"{single[0] + parallel[0]}")


if __name__ == "__main__":
    main()
