"""A corpus of hostile bundles, made here in tmp_path: each one fails with a BundleError that
names the member at fault, and loading it touches nothing on disk."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import stat
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundle_fixtures import (
    digest,
    edit_manifest,
    read_members,
    replace_member,
    save_model,
    write_directory,
    write_zip,
)

import graphrt
import graphrt.bundle
from graphrt.bundle import PARAMS
from graphrt.bundle.safetensors import write_safetensors

Members = dict[str, bytes]
KINDS = ["directory", "zip"]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Members:
    """The members of a valid MLP bundle."""
    return read_members(save_model(tmp_path_factory.mktemp("good"), "mlp"))


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its mode, size and mtime."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


@contextlib.contextmanager
def untouched(root: Path) -> Iterator[None]:
    """Nothing under ``root`` (the bundle, its neighbours, a sentinel folder) changes, and no
    file named ``evil`` appears anywhere near."""
    before = snapshot(root)
    yield
    assert snapshot(root) == before
    for place in (root, root.parent, Path.cwd()):
        assert not (place / "evil").exists()


def refused(path: Path, *names: str, limits: graphrt.BundleLimits | None = None) -> str:
    """Load ``path``; it must fail with a BundleError naming every one of ``names``."""
    sentinel = path.parent / "sentinel"
    sentinel.mkdir(exist_ok=True)
    with untouched(path.parent), pytest.raises(graphrt.BundleError) as caught:
        graphrt.load_bundle(path, limits=limits)
    message = str(caught.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert list(sentinel.iterdir()) == []
    return message


def write(tmp_path: Path, members: Members, kind: str) -> Path:
    if kind == "zip":
        return write_zip(tmp_path / "hostile.grb", members)
    return write_directory(tmp_path / "hostile", members)


def changed(good: Members, change: Callable[[Members], object]) -> Members:
    members = dict(good)
    change(members)
    return members


# --- names and kinds of members --------------------------------------------------------------


@pytest.mark.parametrize(("name", "problem"), [
    ("../evil", "climbs out of the bundle"),
    ("a/../../evil", "climbs out of the bundle"),
    ("/tmp/evil", "absolute path"),
    ("C:evil", "absolute path"),
    ("..\\evil", "backslash"),
    ("sub/evil", "not a plain file name"),
    ("evil\x01", "control character"),
])
def test_zip_member_names_that_escape_are_refused(tmp_path: Path, good: Members, name: str,
                                                  problem: str) -> None:
    path = write_zip(tmp_path / "b.grb", [*good.items(), (name, b"owned")])
    refused(path, problem, repr(name)[:8])


def test_a_manifest_naming_a_path_outside_is_refused(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: edit_manifest(
        m, lambda man: man["members"].__setitem__("../x", digest(b""))))
    refused(write(tmp_path, members, "directory"), "manifest.json", "'../x'", "climbs out")


def test_a_symlink_member_in_a_directory_is_refused(tmp_path: Path, good: Members) -> None:
    outside = tmp_path / "outside_lib.json"
    outside.write_bytes(good["lib.json"])  # even with the right content
    folder = write_directory(tmp_path / "b", {k: v for k, v in good.items() if k != "lib.json"})
    (folder / "lib.json").symlink_to(outside)
    refused(folder, "'lib.json'", "symbolic link")


def test_a_symlinked_params_file_to_a_device_is_refused(tmp_path: Path, good: Members) -> None:
    folder = write_directory(tmp_path / "b", {k: v for k, v in good.items() if k != PARAMS})
    (folder / PARAMS).symlink_to("/dev/zero")
    refused(folder, f"'{PARAMS}'", "symbolic link")


def test_a_symlink_member_in_a_zip_is_refused(tmp_path: Path, good: Members) -> None:
    path = tmp_path / "b.grb"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in good.items():
            info = zipfile.ZipInfo(name)
            if name == "graph.json":
                info.create_system = 3
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                content = b"/etc/passwd"
            archive.writestr(info, content)
    refused(path, "'graph.json'", "symbolic link")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_member_is_refused_without_waiting_on_it(tmp_path: Path, good: Members) -> None:
    folder = write_directory(tmp_path / "b", {k: v for k, v in good.items() if k != "lib.json"})
    os.mkfifo(folder / "lib.json")
    refused(folder, "'lib.json'", "not a regular file")


def test_a_subfolder_in_a_directory_is_refused(tmp_path: Path, good: Members) -> None:
    folder = write_directory(tmp_path / "b", good)
    (folder / "nested").mkdir()
    refused(folder, "'nested'", "unexpected member")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unexpected_member_is_refused(tmp_path: Path, good: Members, kind: str) -> None:
    members = changed(good, lambda m: m.__setitem__("evil.py", b"import os"))
    refused(write(tmp_path, members, kind), "'evil.py'", "unexpected member")


def test_duplicate_zip_members_are_refused(tmp_path: Path, good: Members) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = write_zip(tmp_path / "b.grb", [*good.items(), ("graph.json", b"{}")])
    refused(path, "'graph.json'", "appears twice")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["manifest.json", "graph.json", "lib.json", PARAMS])
def test_a_missing_member_is_refused(tmp_path: Path, good: Members, kind: str,
                                     name: str) -> None:
    members = {k: v for k, v in good.items() if k != name}
    refused(write(tmp_path, members, kind), f"missing member '{name}'")


def test_a_member_the_manifest_does_not_list_is_refused(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: edit_manifest(m, lambda man: man["members"].pop(PARAMS)))
    refused(write(tmp_path, members, "zip"), f"'{PARAMS}'", "not listed in manifest.json")


# --- checksums and sizes ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["graph.json", "lib.json", PARAMS])
def test_a_modified_member_fails_its_checksum(tmp_path: Path, good: Members, kind: str,
                                              name: str) -> None:
    content = bytearray(good[name])
    content[len(content) // 2] ^= 0x01  # one bit, same size
    members = changed(good, lambda m: m.__setitem__(name, bytes(content)))
    refused(write(tmp_path, members, kind), f"'{name}'", "fails its checksum")


@pytest.mark.parametrize("kind", KINDS)
def test_a_truncated_member_is_refused_before_its_checksum(tmp_path: Path, good: Members,
                                                           kind: str) -> None:
    members = changed(good, lambda m: m.__setitem__(PARAMS, good[PARAMS][:-100]))
    refused(write(tmp_path, members, kind), f"'{PARAMS}'", "truncated or modified")


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_safetensors_with_a_matching_checksum(tmp_path: Path, good: Members,
                                                        kind: str) -> None:
    members = changed(good, lambda m: replace_member(m, PARAMS, good[PARAMS][:-100]))
    refused(write(tmp_path, members, kind), PARAMS, "truncated")


def lying_params(offsets: list[int]) -> bytes:
    """A safetensors file whose header gives ``b0`` the offsets given, over 512 data bytes."""
    header = {"b0": {"dtype": "F32", "shape": [128], "data_offsets": offsets}}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(512)


@pytest.mark.parametrize(("offsets", "problem"), [
    ([0, 1 << 40], "which is 512 bytes, but its data_offsets"),
    ([1 << 40, (1 << 40) + 512], "gap of 1099511627776 bytes"),
    ([8, 520], "gap of 8 bytes"),
])
def test_safetensors_headers_that_lie_are_refused(tmp_path: Path, good: Members,
                                                  offsets: list[int], problem: str) -> None:
    members = changed(good, lambda m: replace_member(m, PARAMS, lying_params(offsets)))
    refused(write(tmp_path, members, "zip"), PARAMS, "'b0'", problem)


def test_a_header_length_past_the_end_is_refused(tmp_path: Path, good: Members) -> None:
    content = struct.pack("<Q", 1 << 62) + good[PARAMS][8:]
    members = changed(good, lambda m: replace_member(m, PARAMS, content))
    refused(write(tmp_path, members, "directory"), PARAMS, "header claims")


@pytest.mark.parametrize("kind", KINDS)
def test_an_oversized_member_is_refused_before_it_is_read(tmp_path: Path, good: Members,
                                                          kind: str) -> None:
    path = write(tmp_path, good, kind)
    refused(path, "'graph.json'", "over its limit of 1,000",
            limits=graphrt.BundleLimits(graph=1000))
    refused(path, f"'{PARAMS}'", "over its limit", limits=graphrt.BundleLimits(params=4096))
    refused(path, "over the limit of 10,000", "BundleLimits.total",
            limits=graphrt.BundleLimits(total=10_000))


def test_a_zip_bomb_is_refused_by_its_declared_size(tmp_path: Path, good: Members) -> None:
    bomb = b" " * (64 << 20)  # 64 MiB of spaces deflate to about 64 KiB
    members = changed(good, lambda m: replace_member(m, "graph.json", bomb))
    path = write_zip(tmp_path / "bomb.grb", members, deflate={"graph.json"})
    assert path.stat().st_size < 1 << 20
    refused(path, "'graph.json'", "over its limit", limits=graphrt.BundleLimits(graph=1 << 20))


def patch_sizes(path: Path, name: str, size: int) -> None:
    """Make the zip lie about a member's unpacked size, in both of its headers."""
    data = bytearray(path.read_bytes())
    encoded = name.encode()
    for signature, field, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        at = data.find(signature)
        while at >= 0:
            if data[at + name_at : at + name_at + len(encoded)] == encoded:
                data[at + field : at + field + 4] = struct.pack("<I", size)
            at = data.find(signature, at + 1)
    path.write_bytes(bytes(data))


def test_a_zip_bomb_lying_about_its_size_stops_at_the_lie(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: replace_member(m, "graph.json", b" " * (64 << 20)))
    edit_manifest(members, lambda man: man["members"]["graph.json"].__setitem__("size", 1000))
    path = write_zip(tmp_path / "bomb.grb", members, deflate={"graph.json"})
    patch_sizes(path, "graph.json", 1000)
    refused(path, "'graph.json'", "cannot be inflated")


def test_compressed_params_are_refused(tmp_path: Path, good: Members) -> None:
    path = write_zip(tmp_path / "b.grb", good, deflate=set(good))
    refused(path, f"'{PARAMS}'", "must be stored")


def test_deflated_json_members_are_read(tmp_path: Path, good: Members) -> None:
    path = write_zip(tmp_path / "b.grb", good, deflate=set(good) - {PARAMS})
    assert graphrt.load_bundle(path).metadata["model"] == "mlp"


def test_a_local_header_that_disagrees_with_the_directory(tmp_path: Path, good: Members) -> None:
    path = write_zip(tmp_path / "b.grb", good)
    data = path.read_bytes()
    at = data.find(b"lib.json")  # the first occurrence is in the local header
    path.write_bytes(data[:at] + b"evi.json" + data[at + 8 :])
    refused(path, "'lib.json'", "local header names it 'evi.json'")


# --- contents ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "problem"), [
    ("2.0", "format version 2.0 is not supported"),
    ("0.9", "format version 0.9 is not supported"),
    ("one", "expected 'MAJOR.MINOR'"),
    (1, "expected 'MAJOR.MINOR'"),
])
def test_an_unknown_format_version_is_refused(tmp_path: Path, good: Members, version: Any,
                                              problem: str) -> None:
    members = changed(good, lambda m: edit_manifest(
        m, lambda man: man.__setitem__("format_version", version)))
    refused(write(tmp_path, members, "zip"), "manifest.json", problem)


def test_a_newer_minor_version_is_read_ignoring_new_keys(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: edit_manifest(m, lambda man: man.update(
        format_version="1.7", signature="added in 1.7")))
    bundle = graphrt.load_bundle(write(tmp_path, members, "zip"))
    assert bundle.manifest.format_version == "1.7"


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda man: man.__setitem__("format", "onnx"), "not a graphrt bundle"),
    (lambda man: man.pop("outputs"), "outputs: Field required"),
    (lambda man: man.__setitem__("extra", 1), "extra: Extra inputs are not permitted"),
    (lambda man: man["members"]["lib.json"].__setitem__("sha256", "0" * 10), "sha256"),
    (lambda man: man["inputs"][0].__setitem__("dtype", "float128"), "unsupported dtype"),
    (lambda man: man["inputs"][0].__setitem__("shape", [8, 65]),
     "input 'x' is listed as float32[8, 65]"),
    (lambda man: man["outputs"].append(man["outputs"][0]), "lists outputs"),
    (lambda man: man["params"].pop(), "lists inputs x float32[8, 64], but graph.json has x "
     "float32[8, 64], b2 float32[10]"),
    (lambda man: man["external_kernels"].append("rm_rf"), "lists external_kernels"),
])
def test_a_malformed_or_inconsistent_manifest_is_refused(tmp_path: Path, good: Members,
                                                         edit: Any, problem: str) -> None:
    members = changed(good, lambda m: edit_manifest(m, edit))
    refused(write(tmp_path, members, "directory"), "manifest.json", problem)


def test_a_manifest_that_is_not_json_is_refused(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: m.__setitem__("manifest.json", b"\x80\x04pickle"))
    refused(write(tmp_path, members, "zip"), "manifest.json", "not valid JSON")


def lib_with_op(op: str) -> bytes:
    lib = {"format": "graphrt.lib", "version": 1, "functions": {"fused_dense_relu": {
        "inputs": ["x", "w", "b"], "outputs": ["y"],
        "body": [{"op": op, "inputs": ["x", "w", "b"], "outputs": ["y"]}]}}}
    return json.dumps(lib).encode()


@pytest.mark.parametrize("kind", KINDS)
def test_an_op_outside_the_standard_set_is_refused(tmp_path: Path, good: Members,
                                                   kind: str) -> None:
    members = changed(good, lambda m: replace_member(m, "lib.json", lib_with_op("os.system")))
    refused(write(tmp_path, members, kind), "'lib.json'", "'fused_dense_relu'", "os.system")


def test_a_func_name_nothing_provides_is_refused(tmp_path: Path, good: Members) -> None:
    graph = json.loads(good["graph.json"])
    graph["nodes"][3]["attrs"]["func_name"] = "rm_rf"
    members = changed(good, lambda m: replace_member(m, "graph.json", json.dumps(graph).encode()))
    refused(write(tmp_path, members, "zip"), "graph.json", "'rm_rf'", "external_kernels")


def test_a_malformed_graph_is_refused(tmp_path: Path, good: Members) -> None:
    members = changed(good, lambda m: replace_member(m, "graph.json", b'{"nodes": 1}'))
    refused(write(tmp_path, members, "zip"), "'graph.json'", "malformed graph JSON")


def params_file(**arrays: np.ndarray) -> bytes:
    class Sink:
        def __init__(self) -> None:
            self.data = bytearray()

        def write(self, chunk: bytes | memoryview) -> int:
            self.data += chunk
            return len(chunk)

    sink = Sink()
    write_safetensors(sink, arrays)
    return bytes(sink.data)


def full_params(**changes: np.ndarray) -> dict[str, np.ndarray]:
    shapes = {"w0": (128, 64), "b0": (128,), "w1": (128, 128), "b1": (128,), "w2": (10, 128),
              "b2": (10,)}
    return {**{k: np.zeros(s, "float32") for k, s in shapes.items()}, **changes}


@pytest.mark.parametrize(("params", "problem"), [
    (full_params(w0=np.zeros((128, 63), "float32")), r"param 'w0' is float32[128, 63]"),
    (full_params(b2=np.zeros(10, "float64")), "param 'b2' is float64[10]"),
    (full_params(x=np.zeros((8, 64), "float32")), "params ['x'] that manifest.json does not"),
    (full_params(evil=np.zeros(1, "int8")), "param 'evil' is not an input"),
    ({k: v for k, v in full_params().items() if k != "w1"}, "lacks param 'w1'"),
])
def test_params_that_do_not_match_the_graph_are_refused(tmp_path: Path, good: Members,
                                                        params: dict[str, np.ndarray],
                                                        problem: str) -> None:
    members = changed(good, lambda m: replace_member(m, PARAMS, params_file(**params)))
    refused(write(tmp_path, members, "directory"), PARAMS, problem)


@pytest.mark.parametrize("content", [b"", b"just text", b"PK\x03\x04 truncated zip"])
def test_files_that_are_not_bundles_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.grb"
    path.write_bytes(content)
    refused(path, "model.grb")


def test_a_path_with_no_bundle_is_refused(tmp_path: Path) -> None:
    refused(tmp_path / "absent", "no bundle at", "absent")


def test_the_bundle_package_has_no_way_to_run_code() -> None:
    """No module of graphrt.bundle imports an unpickler or a loader of code, or calls
    eval, exec, compile or __import__."""
    forbidden_modules = {"pickle", "marshal", "shelve", "importlib", "ctypes", "dill", "runpy"}
    forbidden_calls = {"eval", "exec", "compile", "__import__"}
    package = Path(graphrt.bundle.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            else:
                names = set()
            assert not names & forbidden_modules, f"{path.name} imports {names}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in forbidden_calls, f"{path.name} calls {node.func.id}"
