"""The members a bundle holds, how they may be named, and how large they may be.

Example:
    >>> check_member_name("graph.json", "member")
    'graph.json'
    >>> try:
    ...     check_member_name("../evil", "member")
    ... except BundleError as err:
    ...     print(str(err)[:41])
    member '../evil' climbs out of the bundle
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from ..errors import BundleError, argument_error, describe

__all__ = [
    "GRAPH",
    "LIB",
    "MANIFEST",
    "MEMBERS",
    "PARAMS",
    "BundleLimits",
    "check_member_name",
]

MANIFEST = "manifest.json"
GRAPH = "graph.json"
LIB = "lib.json"
PARAMS = "params.safetensors"
MEMBERS = (MANIFEST, GRAPH, LIB, PARAMS)
"""Every member of a format 1 bundle; all are required and no other is allowed."""

_DRIVE = re.compile(r"^[A-Za-z]:")

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@dataclass(frozen=True)
class BundleLimits:
    """The most bytes each member, and all of them together, may hold once decompressed.

    Sizes are checked against what the archive declares before anything is read, and again
    while a compressed member is inflated, so a zip bomb stops at the limit.

    Example:
        >>> import graphrt
        >>> small = BundleLimits(params=64 * MiB)
        >>> graphrt.load_bundle("model.grb", limits=small)  # doctest: +SKIP
    """

    manifest: int = 1 * MiB
    graph: int = 256 * MiB
    lib: int = 64 * MiB
    params: int = 1 * TiB
    total: int = 1 * TiB

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                argument_error(f"BundleLimits.{field.name}", "a non-negative int (bytes)", value)
            if value < 0:
                raise ValueError(f"BundleLimits.{field.name} must be a non-negative int, "
                                 f"given {describe(value)}")

    def for_member(self, name: str) -> int:
        """The limit of one member (``graph.json`` → ``graph``)."""
        return {MANIFEST: self.manifest, GRAPH: self.graph, LIB: self.lib,
                PARAMS: self.params}[name]


def check_member_name(name: str, what: str) -> str:
    """Check that ``name`` names a file at the bundle's root and nothing else.

    Refuses empty names, absolute paths (``/x``, ``C:x``), backslashes, ``..`` and ``.``
    components, NUL and control characters, and any subfolder.

    Raises:
        BundleError: ``{what} {name!r} ...`` saying what is wrong.
    """
    shown = f"{what} {describe(name, 200)}"
    if not name:
        raise BundleError(f"{what} has an empty name")
    if "\\" in name:
        raise BundleError(f"{shown} contains a backslash; member names use no path separators")
    if name.startswith("/") or _DRIVE.match(name):
        raise BundleError(f"{shown} is an absolute path; members are plain names at the "
                          "bundle's root")
    parts = name.split("/")
    if ".." in parts:
        raise BundleError(f"{shown} climbs out of the bundle ('..'); members are plain names at "
                          "the bundle's root")
    if any(ord(char) < 0x20 or char == "\x7f" for char in name):
        raise BundleError(f"{shown} contains a control character")
    if len(parts) > 1 or name == ".":
        raise BundleError(f"{shown} is not a plain file name at the bundle's root (folders and "
                          "'.' are not allowed)")
    return name
