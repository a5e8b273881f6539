"""Atomic file output shared by every report writer.

Example:
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> write_text_atomic(p, "hello\\n", what="text")
    >>> open(p).read()
    'hello\\n'
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from netparity.errors import UsageError


def write_text_atomic(path: str | os.PathLike[str], text: str, *, what: str = "report") -> None:
    """Write ``text`` to a temporary file in ``path``'s directory, then ``os.replace`` it.

    A reader never sees a half-written file, even when the process dies mid-write; the parent
    directory is created when missing. I/O errors become one-line :class:`UsageError`s.
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            os.replace(tmp, dest)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise UsageError(f"{path}: cannot write {what} ({e.strerror})") from None
