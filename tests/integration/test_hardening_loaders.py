"""Hardening of the loaders (issue 13): zip members that are corrupt in precise ways, version
numbers in non-ASCII digits, integers too long to print, shapes numpy cannot hold, special
files (FIFOs, devices, directories) where a file is expected, ``.npy`` inputs whose header lies,
and wrong argument types at the public API. Each case raises graphrt's own error naming what
was wrong, and never hangs."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundle_fixtures import (
    ROOT,
    edit_manifest,
    read_members,
    save_model,
    write_directory,
    write_zip,
)
from cli_harness import failed, run_cli

import graphrt
from graphrt.bundle.manifest import parse_manifest
from graphrt.bundle.safetensors import read_safetensors
from graphrt.cli.common import parse_count, read_npy
from graphrt.files import read_regular
from graphrt.schema import shape_problem
from tests.conftest import EXAMPLES

HUGE = 10**5000
"""An integer beyond Python's int-to-str limit (4300 digits): formatting it raises."""
HUGE_TEXT = "1" + "0" * 5000
SIMPLEX = json.loads((EXAMPLES / "simplex.json").read_text())
KERNELS = {"elemwise_add": lambda a, b, out: None, "elemwise_sub": lambda a, b, out: None}

Members = dict[str, bytes]


@contextlib.contextmanager
def no_hang(seconds: int = 5) -> Iterator[None]:
    """Fail (instead of blocking the suite) when the body takes longer than ``seconds``."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Members:
    """The members of a valid MLP bundle."""
    return read_members(save_model(tmp_path_factory.mktemp("good"), "mlp"))


def deflated_zip(path: Path, members: Members) -> Path:
    """A zip bundle whose graph, lib and manifest are deflated (params stay stored)."""
    return write_zip(path, members, deflate={"graph.json", "lib.json", "manifest.json"})


def central_entry(data: bytes, member: str) -> int:
    """Where ``member``'s central directory entry starts in a zip's bytes."""
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        (length,) = struct.unpack_from("<H", data, at + 28)
        if data[at + 46 : at + 46 + length] == member.encode():
            return at
        at = data.find(b"PK\x01\x02", at + 1)
    raise AssertionError(f"{member} not in the central directory")


def patched(path: Path, member: str, offset: int, fmt: str, value: int) -> Path:
    """``path`` with one field of ``member``'s central directory entry overwritten."""
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, central_entry(bytes(data), member) + offset, value)
    out = path.with_name(f"patched-{path.name}")
    out.write_bytes(bytes(data))
    return out


def data_start(path: Path, member: str) -> int:
    info = zipfile.ZipFile(path).getinfo(member)
    data = path.read_bytes()
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + name_length + extra_length


def refused(path: Path, *words: str) -> str:
    with no_hang(), pytest.raises(graphrt.BundleError) as caught:
        graphrt.load_bundle(path)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    return str(caught.value)


# --- 1. zip members corrupt in precise ways ---------------------------------------------------


@pytest.mark.parametrize("member", ["manifest.json", "graph.json", "lib.json",
                                    "params.safetensors"])
@pytest.mark.parametrize("field, fmt, value, problem", [
    (42, "<I", 1, "no local zip header"),             # local header offset moved
    (42, "<I", 0xFFFFFFF0, "no local zip header"),    # past the end of the file
    (10, "<H", 12, "compression method 12"),          # bzip2: not for bundles
    (10, "<H", 99, "compression method 99"),          # AES: unsupported
    (8, "<H", 1, "encrypted"),                        # the encryption flag
])
def test_a_corrupt_central_directory_entry_names_the_member(
        tmp_path: Path, good: Members, member: str, field: int, fmt: str, value: int,
        problem: str) -> None:
    path = deflated_zip(tmp_path / "b.grb", good)
    refused(patched(path, member, field, fmt, value), repr(member), problem)


@pytest.mark.parametrize("member", ["manifest.json", "graph.json", "lib.json"])
@pytest.mark.parametrize("where", [0, 1, 5, "middle"])
def test_a_corrupt_deflate_stream_is_a_bundle_error(tmp_path: Path, good: Members, member: str,
                                                    where: int | str) -> None:
    path = deflated_zip(tmp_path / "b.grb", good)
    size = zipfile.ZipFile(path).getinfo(member).compress_size
    data = bytearray(path.read_bytes())
    data[data_start(path, member) + (size // 2 if where == "middle" else int(where))] ^= 0xFF
    path.write_bytes(bytes(data))
    message = refused(path, repr(member), str(path))
    assert "cannot be inflated" in message or "checksum" in message


@pytest.mark.parametrize("shift", [1, 100, 1 << 20])
def test_a_directory_offset_past_its_place_is_a_bundle_error(tmp_path: Path, good: Members,
                                                             shift: int) -> None:
    """The end record points the central directory further on: every header offset becomes
    negative, which ``seek`` refuses with ``OSError``."""
    path = deflated_zip(tmp_path / "b.grb", good)
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    (offset,) = struct.unpack_from("<I", data, end + 16)
    struct.pack_into("<I", data, end + 16, offset + shift)
    path.write_bytes(bytes(data))
    refused(path, str(path))


def test_every_member_read_goes_through_one_guard(tmp_path: Path, good: Members) -> None:
    """A failure of the standard library in any member read (here a zlib error raised by the
    zip reader) is a BundleError naming the bundle and the member."""
    import zlib

    path = deflated_zip(tmp_path / "b.grb", good)
    with graphrt.bundle.open_archive(path) as archive:
        def broken() -> bytes:
            raise zlib.error("Error -3 while decompressing data")

        with pytest.raises(graphrt.BundleError, match=r"member 'lib.json' of bundle .*b\.grb "
                                                      r"cannot be read: zlib\.error"):
            archive.guarded("lib.json", broken)
        assert archive.read("lib.json") == good["lib.json"]  # still usable afterwards


@pytest.mark.parametrize("command", ["validate", "inspect", "run"])
def test_cli_commands_report_a_corrupt_zip_in_one_line(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path, good: Members,
                                                       command: str) -> None:
    path = patched(deflated_zip(tmp_path / "b.grb", good), "graph.json", 42, "<I", 7)
    err = failed(capsys, "BundleError", command, str(path))
    assert "'graph.json'" in err


# --- 2. version numbers in non-ASCII digits ---------------------------------------------------


@pytest.mark.parametrize("version", ["\u0661.0", "\uff11.0", "1.\u0661", "1.\u00b2", "1.0 ",
                                     "1." + "9" * 5000, "9" * 5000 + ".0", "+1.0", "1_0.0"])
def test_a_manifest_version_in_other_digits_is_refused(good: Members, version: str) -> None:
    members = dict(good)
    edit_manifest(members, lambda man: man.__setitem__("format_version", version))
    with pytest.raises(graphrt.BundleError, match=r"'format_version' is .*expected 'MAJOR\.MINOR'"):
        parse_manifest(members["manifest.json"])


def test_a_manifest_version_in_other_digits_is_refused_by_load_bundle(tmp_path: Path,
                                                                       good: Members) -> None:
    members = dict(good)
    edit_manifest(members, lambda man: man.__setitem__("format_version", "\uff11.0"))
    refused(write_directory(tmp_path / "b", members), "format_version")


@pytest.mark.parametrize("text, value", [("0", 0), ("12", 12), ("\u0661", None),
                                         ("\uff11", None), (" 3", None), ("1_0", None),
                                         ("-1", None), ("9" * 19, None), ("", None)])
def test_command_line_counts_take_ascii_digits_only(text: str, value: int | None) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("argv", [
    ["convert", "m.onnx", "-o", "x", "--dim", "n=\u0661"],
    ["convert", "m.onnx", "-o", "x", "--dim", "n=" + "9" * 5000],
    ["bench", "b", "--repeat", "\uff13"],
    ["bench", "b", "--number", "1_0"],
    ["bench", "b", "--min-repeat-ms", "\u0661"],
    ["run", "b", "--seed", "\u0661"],
    ["run", "b", "--device", "cpu:\u0661"],
    ["run", "b", "--device-map", "\u0662=cpu"],
])
def test_command_line_numbers_in_other_digits_are_usage_errors(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, *argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err and "error:" in err


# --- 3. integers too long to print ------------------------------------------------------------


def mutated(path: list[Any], value: Any) -> dict[str, Any]:
    graph = copy.deepcopy(SIMPLEX)
    here = graph
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return graph


HUGE_CASES = [
    (["attrs", "shape", 1, 0, 0], HUGE, "attrs column 'shape' entry 0 dimension 0"),
    (["attrs", "shape", 1, 0, 0], -HUGE, "attrs column 'shape' entry 0 dimension 0"),
    (["attrs", "shape", 1, 0], ["n", HUGE], "attrs column 'shape' entry 0 dimension 1"),
    (["attrs", "storage_id", 1, 0], HUGE, "attrs column 'storage_id' entry 0"),
    (["attrs", "storage_id", 1, 0], -HUGE, "attrs column 'storage_id' entry 0"),
    (["attrs", "device_index", 1, 0], HUGE, "attrs column 'device_index' entry 0"),
    (["attrs", "dltype", 1, 0], HUGE, "attrs column 'dltype' entry 0"),
    (["attrs", "shape", 0], HUGE, "attrs.shape"),
    (["attrs", "dtype"], HUGE, "attrs"),
    (["node_row_ptr", 1], HUGE, "node_row_ptr.1"),
    (["heads", 0, 0], HUGE, "heads.0.0"),
    (["heads", 0, 1], -HUGE, "heads.0.1"),
    (["arg_nodes", 0], HUGE, "arg_nodes.0"),
    (["nodes", 2, "inputs", 0, 0], HUGE, "node 2 'elemwise_add' field 'inputs.0.0'"),
    (["nodes", 2, "inputs", 0, 1], HUGE, "node 2 'elemwise_add' field 'inputs.0.1'"),
    (["nodes", 2, "control_deps"], [HUGE], "node 2 'elemwise_add' field 'control_deps.0'"),
    (["nodes", 0, "name"], HUGE, "node 0 field 'name'"),
    (["nodes", 2, "op"], HUGE, "node 2 'elemwise_add' field 'op'"),
    (["nodes", 2, "attrs", "num_inputs"], HUGE, "field 'attrs.num_inputs'"),
    (["nodes", 2, "attrs", "func_name"], HUGE, "field 'attrs.func_name'"),
    (["nodes", 0], HUGE, "node 0"),
    (["unknown"], HUGE, "unknown"),
    (["shape_vars"], {"n": {"max": HUGE}}, "shape_vars.n.max"),
    (["shape_vars"], {"n": {"max": 3, "min": HUGE}}, "shape_vars.n.min"),
]


@pytest.mark.parametrize("path, value, where", HUGE_CASES,
                         ids=[".".join(map(str, case[0])) for case in HUGE_CASES])
def test_a_huge_integer_anywhere_in_a_graph_is_named(path: list[Any], value: Any,
                                                     where: str) -> None:
    with pytest.raises(graphrt.GraphFormatError) as caught:
        graphrt.load_graph(mutated(path, value))
    message = str(caught.value)
    assert where in message and "digits" not in message, message
    assert graphrt.load_graph(SIMPLEX).input_names == ("A", "B", "C")  # still usable


def test_a_huge_integer_is_shown_by_its_size() -> None:
    with pytest.raises(graphrt.GraphFormatError, match="given 'an integer of 16610 bits'"):
        graphrt.load_graph(mutated(["nodes", 0, "name"], HUGE))


def test_graph_text_with_a_huge_integer_is_refused_by_the_parser() -> None:
    text = json.dumps(SIMPLEX).replace('"storage_id": ["list_int", [3,',
                                       f'"storage_id": ["list_int", [{HUGE_TEXT},')
    with pytest.raises(graphrt.GraphFormatError, match="not valid JSON"):
        graphrt.load_graph(text)


def test_a_long_node_name_is_cut_in_messages() -> None:
    graph = mutated(["attrs", "storage_id", 1, 0], -1)
    graph["nodes"][0]["name"] = "A" * 100_000
    with pytest.raises(graphrt.GraphFormatError, match=r"storage_id is -1") as caught:
        graphrt.load_graph(graph)
    assert len(str(caught.value)) < 400


def test_a_huge_integer_in_a_lib_is_named() -> None:
    with pytest.raises(graphrt.GraphFormatError, match="an integer of 16610 bits"):
        graphrt.Library.from_json({"format": "graphrt.lib", "functions": {"f": HUGE}})


@pytest.mark.parametrize("header", [
    f'{{"w": {{"dtype": "F32", "shape": [{HUGE_TEXT}], "data_offsets": [0, 4]}}}}',
    f'{{"w": {{"dtype": "F32", "shape": [1], "data_offsets": [0, {HUGE_TEXT}]}}}}',
    f'{{"w": {{"dtype": {HUGE_TEXT}, "shape": [1], "data_offsets": [0, 4]}}}}',
    f'{{"__metadata__": {{"a": {HUGE_TEXT}}}}}',
    '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 36893488147419103232]}}',
])
def test_a_safetensors_header_with_huge_integers_is_a_bundle_error(header: str) -> None:
    """The header is read by Python's json (which would convert any length of digits): an
    integer longer than 64 bits allow is refused before it is converted."""
    raw = header.encode()
    buffer = memoryview(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    with pytest.raises(graphrt.BundleError, match=r"params\.safetensors: .*(integer|offsets)"):
        read_safetensors(buffer, "params.safetensors")


# --- 4. shapes that fit every check and then fail in numpy ------------------------------------


@pytest.mark.parametrize("shape, itemsize, ok", [
    ((0, 2**61 - 1), 4, True),      # 4 * (2**61 - 1) < 2**63: numpy makes it
    ((0, 2**61), 4, False),         # 4 * 2**61 == 2**63: "array is too big"
    ((0, 2**63 - 1), 1, True),
    ((0, 2**63), 1, False),         # "Maximum allowed dimension exceeded"
    ((2**31, 2**31, 0), 2, False),
    ((0,) * 64, 8, True),
    ((1,) * 65, 1, False),          # more dimensions than numpy has
    ((3, -1), 4, False),
])
def test_the_shape_rule_is_numpys(shape: tuple[int, ...], itemsize: int, ok: bool) -> None:
    assert (shape_problem(shape, itemsize) is None) == ok
    dtype = {1: "uint8", 2: "float16", 4: "float32", 8: "float64"}[itemsize]
    if ok:
        assert np.empty(shape, dtype).shape == shape
    else:
        with pytest.raises(ValueError):
            np.empty(shape, dtype)


def safetensors_of(shape: list[int], dtype: str = "F32") -> memoryview:
    header = json.dumps({"w": {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}})
    raw = header.encode()
    return memoryview(struct.pack("<Q", len(raw)) + raw)


@pytest.mark.parametrize("shape", [[0, 2**61], [0, 2**62], [0, 2**63 - 1], [0, 2**63],
                                   [2**31, 2**31, 0], [0, 2**40, 2**40]])
def test_an_empty_safetensors_tensor_numpy_cannot_hold_is_refused(shape: list[int]) -> None:
    with pytest.raises(graphrt.BundleError, match=r"tensor 'w' has shape .*2\*\*63"):
        read_safetensors(safetensors_of(shape), "params.safetensors")


def test_an_empty_safetensors_tensor_at_the_boundary_loads() -> None:
    assert read_safetensors(safetensors_of([0, 2**61 - 1]))["w"].shape == (0, 2**61 - 1)


def params_blob(shape: list[int]) -> bytes:
    blob = struct.pack("<QQQ", 0xF7E58D4F05049CB7, 0, 1) + struct.pack("<Q", 1) + b"w"
    blob += struct.pack("<QQQiii", 1, 0xDD5E40F096B4A13F, 0, 1, 0, len(shape))
    return blob + struct.pack(f"<BBH{len(shape)}qq", 2, 32, 1, *shape, 0)


@pytest.mark.parametrize("shape", [[0, 2**61], [0, 2**63 - 1], [2**62, 2**62, 0]])
def test_an_empty_param_numpy_cannot_hold_is_refused(shape: list[int]) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=r"param 'w': shape .*2\*\*63"):
        graphrt.load_params(params_blob(shape))


def test_an_empty_param_at_the_boundary_loads() -> None:
    assert graphrt.load_params(params_blob([0, 2**61 - 1]))["w"].shape == (0, 2**61 - 1)


@pytest.mark.parametrize("shape, problem", [
    ([0, 2**61], r"2\*\*63"), ([2**62, 2**62, 0], r"2\*\*63"), ([0, 2**63], r"\[0, 2\*\*63\)"),
    ([1] * 65, "65 dimensions"),
])
def test_a_graph_shape_numpy_cannot_hold_is_named(shape: list[int], problem: str) -> None:
    with pytest.raises(graphrt.GraphFormatError, match=rf"entry 0 .*'A'.*{problem}"):
        graphrt.load_graph(mutated(["attrs", "shape", 1, 0], shape))


def test_an_empty_graph_entry_at_the_boundary_loads() -> None:
    graph = graphrt.load_graph(mutated(["attrs", "shape", 1, 0], [0, 2**61 - 1]))
    assert graph.entries[0].shape == (0, 2**61 - 1)


# --- 5. special files where a file is expected ------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


SPECIAL = {
    "a FIFO": lambda tmp: tmp / "pipe.json",
    "a character device": lambda tmp: Path("/dev/zero"),
    "a directory": lambda tmp: tmp,
}


def special(kind: str, tmp_path: Path) -> Path:
    path: Path = SPECIAL[kind](tmp_path)
    if kind == "a FIFO":
        os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("reader, error", [
    (graphrt.load_graph, graphrt.GraphFormatError),
    (lambda path: graphrt.create(path, KERNELS), graphrt.GraphFormatError),
    (lambda path: graphrt.create(str(path), KERNELS), graphrt.GraphFormatError),
    (graphrt.Library.from_json, graphrt.GraphFormatError),
    (lambda path: graphrt.save_bundle(path.parent / "out.grb", SIMPLEX, None, path),
     graphrt.BundleError),
    (lambda path: graphrt.save_bundle(path.parent / "out.grb", path), graphrt.BundleError),
])
def test_a_special_file_is_refused_without_blocking(tmp_path: Path, kind: str,
                                                    reader: Callable[[Path], Any],
                                                    error: type[Exception]) -> None:
    path = special(kind, tmp_path)
    if kind == "a directory" and reader is graphrt.load_graph:
        path = tmp_path
    with no_hang(), pytest.raises(error, match=f"it is {kind}, not a regular file"):
        reader(path)
    assert not (tmp_path / "out.grb").exists()


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_special_file_as_a_bundle_is_refused(tmp_path: Path, kind: str) -> None:
    path = special(kind, tmp_path)
    refused(path, f"it is {kind}", str(path))


def test_a_fifo_member_of_a_bundle_directory_is_refused(tmp_path: Path, good: Members) -> None:
    members = dict(good)
    del members["lib.json"]
    folder = write_directory(tmp_path / "b", members)
    os.mkfifo(folder / "lib.json")
    refused(folder, "'lib.json'", "a FIFO")


def test_overwriting_a_fifo_is_refused_without_blocking(tmp_path: Path, fifo: Path) -> None:
    with no_hang(), pytest.raises(graphrt.BundleError, match="not a bundle"):
        graphrt.save_bundle(fifo, SIMPLEX, archive="zip", overwrite=True)


def test_read_regular_bounds_what_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 100)
    assert len(read_regular(path, "graph", graphrt.GraphFormatError, limit=100)) == 100
    with pytest.raises(graphrt.GraphFormatError, match=r"big\.json.*limit of 99 bytes"):
        read_regular(path, "graph", graphrt.GraphFormatError, limit=99)


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_an_onnx_model_path_that_is_a_special_file_is_refused(tmp_path: Path,
                                                              kind: str) -> None:
    pytest.importorskip("onnx")
    path = special(kind, tmp_path)
    with no_hang(), pytest.raises(graphrt.ConversionError, match=f"it is {kind}"):
        graphrt.from_onnx(path)


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_a_cli_input_that_is_a_special_file_is_refused(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path, kind: str) -> None:
    path = special(kind, tmp_path)
    with no_hang():
        err = failed(capsys, "InputError", "run", str(ROOT / "examples" / "bundles" / "mlp"),
                     "--input", f"x={path}")
    assert f"--input x: cannot read '{path}': it is {kind}" in err


@pytest.mark.parametrize("command", [["validate"], ["inspect"], ["validate", "--lib"]])
def test_cli_graph_and_lib_paths_that_are_fifos_are_refused(
        capsys: pytest.CaptureFixture[str], fifo: Path, command: list[str]) -> None:
    graph = str(EXAMPLES / "simplex.json")
    argv = [command[0], graph, "--lib", str(fifo)] if "--lib" in command else [*command,
                                                                                 str(fifo)]
    with no_hang():
        err = failed(capsys, "GraphFormatError", *argv)
    assert "a FIFO" in err and str(fifo) in err


# --- 6. .npy files whose header lies ----------------------------------------------------------


def npy_with_header(path: Path, shape: tuple[int, ...], descr: str = "<f4",
                    data: bytes = b"") -> Path:
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(data)
    return path


@pytest.mark.parametrize("shape, data, problem", [
    ((2**40,), b"", "header promises 4,398,046,511,104"),
    ((8, 64), b"\0" * 16, "holds 16 bytes of data but its header promises 2,048"),
    ((0, 2**62), b"", "2**63"),
    ((2**63,), b"", r"not an integer in [0, 2**63)"),
    ((4,), b"\0" * 17, "holds 17 bytes"),
])
def test_a_npy_whose_header_lies_is_refused_before_reading(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, shape: tuple[int, ...],
        data: bytes, problem: str) -> None:
    path = npy_with_header(tmp_path / "x.npy", shape, data=data)
    err = failed(capsys, "InputError", "run", str(ROOT / "examples" / "bundles" / "mlp"),
                 "--input", f"x={path}")
    assert str(path) in err and problem in err


def test_a_npy_of_objects_is_refused_without_unpickling(tmp_path: Path) -> None:
    path = npy_with_header(tmp_path / "o.npy", (1,), descr="|O", data=b"\x80\x04N.")
    with pytest.raises(graphrt.InputError, match=r"o\.npy.*Python objects"):
        read_npy(str(path), "--input o")


_CUT_HEADER = b"{'descr': '<f4', 'fortran_order': False, 'shape': (8, 64\n"


@pytest.mark.parametrize("content", [
    b"", b"\x93NUMPY", b"not numpy at all",
    b"\x93NUMPY\x01\x00\x10\x00{'descr': 1}      \n",
    # a header cut before its ')': numpy's tokenizer raises TokenError (fuzz finding F1)
    b"\x93NUMPY\x01\x00" + struct.pack("<H", len(_CUT_HEADER)) + _CUT_HEADER,
])
def test_a_malformed_npy_is_an_input_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.npy"
    path.write_bytes(content)
    with pytest.raises(graphrt.InputError, match=r"--input x: cannot read .*bad\.npy"):
        read_npy(str(path), "--input x")


def test_a_good_npy_reads_as_numpy_does(tmp_path: Path) -> None:
    for order in ("C", "F"):
        array = np.asarray(np.arange(12, dtype="float32").reshape(3, 4), order=order)
        np.save(tmp_path / "a.npy", array)
        got = read_npy(str(tmp_path / "a.npy"), "--input a")
        assert np.array_equal(got, array) and got.dtype == array.dtype


def test_a_npz_param_whose_header_lies_is_a_bundle_error(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    member = npy_with_header(tmp_path / "w.npy", (2**40, 2**10))
    with zipfile.ZipFile(tmp_path / "p.npz", "w") as archive:
        archive.write(member, "w0.npy")
    graph = str(ROOT / "examples" / "models" / "mlp" / "graph.json")
    err = failed(capsys, "BundleError", "bundle", graph, "--params", str(tmp_path / "p.npz"),
                 "-o", str(tmp_path / "out"))
    assert "p.npz" in err and "'w0.npy'" in err and "header promises" in err
    assert not (tmp_path / "out").exists()


# --- 7. wrong argument types at the public API ------------------------------------------------


@pytest.mark.parametrize("call, name", [
    (lambda: graphrt.load_graph(3.5), r"load_graph\(source\)"),
    (lambda: graphrt.load_graph(None), r"load_graph\(source\)"),
    (lambda: graphrt.load_params(5), r"load_params\(blob\)"),
    (lambda: graphrt.load_params("w.params"), r"load_params\(blob\)"),
    (lambda: graphrt.save_params(5), r"save_params\(params\)"),
    (lambda: graphrt.save_params({5: np.zeros(2)}), r"save_params\(params\)"),
    (lambda: graphrt.save_params({"w": "text"}), "param 'w'"),
    (lambda: graphrt.save_params({"w": None}), "param 'w'"),
    (lambda: graphrt.load_bundle(None), r"load_bundle\(path\)"),
    (lambda: graphrt.load_bundle(5), r"load_bundle\(path\)"),
    (lambda: graphrt.load_bundle("b", limits={"graph": 1}), r"load_bundle\(limits\)"),
    (lambda: graphrt.BundleLimits(params="1"), r"BundleLimits\.params"),
    (lambda: graphrt.BundleLimits(total=1.5), r"BundleLimits\.total"),
    (lambda: graphrt.save_bundle(5, SIMPLEX), r"save_bundle\(path\)"),
    (lambda: graphrt.save_bundle("x.grb", 5), r"save_bundle\(graph\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, lib=5), r"save_bundle\(lib\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, params=5), r"save_bundle\(params\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, params={1: np.zeros(4)}),
     r"save_bundle\(params\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, metadata=["m"]), r"save_bundle\(metadata\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, archive=1), r"save_bundle\(archive\)"),
    (lambda: graphrt.save_bundle("x.grb", SIMPLEX, overwrite="yes"),
     r"save_bundle\(overwrite\)"),
])
def test_wrong_argument_types_say_what_was_expected(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    call: Callable[[], Any], name: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(graphrt.ArgumentError, match=rf"{name}: expected .*, given"):
        call()
    assert not list(tmp_path.iterdir())  # nothing written


def test_from_onnx_of_a_wrong_type_says_what_was_expected() -> None:
    pytest.importorskip("onnx")
    with pytest.raises(graphrt.ArgumentError,
                       match=r"from_onnx\(model\): expected a path, bytes or an "
                             r"onnx\.ModelProto, given 12"):
        graphrt.from_onnx(12)
