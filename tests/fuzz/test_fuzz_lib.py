"""Fuzz declarative lib JSON: structural (hypothesis) and byte (seeded) mutations of the example
models' libs, through ``Library.from_json``, ``create`` with the model's graph, and a run."""

from __future__ import annotations

import copy
import random
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

import graphrt
from graphrt.lib import OPS

from . import corpus, harness
from .harness import CONFIG, Case
from .mutators import INTERESTING, dumps, mutate_bytes, mutated_document, plain

MODELS = [corpus.EXAMPLES / "models" / name for name in corpus.MODELS]
OP_NAMES = sorted(OPS)
ATTR_NAMES = ("axis", "axes", "units", "strides", "padding", "dilation", "groups", "keepdims",
              "begin", "end", "newshape", "epsilon", "layout", "method", "size", "value",
              "exponent", "dtype", "pad_width", "pool_size", "scale", "bias")

LIB_VALUES = (
    st.sampled_from(OP_NAMES)
    | st.sampled_from(ATTR_NAMES)
    | st.sampled_from(INTERESTING).map(copy.deepcopy)
    | st.lists(st.integers(-3, 5) | st.sampled_from([2**31, -(2**63), 10**30]), max_size=6)
    | st.dictionaries(st.sampled_from(ATTR_NAMES), st.integers() | st.floats() | st.text(
        max_size=6) | st.lists(st.integers(-4, 4), max_size=4), max_size=3)
    | st.text(max_size=10)
)


@cache
def graph_document(model: Path) -> Any:
    return corpus.seed_document(model / "graph.json")


def lib_case(model: Path, lib: Any, rng: random.Random) -> Case:
    """Load the lib document ``lib``; create the model's graph with it and run it."""

    def body(folder: Path) -> str:
        source = lib
        if isinstance(lib, bytes) and rng.random() < 0.3:
            source = folder / "lib.json"
            source.write_bytes(lib)
        library = graphrt.Library.from_json(source)
        module = corpus.create(graph_document(model), library, rng)
        return corpus.exercise(module, rng)

    return body


def test_structural_mutations_of_libs() -> None:
    def draw(data: Any) -> tuple[str, Case]:
        model = data.draw(st.sampled_from(MODELS))
        rng = data.draw(st.randoms(use_true_random=False))
        document, done = mutated_document(corpus.seed_bytes(model / "lib.json"), rng,
                                          lambda: data.draw(LIB_VALUES))
        lib: Any = plain(document) if rng.random() < 0.5 else dumps(document).encode()
        return (f"{model.name}/lib.json: {'; '.join(done)}",
                lib_case(model, lib, random.Random(rng.random())))

    stats = harness.run_hypothesis("lib-structural", CONFIG.budget(800, 20_000), draw)
    harness.fail_on_findings(stats)


def test_byte_mutations_of_libs() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("lib-bytes", index)
        model = rng.choice(MODELS)
        content, done = mutate_bytes(corpus.seed_bytes(model / "lib.json"), rng)
        return f"{model.name}/lib.json: {', '.join(done)}", lib_case(model, content, rng)

    stats = harness.run_target("lib-bytes", CONFIG.budget(300, 10_000), make)
    harness.fail_on_findings(stats)
