"""ONNX's backend conformance suite run through graphrt (and ONNX Runtime, in the same run).

Prints, per category (node, simple, pytorch-converted, pytorch-operator), how many tests pass
on cpu for each backend, and optionally the failures:

    python benchmarks/onnx_backend_suite.py                  # graphrt and ONNX Runtime
    python benchmarks/onnx_backend_suite.py -k 'test_conv'   # only tests matching a regex
    python benchmarks/onnx_backend_suite.py --failures       # list graphrt's failures
    python benchmarks/onnx_backend_suite.py --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import unittest
import warnings
from typing import Any

CATEGORIES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
}


def run_suite(backend: Any, pattern: str | None) -> dict[str, dict[str, Any]]:
    """Per category: test names run, and the failures with their first error line."""
    import onnx.backend.test

    suite = onnx.backend.test.BackendTest(backend, __name__)
    results: dict[str, dict[str, Any]] = {}
    for class_name, case in suite.test_cases.items():
        category = CATEGORIES.get(class_name)
        if category is None:
            continue
        tests = [t for t in unittest.defaultTestLoader.loadTestsFromTestCase(case)
                 if t.id().endswith("_cpu")
                 and (pattern is None or re.search(pattern, t.id().split(".")[-1]))]
        result = unittest.TestResult()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            unittest.TestSuite(tests).run(result)
        failed = {}
        for test, trace in [*result.failures, *result.errors]:
            lines = [line for line in trace.strip().splitlines() if line.strip()]
            failed[test.id().split(".")[-1][:-4]] = lines[-1][:300] if lines else "?"
        for test, reason in result.skipped:
            failed[test.id().split(".")[-1][:-4]] = f"skipped: {reason}"
        results[category] = {"total": len(tests), "passed": len(tests) - len(failed),
                             "failed": failed}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="pattern", help="only tests whose name matches this regex")
    parser.add_argument("--failures", action="store_true", help="list graphrt's failures")
    parser.add_argument("--no-peer", action="store_true", help="skip ONNX Runtime")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    import graphrt.onnx.backend as graphrt_backend

    runs = {"graphrt": run_suite(graphrt_backend, args.pattern)}
    if not args.no_peer:
        try:
            import onnxruntime
            import onnxruntime.backend as ort_backend

            onnxruntime.set_default_logger_severity(3)
            runs[f"onnxruntime {onnxruntime.__version__}"] = run_suite(ort_backend, args.pattern)
        except ImportError:
            print("onnxruntime is not installed: graphrt only", file=sys.stderr)
    names = list(runs)
    print(f"{'category':<20}" + "".join(f"{n:>28}" for n in names))
    for category in CATEGORIES.values():
        cells = []
        for name in names:
            r = runs[name].get(category, {"passed": 0, "total": 0})
            share = 100 * r["passed"] / r["total"] if r["total"] else 0.0
            cells.append(f"{r['passed']:>6} / {r['total']:<5} ({share:5.1f}%)")
        print(f"{category:<20}" + "".join(f"{c:>28}" for c in cells))
    if args.failures:
        for category, r in runs["graphrt"].items():
            for test, why in sorted(r["failed"].items()):
                print(f"{category}: {test}: {why}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(runs, handle, indent=1)


if __name__ == "__main__":
    main()
