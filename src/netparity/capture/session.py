"""The framework-independent half of a capture session.

A framework capture (``netparity.frameworks.torch.capture``, ``...mindspore.capture``) installs
hooks and calls :meth:`CaptureSession.emit` for every tensor it sees. The session applies the
policy, starts statistics on the tensor's device, snapshots payloads, and hands records to the
trace writer in batches: statistics of a batch are fetched to the host in one transfer
(:meth:`SessionAdapter.resolve_stats`), never one device→host sync per tensor.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from netparity.capture.policy import CapturePolicy
from netparity.trace.schema import Record
from netparity.trace.writer import TraceWriter


class SessionAdapter(Protocol):
    """What the session needs of a framework adapter (a subset of
    ``netparity.frameworks.base.FrameworkAdapter``, named here so that this package does not
    depend on ``netparity.frameworks``, which builds on it)."""

    def facts(self) -> dict[str, Any]: ...

    def dtype_name(self, t: Any) -> str: ...

    def shape(self, t: Any) -> tuple[int, ...]: ...

    def stats_handle(self, t: Any) -> Any: ...

    def resolve_stats(self, handles: list[Any]) -> list[dict[str, Any]]: ...

    def snapshot(self, t: Any) -> tuple[Callable[[], np.ndarray], int]: ...


_PKG_DIR = str(Path(__file__).resolve().parents[1])
#: netparity code that *is* user code for the source line (the example networks and specs)
_USER_DIRS = (str(Path(_PKG_DIR) / "examples"),)


#: per (file name, skipped prefixes): the file's base name if it is user code, else None
_USER_FILE: dict[tuple[str, tuple[str, ...]], str | None] = {}


def _user_file(fn: str, skip_prefixes: tuple[str, ...]) -> str | None:
    ours = fn.startswith(_PKG_DIR) and not fn.startswith(_USER_DIRS)
    if (ours or fn.startswith("<")
            or os.path.basename(fn) == "netparity"  # the console-script entry point
            or any(fn.startswith(p) for p in skip_prefixes)):
        return None
    return os.path.basename(fn)


def user_source(skip_prefixes: tuple[str, ...] = ()) -> str:
    """``file:line`` of the innermost stack frame in user code (not netparity, not a framework).

    ``skip_prefixes`` are directory prefixes of framework installations to skip. The verdict
    per file is cached: op-level capture asks once per operator.
    """
    f = sys._getframe(1)
    cache = _USER_FILE
    while f is not None:
        key = (f.f_code.co_filename, skip_prefixes)
        try:
            base = cache[key]
        except KeyError:
            base = cache[key] = _user_file(key[0], skip_prefixes)
        if base is not None:
            return f"{base}:{f.f_lineno}"
        f = f.f_back  # type: ignore[assignment]
    return ""


class CaptureSession:
    """Policy, step counter, batching and the writer; subclasses add framework hooks.

    Args:
        path: trace directory.
        adapter: the framework adapter used for statistics and payloads.
        policy: what to capture.
        rank, world_size: this process in a distributed job.
        manifest: extra manifest facts (seeds, precision flags...).
        overwrite: replace an existing trace of this rank.
        batch: number of records whose statistics are fetched together.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        adapter: SessionAdapter,
        policy: CapturePolicy | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        manifest: dict[str, Any] | None = None,
        overwrite: bool = False,
        batch: int = 256,
    ):
        self.path = Path(path)
        self.adapter = adapter
        self.policy = policy or CapturePolicy()
        self.rank = rank
        self.world_size = world_size
        self.step_no = 0
        self.batch = batch
        self.payload_bytes = 0
        self._pending: list[tuple[Record, Any, Any, int]] = []
        facts = dict(adapter.facts())
        facts.update(
            {
                "world_size": world_size,
                "capture": {
                    "level": self.policy.level,
                    "payload": self.policy.payload,
                    "directions": list(self.policy.directions),
                    "steps": sorted(self.policy.steps) if self.policy.steps is not None else None,
                },
            }
        )
        from netparity.capture.seeds import last_seeds

        if last_seeds():
            facts["seeds"] = last_seeds()
        facts.update(manifest or {})
        self.writer: TraceWriter | None = None
        if self.policy.wants_rank(rank):
            self.writer = TraceWriter(
                self.path, rank=rank, manifest=facts, overwrite=overwrite
            )

    # ---- state -----------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """True when the current step and rank are being captured."""
        return self.writer is not None and self.policy.wants_step(self.step_no)

    def next_event(self) -> int:
        return self.writer.next_event() if self.writer is not None else -1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run a block unobserved: nothing it does is recorded (hooks and op capture see the
        framework's own ``_busy`` flag). The workflow uses it to load a common state into the
        candidate between steps without that copy showing up as ops of the next step.

        Example:
            >>> with cap.paused():  # doctest: +SKIP
            ...     load_state(model, arrays)
        """
        busy = getattr(self, "_busy", False)
        self._busy = True
        try:
            yield
        finally:
            self._busy = busy

    # ---- lifecycle: frameworks implement install/uninstall -----------------------------------
    def install(self) -> CaptureSession:
        """Install the framework's hooks (idempotent)."""
        raise NotImplementedError

    def uninstall(self) -> None:
        """Remove every hook; safe to call twice."""
        raise NotImplementedError

    def __enter__(self) -> CaptureSession:
        self.install()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and self.writer is not None:
            self.writer.interrupted = True  # an old trace it replaces is kept (trace.claim)
        self.close()  # close() uninstalls first, also when the body raised

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use as a decorator: each call of ``fn`` runs captured; the trace closes at exit (or
        on :meth:`close`)."""
        atexit.register(self.close)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.install()
            try:
                return fn(*args, **kwargs)
            finally:
                self.uninstall()
                self.flush()

        return wrapper

    # ---- recording -------------------------------------------------------------------------
    def emit(self, rec: Record, tensor: Any) -> None:
        """Record one tensor: statistics always, payload or hash as the policy says."""
        if self.writer is None:
            return
        a = self.adapter
        rec.dtype = a.dtype_name(tensor)
        rec.shape = a.shape(tensor)
        handle = a.stats_handle(tensor)
        payload = None
        nbytes = 0
        p = self.policy
        if p.tensors or p.hashes:
            size = rec.numel * _itemsize(rec.dtype)
            if p.hashes or p.max_bytes is None or self.payload_bytes + size <= p.max_bytes:
                payload, nbytes = a.snapshot(tensor)
                if p.tensors:
                    self.payload_bytes += nbytes
            else:
                rec.extra["payload_skipped"] = "max_bytes"
        self._enqueue(rec, handle, payload, nbytes)

    def _enqueue(self, rec: Record, handle: Any, payload: Any = None, nbytes: int = 0) -> None:
        """Queue ``rec`` (dtype and shape filled in) of this step and rank with its statistics
        ``handle`` and payload; fetch the batch's statistics when it is full."""
        rec.step = self.step_no
        rec.rank = self.rank
        self._pending.append((rec, handle, payload, nbytes))
        if len(self._pending) >= self.batch:
            self.resolve()

    def emit_value(self, rec: Record, tensor: Any) -> None:
        """Like :meth:`emit` but ignores name filters (used for the loss)."""
        self.emit(rec, tensor)

    def resolve(self) -> None:
        """Fetch pending statistics in one batch and pass the records to the writer."""
        if not self._pending or self.writer is None:
            self._pending.clear()
            return
        pending, self._pending = self._pending, []
        stats = self.adapter.resolve_stats([h for _, h, _, _ in pending])
        store = self.policy.tensors
        writer = self.writer
        plain: list[Record] = []  # records without payload go over in runs, order kept
        for (rec, _, payload, nbytes), st in zip(pending, stats):
            rec.stats = st
            if payload is None:
                plain.append(rec)
                continue
            writer.add_many(plain)
            plain = []
            writer.add(rec, payload, nbytes=nbytes, want_hash=self.policy.hashes, store=store)
        writer.add_many(plain)

    def step(self) -> None:
        """Mark the end of a training iteration."""
        self.resolve()
        self.step_no += 1

    def flush(self) -> None:
        self.resolve()
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        try:
            self.resolve()
        finally:
            if self.writer is not None:
                self.writer.close()


def _itemsize(dtype: str) -> int:
    from netparity.dtypes import storage_dtype

    try:
        return storage_dtype(dtype).itemsize
    except Exception:
        return 1
