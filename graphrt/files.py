"""Opening a file the user named, one way: never blocking, never reading what is not a file.

Every path graphrt reads for a user (a graph, a lib, a params file, a bundle, an ONNX model, a
CLI ``--input``) is opened by :func:`open_regular`: ``O_NONBLOCK`` so that a FIFO does not
wait for a writer, then ``fstat`` of the open descriptor, refusing anything but a regular file
(a FIFO, a character device such as ``/dev/zero``, a socket, a directory) with the caller's
error class naming the path and what it is. :func:`read_regular` also bounds what it reads.

Example:
    >>> from graphrt.errors import GraphFormatError
    >>> try:
    ...     read_regular("/dev/zero", "graph", GraphFormatError)
    ... except GraphFormatError as err:
    ...     print(err)
    cannot read graph file '/dev/zero': it is a character device, not a regular file
"""

from __future__ import annotations

import io
import os
import stat

from .errors import GraphrtError, describe

__all__ = ["file_kind", "open_regular", "read_regular"]

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``"a FIFO"``, ``"a regular file"``)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _shown(path: object) -> str:
    return describe(os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else path,
                    200)


def open_regular(path: str | os.PathLike[str], what: str, error: type[GraphrtError], *,
                 follow_symlinks: bool = True, prefix: str | None = None) -> io.FileIO:
    """Open a regular file for reading without ever blocking.

    Args:
        path: the user's path.
        what: what the file is, for messages (``"graph"`` → ``cannot read graph file ...``).
        error: the error class to raise.
        follow_symlinks: False opens with ``O_NOFOLLOW`` (a link is refused).
        prefix: the message's start instead of ``cannot read <what> file <path>``.

    Raises:
        error: the file cannot be opened, or is not a regular file (saying what it is).
    """
    flags = _FLAGS | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    start = prefix or f"cannot read {what} file {_shown(path)}"
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError, TypeError) as err:  # ValueError: a NUL in the path
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise error(f"{start}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{start}: it is {file_kind(mode)}, not a regular file")
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], what: str, error: type[GraphrtError], *,
                 limit: int | None = None) -> bytes:
    """The whole content of a regular file, opened by :func:`open_regular`.

    Raises:
        error: as :func:`open_regular`, a read that fails, or more than ``limit`` bytes.
    """
    with open_regular(path, what, error) as file:
        try:
            data = file.read() if limit is None else file.read(limit + 1)
        except OSError as err:
            raise error(f"cannot read {what} file {_shown(path)}: {err.strerror}") from None
    if limit is not None and len(data) > limit:
        raise error(f"{what} file {_shown(path)} is larger than the limit of {limit:,} bytes")
    return data
