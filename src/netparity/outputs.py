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
from collections.abc import Iterator, Mapping, Sequence
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


def _umask() -> int:
    mask = os.umask(0)  # the only way to read the umask is to set it (and put it back)
    os.umask(mask)
    return mask


def _default_mode() -> int:
    return 0o666 & ~_umask()


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
        lst = dest.lstat()
    except FileNotFoundError:
        return
    except OSError as e:  # e.g. a path "under" a regular file (ENOTDIR)
        raise error(f"{dest}: cannot write {what} ({e.strerror or e})") from None
    if stat.S_ISLNK(lst.st_mode):  # the rename would replace the user's link with a file
        raise error(f"{dest}: is a symbolic link; netparity never writes through one (name "
                    "the file itself or a new path)")
    if stat.S_ISDIR(lst.st_mode):
        raise error(f"{dest}: is a directory, not a file")
    if not stat.S_ISREG(lst.st_mode):  # renaming over /dev/null (as root) would replace the node
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


#: what an output path may be: a file, a folder, or either (``export``: ``.npz`` or folder)
OUTPUT_KINDS = ("file", "dir", "file_or_dir")


def _ident(p: Path) -> tuple[int, int] | None:
    try:
        st = p.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _chain(p: Path) -> list[tuple[Path, tuple[int, int]]]:
    """``p`` (resolved) and its existing ancestors, each with its (device, inode)."""
    out = []
    for q in (p, *p.parents):
        ident = _ident(q)
        if ident is not None:
            out.append((q, ident))
    return out


def _linked_input(target: Path, inputs: Sequence[str | os.PathLike[str]],
                  limit: int = 100_000) -> str | None:
    """The file among ``inputs`` (or in an input directory: a trace's manifest, index, shards)
    that ``target`` is a hard link of, or None. Looks at ``limit`` entries at most."""
    ident = _ident(target)
    seen = 0
    for src in inputs:
        walk = os.walk(src) if os.path.isdir(src) else [("", [], [os.fspath(src)])]
        for root, dirs, files in walk:
            for name in files:
                p = os.path.join(root, name)
                if _ident(Path(p)) == ident:
                    return p
            seen += len(files) + len(dirs)
            if seen > limit:
                return None
    return None


def check_output(dest: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]], *,
                 what: str = "output", kind: str = "file", may_hold_inputs: bool = False,
                 ) -> Path:
    """Refuse, before any work, an output path that would destroy or corrupt what is read.

    The rules (one place for every command; :mod:`netparity.cli._io` applies them to every
    output option):

    * never onto an input, nor inside an input directory (a trace), compared both by resolved
      path (symlinks followed) and by device and inode (hard links, bind mounts);
    * a folder output (``kind`` ``dir``) never contains an input either (it may be replaced),
      unless ``may_hold_inputs`` (a work folder whose own entries are checked one by one);
    * never through a symbolic link (the name itself must not be a link);
    * only a regular file or a new path (``dir``: a directory or a new path): never
      ``/dev/null``, a FIFO (opening one for writing blocks), a socket or a device.

    Returns the path.

    Example:
        >>> check_output("r.json", ["runs/ref", "runs/cand"]).name
        'r.json'
        >>> check_output("runs/ref/manifest.json", ["runs/ref"])
        Traceback (most recent call last):
        ...
        netparity.errors.UsageError: runs/ref/manifest.json: the output would be written inside the input runs/ref; choose a path outside it
        >>> check_output("/dev/null", [])
        Traceback (most recent call last):
        ...
        netparity.errors.UsageError: /dev/null: the output is a special file (device, FIFO or socket); give a regular file or a new path
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind must be one of {OUTPUT_KINDS}, not {kind!r}")
    path = Path(dest)
    try:
        lst: os.stat_result | None = path.lstat()
    except FileNotFoundError:
        lst = None
    except OSError as e:  # a path "under" a regular file, a name too long...
        raise UsageError(f"{dest}: cannot write the {what} there ({e.strerror or e})") from None
    if lst is not None:
        if stat.S_ISLNK(lst.st_mode):
            raise UsageError(f"{dest}: the {what} is a symbolic link; netparity never writes "
                             "through one (name the target itself or a new path)")
        if not (stat.S_ISREG(lst.st_mode) or stat.S_ISDIR(lst.st_mode)):
            raise UsageError(f"{dest}: the {what} is a special file (device, FIFO or socket); "
                             "give a regular file or a new path")
        if kind == "file" and stat.S_ISDIR(lst.st_mode):
            raise UsageError(f"{dest}: is a directory, not a file")
        if kind == "dir" and not stat.S_ISDIR(lst.st_mode):
            raise UsageError(f"{dest}: the {what} is a file, not a directory")
    target = path.resolve()
    chain = _chain(target)
    folder = not may_hold_inputs and (
        kind == "dir" or (kind == "file_or_dir" and path.suffix != ".npz"))
    linked = _linked_input(target, inputs) if lst is not None and lst.st_nlink > 1 and \
        stat.S_ISREG(lst.st_mode) else None
    if linked is not None:
        raise UsageError(f"{dest}: the {what} is a hard link to the input {linked}; choose "
                         "another path")
    for src in inputs:
        p = Path(src).resolve()
        ident = _ident(p)
        if target == p or (lst is not None and ident is not None and chain
                           and chain[0][1] == ident):
            raise UsageError(f"{dest}: the {what} would overwrite the input {src}; choose "
                             "another path")
        if p in target.parents or (ident is not None
                                   and any(i == ident for _, i in chain[1 if lst else 0:])):
            raise UsageError(f"{dest}: the {what} would be written inside the input {src}; "
                             "choose a path outside it")
        if folder and (target in p.parents or (
                lst is not None and chain and any(i == chain[0][1] for _, i in _chain(p)[1:]))):
            raise UsageError(f"{dest}: the {what} directory holds the input {src}; choose a "
                             "folder that does not contain what is read")
    return path


#: the file that marks a folder netparity is still writing into (removed when it is complete)
INCOMPLETE_MARK = ".netparity-incomplete"


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str], *, overwrite: bool = True,
                  what: str = "output") -> Iterator[Path]:
    """A temporary folder next to ``path`` to fill; on success its files land in ``path``.

    A new (or empty) ``path`` appears in one rename, complete: an interrupted write leaves only
    the hidden temporary sibling (``.NAME.*.tmp``, removed on failure). Into an existing
    non-empty folder (``overwrite`` True) the files are renamed one by one while
    :data:`INCOMPLETE_MARK` lies in it, so a folder left half-written says so. Files of the
    folder that the block did not write are left alone.

    Raises:
        UsageError: ``path`` is not a folder, is a symbolic link, or is non-empty and
            ``overwrite`` is False; or the folder cannot be written.

    Example:
        >>> import tempfile, os
        >>> d = os.path.join(tempfile.mkdtemp(), "out")
        >>> with atomic_folder(d) as tmp:
        ...     _ = (tmp / "a.npy").write_bytes(b"x")
        >>> os.listdir(d)
        ['a.npy']
    """
    dest = Path(path)
    if dest.is_symlink():
        raise UsageError(f"{dest}: is a symbolic link; netparity never writes through one")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: exists and is not a directory")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        os.chmod(tmp, 0o777 & ~_umask())
    except OSError as e:
        raise UsageError(f"{dest}: cannot write {what} ({e.strerror or e})") from None
    try:
        yield tmp
        for f in tmp.iterdir():
            _fsync_path(f)
        _land(tmp, dest, overwrite)
        _fsync_path(dest.parent, directory=True)
    except OSError as e:
        raise UsageError(f"{dest}: cannot write {what} ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)  # our own temporary, never the user's


def _land(tmp: Path, dest: Path, overwrite: bool) -> None:
    """Move the finished ``tmp`` folder's files to ``dest`` (see :func:`atomic_folder`)."""
    try:
        os.rename(tmp, dest)  # a new name, or an empty folder (POSIX replaces it): atomic
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if not overwrite:
        raise UsageError(f"{dest}: exists and is not empty; pass --force to write into it")
    mark = dest / INCOMPLETE_MARK
    mark.write_text("netparity is writing into this folder; if this file stays, the writing "
                    "was interrupted and the folder is incomplete\n")
    for f in sorted(tmp.iterdir()):
        if (dest / f.name).is_dir() and not (dest / f.name).is_symlink():
            raise UsageError(f"{dest / f.name}: is a directory, not a file")
        os.replace(f, dest / f.name)
    mark.unlink()
