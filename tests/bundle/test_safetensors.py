"""The strict safetensors reader and writer: round trips, layout, every header lie, interop."""

from __future__ import annotations

import io
import json
import random
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from bundle_fixtures import corrupt

from graphrt import BundleError
from graphrt.bundle.safetensors import (
    read_safetensors,
    read_safetensors_header,
    write_safetensors,
)

DTYPES = ["float16", "float32", "float64", ml_dtypes.bfloat16, "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]


def encode(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    stream = io.BytesIO()
    written = write_safetensors(stream, tensors, metadata)
    assert written == len(stream.getvalue())
    return stream.getvalue()


def raw_file(header: Any, data: bytes = b"", length: int | None = None) -> memoryview:
    """A safetensors file with a hand-written header (and header length, if given)."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return memoryview(struct.pack("<Q", len(text) if length is None else length) + text + data)


def test_every_dtype_round_trips_bit_exactly() -> None:
    rng = np.random.default_rng(0)
    tensors = {f"t{i}": (rng.standard_normal((3, 2)) * 50).astype(dtype)
               for i, dtype in enumerate(DTYPES)}
    loaded = read_safetensors(memoryview(encode(tensors)))
    assert set(loaded) == set(tensors)
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        assert loaded[name].tobytes() == array.tobytes()


def test_scalars_empty_tensors_and_metadata() -> None:
    tensors = {"scalar": np.array(7, "int64"), "empty": np.zeros((0, 5), "float32")}
    buffer = memoryview(encode(tensors, {"source": "test"}))
    loaded = read_safetensors(buffer)
    assert loaded["scalar"].shape == () and loaded["scalar"] == 7
    assert loaded["empty"].shape == (0, 5)
    assert read_safetensors_header(buffer)[1] == {"source": "test"}


def test_layout_is_aligned_and_views_are_read_only() -> None:
    tensors = {"a": np.ones(3, "int8"), "b": np.ones(5, "float64"), "c": np.ones(2, "float16")}
    data = encode(tensors)
    (length,) = struct.unpack("<Q", data[:8])
    assert (8 + length) % 64 == 0  # data starts 64-byte aligned
    infos, _ = read_safetensors_header(memoryview(data))
    assert [i.name for i in sorted(infos.values(), key=lambda i: i.start)] == ["b", "c", "a"]
    for info in infos.values():
        assert info.start % info.dtype.itemsize == 0
    array = read_safetensors(memoryview(data))["b"]
    assert not array.flags.writeable
    with pytest.raises(ValueError):
        array[0] = 2


def test_big_endian_arrays_are_written_little_endian() -> None:
    array = np.arange(4, dtype=">i4")
    loaded = read_safetensors(memoryview(encode({"x": array})))["x"]
    assert loaded.tolist() == [0, 1, 2, 3] and loaded.dtype == np.dtype("<i4")


def test_the_reserved_name_is_refused() -> None:
    with pytest.raises(BundleError, match="cannot be named '__metadata__'"):
        encode({"__metadata__": np.zeros(2, "float32")})


def test_a_dtype_safetensors_cannot_hold_is_refused() -> None:
    with pytest.raises(BundleError, match="tensor 'z' has dtype complex64"):
        encode({"z": np.zeros(2, "complex64")})


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(("buffer", "expected"), [
    (memoryview(b"\x01\x00"), "truncated: 2 bytes"),
    (raw_file({}, length=200_000_000), "claims 200,000,000 bytes, more than"),
    (raw_file({}, length=50), "truncated: the header claims 50 bytes but only 2"),
    (raw_file(b"[1, 2]"), "does not start with"),
    (raw_file(b"{not json"), "not valid JSON"),
    (raw_file(b"\xff\xfe"), "not valid JSON"),
    (raw_file(b'{"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
              b'"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'), "appears twice"),
    (raw_file({"__metadata__": {"k": 1}}), "'__metadata__' must map str to str"),
    (raw_file({"w": {"dtype": "F32", "shape": [2]}}), "tensor 'w' must have exactly"),
    (raw_file({"w": {**F32, "dtype": "C64"}}, bytes(8)), "tensor 'w' has dtype 'C64'"),
    (raw_file({"w": {**F32, "shape": [-2]}}, bytes(8)), "tensor 'w' has shape"),
    (raw_file({"w": {**F32, "shape": [True]}}, bytes(8)), "tensor 'w' has shape"),
    (raw_file({"w": {**F32, "data_offsets": [8, 0]}}, bytes(8)), "data_offsets"),
    (raw_file({"w": {**F32, "shape": [3]}}, bytes(8)), r"float32\[3\], which is 12 bytes"),
    (raw_file({"w": F32}, bytes(4)), "truncated: the tensors end at byte"),
    (raw_file({"w": F32}, bytes(12)), "trailing bytes"),
    (raw_file({"w": {**F32, "data_offsets": [4, 12]}}, bytes(12)), "gap of 4 bytes"),
    (raw_file({"w": F32, "v": {**F32, "data_offsets": [4, 12]}}, bytes(12)), "overlaps"),
    (raw_file({"w": F32, "v": F32}, bytes(16)), "overlaps"),
])
def test_header_lies_are_caught_and_named(buffer: memoryview, expected: str) -> None:
    with pytest.raises(BundleError, match=expected) as caught:
        read_safetensors(buffer, "params.safetensors")
    assert str(caught.value).startswith("params.safetensors")


def test_random_corruption_only_ever_raises_bundle_error() -> None:
    good = encode({"w": np.arange(12, dtype="float32").reshape(3, 4), "b": np.ones(3, "int8")},
                  {"k": "v"})
    rng = random.Random(0)
    refused = 0
    for _ in range(400):
        data = corrupt(good, rng, flips=4)
        try:
            loaded = read_safetensors(memoryview(bytes(data)))
        except BundleError:
            refused += 1
        else:  # a flipped data byte cannot be seen here: that is what the bundle's sha256 is for
            assert sum(array.nbytes for array in loaded.values()) <= len(data)
    assert refused > 100


def test_interoperates_with_the_safetensors_package(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    theirs = {"w": np.arange(6, dtype="float32").reshape(2, 3), "i": np.array([1, -2], "int64"),
              "h": np.ones((2, 2), "float16"), "flag": np.array([True, False])}
    st.save_file(theirs, str(tmp_path / "theirs.safetensors"), metadata={"by": "them"})
    data = memoryview((tmp_path / "theirs.safetensors").read_bytes())
    ours = read_safetensors(data)
    assert {k: v.tolist() for k, v in ours.items()} == {k: v.tolist() for k, v in theirs.items()}
    assert read_safetensors_header(data)[1] == {"by": "them"}
    (tmp_path / "ours.safetensors").write_bytes(encode(theirs, {"by": "us"}))
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    assert {k: v.tolist() for k, v in back.items()} == {k: v.tolist() for k, v in theirs.items()}
