"""The peer benchmark (issues 14 and 30): graphrt against ONNX Runtime and a bare numpy floor.

Eight workloads, each built as ONNX with ``onnx.helper`` (``examples/onnx/models.py``, seeded
random weights): a 1000-node chain of tiny Add/Mul (dispatch), an MLP of 4 Gemm layers of
1024 (batch 1 and 64), ResNet-18 and ResNet-50 at 224x224 (batch 1 and 8), 8 independent
branches of two 512x512 MatMuls added up by a Sum, MobileNetV2 (depthwise convolutions; batch
1 and 8), a BERT-style encoder (4 layers, hidden 256, seq 128; batch 1 and 8), and the
ResNet-18 quantized by ONNX Runtime's ``quantize_static`` (QDQ format, int8 weights per
channel, uint8 activations; batch 1 and 8: ``resnet18_int8``, whose numpy column is
graphrt's own float32 ResNet-18, the model the int8 one must beat).

Each model is converted with ``graphrt.from_onnx`` (default options; the conversion and the
first, cold ``create()`` are timed, and a second ``create()`` of the same bundle), then run by
graphrt, by ONNX Runtime (CPUExecutionProvider, ``intra_op_num_threads`` set to the threads
graphrt uses, default options otherwise) and by the numpy floor on the same inputs. The floor
is what numpy alone costs for the same math with the same weights: the ONNX graph run node by
node with one or two plain numpy calls per node (convolutions as im2col and one matmul,
depthwise ones as one einsum, batch norms as a scale and a shift; values that depend only on
weights and shapes computed once, before timing). graphrt and the floor must agree with ONNX
Runtime (max|err| / max|ref| < 1e-3).

Two regimes, as users run models. Each round runs every contender's block in turn, the order
rotated each round, a settle pause before each block: a block is ``--block`` calls back to
back. The first call of a block (after the pause) is the **cold** sample, the others the
**steady** ones; the table gives the medians of each, their ratios, and the issue's target
for graphrt / ORT in steady state (PASS or MISS). The CPU (model, topology, ISA), numpy's
BLAS, the thread counts and the versions are printed and written with ``--json``.

Usage: ``python benchmarks/peers.py [--workloads chain,mlp,resnet18,branches,resnet50,
mobilenet_v2,bert,resnet18_int8] [--batches 1,8] [--repeat 7] [--block 5] [--warmup 2] [--quick]
[--cache-dir DIR] [--json results.json]``. ``--batches`` replaces the batch sizes of mlp,
resnet18, resnet50, mobilenet_v2 and bert (chain runs at batch 1, branches at its 512 rows);
``--quick`` shrinks every model (and its batches to 1 and 2) for a smoke test. ``create()`` is
timed with an empty compile cache (a fresh ``GRAPHRT_CACHE_DIR``) unless ``--cache-dir`` names
one to use as found: run twice with the same one for warm times.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import operator
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Importing it drops a preset OPENBLAS_CORETYPE (re-executing this script) and brings the
# shared helpers: the model builders' loader, the machine description, interleaved medians.
import onnx_models

import graphrt

TOLERANCE = onnx_models.TOLERANCE
WORKLOADS = ("chain", "mlp", "resnet18", "branches", "resnet50", "mobilenet_v2", "bert",
             "resnet18_int8")
BATCHED = ("mlp", "resnet18", "resnet50", "mobilenet_v2", "bert", "resnet18_int8")
QUANTIZED = ("resnet18_int8",)
"""Rows of a model quantized by ONNX Runtime (QDQ format, int8 weights per channel, uint8
activations): their ``numpy`` column is graphrt running the float32 model instead, and
their agreement is checked against ONNX Runtime's int8 result within a few quantization
steps (:data:`INT8_TOLERANCE`)."""
INT8_TOLERANCE = 0.01
"""max|err| / max|ref| of graphrt's int8 output against ONNX Runtime's (both exact, so equal
but where a requantization rounds a tie the other way, which moves the next layers' sums by a
step)."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The workloads' dimensions: the issue's, or tiny ones for ``--quick``."""

    chain_nodes: int = 1000
    chain_width: int = 16
    mlp_width: int = 1024
    branch_size: int = 512
    image: int = 224
    classes: int = 1000
    cnn_width: int = 64
    seq: int = 128
    bert: Mapping[str, int] = dataclasses.field(default_factory=dict)
    batches: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: {
        "mlp": (1, 64), "resnet18": (1, 8), "resnet50": (1, 8), "mobilenet_v2": (1, 8),
        "bert": (1, 8), "resnet18_int8": (1, 8)})


FULL = Sizes()
QUICK = Sizes(chain_nodes=50, mlp_width=64, branch_size=64, image=32, classes=10, cnn_width=8,
              seq=16, bert={"layers": 1, "hidden": 32, "heads": 2, "vocab": 100,
                            "max_positions": 32},
              batches=dict.fromkeys(BATCHED, (1, 2)))


def target(workload: str, batch: int) -> float:
    """Issue 30's bound on graphrt / ORT for one row, in steady state."""
    return {"chain": 0.5, "mlp": 1.1, "branches": 1.1, "resnet18": 1.3, "resnet50": 1.3,
            "mobilenet_v2": 1.3, "bert": 1.3, "resnet18_int8": 1.5}[workload]


def build(models: Any, workload: str, batch: int, sizes: Sizes) -> Any:
    """The ONNX model of one row."""
    if workload == "chain":
        return models.chain(nodes=sizes.chain_nodes, width=sizes.chain_width)
    if workload == "mlp":
        return models.mlp(batch=batch, width=sizes.mlp_width)
    if workload == "branches":
        return models.branches(size=sizes.branch_size)
    if workload in QUANTIZED:
        return quantized(build(models, "resnet18", batch, sizes),
                         models.sample_inputs(build(models, "resnet18", batch, sizes)))
    if workload in ("resnet18", "resnet50"):
        maker = models.resnet18 if workload == "resnet18" else models.resnet50
        return maker(batch=batch, image=sizes.image, classes=sizes.classes,
                     width=sizes.cnn_width)
    if workload == "mobilenet_v2":
        return models.mobilenet_v2(batch=batch, image=sizes.image, classes=sizes.classes)
    return models.bert_encoder(batch=batch, seq=sizes.seq, **sizes.bert)


def quantized(model: Any, feeds: Mapping[str, np.ndarray]) -> Any:
    """``model`` quantized by ONNX Runtime as its users do: ``quant_pre_process`` (shape
    inference, batch norms folded), then ``quantize_static`` in the QDQ format, per-channel
    int8 weights and uint8 activations calibrated on four seeded batches like ``feeds``.
    ``reduce_range`` (7-bit weights), as ONNX Runtime advises on CPUs without VNNI: there its
    uint8 x int8 kernels add pairs of products in saturating int16, which full-range weights
    overflow (its result then departs from the model's arithmetic; with 7-bit weights it is
    exact, and graphrt's equals it)."""
    import logging

    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    rng = np.random.default_rng(1)
    batches = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
               for _ in range(4)]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer's advice on every tensor (restored below)
    with tempfile.TemporaryDirectory() as folder:
        source, prepared, target = (os.path.join(folder, f"{n}.onnx")
                                    for n in ("float", "prepared", "int8"))
        onnx.save(model, source)
        try:
            quant_pre_process(source, prepared, skip_symbolic_shape=True)  # (needs no sympy)
            quantize_static(prepared, target, Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=True, reduce_range=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
        return onnx.load(target)


# --- the numpy floor -------------------------------------------------------------------------

# numpy's stubs type most array arithmetic as Any; the floor's functions say so.
Array = Any

def _erf(x: Array) -> Array:
    """Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf."""
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    return np.copysign(1.0 - poly * np.exp(-a * a), x).astype(x.dtype, copy=False)


def _conv(at: Mapping[str, Any], x: Array, w: Array, *bias: Array) -> Array:
    """im2col (one copy of the windows, [C*kh*kw, N*H'*W']) and one matmul for the batch; a
    depthwise convolution as one einsum over the windows' view."""
    group = at.get("group", 1)
    if set(at.get("dilations", [1])) != {1} or group not in (1, x.shape[1]) or (
            group > 1 and w.shape[:2] != (group, 1)):
        raise SystemExit("numpy floor: only undilated Conv, ungrouped or depthwise")
    kh, kw = w.shape[2:]
    windows = _windows(at, x, (kh, kw), 0.0)
    if group > 1:
        y = np.einsum("nchwij,cij->nchw", windows, w[:, 0], optimize=True)
        return y + bias[0][:, None, None] if bias else y
    n, c, ho, wo = windows.shape[:4]
    cols = windows.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, n * ho * wo)
    y = w.reshape(len(w), -1) @ cols
    if bias:
        y += bias[0][:, None]
    return y.reshape(-1, n, ho, wo).transpose(1, 0, 2, 3)


def _max_pool(at: Mapping[str, Any], x: Array) -> Array:
    """One ``np.maximum`` per kernel position (10x faster here than ``max`` over the
    windows' axes, which walks them element by element)."""
    windows = _windows(at, x, at["kernel_shape"], -np.inf)
    out = windows[..., 0, 0].copy()
    for i, j in np.ndindex(*windows.shape[4:]):
        np.maximum(out, windows[..., i, j], out=out)
    return out


def _windows(at: Mapping[str, Any], x: Array, kernel: Sequence[int], fill: float) -> Array:
    """[N, C, H', W', kh, kw]: a view of the padded input's windows at the node's strides."""
    sh, sw = at.get("strides", [1, 1])
    top, left, bottom, right = at.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    return np.lib.stride_tricks.sliding_window_view(x, tuple(kernel), axis=(2, 3))[
        :, :, ::sh, ::sw]


def _batch_norm(at: Mapping[str, Any], x: Array, gamma: Array, beta: Array,
                mean: Array, var: Array) -> Array:
    scale = gamma / np.sqrt(var + np.float32(at.get("epsilon", 1e-5)))
    shape = (-1,) + (1,) * (x.ndim - 2)
    return x * scale.reshape(shape) + (beta - mean * scale).reshape(shape)


def _layer_norm(at: Mapping[str, Any], x: Array, gamma: Array, beta: Array
                ) -> Array:
    axes = tuple(range(at.get("axis", -1) % x.ndim, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True)
    var = (d * d).mean(axis=axes, keepdims=True)
    return d / np.sqrt(var + np.float32(at.get("epsilon", 1e-5))) * gamma + beta


def _softmax(at: Mapping[str, Any], x: Array) -> Array:
    e = np.exp(x - x.max(axis=at.get("axis", -1), keepdims=True))
    return e / e.sum(axis=at.get("axis", -1), keepdims=True)


def _gemm(at: Mapping[str, Any], a: Array, b: Array, *c: Array) -> Array:
    y = (a.T if at.get("transA") else a) @ (b.T if at.get("transB") else b)
    if at.get("alpha", 1.0) != 1.0:
        y *= np.float32(at["alpha"])
    if c:
        y += c[0] * np.float32(at.get("beta", 1.0))
    return y


def _reshape(at: Mapping[str, Any], x: Array, shape: Array) -> Array:
    dims = [x.shape[i] if d == 0 and not at.get("allowzero") else int(d)
            for i, d in enumerate(shape)]
    return x.reshape(dims)


def _slice(at: Mapping[str, Any], x: Array, starts: Array, ends: Array,
           axes: Array | None = None, steps: Array | None = None) -> Array:
    index = [slice(None)] * x.ndim
    axes_ = range(len(starts)) if axes is None else axes
    steps_ = [1] * len(starts) if steps is None else steps
    for axis, start, end, step in zip(axes_, starts, ends, steps_, strict=True):
        index[int(axis)] = slice(int(start), int(end), int(step))
    return x[tuple(index)]


def _sum(at: Mapping[str, Any], *xs: Array) -> Array:
    total = xs[0] + xs[1]
    for x in xs[2:]:
        total += x
    return total


def _unsqueeze(at: Mapping[str, Any], x: Array, *axes: Array) -> Array:
    return np.expand_dims(x, tuple(int(a) for a in (axes[0] if axes else at["axes"])))


# Ops without attributes: the numpy function itself, called with the arrays.
PLAIN: dict[str, Callable[..., Array]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "MatMul": np.matmul, "Erf": _erf, "Identity": lambda x: x,
    "Shape": lambda x: np.array(x.shape, np.int64),
    "Clip": lambda x, low=None, high=None: np.clip(x, low, high)}
# Ops with attributes: called with the node's attributes, then the arrays.
OPS: dict[str, Callable[..., Array]] = {
    "Relu": lambda at, x: np.maximum(x, np.float32(0)),
    "Flatten": lambda at, x: x.reshape(int(np.prod(x.shape[:at.get("axis", 1)])), -1),
    "GlobalAveragePool": lambda at, x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),
    "Transpose": lambda at, x: x.transpose(at.get("perm")),
    "Concat": lambda at, *xs: np.concatenate(xs, axis=at["axis"]),
    "Gather": lambda at, x, i: np.take(x, i, axis=at.get("axis", 0)),
    "Softmax": _softmax, "Gemm": _gemm, "Conv": _conv, "MaxPool": _max_pool,
    "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
    "Reshape": _reshape, "Slice": _slice, "Sum": _sum, "Unsqueeze": _unsqueeze,
}


class NumpyFloor:
    """An ONNX graph run node by node with plain numpy, for fixed input shapes.

    Built from one set of feeds, which it runs once: every value that does not depend on the
    inputs' data (initializers, ``Constant``\\ s, ``Shape`` and what is computed from those
    alone) is kept from that run; a call runs only the nodes that remain, one numpy function
    each, on values held in a list (no lookups by name).
    """

    def __init__(self, model: Any, feeds: Mapping[str, Array]) -> None:
        from onnx import helper, numpy_helper

        graph = model.graph
        values: dict[str, Any] = {"": None}
        values.update((t.name, numpy_helper.to_array(t)) for t in graph.initializer)
        static = set(values)
        values.update(feeds)
        nodes = []
        for node in graph.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            (out,) = node.output
            if node.op_type == "Constant":
                values[out] = numpy_helper.to_array(attrs["value"])
                static.add(out)
                continue
            if node.op_type in PLAIN:
                fn = PLAIN[node.op_type]
            elif node.op_type in OPS:
                fn = functools.partial(OPS[node.op_type], attrs)
            else:
                raise SystemExit(f"numpy floor: no {node.op_type} (node {node.name!r})")
            values[out] = fn(*(values[i] for i in node.input))
            if node.op_type == "Shape" or all(i in static for i in node.input):
                static.add(out)
            else:
                nodes.append((fn, node.input, out))
        slot = {name: k for k, name in enumerate(values)}
        self.slots = [values[name] if name in static else None for name in values]
        self.inputs = [(name, slot[name]) for name in feeds]
        # Each step: the function, a getter of its arguments (a tuple when it takes several,
        # the one argument itself when it takes one), its output's slot, and which getter.
        self.steps = [(fn, operator.itemgetter(*(slot[i] for i in inputs)), slot[out],
                       len(inputs) > 1) for fn, inputs, out in nodes]
        self.outputs = [slot[o.name] for o in graph.output]

    def __call__(self, feeds: Mapping[str, Array]) -> list[Array]:
        values = self.slots.copy()
        for name, k in self.inputs:
            values[k] = feeds[name]
        for fn, get, out, several in self.steps:
            values[out] = fn(*get(values)) if several else fn(get(values))
        return [values[k] for k in self.outputs]


# --- one row ---------------------------------------------------------------------------------

def rel_err(y: Any, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(y, np.float32) - ref).max() / np.abs(ref).max())


def measure(models: Any, workload: str, batch: int, sizes: Sizes, warmup: int, repeat: int,
            block: int) -> dict[str, Any]:
    model = build(models, workload, batch, sizes)
    feeds = models.sample_inputs(model, {"batch": batch, "seq": sizes.seq})
    row: dict[str, Any] = {"workload": workload, "batch": batch,
                           "onnx_nodes": len(model.graph.node),
                           "target": target(workload, batch)}
    start = time.perf_counter()
    try:
        bundle = graphrt.from_onnx(model)
        row["convert_s"] = time.perf_counter() - start
        start = time.perf_counter()
        mod = bundle.create(graphrt.cpu(0))
        row["create_s"] = time.perf_counter() - start
        start = time.perf_counter()
        bundle.create(graphrt.cpu(0))
        row["create_again_s"] = time.perf_counter() - start
    except graphrt.GraphrtError as err:
        row["error"] = f"graphrt: {type(err).__name__}: {err}"
        return row
    session = onnx_models.ort_session(model)
    floor: Callable[[Mapping[str, Array]], Sequence[Array]]
    if workload in QUANTIZED:  # the float model on graphrt is the baseline to beat
        float_mod = graphrt.from_onnx(build(models, "resnet18", batch, sizes)).create(
            graphrt.cpu(0))
        floor = lambda feeds: float_mod(**feeds)  # noqa: E731
    else:
        floor = NumpyFloor(model, feeds)
    (ref,) = session.run(None, feeds)
    (row["rel_err_graphrt"], row["rel_err_numpy"]) = (rel_err(mod(**feeds)[0], ref),
                                                      rel_err(floor(feeds)[0], ref))
    tolerance = {"graphrt": INT8_TOLERANCE if workload in QUANTIZED else TOLERANCE,
                 "numpy": 1.0 if workload in QUANTIZED else TOLERANCE}
    wrong = [k for k in ("graphrt", "numpy") if not row[f"rel_err_{k}"] < tolerance[k]]
    if wrong:
        row["error"] = "; ".join(f"{k} disagrees with ORT: max|err|/max|ref| = "
                                 f"{row[f'rel_err_{k}']:.3g}" for k in wrong)
        return row
    medians = onnx_models.regimes({"graphrt": lambda: mod.run(**feeds),
                                   "ort": lambda: session.run(None, feeds),
                                   "numpy": lambda: floor(feeds)}, warmup, repeat, block)
    row.update({f"{k}_ms": v["steady"] * 1e3 for k, v in medians.items()})
    row.update({f"{k}_cold_ms": v["cold"] * 1e3 for k, v in medians.items()})
    row["ratio_ort"] = medians["graphrt"]["steady"] / medians["ort"]["steady"]
    row["ratio_ort_cold"] = medians["graphrt"]["cold"] / medians["ort"]["cold"]
    row["ratio_numpy"] = medians["graphrt"]["steady"] / medians["numpy"]["steady"]
    row["pass"] = row["ratio_ort"] <= row["target"]
    return row


# --- output ----------------------------------------------------------------------------------

HEAD = (f"{'workload':<12} {'batch':>5} {'graphrt ms':>10} {'ORT ms':>9} {'numpy ms':>9} "
        f"{'graphrt/ORT':>11} {'target':>12} {'cold: graphrt':>13} {'ORT ms':>9} "
        f"{'ratio':>6} {'graphrt/numpy':>13} {'convert s':>9} {'create s':>8}")


def line(r: Mapping[str, Any]) -> str:
    if "error" in r:
        return f"{r['workload']:<12} {r['batch']:>5}  failed: {r['error'].splitlines()[0]}"
    verdict = f"<={r['target']:.2f} {'PASS' if r['pass'] else 'MISS'}"
    note = ("  (numpy column: graphrt's float32 model; graphrt/numpy: int8 / float32)"
            if r["workload"] in QUANTIZED else "")
    return (f"{r['workload']:<12} {r['batch']:>5} {r['graphrt_ms']:>10.3f} "
            f"{r['ort_ms']:>9.3f} {r['numpy_ms']:>9.3f} {r['ratio_ort']:>11.2f} "
            f"{verdict:>12} {r['graphrt_cold_ms']:>13.3f} {r['ort_cold_ms']:>9.3f} "
            f"{r['ratio_ort_cold']:>6.2f} {r['ratio_numpy']:>13.2f} {r['convert_s']:>9.2f} "
            f"{r['create_s']:>8.3f}{note}")


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join([HEAD, "-" * len(HEAD), *(line(r) for r in rows)])


def environment() -> dict[str, Any]:
    env = onnx_models.environment()
    try:
        import numba  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        env["numba"] = None
    else:
        env["numba"] = str(numba.__version__)
    return env


def describe(env: Mapping[str, Any]) -> str:
    return (onnx_models.describe_machine(dict(env))
            + f"\ngraphrt {env['graphrt']}, numba {env['numba'] or 'not installed'}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, from {', '.join(WORKLOADS)}")
    parser.add_argument("--batches", default=None,
                        help="batch sizes for mlp, resnet18, resnet50 and bert (default: "
                             "1,64 for mlp, 1,8 for the others)")
    parser.add_argument("--repeat", type=int, default=7,
                        help="rounds: each contender's block once per round, order rotated")
    parser.add_argument("--block", type=int, default=5,
                        help="calls back to back per block: the first after the pause is "
                             "the cold sample, the others the steady ones")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="tiny models and batches 1,2 (a smoke test, not a measurement)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="graphrt's compile cache (GRAPHRT_CACHE_DIR) to use as found, "
                             "for warm create() times; default: a fresh, empty one")
    args = parser.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")
    return args


def run(args: argparse.Namespace, sizes: Sizes, cache: str) -> dict[str, Any]:
    """Every row, printed as it comes, then the table; the JSON document."""
    models = onnx_models.load_models()
    env = environment()
    print(describe(env))
    print(f"steady state: median per call of {args.repeat} rounds of blocks of {args.block} "
          f"calls back to back (each block after a {onnx_models.SETTLE_S} s pause, the order "
          f"rotated every round; {args.warmup} warm-up calls each); cold: the first call of "
          "each block, after the pause; targets apply to steady state"
          + ("; --quick: tiny models" if args.quick else "")
          + f"; create s: the bundle's first create(), compile cache {cache}\n")
    # The first conversion and create() import the frontend, the executor, the op set and
    # the JIT: pay that here, not in the first row.
    graphrt.from_onnx(models.chain(nodes=2)).create(graphrt.cpu(0))
    print(HEAD, flush=True)
    rows = []
    for workload in args.workloads:
        row_batches = sizes.batches.get(workload, (
            sizes.branch_size if workload == "branches" else 1,))
        for batch in row_batches:
            rows.append(measure(models, workload, batch, sizes, args.warmup, args.repeat,
                                args.block))
            print(line(rows[-1]), flush=True)
    print("\n" + table(rows))
    return {"environment": env, "repeat": args.repeat, "block": args.block,
            "warmup": args.warmup,
            "quick": args.quick, "compile_cache": cache, "sizes": dataclasses.asdict(sizes),
            "tolerance": TOLERANCE, "results": rows}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.batches is not None:
        batches = tuple(int(b) for b in args.batches.split(","))
        sizes = dataclasses.replace(sizes, batches=dict.fromkeys(BATCHED, batches))
    with tempfile.TemporaryDirectory(prefix="graphrt-peers-") as fresh:
        # graphrt's compiled fusion caches on disk: a fresh directory makes "create s" cold.
        os.environ["GRAPHRT_CACHE_DIR"] = str(args.cache_dir or fresh)
        cache = f"{args.cache_dir} (as found)" if args.cache_dir else "empty (a fresh directory)"
        doc = run(args, sizes, cache)
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
