"""Inter-op parallelism: one model run sequentially, in parallel lanes, by default, and by ONNX
Runtime, interleaved in one process (medians).

``create(inter_op_threads=0)`` runs one node at a time (BLAS uses every core);
``inter_op_threads=N`` runs independent nodes on N lanes with BLAS held to ``cores // N``
threads; the default decides per graph (see ``graphrt.executor.parallel``). On a machine
whose cores other processes keep busy, multi-threaded BLAS stalls and lanes win; on a quiet
one, compare for yourself.

Steady state (calls back to back) and cold (the first call after a pause) are both reported,
as in ``peers.py``; ONNX Runtime gets as many intra-op threads as graphrt uses.

Usage: ``python benchmarks/inter_op.py [--model branches|branches1|bert|chain|mlp]
[--batch 8] [--threads 2] [--repeat 7] [--block 5] [--json out.json]``
"""

from __future__ import annotations

import os
import sys

if "OPENBLAS_CORETYPE" in os.environ:  # see onnx_models.py: numpy must load without it
    os.environ.pop("OPENBLAS_CORETYPE")
    os.environ["GRAPHRT_BENCH_UNSET_CORETYPE"] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from onnx_models import environment, load_models, ort_session, regimes

import graphrt


def model_of(models: Any, name: str, batch: int) -> Any:
    builders = {"branches": lambda: models.branches(), "branches1": lambda: models.branches(
        depth=1), "bert": lambda: models.bert_encoder(batch=batch),
        "chain": lambda: models.chain(), "mlp": lambda: models.mlp(batch)}
    if name not in builders:
        raise SystemExit(f"unknown model {name!r} ({', '.join(builders)})")
    return builders[name]()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="branches")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    models = load_models()
    model = model_of(models, args.model, args.batch)
    feeds = models.sample_inputs(model)
    bundle = graphrt.from_onnx(model)
    mods = {"sequential": bundle.create("cpu", inter_op_threads=0),
            f"{args.threads} lanes": bundle.create("cpu", inter_op_threads=args.threads),
            "default": bundle.create("cpu")}
    session = ort_session(model)
    reference = session.run(None, feeds)[0]
    for name, mod in mods.items():
        (got, *_) = mod(**feeds)
        error = float(np.abs(got - reference).max() / max(np.abs(reference).max(), 1e-30))
        assert error < 1e-3, f"{name} disagrees with ONNX Runtime: {error:.2e}"
        mod.set_input(**feeds)
    contenders: dict[str, Any] = {name: mod.run for name, mod in mods.items()}
    contenders["onnxruntime"] = lambda: session.run(None, feeds)
    medians = regimes(contenders, warmup=2, rounds=args.repeat, block=args.block)
    print(f"{args.model}: parallel plan by default: "
          f"{'yes' if mods['default'].compiled.parallel else 'no'}")
    for regime in ("steady", "cold"):
        base = medians["onnxruntime"][regime]
        sequential = medians["sequential"][regime]
        print(f" {regime}:")
        for name, both in medians.items():
            seconds = both[regime]
            print(f"  {name:<12} {seconds * 1e3:9.2f} ms  {seconds / base:5.2f}x ORT  "
                  f"{seconds / sequential:5.2f}x sequential")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "medians_s": medians,
                                         "environment": environment()}, indent=1))


if __name__ == "__main__":
    main()
