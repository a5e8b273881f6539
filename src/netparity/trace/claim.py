"""One writer per trace: claiming a trace directory before anything is written into it.

Rules (issue 17: two captures into one directory silently corrupted each other, and a user's
own files were taken over):

* **A lock per rank.** A writer holds an exclusive ``fcntl.flock`` on ``DIR/.rank<N>.lock`` for
  its whole life; a second writer of the same rank fails at once, naming the holder's pid. The
  kernel drops the lock when the process dies (SIGKILL included), so no stale lock survives.
* **Claims are serialised.** The checks below run under a short exclusive lock on
  ``DIR/.netparity.lock``, so two processes can never both pass "no trace here yet".
* **Ranks of one run share a run id.** The first writer of a run (no live rank lock in the
  directory) draws a run id (``NETPARITY_RUN_ID`` when set) and writes it to ``manifest.json``;
  writers of other ranks that arrive while it is live join that run and adopt its id (so does
  a later rank whose ``NETPARITY_RUN_ID`` equals the manifest's run id). Each
  rank's index stores the id, so a reader can tell a stale ``rank<N>/`` from an older run.
* **Never take over what netparity did not write.** A directory holding anything but a trace's
  own entries (``manifest.json`` that is a netparity manifest -- its marker: an integer
  ``schema_version`` and a string ``netparity_version`` --, ``rank<N>/`` folders of index,
  shards, ``rank.json`` and ``capture_notes.json``, ``nonfinite/`` of a stop on NaN/Inf,
  netparity's lock and aside entries) is refused.
* **Overwrite never leaves neither.** With ``overwrite=True`` the old trace (manifest and every
  ``rank<N>/``) is *moved* into ``DIR/.netparity-replaced-<id>/`` (renames: atomic, instant),
  and deleted only when the new trace's writer closes cleanly. A capture that dies midway
  leaves the old trace there, intact.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from netparity.errors import TraceError
from netparity.untrusted import load_json

DIR_LOCK = ".netparity.lock"
ASIDE_PREFIX = ".netparity-replaced-"
RUN_ID_ENV = "NETPARITY_RUN_ID"
_RANK_DIR = re.compile(r"rank\d+")
_RANK_LOCK = re.compile(r"\.rank(\d+)\.lock")
#: files a writer puts in ``rank<N>/`` (SQLite's journal files included)
_RANK_FILE = re.compile(r"index\.sqlite(-wal|-shm|-journal)?|rank\.json|tensors-\d+\.safetensors"
                        r"|\.rank\.json\.\d+\.tmp"
                        # the columnar index copy (trace.columnar) and its temporary
                        r"|index\.columns\.npz|\.index\.columns\.npz\.\w+\.tmp"
                        r"|index\.parquet|\.index\.parquet\.\w+\.tmp"
                        # what a MindSpore capture noted (frameworks.mindspore.capture)
                        r"|capture_notes\.json")
_TOP_FILE = re.compile(r"manifest\.json|\.manifest\.json\.\d+\.tmp|\.netparity\.lock"
                       r"|\.rank\d+\.lock")
#: ``nonfinite/``: the inputs of the op that made the first NaN/Inf (capture.nonfinite), and
#: the temporaries of their atomic writes
NONFINITE_DIR = "nonfinite"
_NONFINITE_FILE = re.compile(r"rank\d+\.(npz|json)|\.rank\w*\.npz\.tmp"
                             r"|\.rank\d+\.json\.\w+\.tmp\.json")


def rank_lock_name(rank: int) -> str:
    """The lock file of one rank's writer, inside the trace directory."""
    return f".rank{rank}.lock"


@dataclass
class Claim:
    """What :func:`claim` decided: the lock held, the run joined or started, the old trace set
    aside (deleted by :meth:`release` after a clean close)."""

    lock_fd: int
    run_id: str
    first: bool  # this writer started the run (writes the manifest)
    aside: Path | None = None

    def release(self, *, clean: bool) -> None:
        """Drop the lock; with ``clean`` (the new trace is complete) delete the old trace."""
        if self.aside is not None and clean:
            import shutil

            shutil.rmtree(self.aside, ignore_errors=True)
            self.aside = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)  # closing the descriptor drops the flock
            self.lock_fd = -1


def _kind(p: Path) -> str | None:
    """``"file"``, ``"dir"`` or ``"other"`` (a symlink too) without following links; None when
    the entry vanished since it was listed (another writer renamed its temporary file)."""
    try:
        mode = p.lstat().st_mode
    except FileNotFoundError:
        return None
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def _foreign(run_dir: Path) -> str | None:
    """The first entry of ``run_dir`` that netparity did not write, or None.

    An entry that vanishes between the listing and its check was a live writer's temporary
    (``.manifest.json.<pid>.tmp`` renamed into place): gone, it is nobody's file, so it is
    skipped rather than reported as foreign (the race behind a wrong "did not write" error).
    """
    for p in sorted(run_dir.iterdir()):
        name, kind = p.name, _kind(p)
        if kind is None:
            continue
        if name.startswith(ASIDE_PREFIX) and kind == "dir":
            continue
        if _TOP_FILE.fullmatch(name) and kind == "file":
            if name == "manifest.json" and not _is_manifest(p):
                return f"{name} (not a netparity manifest)"
            continue
        inner_files = (_RANK_FILE if _RANK_DIR.fullmatch(name) else
                       _NONFINITE_FILE if name == NONFINITE_DIR else None)
        if inner_files is not None and kind == "dir":
            try:
                inner = list(p.iterdir())
            except FileNotFoundError:  # set aside by an overwriting writer meanwhile
                continue
            for q in inner:
                qkind = _kind(q)
                if qkind is not None and not (inner_files.fullmatch(q.name) and qkind == "file"):
                    return f"{name}/{q.name}"
            continue
        return name
    return None


def _is_manifest(p: Path) -> bool:
    """Whether ``p`` is a manifest netparity wrote (:func:`netparity.trace.writer.build_manifest`):
    its marker is an integer ``schema_version`` *and* a string ``netparity_version``, which a
    user's own ``manifest.json`` (``{}``, or another tool's ``{"schema_version": 1}``) lacks."""
    try:
        if p.stat().st_size > 1 << 24:  # a manifest is a few kB; do not read a user's big file
            return False
        m = load_json(p.read_text(), what=str(p))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return (isinstance(m, dict) and type(m.get("schema_version")) is int
            and isinstance(m.get("netparity_version"), str))


def _trace_entries(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.iterdir()
            if p.name in ("manifest.json", NONFINITE_DIR) or _RANK_DIR.fullmatch(p.name)]


def check_trace_dir(run_dir: str | os.PathLike[str], *, overwrite: bool) -> None:
    """What :func:`claim` would refuse, checked without writing anything (the CLI runs it
    before a script starts, so a bad ``-o`` is one line instead of a capture that dies at the
    script's first forward).

    Raises:
        TraceError: ``run_dir`` is not a directory, holds files netparity did not write, or
            holds a trace and ``overwrite`` is False.
    """
    d = Path(run_dir)
    if not (d.exists() or d.is_symlink()):
        return
    if not d.is_dir():
        raise TraceError(f"{d} exists and is not a directory")
    try:
        bad = _foreign(d)
        old = _trace_entries(d)
    except OSError as e:
        raise TraceError(f"{d}: cannot read the directory ({e.strerror})") from None
    if bad is not None:
        raise TraceError(f"{d} holds files netparity did not write ({bad}); capture into an "
                         "empty or new directory")
    if old and not overwrite:
        raise TraceError(f"{d} already holds a trace; choose another directory or pass "
                         "--overwrite")


def _live_ranks(run_dir: Path, own: int) -> list[int]:
    """Ranks whose writer holds its lock right now (another process, or this one)."""
    live = []
    for p in run_dir.iterdir():
        m = _RANK_LOCK.fullmatch(p.name)
        if m is None or int(m.group(1)) == own:
            continue
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            live.append(int(m.group(1)))
        finally:
            os.close(fd)
    return live


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        return f" (pid {int(path.read_text().split()[0])})"
    return ""


def _manifest_run_id(run_dir: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError, AttributeError):
        rid = load_json((run_dir / "manifest.json").read_text(), what="manifest").get("run_id")
        return rid if isinstance(rid, str) else None
    return None


def claim(run_dir: Path, rank: int, *, overwrite: bool) -> Claim:
    """Claim ``run_dir`` for the writer of ``rank`` (see the module docstring).

    Raises:
        TraceError: another process writes this rank; the directory holds files netparity did
            not write; it holds a finished trace and ``overwrite`` is False; or it cannot be
            created or locked.
    """
    try:
        if run_dir.exists() or run_dir.is_symlink():
            if not run_dir.is_dir():
                raise TraceError(f"{run_dir} exists and is not a directory")
            bad = _foreign(run_dir)  # checked before netparity writes a single byte here
            if bad is not None:
                raise TraceError(
                    f"{run_dir} holds files netparity did not write ({bad}); capture into an "
                    "empty or new directory")
        run_dir.mkdir(parents=True, exist_ok=True)
        dfd = os.open(run_dir / DIR_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise TraceError(f"{run_dir}: cannot create the trace directory ({e.strerror})") from None
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # held for the checks below only (milliseconds)
        return _claim_locked(run_dir, rank, overwrite)
    except OSError as e:
        raise TraceError(f"{run_dir}: cannot claim the trace directory ({e.strerror})") from None
    finally:
        os.close(dfd)


def _claim_locked(run_dir: Path, rank: int, overwrite: bool) -> Claim:
    bad = _foreign(run_dir)  # again, now that no other claim can run
    if bad is not None:
        raise TraceError(f"{run_dir} holds files netparity did not write ({bad}); capture into "
                         "an empty or new directory")
    lock_path = run_dir / rank_lock_name(rank)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TraceError(f"{run_dir}: rank {rank} is being written by another capture"
                         f"{_holder(lock_path)}; one writer per trace: wait for it or choose "
                         "another directory") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return _decide(run_dir, rank, overwrite, fd)
    except BaseException:
        os.close(fd)
        raise


def _decide(run_dir: Path, rank: int, overwrite: bool, fd: int) -> Claim:
    wanted = os.environ.get(RUN_ID_ENV) or None
    own_dir = run_dir / f"rank{rank}"
    live = _live_ranks(run_dir, rank)
    if live:  # another rank of a running capture: join its run
        # its manifest may not be written yet (rank 0 writes it after claiming): the run id is
        # also in the live ranks' lock files, written while they held the claim lock
        run_id = _manifest_run_id(run_dir) or _lock_run_id(run_dir, live)
        if run_id is None or (wanted is not None and wanted != run_id):
            raise TraceError(f"{run_dir}: another capture (run {run_id or 'unknown'}) is "
                             "writing into this directory; choose another directory")
        aside = None
        if own_dir.exists():  # a stale rank<N>/ of an older run never mixes into this one
            if not overwrite:
                raise TraceError(f"{own_dir} holds a trace of an older run; choose another "
                                 "directory or pass overwrite=True (--overwrite)")
            aside = _set_aside(run_dir, [own_dir])
        _note_run_id(fd, run_id)
        return Claim(fd, run_id, first=False, aside=aside)
    if wanted is not None and wanted == _manifest_run_id(run_dir) and not own_dir.exists():
        # a rank of a run named by NETPARITY_RUN_ID that starts after its other ranks ended
        _note_run_id(fd, wanted)
        return Claim(fd, wanted, first=False)
    old = _trace_entries(run_dir)
    aside = None
    if old:
        if not overwrite:
            raise TraceError(f"{run_dir} already holds a trace; choose another directory or "
                             "pass overwrite=True (--overwrite)")
        aside = _set_aside(run_dir, old)
    run_id = wanted or uuid.uuid4().hex
    _note_run_id(fd, run_id)
    return Claim(fd, run_id, first=True, aside=aside)


def _note_run_id(fd: int, run_id: str) -> None:
    """Write ``pid run_id`` into this writer's rank lock file (read by :func:`_lock_run_id`)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {run_id}\n".encode(), 0)


def _lock_run_id(run_dir: Path, ranks: list[int]) -> str | None:
    """The run id a live rank's writer noted in its lock file, or None."""
    for r in ranks:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            parts = (run_dir / rank_lock_name(r)).read_text().split()
            if len(parts) >= 2:
                return parts[1]
    return None


def _set_aside(run_dir: Path, entries: list[Path]) -> Path:
    """Move ``entries`` into a fresh ``.netparity-replaced-*`` folder (renames in one
    filesystem: nothing is copied, nothing is lost if the process dies now)."""
    aside = run_dir / f"{ASIDE_PREFIX}{uuid.uuid4().hex[:12]}"
    aside.mkdir()
    for p in entries:
        os.rename(p, aside / p.name)
    return aside
