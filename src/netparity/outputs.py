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

import contextlib
import errno
import glob
import os
import stat
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from netparity.errors import NetparityError, UsageError


def write_text_atomic(path: str | os.PathLike[str], text: str, *, what: str = "report",
                      overwrite: bool = True) -> None:
    """Write ``text`` to a temporary file in ``path``'s directory, then rename it over ``path``.

    A reader never sees a half-written file, even when the process dies mid-write; the parent
    directory is created when missing. I/O errors become one-line :class:`UsageError`s.
    """
    with atomic_output(path, what=what, overwrite=overwrite) as tmp, \
            open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def write_npz_file(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """What ``np.savez`` writes, straight to ``path`` (no temporary: wrap it in
    :func:`atomic_output`), with the zip closed on failure too: ``np.savez`` leaves a half-open
    ZipFile whose finaliser prints a traceback when the disk is full."""
    import numpy as np

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)


def _fsync_path(path: str | os.PathLike[str], *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems cannot fsync a directory; the rename still holds
        if not directory or e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _default_mode() -> int:
    mask = os.umask(0)  # the only way to read the umask is to set it (and put it back)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, overwrite: bool = True,
                  what: str = "output", error: type[NetparityError] = UsageError,
                  ) -> Iterator[Path]:
    """A temporary path next to ``path`` to write into; on success it replaces ``path``.

    The temporary file lies in the destination's directory (a rename across filesystems is not
    atomic) and keeps the destination's suffix (``np.savez`` and ``mindspore.save_checkpoint``
    append one otherwise). When the block ends normally the file is fsynced, renamed over
    ``path`` and the directory fsynced: a reader, a crash or a full disk leaves either the old
    file or the new one, never a mix and never neither. When the block raises, the temporary
    file (and anything a writer derived from its name) is removed and the old file is left as
    it was. The old file is never unlinked first.

    Args:
        path: the file to produce.
        overwrite: replace an existing ``path``; when False an existing file is refused, before
            any work and again at the rename (a hard link, which fails when the name exists).
        what: names the output in error messages.
        error: the :class:`NetparityError` subclass raised for I/O errors (one line).

    Raises:
        error: ``path`` is a directory or a special file (a device, a FIFO), exists while
            ``overwrite`` is False, or cannot be written (disk full, read-only...).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> with atomic_output(p) as tmp:
        ...     _ = tmp.write_text("new")
        >>> open(p).read(), os.listdir(os.path.dirname(p))
        ('new', ['a.txt'])
    """
    dest = Path(path)
    _check_destination(dest, overwrite, what, error)
    tmp: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=f".tmp{dest.suffix}",
                                    dir=dest.parent)
        os.close(fd)
        tmp = Path(name)
        os.chmod(tmp, _default_mode())  # mkstemp's 0600 would make every output private
    except OSError as e:
        raise error(f"{dest}: cannot write {what} ({e.strerror or e})") from None
    try:
        yield tmp
        _fsync_path(tmp)
        if overwrite:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)  # fails if a file appeared meanwhile: never clobbered
            os.unlink(tmp)
        _fsync_path(dest.parent, directory=True)
    except BaseException as e:
        _remove_temporaries(tmp)
        if isinstance(e, FileExistsError) and not overwrite:
            raise error(f"{dest}: exists; pass --force (overwrite=True) to replace it") from None
        if isinstance(e, OSError):
            raise error(f"{dest}: cannot write {what} ({e.strerror or e})") from None
        raise


def _check_destination(dest: Path, overwrite: bool, what: str,
                       error: type[NetparityError]) -> None:
    try:
        st = dest.stat()
    except FileNotFoundError:
        return
    except OSError as e:  # e.g. a path "under" a regular file (ENOTDIR)
        raise error(f"{dest}: cannot write {what} ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{dest}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):  # renaming over /dev/null (as root) would replace the node
        raise error(f"{dest}: is a special file (device, FIFO or socket); refusing to write it")
    if not overwrite:
        raise error(f"{dest}: exists; pass --force (overwrite=True) to replace it")


def _remove_temporaries(tmp: Path) -> None:
    """Remove ``tmp`` and files a writer named after it (MindSpore writes its data to the name
    with ``.tmp`` for the suffix, then renames). The name holds a random part, so no user file
    can match it."""
    for p in [tmp, *tmp.parent.glob(glob.escape(tmp.stem) + "*")]:
        with contextlib.suppress(OSError):
            p.unlink()


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
