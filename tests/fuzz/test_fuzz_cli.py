"""Fuzz the ``graphrt`` command line in-process (seeded): inspect, validate, run, bench and
bundle on mutated graph, lib and bundle files, ``--input NAME=FILE.npy`` with mutated ``.npy``
files (headers claiming huge shapes, object dtypes, truncated data, a FIFO), and mutated argv
values. A case may only exit 0, 1 (one line on stderr) or 2 (usage), never with a traceback."""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

import graphrt
from graphrt import cli

from . import corpus, harness
from .harness import CONFIG, Case
from .mutators import ODD_CHARS, dumps, mutate_bytes, mutated_document
from .test_fuzz_bundle import mutate_members, seed_members

MODEL = corpus.EXAMPLES / "models" / "mlp"
ODD_ARGS = ("", "-", "--", "=", "x=", "=y", "cpu:-1", "cuda:99", "sim:1e3", "nan", "-1", "0",
            "1e999", "99999999999999999999999", "9" * 5000, "--device", "--input", "\u0663",
            "\u00b2", "x" * 10_000, "/dev/null", "/nonexistent/graph.json", ".", "cuda=cpu",
            "2=sim:0", "x=/dev/null", "x=.", "\udcff")
NPY_SHAPES = (b"(10000000000, 10000000000)", b"(-1,)", b"(2**70,)", b"(8, 64, 1, 1)",
              b"()", b"(0,)", b"(99999999999999999999999,)", b"(8,64)", b"(3.5,)")
NPY_DESCRS = (b"'|O'", b"'<f8'", b"'<i4'", b"'|V16'", b"'<U3'", b"'>f4'", b"'<f2'", b"'x'",
              b"[('a', '<f4')]")


@cache
def npy_seed() -> bytes:
    stream = io.BytesIO()
    np.save(stream, np.zeros((8, 64), "float32"))
    return stream.getvalue()


def mutated_npy(rng: random.Random) -> tuple[bytes, str]:
    """A .npy of the mlp's input ``x`` with its header or data damaged."""
    data = npy_seed()
    roll = rng.random()
    if roll < 0.3:
        return re.sub(rb"\(8, 64\)", rng.choice(NPY_SHAPES), data), "shape claim"
    if roll < 0.5:
        return re.sub(rb"'<f4'", rng.choice(NPY_DESCRS), data), "descr"
    if roll < 0.6:
        return data.replace(b"False", b"True"), "fortran order"
    if roll < 0.75:
        return data[: rng.randrange(len(data))], "truncated"
    mutated, done = mutate_bytes(data, rng, region=(0, 128))
    return mutated, ", ".join(done)


def write_files(folder: Path, rng: random.Random) -> tuple[dict[str, str], list[str]]:
    """The files a command line may name: graph, lib, params, bundle, .npy, FIFO, output."""
    done = []
    graph = corpus.seed_bytes(MODEL / "graph.json")
    if rng.random() < 0.5:
        document, what = mutated_document(graph, rng)
        graph = dumps(document).encode()
        done += what
    (folder / "graph.json").write_bytes(graph)
    (folder / "lib.json").write_bytes(corpus.seed_bytes(MODEL / "lib.json"))
    members = dict(seed_members("mlp"))
    if rng.random() < 0.3:
        done += mutate_members(members, rng)
    bundle = folder / "bundle"
    bundle.mkdir()
    for name, content in members.items():
        (bundle / name).write_bytes(content)
    (folder / "params.safetensors").write_bytes(members["params.safetensors"])
    npy, what = mutated_npy(rng)
    (folder / "x.npy").write_bytes(npy)
    done.append(f"x.npy: {what}")
    if rng.random() < 0.05:
        os.mkfifo(folder / "fifo")
        done.append("a FIFO")
    paths = {"graph": str(folder / "graph.json"), "lib": str(folder / "lib.json"),
             "params": str(folder / "params.safetensors"), "bundle": str(bundle),
             "npy": str(folder / "x.npy"), "out": str(folder / "out")}
    if (folder / "fifo").exists():
        paths["fifo"] = str(folder / "fifo")
    return paths, done


def argv_for(paths: dict[str, str], rng: random.Random) -> list[str]:
    command = rng.choice(["inspect", "inspect", "validate", "run", "run", "bench", "bundle"])
    target = paths.get("fifo")
    if command in ("inspect", "validate"):
        argv = [command, target or rng.choice([paths["graph"], paths["bundle"]])]
        argv += rng.choice([[], ["--lib", paths["lib"]]])
        if command == "inspect":
            argv += rng.choice([[], ["--json"], ["--dot"]])
    elif command in ("run", "bench"):
        npy = target or paths["npy"]
        argv = [command, paths["bundle"], "--input", f"x={npy}"]
        argv += rng.choice([[], ["--seed", str(rng.randint(-5, 2**70))]])
        if command == "run":
            argv += rng.choice([[], ["--output", paths["out"]]])
        else:
            argv += ["--repeat", "1", "--number", "1", "--no-progress"]
    else:
        argv = ["bundle", target or paths["graph"], "--lib", paths["lib"], "--params",
                paths["params"], "-o", paths["out"]]
    argv += rng.choice([[], ["--device", "cpu"], ["--device", "sim", "--device", "cpu"],
                        ["--device-map", "cuda=sim:0"], ["--strict-placement"]])
    if command == "bundle":
        argv = [a for a in argv if a not in ("--device", "--device-map", "--strict-placement",
                                             "cpu", "sim", "cuda=sim:0")]
    return mutate_argv(argv, rng) if rng.random() < 0.3 else argv


def mutate_argv(argv: list[str], rng: random.Random) -> list[str]:
    argv = list(argv)
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(1, len(argv) + 1)
        action = rng.choice(["replace", "insert", "delete", "edit"])
        if action == "replace" and at < len(argv):
            argv[at] = rng.choice(ODD_ARGS)
        elif action == "insert":
            argv.insert(at, rng.choice(ODD_ARGS))
        elif action == "delete" and at < len(argv):
            del argv[at]
        elif at < len(argv):
            argv[at] += rng.choice(ODD_CHARS)
    return argv


def replay(seed: int, folder: Path) -> tuple[list[str], list[str]]:
    """The files (written under ``folder``) and the argv of a case; and what was mutated."""
    rng = random.Random(seed)
    paths, done = write_files(folder, rng)
    return argv_for(paths, rng), done


class CliFailure(AssertionError):
    """The command exited with a status or output the CLI promises never to give."""


def check_exit(status: object, err: str) -> str:
    if "Traceback" in err:
        raise CliFailure(f"traceback on stderr: {err[-300:]}")
    if status == 0:
        return "exit 0"
    if status == 1:
        if err.count("\n") != 1:
            raise CliFailure(f"exit 1 with {err.count(chr(10))} lines on stderr: {err[:300]}")
        return f"exit 1 {err.split(':', 1)[0]}"
    if status == 2:
        if "error:" not in err.strip().splitlines()[-1]:
            raise CliFailure(f"exit 2 without a usage error: {err[-300:]}")
        return "exit 2"
    raise CliFailure(f"exit status {status!r}: {err[-300:]}")


def cli_case(make_argv: Callable[[Path], list[str]]) -> Case:
    def body(folder: Path) -> str:
        argv = make_argv(folder)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status: object = cli.main(argv)
            except SystemExit as exit_:
                status = exit_.code
            except graphrt.GraphrtError as error:  # main must report it, not raise it
                raise CliFailure(f"{type(error).__name__} escaped main: {error}") from error
        return check_exit(status, err.getvalue())

    return body


def test_mutated_command_lines() -> None:
    def make(index: int) -> tuple[str, Case]:
        rng = harness.case_rng("cli", index)
        seed = rng.randrange(2**32)
        seed_members("mlp")  # saved once, outside the case's write bounds
        return f"replay({seed}, folder)", cli_case(lambda folder: replay(seed, folder)[0])

    stats = harness.run_target("cli", CONFIG.budget(500, 5_000), make)
    harness.fail_on_findings(stats)
