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


#: bytes per chunk of the depth pass (its arrays stay a few times this size)
_DEPTH_CHUNK = 1 << 22


def _too_deep(text: str | bytes, limit: int) -> bool:
    """Whether brackets nest deeper than ``limit`` outside JSON strings: vectorised passes over
    4 MiB chunks (memory bounded, whatever the document's size), carrying from one chunk to the
    next whether a string is open, the depth, and the run of backslashes at the chunk's end.
    In a chunk, a quote is escaped when an odd number of backslashes precedes it; between an
    unescaped quote and the next is a string; the depth is a cumulative sum of the brackets
    outside strings."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    inside, depth, run_in = False, 0, 0
    for lo in range(0, len(raw), _DEPTH_CHUNK):
        b = np.frombuffer(raw, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(raw) - lo),
                          offset=lo)
        n = len(b)
        bs = b == 0x5C
        quote = b == 0x22
        if quote.any() or bs.any():
            idx = np.arange(n, dtype=np.int32)
            # the start of the backslash run ending just before each position
            last_non = np.maximum.accumulate(np.where(bs, -1, idx))
            prev = np.concatenate(([-1], last_non[:-1]))  # last non-backslash before i
            before = np.arange(n, dtype=np.int64) - 1 - prev  # backslashes right before i
            before[prev < 0] += run_in  # a run that began in the chunk before
            quote &= (before % 2) == 0
            flips = np.cumsum(quote, dtype=np.int32)
            inn = ((flips % 2).astype(bool) ^ inside) | quote
            tail = n - 1 - int(last_non[-1])  # backslashes at the chunk's end
            run_in = tail + (run_in if last_non[-1] < 0 else 0)
            inside = bool(inside ^ (int(flips[-1]) % 2 == 1))
        else:
            inn = np.full(n, inside)
            run_in = 0
        step = np.zeros(n, dtype=np.int8)
        step[((b == 0x5B) | (b == 0x7B)) & ~inn] = 1
        step[((b == 0x5D) | (b == 0x7D)) & ~inn] = -1
        running = np.cumsum(step, dtype=np.int32)
        if n and depth + int(running.max()) > limit:
            return True
        depth += int(running[-1]) if n else 0
    return False


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
