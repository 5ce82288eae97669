"""How long ``import graphrt`` takes in a fresh process, against ``import numpy`` (its floor).

Each sample starts a new interpreter; the two are interleaved and the medians compared. The
goal (issue 16) is ``import graphrt`` <= 0.3 s on the 2-core development machine.

Usage: ``python benchmarks/import_time.py [--repeat 15]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def sample(module: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", CODE.format(module=module)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return float(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"numpy": [], "graphrt": [], "graphrt.executor": []}
    for _ in range(args.repeat):
        for module, samples in times.items():
            samples.append(sample(module))
    medians = {module: statistics.median(samples) for module, samples in times.items()}
    for module, seconds in medians.items():
        print(f"import {module:<17}: {seconds * 1e3:7.1f} ms (median of {args.repeat})")
    print(f"import graphrt / import numpy: {medians['graphrt'] / medians['numpy']:.2f} "
          f"(goal: import graphrt <= 300 ms; the executor, pydantic and the op set load on "
          f"first use)")


if __name__ == "__main__":
    main()
