"""ResNet-50 on one NVIDIA GPU: graphrt against PyTorch in the same process (issue 28).

graphrt runs ``examples/onnx/models.py``'s ResNet-50 (torchvision's v1.5 layout, converted by
``from_onnx``) three ways: convolutions through CuPy's GEMMs (the cuDNN provider switched off),
through cuDNN's frontend node by node, and through cuDNN recorded into CUDA graphs
(``cuda_graph=True``, ``run()`` replaying). PyTorch runs torchvision's ResNet-50 with random
weights, NCHW, ``cudnn.benchmark`` on, eager and captured in one ``torch.cuda.CUDAGraph``.
TF32 is off on both sides for float32 (graphrt's float32 matches the cpu's; PyTorch's default
would use TF32 for its convolutions). Inputs already on the GPU; every call timed to
completion (synchronized); graphrt's variants interleaved in rounds; medians.

Usage: ``python benchmarks/gpu_resnet50.py [--batches 1,32] [--dtypes float32,float16]
[--rounds 5] [--number 6]`` (needs a GPU, cupy and, for its baseline, torch + torchvision).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import graphrt
from graphrt.kernels.cuda import provider

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "onnx"))
from models import resnet50, sample_inputs

VARIANTS = ("cupy", "cudnn", "cudnn+graph")


def make(model: Any, variant: str) -> Any:
    """A cuda module of ``model`` whose convolutions take ``variant``'s path."""
    real = provider.prepare_conv
    if variant == "cupy":
        provider.prepare_conv = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        return graphrt.from_onnx(model).create(graphrt.cuda(0),
                                               cuda_graph=variant == "cudnn+graph")
    finally:
        provider.prepare_conv = real


def timed(call: Any, sync: Any, number: int) -> list[float]:
    out = []
    for _ in range(number):
        sync()
        start = time.perf_counter()
        call()
        sync()
        out.append(time.perf_counter() - start)
    return out


def graphrt_times(batch: int, dtype: str, rounds: int, number: int) -> dict[str, float]:
    import cupy

    model = resnet50(batch=batch, dtype=dtype)
    feeds = {k: cupy.asarray(v) for k, v in sample_inputs(model).items()}
    sync = cupy.cuda.Device().synchronize
    mods = {variant: make(model, variant) for variant in VARIANTS}
    for mod in mods.values():
        for _ in range(3):  # warm-up, then the recording
            mod.run(**feeds)
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant, mod in mods.items():
            times[variant] += timed(lambda mod=mod: mod.run(**feeds), sync, number)
    return {variant: statistics.median(t) * 1e3 for variant, t in times.items()}


def torch_times(batch: int, dtype: str, number: int) -> dict[str, float] | None:
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net = torchvision.models.resnet50().eval().cuda().to(getattr(torch, dtype))
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=getattr(torch, dtype))
    with torch.no_grad():
        for _ in range(5):
            net(x)
        eager = timed(lambda: net(x), torch.cuda.synchronize, number * 4)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                net(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            net(x)
        replay = timed(graph.replay, torch.cuda.synchronize, number * 4)
    return {"torch eager": statistics.median(eager) * 1e3,
            "torch graph": statistics.median(replay) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=6)
    args = parser.parse_args()
    print(f"{'case':<16}" + "".join(f"{name:>14}" for name in (*VARIANTS, "torch eager",
                                                                "torch graph", "ratio")))
    for dtype in args.dtypes.split(","):
        for batch in map(int, args.batches.split(",")):
            row = graphrt_times(batch, dtype, args.rounds, args.number)
            theirs = torch_times(batch, dtype, args.number) or {}
            row.update(theirs)
            ratio = (row["cudnn+graph"] / theirs["torch graph"]) if theirs else np.nan
            print(f"{f'b{batch} {dtype}':<16}" + "".join(
                f"{row.get(name, np.nan):>11.3f} ms" for name in (
                    *VARIANTS, "torch eager", "torch graph")) + f"{ratio:>13.2f}x", flush=True)
    print("ms per run (medians); ratio: graphrt cudnn+graph / PyTorch CUDA graph")


if __name__ == "__main__":
    main()
