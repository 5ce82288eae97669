"""What profiling costs: profile() per repeat against plain run() on a small graph.

Profiling is a separate method, so ``run()`` pays nothing when it is off (its loop is
unchanged; ``benchmarks/run_overhead.py`` measures that loop). This measures the cost when it
is on: a chain of ``--nodes`` tiny numpy kernels, ``run()`` against ``profile(repeat=N)``
divided by N, in one process. The goal (issue 7) is at most about 2x.

Usage: ``python benchmarks/profiler_overhead.py [--nodes 50] [--repeat 200]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from run_overhead import chain_graph, inc

import graphrt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    mod = graphrt.create(chain_graph(args.nodes), {"inc": inc}, graphrt.cpu(0))
    mod.set_input("x", np.zeros(4, dtype="float32"))
    plain, profiled = [], []
    for _ in range(args.rounds):  # interleaved rounds
        start = time.perf_counter()
        for _ in range(args.repeat):
            mod.run()
        plain.append((time.perf_counter() - start) / args.repeat)
        start = time.perf_counter()
        mod.profile(repeat=args.repeat, warmup=0)
        profiled.append((time.perf_counter() - start) / args.repeat)
    run_s, prof_s = statistics.median(plain), statistics.median(profiled)
    print(f"{args.nodes}-node chain of tiny numpy kernels, median of {args.rounds} rounds of "
          f"{args.repeat} runs")
    print(f"  run()                     : {run_s * 1e6:8.1f} us/run")
    print(f"  profile(), per repeat     : {prof_s * 1e6:8.1f} us/run (report included)")
    print(f"  ratio profiled/plain      : {prof_s / run_s:.2f}  (goal <= about 2)")


if __name__ == "__main__":
    main()
