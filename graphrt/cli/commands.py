"""The ``graphrt`` command table, the parser built from it, and :func:`main`.

Every command is one row of :data:`COMMANDS`: its name, one line of help, a function that adds
its arguments and a handler. A command lives in a module of its own; nothing registers itself
when imported, so this table is the whole list.

Example:
    >>> [command.name for command in COMMANDS]
    ['inspect', 'validate', 'run', 'bench', 'bundle', 'convert', 'serve']
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._version import __version__
from ..errors import GraphrtError
from . import bench, bundle, convert, inspect, run, serve, validate
from .common import UsageError

__all__ = ["COMMANDS", "Command", "Configure", "Handler", "build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]
"""A command: takes the parsed arguments, prints its result, returns the exit status."""

Configure = Callable[[argparse.ArgumentParser], None]
"""Adds a command's arguments to its parser."""


@dataclass(frozen=True)
class Command:
    """One command: its name, one-line help, argument set-up and handler."""

    name: str
    help: str
    configure: Configure
    handler: Handler


COMMANDS: tuple[Command, ...] = (
    Command("inspect", "show a graph's or a bundle's inputs, outputs, ops and placement (plans "
            "only; runs nothing)", inspect.configure, inspect.inspect_command),
    Command("validate", "check that a graph (with --lib, against its lib) or a bundle is "
            "consistent and can be placed on the devices, allocating nothing",
            validate.configure, validate.validate_command),
    Command("run", "run a bundle once (random inputs unless given) and summarize its outputs",
            run.configure, run.run_command),
    Command("bench", "time a bundle's runs: median, p10, p90 and graphrt's host overhead per "
            "run", bench.configure, bench.bench_command),
    Command("bundle", "write a bundle from a graph JSON file, its declarative lib and its "
            "params (a TVM params blob, .safetensors or .npz)", bundle.configure,
            bundle.bundle_command),
    Command("convert", "convert an ONNX model into a bundle (needs graphrt[onnx]); running "
            "the bundle does not need onnx", convert.configure, convert.convert_command),
    Command("serve", "serve bundles and ONNX models over the Open Inference Protocol (KServe "
            "v2, Triton's HTTP/gRPC API) with dynamic batching (needs graphrt[serve])",
            serve.configure, serve.serve_command),
)
"""Every ``graphrt`` command, in the order ``graphrt --help`` lists them."""


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The ``graphrt`` argument parser, with one subparser per command.

    Raises:
        ValueError: two commands of the same name.

    Example:
        >>> args = build_parser().parse_args(["validate", "g.json", "--device", "sim"])
        >>> args.command, args.graph, args.devices
        ('validate', 'g.json', [graphrt.device('sim:0')])
    """
    parser = argparse.ArgumentParser(
        prog="graphrt", description="Inspect, check, bundle, run and time TVM-format model "
                                    "graphs and graphrt bundles.")
    parser.add_argument("--version", action="version", version=f"graphrt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    seen: set[str] = set()
    for command in commands:
        if command.name in seen:
            raise ValueError(f"graphrt command {command.name!r} is listed twice")
        seen.add(command.name)
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(handler=command.handler, command_parser=sub)
    return parser


def _drop_stdout() -> None:
    """After a closed pipe (``graphrt inspect ... | head -1``): point stdout at the null device,
    so the interpreter's last flush has nowhere to fail (as Python's documentation on
    SIGPIPE recommends)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a file (captured, closed)
        pass


def _dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as err:
        command_parser: argparse.ArgumentParser = args.command_parser
        command_parser.error(str(err))  # exits with status 2, as argparse's own errors
    except BrokenPipeError:
        raise
    except (GraphrtError, OSError) as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None, commands: Sequence[Command] = COMMANDS) -> int:
    """Run the ``graphrt`` command line; returns the exit status.

    A :class:`graphrt.GraphrtError` (or an ``OSError``, such as an output folder that cannot
    be written) is printed to stderr as ``ErrorType: message`` and gives status 1. A usage
    error (unknown command, missing or malformed argument, a device that does not parse, an
    option given twice) prints the command's usage and exits with status 2 through
    ``SystemExit``, as argparse does. Output to a pipe closed early ends quietly, status 1.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.
        commands: the command table (:data:`COMMANDS`).

    Example:
        >>> main(["validate", "missing.json"])  # doctest: +SKIP
        1
    """
    parser = build_parser(commands)
    try:
        try:
            return _dispatch(parser, argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, while it can still be caught
    except BrokenPipeError:
        _drop_stdout()
        return 1
