"""ResNet-50, a BERT-style encoder and ``__copy`` bandwidth on one NVIDIA GPU (issue 28).

Three parts (``--models``), each run on ``--device`` (``cuda:0``):

``resnet50``
    ``examples/onnx/models.py``'s ResNet-50 (torchvision's v1.5 layout, random weights,
    converted by ``graphrt.from_onnx``) at batch 1 and 32, float32 and float16. graphrt runs it
    node by node (``bundle.create(graphrt.cuda(0))``) and replayed from CUDA graphs
    (``create(..., cuda_graph=True)``, ``run()``). PyTorch, in the same process, runs
    ``torchvision.models.resnet50()`` (random weights, eval, ``cudnn.benchmark``), NCHW and
    ``channels_last`` (model and input), eager and captured in one ``torch.cuda.CUDAGraph``.
    graphrt converts it for the device (``devices=["cuda"]``: its tensors NHWC between the
    convolutions); ``gr. NCHW`` is the same model converted with ``channels_last=False``,
    replayed.
``encoder``
    The BERT-style encoder (hidden 256, 4 heads, feed-forward 1024, 4 layers, sequence 128) at
    batch 1 and 8, float32 and float16, the same two graphrt modules; PyTorch runs
    ``nn.TransformerEncoder`` of the same sizes (post-norm, Gelu, ``batch_first``) eager and in
    one CUDA graph. PyTorch's has no embedding and no attention mask (graphrt's model has both:
    a gather, a LayerNorm and one add per layer more).
``copies``
    A graph of one ``__copy`` node, host to device and device to host, 1 to 256 MiB of float32,
    against CuPy moving the same bytes from or to pinned host memory (``ndarray.set`` /
    ``ndarray.get(out=...)``): whole ``run()`` calls against whole CuPy calls (the headline:
    what a user waits for), and the copy alone (the ``__copy`` step as ``profile()`` times
    it against a bare ``cudaMemcpyAsync`` between CUDA events: the transfer itself, without
    ``run()``'s own few tens of microseconds).

The regime is steady state: models run back to back. Each contender is warmed up first
(graphrt: three runs, the second records its CUDA graphs; PyTorch: three runs on a side stream
before its capture), then the contenders take turns in ``--rounds`` rounds of ``--number``
calls (the order reversed every other round); every call is timed to completion (the device
synchronized before and after it) and the tables give medians. Inputs are already on the device
(graphrt's set once with ``set_input``; the copies' sources too). TF32 is off for PyTorch (its
float32 then matches graphrt's, which never uses TF32). ``create()`` is timed separately: the
first of a model in the process, then a second of the same model (the replayed module; cuDNN
plans are cached per process), and ``from_onnx``'s conversion.

Figures: ms per call; ``vs graph`` = graphrt replayed / PyTorch's best CUDA graph (the faster
of NCHW and channels_last for ResNet-50), ``vs eager`` = graphrt replayed / PyTorch's best
eager (below 1: graphrt is faster); ``rel err`` = max|graphrt on the device - graphrt on the
cpu| / max|graphrt on the cpu| over both graphrt modules (the cpu reference runs at batch 1 and
for the encoder, at every batch with ``--check-all``; ``-`` where not checked); copies in GB/s
(1e9 bytes per second) and graphrt's as a percentage of CuPy's. PyTorch columns read ``-`` when
torch (with CUDA) or torchvision is missing. A part that fails prints its error and the
benchmark goes on; the exit status is then 1.

On ``--device sim:0`` (the simulated accelerator: numpy kernels, no PyTorch, numpy copies as
the copies' baseline) the figures mean nothing; with ``--smoke`` (tiny models, one round) it
checks that the benchmark runs.

Usage: ``python benchmarks/gpu_models.py [--device cuda:0] [--models resnet50,encoder,copies]
[--dtypes float32,float16] [--rounds 5] [--number 6] [--check-all] [--smoke]
[--json results.json]`` (needs a GPU and cupy; PyTorch + torchvision for the baselines).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import graphrt
from graphrt.devices import backend_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import load_models

PARTS = ("resnet50", "encoder", "copies")
HEADS = 4  # the encoder's attention heads (bert_encoder's default); feed-forward 4 x hidden
COLUMNS = ("graphrt", "graphrt graph", "graphrt graph NCHW", "torch eager", "torch graph",
           "torch eager CL", "torch graph CL")
NAN = float("nan")
Call = Callable[[], object]


@dataclasses.dataclass(frozen=True)
class Sizes:
    image: int = 224
    resnet_batches: tuple[int, ...] = (1, 32)
    encoder_batches: tuple[int, ...] = (1, 8)
    seq: int = 128
    layers: int = 4
    hidden: int = 256
    copies_mib: tuple[int, ...] = (1, 4, 16, 64, 256)


SMOKE = Sizes(image=32, resnet_batches=(1,), encoder_batches=(1,), seq=8, layers=1,
              copies_mib=(1,))


# -- timing ---------------------------------------------------------------------------------


def synchronizer(device: graphrt.Device) -> Call:
    if device.kind == "cuda":
        import cupy

        return cupy.cuda.Device(device.id).synchronize  # type: ignore[no-any-return]
    return backend_for(device).synchronize


def interleaved(contenders: Mapping[str, Call], sync: Call, rounds: int, number: int
                ) -> dict[str, float]:
    """Median seconds per call, each call synchronized, contenders taking turns."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for call in contenders.values():  # one untimed call each, back to back
        call()
    names = list(contenders)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            call = contenders[name]
            for _ in range(number):
                sync()
                start = time.perf_counter()
                call()
                sync()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def attempt(what: str, errors: list[str], make: Callable[[], Any]) -> Any:
    """``make()``, or None after printing (and recording) its error."""
    try:
        return make()
    except Exception as err:  # a failing part must not stop the others
        message = f"{what}: {type(err).__name__}: {err}"
        print(f"  ERROR {message}", flush=True)
        traceback.print_exc(file=sys.stderr)
        errors.append(message)
        return None


def release(device: graphrt.Device) -> None:
    """Give freed GPU memory back between rows (CuPy's pool, PyTorch's cache)."""
    gc.collect()
    if device.kind != "cuda":
        return
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


# -- PyTorch ----------------------------------------------------------------------------------


def torch_usable(device: graphrt.Device) -> bool:
    if device.kind != "cuda":
        return False
    try:
        torch = importlib.import_module("torch")
    except Exception:
        return False
    if not torch.cuda.is_available():
        return False
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # graphrt never uses TF32
    torch.backends.cuda.matmul.allow_tf32 = False
    return True


def torch_graph(call: Call) -> Call:
    """``call`` captured in one CUDA graph (warmed up on a side stream first); its replay."""
    torch = importlib.import_module("torch")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    torch.cuda.synchronize()
    replay: Call = graph.replay
    return replay


def torch_contenders(part: str, batch: int, dtype: str, sizes: Sizes, errors: list[str]
                     ) -> dict[str, Call]:
    """PyTorch's eager and CUDA-graph calls of the part's model (those that could be made)."""
    torch = importlib.import_module("torch")

    kind = getattr(torch, dtype)
    nets: dict[str, tuple[Any, Any]] = {}  # suffix -> (model, input)
    if part == "resnet50":
        try:
            torchvision = importlib.import_module("torchvision")
        except Exception as err:
            print(f"  (no PyTorch ResNet-50: torchvision: {type(err).__name__}: {err})")
            return {}
        for suffix, fmt in (("", torch.contiguous_format), (" CL", torch.channels_last)):
            net = torchvision.models.resnet50().eval().to(device="cuda", dtype=kind)
            x = torch.randn(batch, 3, sizes.image, sizes.image, device="cuda", dtype=kind)
            nets[suffix] = (net.to(memory_format=fmt), x.contiguous(memory_format=fmt))
    else:
        layer = torch.nn.TransformerEncoderLayer(
            d_model=sizes.hidden, nhead=HEADS, dim_feedforward=4 * sizes.hidden,
            batch_first=True, activation="gelu")
        net = torch.nn.TransformerEncoder(layer, num_layers=sizes.layers,
                                          enable_nested_tensor=False)
        nets[""] = (net.eval().to(device="cuda", dtype=kind),
                    torch.randn(batch, sizes.seq, sizes.hidden, device="cuda", dtype=kind))
    calls: dict[str, Call] = {}
    for suffix, (net, x) in nets.items():
        eager: Call = torch.no_grad()(functools.partial(net, x))
        if attempt(f"torch eager{suffix}", errors, functools.partial(warm, eager)):
            calls[f"torch eager{suffix}"] = eager
            graph = attempt(f"torch graph{suffix}", errors, functools.partial(torch_graph, eager))
            if graph is not None:
                calls[f"torch graph{suffix}"] = graph
    return calls


def warm(call: Call) -> bool:
    """Three calls (cudnn.benchmark picks its kernels in the first)."""
    for _ in range(3):
        call()
    return True


# -- models ---------------------------------------------------------------------------------


def build(models: ModuleType, part: str, batch: int, dtype: str, sizes: Sizes) -> Any:
    if part == "resnet50":
        return models.resnet50(batch=batch, dtype=dtype, image=sizes.image)
    return models.bert_encoder(batch=batch, seq=sizes.seq, layers=sizes.layers,
                               hidden=sizes.hidden, heads=HEADS, dtype=dtype)


def on_device(feeds: Mapping[str, np.ndarray], device: graphrt.Device) -> dict[str, Any]:
    if device.kind == "cuda":
        import cupy

        with cupy.cuda.Device(device.id):
            return {name: cupy.asarray(value) for name, value in feeds.items()}
    return dict(feeds)  # set_input copies them onto the device


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    want64 = want.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - want64).max() / np.abs(want64).max())


def measure_model(models: ModuleType, part: str, batch: int, dtype: str, device: graphrt.Device,
                  args: argparse.Namespace, sizes: Sizes, use_torch: bool, errors: list[str]
                  ) -> dict[str, Any]:
    model = build(models, part, batch, dtype, sizes)
    feeds = models.sample_inputs(model)
    start = time.perf_counter()
    bundle = graphrt.from_onnx(model, devices=[device.kind])
    convert_s = time.perf_counter() - start
    start = time.perf_counter()
    plain = bundle.create(device)
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    replayed = bundle.create(device, cuda_graph=True)
    again_s = time.perf_counter() - start
    inputs = on_device(feeds, device)
    mods = {"graphrt": plain, "graphrt graph": replayed}
    if part == "resnet50":  # the same model with its tensors left NCHW, for comparison
        mods["graphrt graph NCHW"] = graphrt.from_onnx(
            model, devices=[device.kind], channels_last=False).create(device, cuda_graph=True)
    for mod in mods.values():
        mod.set_input(**inputs)
        for _ in range(3):  # a warm-up run, the recording, a replay
            mod.run()
    report = replayed.capture_report()
    errs: dict[str, float] | None = None
    if args.check_all or part == "encoder" or batch == 1:
        reference = graphrt.from_onnx(model).create(graphrt.cpu(0))
        reference.run(**feeds)
        want = np.array(reference.get_output(0))
        errs = {name: relative_error(mod.get_output(0, out=np.empty_like(want)), want)
                for name, mod in mods.items()}
    contenders: dict[str, Call] = {name: mod.run for name, mod in mods.items()}
    if use_torch:
        contenders.update(attempt("torch", errors, functools.partial(
            torch_contenders, part, batch, dtype, sizes, errors)) or {})
    seconds = interleaved(contenders, synchronizer(device), args.rounds, args.number)
    ms = {name: seconds[name] * 1e3 if name in seconds else NAN for name in COLUMNS}
    best_graph = min(ms["torch graph"], ms["torch graph CL"], key=lambda v: (math.isnan(v), v))
    best_eager = min(ms["torch eager"], ms["torch eager CL"], key=lambda v: (math.isnan(v), v))
    return {"model": part, "batch": batch, "dtype": dtype, "ms": ms,
            "vs_torch_graph": ms["graphrt graph"] / best_graph,
            "vs_torch_eager": ms["graphrt graph"] / best_eager,
            "rel_err": errs, "convert_s": convert_s,
            "create_s": {"first": first_s, "again": again_s},
            "capture": dataclasses.asdict(report) if report is not None else None}


def cell(value: float, width: int, spec: str) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:>{width}{spec}}"


def print_model_header() -> None:
    print("ms per call; vs graph / vs eager: graphrt graph / PyTorch's best CUDA graph / "
          "eager; rel err: against graphrt on the cpu")
    heads = ("graphrt", "gr. graph", "gr. NCHW", "pt eager", "pt graph", "pt eag CL",
             "pt grf CL")
    print(f"{'model':<24}" + "".join(f"{h:>11}" for h in heads)
          + f"{'vs graph':>10}{'vs eager':>10}{'rel err':>10}", flush=True)


def print_model_row(row: dict[str, Any]) -> None:
    errs = row["rel_err"]
    err = max(errs.values()) if errs else NAN
    case = f"{row['model']} b{row['batch']} {row['dtype']}"
    print(f"{case:<24}" + "".join(cell(row["ms"][c], 11, ".3f") for c in COLUMNS)
          + cell(row["vs_torch_graph"], 10, ".2f") + cell(row["vs_torch_eager"], 10, ".2f")
          + cell(err, 10, ".1e"))
    cap = row["capture"] or {}
    eager = ", ".join(cap.get("eager_nodes") or ()) or "none"
    how = (f"{cap.get('segments')} segment(s) recorded, {cap.get('eager_steps')} step(s) node "
           f"by node between them ({eager})" if cap.get("enabled")
           else f"not replayed ({cap.get('reason')})")
    print(f"    create {row['create_s']['first']:.2f} s first, {row['create_s']['again']:.2f} s "
          f"again; from_onnx {row['convert_s']:.2f} s; capture: {how}", flush=True)


def model_rows(part: str, device: graphrt.Device, args: argparse.Namespace, sizes: Sizes,
               use_torch: bool, errors: list[str]) -> list[dict[str, Any]]:
    models = load_models()
    batches = sizes.resnet_batches if part == "resnet50" else sizes.encoder_batches
    rows = []
    for dtype in args.dtypes.split(","):
        for batch in batches:
            row = attempt(f"{part} b{batch} {dtype}", errors, functools.partial(
                measure_model, models, part, batch, dtype, device, args, sizes, use_torch,
                errors))
            if row is not None:
                print_model_row(row)
                rows.append(row)
            release(device)
    return rows


# -- copies ---------------------------------------------------------------------------------


def copy_graph(n: int, src: graphrt.Device, dst: graphrt.Device) -> dict[str, Any]:
    """x (float32 [n], on ``src``) -> ``__copy`` -> output on ``dst``."""
    return {"nodes": [{"op": "null", "name": "x", "inputs": []},
                      {"op": "tvm_op", "name": "copy", "inputs": [[0, 0, 0]], "attrs": {
                          "func_name": "__copy", "num_inputs": "1", "num_outputs": "1",
                          "flatten_data": "0"}}],
            "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]],
            "attrs": {"dltype": ["list_str", ["float32"] * 2],
                      "shape": ["list_shape", [[n], [n]]],
                      "storage_id": ["list_int", [0, 1]],
                      "device_index": ["list_int", [src.type_code, dst.type_code]]}}


def baseline_copy(host: np.ndarray, device: graphrt.Device, upload: bool
                  ) -> tuple[str, Call, Call]:
    """CuPy moving ``host``'s bytes from / to pinned memory (numpy's copy off cuda): its
    name, the call, and the bare asynchronous memcpy on the current stream (for the
    event-timed figure; the same call off cuda)."""
    if device.kind != "cuda":
        dst = np.empty_like(host)
        copy = functools.partial(np.copyto, dst, host)
        return "numpy copy (stand-in)", copy, copy
    import cupy
    import cupyx

    with cupy.cuda.Device(device.id):
        pinned = cupyx.empty_pinned(host.shape, host.dtype)
        pinned[...] = host
        gpu = cupy.asarray(host)
    runtime = cupy.cuda.runtime
    ends = ((gpu.data.ptr, pinned.ctypes.data, runtime.memcpyHostToDevice) if upload
            else (pinned.ctypes.data, gpu.data.ptr, runtime.memcpyDeviceToHost))

    def memcpy() -> None:
        runtime.memcpyAsync(ends[0], ends[1], host.nbytes, ends[2],
                            cupy.cuda.get_current_stream().ptr)

    if upload:
        return "CuPy from pinned", lambda: gpu.set(pinned), memcpy
    return "CuPy to pinned", lambda: gpu.get(out=pinned), memcpy


def event_seconds(device: graphrt.Device, call: Call, repeat: int) -> float:
    """Median seconds of ``call``'s device work between two CUDA events (wall clock off
    cuda)."""
    if device.kind != "cuda":
        return interleaved({"call": call}, lambda: None, 1, repeat)["call"]
    import cupy

    times = []
    with cupy.cuda.Device(device.id):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        for _ in range(repeat):
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def measure_copy(mib: int, upload: bool, device: graphrt.Device, args: argparse.Namespace
                 ) -> dict[str, Any]:
    nbytes = mib << 20
    host = np.arange(nbytes // 4, dtype=np.float32)
    cpu = graphrt.cpu(0)
    src, dst = (cpu, device) if upload else (device, cpu)
    mod = graphrt.create(copy_graph(host.size, src, dst), {}, cpu, device)
    mod.set_input("x", host)  # onto src: the device's memory for device to host
    for _ in range(3):
        mod.run()
    np.testing.assert_array_equal(mod.get_output(0, out=np.empty_like(host)), host)
    name, baseline, memcpy = baseline_copy(host, device, upload)
    seconds = interleaved({"graphrt": mod.run, "baseline": baseline}, synchronizer(device),
                          args.rounds, args.number)
    gbps = {k: nbytes / v / 1e9 for k, v in seconds.items()}
    # the copy alone: the __copy step as the profiler times it (CUDA events up, the host's
    # clock down, where the host waits for it) against the bare memcpy between events
    (node,) = (n for n in mod.profile(repeat=args.rounds * args.number).nodes
               if n.kind == "copy")
    node_gbps = nbytes / statistics.median(node.times_us) / 1e3
    memcpy_gbps = nbytes / event_seconds(device, memcpy, args.rounds * args.number) / 1e9
    return {"direction": "host to device" if upload else "device to host", "mib": mib,
            "graphrt_gbps": gbps["graphrt"], "baseline_gbps": gbps["baseline"],
            "baseline": name, "percent": 100 * gbps["graphrt"] / gbps["baseline"],
            "copy_node_gbps": node_gbps, "memcpy_gbps": memcpy_gbps,
            "copy_node_percent": 100 * node_gbps / memcpy_gbps}


def copy_rows(device: graphrt.Device, args: argparse.Namespace, sizes: Sizes,
              errors: list[str]) -> list[dict[str, Any]]:
    print(f"{'__copy':<16}{'MiB':>6}{'graphrt GB/s':>14}{'baseline GB/s':>15}{'graphrt %':>11}"
          f"{'node GB/s':>11}{'memcpy GB/s':>13}{'node %':>8}  baseline", flush=True)
    rows = []
    for upload in (True, False):
        for mib in sizes.copies_mib:
            row = attempt(f"copy {mib} MiB {'up' if upload else 'down'}", errors, functools.partial(
                measure_copy, mib, upload, device, args))
            if row is not None:
                print(f"{row['direction']:<16}{mib:>6}{row['graphrt_gbps']:>14.2f}"
                      f"{row['baseline_gbps']:>15.2f}{row['percent']:>10.1f}%"
                      f"{row['copy_node_gbps']:>11.2f}{row['memcpy_gbps']:>13.2f}"
                      f"{row['copy_node_percent']:>7.1f}%  {row['baseline']}", flush=True)
                rows.append(row)
            release(device)
    return rows


# -- the machine ------------------------------------------------------------------------------


def version(module: str, read: Callable[[Any], Any] = lambda m: m.__version__) -> str | None:
    try:
        return str(read(importlib.import_module(module)))
    except Exception:
        return None


def machine(device: graphrt.Device) -> dict[str, Any]:
    info: dict[str, Any] = {"device": str(device), "python": platform.python_version(),
                            "numpy": np.__version__, "graphrt": graphrt.__version__}
    if device.kind == "cuda":
        def gpu_name(cupy: Any) -> str:
            name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
            return name.decode() if isinstance(name, bytes) else str(name)

        info["gpu"] = version("cupy", gpu_name)
        info["cupy"] = version("cupy")
        info["torch"] = version("torch")
        info["torch_cuda"] = version("torch", lambda t: t.version.cuda)
        info["torch_cudnn"] = version("torch", lambda t: t.backends.cudnn.version())
        info["torchvision"] = version("torchvision")
        info["cudnn_frontend"] = version("cudnn")
        info["cudnn_backend"] = version("cudnn", lambda c: c.backend_version())
        info["nvmath"] = version("nvmath")
    else:
        info["gpu"] = "none (simulated)"
    return info


def finite_or_none(value: Any) -> Any:
    """NaN (a missing figure) as JSON null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_none(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--models", default=",".join(PARTS),
                        help="the parts to run, of " + ",".join(PARTS))
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=6, help="timed calls per round")
    parser.add_argument("--check-all", action="store_true",
                        help="compare with the cpu at every batch (slow at ResNet-50 batch 32)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny models, 1 MiB copies, one round of one call (not a measurement)")
    parser.add_argument("--json", help="also write every row to this file")
    args = parser.parse_args(argv)
    parts = args.models.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)} (known: {', '.join(PARTS)})")
    sizes = SMOKE if args.smoke else Sizes()
    if args.smoke:
        args.rounds, args.number = 1, 1
    device = graphrt.device(args.device)
    info = machine(device)
    print("; ".join(f"{k} {v}" for k, v in info.items() if v is not None))
    use_torch = bool({"resnet50", "encoder"} & set(parts)) and torch_usable(device)
    print(f"steady state: medians of {args.rounds} rounds x {args.number} synchronized calls, "
          f"contenders interleaved; PyTorch {'in' if use_torch else 'not in'} this run",
          flush=True)
    errors: list[str] = []
    result: dict[str, Any] = {"machine": info, "rounds": args.rounds, "number": args.number,
                              "sizes": dataclasses.asdict(sizes), "models": [], "copies": []}
    header = True
    for part in parts:
        if part == "copies":
            result["copies"] = copy_rows(device, args, sizes, errors)
        else:
            if header:
                print_model_header()
                header = False
            result["models"] += attempt(part, errors, functools.partial(
                model_rows, part, device, args, sizes, use_torch, errors)) or []
    result["errors"] = errors
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(finite_or_none(result), handle, indent=2)
    if errors:
        print(f"{len(errors)} part(s) failed: " + "; ".join(errors), file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
