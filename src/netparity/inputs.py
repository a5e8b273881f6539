"""The one opener every file netparity reads goes through (DESIGN.md, "Reliability rules").

Whatever the kind of input -- a trace's index, its WAL, its columnar copy or shards, a
checkpoint, a loss CSV, a saved result, a profiler trace (gzip or not), a MindSpore dump, a
scanned source, a mapping file -- it is opened here, and so:

* only a **regular file** is read: a FIFO would hang, ``/dev/zero`` never ends, a directory
  where a file is expected is refused (opened ``O_NONBLOCK``: a FIFO is refused, not waited
  on);
* a file found **inside an input tree** (``within=``: a trace directory, a dump folder) must
  resolve inside that tree: a symlink out of it is refused (a file the user names directly
  may be a link: a Hugging Face cache is made of them);
* the **size read is bounded** by what the file declares: a ``.npy`` header must agree with
  the bytes that follow it, a zip member's declared size with the array header, an archive
  may not inflate to more than :data:`INFLATE_RATIO` times its size (beyond
  :data:`INFLATE_FLOOR`), gzip is decompressed as a stream that stops at the same bound, and
  text and JSON inputs have a cap (:data:`MAX_TEXT`, :data:`MAX_JSON`).

Every refusal is a :class:`~netparity.errors.NetparityError` (one line, exit status 2); a caller
passes the subclass its own errors use (``error=TraceError``...).

Example:
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "log.txt")
    >>> _ = open(p, "w").write("loss=1.5\\n")
    >>> read_text(p)
    'loss=1.5\\n'
    >>> os.mkfifo(p + ".fifo"); read_text(p + ".fifo")
    Traceback (most recent call last):
    ...
    netparity.errors.InputError: ....fifo: not a regular file (a FIFO); refusing to read it
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from netparity.errors import InputError, NetparityError

__all__ = [
    "INFLATE_FLOOR", "INFLATE_RATIO", "MAX_JSON", "MAX_TEXT", "NpzReader", "check_zip",
    "copy_file", "drop_read_pages", "load_npy", "open_binary", "open_fd", "open_parquet",
    "read_bytes",
    "read_text",
]

#: the most a text input (loss CSV, mapping, source file) may hold
MAX_TEXT = 256 << 20
#: the most a JSON document (saved result, profiler trace, after decompression) may hold
MAX_JSON = 2 << 30
#: an archive (zip, gzip) may inflate to at most this many times its own size ...
INFLATE_RATIO = 200
#: ... or to this many bytes, whichever is more (a small archive of zeros is no bomb)
INFLATE_FLOOR = 64 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))

ErrorType = type[NetparityError]


def _special(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def open_fd(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
            error: ErrorType = InputError, what: str = "",
            tree: str = "") -> tuple[int, int]:
    """Open a regular file for reading: ``(file descriptor, size in bytes)``.

    ``within``: the input tree the file belongs to (``tree`` names it in messages: "the
    trace"); the file (after every symlink) must lie inside it. ``what`` names the kind of
    file in messages (``"payload shard"``).

    Raises:
        error: missing or unreadable, not a regular file, or resolving outside ``within``.
    """
    p = Path(path)
    label = f"{what} " if what else ""
    if within is not None:
        check_within(p, within, error=error, what=what, tree=tree)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{p}: no such {what or 'file'} (the {what or 'file'} is missing: no such "
                    "file or directory)") from None
    except IsADirectoryError:
        raise error(f"{p}: {label}is a directory, not a file") from None
    except OSError as e:
        raise error(f"{p}: {label}cannot be read ({e.strerror})") from None
    st = os.fstat(fd)
    kind = _special(st.st_mode)
    if kind is not None:
        os.close(fd)
        raise error(f"{p}: {label}not a regular file ({kind}); refusing to read it")
    os.set_blocking(fd, True)
    return fd, st.st_size


def check_within(path: str | os.PathLike[str], within: str | os.PathLike[str], *,
                 error: ErrorType = InputError, what: str = "", tree: str = "") -> None:
    """``path`` (after every symlink) lies inside the input tree ``within``.

    Raises:
        error: it resolves outside (a link out of a trace would read any file of the host).
    """
    p = Path(path)
    real = p.resolve()
    if not real.is_relative_to(Path(within).resolve()):
        raise error(f"{p}: {what + ' ' if what else ''}resolves outside "
                    f"{tree or 'its input folder'} ({real}); refusing to read it")


@contextmanager
def open_binary(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
                error: ErrorType = InputError, what: str = "", tree: str = "",
                limit: int | None = None) -> Iterator[IO[bytes]]:
    """:func:`open_fd` as a binary file object; ``limit``: refuse a file larger than that."""
    fd, size = open_fd(path, within=within, error=error, what=what, tree=tree)
    if limit is not None and size > limit:
        os.close(fd)
        raise error(f"{path}: {size} bytes is more than a {what or 'file'} of this kind holds "
                    f"(at most {limit}); refusing to read it")
    with os.fdopen(fd, "rb") as f:
        yield f


def read_bytes(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
               error: ErrorType = InputError, what: str = "", tree: str = "",
               limit: int = MAX_JSON) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; a ``.gz`` file is decompressed
    as a stream bounded by :func:`inflate_limit` and ``limit``."""
    with open_binary(path, within=within, error=error, what=what, tree=tree,
                     limit=limit) as f:
        if str(path).endswith(".gz"):
            return _gunzip(f, min(limit, inflate_limit(os.fstat(f.fileno()).st_size)),
                           path, error)
        return f.read()


def read_text(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
              error: ErrorType = InputError, what: str = "", tree: str = "",
              limit: int = MAX_TEXT, errors: str = "strict") -> str:
    """A regular text file (UTF-8, at most ``limit`` bytes; ``.gz`` decompressed, bounded)."""
    data = read_bytes(path, within=within, error=error, what=what, tree=tree,
                     limit=limit)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise error(f"{path}: cannot read {what or 'file'}: not UTF-8 text ({e.reason} at byte "
                    f"{e.start})") from None


def inflate_limit(compressed: int) -> int:
    """The most an archive of ``compressed`` bytes may inflate to."""
    return max(INFLATE_FLOOR, INFLATE_RATIO * compressed)


def _gunzip(f: IO[bytes], limit: int, path: str | os.PathLike[str], error: ErrorType) -> bytes:
    """Decompress a gzip stream (members concatenated) into at most ``limit`` bytes."""
    out = bytearray()
    d = zlib.decompressobj(wbits=31)
    try:
        while True:
            if d.eof:
                chunk = d.unused_data or f.read(1 << 20)
                if not chunk:
                    break
                d = zlib.decompressobj(wbits=31)
            else:
                chunk = d.unconsumed_tail or f.read(1 << 20)
                if not chunk:
                    raise error(f"{path}: truncated gzip stream")
            # (at most 16 MiB a call: no temporary as large as the whole output)
            out += d.decompress(chunk, min(1 << 24, limit + 1 - len(out)))
            if len(out) > limit:
                raise error(f"{path}: gzip stream inflates past {limit} bytes (a decompression "
                            "bomb, or more than an input of this kind holds); refusing it")
    except zlib.error as e:
        raise error(f"{path}: corrupt gzip stream ({e})") from None
    return bytes(out)


def copy_file(src: str | os.PathLike[str], dest: str | os.PathLike[str], *,
              within: str | os.PathLike[str] | None = None, error: ErrorType = InputError,
              what: str = "", tree: str = "", limit: int | None = None) -> int:
    """Copy a regular file (checked as :func:`open_fd` does) to ``dest``: at most ``limit``
    bytes (default: its size when opened; a file that grows meanwhile is cut there). Returns
    the bytes copied."""
    fd, size = open_fd(src, within=within, error=error, what=what, tree=tree)
    n = size if limit is None else min(size, limit)
    try:
        with open(dest, "wb") as out:
            done = 0
            while done < n:
                got = os.sendfile(out.fileno(), fd, done, n - done)
                if got == 0:
                    break
                done += got
    finally:
        os.close(fd)
    return done


# --- archives and arrays -----------------------------------------------------------------------


def check_zip(z: zipfile.ZipFile, size: int, path: str | os.PathLike[str],
              error: ErrorType = InputError) -> None:
    """An archive of ``size`` bytes may not declare more than :func:`inflate_limit` of it
    (zip bombs); reading a member stops at its declared size (``zipfile`` checks the CRC)."""
    total = sum(i.file_size for i in z.infolist())
    if total > inflate_limit(size):
        raise error(f"{path}: archive members declare {total} bytes from {size} compressed (a "
                    "decompression bomb); refusing to read it")


def _header(f: IO[bytes], avail: int, where: str, error: ErrorType) -> tuple[tuple[int, ...],
                                                                            bool, np.dtype]:
    """Parse a ``.npy`` header; its declared data size must equal ``avail`` minus the
    header's length (a header claiming 8 TiB in a 300-byte file is refused here)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except NetparityError:
        raise
    except Exception as e:  # noqa: BLE001 - hostile header bytes: numpy's parser raises
        # ValueError, SyntaxError, tokenize.TokenError, TypeError, EOFError, zlib.error...
        raise error(f"{where}: not a valid .npy array ({str(e).splitlines()[0][:200]})") \
            from None
    if dtype.hasobject:
        raise error(f"{where}: .npy array holds Python objects (pickles); refusing to load it")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise error(f"{where}: .npy header has an invalid shape {shape!r:.80}")
    want = math.prod(shape) * dtype.itemsize
    have = avail - f.tell()
    if want != have:
        raise error(f"{where}: .npy header declares {want} bytes of {dtype} {list(shape)}, the "
                    f"file holds {max(have, 0)} (a forged or truncated array); refusing it")
    return shape, fortran, dtype


def _read_array(f: IO[bytes], shape: tuple[int, ...], fortran: bool, dtype: np.dtype,
                where: str, error: ErrorType) -> np.ndarray:
    n = math.prod(shape) * dtype.itemsize
    buf = bytearray(n)
    view = memoryview(buf)
    done = 0
    try:
        while done < n:
            got = f.readinto(view[done:])  # type: ignore[attr-defined]
            if not got:
                break
            done += got
    except (OSError, zlib.error, zipfile.BadZipFile, EOFError) as e:
        raise error(f"{where}: cannot read array data ({str(e)[:200]})") from None
    if done != n:
        raise error(f"{where}: truncated array data ({done} of {n} bytes)")
    arr = np.frombuffer(buf, dtype=dtype)
    return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)


def load_npy(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
             error: ErrorType = InputError, what: str = ".npy file",
             tree: str = "") -> np.ndarray:
    """A ``.npy`` file's array (no pickles), its header checked against the file's size."""
    with open_binary(path, within=within, error=error, what=what, tree=tree) as f:
        size = os.fstat(f.fileno()).st_size
        shape, fortran, dtype = _header(f, size, str(path), error)
        return _read_array(f, shape, fortran, dtype, str(path), error)


class NpzReader:
    """The ``.npy`` members of a ``.npz`` (no pickles), each checked before it is read: the
    archive must not inflate beyond :func:`inflate_limit`, a member's header must agree with
    the member's declared size (so nothing larger than the member is ever allocated).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "a.npz"); np.savez(p, w=np.arange(3))
        >>> with NpzReader(p) as z:
        ...     z.files, z["w"].tolist()
        (['w'], [0, 1, 2])
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 within: str | os.PathLike[str] | None = None, error: ErrorType = InputError,
                 what: str = ".npz file", tree: str = ""):
        self.path, self._error = Path(path), error
        fd, size = open_fd(path, within=within, error=error, what=what, tree=tree)
        self._f = os.fdopen(fd, "rb")
        try:
            self._zip = zipfile.ZipFile(self._f)
            check_zip(self._zip, size, path, error)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            self._f.close()
            raise error(f"{path}: not a readable .npz archive ({str(e)[:200]})") from None
        except BaseException:
            self._f.close()
            raise
        self._infos = {i.filename[:-4]: i for i in self._zip.infolist()
                       if i.filename.endswith(".npy")}
        self.files = list(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def __getitem__(self, name: str) -> np.ndarray:
        return read_member(self._zip, self._infos[name], f"{self.path} member {name!r}",
                           self._error)

    def close(self) -> None:
        self._zip.close()
        self._f.close()

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, where: str,
                error: ErrorType = InputError) -> np.ndarray:
    """The array of one ``.npy`` member of an open zip, its header checked against the
    member's declared size before anything is allocated."""
    try:
        with z.open(info) as f:
            shape, fortran, dtype = _header(f, info.file_size, where, error)
            return _read_array(f, shape, fortran, dtype, where, error)
    except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as e:
        raise error(f"{where}: cannot read ({str(e)[:200]})") from None


def check_archive(path: str | os.PathLike[str], *, error: ErrorType = InputError) -> None:
    """Refuse a zip file (a PyTorch checkpoint) whose members declare a bomb's size; not a
    zip: nothing to check."""
    with open_binary(path, error=error, what="checkpoint") as f:
        if f.read(4) != b"PK\x03\x04":
            return
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as z:
                check_zip(z, os.fstat(f.fileno()).st_size, path, error)
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise error(f"{path}: not a readable zip archive ({str(e)[:200]})") from None


# --- Parquet -----------------------------------------------------------------------------------

#: the 4 bytes a Parquet file starts and ends with
PARQUET_MAGIC = b"PAR1"


def open_parquet(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None,
                 error: ErrorType = InputError, what: str = "Parquet file",
                 tree: str = "", columns: dict[str, str] | None = None,
                 damaged: type[Exception] | None = None) -> Any:
    """Open a Parquet file (a trace's columnar index, a comparison's pair table) for reading:
    a ``pyarrow.parquet.ParquetFile`` over the file opened by :func:`open_fd` (a regular
    file, inside ``within``).

    Checked before any column is read: the file starts and ends with ``PAR1``; its footer
    parses; the row groups may not declare more than :func:`inflate_limit` of the file's size
    uncompressed (a decompression bomb); with ``columns`` (``{name: arrow type string}``),
    the file holds exactly those columns with those types, in that order. A column read later
    is checked by the caller (codes in range, one value per row).

    ``damaged``: the exception raised instead of ``error`` for a file that is merely not a
    readable Parquet file (no magic, a corrupt footer) -- a cache its reader may ignore; a
    special file, a link out of ``within``, a bomb or other columns (forged) are ``error``.

    Raises:
        error: any of the above, or a footer pyarrow cannot read.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fd, size = open_fd(path, within=within, error=error, what=what, tree=tree)
    f = os.fdopen(fd, "rb")
    bad = damaged or error
    try:
        if size < 12:
            raise bad(f"{path}: not a {what} ({size} bytes)")
        head = f.read(4)
        f.seek(size - 4)
        if head != PARQUET_MAGIC or f.read(4) != PARQUET_MAGIC:
            raise bad(f"{path}: not a {what} (no Parquet magic)")
        f.seek(0)
        try:
            # a read-only map of the file as an Arrow buffer: pyarrow's I/O threads never call
            # back into a Python file object (which aborted the process at exit, now and then)
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            pf = pq.ParquetFile(pa.BufferReader(pa.py_buffer(mm)), pre_buffer=False)
            md = pf.metadata
            total = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
            schema = pf.schema_arrow
        except (pa.ArrowException, OSError, ValueError) as e:
            raise bad(f"{path}: corrupt {what} ({str(e).splitlines()[0]:.200})") from None
        if total > inflate_limit(size) or total < 0:
            raise error(f"{path}: {what} declares {total} bytes from {size} compressed (a "
                        "decompression bomb); refusing to read it")
        if columns is not None:
            got = {n: str(schema.field(n).type) for n in schema.names}
            if list(got) != list(columns) or got != columns:
                raise error(f"{path}: {what} does not have the expected columns "
                            f"({sorted(set(got) ^ set(columns)) or 'types differ'})")
        f.close()  # (the map keeps the file's bytes)
        pf._netparity_map = mm  # (see drop_read_pages)
        return pf
    except BaseException:
        f.close()
        raise


def drop_read_pages(pf: Any) -> None:
    """Hand back the pages of an :func:`open_parquet` file that reading brought in.

    The file is mapped: every page a read touched counts as the process's resident memory for
    as long as the map lives (a 1M-op trace's two index files, ~0.37 GB, for a whole
    comparison), though the columns read are decoded copies. ``MADV_DONTNEED`` drops them from
    the map; a later read faults them in again from the page cache or the file, which is never
    changed in place (a new copy replaces it). Elsewhere than Linux it does nothing."""
    mm = getattr(pf, "_netparity_map", None)
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if mm is not None and advice is not None and not mm.closed:
        mm.madvise(advice)
