"""Fuzz the ONNX importer and the ONNX backend (seeded): mutations of ONNX's own backend test
models and random single-op models with hostile attributes, through ``from_onnx``, ``create``
and a run; and ``graphrt.onnx.backend`` given hostile models, options and inputs.

Beyond what every target checks (only graphrt's errors, each case bounded in time and memory,
no write outside its folder), a ``ConversionError`` from the converter driver's catch-all
("conversion failed: ValueError: ...") is a finding too: it means a converter met a value it
did not check, and the user deserves a message naming that value.

The cpu kernels run with ``GRAPHRT_JIT=0`` here: numba compiles a kernel the first time a type
meets it, which takes longer than a case's time bound (the compiled kernels have their own fuzz
coverage through the differential op tests).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt

from . import corpus, harness
from .harness import CONFIG, Case

onnx = pytest.importorskip("onnx")

from graphrt.errors import ConversionError  # noqa: E402
from graphrt.onnx import backend  # noqa: E402

from . import onnx_models  # noqa: E402
from .onnx_models import dim_bounds, hostile_array, mutated_model, single_op_model  # noqa: E402

CATCH_ALL = "conversion failed: "
DEVICES = ("cpu", "cpu", "sim")


@pytest.fixture(autouse=True)
def _no_jit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GRAPHRT_JIT", "0")
    yield


def convert_and_run(model: Any, rng: random.Random) -> str:
    """``from_onnx``, ``create`` on cpu or sim, and one run on zeros or random inputs.

    A catch-all ``ConversionError`` re-raises the converter's own exception, so that the
    finding is filed under the converter line that raised it."""
    try:
        bundle = graphrt.from_onnx(model, dim_bounds=dim_bounds(model, rng))
    except ConversionError as err:
        if CATCH_ALL in str(err) and err.__cause__ is not None:
            raise err.__cause__ from None
        raise
    module = bundle.create(graphrt.device(rng.choice(DEVICES)))
    return corpus.exercise(module, rng)


def converting(target: str, build: Callable[[random.Random], tuple[Any, str]]
               ) -> Callable[[int], tuple[str, Case]]:
    """Case ``i`` of ``target``: the model ``build`` makes from the case's random source,
    converted, created and run."""

    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng(target, index)
        model, label = build(rng)
        return label, lambda folder: convert_and_run(model, rng)

    return make


def test_mutations_of_onnx_models() -> None:
    seeds = onnx_models.seed_models()

    def build(rng: random.Random) -> tuple[Any, str]:
        index = rng.randrange(len(seeds))
        model, done = mutated_model(seeds[index], rng)
        return model, f"seed {index}: {done}"

    stats = harness.run_target("onnx-mutations", CONFIG.budget(500, 50_000),
                               converting("onnx-mutations", build))
    harness.fail_on_findings(stats)


def test_single_op_models_with_hostile_attributes() -> None:
    stats = harness.run_target("onnx-single-op", CONFIG.budget(500, 50_000),
                               converting("onnx-single-op", single_op_model))
    harness.fail_on_findings(stats)


# -- the ONNX backend -------------------------------------------------------------------------

ODD_DEVICES = ("CPU", "cpu", "SIM", "sim:0", "CUDA", "cuda:3", "cpu:-1", "", "tpu", "cpu:x",
               None, 5, b"CPU")
ODD_OPTIONS: tuple[dict[str, Any], ...] = (
    {}, {}, {}, {"bogus": 1}, {"dim_bounds": {"N": -1}}, {"dim_bounds": [1]},
    {"dim_bounds": {"N": 2**40}}, {"fuse": False}, {"devices": ["cpu", "sim"]},
    {"devices": "cpu"}, {"placement": {"x": "gpu"}}, {"shapes": {"x": [1]}})


def odd_model(seed: bytes, rng: random.Random) -> tuple[Any, str]:
    roll = rng.random()
    if roll < 0.6:
        model = onnx.ModelProto()
        model.ParseFromString(seed)
        return model, "seed"
    if roll < 0.75:
        return mutated_model(seed, rng)
    return rng.choice((None, 5, "", "/nonexistent/model.onnx", b"garbage", b"", seed[:40],
                       Path("."), [seed], {"model": seed})), "odd"


def odd_inputs(rep: Any, rng: random.Random) -> Any:
    """What a user may hand ``rep.run``: right, nearly right and wrong."""
    graph = rep._proto.graph  # the declared inputs, as the rep read them
    initializers = {t.name for t in graph.initializer}
    declared = [vi for vi in graph.input if vi.name not in initializers]
    values = []
    for vi in declared:
        tensor = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else rng.randint(1, 3)
                      for d in tensor.shape.dim)
        if sum(shape) > 64 or any(d > 16 for d in shape):
            shape = tuple(min(d, 2) for d in shape)
        try:
            dtype_elem = tensor.elem_type
            values.append(hostile_array(rng, dtype_elem, shape))
        except Exception:
            values.append(np.zeros(shape, np.float32))
    roll = rng.random()
    if roll < 0.5:
        return values
    if roll < 0.6:
        return {vi.name: v for vi, v in zip(declared, values, strict=True)}
    if roll < 0.65:
        return rng.choice((None, 5, "x", b"x", 3.5, object()))
    if roll < 0.7:
        return [*values, np.zeros(2)]
    if roll < 0.75:
        return values[:-1]
    if roll < 0.8:
        return [[[1, 2], [3]] for _ in values]  # ragged
    if roll < 0.85:
        dtype = rng.choice(("float64", "int8", "bool", "complex64", "U3", "O"))
        return [np.zeros(np.shape(v), dtype) for v in values]
    if roll < 0.9:
        return [np.zeros((), np.float32) for _ in values]
    if roll < 0.95:
        return {"no such input": np.zeros(2)}
    return [np.asarray(v).reshape(-1) if np.asarray(v).ndim else np.zeros((2, 2))
            for v in values]


def test_the_onnx_backend_with_hostile_models_options_and_inputs() -> None:
    seeds = onnx_models.seed_models()

    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("onnx-backend", index)
        seed_index = rng.randrange(len(seeds))
        model, how = odd_model(seeds[seed_index], rng)
        device = rng.choice(ODD_DEVICES) if rng.random() < 0.2 else rng.choice(("CPU", "SIM"))
        options = rng.choice(ODD_OPTIONS)

        def body(folder: Path) -> str:
            if rng.random() < 0.1:
                backend.run_model(model, [np.zeros(2, np.float32)], device, **options)
                return "ran"
            rep = backend.prepare(model, device, **options)
            for _ in range(rng.choice((1, 1, 2))):
                rep.run(odd_inputs(rep, rng))
            return "ran"

        return f"seed {seed_index} ({how}) on {device!r} with {options}", body

    stats = harness.run_target("onnx-backend", CONFIG.budget(300, 20_000), make)
    harness.fail_on_findings(stats)
