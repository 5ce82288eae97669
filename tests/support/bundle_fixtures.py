"""Helpers for bundle tests: the example models' parts, and rewriting a bundle's members."""

from __future__ import annotations

import hashlib
import json
import random
import runpy
import zipfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

import graphrt

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
BUNDLES = ROOT / "examples" / "bundles"
BUILD = runpy.run_path(str(BUNDLES / "build.py"))
DATA_INPUTS: dict[str, str] = BUILD["DATA_INPUTS"]

Array = np.ndarray[Any, Any]


def model_parts(name: str) -> tuple[Path, Path, dict[str, Array], dict[str, Array]]:
    """(graph path, lib path, params, data inputs) of an example model."""
    values: dict[str, Array] = BUILD["model_values"](name)
    data = DATA_INPUTS[name]
    params = {key: value for key, value in values.items() if key != data}
    return MODELS / name / "graph.json", MODELS / name / "lib.json", params, {data: values[data]}


def save_model(tmp_path: Path, name: str = "mlp", kind: str = "directory") -> Path:
    """Save an example model as a bundle under ``tmp_path`` (``kind``: directory or zip)."""
    graph, lib, params, _ = model_parts(name)
    target = tmp_path / (f"{name}.grb" if kind == "zip" else name)
    return graphrt.save_bundle(target, graph, lib, params, {"model": name})


def digest(content: bytes) -> dict[str, Any]:
    return {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}


def read_members(bundle: Path) -> dict[str, bytes]:
    """Every member's bytes, from a directory or a zip bundle."""
    if bundle.is_dir():
        return {path.name: path.read_bytes() for path in sorted(bundle.iterdir())}
    with zipfile.ZipFile(bundle) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def edit_manifest(members: dict[str, bytes], edit: Callable[[dict[str, Any]], object]) -> None:
    manifest = json.loads(members["manifest.json"])
    edit(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()


def replace_member(members: dict[str, bytes], name: str, content: bytes,
                   *, fix_digest: bool = True) -> None:
    """Swap a member's content; with ``fix_digest`` the manifest lists the new checksum, so
    that a check after the checksum is what fails."""
    members[name] = content
    if fix_digest:
        edit_manifest(members, lambda m: m["members"].__setitem__(name, digest(content)))


def write_directory(folder: Path, members: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, content in members.items():
        (folder / name).write_bytes(content)
    return folder


def write_zip(path: Path, members: dict[str, bytes] | list[tuple[str, bytes]],
              deflate: Collection[str] = ()) -> Path:
    """A zip of ``members``: stored, but deflated for the names in ``deflate``."""
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in items:
            method = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(name), content, compress_type=method)
    return path


def corrupt(data: bytes, rng: random.Random, flips: int = 3, tail: int = 0) -> bytes:
    """``data`` maybe truncated, with up to ``flips`` random bytes changed; half of them in
    the last ``tail`` bytes when given (where a zip keeps its directory)."""
    damaged = bytearray(data)
    if rng.random() < 0.3:
        damaged = damaged[: rng.randrange(len(damaged))]
    for _ in range(rng.randint(1, flips)):
        if damaged:
            low = max(0, len(damaged) - tail) if tail and rng.random() < 0.5 else 0
            damaged[rng.randrange(low, len(damaged))] = rng.randrange(256)
    return bytes(damaged)
