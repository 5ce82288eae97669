"""Fuzz the safetensors reader: headers drawn by hypothesis (consistent layouts with one thing
changed: a dtype, a dim, an offset, the metadata, the header length, the data size) and byte
mutations of real files (seeded), through ``read_safetensors`` and every array it returns."""

from __future__ import annotations

import copy
import io
import json
import random
import struct
from functools import cache
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from graphrt.bundle import read_safetensors, write_safetensors

from . import harness
from .harness import CONFIG, Case
from .mutators import INTERESTING, describe, dumps, mutate_bytes

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
         "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
ODD_DTYPES = ("F8_E4M3", "C64", "f32", "", "F32 ", "float32", "I4", "U1")
ODD_INTS = st.sampled_from([-1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**19, 10**20, 10**400])

VALUES = (st.sampled_from(INTERESTING).map(copy.deepcopy) | ODD_INTS
          | st.sampled_from(ODD_DTYPES) | st.integers()
          | st.lists(st.integers(-2, 2**40) | ODD_INTS, max_size=4))


def tensor_specs() -> Any:
    return st.lists(st.tuples(st.text(max_size=6), st.sampled_from(sorted(SIZES)),
                              st.lists(st.integers(0, 5), max_size=4)),
                    max_size=4, unique_by=lambda t: t[0])


def layout(specs: list[tuple[str, str, list[int]]]) -> tuple[dict[str, Any], int]:
    """A consistent header for ``specs`` and its data length."""
    header: dict[str, Any] = {}
    cursor = 0
    for name, code, shape in specs:
        size = prod(shape) * SIZES[code]
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [cursor, cursor + size]}
        cursor += size
    return header, cursor


def encode(header_text: bytes, data_length: int, length_field: int | None = None) -> bytes:
    length = len(header_text) if length_field is None else length_field
    return struct.pack("<Q", length) + header_text + bytes(range(256)) * (
        data_length // 256) + bytes(data_length % 256)


def reader_case(buffer: bytes) -> Case:
    def body(folder: Path) -> str:
        tensors = read_safetensors(memoryview(buffer))
        for array in tensors.values():
            assert isinstance(array, np.ndarray)
            array.tobytes()
        return "read"

    return body


def _perturb(data: Any, header: dict[str, Any]) -> str:
    """Change one thing of a consistent header in place; say what."""
    names = list(header)
    where = data.draw(st.sampled_from(["tensor field", "dim", "tensor", "metadata", "none"]))
    if where == "tensor field" and names:
        name = data.draw(st.sampled_from(names))
        key = data.draw(st.sampled_from(["dtype", "shape", "data_offsets", "extra"]))
        header[name][key] = data.draw(VALUES)
        return f"{name!r}.{key} = {describe(header[name][key])}"
    if where == "dim" and names:
        name = data.draw(st.sampled_from(names))
        shape = header[name]["shape"]
        if shape:
            i = data.draw(st.integers(0, len(shape) - 1))
            shape[i] = data.draw(st.integers(-1, 2**64) | ODD_INTS)
            if len(shape) > 1 and data.draw(st.booleans()):
                shape[(i + 1) % len(shape)] = 0  # a zero dim next to a huge one: no bytes
            return f"{name!r}.shape[{i}] = {describe(shape[i])}"
        shape.append(data.draw(ODD_INTS))
        return f"{name!r}.shape = {describe(shape)}"
    if where == "tensor":
        header[data.draw(st.text(max_size=4))] = data.draw(VALUES)
        return "extra entry"
    if where == "metadata":
        header["__metadata__"] = data.draw(
            VALUES | st.dictionaries(st.text(max_size=4), st.text(max_size=4) | VALUES))
        return f"__metadata__ = {describe(header['__metadata__'])}"
    return "consistent"


def test_drawn_safetensors_headers() -> None:
    def draw(data: Any) -> tuple[str, Case]:
        header, length = layout(data.draw(tensor_specs()))
        done = _perturb(data, header)
        text = dumps(header).encode()
        if data.draw(st.booleans()):
            text += b" " * data.draw(st.integers(0, 70))  # padding, as the writer does
        length += data.draw(st.sampled_from([0, 0, 0, 1, -1, 64]))
        field = data.draw(st.none() | st.sampled_from(
            [0, 1, len(text) - 1, len(text) + 1, 2**63, 2**64 - 1, 100 * 1000 * 1000 + 1]))
        buffer = encode(text, max(length, 0), field)
        return f"{done}; data {length}; length field {field}", reader_case(buffer)

    stats = harness.run_hypothesis("safetensors-header", CONFIG.budget(1200, 20_000), draw)
    harness.fail_on_findings(stats)


@cache
def real_files() -> list[bytes]:
    files = []
    for tensors, metadata in [
        ({"w": np.ones((2, 3), "float32"), "b": np.arange(3, dtype="int64")}, {"k": "v"}),
        ({"h": np.ones(5, "float16"), "e": np.zeros((0, 3), "uint8"),
          "s": np.array(1, "bool")}, None),
    ]:
        stream = io.BytesIO()
        write_safetensors(stream, tensors, metadata)
        files.append(stream.getvalue())
    return files


def test_byte_mutations_of_safetensors() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng: random.Random = harness.case_rng("safetensors-bytes", index)
        seed = rng.randrange(len(real_files()))
        original = real_files()[seed]
        (header_length,) = struct.unpack_from("<Q", original)
        region = (0, 8 + header_length) if rng.random() < 0.8 else None
        content, done = mutate_bytes(original, rng, region=region)
        return f"file {seed}: {', '.join(done)}", reader_case(content)

    stats = harness.run_target("safetensors-bytes", CONFIG.budget(1000, 20_000), make)
    harness.fail_on_findings(stats)


def test_header_json_is_what_the_writer_writes() -> None:
    """The drawn layouts are real ones: a consistent header reads back (guards the target)."""
    header, length = layout([("a", "F32", [2]), ("b", "I8", [3])])
    tensors = read_safetensors(memoryview(encode(json.dumps(header).encode(), length)))
    assert {name: array.shape for name, array in tensors.items()} == {"a": (2,), "b": (3,)}
