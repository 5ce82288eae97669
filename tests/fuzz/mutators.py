"""Mutations of JSON documents (structural) and of byte strings (flip, insert, delete, cut).

A structural mutation works on the parsed document and keeps what JSON text cannot hold from a
Python dict apart: :class:`Deep` (nesting too deep to build recursively), :class:`Dup` (an
object with a repeated key) and integers past Python's int-to-str limit; :func:`dumps` writes
any of them as JSON text (``NaN``/``Infinity`` too) and :func:`plain` turns them into the dict
a caller could pass directly.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

Path = tuple[Any, ...]
ValueSource = Callable[[], Any]


@dataclass(frozen=True)
class Deep:
    """A list nested ``depth`` times around ``leaf``."""

    depth: int
    leaf: Any = 0


@dataclass(frozen=True)
class Dup:
    """An object whose key ``key`` appears twice: first ``first``, then the rest of ``rest``."""

    key: str
    first: Any
    rest: dict[str, Any]


HUGE = 10**5000  # past Python's default int-to-str limit (4300 digits)

INTERESTING: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 3, 7, 255, 256, 2**31 - 1, 2**31, -(2**31), 2**32,
    2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**20,
    10**300, HUGE, -HUGE, 0.5, -0.0, 1e308, math.nan, math.inf, -math.inf,
    "", "0", "1", "-1", "2", "7", "+3", " 3", "3 ", "3_0", "1e3", "0x10", "\u0663", "\uff11",
    "99999999999999999999999", "9" * 5000, "nan", "null", "\x00", "\ud800", "\u202e", "é",
    "float32", "float16", "bfloat16", "int8", "uint64", "bool", "int4", "float8", "object",
    "list_int", "list_shape", "list_str", "size_t", "tvm_op", "null", "__nop", "__copy",
    "global", "cuda", "x" * 100_000, [], {}, [[]], [0], [-1], [0, 0, 0], [[0, 0, 0]], [[0, 0]],
    [2**40, 2**40], [0, 2**62], [2**31, 2**31, 2**31], [1] * 64, {"a": 1},
    Deep(64), Deep(1100), Deep(100_000),
)


def interesting(rng: random.Random) -> Any:
    """A value from :data:`INTERESTING`, now and then a freshly random one."""
    roll = rng.random()
    if roll < 0.15:
        return rng.randint(-(2**rng.randint(1, 70)), 2**rng.randint(1, 70))
    if roll < 0.2:
        return "".join(chr(rng.randint(1, 0x2FFFF)) for _ in range(rng.randint(1, 12)))
    return copy.deepcopy(rng.choice(INTERESTING))


# -- JSON text --------------------------------------------------------------------------------


def _int_text(value: int) -> str:
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return str(value)
    finally:
        sys.set_int_max_str_digits(limit)


def dumps(value: Any) -> str:
    """JSON text of a mutated document (NaN, Infinity, huge ints, repeated keys, deep nests)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):  # Deep, Dup or a huge int inside
        return _dumps(value)


def _dumps(value: Any) -> str:
    if isinstance(value, Deep):
        return "[" * value.depth + _dumps(value.leaf) + "]" * value.depth
    if isinstance(value, Dup):
        items = [(value.key, value.first), *value.rest.items()]
        return "{" + ",".join(f"{json.dumps(k)}:{_dumps(v)}" for k, v in items) + "}"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        return json.dumps(value)  # NaN, Infinity, -Infinity as Python's json writes them
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


def plain(value: Any) -> Any:
    """The document as plain Python values (a :class:`Deep` built without recursion)."""
    if isinstance(value, Deep):
        nested: Any = plain(value.leaf)
        for _ in range(value.depth):
            nested = [nested]
        return nested
    if isinstance(value, Dup):
        return {**{k: plain(v) for k, v in value.rest.items()}, value.key: plain(value.first)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# -- structural mutations ---------------------------------------------------------------------


def random_path(doc: Any, rng: random.Random, stop: float = 0.3) -> Path | None:
    """A path picked by walking down from the root, stopping at each level with ``stop``."""
    path: Path = ()
    node = doc
    while True:
        keys = list(node) if isinstance(node, dict) else (
            range(len(node)) if isinstance(node, list) else None)
        if not keys:
            return path or None
        key = rng.choice(keys)
        path, node = (*path, key), node[key]
        if rng.random() < stop:
            return path


def _parent(doc: Any, path: Path) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _swap_type(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return rng.choice([str(value), float(value) if abs(value) < 2**1000 else 1e308,
                           [value], bool(value)])
    if isinstance(value, float):
        return rng.choice([str(value), int(value) if math.isfinite(value) else 0])
    if isinstance(value, str):
        return rng.choice([[value], {value: value}, len(value), value.encode().hex()])
    if isinstance(value, list):
        return rng.choice([{str(i): v for i, v in enumerate(value)}, dumps(value), len(value),
                           value[0] if value else None])
    if isinstance(value, dict):
        return rng.choice([list(value.values()), list(value), dumps(value)])
    return rng.choice(["null", 0, []])


def _tweak_number(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return rng.choice([str(_tweak_number(int(value), rng)), "\u0663", "\u00b2",
                               "1_0", " 1", "9" * 5000, "0x1", "1e3", "-0"])
        return value
    return rng.choice([value + 1, value - 1, -value, value * 2**32, value + 2**31, 0,
                       value * 10**40])


MAX_TEXT = 2_000_000  # a long list is at most about this many characters of JSON


def _size(value: Any) -> int:
    try:
        return len(json.dumps(value)) + 1
    except (TypeError, ValueError, RecursionError):
        return 1000


ODD_CHARS = ("\u0663", "\uff11", "\u00b2", "\u2155", "_", " ", "\x00", "\u00e9", "\ud800",
             "-", ".", "9" * 5000, "\u200b", "\U0001f600")


def _edit_string(value: str, rng: random.Random) -> str:
    """``value`` with a character replaced by, or a piece inserted of, an odd character
    (non-ASCII digits, a superscript, NUL, a lone surrogate, thousands of digits)."""
    at = rng.randrange(len(value) + 1)
    piece = rng.choice(ODD_CHARS)
    if at < len(value) and rng.random() < 0.5:
        return value[:at] + piece + value[at + 1:]
    return value[:at] + piece + value[at:]


def _long_list(value: Any, rng: random.Random) -> Any:
    if isinstance(value, list) and value:
        each = max(_size(value) // len(value), 1)
        count = min(rng.choice([2, 3, 100, 10_000, 200_000]), MAX_TEXT // each)
        return (value * (count // len(value) + 1))[:max(count, 2)]
    return [value] * max(2, min(rng.choice([2, 1000, 100_000]), MAX_TEXT // _size(value)))


def mutate(doc: Any, rng: random.Random, source: ValueSource | None = None) -> str:
    """Apply one structural mutation to ``doc`` in place; returns what it did."""
    found = random_path(doc, rng, stop=rng.choice([0.0, 0.0, 0.1, 0.3, 0.6]))
    if found is None:
        return "nothing to mutate"
    path = found
    parent = _parent(doc, path)
    key = path[-1]
    value = parent[key]
    action = rng.choice(["replace", "replace", "replace", "delete", "duplicate", "swap_type",
                         "number", "number", "long_list", "splice", "rename", "shuffle"])
    if isinstance(value, str) and rng.random() < 0.5:
        action = "edit_string"
    new: Any = None
    if action == "delete":
        del parent[key]
        return f"delete {list(path)}"
    if action == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(value))
        return f"duplicate {list(path)}"
    if action == "duplicate" and isinstance(parent, dict):
        other = source() if source else interesting(rng)
        rest = {k: v for k, v in parent.items() if k != key}
        rest[key] = value
        grand = _parent(doc, path[:-1]) if len(path) > 1 else None
        if grand is None:
            return "duplicate key at the root: skipped"
        grand[path[-2]] = Dup(key, other, rest)
        return f"repeat key {list(path)} (first {describe(other)})"
    if action == "rename" and isinstance(parent, dict):
        new_key = rng.choice(["", "x", key + "_", key.upper(), "\ud800", "metadata", "attr",
                              "inputs", "shape", "__proto__"]) if isinstance(key, str) else "x"
        parent[new_key] = parent.pop(key)
        return f"rename {list(path)} to {new_key!r}"
    if action == "shuffle" and isinstance(value, list | dict):
        if isinstance(value, list):
            rng.shuffle(value)
        else:
            items = list(value.items())
            rng.shuffle(items)
            parent[key] = dict(items)
        return f"shuffle {list(path)}"
    if action == "swap_type":
        new = _swap_type(value, rng)
    elif action == "number":
        new = _tweak_number(value, rng)
    elif action == "edit_string":
        new = _edit_string(value, rng)
    elif action == "long_list":
        new = _long_list(value, rng)
    elif action == "splice":
        new = _value_at(doc, random_path(doc, rng) or ())
    else:
        action = "replace"
        new = source() if source else interesting(rng)
    parent[key] = new
    return f"{action} {list(path)} with {describe(new)}"


def _value_at(doc: Any, path: Path) -> Any:
    for key in path:
        doc = doc[key]
    return copy.deepcopy(doc)


def describe(value: Any) -> str:
    """A short text of a mutation's value, for case labels."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<int of {value.bit_length()} bits>"
    if isinstance(value, Deep):
        return f"<list nested {value.depth} deep>"
    try:
        text = repr(value)
    except ValueError:  # a huge int inside a container
        return f"<{type(value).__name__} holding a huge int>"
    return text if len(text) <= 60 else f"{text[:60]}...<{len(text)} chars>"


def mutated_document(base: Any, rng: random.Random, source: ValueSource | None = None,
                     most: int = 3) -> tuple[Any, list[str]]:
    """A copy of ``base`` (a document, or its JSON bytes) with 1..``most`` structural
    mutations (one, half of the time), and what they were."""
    doc = orjson.loads(base) if isinstance(base, bytes) else copy.deepcopy(base)
    done = []
    for _ in range(1 if rng.random() < 0.5 else rng.randint(1, most)):
        if not isinstance(doc, dict):
            break
        try:
            done.append(mutate(doc, rng, source))
        except (KeyError, IndexError, TypeError):  # a path made stale by the previous mutation
            done.append("stale path: skipped")
    return doc, done


# -- byte mutations ---------------------------------------------------------------------------

TOKENS = (b"0", b"-1", b"1e999", b"-0", b"NaN", b"Infinity", b"null", b"true", b"[]", b"{}",
          b'"', b"\\", b"\\ud800", b"\x00", b"\xff\xfe", b"\xc3", b"99999999999999999999999",
          b"1" * 5000, b"[" * 2000, b"{" * 100, b",", b":", b"\n")
_NUMBER = re.compile(rb"-?\d+")


def mutate_bytes(data: bytes, rng: random.Random, most: int = 4,
                 region: tuple[int, int] | None = None) -> tuple[bytes, list[str]]:
    """``data`` with 1..``most`` byte mutations (in ``region`` when given), and what they were."""
    out = bytearray(data)
    done = []
    for _ in range(rng.randint(1, most)):
        if not out:
            out += rng.choice(TOKENS)
            done.append("grow from empty")
            continue
        low, high = region if region else (0, len(out))
        high = min(high, len(out))
        low = min(low, high - 1) if high else 0
        at = rng.randrange(low, max(high, low + 1))
        action = rng.choice(["flip", "flip", "set", "insert", "delete", "truncate", "duplicate",
                             "token", "number"])
        if action == "flip":
            out[at] ^= 1 << rng.randrange(8)
        elif action == "set":
            out[at] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif action == "insert":
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif action == "delete":
            del out[at: at + rng.randint(1, 64)]
        elif action == "truncate":
            del out[at:]
        elif action == "duplicate":
            out[at:at] = out[at: at + rng.randint(1, 256)]
        elif action == "token":
            out[at:at] = rng.choice(TOKENS)
        else:
            numbers = list(_NUMBER.finditer(out))
            if numbers:
                match = rng.choice(numbers)
                out[match.start():match.end()] = rng.choice(
                    [b"-1", b"0", b"4294967296", b"9223372036854775808", b"1" * 400,
                     b"1" * 5000, b"1e400", b"-9223372036854775809"])
                at = match.start()
        done.append(f"{action}@{at}")
    return bytes(out), done
