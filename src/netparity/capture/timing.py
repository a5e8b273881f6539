"""Light timing of training steps, framework-independent: the step timeline and its records.

The framework units (:mod:`netparity.frameworks.torch.timing`,
:mod:`netparity.frameworks.mindspore.timing`) register hooks that call into a
:class:`StepTimer`; it keeps the marks of the current step (``time.perf_counter()`` only, no
device synchronisation) and, when the step ends, writes them as records of kind ``timing``
(docs/perf.md):

* **forward**: the root module's forward pre-hook to its forward hook (summed when the model is
  called several times in one step); every submodule's calls too (total and self time).
* **backward**: from the end of the last forward to the last parameter gradient accumulated
  (where the framework has such a hook), or to the optimizer's start.
* **comm**: the exposed gradient communication (data-parallel all-reduce): from the last
  gradient computed to the last bucket reduced, where the framework unit reports buckets
  (:meth:`StepTimer._comm_done`); the part of the all-reduce that overlaps backward is not a
  phase (it is in the ``allreduce`` records).
* **compile**: graph compilation inside the step (MindSpore GRAPH_MODE: the root Cell's
  ``compile``; the compiled graph's execution is then the **forward** phase, forward, backward
  and optimizer fused when the root is a training-step Cell).
* **optimizer**: the optimizer step's start to its end, which closes the step (or
  :meth:`StepTimer.step` does, for a run without an optimizer).
* **data**: time inside the loader's ``__next__`` when the loader is handed over; otherwise the
  gap from the end of the previous step to the start of the forward.
* **other**: the rest of the step (loss, ``zero_grad``, logging, Python overhead, idle).

Timing is host wall clock: on an asynchronous device a phase's kernels may still run after its
hook returned, so device work shows up where the host waits for it.

Example:
    >>> import tempfile
    >>> class Fake(StepTimer):
    ...     def _register(self): return []
    >>> t = Fake(tempfile.mkdtemp(), {"framework": "none"}).install()
    >>> t._pre_hook("", "Net")(None, ()); t._post_hook("")(None, (), None); t.step(); t.close()
    >>> t.steps
    1
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from netparity.errors import UsageError
from netparity.trace import Record, TraceWriter, build_manifest
from netparity.trace.schema import TIMING_PHASES

__all__ = ["StepTimer", "loader_facts"]

_clock = time.perf_counter
_T = TypeVar("_T", bound="StepTimer")


class _TimedIterator:
    """The loader's iterator, timing each ``next()`` (the training thread waits there)."""

    def __init__(self, it: Iterator[Any], owner: StepTimer):
        self._it = it
        self._owner = owner

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        t = _clock()
        try:
            return next(self._it)
        finally:
            self._owner._data_wait(t, _clock())

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]


# a module call's row in _StepMarks.modules: path, class, forward start, forward seconds (None
# until its post-hook ran), forward self seconds, parent row (-1: a root), backward start and end
# (the gradient reaching its output / leaving it; None when unseen), forward memory peak and the
# peak's rise above the memory at its start (bytes; None when not read)
_RPATH, _RCLS, _RT, _RDUR, _RSELF, _RPARENT, _RBT0, _RBT1, _RMPEAK, _RMRISE = range(10)


class _StepMarks:
    """What the hooks saw during one step (seconds since the profile started)."""

    def __init__(self, start: float):
        self.start = start
        self.fwd_first: float | None = None
        self.fwd_last: float | None = None
        self.fwd_total = 0.0
        self.grad_first: float | None = None
        self.grad_last: float | None = None
        self.opt_start: float | None = None
        self.opt_total = 0.0
        self.data_total = 0.0
        self.data_first: float | None = None
        self.compile_total = 0.0  # graph compilation (MindSpore GRAPH_MODE: Cell.compile)
        self.mem: dict[str, int] = {}  # memory peak readings at phase ends (memory= reader)
        self.compile_first: float | None = None
        # one row per module call, in call order (columns _RPATH..): filled by the forward hooks
        # and, for the backward columns, by the framework's autograd-node hooks
        self.modules: list[list[Any]] = []
        self.grads: list[tuple[int, float]] = []  # parameter index, gradient accumulated at
        # all-reduce buckets: index, start (bucket ready), end (reduced), bytes, parameter indices
        self.comm: list[tuple[int, float, float, int, list[int]]] = []

    @property
    def active(self) -> bool:
        return self.fwd_first is not None or self.opt_start is not None


class StepTimer:
    """The timeline of the current step and the trace it is written into.

    Subclasses register the framework's hooks in :meth:`_register` (returning handles with a
    ``remove()``) and route them to :meth:`_pre_hook`, :meth:`_post_hook`, :meth:`_grad_hook`,
    :meth:`_opt_pre` and :meth:`_opt_post`. ``modules=False`` times only the phases.
    """

    def __init__(self, path: str | os.PathLike[str], facts: dict[str, Any], *,
                 loader: Iterable[Any] | None = None, modules: bool = True,
                 overwrite: bool = False, rank: int = 0, writer: TraceWriter | None = None,
                 step_of: Callable[[], int] | None = None,
                 memory: tuple[str, Callable[[], int], Callable[[], None] | None] | None = None,
                 module_memory: Callable[[], tuple[int, int]] | None = None,
                 module_memory_steps: int = 3, owned: dict[str, list[int]] | None = None):
        self.loader = loader
        # ``memory``: (what, read the peak in bytes, reset the peak or None): read at the end
        # of forward, backward and optimizer (reset at each phase start when it can be)
        self._mem = memory
        # ``module_memory``: read (peak since the last reset, current) in bytes, with
        # ``memory``'s reset: each module call's forward peak, nested (a child's reset folds the
        # peak so far into its parent's). Read in the first ``module_memory_steps`` steps only
        # (two reads and resets per module call: ~0.1 ms each through /proc)
        self._mm = module_memory if memory is not None and memory[2] is not None else None
        self._mm_steps = module_memory_steps
        self._mm_on = self._mm is not None and module_memory_steps > 0
        # ``owned``: module path -> indices of the parameters under it: its backward ends no
        # earlier than their gradients are accumulated (the module's first op's node)
        self._owned = owned or {}
        self._modules = modules
        # ``writer``: an accuracy capture's (``capture(..., timing=True)``): the timing records
        # go into its trace, numbered by its step counter (``step_of``); it stays open here
        self._own_writer = writer is None
        self._step_of = step_of
        if writer is None:
            facts = {"timing": "light", "loader": loader_facts(loader), **facts}
            writer = TraceWriter(path, manifest=build_manifest(**facts), overwrite=overwrite,
                                 rank=rank)
        self._writer = writer
        self.rank = rank
        self._handles: list[Any] = []
        self._loader_cls: type | None = None
        self._t0 = _clock()
        self._cur = _StepMarks(0.0)
        self._stack: list[list[Any]] = []  # [path, cls, start, child seconds]
        self.steps = 0
        self._closed = False
        self._data_seen = False  # a loader's next() was timed: the data phase is its waits

    def _register(self) -> list[Any]:
        """The framework's hooks (handles with ``remove()``)."""
        raise NotImplementedError

    # -- installation ---------------------------------------------------------------------------
    def install(self: _T) -> _T:
        """Register the hooks (and wrap the loader's iterator); returns ``self``. A step begun
        before :meth:`uninstall` is dropped: its marks are incomplete."""
        if self._closed:
            raise UsageError("this profile is closed")
        if self._handles:
            return self
        self._handles = self._register()
        if self.loader is not None:
            try:
                self._wrap_loader(self.loader)
            except UsageError:
                self.close()  # no hook left behind, the trace closed
                raise
        self._cur = _StepMarks(_clock() - self._t0)
        self._stack.clear()
        return self

    def backdate(self, start: float, waits: Iterable[tuple[float, float]] = ()) -> None:
        """Begin the first step (and the clock ``t``) at clock value ``start`` instead of at
        :meth:`install`, with ``waits`` (clock pairs) as its data waits: the zero-code launcher
        installs at the first model call, after the loader wait that fetched the batch."""
        if self.steps or self._cur.active or self._stack:
            return
        self._t0 = start
        self._cur = _StepMarks(0.0)
        for s, e in waits:
            self._data_wait(s, e)

    def uninstall(self) -> None:
        """Remove every hook and give the loader its class back (the trace stays open:
        :meth:`install` resumes timing, e.g. to pair timed and untimed steps in a benchmark)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._loader_cls is not None:
            self.loader.__class__ = self._loader_cls  # type: ignore[union-attr]
            self._loader_cls = None

    def flush(self) -> None:
        """Commit the records written so far (readers see them)."""
        self._writer.flush()

    def _wrap_loader(self, loader: Any) -> None:
        # ``for batch in loader`` looks ``__iter__`` up on the type, so the instance's class is
        # swapped for a subclass whose iterator times ``next()``; close() swaps it back. The
        # user's loop stays unchanged (zero code), and the loader object is the same one.
        cls = type(loader)
        owner = self

        def __iter__(inner: Any) -> Iterator[Any]:  # noqa: N807 - the dunder being overridden
            return _TimedIterator(cls.__iter__(inner), owner)

        try:
            loader.__class__ = type(f"Timed{cls.__name__}", (cls,), {"__iter__": __iter__})
        except TypeError as e:  # builtins (a list) cannot change class
            raise UsageError(f"cannot time this loader ({cls.__name__}: {e}); pass a "
                             f"DataLoader or another class instance, or iterate "
                             f"prof.timed(loader)") from None
        self._loader_cls = cls

    def timed(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``loader`` with its waits timed (for loaders whose class cannot be swapped).

        Example:
            >>> # for x, y in prof.timed([(1, 2)]): ...
        """
        return _TimedIterator(iter(loader), self)

    # -- hooks (hot: plain attribute work only) -------------------------------------------------
    def _pre_hook(self, path: str, cls: str) -> Any:
        stack = self._stack

        def pre(mod: Any, args: Any) -> None:
            t = _clock() - self._t0
            if not stack:
                self._forward_begins(t)
            rows = self._cur.modules
            # frame: path, class, start, children's seconds, row, peak so far, memory at start
            frame = [path, cls, t, 0.0, len(rows), 0, 0]
            rows.append([path, cls, t, None, 0.0, stack[-1][4] if stack else -1, None, None,
                         None, None])
            if self._mm_on:
                peak, now = self._mm()  # type: ignore[misc]
                self._mem[2]()  # type: ignore[index,misc]
                if stack:  # the parent's peak up to here
                    stack[-1][5] = max(stack[-1][5], peak)
                frame[5] = frame[6] = now
            stack.append(frame)

        return pre

    def _post_hook(self, path: str) -> Any:
        stack = self._stack

        def post(mod: Any, args: Any, out: Any) -> None:
            t = _clock() - self._t0
            # an exception inside a child's forward skips its post-hook: unwind to our frame
            while stack and stack[-1][0] != path:
                stack.pop()
            if not stack:
                return
            _, cls, start, child, slot, peak, base = stack.pop()
            dur = t - start
            c = self._cur
            row = c.modules[slot]
            row[_RDUR] = dur
            row[_RSELF] = dur - child
            if self._mm_on:
                now_peak, _ = self._mm()  # type: ignore[misc]
                self._mem[2]()  # type: ignore[index,misc]
                peak = max(peak, now_peak)
                row[_RMPEAK], row[_RMRISE] = peak, peak - base
                if stack:
                    stack[-1][5] = max(stack[-1][5], peak)
            self._watch_backward(out, row, args)
            if stack:
                stack[-1][3] += dur
            else:
                c.fwd_last = t
                c.fwd_total += dur
                if self._mm_on:  # the nested resets split the phase: its peak is the root's
                    c.mem["forward"] = max(c.mem.get("forward", 0), peak)
                elif self._mem is not None:
                    self._mem_mark("forward")

        return post

    def _watch_backward(self, out: Any, row: list[Any], args: Any = ()) -> None:
        """Framework units hook the autograd nodes of ``out`` (and the gradients of the call's
        inputs ``args``) so that the module's backward start and end land in ``row``
        (:meth:`_bwd_begins`, :meth:`_bwd_ends`)."""

    def _bwd_begins(self, row: list[Any], *_: Any) -> None:
        t = _clock() - self._t0
        if row[_RBT0] is None or t < row[_RBT0]:
            row[_RBT0] = t

    def _bwd_ends(self, row: list[Any], *_: Any) -> None:
        t = _clock() - self._t0
        if row[_RBT1] is None or t > row[_RBT1]:
            row[_RBT1] = t

    def _forward_begins(self, t: float) -> None:
        c = self._cur
        if c.fwd_first is None:
            c.fwd_first = t
            if self._mem is not None:
                c.mem["start"] = self._mem[1]()
                if self._mem[2] is not None:
                    self._mem[2]()

    def _mem_mark(self, phase: str) -> None:
        m = self._mem
        if m is not None:
            self._cur.mem[phase] = m[1]()
            if m[2] is not None:
                m[2]()

    def _grad_hook(self, *_: Any) -> None:
        t = _clock() - self._t0
        c = self._cur
        if c.grad_first is None:
            c.grad_first = t
        c.grad_last = t

    def _grad_hook_for(self, index: int) -> Any:
        """A gradient-accumulated hook that also notes which parameter (bucket advice)."""
        def hook(*_: Any) -> None:
            t = _clock() - self._t0  # read here: backdate() may move it after install
            c = self._cur
            if c.grad_first is None:
                c.grad_first = t
            c.grad_last = t
            c.grads.append((index, t))

        return hook

    def _comm_done(self, bucket: int, start: float, nbytes: int, params: list[int]) -> None:
        """One all-reduce bucket finished (``start``: the clock when it was handed over; may
        be called from the communication thread: a list append is atomic)."""
        if self._handles:
            self._cur.comm.append((bucket, start - self._t0, _clock() - self._t0, nbytes,
                                   params))

    def _opt_pre(self, *_: Any) -> None:
        self._cur.opt_start = _clock() - self._t0
        if self._mem is not None:
            self._mem_mark("backward")

    def _opt_post(self, *_: Any) -> None:
        t = _clock() - self._t0
        c = self._cur
        if self._mem is not None:
            self._mem_mark("optimizer")
        if c.opt_start is not None:
            c.opt_total += t - c.opt_start
        self._end_step(t)

    def _compiled(self, start: float, end: float) -> None:
        """A graph compilation ran from ``start`` to ``end`` (clock values)."""
        c = self._cur
        if c.compile_first is None:
            c.compile_first = start - self._t0
        c.compile_total += end - start

    def _graph_call(self, start: float, end: float, compile_seconds: float) -> None:
        """One call of a compiled graph (compilation included) ran: its execution is the
        forward phase (forward, backward and optimizer fused, for a training-step graph) and
        the call ends the step."""
        c = self._cur
        s, e = start - self._t0, end - self._t0
        if c.fwd_first is None:
            c.fwd_first = s
        c.fwd_last = e
        c.fwd_total += max(end - start - compile_seconds, 0.0)
        self._end_step(e)

    def _data_wait(self, start: float, end: float) -> None:
        c = self._cur
        s = start - self._t0
        self._data_seen = True
        if c.data_first is None:
            c.data_first = s
        c.data_total += end - start

    # -- steps ------------------------------------------------------------------------------------
    def step(self) -> None:
        """Close the current step (needed only without an optimizer: its ``step()`` closes it).

        A step with neither a forward nor an optimizer step is not counted, so calling this
        after ``optimizer.step()`` does no harm.
        """
        self._end_step(_clock() - self._t0)

    def _end_step(self, end: float) -> None:
        c = self._cur
        if not c.active:
            return
        self._write_step(c, end)
        self.steps += 1
        self._cur = _StepMarks(end)
        self._stack.clear()
        self._mm_on = self._mm is not None and self.steps < self._mm_steps

    def _write_step(self, c: _StepMarks, end: float) -> None:
        fwd_first = c.fwd_first if c.fwd_first is not None else end
        fwd_last = c.fwd_last if c.fwd_last is not None else fwd_first
        if self._data_seen:
            data, data_t = c.data_total, (c.data_first if c.data_first is not None else c.start)
        else:
            data, data_t = max(fwd_first - c.start, 0.0), c.start
        back_end = c.grad_last if c.grad_last is not None and c.grad_last > fwd_last else \
            (max(b[1] for b in c.comm) if c.comm else c.opt_start)
        backward = max(back_end - fwd_last, 0.0) if back_end is not None else 0.0
        comm_t, comm = end, 0.0
        if c.comm:  # exposed communication: the last bucket reduced after the last gradient
            comm_t = max(back_end if back_end is not None else fwd_last, fwd_last)
            stop = min(max(b[2] for b in c.comm), c.opt_start if c.opt_start is not None
                       else end)
            comm = max(stop - comm_t, 0.0)
        total = end - c.start
        spans = {
            "step": (c.start, total),
            "data": (data_t, data),
            "compile": (c.compile_first if c.compile_first is not None else c.start,
                        c.compile_total),
            "forward": (fwd_first, c.fwd_total),
            "backward": (fwd_last, backward),
            "comm": (comm_t, comm),
            "optimizer": (c.opt_start if c.opt_start is not None else end, c.opt_total),
        }
        spans["other"] = (c.start, max(total - data - c.compile_total - c.fwd_total - backward
                                       - comm - c.opt_total, 0.0))
        step = self._step_of() if self._step_of is not None else self.steps
        recs = [Record(kind="timing", op=phase, step=step, direction="forward", role="output",
                       rank=self.rank, extra={"t": t, "d": d, **(
                           {"mem": c.mem[phase]} if phase in c.mem else {})})
                for phase, (t, d) in ((p, spans[p]) for p in TIMING_PHASES)]
        if "start" in c.mem:  # the reading before the forward (a high-water's baseline)
            recs[0].extra["mem0"] = c.mem["start"]
        calls: dict[str, int] = {}
        for path, cls, t, d, s, extra in self._module_rows(c):
            n = calls.get(path, 0)
            calls[path] = n + 1
            recs.append(Record(kind="timing", op="module", native=cls, module=path, call=n,
                               step=step, direction="forward", role="output", rank=self.rank,
                               extra={"t": t, "d": d, "self": s, **extra}))
        if c.grads:  # when each gradient was ready (one record: 161 for a ResNet-50)
            recs.append(Record(kind="timing", op="grads", step=step, direction="backward",
                               role="grad", rank=self.rank,
                               extra={"t": c.grads[0][1], "d": c.grads[-1][1] - c.grads[0][1],
                                      "ready": [[i, round(t, 7)] for i, t in c.grads]}))
        for b, t0, t1, nbytes, params in c.comm:
            recs.append(Record(kind="timing", op="allreduce", call=b, step=step,
                               direction="backward", role="grad", rank=self.rank,
                               extra={"t": t0, "d": t1 - t0, "bytes": nbytes,
                                      "params": params}))
        self._writer.add_many(recs)

    def _module_rows(self, c: _StepMarks) -> list[tuple[str, str, float, float, float,
                                                          dict[str, Any]]]:
        """Each finished module call with its extra facts: backward start ``bt``, seconds ``bd``
        and self seconds ``bself`` (less its child modules' backward), forward memory ``mem``
        (peak) and ``mem_rise`` (above its start)."""
        rows = c.modules
        ready: dict[int, float] = {}
        if self._owned:
            for i, t in c.grads:
                ready[i] = t
        bd: list[float | None] = [None] * len(rows)
        for k, r in enumerate(rows):
            if r[_RDUR] is None or r[_RBT0] is None:
                continue
            end = r[_RBT1]
            for i in self._owned.get(r[_RPATH], ()):
                g = ready.get(i)
                if g is not None and (end is None or g > end):
                    end = g
            if end is not None and end >= r[_RBT0]:
                bd[k] = end - r[_RBT0]
        child = [0.0] * len(rows)
        for k, r in enumerate(rows):
            d = bd[k]
            if d is not None and r[_RPARENT] >= 0:
                child[r[_RPARENT]] += d
        out = []
        for k, r in enumerate(rows):
            if r[_RDUR] is None:  # its forward raised: no post-hook
                continue
            extra: dict[str, Any] = {}
            d = bd[k]
            if d is not None:
                extra = {"bt": r[_RBT0], "bd": d, "bself": max(d - child[k], 0.0)}
            if r[_RMPEAK] is not None:
                extra["mem"] = int(r[_RMPEAK])
                extra["mem_rise"] = int(r[_RMRISE])
            out.append((r[_RPATH], r[_RCLS], r[_RT], r[_RDUR], r[_RSELF], extra))
        return out

    def record_probe(self, sizes: list[int], seconds: list[float], what: str = "allreduce"
                     ) -> None:
        """Keep a communication measurement (bytes, seconds per collective; the bandwidth
        model of the bucket advice is fitted on it) as one record of op ``comm_probe``."""
        step = self._step_of() if self._step_of is not None else self.steps
        self._writer.add_many([Record(kind="timing", op="comm_probe", native=what,
                                      step=step, rank=self.rank,
                                      extra={"bytes": [int(b) for b in sizes],
                                             "seconds": [float(x) for x in seconds]})])

    # -- closing ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the last step if it ran, remove every hook, restore the loader, write the trace.
        Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._cur.active and self._cur.fwd_last is not None:
                self._end_step(_clock() - self._t0)
        finally:
            self.uninstall()
            if self._own_writer:
                self._writer.close()
            else:
                self._writer.flush()

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()



def loader_facts(loader: Any) -> dict[str, Any] | None:
    """The loader settings the data-starvation advice quotes (DataLoader attributes)."""
    if loader is None:
        return None
    facts: dict[str, Any] = {"class": type(loader).__name__}
    for k in ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers",
              "batch_size"):
        v = getattr(loader, k, None)
        if isinstance(v, (bool, int, float, str)):
            facts[k] = v
    return facts
