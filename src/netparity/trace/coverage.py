"""What evidence a trace holds, read from its index alone: which steps, and per step which kinds
of record in which direction; and whether the capture has finished.

One ``SELECT DISTINCT step, direction, kind`` per rank (answered from the ``idx_step`` index,
which holds exactly those columns: no payload and no other column is read), so a comparison can
say "the candidate has steps 0-4 of 0-39" before it judges anything
(:mod:`netparity.compare.coverage`).

A capture has not finished when its writer still holds the rank's lock (``.rank<N>.lock``,
:mod:`netparity.trace.claim`: a live writer), or when the rank's SQLite write-ahead log is
still there with pages in it (``index.sqlite-wal``: a writer that closes removes it, so a
leftover one means the writer was killed or crashed before closing).

Example:
    >>> import tempfile
    >>> from netparity.trace import Record, TraceWriter, open_trace
    >>> d = tempfile.mkdtemp()
    >>> with TraceWriter(d) as w:
    ...     _ = w.add(Record(kind="loss", op="loss", dtype="float32", shape=(), step=3))
    >>> tr = open_trace(d)
    >>> sorted(contents(tr, 0)), unfinished(tr, [0])
    ([(3, 'forward', 'loss')], None)
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable

from netparity.trace.claim import rank_lock_name
from netparity.trace.reader import INDEX_FILE, Trace

#: (step, direction, kind) of the records of one rank
Contents = set[tuple[int, str, str]]


def contents(tr: Trace, rank: int) -> Contents:
    """Every distinct ``(step, direction, kind)`` of one rank's records (from the index only).

    Cached on the trace: a comparison asks for it once per side, its noise run again."""
    cache: dict[int, Contents] = tr.__dict__.setdefault("_coverage_contents", {})
    got = cache.get(rank)
    if got is None:
        rows = tr._query("SELECT DISTINCT step, direction, kind FROM records", (), rank)
        got = {(s, d, k) for s, d, k in rows
               if type(s) is int and isinstance(d, str) and isinstance(k, str)}
        cache[rank] = got
    return got


def _lock_held(path: str) -> bool:
    """Whether another open file description holds ``path``'s ``flock`` (a live writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (drops the shared lock taken above, if any)
    return False


def unfinished(tr: Trace, ranks: Iterable[int]) -> str | None:
    """Why the capture of ``ranks`` has not finished (still being written, or its writer never
    closed), or None when every one of them was closed cleanly."""
    for r in ranks:
        if _lock_held(str(tr.path / rank_lock_name(r))):
            return f"rank {r} is still being written (its writer is running)"
    for r in ranks:
        wal = tr.path / f"rank{r}" / f"{INDEX_FILE}-wal"
        try:
            left = wal.stat().st_size > 0
        except OSError:
            left = False
        if left:
            return (f"rank {r} was not closed cleanly (its writer was killed or crashed: "
                    f"rank{r}/{INDEX_FILE}-wal is left over)")
    return None


def ranges(values: Iterable[int]) -> str:
    """Integers as short ranges: ``0-4,7,9-10`` (``none`` when empty).

    Example:
        >>> ranges([0, 1, 2, 3, 4, 7, 9, 10]), ranges([]), ranges([5])
        ('0-4,7,9-10', 'none', '5')
    """
    vs = sorted(set(values))
    if not vs:
        return "none"
    out: list[str] = []
    lo = prev = vs[0]
    for v in vs[1:] + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(lo) if lo == prev else f"{lo}-{prev}")
        if v is not None:
            lo = prev = v
    return ",".join(out)


def names(tr: Trace, rank: int) -> dict[str, set[str]]:
    """kind -> the distinct ``module`` values of one rank's records of that kind (module paths
    of calls, parameter names of param/grad records), from a column scan; cached on the trace.
    """
    cache: dict[int, dict[str, set[str]]] = tr.__dict__.setdefault("_coverage_names", {})
    got = cache.get(rank)
    if got is None:
        import numpy as np

        cols = tr.scan(["kind", "module"], rank=rank)
        kinds, mods = cols["kind"], cols["module"]
        got = {}
        if cols.n:
            pairs = np.unique(np.stack([kinds.codes, mods.codes]), axis=1)
            for k, m in pairs.T.tolist():
                got.setdefault(kinds.values[k], set()).add(mods.values[m])
        cache[rank] = got
    return got
