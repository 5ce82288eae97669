"""Fuzz bundles (seeded), as directories and as zips: the manifest and the members mutated
(structurally, with the checksum fixed so the parse checks are reached, or byte-wise), the
folder's shape (missing, extra, a directory, a symlink, a FIFO, a sparse giant member), and the
zip's structure (local headers, central directory, end record: methods, flags, sizes, CRCs,
offsets, counts; deflated members with corrupt streams), through ``load_bundle``,
``Bundle.create`` and a run."""

from __future__ import annotations

import io
import os
import random
import struct
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

from bundle_fixtures import read_members, replace_member, save_model, write_directory, write_zip

import graphrt

from . import corpus, harness
from .harness import CONFIG, Case
from .mutators import dumps, mutate_bytes, mutated_document

Members = dict[str, bytes]
MEMBER_NAMES = ("manifest.json", "graph.json", "lib.json", "params.safetensors")
_FOLDER = tempfile.TemporaryDirectory(prefix="graphrt-fuzz-bundles-")


@cache
def seed_members(model: str) -> Members:
    """The members of a real bundle of an example model (saved once per session)."""
    folder = Path(_FOLDER.name) / model
    folder.mkdir()
    return read_members(save_model(folder, model, "directory"))


class NotABundleError(AssertionError):
    """``load_bundle`` refused with a graphrt error other than :class:`graphrt.BundleError`."""


def open_case(write: Callable[[Path], Path], rng: random.Random) -> Case:
    """Write the bundle into the case folder, load it, create its module and run it."""

    def body(folder: Path) -> str:
        try:
            bundle = graphrt.load_bundle(write(folder))
        except graphrt.BundleError:
            raise
        except graphrt.GraphrtError as err:  # load_bundle promises BundleError
            raise NotABundleError(f"load_bundle raised {type(err).__name__}: {err}") from err
        devices = rng.choice([("cpu",), ("cpu", "sim")])
        return corpus.exercise(bundle.create(*devices), rng)

    return body


# -- member mutations (both kinds) ------------------------------------------------------------


def mutate_members(members: Members, rng: random.Random) -> list[str]:
    """Change members in place: structure or bytes of one member, the checksum fixed or not."""
    name = rng.choice(MEMBER_NAMES)
    fix = rng.random() < 0.7 and name != "manifest.json"
    if name.endswith(".json") and rng.random() < 0.6:
        document, done = mutated_document(members[name], rng)
        content = dumps(document).encode()
    else:
        region = None
        if name == "params.safetensors" and rng.random() < 0.7:
            (length,) = struct.unpack_from("<Q", members[name])
            region = (0, 8 + length)
        content, done = mutate_bytes(members[name], rng, region=region)
    if fix:
        replace_member(members, name, content)
    else:
        members[name] = content
    return [f"{name}{' (digest fixed)' if fix else ''}: {', '.join(done)}"]


# -- directories ------------------------------------------------------------------------------


def _shape_change(folder: Path, rng: random.Random) -> str:
    """Change the bundle folder's shape: a member missing, extra, special or giant."""
    victim = folder / rng.choice(MEMBER_NAMES)
    action = rng.choice(["remove", "extra", "directory", "symlink out", "symlink in", "fifo",
                         "sparse", "empty"])
    if action == "extra":
        (folder / rng.choice(["extra.bin", ".hidden", "params.npz", "graph.json~"])).write_bytes(
            b"x")
        return action
    victim.unlink()
    if action == "directory":
        victim.mkdir()
    elif action == "symlink out":
        victim.symlink_to("/etc/hostname")
    elif action == "symlink in":
        victim.symlink_to(folder / rng.choice([n for n in MEMBER_NAMES if n != victim.name]))
    elif action == "fifo":
        os.mkfifo(victim)
    elif action == "sparse":
        with open(victim, "wb") as file:
            file.truncate(rng.choice([2**31, 2**40]))
    elif action == "empty":
        victim.write_bytes(b"")
    return f"{action} {victim.name}"


def directory_writer(members: Members, rng: random.Random, reshape: bool) -> Callable[
        [Path], Path]:
    def write(folder: Path) -> Path:
        bundle = write_directory(folder / "bundle", members)
        if reshape:
            _shape_change(bundle, rng)
        return bundle

    return write


def test_mutated_directory_bundles() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("bundle-directory", index)
        model = rng.choice(["mlp", "cnn"])
        members = dict(seed_members(model))
        reshape = rng.random() < 0.2
        done = ["folder reshaped"] if reshape else mutate_members(members, rng)
        return f"{model}: {'; '.join(done)}", open_case(
            directory_writer(members, rng, reshape), rng)

    stats = harness.run_target("bundle-directory", CONFIG.budget(600, 10_000), make)
    harness.fail_on_findings(stats)


# -- zips -------------------------------------------------------------------------------------

LOCAL = (b"PK\x03\x04", {"version": (4, "H"), "flags": (6, "H"), "method": (8, "H"),
                         "crc": (14, "I"), "compressed size": (18, "I"),
                         "size": (22, "I"), "name length": (26, "H"),
                         "extra length": (28, "H")})
CENTRAL = (b"PK\x01\x02", {"version needed": (6, "H"), "flags": (8, "H"), "method": (10, "H"),
                           "crc": (16, "I"), "compressed size": (20, "I"), "size": (24, "I"),
                           "name length": (28, "H"), "extra length": (30, "H"),
                           "comment length": (32, "H"), "disk": (34, "H"),
                           "external attributes": (38, "I"), "local offset": (42, "I")})
END = (b"PK\x05\x06", {"disk": (4, "H"), "entries on disk": (8, "H"), "entries": (10, "H"),
                       "directory size": (12, "I"), "directory offset": (16, "I"),
                       "comment length": (20, "H")})


def zip_fields(data: bytes) -> list[tuple[int, str, str]]:
    """(offset, struct format, what) of every header field of the zip's records."""
    found = []
    for signature, layout in (LOCAL, CENTRAL, END):
        start = data.find(signature)
        while start >= 0:
            kind = signature[2:].hex()
            found += [(start + offset, fmt, f"{kind}@{start} {name}")
                      for name, (offset, fmt) in layout.items() if start + offset < len(data)]
            start = data.find(signature, start + 1)
    return found


FIELD_VALUES = {"method": [0, 1, 8, 9, 12, 14, 93, 99, 0xFFFF],
                "flags": [0, 1, 8, 0x40, 0x800, 0x2001, 0xFFFF]}


def mutate_zip_fields(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    out = bytearray(data)
    done = []
    for _ in range(rng.randint(1, 2)):
        offset, fmt, what = rng.choice(zip_fields(data))
        top = 2 ** (struct.calcsize(fmt) * 8) - 1
        (current,) = struct.unpack_from("<" + fmt, data, offset)
        special = FIELD_VALUES.get(what.rsplit(" ", 1)[-1], [])
        value = rng.choice([0, 1, top, top - 1, current + 1, max(current - 1, 0),
                            current ^ (1 << rng.randrange(8)), rng.randint(0, top), *special])
        struct.pack_into("<" + fmt, out, offset, min(max(value, 0), top))
        done.append(f"{what} {current} -> {value}")
    return bytes(out), done


def rebuilt_zip(members: Members, rng: random.Random) -> tuple[list[tuple[str, bytes]], set[str],
                                                              str]:
    """A member list for :func:`write_zip`: duplicated, renamed, extra or deflated entries."""
    items = list(members.items())
    deflate = {name for name in members if rng.random() < 0.4}
    action = rng.choice(["deflate", "duplicate", "extra", "rename", "reorder", "directory"])
    if action == "duplicate":
        name, content = rng.choice(items)
        items.append((name, content if rng.random() < 0.5 else content[::-1]))
    elif action == "extra":
        items.append((rng.choice(["../evil.json", "/abs.json", "a/b.json", "C:x", "x\x00y",
                                  "graph.json/", "\u00e9.json", "."]), b"{}"))
    elif action == "rename":
        index = rng.randrange(len(items))
        items[index] = (rng.choice(["Graph.json", "./graph.json", "graph.json ", "lib.JSON"]),
                        items[index][1])
    elif action == "reorder":
        rng.shuffle(items)
    elif action == "directory":
        items.append(("folder/", b""))
    return items, deflate, action


def zip_writer(members: Members, rng: random.Random) -> tuple[Callable[[Path], Path], str]:
    items, deflate, action = rebuilt_zip(members, rng)
    label = f"zip {action}, deflated {sorted(deflate)}"
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of duplicate names
        data = write_zip(Path(folder) / "b.grb", items, deflate).read_bytes()
    roll = rng.random()
    if roll < 0.4:
        data, done = mutate_zip_fields(data, rng)
    elif roll < 0.7:
        end = data.rfind(b"PK\x01\x02")
        tail = rng.choice([(max(0, end - 64), len(data)), None])
        data, done = mutate_bytes(data, rng, region=tail)
    elif roll < 0.85 and deflate:
        data, done = _corrupt_deflate(data, rng)
    else:
        done = ["fields intact"]

    fifo = rng.random() < 0.01

    def write(folder: Path) -> Path:
        path = folder / "bundle.grb"
        if fifo:  # a FIFO nobody writes to, given as the bundle
            os.mkfifo(path)
        else:
            path.write_bytes(data)
        return path

    return write, "a FIFO" if fifo else f"{label}; {', '.join(done)}"


def _corrupt_deflate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """Damage the compressed stream of a deflated member (its header left intact)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        deflated = [info for info in archive.infolist()
                    if info.compress_type == zipfile.ZIP_DEFLATED and info.compress_size]
    if not deflated:
        return data, ["no deflated member"]
    info = rng.choice(deflated)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    mutated, done = mutate_bytes(data, rng, region=(start, start + info.compress_size))
    return mutated, [f"deflate stream of {info.filename}: {', '.join(done)}"]


def test_mutated_zip_bundles() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("bundle-zip", index)
        model = rng.choice(["mlp", "cnn"])
        members = dict(seed_members(model))
        done = mutate_members(members, rng) if rng.random() < 0.3 else []
        write, label = zip_writer(members, rng)
        return f"{model}: {'; '.join([*done, label])}", open_case(write, rng)

    stats = harness.run_target("bundle-zip", CONFIG.budget(800, 20_000), make)
    harness.fail_on_findings(stats)
