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

Example:
    >>> return_large_blocks() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["return_large_blocks"]

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
#: blocks from this size up are mapped, and unmapped when freed
THRESHOLD = 1 << 22


def return_large_blocks() -> bool:
    """Have the C heap map every block of :data:`THRESHOLD` bytes or more and hand it back on
    ``free``; True when set (glibc), False where there is no such setting."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD))
