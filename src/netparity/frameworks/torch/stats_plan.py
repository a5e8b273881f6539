"""The statistics planner of the PyTorch capture: every record's statistics go through here.

Reading a tensor is the capture's main cost, so the planner avoids reads whose result is
already known, with general rules (none names a model):

* **Reuse.** A tensor over the same memory (address, shape, strides, dtype, device) as a
  recently recorded tensor that is still alive, with neither written since (version
  counters), reuses its statistics (:class:`SeenEntry`): a module's output seen again as the
  next op's or module's input costs nothing.
* **In-place ReLU prediction.** The input of an exact ``nn.ReLU(inplace=True)`` is read once
  for both its own statistics and those of ``max(x, 0)``, the ReLU's output
  (:class:`ReluPlan`); when the input's statistics were reused from the module producing it,
  that module learns that this output feeds such a ReLU and computes both on its next call.
* **Summed gradients.** A module input used several times receives several gradient
  contributions (:class:`GradSlot`); their sum's statistics come from one read of each part,
  never a materialised sum (:class:`SumEntry`), and are kept for the input's total gradient,
  which autograd forms in place in the first part's memory. When one autograd node delivers
  both the last part of such a sum and an inner module's input gradient (a block's input
  feeding its first layer and its shortcut), one pass describes both.

Each cache entry describes tensors exactly as they are when it is made, so an unused entry
costs only its pass; every use re-checks identities and versions.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Container, Iterable
from typing import Any, NamedTuple

import torch

from netparity.capture.session import user_source
from netparity.frameworks.torch._common import (
    _SKIP,
    TorchCaptureBase,
    _bwd_record,
    _Call,
    _fwd_record,
    _reuse_key,
    _sum_in_order,
)
from netparity.trace.schema import Record


class SeenEntry(NamedTuple):
    """What the reuse cache knows of a recorded tensor's memory."""

    ref: Any  #: weak reference to the tensor (alive: its memory cannot have been reused)
    version: int  #: its version counter when the statistics were taken
    handle: Any  #: statistics handle
    snapshot: Any  #: payload snapshot ``(thunk, nbytes)`` or None
    relu: Any  #: statistics handle of ``max(t, 0)``, or None
    producer: Record | None  #: the record that computed the statistics, if any


class SumEntry(NamedTuple):
    """Statistics of a sum of gradient contributions, as they were when summed."""

    parts: list[tuple[Any, int]]  #: (weak reference, version) of each summand, in order
    handle: Any  #: statistics handle of the sum


class ReluPlan(NamedTuple):
    """An exact in-place ReLU's output statistics, read with its input."""

    handle: Any  #: statistics handle of ``max(x, 0)``
    tensor: torch.Tensor  #: the input, which the ReLU overwrites
    version: int  #: the input's version before the ReLU


class GradSlot:
    """The gradient contributions to one module input (one per autograd edge into it)."""

    __slots__ = ("expected", "arrived", "parts")

    def __init__(self) -> None:
        self.expected = 0  #: contributions expected (edges found behind the module's outputs)
        self.arrived = 0  #: contributions arrived so far
        self.parts: list[tuple[torch.Tensor, int]] = []  #: (gradient, its version) kept so far


class StatsPlanner(TorchCaptureBase):
    """Statistics of every record, with reuse, ReLU prediction and summed-gradient fusion."""

    def _source(self) -> str:
        return user_source(_SKIP)

    def _emit_t(self, rec: Record, t: torch.Tensor, relu: bool = False) -> Any:
        """Like :meth:`CaptureSession.emit`, with statistics reuse for unchanged tensors; with
        ``relu``, a tensor read now also yields the statistics of ``max(t, 0)``. Returns the
        reuse-cache entry that describes ``t`` (``None`` when nothing is cached)."""
        if self.writer is None:
            return None
        a = self.adapter_t
        try:
            ver = t._version
        except RuntimeError:  # inference tensors have no version counter
            ver = None
        key = _reuse_key(t)
        hit = self._seen.get(key) if ver is not None else None
        # The cached tensor must still be alive (so its memory cannot have been reused) and
        # neither it nor this tensor may have been written since (both version counters).
        src = hit.ref() if hit is not None else None
        p = self.policy
        if hit is not None and src is not None and hit.version == ver and (
                src is t or src._version == ver):
            handle, snap, rh, prod = hit.handle, hit.snapshot, hit.relu, hit.producer
        else:
            hit = None
            rh = None
            if relu and not (p.tensors or p.hashes):
                handle, rh = a.stats_handle_relu(t)
            else:
                handle = a.stats_handle(t)
            snap = None
            prod = rec
        payload = None
        nbytes = 0
        if p.tensors or p.hashes:
            size = t.numel() * t.element_size()
            if p.hashes or p.max_bytes is None or self.payload_bytes + size <= p.max_bytes:
                if snap is None:
                    snap = a.snapshot(t)
                payload, nbytes = snap
                if p.tensors:
                    self.payload_bytes += nbytes
            else:
                rec.extra["payload_skipped"] = "max_bytes"
        if ver is not None and (hit is None or hit.snapshot is not snap):
            # bounded: reuse is almost always between neighbouring records
            if len(self._seen) > 1024:
                self._seen.clear()
            hit = SeenEntry(weakref.ref(t), ver, handle, snap, rh, prod)
            self._seen[key] = hit
        self._queue(rec, t, handle, payload, nbytes)
        return hit

    def _queue(self, rec: Record, t: torch.Tensor, handle: Any, payload: Any = None,
               nbytes: int = 0) -> None:
        """Queue ``rec`` describing ``t`` (dtype, shape) with its statistics ``handle``."""
        rec.dtype = self.adapter_t.dtype_name(t)
        rec.shape = tuple(t.shape)
        self._enqueue(rec, handle, payload, nbytes)

    def _emit_all(self, make: Callable[[str], Record], items: Iterable[tuple[str, torch.Tensor]],
                  relu: Container[str] = ()) -> Any:
        """Record each ``(arg, tensor)`` of ``items`` (those whose arg is in ``relu`` with the
        statistics of their ReLU too); returns the last one's reuse-cache entry."""
        busy = self._busy
        self._busy = True
        entry = None
        try:
            # (no no_grad(): statistics and snapshots work on detached tensors, which build no
            # graph, and it costs more than a whole small-tensor record)
            with torch._C._DisableTorchDispatch():
                for arg, t in items:
                    entry = self._emit_t(make(arg), t, arg in relu)
        finally:
            self._busy = busy
        return entry

    def _relu_input(self, info: _Call, t: torch.Tensor) -> None:
        """Record the input of an exact ``nn.ReLU(inplace=True)`` and keep the statistics of
        ``max(t, 0)`` for its output. When the input's statistics were reused from the module
        that produced it, without the ReLU's, learn that its output feeds a ReLU: from its next
        call on, its own pass computes both."""
        entry = self._record_module(info, (t,), "input", "", ("0",))
        if entry is None:
            return
        if entry.relu is not None:
            info.relu = ReluPlan(entry.relu, t, entry.version)
            return
        prod = entry.producer
        if (prod is not None and prod.kind == "module" and prod.direction == "forward"
                and prod.role == "output" and prod.module != info.path):
            self._relu_feeds.setdefault((prod.module, prod.call), set()).add(prod.arg)

    def _relu_output(self, info: _Call, out: Any) -> bool:
        """Record an in-place ReLU's output from the statistics read with its input; ``False``
        (nothing recorded) unless ``out`` is that very tensor written exactly once since."""
        rh, t, ver = info.relu  # type: ignore[misc]
        info.relu = None
        if out is not t or self.writer is None or out._version != ver + 1:
            return False
        rec = _fwd_record(info, "output", "")
        self._seen[_reuse_key(out)] = SeenEntry(weakref.ref(out), ver + 1, rh, None, None, rec)
        self._queue(rec, out, rh)
        return True

    def _sum_with_last_part(self, entries: list[tuple[_Call, list[tuple[int, str]]]],
                            grad_inputs: Any) -> None:
        """One autograd node's gradient w.r.t. a tensor that is both an inner module's input
        through one edge (e.g. a residual block's first layer, recorded as it arrives) and the
        last contribution to an outer module's summed input gradient (the block's): describe both
        from one pass over the contributions, before the node's hooks record them in turn,
        by leaving the results where those records look first (``_seen``, ``_sums``).

        Every entry left is an exact description of tensors as they are now (the last part's
        own statistics; the sum of exactly these parts at their versions), so an entry nobody
        asks for costs only its pass."""
        p = self.policy
        if p.tensors or p.hashes or self.writer is None or not self._on or self._busy:
            return
        for info, lst in entries:
            for j, arg in lst:
                slot = info.in_acc.get(arg)
                if (slot is None or slot.expected < 2 or slot.arrived + 1 != slot.expected
                        or len(slot.parts) != slot.expected - 1 or j >= len(grad_inputs)):
                    continue
                g = grad_inputs[j]
                if g is None or any(t._version != v for t, v in slot.parts):
                    continue
                grads = [t for t, _ in slot.parts]
                grads.append(g)
                ids = tuple(id(t) for t in grads)
                if ids in self._sums:  # (a container sharing the same parts)
                    continue
                with torch._C._DisableTorchDispatch():
                    hsum, hlast = self.adapter_t.stats_handle_sum_last(grads)
                if hsum is not None:
                    self._keep_sum(ids, grads, hsum)
                if hlast is not None:
                    self._seen[_reuse_key(g)] = SeenEntry(weakref.ref(g), g._version, hlast,
                                                          None, None, None)

    def _keep_sum(self, ids: tuple[int, ...], grads: list[torch.Tensor], handle: Any) -> None:
        """Remember the statistics ``handle`` of the sum of ``grads`` (as they are now)."""
        if len(self._sums) > 64:  # bounded: a sum is asked for right after it is made
            self._sums.clear()
        self._sums[ids] = SumEntry([(weakref.ref(g), g._version) for g in grads], handle)

    def _record_grad_sum(self, info: _Call, arg: str,
                         parts: list[tuple[torch.Tensor, int]]) -> None:
        """Record the sum of a module's gradient contributions to one input (added in arrival
        order, as autograd adds them). With statistics only, on CPU float32, the kernel reads
        the contributions and never materialises the sum (one read of each instead of a copy,
        an addition and a read of the sum)."""
        grads = [g for g, _ in parts]
        if any(g._version != v for g, v in parts):
            # only code that writes gradients in place inside backward gets here
            self._grad_hook(info, "output", arg, _sum_in_order(grads),
                            extra={"warning": "a gradient contribution was written in place "
                                              "during backward; this sum may be off"})
            return
        p = self.policy
        if not (p.tensors or p.hashes) and self.writer is not None:
            # A container and its first child share an input and so the same contributions
            # (e.g. a stage of blocks and its first block): one sum serves both.
            key = tuple(id(g) for g in grads)
            hit = self._sums.get(key)
            if hit is not None and all(r() is g and g._version == v
                                       for (r, v), g in zip(hit.parts, grads)):
                handle = hit.handle
            else:
                with torch._C._DisableTorchDispatch():  # (the caller checked _on and _busy)
                    handle = self.adapter_t.stats_handle_sum(grads)
                self._keep_sum(key, grads, handle)
            if handle is not None:
                self._start_bwd(info)
                rec = _bwd_record(info, "output", arg, None)
                self._queue(rec, grads[0], handle)
                # Autograd adds the later contributions into the first one in place when
                # nothing else holds its storage (InputBuffer), so the input's total gradient
                # -- seen next by the hooks of whatever produced the input -- is this very sum
                # when it lives in the first part's memory with exactly len(parts) - 1 writes
                # since: every one of these parts is added to that buffer, so one more write
                # (a contribution from elsewhere, an in-place hook) or a copy fails the check.
                first, v0 = parts[0]
                self._seen[_reuse_key(first)] = SeenEntry(weakref.ref(first), v0 + len(parts) - 1,
                                                          handle, None, None, rec)
                return
        self._grad_hook(info, "output", arg, _sum_in_order(grads))
