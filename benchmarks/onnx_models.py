"""ResNet-50, MobileNetV2 and a BERT encoder: graphrt (``from_onnx``) against ONNX Runtime.

The models come from ``examples/onnx/models.py`` (exporter-style layouts, seeded random
weights), one per batch size. Each is converted (timed), checked to agree with ONNX Runtime
(max|err| / max|ref| < 1e-3) and then timed: after a warm-up, graphrt and ONNX Runtime
(CPUExecutionProvider with as many intra-op threads as graphrt uses) run in blocks of
``--block`` calls back to back, alternately, in this one process, and the table reports the
steady-state median per call of each (``--repeat`` rounds), their ratio, the cold ratio (the
first call of each block, after a pause), the activation pool the
converter planned (``bundle.metadata["memory"]`` less the params, which it counts too)
against its lower bound and against one buffer per entry, and the conversion time. The CPU,
numpy's BLAS and the thread counts are printed (and written with ``--json``) alongside, since
they decide the numbers.

Usage: ``python benchmarks/onnx_models.py [--models resnet50,mobilenet_v2,bert]
[--batches 1,8] [--repeat 10] [--json results.json]``
"""

from __future__ import annotations

import os
import sys

# OPENBLAS_CORETYPE pins OpenBLAS to one kernel family when numpy loads it; a stale setting
# would time numpy's matmuls with the wrong kernels. Drop it and start again, before numpy.
if "OPENBLAS_CORETYPE" in os.environ:
    os.environ.pop("OPENBLAS_CORETYPE")
    os.environ["GRAPHRT_BENCH_UNSET_CORETYPE"] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import argparse
import importlib.util
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import graphrt

MODELS_FILE = Path(__file__).resolve().parents[1] / "examples" / "onnx" / "models.py"
TOLERANCE = 1e-3


def load_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("onnx_example_models", MODELS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cpu_model() -> str:
    """The CPU's name, with its family and model numbers where the name alone does not tell
    the generation ("AMD EPYC" is a Zen 1 or a Zen 3, whose cores differ twofold in float
    throughput)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def blas_info() -> list[dict[str, Any]]:
    """numpy's BLAS: threadpoolctl's view when installed, else numpy's build config."""
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]
    except ImportError:
        config: Any = np.show_config(mode="dicts")
        deps = config.get("Build Dependencies", {})
        return [{"source": "numpy.show_config", "api": key, **{k: v for k, v in value.items()
                                                               if k in ("name", "version")}}
                for key, value in deps.items() if key in ("blas", "lapack")]
    return [{"source": "threadpoolctl", **{k: info.get(k) for k in (
        "internal_api", "version", "num_threads", "threading_layer", "architecture",
        "filepath")}} for info in threadpool_info()]


def graphrt_threads() -> int:
    """The threads graphrt computes on: ``GRAPHRT_THREADS`` where set, else one per usable
    core (its helper crew and the caller; numpy's BLAS pool is held to that too)."""
    from graphrt.kernels.cpu.crew import default_threads

    return default_threads()


def cpu_topology() -> dict[str, Any]:
    """Logical CPUs, physical cores (SMT siblings share one) and the vector ISA the kernels
    may use: AVX2, AVX-512, AMX on x86; NEON (asimd), SVE on Arm."""
    cores: set[tuple[str, str]] = set()
    flags: set[str] = set()
    physical, core = "0", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "physical id":
                physical = value
            elif key == "core id":
                core = value
                cores.add((physical, core))
            elif key in ("flags", "Features"):
                flags.update(value.split())
    except OSError:
        pass
    isa = [name for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"),
                                   ("AVX-512 VNNI", "avx512_vnni"), ("AMX", "amx_tile"),
                                   ("NEON", "asimd"), ("SVE", "sve")) if flag in flags]
    return {"logical": os.cpu_count(), "physical_cores": len(cores) or None,
            "usable": graphrt_threads(), "isa": isa}


def ort_session(model: Any, profile: bool = False) -> Any:
    """ONNX Runtime's CPU session with as many intra-op threads as graphrt uses (its default,
    one per physical core, halves itself where the machine reports SMT siblings); otherwise
    default options (``profile``: its profiler on, writing into the temporary folder)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = graphrt_threads()
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tempfile.gettempdir()) / "graphrt_ort_profile")
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def environment() -> dict[str, Any]:
    import onnxruntime

    return {
        "cpu": cpu_model(),
        "topology": cpu_topology(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "graphrt": graphrt.__version__,
        "onnxruntime": onnxruntime.__version__,
        "blas": blas_info(),
        "thread_env": {k: os.environ.get(k) for k in (
            "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "openblas_coretype_unset": os.environ.get("GRAPHRT_BENCH_UNSET_CORETYPE") == "1",
        "graphrt_threads": graphrt_threads(),
        "ort_threads": f"intra_op_num_threads={graphrt_threads()} (graphrt's), otherwise "
                       "default session options",
    }


def build(models: ModuleType, name: str, batch: int) -> Any:
    if name == "resnet50":
        return models.resnet50(batch=batch)
    if name == "mobilenet_v2":
        return models.mobilenet_v2(batch=batch)
    if name == "bert":
        return models.bert_encoder(batch=batch)
    raise SystemExit(f"unknown model {name!r} (resnet50, mobilenet_v2, bert)")


SETTLE_S = 0.2
"""Pause before each contender's block, so that each starts on idle cores: after a run, ONNX
Runtime's pool threads and OpenBLAS's workers spin-wait (OpenBLAS for up to 2**28 cycles,
about 0.1 s) and hold the second core, which slowed whichever contender came next by 2-5x
here (the MLP at batch 64: 4.3 ms alone, 10-21 ms right after the others)."""


def regimes(contenders: dict[str, Callable[[], Any]], warmup: int, rounds: int, block: int
            ) -> dict[str, dict[str, float]]:
    """Each contender's median seconds per call in two regimes, as users run models.

    Every round runs each contender's block in turn (the order rotated each round, a pause of
    :data:`SETTLE_S` before each block): ``block`` calls back to back. The first call of a
    block, after the pause, is a **cold** sample; the others are **steady** samples (models
    back to back). ``warmup`` calls of each come first, untimed."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    names = list(contenders)
    cold: dict[str, list[float]] = {name: [] for name in names}
    steady: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            time.sleep(SETTLE_S)
            for call in range(max(block, 2)):
                start = time.perf_counter()
                contenders[name]()
                (cold if call == 0 else steady)[name].append(time.perf_counter() - start)
    return {name: {"steady": statistics.median(steady[name]),
                   "cold": statistics.median(cold[name])} for name in names}


def describe_machine(env: dict[str, Any]) -> str:
    """The lines that say what the figures were measured on."""
    top = env["topology"]
    lines = [f"cpu: {env['cpu']} ({top['logical']} logical, {top['physical_cores']} physical "
             f"cores, {top['usable']} usable; ISA {', '.join(top['isa']) or 'baseline'}); "
             f"python {env['python']}, numpy {env['numpy']}, onnxruntime {env['onnxruntime']}"]
    lines += ["blas: " + ", ".join(f"{k}={v}" for k, v in blas.items() if k != "source")
              for blas in env["blas"]]
    lines.append(f"threads: graphrt {env['graphrt_threads']}; ORT {env['ort_threads']}; env "
                 + ", ".join(f"{k}={v}" for k, v in env["thread_env"].items())
                 + ("; OPENBLAS_CORETYPE was set and has been unset"
                    if env["openblas_coretype_unset"] else ""))
    return "\n".join(lines)


def measure(models: ModuleType, name: str, batch: int, warmup: int, repeat: int, block: int
            ) -> dict[str, Any]:
    model = build(models, name, batch)
    feeds = models.sample_inputs(model, {"batch": batch, "seq": 128})
    row: dict[str, Any] = {"model": name, "batch": batch}
    start = time.perf_counter()
    try:
        bundle = graphrt.from_onnx(model)
    except graphrt.GraphrtError as err:
        row["error"] = f"{type(err).__name__}: {err}"
        return row
    row["convert_s"] = time.perf_counter() - start
    memory: dict[str, int] = dict(bundle.metadata["memory"])  # type: ignore[arg-type]
    # The metadata's figures count the params too, each pinned in a slot of its own; the
    # activation pool is what is left without them.
    params = sum(int(a.nbytes) for a in bundle.params.values())
    row.update({"metadata_memory": memory, "params_bytes": params,
                "pool_bytes": memory["planned_bytes"] - params,
                "lower_bound_bytes": memory["lower_bound_bytes"] - params,
                "one_buffer_per_entry_bytes": memory["one_buffer_per_entry_bytes"] - params})
    mod = bundle.create(graphrt.cpu(0))
    session = ort_session(model)
    (y,) = mod(**feeds)
    (ref,) = session.run(None, feeds)
    row["rel_err"] = float(np.abs(np.asarray(y) - ref).max() / np.abs(ref).max())
    if not row["rel_err"] < TOLERANCE:
        row["error"] = f"outputs disagree: max|err|/max|ref| = {row['rel_err']:.3g}"
        return row
    medians = regimes({"graphrt": lambda: mod.run(**feeds),
                       "ort": lambda: session.run(None, feeds)}, warmup, repeat, block)
    for regime, suffix in (("steady", ""), ("cold", "_cold")):
        row.update({f"graphrt{suffix}_ms": medians["graphrt"][regime] * 1e3,
                    f"ort{suffix}_ms": medians["ort"][regime] * 1e3,
                    f"ratio{suffix}": medians["graphrt"][regime] / medians["ort"][regime]})
    return row


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'model':<13} {'batch':>5} {'graphrt ms':>11} {'ORT ms':>9} {'ratio':>6} "
            f"{'cold ratio':>10}  {'activations MiB: pool / bound / naive':>37}  "
            f"{'convert s':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "graphrt_ms" not in r:
            error = r["error"].splitlines()
            lines.append(f"{r['model']:<13} {r['batch']:>5}  failed: {error[0]}")
            lines += [f"{'':>21}{line}" for line in error[1:4]]
            continue
        pool = " / ".join(mib(r[k]) for k in ("pool_bytes", "lower_bound_bytes",
                                               "one_buffer_per_entry_bytes"))
        lines.append(f"{r['model']:<13} {r['batch']:>5} {r['graphrt_ms']:>11.2f} "
                     f"{r['ort_ms']:>9.2f} {r['ratio']:>6.2f} {r['ratio_cold']:>10.2f}  "
                     f"{pool:>37}  {r['convert_s']:>9.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,bert")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeat", type=int, default=10, help="rounds of blocks")
    parser.add_argument("--block", type=int, default=5, help="calls back to back per block")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise SystemExit("needs onnx and onnxruntime: pip install onnx onnxruntime") from None
    models = load_models()
    env = environment()
    print(describe_machine(env))
    print(f"steady state (ms, ratio): median per call of {args.repeat} rounds of blocks of "
          f"{args.block} calls back to back, order rotated, a {SETTLE_S} s pause before each "
          "block; cold ratio: the first call of each block; bert: 4 layers, hidden 256, "
          "4 heads, seq 128\n")
    rows = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            rows.append(measure(models, name.strip(), batch, args.warmup, args.repeat,
                                args.block))
            print(table(rows[-1:]).splitlines()[-1] if "graphrt_ms" in rows[-1] else
                  f"  {name} batch {batch}: {rows[-1]['error'].splitlines()[0]}", flush=True)
    print("\n" + table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps({"environment": env, "repeat": args.repeat,
                                         "block": args.block, "warmup": args.warmup,
                                         "results": rows}, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
