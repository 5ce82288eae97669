"""Fuzz graph JSON: structural mutations (hypothesis) and byte mutations (seeded) of every seed
graph, through ``load_graph``, then ``create`` with kernels that accept anything, then a run."""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

import graphrt

from . import corpus, harness
from .harness import CONFIG, Case
from .mutators import INTERESTING, dumps, mutate_bytes, mutated_document, plain

FILES = corpus.graph_files()

Source = Callable[[Path], Any]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
) | st.sampled_from(INTERESTING).map(copy.deepcopy)


def graph_case(source: Source, rng: random.Random) -> Case:
    """Load the graph ``source`` gives; if it loads, create and run it."""

    def body(folder: Path) -> str:
        graph = graphrt.load_graph(source(folder))
        module = corpus.create(graph, corpus.permissive_lib(graph), rng)
        return corpus.exercise(module, rng)

    return body


def as_source(document: Any, form: str) -> Source:
    """``document`` as load_graph gets it: a dict, JSON text, bytes or a file path."""
    if form == "dict":
        value = plain(document)
        return lambda folder: value
    text = dumps(document)
    if form == "text":
        return lambda folder: text
    if form == "bytes":
        return lambda folder: text.encode()
    return lambda folder: _write(folder, text.encode())


def _write(folder: Path, content: bytes) -> Path:
    path = folder / "graph.json"
    path.write_bytes(content)
    return path


def _fifo(folder: Path) -> Path:
    """A FIFO nobody writes to, given where a graph file is expected."""
    path = folder / "graph.json"
    os.mkfifo(path)
    return path


def test_structural_mutations_of_graphs() -> None:
    def draw(data: Any) -> tuple[str, Case]:
        path = data.draw(st.sampled_from(FILES))
        rng = data.draw(st.randoms(use_true_random=False))
        document, done = mutated_document(corpus.seed_bytes(path), rng,
                                          lambda: data.draw(JSON_VALUES))
        form = data.draw(st.sampled_from(["dict", "dict", "text", "bytes", "path"]))
        body = graph_case(as_source(document, form), random.Random(rng.random()))
        return f"{path.name} as {form}: {'; '.join(done)}", body

    stats = harness.run_hypothesis("graph-structural", CONFIG.budget(1000, 25_000), draw)
    harness.fail_on_findings(stats)


def test_byte_mutations_of_graphs() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("graph-bytes", index)
        path = rng.choice(FILES)
        content, done = mutate_bytes(corpus.seed_bytes(path), rng)
        form = "fifo" if rng.random() < 0.01 else rng.choice(["bytes", "bytes", "text", "path"])
        source: Source = (lambda folder: _write(folder, content)) if form == "path" else (
            (lambda folder: content.decode("utf-8", "surrogateescape")) if form == "text"
            else _fifo if form == "fifo" else (lambda folder: content))
        return f"{path.name} as {form}: {', '.join(done)}", graph_case(source, rng)

    stats = harness.run_target("graph-bytes", CONFIG.budget(600, 30_000), make)
    harness.fail_on_findings(stats)
