"""How the C heap hands large blocks back to the system, for commands that read whole traces.

glibc's ``malloc`` maps blocks above a threshold with ``mmap`` and unmaps them on ``free``; but
the threshold *moves*: freeing a mapped block raises it to that block's size (up to 32 MiB on
64-bit), so the next arrays of that size come from the heap, whose freed space is kept and
fragmented between live objects instead of going back to the system. A comparison makes and
drops many arrays of tens to hundreds of MB (columns, gathers, the alignment's tables): measured
on a 1M-op-per-side statistics comparison, 5.46 GB peak resident with the moving threshold, 4.93
GB with it fixed at 4 MiB (same output; ~+5 s of system time mapping fresh pages, on ~35 s; a
fixed 32 MiB gives back nothing).

:func:`return_large_blocks` fixes the threshold (``mallopt(M_MMAP_THRESHOLD, 4 MiB)``, which
also stops it moving). It is process-wide, so the CLI calls it for the commands that read whole
traces (``compare``), not the library on a user's behalf. Elsewhere than glibc it does nothing.

Blocks below the threshold come from the heap, and the space of those freed between live ones
stays resident: ~0.2 GB after the 1M-op comparison's alignment and call results (temporaries of
64k calls at a time, interleaved with what the result keeps), which the next large arrays
(mapped, so fresh pages) come on top of. :func:`trim` (``malloc_trim(0)``) hands those free
pages back; the engine calls it where a stage has just dropped what it made (harmless anywhere:
it frees nothing in use, and costs milliseconds).

Example:
    >>> return_large_blocks() in (True, False)
    True
    >>> trim() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

__all__ = ["return_large_blocks", "trim"]

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
#: blocks from this size up are mapped, and unmapped when freed
THRESHOLD = 1 << 22


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (has ``mallopt`` and ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]  # (musl has neither)
        lib.mallopt.restype = ctypes.c_int
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        lib.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return lib


def return_large_blocks() -> bool:
    """Have the C heap map every block of :data:`THRESHOLD` bytes or more and hand it back on
    ``free``; True when set (glibc), False where there is no such setting."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, THRESHOLD))


def trim() -> bool:
    """Hand the heap's free pages back to the system (``malloc_trim(0)``); True when some
    were (glibc), False otherwise."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
