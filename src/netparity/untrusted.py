"""Parsers of content read from files netparity did not write itself (or that may be damaged):
JSON documents and tensor shapes.

Every JSON text read from a trace, a saved result, a mapping file or a profiler trace goes
through :func:`load_json`, every shape column through :func:`parse_shape`: whatever the bytes,
the answer is a value or a :class:`ContentError` (a :class:`~netparity.errors.NetparityError`,
so one line on the command line), never a ``RecursionError`` from a deeply nested document, a
``JSONDecodeError`` deep in a comparison, or an element count that overflows int64.

``ContentError`` is also a ``ValueError``: callers that already turn a ``ValueError`` into an
error naming the file and row (``corrupt trace index (record 7: ...)``) keep doing so.

Example:
    >>> load_json('{"a": [1, 2]}', what="x.json")
    {'a': [1, 2]}
    >>> load_json("[" * 5000, what="x.json")
    Traceback (most recent call last):
    ...
    netparity.untrusted.ContentError: x.json: JSON nested deeper than 200 levels
    >>> parse_shape("[2, 3]"), parse_shape("[]")
    ((2, 3), ())
    >>> parse_shape("[1,,2]")
    Traceback (most recent call last):
    ...
    netparity.untrusted.ContentError: shape '[1,,2]' is not a list of non-negative integers
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from netparity.errors import NetparityError

#: the deepest JSON any netparity file holds is a few levels (a result's sections, a trace
#: event's args); far below the interpreter's recursion limit, whatever the caller's stack depth
MAX_JSON_DEPTH = 200
#: the most dimensions of a tensor (PyTorch allows 64 at most; MindSpore fewer)
MAX_DIMS = 64
#: the most elements of a tensor: an element count (and its size in bytes, at 16 bytes an
#: element) stays within int64
MAX_NUMEL = 2**59


class ContentError(NetparityError, ValueError):
    """The content of a file is malformed (bad JSON, too deep, a bad shape)."""


def _too_deep(text: str | bytes, limit: int) -> bool:
    """Whether brackets nest deeper than ``limit`` outside JSON strings (one vectorised pass:
    strings are blanked, then the running depth is a cumulative sum)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    b = np.frombuffer(raw, dtype=np.uint8)
    # inside a string: between an unescaped quote and the next; a quote is escaped when an odd
    # number of backslashes precedes it
    quote = b == 0x22
    if quote.any():
        bs = (b == 0x5C).astype(np.int64)
        run = np.cumsum(bs)
        # backslashes in the run just before each position: run[i-1] - run[last non-backslash]
        last_non = np.maximum.accumulate(np.where(bs == 0, np.arange(len(b)), -1))
        before = np.concatenate(([0], run[:-1] - np.where(last_non[:-1] >= 0,
                                                          run[last_non[:-1]], 0)))
        quote &= (before % 2) == 0
        inside = (np.cumsum(quote) % 2).astype(bool) | quote
    else:
        inside = np.zeros(len(b), dtype=bool)
    step = np.zeros(len(b), dtype=np.int64)
    step[((b == 0x5B) | (b == 0x7B)) & ~inside] = 1
    step[((b == 0x5D) | (b == 0x7D)) & ~inside] = -1
    return bool(len(b)) and int(np.cumsum(step).max()) > limit


def load_json(text: str | bytes, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for untrusted content: ``what`` (a file, a row) names it in the error.

    Raises:
        ContentError: not JSON, or nested deeper than ``max_depth``.
    """
    # fewer opening brackets than the limit cannot nest deeper: the common case costs two
    # counts; only a document with many brackets pays for the depth pass
    opens = (text.count("[") + text.count("{") if isinstance(text, str)
             else text.count(b"[") + text.count(b"{"))
    if opens > max_depth and _too_deep(text, max_depth):
        raise ContentError(f"{what}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise ContentError(f"{what}: JSON nested too deeply") from None
    except (ValueError, TypeError) as e:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
        raise ContentError(f"{what}: not valid JSON ({e})") from None


def check_shape(dims: Any, *, what: str = "shape") -> tuple[int, ...]:
    """A shape given as a list: non-negative integers, at most :data:`MAX_DIMS` of them and
    :data:`MAX_NUMEL` elements in all.

    Raises:
        ContentError: anything else.
    """
    if not isinstance(dims, (list, tuple)) or not all(type(d) is int and d >= 0 for d in dims):
        raise ContentError(f"{what} is not a list of non-negative integers")
    if len(dims) > MAX_DIMS:
        raise ContentError(f"{what} has {len(dims)} dimensions (at most {MAX_DIMS})")
    if any(d > MAX_NUMEL for d in dims) or math.prod(dims) > MAX_NUMEL:
        raise ContentError(f"{what} has more elements than any tensor (at most 2**59)")
    return tuple(dims)


def parse_shape(text: Any) -> tuple[int, ...]:
    """A shape column's JSON list (``"[2, 3]"``), checked as :func:`check_shape` does.

    Raises:
        ContentError: not JSON, or not a shape.
    """
    what = f"shape {text!r:.40}"
    if not isinstance(text, (str, bytes)) or len(text) > 16 * MAX_DIMS + 2:
        raise ContentError(f"{what} is not a list of non-negative integers")
    try:
        dims = json.loads(text)
    except ValueError:
        raise ContentError(f"{what} is not a list of non-negative integers") from None
    return check_shape(dims, what=what)
