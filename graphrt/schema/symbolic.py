"""Symbolic dimensions: a variable (``"n"``) or a small integer expression (``"2*n+1"``).

A graph may give any dimension of its ``shape`` column as a string instead of an int. The
string is parsed here, never evaluated by Python: the grammar is integers, variable names,
``+``, ``-``, ``*``, ``//``, parentheses and ``min(a, b)`` / ``max(a, b)`` (a detector keeps
``min(300, count)`` candidates). Every variable must be declared with bounds in the
graph's ``shape_vars``, and :meth:`Expr.bounds` derives an expression's range from them by
interval arithmetic, which is what storage is planned for.

Example:
    >>> e = parse_dim("2*n + 1")
    >>> e.evaluate({"n": 3}), e.bounds({"n": (1, 64)}), e.variables
    (7, (3, 129), frozenset({'n'}))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Union

__all__ = ["Dim", "Expr", "ShapeVar", "dim_text", "parse_dim"]

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*(),]))", re.ASCII)
_FUNCTIONS = ("min", "max")
_MAX_TEXT = 200
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class ShapeVar:
    """A declared dimension variable: values range over ``[min, max]``."""

    name: str
    min: int
    max: int


@dataclass(frozen=True)
class Expr:
    """A parsed dimension expression: a tree of ``("+", a, b)`` nodes, names and ints."""

    text: str
    tree: _Tree
    variables: frozenset[str]

    @property
    def is_variable(self) -> bool:
        """True for a bare variable (``"n"``), which an input's shape can bind."""
        return isinstance(self.tree, str)

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value under ``env`` (every variable of the expression must be in it)."""
        return _evaluate(self.tree, env)

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """Smallest and largest value over the variables' ``(min, max)`` ranges."""
        return _bounds(self.tree, ranges)

    def __str__(self) -> str:
        return self.text


_Tree = Union[int, str, tuple[str, "_Tree", "_Tree"]]  # noqa: UP007 (recursive alias)

Dim = Union[int, Expr]  # noqa: UP007 (a runtime alias used in isinstance-free annotations)
"""One dimension of a shape: a fixed size or a symbolic expression."""


def dim_text(dim: Dim) -> int | str:
    """A dimension as it is written in graph JSON (an int, or the expression's text)."""
    return dim if isinstance(dim, int) else dim.text


def parse_dim(text: str) -> Expr:
    """Parse a symbolic dimension.

    Raises:
        ValueError: not an expression of the grammar (the message says where); the graph
            loader turns it into a ``GraphFormatError`` naming the entry.

    Example:
        >>> parse_dim("((n))").text, parse_dim("(n)").is_variable, parse_dim(" 2*n ").text
        ('n', True, '2 * n')
    """
    if not isinstance(text, str):
        raise ValueError(f"a dimension is an int or an expression (str), given "
                         f"{type(text).__name__}")
    if len(text) > _MAX_TEXT:
        raise ValueError(f"dimension expression is longer than {_MAX_TEXT} characters")
    tokens = _tokenize(text)
    parser = _Parser(tokens, text)
    tree = parser.expression()
    if parser.pos != len(tokens):
        raise ValueError(f"unexpected {tokens[parser.pos]!r} in dimension {text!r}")
    names = frozenset(_names(tree))
    if not names:
        raise ValueError(f"dimension {text!r} has no variable; write it as an integer")
    # A bare variable, however parenthesized ("(n)", " n"), is written as its name: the name
    # is what binds it and what shape_vars declares.
    return Expr(tree if isinstance(tree, str) else " ".join(tokens), tree, names)


def is_name(text: str) -> bool:
    """Whether ``text`` can name a shape variable."""
    return bool(_NAME.match(text))


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    stripped = text.rstrip(" \t\r\n\f\v")
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if match is None:
            raise ValueError(f"cannot read dimension {text!r} at character {pos}: only "
                             "integers, names, + - * //, parentheses, min and max are "
                             "allowed")
        tokens.append(match.group(match.lastindex or 0))
        pos = match.end()
    if not tokens:
        raise ValueError("dimension expression is empty")
    return tokens


class _Parser:
    """Recursive descent: expression = term (('+'|'-') term)*; term = atom (('*'|'//') atom)*."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens, self.text, self.pos = tokens, text, 0

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expression(self) -> _Tree:
        tree = self.term()
        while self._peek() in ("+", "-"):
            op = self.tokens[self.pos]
            self.pos += 1
            tree = (op, tree, self.term())
        return tree

    def term(self) -> _Tree:
        tree = self.atom()
        while self._peek() in ("*", "//"):
            op = self.tokens[self.pos]
            self.pos += 1
            tree = (op, tree, self.atom())
        return tree

    def atom(self) -> _Tree:
        token = self._peek()
        if token is None:
            raise ValueError(f"dimension {self.text!r} ends too early")
        self.pos += 1
        if token == "(":
            tree = self.expression()
            if self._peek() != ")":
                raise ValueError(f"dimension {self.text!r} lacks a closing parenthesis")
            self.pos += 1
            return tree
        if token.isdigit():
            return int(token)
        if token in _FUNCTIONS and self._peek() == "(":
            self.pos += 1
            first = self.expression()
            if self._peek() != ",":
                raise ValueError(f"{token}() in dimension {self.text!r} takes two arguments")
            self.pos += 1
            second = self.expression()
            if self._peek() != ")":
                raise ValueError(f"dimension {self.text!r} lacks a closing parenthesis")
            self.pos += 1
            return (token, first, second)
        if is_name(token):
            return token
        raise ValueError(f"unexpected {token!r} in dimension {self.text!r}")


def _names(tree: _Tree) -> set[str]:
    if isinstance(tree, int):
        return set()
    if isinstance(tree, str):
        return {tree}
    return _names(tree[1]) | _names(tree[2])


_APPLY: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "min": min,
    "max": max,
}


def _evaluate(tree: _Tree, env: Mapping[str, int]) -> int:
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return env[tree]
    op, left, right = tree
    a, b = _evaluate(left, env), _evaluate(right, env)
    if op == "//":
        if b == 0:
            raise ZeroDivisionError("division by zero in a dimension expression")
        return a // b
    return _APPLY[op](a, b)


def _bounds(tree: _Tree, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    if isinstance(tree, int):
        return tree, tree
    if isinstance(tree, str):
        return ranges[tree]
    op, left, right = tree
    (a_lo, a_hi), (b_lo, b_hi) = _bounds(left, ranges), _bounds(right, ranges)
    if op == "+":
        return a_lo + b_lo, a_hi + b_hi
    if op == "-":
        return a_lo - b_hi, a_hi - b_lo
    if op in ("min", "max"):
        pick = _APPLY[op]
        return pick(a_lo, b_lo), pick(a_hi, b_hi)
    if op == "//" and b_lo <= 0 <= b_hi:
        raise ValueError("a divisor in a dimension expression can be 0")
    corners = [a * b if op == "*" else a // b for a in (a_lo, a_hi) for b in (b_lo, b_hi)]
    return min(corners), max(corners)
