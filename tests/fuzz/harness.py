"""The fuzz harness: budgets, one bounded case, outcome counts and findings.

Every case runs inside :func:`bounded`: a wall-clock bound (``ITIMER_REAL`` raising
:class:`CaseTimeout` in the main thread, so a hang fails the case instead of blocking CI), a
memory bound (``RLIMIT_AS`` raised to the process's current size plus a margin, so a runaway
allocation is a ``MemoryError`` at once instead of the OOM killer or swap; it also covers the
allocations of numpy, orjson and zlib that ``tracemalloc`` sees only partly, and costs two
system calls a case where ``tracemalloc`` slows every allocation) and a write guard (an audit
hook refusing writes, renames and removals outside the case's temporary folder).

:func:`run_case` classifies the outcome: a :class:`graphrt.GraphrtError` is a refusal (counted
by class), anything else escaping is a finding (type, message, traceback tail), grouped by
where it was raised. A target's test fails at its end if it has any finding, after every case
of its budget was tried and counted.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import graphrt

# -- configuration ----------------------------------------------------------------------------


@dataclass
class Config:
    """The run's budget; ``conftest`` sets ``long`` from ``--fuzz-long``."""

    long: bool = os.environ.get("GRAPHRT_FUZZ_LONG", "") not in ("", "0")
    cases: int | None = int(os.environ["GRAPHRT_FUZZ_CASES"]) if os.environ.get(
        "GRAPHRT_FUZZ_CASES") else None
    seed: int = int(os.environ.get("GRAPHRT_FUZZ_SEED", "0"))
    timeout_s: float = float(os.environ.get("GRAPHRT_FUZZ_TIMEOUT", "2"))
    memory_mib: int = int(os.environ.get("GRAPHRT_FUZZ_MEMORY_MIB", "256"))

    def budget(self, short: int, long: int) -> int:
        """Cases for a target: ``GRAPHRT_FUZZ_CASES`` if set, else its short or long count."""
        if self.cases is not None:
            return self.cases
        return long if self.long else short


CONFIG = Config()


def case_rng(target: str, index: int) -> random.Random:
    """The random source of one case: replayable from (seed, target, index) alone."""
    key = hashlib.sha256(f"{CONFIG.seed}:{target}:{index}".encode()).digest()
    return random.Random(int.from_bytes(key[:8], "little"))


# -- statistics -------------------------------------------------------------------------------


@dataclass
class Finding:
    """One root: an exception type escaping from one place; the first case that showed it."""

    kind: str
    where: str
    message: str
    case: str
    trace: str
    count: int = 1


@dataclass
class Stats:
    """Cases tried by one target, their outcomes, its findings and its wall time."""

    target: str
    tried: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)
    seconds: float = 0.0
    slowest: tuple[float, str] = (0.0, "")

    def report(self) -> str:
        """The findings, one paragraph each, for the failure message."""
        lines = [f"{self.target}: {len(self.findings)} finding(s) in {self.tried} cases "
                 f"(seed {CONFIG.seed})"]
        for finding in self.findings.values():
            lines += [f"- {finding.kind} at {finding.where} ({finding.count} cases): "
                      f"{finding.message}", f"  first case: {finding.case}",
                      "  " + finding.trace.replace("\n", "\n  ")]
        return "\n".join(lines)


STATS: dict[str, Stats] = {}


def stats_for(target: str) -> Stats:
    return STATS.setdefault(target, Stats(target))


# -- bounds -----------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """A case ran past its time bound (a BaseException, so no ``except Exception`` eats it)."""


class ForbiddenWrite(BaseException):
    """A case wrote, renamed or removed a file outside its temporary folder."""


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {  # event -> indices of its path arguments that are written
    "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
    "os.symlink": (1,), "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
    "shutil.copytree": (1,), "shutil.move": (0, 1), "shutil.chown": (0,),
    "tempfile.mkstemp": (0,), "tempfile.mkdtemp": (0,),
}


@dataclass
class _Guard:
    active: bool = False
    root: str = ""
    installed: bool = False
    alarm: bool = False  # the time bound fired (even where a callback swallowed the raise)
    violations: list[str] = field(default_factory=list)


_GUARD = _Guard()


def _allowed(path: object) -> bool:
    if isinstance(path, int) or path is None:
        return True  # a file descriptor: its open was checked
    try:
        text = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    return (text == os.devnull or text.startswith(_GUARD.root + os.sep) or text == _GUARD.root
            or f"{os.sep}__pycache__{os.sep}" in text)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _GUARD.active:
        return
    if event == "open":
        path, mode, flags = (*args, None, None)[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        paths: tuple[object, ...] = (path,) if writes else ()
    elif event in _PATH_EVENTS:
        paths = tuple(args[i] for i in _PATH_EVENTS[event] if i < len(args))
    else:
        return
    for path in paths:
        if not _allowed(path):
            _GUARD.active = False  # the report itself must not trip the guard
            _GUARD.violations.append(f"{event} {path!r}")
            raise ForbiddenWrite(f"{event} {path!r} outside the case folder {_GUARD.root}")


def _install_guard() -> None:
    """Audit hooks cannot be removed: install one, once, gated by ``_GUARD.active``."""
    if not _GUARD.installed:
        sys.addaudithook(_audit)
        _GUARD.installed = True


def _vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    _GUARD.alarm = True
    raise CaseTimeout(f"the case ran longer than {CONFIG.timeout_s} s")


@contextlib.contextmanager
def _memory_bound() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        limit = _vm_bytes() + CONFIG.memory_mib * 2**20
    except OSError:  # no /proc: no memory bound
        yield
        return
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def bounded(folder: Path) -> Iterator[None]:
    """Run the body under the time, memory and write bounds, writes allowed in ``folder``."""
    _install_guard()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CONFIG.timeout_s)
    _GUARD.root, _GUARD.active, _GUARD.alarm = os.path.realpath(folder), True, False
    try:
        with _memory_bound():
            yield
    finally:
        _GUARD.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- running a case ---------------------------------------------------------------------------

MAX_MESSAGE = 4096
_GRAPHRT = os.sep + "graphrt" + os.sep


def _where(err: BaseException) -> str:
    """The innermost graphrt frame of the traceback (or the innermost frame at all)."""
    frames = traceback.extract_tb(err.__traceback__)
    inside = [f for f in frames if _GRAPHRT in f.filename and "/tests/" not in f.filename]
    frame = (inside or frames or [None])[-1]
    if frame is None:
        return "?"
    name = frame.filename.split(_GRAPHRT, 1)[-1] if _GRAPHRT in frame.filename else \
        os.path.basename(frame.filename)
    return f"{name}:{frame.lineno} ({frame.name})"


def _message(err: BaseException) -> str:
    try:
        text = str(err)
    except Exception as inner:  # the message itself cannot be built
        text = f"<str() raised {type(inner).__name__}: {inner}>"
    return text if len(text) < 300 else f"{text[:300]}... ({len(text)} chars)"


def record(stats: Stats, kind: str, where: str, err: BaseException | None, message: str,
           case: str) -> None:
    """Count a finding under its root (kind, where); keep the first case's details."""
    key = (kind, where)
    if key in stats.findings:
        stats.findings[key].count += 1
        return
    trace = "".join(traceback.format_exception(err)[-6:]) if err is not None else ""
    stats.findings[key] = Finding(kind, where, message, case, trace.rstrip())


Case = Callable[[Path], str | None]


def run_case(stats: Stats, case: str, body: Case) -> str:
    """Run one case in a fresh temporary folder under the bounds; classify and count it.

    ``body(folder)`` returns the outcome's name when it succeeds (``"ran"``, ``"loaded"``).
    A :class:`graphrt.GraphrtError` counts as ``refused:<class>``; anything else is a finding.
    """
    stats.tried += 1
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphrt-fuzz-") as name:
        folder = Path(name)
        try:
            with bounded(folder):
                outcome = body(folder) or "ok"
            if _GUARD.alarm:  # the CaseTimeout was raised where something swallowed it
                raise CaseTimeout(f"the case ran longer than {CONFIG.timeout_s} s")
        except graphrt.GraphrtError as err:
            outcome = f"refused:{type(err).__name__}"
            text = _message(err)
            if len(str(err)) > MAX_MESSAGE:
                record(stats, "oversized message", _where(err), err,
                       f"{type(err).__name__} message of {len(str(err))} chars: {text}", case)
        except CaseTimeout as err:
            outcome = "timeout"
            record(stats, "timeout", _where(err), err, str(err), case)
        except ForbiddenWrite as err:
            outcome = "write"
            record(stats, "write outside the case folder", _where(err), err, str(err), case)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # the point: anything that is not a GraphrtError
            outcome = type(err).__name__
            record(stats, type(err).__name__, _where(err), err, _message(err), case)
    stats.outcomes[outcome] += 1
    elapsed = time.perf_counter() - start
    if elapsed > stats.slowest[0]:
        stats.slowest = (elapsed, case)
    return outcome


def run_target(target: str, count: int, make_case: Callable[[int], tuple[str, Case]]) -> Stats:
    """Run ``count`` seeded cases of a target (case ``i`` made by ``make_case(i)``)."""
    stats = stats_for(target)
    start = time.perf_counter()
    with quiet():
        for index in range(count):
            label, body = make_case(index)
            run_case(stats, f"{target} #{index} (seed {CONFIG.seed}): {label}", body)
    stats.seconds += time.perf_counter() - start
    return stats


def run_hypothesis(target: str, count: int, draw_case: Callable[[Any], tuple[str, Case]]
                   ) -> Stats:
    """Run ``count`` hypothesis examples of a target; ``draw_case(data)`` draws one case.

    Only generation runs (no shrinking: a finding does not stop the run, every case is
    counted); the seed is ``GRAPHRT_FUZZ_SEED`` with the target's name, so CI is reproducible.
    """
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    stats = stats_for(target)

    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def examples(data: Any) -> None:
        label, body = draw_case(data)
        run_case(stats, f"{target} (hypothesis, seed {CONFIG.seed}): {label}", body)

    start = time.perf_counter()
    with quiet():
        seed(CONFIG.seed * 1000 + sum(target.encode()))(examples)()
    stats.seconds += time.perf_counter() - start
    return stats


def fail_on_findings(stats: Stats) -> None:
    """Fail the target's test if it found anything (known findings are not silenced)."""
    if stats.findings:
        import pytest

        pytest.fail(stats.report(), pytrace=False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No graphrt log lines (inputs never set, fallbacks) or numpy warnings while fuzzing."""
    logger = logging.getLogger("graphrt")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def summary_lines() -> list[str]:
    """One line per target: cases, wall time, outcomes; then the totals."""
    lines = []
    total = 0
    for stats in STATS.values():
        total += stats.tried
        outcomes = ", ".join(f"{name} {count}" for name, count in
                             sorted(stats.outcomes.items(), key=lambda kv: -kv[1]))
        lines.append(f"{stats.target:<22} {stats.tried:>7} cases {stats.seconds:7.1f} s  "
                     f"{outcomes}")
    mode = "long" if CONFIG.long else "short"
    lines.append(f"{'total':<22} {total:>7} cases ({mode} budget, seed {CONFIG.seed}, "
                 f"{CONFIG.timeout_s} s and {CONFIG.memory_mib} MiB a case)")
    return lines
