"""Files netparity writes: atomically, and never over (or inside) what it reads.

Shared by every writer (reports, scan results; a core module, below all of them).

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


def check_output(dest: str | os.PathLike[str], inputs: list[str | os.PathLike[str]], *,
                 what: str = "output") -> Path:
    """Refuse an output path that is one of the inputs or lies inside an input directory (a
    trace): writing there would destroy what is being read. Returns the path.

    Example:
        >>> check_output("r.json", ["runs/ref", "runs/cand"]).name
        'r.json'
        >>> check_output("runs/ref/manifest.json", ["runs/ref"])
        Traceback (most recent call last):
        ...
        netparity.errors.UsageError: runs/ref/manifest.json: the output would be written inside the input runs/ref; choose a path outside it
    """
    target = Path(dest).resolve()
    for src in inputs:
        p = Path(src).resolve()
        if target == p:
            raise UsageError(f"{dest}: the {what} would overwrite the input {src}; choose "
                             "another path")
        if p in target.parents:
            raise UsageError(f"{dest}: the {what} would be written inside the input {src}; "
                             "choose a path outside it")
    if target.is_dir():
        raise UsageError(f"{dest}: is a directory, not a file")
    return Path(dest)
