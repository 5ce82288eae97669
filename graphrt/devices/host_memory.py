"""How much host memory this process can still allocate, for the planner's "would not fit" check.

A machine's physical memory overstates what a process may use: a resource limit (``ulimit -v``,
``RLIMIT_AS``/``RLIMIT_DATA``) or a container's cgroup (v2 ``memory.max``, v1
``memory.limit_in_bytes``) can be far lower, and then numpy's allocation fails with a
``MemoryError`` long after planning said the graph fits. :func:`host_memory_limit` takes the
least of every source it can read; each source is one small function, so tests can replace it.

Example:
    >>> limit = host_memory_limit()
    >>> limit is None or limit >= 0
    True
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["available_memory", "cgroup_headroom", "host_memory_limit", "rlimit_headroom"]

_UNLIMITED = 1 << 60
"""Limits at or above this (cgroup v1 writes ``PAGE_COUNTER_MAX`` pages) mean no limit."""

PROC_SELF = Path("/proc/self")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def host_memory_limit() -> int | None:
    """Bytes this process can still allocate on the host, or None where nothing says.

    The least of: the machine's available memory (``MemAvailable``), the headroom under each
    soft resource limit on memory (``RLIMIT_AS`` minus the process's virtual size,
    ``RLIMIT_DATA`` minus its data segment), and the headroom in its memory cgroup (the limit
    minus the cgroup's current usage; v2 and v1). Never below 0.
    """
    found = [value for value in (available_memory(), *rlimit_headroom(), cgroup_headroom())
             if value is not None]
    return max(min(found), 0) if found else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except (OSError, ValueError):
        return None


def _status_kib(field: str, text: str | None) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` or ``/proc/meminfo``, in bytes."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if name == field:
            parts = value.split()
            return int(parts[0]) * 1024 if parts and parts[0].isdigit() else None
    return None


def available_memory() -> int | None:
    """Memory the machine can give without swapping (Linux ``MemAvailable``), else the free
    physical pages, else None."""
    available = _status_kib("MemAvailable", _read(PROC_SELF.parent / "meminfo"))
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def rlimit_headroom() -> Iterator[int]:
    """For each soft limit on memory that is set, what is left under it: ``RLIMIT_AS`` minus
    the virtual size (``VmSize``), ``RLIMIT_DATA`` minus the data segment (``VmData``); the
    whole limit where the usage cannot be read."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    status = _read(PROC_SELF / "status")
    for name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        which = getattr(resource, name, None)
        if which is None:
            continue
        soft, _hard = resource.getrlimit(which)
        if soft == resource.RLIM_INFINITY or soft < 0 or soft >= _UNLIMITED:
            continue
        yield soft - (_status_kib(field, status) or 0)


def _cgroup_dirs(root: Path, proc: Path) -> Iterator[tuple[Path, str, str]]:
    """Candidate (directory, limit file, usage file) of this process's memory cgroup: the
    path ``/proc/self/cgroup`` names under the mount, then the mount itself (in a container
    the named path is often not visible)."""
    for line in (_read(proc / "cgroup") or "").splitlines():
        _id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified)
            files = ("memory.max", "memory.current")
            yield root / relative, *files
            yield root, *files
        elif "memory" in controllers.split(","):
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes")
            yield root / "memory" / relative, *files
            yield root / "memory", *files


def cgroup_headroom(root: Path | None = None, proc: Path | None = None) -> int | None:
    """The memory cgroup's limit minus its current usage (v2 ``memory.max`` and
    ``memory.current``, v1 ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``), or None
    when there is no cgroup limit or it cannot be read."""
    for directory, limit_file, usage_file in _cgroup_dirs(root or CGROUP_ROOT,
                                                          proc or PROC_SELF):
        text = _read(directory / limit_file)
        if text is None:
            continue
        text = text.strip()
        if not text.isdigit() or int(text) >= _UNLIMITED:  # "max", or v1's "no limit"
            return None
        usage = (_read(directory / usage_file) or "").strip()
        return int(text) - (int(usage) if usage.isdigit() else 0)
    return None
