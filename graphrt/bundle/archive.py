"""Reading a bundle's members from a directory or a zip file, refusing anything unsafe.

Both kinds give the same three operations: :meth:`ArchiveReader.read` (a small member's bytes,
bounded by its limit even while inflating), :meth:`~ArchiveReader.digest` (SHA-256 of a stored
member, streamed) and :meth:`~ArchiveReader.map` (a read-only ``mmap`` view of a stored
member: the params are mapped, not read).

Opening lists every member and refuses, before reading any content: names that are not plain
names at the root (``..``, absolute paths, backslashes, folders), symbolic links and other
non-regular files, duplicate names, members a bundle does not have, missing members, encrypted
or oddly compressed zip members, a compressed params member (it could not be mapped), zip
entries whose local header disagrees with the central directory or that overlap, and sizes
above the :class:`~graphrt.bundle.members.BundleLimits`. A directory's members are opened with
``O_NOFOLLOW`` and checked again with ``fstat`` after opening, so a member swapped for a link
meanwhile is refused too. Nothing is ever written, and no path is built from a name that was
not first found to be one of the known members.

Example:
    >>> with open_archive("examples/bundles/mlp") as archive:  # doctest: +SKIP
    ...     sorted(archive.members)
    ['graph.json', 'lib.json', 'manifest.json', 'params.safetensors']
"""

from __future__ import annotations

import hashlib
import io
import itertools
import mmap
import os
import stat
import struct
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ..errors import BundleError, expect_type
from ..files import file_kind, open_regular
from .members import MEMBERS, PARAMS, BundleLimits, check_member_name

__all__ = ["ArchiveReader", "DirectoryReader", "MemberInfo", "ZipReader", "is_zip", "open_archive"]

ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # signature ... name length, extra length
_CHUNK = 1 << 20
_READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError,
                ValueError, NotImplementedError, RuntimeError, struct.error, IndexError, KeyError,
                OverflowError, UnicodeError, MemoryError)
"""What reading a corrupt zip (or a file changed underfoot) raises in the standard library:
a bad header offset (``OSError``), a broken deflate stream (``zlib.error``), an unsupported
method (``NotImplementedError``), an encrypted member (``RuntimeError``), a short read
(``EOFError``), a garbled header (``struct.error``, ``ValueError``)."""
_OPEN_FLAGS = os.O_RDONLY | sum(getattr(os, flag, 0) for flag in (
    "O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_BINARY"))
"""How a directory's members are opened: never through a link, never waiting (a FIFO)."""
T = TypeVar("T")


@dataclass(frozen=True)
class MemberInfo:
    """One member as the archive lists it: its size once decompressed, and where its bytes are.

    ``offset`` is where its stored bytes start in ``file`` (0 for a directory's own file).
    """

    name: str
    size: int
    compressed: bool
    offset: int


class ArchiveReader(ABC):
    """The members of one bundle, listed and checked; see the module docstring."""

    kind: str
    """``"directory"`` or ``"zip"``."""

    def __init__(self, path: Path, limits: BundleLimits) -> None:
        self.path = path
        self.limits = limits
        self.members: dict[str, MemberInfo] = {}
        self._read_total = 0
        self._maps: dict[int, mmap.mmap] = {}

    def _check_known(self, name: str) -> str:
        """Check a listed name: a plain name, listed once, one of the members bundles have."""
        check_member_name(name, "member")
        if name in self.members:
            raise BundleError(f"member {name!r} appears twice in {self.path}")
        if name not in MEMBERS:
            raise BundleError(f"unexpected member {name[:200]!r} in {self.path} (a bundle holds "
                              f"exactly {', '.join(MEMBERS)})")
        return name

    def _admit(self, info: MemberInfo) -> None:
        """Check one listed member's name and size, and add it."""
        name = self._check_known(info.name)
        limit = self.limits.for_member(name)
        if info.size > limit:
            raise BundleError(f"member {name!r} is {info.size:,} bytes, over its limit of "
                              f"{limit:,} (BundleLimits)")
        self.members[name] = info

    def _check_complete(self) -> None:
        missing = [name for name in MEMBERS if name not in self.members]
        if missing:
            raise BundleError(f"missing member {missing[0]!r} in {self.path} (a bundle holds "
                              f"{', '.join(MEMBERS)})")
        total = sum(info.size for info in self.members.values())
        if total > self.limits.total:
            raise BundleError(f"members total {total:,} bytes, over the limit of "
                              f"{self.limits.total:,} (BundleLimits.total)")

    def guarded(self, name: str | None, action: Callable[[], T], doing: str = "read") -> T:
        """Run ``action``, one read of the archive: whatever a corrupt or changing file makes
        the standard library raise becomes a :class:`BundleError` naming the bundle and the
        member. Every read of a member goes through here."""
        try:
            return action()
        except _READ_ERRORS as err:
            what = f"member {name!r} of bundle {self.path}" if name else f"bundle {self.path}"
            kind = type(err)
            label = kind.__name__ if kind.__module__ == "builtins" else (
                f"{kind.__module__}.{kind.__name__}")
            raise BundleError(f"{what} cannot be {doing}: {label}: {str(err)[:200]}") from None

    @abstractmethod
    def _file(self, name: str) -> io.FileIO:
        """The open file holding the member's stored bytes."""

    def _stored(self, name: str) -> tuple[io.FileIO, MemberInfo]:
        info = self.members[name]
        if info.compressed:
            raise BundleError(f"member {name!r} is compressed; it must be stored to be mapped")
        return self._file(name), info

    def read(self, name: str) -> bytes:
        """The member's content (decompressed), never more than its limit.

        Raises:
            BundleError: the content is shorter or longer than listed, inflates past it, or
                cannot be read or inflated at all.
        """
        doing = "inflated" if self.members[name].compressed else "read"
        return self.guarded(name, lambda: self._read(name), doing)

    def _read(self, name: str) -> bytes:
        file, info = self._stored(name)
        return self._account(name, _read_at(file, info.offset, info.size))

    def _account(self, name: str, data: bytes) -> bytes:
        size = self.members[name].size
        if len(data) != size:
            raise BundleError(f"member {name!r} holds {len(data):,} bytes, but {self.path} lists "
                              f"{size:,} (truncated or changed while being read)")
        self._read_total += len(data)
        if self._read_total > self.limits.total:
            raise BundleError(f"reading member {name!r} passes the limit of "
                              f"{self.limits.total:,} bytes for all members (BundleLimits.total)")
        return data

    def digest(self, name: str) -> str:
        """SHA-256 (hex) of a stored member, read in 1 MiB chunks (nothing is kept).

        Raises:
            BundleError: the member is shorter than listed, or cannot be read.
        """
        return self.guarded(name, lambda: self._digest(name))

    def _digest(self, name: str) -> str:
        file, info = self._stored(name)
        file.seek(info.offset)
        hasher = hashlib.sha256()
        buffer = bytearray(_CHUNK)
        left = info.size
        while left:
            count = file.readinto(memoryview(buffer)[: min(left, _CHUNK)])
            if not count:
                raise BundleError(f"member {name!r} is truncated: {info.size - left:,} of "
                                  f"{info.size:,} bytes could be read")
            hasher.update(memoryview(buffer)[:count])
            left -= count
        return hasher.hexdigest()

    def map(self, name: str) -> memoryview:
        """A read-only view of a stored member, backed by an ``mmap`` of its file.

        The view (and arrays made from it) keep the mapping alive after :meth:`close`.

        Raises:
            BundleError: the member is truncated, or cannot be mapped.
        """
        return self.guarded(name, lambda: self._map(name), "mapped")

    def _map(self, name: str) -> memoryview:
        file, info = self._stored(name)
        if info.size == 0:
            return memoryview(b"")
        key = file.fileno()
        if key not in self._maps:
            self._maps[key] = mmap.mmap(key, 0, access=mmap.ACCESS_READ)
        mapped = self._maps[key]
        if info.offset + info.size > len(mapped):
            raise BundleError(f"member {name!r} is truncated: it should end at byte "
                              f"{info.offset + info.size:,} but the file has {len(mapped):,}")
        return memoryview(mapped)[info.offset : info.offset + info.size]

    @abstractmethod
    def close(self) -> None:
        """Close the files (mapped views stay valid)."""

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class DirectoryReader(ArchiveReader):
    """A bundle stored as a directory of regular files."""

    kind = "directory"

    def __init__(self, path: Path, limits: BundleLimits) -> None:
        super().__init__(path, limits)
        self._files: dict[str, io.FileIO] = {}
        try:
            self.guarded(None, self._list, "listed")
            self._check_complete()
        except BaseException:
            self.close()
            raise

    def _list(self) -> None:
        try:
            with os.scandir(self.path) as entries:
                listed = list(entries)
        except OSError as err:
            raise BundleError(f"cannot list bundle directory {self.path}: {err.strerror}"
                              ) from None
        root = os.path.realpath(self.path)
        for entry in sorted(listed, key=lambda e: e.name):
            if entry.is_symlink():
                raise BundleError(f"member {entry.name[:200]!r} in {self.path} is a symbolic "
                                  "link; bundle members must be regular files")
            name = self._check_known(entry.name)
            mode = entry.stat(follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):  # a folder, a FIFO, a device
                raise BundleError(f"member {name!r} in {self.path} is {file_kind(mode)}, not a "
                                  "regular file")
            file = self._open(name, root)
            size = os.fstat(file.fileno()).st_size
            self._admit(MemberInfo(entry.name, size, compressed=False, offset=0))

    def _open(self, name: str, root: str) -> io.FileIO:
        where = os.path.join(root, name)
        if os.path.dirname(os.path.realpath(where)) != root:
            raise BundleError(f"member {name!r} resolves outside {self.path}")
        try:
            fd = os.open(where, _OPEN_FLAGS)
        except OSError as err:
            raise BundleError(f"cannot open member {name!r} of {self.path}: {err.strerror} (a "
                              "symbolic link is refused)") from None
        file = io.FileIO(fd, "rb")
        self._files[name] = file
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BundleError(f"member {name!r} in {self.path} is {file_kind(mode)}, not a "
                              "regular file")
        return file

    def _file(self, name: str) -> io.FileIO:
        return self._files[name]

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()


class ZipReader(ArchiveReader):
    """A bundle stored as one zip file: members stored (params must be) or deflated."""

    kind = "zip"

    def __init__(self, path: Path, limits: BundleLimits, handle: io.FileIO) -> None:
        super().__init__(path, limits)
        self._handle = handle
        self._infos: dict[str, zipfile.ZipInfo] = {}
        try:
            self._size = os.fstat(self._handle.fileno()).st_size
            self._zip = self.guarded(None, lambda: zipfile.ZipFile(self._handle),
                                     "read as a zip file")
            infos = self.guarded(None, self._zip.infolist, "read as a zip file")
            ranges = sorted(self.guarded(info.orig_filename, partial(self._admit_zip, info),
                                         "listed") for info in infos)
            for (_, end, name), (start, _, other) in itertools.pairwise(ranges):
                if start < end:
                    raise BundleError(f"members {name!r} and {other!r} overlap in {path}")
            self._check_complete()
        except BaseException:
            self.close()
            raise

    def _admit_zip(self, info: zipfile.ZipInfo) -> tuple[int, int, str]:
        name = info.orig_filename
        check_member_name(name, "member")
        if info.flag_bits & 0x1:
            raise BundleError(f"member {name!r} is encrypted")
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise BundleError(f"member {name!r} is a symbolic link; bundle members must be "
                              "regular files")
        if kind not in (0, stat.S_IFREG):
            raise BundleError(f"member {name!r} is not a regular file (mode {kind:#o})")
        method = info.compress_type
        if method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise BundleError(f"member {name!r} uses zip compression method {method}; bundles "
                              "use stored or deflate")
        if method == zipfile.ZIP_DEFLATED and name == PARAMS:
            raise BundleError(f"member {name!r} is compressed; params must be stored "
                              "uncompressed so they can be mapped (zip -0, or save_bundle)")
        if method == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise BundleError(f"member {name!r} is stored but lists {info.compress_size:,} "
                              f"stored and {info.file_size:,} unpacked bytes")
        start = self._data_start(info, name)
        end = start + info.compress_size
        if end > self._size:
            raise BundleError(f"member {name!r} is truncated: it should end at byte {end:,} but "
                              f"{self.path} has {self._size:,}")
        self._admit(MemberInfo(name, info.file_size, method != zipfile.ZIP_STORED, start))
        self._infos[name] = info
        return info.header_offset, end, name

    def _data_start(self, info: zipfile.ZipInfo, name: str) -> int:
        """Where the member's bytes start, from its local header (checked against the directory)."""
        raw = _read_at(self._handle, info.header_offset, _LOCAL_HEADER.size)
        if len(raw) != _LOCAL_HEADER.size or not raw.startswith(ZIP_MAGIC):
            raise BundleError(f"member {name!r}: no local zip header at byte "
                              f"{info.header_offset:,}")
        fields = _LOCAL_HEADER.unpack(raw)
        name_length, extra_length = int(fields[-2]), int(fields[-1])
        local = _read_at(self._handle, info.header_offset + len(raw), name_length)
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        if local.decode(encoding, errors="replace") != name:
            raise BundleError(f"member {name!r}: its local header names it "
                              f"{local.decode(encoding, errors='replace')[:200]!r}")
        return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length

    def _file(self, name: str) -> io.FileIO:
        return self._handle

    def _read(self, name: str) -> bytes:
        """The member's content, inflating a deflated one at most to its listed size."""
        info = self.members[name]
        if not info.compressed:
            return super()._read(name)
        chunks, got = [], 0
        with self._zip.open(self._infos[name]) as stream:
            while got <= info.size:
                chunk = stream.read(min(_CHUNK, info.size + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        return self._account(name, b"".join(chunks))

    def close(self) -> None:
        zip_file = getattr(self, "_zip", None)
        if zip_file is not None:
            zip_file.close()
        self._handle.close()


def _read_at(file: io.FileIO, offset: int, count: int) -> bytes:
    """Up to ``count`` bytes from ``offset`` (fewer only at the end of the file)."""
    file.seek(offset)
    chunks, got = [], 0
    while got < count:
        chunk = file.read(min(count - got, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def is_zip(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file starting with the zip signature (a single-file
    bundle); never blocks (a FIFO is not one)."""
    try:
        with open_regular(path, "bundle", BundleError) as handle:
            return handle.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except (BundleError, OSError):
        return False


def open_archive(path: str | os.PathLike[str], limits: BundleLimits | None = None
                 ) -> ArchiveReader:
    """Open a bundle directory or zip file and check its member list.

    Raises:
        BundleError: no bundle at ``path``, or an unsafe or incomplete member list.
    """
    expect_type(path, (str, os.PathLike), name="load_bundle(path)",
                expected="a path (str or os.PathLike) to a bundle directory or file")
    expect_type(limits, (BundleLimits, type(None)), name="load_bundle(limits)",
                expected="a graphrt.BundleLimits or None")
    where = Path(path)
    limits = limits or BundleLimits()
    if where.is_dir():
        return DirectoryReader(where, limits)
    if not os.path.lexists(where):
        raise BundleError(f"no bundle at {where}: no such file or directory")
    handle = open_regular(where, "bundle", BundleError)
    try:
        if handle.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            raise BundleError(f"{where} is not a bundle: neither a directory nor a zip file")
    except BaseException:
        handle.close()
        raise
    return ZipReader(where, limits, handle)
