"""Every code block of README.md and docs/ runs as written.

Python blocks run one by one, each alone in a fresh namespace, from a scratch directory that
sees the repository's ``examples/`` (so what they write lands there, not in the checkout).
JSON blocks must parse. ``graphrt ...`` lines of shell blocks run through the CLI unless they
are a synopsis (they name placeholders such as ``GRAPH_OR_BUNDLE``) or pipe into another
tool; a ``cuda`` device becomes ``sim`` unless ``GRAPHRT_GPU=1``. A shell block that makes
its own input with ``python examples/...`` is a session: its python and graphrt lines run in
order in one scratch directory. A shell block that starts ``graphrt serve ... &`` is a
serving session: the server starts on a free port (in place of the block's), its ``curl`` lines
run against it in order, and ``kill %1`` must stop it cleanly. The set-up and benchmark
commands are what CI and ``benchmarks/`` run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            if match.group(1) == language:
                line = text[:match.start()].count("\n") + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", match.group(2)))
    return found


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    return tmp_path


OPTIONAL = frozenset({"tritonclient", "ray", "starlette", "uvicorn", "grpc", "prometheus_client",
                      "torch", "torchvision", "transformers", "onnxscript", "cupy", "PIL"})
"""Packages of graphrt's extras and of the examples: a block that imports one the environment
lacks is skipped (the test extra installs every one of them, so CI runs every block)."""


@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=lambda v: v.split("\n")[0])
def test_python_block_runs(where: str, code: str, scratch: Path) -> None:
    try:
        exec(compile(code, where, "exec"), {"__name__": "__doc_block__"})
    except ModuleNotFoundError as err:
        if (err.name or "").partition(".")[0] not in OPTIONAL:
            raise
        pytest.skip(f"the block needs {err.name}, which this environment lacks")


@pytest.mark.parametrize(("where", "code"), blocks("json"), ids=lambda v: v.split("\n")[0])
def test_json_block_parses(where: str, code: str) -> None:
    document = json.loads(code)
    if "nodes" in document:  # a whole graph: it loads
        import graphrt

        graphrt.load_graph(document)


def _command(line: str) -> str:
    """A shell line without its comment and without the ``.venv/bin/`` the README's commands
    run from (the tests run in that environment already)."""
    command = line.split("#", 1)[0].strip()
    return command.removeprefix(".venv/bin/")


def _pip_installs(code: str) -> list[str]:
    """The packages (as import names) a block's ``pip install`` lines name, less this
    project itself (``-e .``, ``'.[onnx]'``)."""
    names = []
    for line in code.splitlines():
        words = shlex.split(_command(line))
        if words[:2] != ["pip", "install"]:
            continue
        for word in words[2:]:
            if word.startswith("-") or word.startswith("."):
                continue
            names.append(re.split(r"[<>=!\[;]", word, maxsplit=1)[0].replace("-", "_"))
    return names


def _is_session(code: str) -> bool:
    return any(_command(line).startswith("python examples/") for line in code.splitlines())


def _is_serving(code: str) -> bool:
    return any(_command(line).startswith("graphrt serve ") and _command(line).endswith("&")
               for line in code.splitlines())


def cli_lines() -> list[tuple[str, str]]:
    lines = []
    for where, code in blocks("sh"):
        if _is_session(code) or _is_serving(code):
            continue
        for line in code.splitlines():
            command = _command(line)
            if (command.startswith("graphrt ") and "|" not in command
                    and not re.search(r"\b[A-Z][A-Z_]{2,}\b", command)):
                lines.append((where, command))
    return lines


@pytest.mark.parametrize(("where", "command"), cli_lines(), ids=lambda v: v)
def test_cli_line_runs(where: str, command: str, scratch: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    from graphrt.cli import main

    argv = shlex.split(command)[1:]
    if any(arg.startswith("cuda") for arg in argv) and os.environ.get("GRAPHRT_GPU") != "1":
        argv = [arg.replace("cuda", "sim") if arg.startswith("cuda") else arg for arg in argv]
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("where", "code"), [b for b in blocks("sh") if _is_session(b[1])
                                             and not _is_serving(b[1])],
                         ids=lambda v: v.split("\n")[0])
def test_session_block_runs(where: str, code: str, scratch: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    from graphrt.cli import main

    missing = [name for name in _pip_installs(code) if importlib.util.find_spec(name) is None]
    if missing:  # the block installs what this test environment lacks (torch, say)
        pytest.skip(f"the block installs {', '.join(missing)}, which this environment lacks")
    for line in code.splitlines():
        command = _command(line)  # pip lines: the test environment has every extra
        if command.startswith("python "):
            subprocess.run([sys.executable, *shlex.split(command)[1:]], check=True)
        elif command.startswith("graphrt "):
            assert main(shlex.split(command)[1:]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("where", "code"), [b for b in blocks("sh") if _is_serving(b[1])],
                         ids=lambda v: v.split("\n")[0])
def test_serving_block_runs(where: str, code: str, scratch: Path) -> None:
    pytest.importorskip("starlette")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    server: subprocess.Popen[bytes] | None = None
    try:
        for line in code.splitlines():
            command = _command(line)
            written = re.search(r"--port (\d+)", command)
            if command.startswith("python "):
                subprocess.run([sys.executable, *shlex.split(command)[1:]], check=True)
            elif command.startswith("graphrt serve "):
                assert written, f"{where}: give the server's --port"
                argv = shlex.split(command.removesuffix("&").replace(written.group(1), port))
                server = subprocess.Popen([sys.executable, "-m", "graphrt", *argv[1:]])
                block_port = written.group(1)
            elif command.startswith("curl "):
                argv = shlex.split(command.replace(f":{block_port}", f":{port}"))
                done = subprocess.run(argv, capture_output=True, timeout=120)
                assert done.returncode == 0, (where, command, done.stderr)
                assert b'"error"' not in done.stdout, (where, command, done.stdout)
            elif command == "kill %1":
                assert server is not None
                server.terminate()
                assert server.wait(60) == 0, f"{where}: the server did not stop cleanly"
                server = None
    finally:
        if server is not None:
            server.kill()
            server.wait()
