"""Writing a bundle's members, as a directory or a zip file, atomically.

Everything is written beside the target under a temporary name, flushed to disk, and renamed
into place at the end, so a failed or interrupted save leaves no half-written bundle (and an
existing one untouched). Each member's SHA-256 is computed while it is written; the manifest,
which lists them, is written last. Zip files store members uncompressed with fixed timestamps
(the same input gives the same bytes), and pad the params member's local header so its data
starts 64-byte aligned in the file, ready to be mapped.

Example:
    >>> digests = write_archive(Path("out.grb"), "zip", [("graph.json", 2, b"{}")],
    ...                         lambda digests: b"{}", overwrite=True)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import struct
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Literal

from ..errors import BundleError
from ..files import open_regular
from .manifest import MemberDigest
from .members import MANIFEST, PARAMS
from .safetensors import BinaryWriter

__all__ = ["ArchiveKind", "Content", "HashingWriter", "write_archive"]

ArchiveKind = Literal["directory", "zip"]
Content = bytes | Callable[[BinaryWriter], object]
"""A member's content: bytes, or a function that writes it to a stream."""

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_ZIP64_EXTRA = 20  # the zip64 field zipfile adds to a local header opened with force_zip64
_LOCAL_HEADER = 30
_ALIGN_EXTRA_ID = 0xD935  # the id Android's zipalign uses for its padding field
_ALIGNMENT = 64


class HashingWriter:
    """A stream that hashes and counts what passes through it to another stream.

    Example:
        >>> import io
        >>> writer = HashingWriter(io.BytesIO())
        >>> writer.write(b"abc"), writer.size, writer.digest().sha256[:8]
        (3, 3, 'ba7816bf')
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview, /) -> int:
        """Write ``data`` through; returns its length in bytes."""
        self._stream.write(data)
        self._hasher.update(data)
        count = memoryview(data).nbytes
        self.size += count
        return count

    def digest(self) -> MemberDigest:
        """What the manifest records for the bytes written so far."""
        return MemberDigest(size=self.size, sha256=self._hasher.hexdigest())


def _write_content(stream: IO[bytes], content: Content) -> MemberDigest:
    writer = HashingWriter(stream)
    if isinstance(content, bytes):
        writer.write(content)
    else:
        content(writer)
    return writer.digest()


def _write_file(path: Path, content: Content) -> MemberDigest:
    with open(path, "xb") as handle:
        digest = _write_content(handle, content)
        handle.flush()
        os.fsync(handle.fileno())
    return digest


def _write_directory(folder: Path, members: Sequence[tuple[str, Content]],
                     manifest: Callable[[dict[str, MemberDigest]], bytes]) -> None:
    folder.mkdir()
    digests = {name: _write_file(folder / name, content) for name, content in members}
    _write_file(folder / MANIFEST, manifest(digests))


def _align_extra(offset: int, name: str, zip64: bool) -> bytes:
    """A zip extra field that makes the member's data start at a multiple of 64."""
    start = offset + _LOCAL_HEADER + len(name.encode("utf-8")) + (_ZIP64_EXTRA if zip64 else 0)
    padding = -start % _ALIGNMENT
    if padding == 0:
        return b""
    if padding < 6:  # id, length and the alignment value take 6 bytes
        padding += _ALIGNMENT
    return struct.pack("<HHH", _ALIGN_EXTRA_ID, padding - 4, _ALIGNMENT) + bytes(padding - 6)


def _zip_info(name: str, extra: bytes = b"") -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # unix, so the mode below is read as one
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    info.extra = extra
    return info


def _write_zip(path: Path, members: Sequence[tuple[str, Content]],
               manifest: Callable[[dict[str, MemberDigest]], bytes]) -> None:
    digests: dict[str, MemberDigest] = {}
    with open(path, "xb") as raw:
        with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
            for name, content in members:
                big = name == PARAMS  # may pass 4 GiB: always zip64, so the padding is known
                info = _zip_info(name, _align_extra(raw.tell(), name, big) if big else b"")
                with archive.open(info, "w", force_zip64=big) as stream:
                    digests[name] = _write_content(stream, content)
            archive.writestr(_zip_info(MANIFEST), manifest(digests))
        raw.flush()
        os.fsync(raw.fileno())


def _is_bundle(path: Path) -> bool:
    """Whether ``path`` holds a bundle (a FIFO or a device, opened without blocking, does not)."""
    if path.is_dir():
        return (path / MANIFEST).is_file()
    try:
        with open_regular(path, "bundle", BundleError) as handle:
            return zipfile.is_zipfile(handle)
    except BundleError:
        return False


def _move_into_place(built: Path, target: Path, overwrite: bool) -> None:
    if not os.path.lexists(target):
        os.replace(built, target)
        return
    if not overwrite:
        raise BundleError(f"{target} already exists (pass overwrite=True to replace it; "
                          "graphrt convert and graphrt bundle: --overwrite)")
    if target.is_symlink() or not _is_bundle(target):
        raise BundleError(f"refusing to replace {target}: it is not a bundle")
    if target.is_dir():
        aside = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
        os.replace(target, aside)
        os.replace(built, target)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(built, target)


def write_archive(target: Path, kind: ArchiveKind, members: Sequence[tuple[str, Content]],
                  manifest: Callable[[dict[str, MemberDigest]], bytes], *,
                  overwrite: bool) -> None:
    """Write ``members`` and then the manifest (made from their digests) to ``target``.

    Args:
        target: the bundle directory or zip file to create.
        kind: ``"directory"`` or ``"zip"``.
        members: ``(name, content)`` in the order to write them.
        manifest: makes ``manifest.json`` from every member's size and SHA-256.
        overwrite: replace an existing bundle at ``target`` (never anything else).

    Raises:
        BundleError: ``target`` exists (and ``overwrite`` is off, or it is not a bundle), or
            it cannot be written.
    """
    built = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}")
    try:
        if kind == "directory":
            _write_directory(built, members, manifest)
        else:
            _write_zip(built, members, manifest)
        _move_into_place(built, target, overwrite)
    except OSError as err:
        raise BundleError(f"cannot write bundle {target}: {err}") from None
    finally:
        if os.path.lexists(built):
            if built.is_dir():
                shutil.rmtree(built, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    built.unlink()
