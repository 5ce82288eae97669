"""Fuzz TVM params blobs (seeded): field-aware mutations (counts, lengths, ndim, dtype codes,
shapes, sizes set to edge values) and byte mutations, through ``graphrt.load_params`` and
``GraphModule.load_params`` of a module whose inputs are the blob's params."""

from __future__ import annotations

import random
import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt

from . import harness
from .harness import CONFIG, Case
from .mutators import mutate_bytes

Field = tuple[int, str, str]  # offset, struct format, what

SEEDS: tuple[dict[str, np.ndarray[Any, Any]], ...] = (
    {"w": np.arange(6, dtype="float32").reshape(2, 3), "b": np.ones(3, "float16")},
    {"i8": np.arange(-4, 4, dtype="int8"), "u64": np.array([2**64 - 1], "uint64"),
     "scalar": np.array(7.5, "float64"), "flag": np.array([True, False])},
    {"empty": np.zeros((0, 4), "int32"), "deep": np.zeros((1, 2, 1, 2, 1, 2), "int16")},
    {"é ünïcode": np.ones((2, 2), "uint8")},
)


def fields(blob: bytes) -> list[Field]:
    """Every header field of a valid blob: (offset, format, what)."""
    out: list[Field] = [(0, "Q", "list magic"), (8, "Q", "reserved"), (16, "Q", "name count")]
    pos = 24
    (count,) = struct.unpack_from("<Q", blob, 16)
    for i in range(count):
        (length,) = struct.unpack_from("<Q", blob, pos)
        out.append((pos, "Q", f"length of name {i}"))
        pos += 8 + length
    out.append((pos, "Q", "array count"))
    pos += 8
    for i in range(count):
        out += [(pos, "Q", f"array {i} magic"), (pos + 16, "i", f"array {i} device type"),
                (pos + 20, "i", f"array {i} device id"), (pos + 24, "i", f"array {i} ndim"),
                (pos + 28, "B", f"array {i} type code"), (pos + 29, "B", f"array {i} bits"),
                (pos + 30, "H", f"array {i} lanes")]
        (ndim,) = struct.unpack_from("<i", blob, pos + 24)
        pos += 32
        for d in range(ndim):
            out.append((pos, "q", f"array {i} dim {d}"))
            pos += 8
        (nbytes,) = struct.unpack_from("<q", blob, pos)
        out.append((pos, "q", f"array {i} nbytes"))
        pos += 8 + nbytes
    return out


def edge_value(fmt: str, current: int, rng: random.Random) -> int:
    """An edge value for a field of struct format ``fmt``."""
    bits = struct.calcsize(fmt) * 8
    signed = fmt.islower()
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    choices = [low, high, 0, 1, 2, 3, 4, 7, 8, 16, 33, 64, 128, current + 1, current - 1,
               current * 2, current * 2**20, high // 2 + 1, rng.randint(low, high)]
    if signed:
        choices += [-1, -current]
    return min(max(rng.choice(choices), low), high)


def mutate_fields(blob: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    out = bytearray(blob)
    done = []
    for _ in range(rng.randint(1, 3)):
        offset, fmt, what = rng.choice(fields(blob))
        (current,) = struct.unpack_from("<" + fmt, blob, offset)
        value = edge_value(fmt, current, rng)
        struct.pack_into("<" + fmt, out, offset, value)
        done.append(f"{what} = {value}")
    if rng.random() < 0.2:
        cut = rng.randrange(len(out))
        del out[cut:]
        done.append(f"cut at {cut}")
    return bytes(out), done


@cache
def seed_blob(index: int) -> bytes:
    return graphrt.save_params(SEEDS[index])


@cache
def module_for(index: int) -> graphrt.GraphModule:
    """A module whose inputs are seed ``index``'s params (same names, shapes and dtypes)."""
    builder = GraphBuilder()
    nodes = [builder.input(name, list(array.shape), str(array.dtype))
             for name, array in SEEDS[index].items()]
    return graphrt.create(builder.build(nodes), {})


def params_case(blob: bytes, index: int, rng: random.Random) -> Case:
    kind = rng.choice(["load_params", "module.load_params", "memoryview", "bytearray"])

    def body(folder: Path) -> str:
        if kind == "module.load_params":
            module_for(index).load_params(blob)
            return "loaded into module"
        source = memoryview(blob) if kind == "memoryview" else (
            bytearray(blob) if kind == "bytearray" else blob)
        params = graphrt.load_params(source)
        assert all(isinstance(value, np.ndarray) for value in params.values())
        return "loaded"

    return body


@pytest.mark.parametrize("mutation", ["fields", "bytes"])
def test_mutated_params_blobs(mutation: str) -> None:
    target = f"params-{mutation}"

    def make(case: int) -> tuple[str, Case]:
        rng = harness.case_rng(target, case)
        index = rng.randrange(len(SEEDS))
        blob, done = (mutate_fields(seed_blob(index), rng) if mutation == "fields"
                      else mutate_bytes(seed_blob(index), rng))
        return f"seed {index}: {', '.join(done)}", params_case(blob, index, rng)

    stats = harness.run_target(target, CONFIG.budget(3000, 20_000), make)
    harness.fail_on_findings(stats)
