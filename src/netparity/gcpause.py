"""Pausing Python's cyclic garbage collector around bulk object creation.

Reading a large trace builds hundreds of thousands of small objects (records, calls, pair
results) of which none is garbage; the cyclic collector's generation-2 passes would rescan all of
them again and again (measured: a 100k-op statistics comparison 31 s with it, 21 s without).
Reference counting still frees everything as usual while the collector is paused; cycles made
meanwhile are collected once it runs again.

Example:
    >>> with paused_gc():
    ...     rows = [{"i": i} for i in range(3)]
    >>> len(rows)
    3
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block (or decorated function), then restore the
    state it had (nested uses keep it off until the outermost one ends)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
