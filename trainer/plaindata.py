"""JSON, JSON lines and TOML from files: every one of them is untrusted (a user's, a copied one, a damaged
one). Text that is not UTF-8, that does not parse, or that nests deeper than any file mcutrain reads needs
(MAX_DEPTH) is the caller's error class with one line naming the file and where, never a
UnicodeDecodeError, a RecursionError or a structure so deep that the code reading it later overflows."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator, List, Tuple, Type, Union

from .files import read_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# lists and tables inside each other, at most (an architecture of 64 nested compositions, each a table and
# its list of layers, needs about 130; no file mcutrain reads needs more)
MAX_DEPTH = 200


def nesting(v: Any, limit: int) -> int:
    """How deeply lists and mappings nest in v (a scalar: 0), counting no further than limit + 1; without
    recursion, so any depth is safe to measure."""
    depth, level = 0, [v]
    while level and depth <= limit:
        nxt: List[Any] = []
        for item in level:
            if isinstance(item, dict):
                nxt.extend(item.values())
            elif isinstance(item, list):
                nxt.extend(item)
        level, depth = nxt, depth + 1 if nxt else depth
    return depth


def decode_text(raw: bytes, what: str, error: Type[Exception]) -> str:
    """raw as UTF-8 text (a byte-order mark dropped): `error` naming the line and the first byte that is not
    UTF-8 otherwise."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise error(
            f"{what} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line} (offset {e.start}); save it as UTF-8"
        ) from None


def _deep(what: str, error: Type[Exception], limit: int) -> Exception:
    return error(f"{what} nests lists or tables deeper than {limit} levels: no file mcutrain reads needs that")


def parse_json(raw: Union[bytes, str], what: str, error: Type[Exception], max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON text; `error` (one line naming `what` and the line and column) for text that is
    not UTF-8 or not JSON, or that nests deeper than max_depth."""
    text = decode_text(raw, what, error) if isinstance(raw, bytes) else raw
    try:
        value = json.loads(text)
    except RecursionError:
        raise _deep(what, error, max_depth) from None
    except ValueError as e:
        raise error(f"{what} is not valid JSON: {e}") from None
    if nesting(value, max_depth) > max_depth:
        raise _deep(what, error, max_depth)
    return value


def parse_toml(raw: Union[bytes, str], what: str, error: Type[Exception], max_depth: int = MAX_DEPTH) -> Any:
    """The table of a TOML text; `error` as parse_json's."""
    text = decode_text(raw, what, error) if isinstance(raw, bytes) else raw
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise _deep(what, error, max_depth) from None
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise error(f"{what} is not valid TOML: {e}") from None
    if nesting(value, max_depth) > max_depth:
        raise _deep(what, error, max_depth)
    return value


def read_json(path: Union[str, Path], limit: int, what: str, error: Type[Exception]) -> Any:
    """The value of a JSON file of at most `limit` bytes (files.read_bounded, then parse_json)."""
    return parse_json(read_bounded(path, limit, what, error), f"{what} {path}", error)


def read_toml(path: Union[str, Path], limit: int, what: str, error: Type[Exception]) -> Any:
    """The table of a TOML file of at most `limit` bytes (files.read_bounded, then parse_toml)."""
    return parse_toml(read_bounded(path, limit, what, error), f"{what} {path}", error)


def json_lines(raw: bytes, what: str, error: Type[Exception]) -> Iterator[Tuple[int, Any]]:
    """(line number, value) of each non-empty line of a JSON-lines text. A last line that does not parse is
    skipped (a writer was stopped in the middle of it); any other line that does not is `error`."""
    lines = decode_text(raw, what, error).split("\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            value = parse_json(line, f"{what} line {i + 1}", error)
        except error:
            if i == last:
                return
            raise
        yield i + 1, value
