"""``graphrt bench BUNDLE``: time a bundle's runs (median, p10, p90) and graphrt's own share.

Each sample is the mean of ``number`` runs between two device synchronizations (the module's
``benchmark()``); ``number`` grows until a sample lasts ``--min-repeat-ms``. The host overhead
per run is what a run costs beyond its kernels and copies: the median over profiled runs of
(run time - the summed time of its steps), i.e. graphrt's dispatch loop, launch latency and
synchronization. A progress bar goes to stderr when it is a terminal and the timing will take
more than a second, or always with ``--progress``.

Example:
    >>> from graphrt.cli import main
    >>> main(["bench", "examples/bundles/cnn.grb", "--repeat", "10"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import sys
import time
from statistics import median
from typing import TextIO

import numpy as np

from ..executor import GraphModule
from ..executor.benchmark import BenchmarkResult
from .common import milliseconds_argument, positive_argument
from .prepare import add_bundle_arguments, prepare
from .summary import columns

__all__ = ["LONG_RUN_S", "PROFILED_RUNS", "ProgressBar", "bench_command", "configure",
           "host_overhead"]

LONG_RUN_S = 1.0
"""Timing expected to last longer than this shows a progress bar on a terminal."""

PROFILED_RUNS = 10
"""Runs profiled (at most) to measure the host overhead."""


class ProgressBar:
    """A one-line text progress bar, redrawn in place with ``\\r``; silent when disabled.

    Example:
        >>> import io
        >>> stream = io.StringIO()
        >>> bar = ProgressBar(4, stream, enabled=True, width=4)
        >>> bar.update(2); bar.update(4); bar.close()
        >>> stream.getvalue().split("\\r")[-1].strip()
        'bench [####] 4/4'
    """

    def __init__(self, total: int, stream: TextIO, *, enabled: bool, width: int = 30) -> None:
        self.total = total
        self.stream = stream
        self.enabled = enabled
        self.width = width
        self._start = time.perf_counter()
        self._drawn = 0  # the longest line drawn, so a shorter one covers it

    def update(self, done: int) -> None:
        """Redraw with ``done`` of ``total`` finished (and the time left, once known)."""
        if not self.enabled:
            return
        filled = self.width * done // max(self.total, 1)
        left = ""
        if 0 < done < self.total:
            seconds = (time.perf_counter() - self._start) * (self.total - done) / done
            left = f", {seconds:.1f} s left"
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"bench [{bar}] {done}/{self.total}{left}"
        self.stream.write("\r" + line.ljust(self._drawn))
        self._drawn = max(self._drawn, len(line))
        self.stream.flush()

    def close(self) -> None:
        """End the line the bar was drawn on."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def host_overhead(module: GraphModule, repeat: int) -> float:
    """Seconds per run spent outside kernels and copies (median over ``repeat`` profiled runs).

    Example:
        >>> host_overhead(bundle.create(), repeat=10)  # doctest: +SKIP
        4.1e-06
    """
    report = module.profile(repeat=repeat, warmup=0)
    per_run = [duration - sum(node.times_us[r] for node in report.nodes)
               for r, (_, duration) in enumerate(report.runs)]
    return max(0.0, median(per_run)) / 1e6


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the bundle arguments and the timing options."""
    add_bundle_arguments(parser)
    parser.add_argument("--repeat", type=positive_argument, default=20,
                        help="samples to take (default: 20)")
    parser.add_argument("--number", type=positive_argument, default=None,
                        help="runs per sample (default: enough for --min-repeat-ms)")
    parser.add_argument("--min-repeat-ms", type=milliseconds_argument, default=50.0,
                        help="the shortest a sample may last when --number is not given "
                             "(default: 50)")
    parser.add_argument("--end-to-end", action="store_true",
                        help="also time copying the inputs in and the outputs to the host")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="always show the progress bar (on stderr)")
    progress.add_argument("--no-progress", dest="progress", action="store_false",
                          help="never show the progress bar")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f} ms"


def bench_command(args: argparse.Namespace) -> int:
    """``graphrt bench BUNDLE [placement options] [--repeat N] [--number N] [--progress]``.

    Example:
        >>> from graphrt.cli import main
        >>> main(["bench", "examples/bundles/mlp", "--repeat", "5"])  # doctest: +SKIP
        0
    """
    prepared = prepare(args)
    module = prepared.module
    inputs = prepared.values if args.end_to_end else {}

    def sample(number: int, min_repeat_ms: float | None = None) -> BenchmarkResult:
        return module.benchmark(1, number, min_repeat_ms, args.end_to_end, **inputs)

    first = sample(args.number or 1, None if args.number else args.min_repeat_ms)  # warms up
    number = first.number
    expected = first.mean * number * args.repeat
    show = args.progress if args.progress is not None else (
        sys.stderr.isatty() and expected > LONG_RUN_S)
    bar = ProgressBar(args.repeat, sys.stderr, enabled=show)
    samples = []
    for done in range(1, args.repeat + 1):
        samples.append(sample(number).results[0])
        bar.update(done)
    bar.close()
    result = BenchmarkResult(tuple(samples), number)
    overhead = host_overhead(module, min(args.repeat, PROFILED_RUNS))
    p10, p50, p90 = np.percentile(samples, [10, 50, 90])
    devices = ", ".join(str(dev) for dev in module.devices)
    mode = ", end to end" if args.end_to_end else ""
    print(f"bench {prepared.bundle.path} on {devices}: {args.repeat} samples of {number} "
          f"runs{mode}")
    print("\n".join(columns([
        ("median", _ms(float(p50))), ("p10", _ms(float(p10))), ("p90", _ms(float(p90))),
        ("mean", f"{_ms(result.mean)} ± {_ms(result.std)}"),
        ("min, max", f"{_ms(result.min)}, {_ms(result.max)}"),
        ("host overhead", f"{_ms(overhead)} per run ({100 * overhead / float(p50):.1f}% of the "
                          "median): time outside kernels and copies")])))
    return 0
