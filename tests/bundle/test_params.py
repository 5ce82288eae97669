"""Params blobs: TVM's ``save_param_dict`` format, round trips, golden bytes and corruption."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import graphrt
from graphrt.devices import backend_for
from graphrt.params import iter_params

LIST_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F

ALL_DTYPES = [
    np.dtype("float16"),
    np.dtype("float32"),
    np.dtype("float64"),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype("int8"),
    np.dtype("int16"),
    np.dtype("int32"),
    np.dtype("int64"),
    np.dtype("uint8"),
    np.dtype("uint16"),
    np.dtype("uint32"),
    np.dtype("uint64"),
    np.dtype("bool"),
]

# (type code, bits) TVM writes for each dtype.
TYPE_CODES = {
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "bool": (1, 1),
}


def sample(dtype: np.dtype, shape: tuple[int, ...] = (2, 3), seed: int = 0) -> np.ndarray:
    """Deterministic values of ``dtype`` that exercise the full range where it is cheap."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if dtype == np.bool_:
        return (rng.integers(0, 2, size) == 1).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
        values[:2] = [info.min, info.max][: min(2, size)]
        return values.reshape(shape)
    values = rng.standard_normal(size).astype(np.float64) * 100
    return values.astype(dtype).reshape(shape)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


# ---------------------------------------------------------------------------------------------
# Hand-built blobs


def header(names: list[str], array_count: int | None = None) -> bytes:
    out = struct.pack("<QQQ", LIST_MAGIC, 0, len(names))
    for name in names:
        raw = name.encode("utf-8")
        out += struct.pack("<Q", len(raw)) + raw
    out += struct.pack("<Q", len(names) if array_count is None else array_count)
    return out


def raw_name_header(raw_names: list[bytes]) -> bytes:
    out = struct.pack("<QQQ", LIST_MAGIC, 0, len(raw_names))
    for raw in raw_names:
        out += struct.pack("<Q", len(raw)) + raw
    return out + struct.pack("<Q", len(raw_names))


def array_record(
    shape: tuple[int, ...],
    data: bytes,
    *,
    code: int = 2,
    bits: int = 32,
    lanes: int = 1,
    nbytes: int | None = None,
    magic: int = ARRAY_MAGIC,
    ndim: int | None = None,
) -> bytes:
    out = struct.pack("<QQiii", magic, 0, 1, 0, len(shape) if ndim is None else ndim)
    out += struct.pack("<BBH", code, bits, lanes)
    out += struct.pack(f"<{len(shape)}q", *shape)
    out += struct.pack("<q", len(data) if nbytes is None else nbytes)
    return out + data


def float_record(values: list[float]) -> bytes:
    return array_record((len(values),), struct.pack(f"<{len(values)}f", *values))


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_every_dtype(dtype: np.dtype) -> None:
    arr = sample(dtype)
    loaded = graphrt.load_params(graphrt.save_params({"p": arr}))
    assert list(loaded) == ["p"]
    assert_same(loaded["p"], arr)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_type_code_written_for_every_dtype(dtype: np.dtype) -> None:
    blob = graphrt.save_params({"p": sample(dtype, (3,))})
    # header (24) + name (8 + 1) + array count (8) + magic, reserved, dev (32) + ndim (4)
    offset = 24 + 9 + 8 + 8 + 8 + 4 + 4 + 4
    code, bits, lanes = struct.unpack_from("<BBH", blob, offset)
    assert (code, bits) == TYPE_CODES[str(dtype)]
    assert lanes == 1


def test_round_trip_many_params_keeps_names_and_order() -> None:
    params = {f"param_{i}": sample(dtype, (i + 1,), seed=i) for i, dtype in enumerate(ALL_DTYPES)}
    params = dict(reversed(list(params.items())))  # an order that is not sorted
    loaded = graphrt.load_params(graphrt.save_params(params))
    assert list(loaded) == list(params)
    for name, arr in params.items():
        assert_same(loaded[name], arr)
    assert [name for name, _ in iter_params(graphrt.save_params(params))] == list(params)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_zero_d(dtype: np.dtype) -> None:
    arr = sample(dtype, (1,)).reshape(())
    loaded = graphrt.load_params(graphrt.save_params({"s": arr}))["s"]
    assert loaded.shape == ()
    assert_same(loaded, arr)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 5), (2, 0, 0)])
def test_round_trip_empty(shape: tuple[int, ...]) -> None:
    arr = np.zeros(shape, dtype="float32")
    loaded = graphrt.load_params(graphrt.save_params({"e": arr}))["e"]
    assert_same(loaded, arr)


def test_round_trip_six_d() -> None:
    arr = np.arange(2 * 3 * 1 * 2 * 2 * 3, dtype="int16").reshape(2, 3, 1, 2, 2, 3)
    loaded = graphrt.load_params(graphrt.save_params({"six": arr}))["six"]
    assert_same(loaded, arr)


def test_round_trip_non_contiguous() -> None:
    base = np.arange(12, dtype="float32").reshape(3, 4)
    view = base.T
    assert not view.flags.c_contiguous
    loaded = graphrt.load_params(graphrt.save_params({"t": view}))["t"]
    assert loaded.shape == (4, 3)
    np.testing.assert_array_equal(loaded, view)
    strided = np.arange(20, dtype="int32")[::3]
    np.testing.assert_array_equal(
        graphrt.load_params(graphrt.save_params({"s": strided}))["s"], strided
    )


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">f8", ">f2"])
def test_big_endian_input(dtype: str) -> None:
    native = np.arange(-3, 5).astype(dtype.replace(">", "<"))
    big = native.astype(dtype)
    blob = graphrt.save_params({"b": big})
    assert blob == graphrt.save_params({"b": native})  # written little-endian either way
    loaded = graphrt.load_params(blob)["b"]
    np.testing.assert_array_equal(loaded, native)
    assert loaded.dtype == np.dtype(dtype.replace(">", "="))


def test_unicode_name() -> None:
    name = "Gewichte/ß·λ·重み·🙂"
    arr = np.ones(2, dtype="float32")
    blob = graphrt.save_params({name: arr})
    assert name.encode("utf-8") in blob
    loaded = graphrt.load_params(blob)
    assert list(loaded) == [name]
    assert_same(loaded[name], arr)


def test_empty_mapping() -> None:
    blob = graphrt.save_params({})
    assert blob == struct.pack("<QQQQ", LIST_MAGIC, 0, 0, 0)
    assert graphrt.load_params(blob) == {}
    assert list(iter_params(blob)) == []


def test_blob_types_accepted() -> None:
    blob = graphrt.save_params({"w": np.arange(3, dtype="float32")})
    for given in (blob, bytearray(blob), memoryview(blob)):
        np.testing.assert_array_equal(graphrt.load_params(given)["w"], [0, 1, 2])


# ---------------------------------------------------------------------------------------------
# Golden bytes and bool codes


def test_golden_bytes_float32() -> None:
    expected = b"".join(
        [
            struct.pack("<Q", LIST_MAGIC),
            struct.pack("<Q", 0),
            struct.pack("<Q", 1),
            struct.pack("<Q", 1) + b"w",
            struct.pack("<Q", 1),
            struct.pack("<Q", ARRAY_MAGIC),
            struct.pack("<Q", 0),
            struct.pack("<ii", 1, 0),
            struct.pack("<i", 1),
            struct.pack("<BBH", 2, 32, 1),
            struct.pack("<q", 2),
            struct.pack("<q", 8),
            struct.pack("<2f", 1.5, -2.0),
        ]
    )
    assert graphrt.save_params({"w": np.array([1.5, -2.0], dtype="float32")}) == expected
    loaded = graphrt.load_params(expected)
    assert list(loaded) == ["w"]
    assert_same(loaded["w"], np.array([1.5, -2.0], dtype="float32"))


def test_bool_written_as_uint1() -> None:
    arr = np.array([True, False, True])
    blob = graphrt.save_params({"m": arr})
    expected = header(["m"]) + array_record((3,), b"\x01\x00\x01", code=1, bits=1)
    assert blob == expected


def test_dlpack_bool_code_loads() -> None:
    blob = header(["m"]) + array_record((4,), b"\x01\x00\x00\x01", code=6, bits=8)
    loaded = graphrt.load_params(blob)["m"]
    assert loaded.dtype == np.bool_
    np.testing.assert_array_equal(loaded, [True, False, False, True])


def test_uint1_loads_as_bool() -> None:
    blob = header(["m"]) + array_record((2,), b"\x00\x01", code=1, bits=1)
    loaded = graphrt.load_params(blob)["m"]
    assert loaded.dtype == np.bool_
    np.testing.assert_array_equal(loaded, [False, True])


# ---------------------------------------------------------------------------------------------
# Arrays on other devices


def test_save_sim_array_from_backend() -> None:
    dev = graphrt.sim(0)
    backend = backend_for(dev)
    buf = backend.allocate(16)
    arr = backend.view(buf, (2, 2), np.dtype("float32"))
    assert isinstance(arr, graphrt.devices.SimArray)
    arr.view(np.ndarray)[...] = [[1, 2], [3, 4]]
    counters = graphrt.sim_counters(dev)
    counters.reset()
    loaded = graphrt.load_params(graphrt.save_params({"x": arr}))["x"]
    assert type(loaded) is np.ndarray
    assert_same(loaded, np.array([[1, 2], [3, 4]], dtype="float32"))
    assert counters.downloads == 1
    assert counters.download_bytes == 16


def test_save_sim_array_from_module() -> None:
    graph = {
        "nodes": [
            {"op": "null", "name": "a", "inputs": []},
            {
                "op": "tvm_op",
                "name": "neg0",
                "inputs": [[0, 0, 0]],
                "attrs": {
                    "func_name": "neg",
                    "num_inputs": "1",
                    "num_outputs": "1",
                    "flatten_data": "0",
                },
            },
        ],
        "arg_nodes": [0],
        "node_row_ptr": [0, 1, 2],
        "heads": [[1, 0, 0]],
        "attrs": {
            "dltype": ["list_str", ["float32", "float32"]],
            "shape": ["list_shape", [[3], [3]]],
            "storage_id": ["list_int", [0, 1]],
        },
    }
    mod = graphrt.create(graph, {"neg": lambda a, out: np.negative(a, out=out)}, graphrt.sim(1))
    mod.run(a=np.array([1, 2, 3], dtype="float32"))
    out = mod.get_output(0)
    assert isinstance(out, graphrt.devices.SimArray)
    assert out.device == graphrt.sim(1)
    loaded = graphrt.load_params(graphrt.save_params({"y": out}))["y"]
    assert_same(loaded, np.array([-1, -2, -3], dtype="float32"))


# ---------------------------------------------------------------------------------------------
# Corruption


def two_param_blob() -> bytes:
    return graphrt.save_params(
        {"a": np.array([1.0, 2.0], dtype="float32"), "bb": np.array([[7]], dtype="int8")}
    )


def test_every_truncation_raises() -> None:
    blob = two_param_blob()
    graphrt.load_params(blob)  # the full blob is valid
    for length in range(len(blob)):
        with pytest.raises(graphrt.GraphFormatError):
            graphrt.load_params(blob[:length])
        with pytest.raises(graphrt.GraphFormatError):
            list(iter_params(blob[:length]))


def test_wrong_list_magic() -> None:
    blob = bytearray(two_param_blob())
    blob[0] ^= 0xFF
    with pytest.raises(graphrt.GraphFormatError, match="magic"):
        graphrt.load_params(bytes(blob))


def test_wrong_array_magic() -> None:
    blob = header(["w"]) + float_record([1.0])
    bad = header(["w"]) + array_record((1,), struct.pack("<f", 1.0), magic=ARRAY_MAGIC ^ 1)
    graphrt.load_params(blob)
    with pytest.raises(graphrt.GraphFormatError, match="magic"):
        graphrt.load_params(bad)


@pytest.mark.parametrize("array_count", [0, 1, 3, 2**64 - 1])
def test_name_count_differs_from_array_count(array_count: int) -> None:
    blob = header(["a", "b"], array_count=array_count) + float_record([1.0]) + float_record([2.0])
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize("nbytes", [0, 4, 12, 16, -8, 2**62])
def test_nbytes_inconsistent_with_shape(nbytes: int) -> None:
    data = struct.pack("<2f", 1.0, 2.0)
    blob = header(["w"]) + array_record((2,), data, nbytes=nbytes)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


def test_nbytes_consistent_but_data_missing() -> None:
    blob = header(["w"]) + array_record((1000,), b"", nbytes=4000)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize("shape", [(-1,), (2, -1), (-2, -3), (-(2**63),)])
def test_negative_dim(shape: tuple[int, ...]) -> None:
    nbytes = int(np.prod(shape)) * 4  # makes the size check alone not enough
    blob = header(["w"]) + array_record(shape, b"", nbytes=nbytes % 2**63)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)
    blob = header(["w"]) + array_record(shape, b"", nbytes=0)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


def test_huge_dims_do_not_overflow() -> None:
    blob = header(["w"]) + array_record((2**62, 2**62), b"", nbytes=0)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize("shape", [(2**62, 0), (2**40, 2**40, 0)])
def test_empty_array_with_huge_dim(shape: tuple[int, ...]) -> None:
    blob = header(["w"]) + array_record(shape, b"", nbytes=0)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize("ndim", [-1, 65, 2**31 - 1, -(2**31)])
def test_bad_ndim(ndim: int) -> None:
    blob = header(["w"]) + array_record((), b"\0\0\0\0", ndim=ndim)
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize(
    ("code", "bits", "lanes"),
    [
        (2, 32, 4),  # vector type
        (2, 32, 0),
        (2, 8, 1),  # float with 8 bits: the float8 types have codes of their own
        (2, 128, 1),
        (0, 1, 1),  # int1
        (0, 3, 1),  # int3 (int4 and int2 are supported)
        (1, 0, 1),
        (3, 32, 1),  # opaque handle
        (4, 32, 1),  # bfloat32
        (5, 64, 1),  # complex
        (6, 1, 1),  # kDLBool with 1 bit
        (7, 8, 1),
        (255, 255, 65535),
    ],
)
def test_unsupported_type(code: int, bits: int, lanes: int) -> None:
    blob = header(["w"]) + array_record((1,), b"\0" * 16, code=code, bits=bits, lanes=lanes,
                                        nbytes=max(bits // 8, 1))
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


@pytest.mark.parametrize("extra", [b"\0", b"\0" * 8, b"junk", struct.pack("<Q", ARRAY_MAGIC)])
def test_trailing_bytes(extra: bytes) -> None:
    blob = two_param_blob()
    with pytest.raises(graphrt.GraphFormatError, match="trailing"):
        graphrt.load_params(blob + extra)


@pytest.mark.parametrize("raw", [b"\xff", b"\xc3", b"ok\x80", b"\xed\xa0\x80"])
def test_non_utf8_name(raw: bytes) -> None:
    blob = raw_name_header([raw]) + float_record([1.0])
    with pytest.raises(graphrt.GraphFormatError, match="UTF-8"):
        graphrt.load_params(blob)


def test_duplicate_names() -> None:
    blob = header(["w", "w"]) + float_record([1.0]) + float_record([2.0])
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)
    with pytest.raises(graphrt.GraphFormatError):
        list(iter_params(blob))


def test_huge_name_length() -> None:
    blob = struct.pack("<QQQQ", LIST_MAGIC, 0, 1, 2**63) + b"w"
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)
    blob = struct.pack("<QQQQ", LIST_MAGIC, 0, 1, 2**64 - 1) + b"w"
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


def test_huge_name_count() -> None:
    blob = struct.pack("<QQQ", LIST_MAGIC, 0, 2**64 - 1) + struct.pack("<Q", 1) + b"w"
    with pytest.raises(graphrt.GraphFormatError):
        graphrt.load_params(blob)


def test_non_contiguous_memoryview_blob() -> None:
    blob = graphrt.save_params({"w": np.arange(3, dtype="float32")})
    strided = np.frombuffer(blob * 2, dtype=np.uint8)[::2]
    try:
        loaded = graphrt.load_params(memoryview(strided))
    except graphrt.GraphrtError:
        return
    np.testing.assert_array_equal(loaded["w"], [0, 1, 2])


def test_not_bytes_is_input_error() -> None:
    with pytest.raises(graphrt.InputError):
        graphrt.load_params("not bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# save_params input errors


@pytest.mark.parametrize("params", [[("w", np.zeros(1))], np.zeros(3), "w", None, 3])
def test_save_non_mapping(params: object) -> None:
    with pytest.raises(graphrt.InputError):
        graphrt.save_params(params)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [1, b"w", None, ("w",)])
def test_save_non_str_name(name: object) -> None:
    with pytest.raises(graphrt.InputError):
        graphrt.save_params({name: np.zeros(1, dtype="float32")})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "value",
    [
        np.array([1, "a", None], dtype=object),
        np.zeros(2, dtype="complex64"),
        np.zeros(2, dtype="complex128"),
        np.array(["ab", "c"]),
        np.zeros(2, dtype="datetime64[s]"),
    ],
    ids=["object", "complex64", "complex128", "str", "datetime"],
)
def test_save_unsupported_dtype(value: np.ndarray) -> None:
    with pytest.raises(graphrt.InputError):
        graphrt.save_params({"w": value})


def test_save_python_list_value() -> None:
    loaded = graphrt.load_params(graphrt.save_params({"w": [1.0, 2.0]}))["w"]
    np.testing.assert_array_equal(loaded, [1.0, 2.0])


# ---------------------------------------------------------------------------------------------
# Ownership


def test_load_returns_writable_copies() -> None:
    blob = graphrt.save_params({"w": np.arange(4, dtype="float32")})
    first = graphrt.load_params(blob)["w"]
    assert first.flags.writeable
    first[...] = 99
    second = graphrt.load_params(blob)["w"]
    np.testing.assert_array_equal(second, [0, 1, 2, 3])
    assert graphrt.save_params({"w": np.arange(4, dtype="float32")}) == blob


def test_load_from_bytearray_does_not_alias() -> None:
    blob = bytearray(graphrt.save_params({"w": np.arange(4, dtype="float32")}))
    loaded = graphrt.load_params(blob)["w"]
    blob[-4:] = b"\0\0\0\0"
    np.testing.assert_array_equal(loaded, [0, 1, 2, 3])


def test_iter_params_yields_read_only_views() -> None:
    blob = graphrt.save_params(
        {"w": np.arange(4, dtype="float32"), "v": np.ones((2, 2), dtype="int64")}
    )
    pairs = list(iter_params(blob))
    assert [name for name, _ in pairs] == ["w", "v"]
    for _, arr in pairs:
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[...] = 0
    np.testing.assert_array_equal(pairs[0][1], [0, 1, 2, 3])
    np.testing.assert_array_equal(pairs[1][1], np.ones((2, 2)))
