"""Op-level capture for PyTorch: a ``TorchDispatchMode`` sees every aten op below autograd.

Forward, backward and ``optimizer.step()`` ops are all seen, without whitelists or patching.
Forward ops are attributed to the innermost running module (the module hooks' stack), backward
ops to the module whose autograd nodes run them (:mod:`.attribution`), update ops to the
optimizer step. Inputs are recorded before the op runs (an in-place op overwrites them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from netparity.frameworks.torch._common import (
    TorchCaptureBase,
    _autograd_node,
    _flatten,
    _flatten_call,
    _in_backward,
    _in_grad_seed,
    _reuse_key,
)
from netparity.trace.schema import Record
from netparity.trace.vocab import UNINITIALISED_OPS, canonical_op

# Ops that write into an input without declaring it in their schema, so autograd's version
# counter does not move: training-mode batch norm updates running_mean/running_var in place.
# The statistics/payload reuse keyed on (tensor, version) must forget their inputs afterwards,
# or the buffers recorded after the step would repeat the values from before the update.
_SILENT_WRITERS = frozenset({"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"})


class _OpMode(TorchDispatchMode):
    """Dispatch mode forwarding every aten op to the capture."""

    def __init__(self, cap: OpDispatch):
        super().__init__()
        self.cap = cap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.cap._on_op(func, args, kwargs or {})


class OpDispatch(TorchCaptureBase):
    """Records every aten op with its inputs, outputs, scalars and owning module."""

    def _names_of_op(self, func: Any) -> tuple[str, str]:
        hit = self._op_names.get(func)
        if hit is None:
            native = str(func)
            hit = (native, canonical_op("torch", native))
            self._op_names[func] = hit
        return hit

    def _on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._busy or not self._on:
            return func(*args, **kwargs)
        tls = self._tls
        if self._in_update:
            direction = "update"
            info = None
        elif _in_backward():
            if tls.stack:  # checkpoint recomputation: a repeat of forward ops, not recorded
                return func(*args, **kwargs)
            direction = "backward"
            info = tls.bwd[-1] if tls.bwd else None
            self._phase.backward_ran()
        else:
            direction = "forward"
            info = tls.stack[-1] if tls.stack else None
            if info is None and _in_grad_seed():
                # loss.backward() builds the seed gradient (ones_like) before the engine runs:
                # it belongs to the backward pass, not to the forward ops around the loss
                direction = "backward"
        # outside every module, after the model returned: the loss or gradient handling
        phase = self._phase.where() if info is None and direction == "forward" else None
        if phase is not None:
            direction = phase[1]
        p = self.policy
        if not p.wants_direction(direction):
            return func(*args, **kwargs)
        native, op = self._names_of_op(func)
        if op in UNINITIALISED_OPS:  # its output is memory nobody has written yet
            return func(*args, **kwargs)
        if phase is not None:
            module, _, mcall, idx = phase
        elif direction == "update":
            module, mcall, idx = "", self._update_no, self._update_ops
            self._update_ops += 1
        elif info is None:
            module, mcall = "", -1
            if direction == "forward":
                idx = self._outside_fwd
                self._outside_fwd += 1
            else:
                idx = self._outside_bwd
                self._outside_bwd += 1
        elif direction == "forward":
            module, mcall, idx = info.path, info.fwd_call, info.nops
            info.nops += 1
        else:
            module, mcall, idx = info.path, info.bwd_call, info.bwd_nops
            info.bwd_nops += 1
        if not p.wants_name(module, op):
            return func(*args, **kwargs)
        ins, scalars = _flatten_call(args, kwargs)
        event = self.next_event()
        source = info.source if (info is not None and info.source) else ""
        if not source:
            source = self._source()

        first: dict[str, Any] = {"scalars": scalars} if scalars else {}
        if direction == "backward":
            # the autograd node running it (``SqrtBackward0``): which forward op's derivative
            # this is, for the numerics origin (a module's backward mixes several)
            node = _autograd_node()
            if node:
                first["node"] = node
        extra: list[dict[str, Any]] = [first] if first else []

        def make(role: str, arg: str) -> Record:
            # operator scalars (alpha, stride, dim...) go on the call's first record
            return Record(kind="op", op=op, native=native, module=module, call=idx,
                          module_call=mcall, direction=direction, role=role, arg=arg,
                          event=event, source=source, extra=extra.pop() if extra else {})

        self._busy = True
        try:
            # inputs before the op: an in-place op would overwrite them
            for arg, t in ins:
                self._emit_t(make("input", arg), t)
        finally:
            self._busy = False
        out = func(*args, **kwargs)
        if func._schema.is_mutable or \
                native.partition(".")[2].partition(".")[0] in _SILENT_WRITERS:
            # An op that writes into an argument (relu_, add_, out=, batch norm's statistics):
            # autograd bumps the version counter only after this mode returns, so the
            # (memory, version) reuse cache would hand the output the statistics recorded for
            # the input a moment ago -- the output must be read again, with its new values.
            for _, t in ins:
                self._seen.pop(_reuse_key(t), None)
        outs: list[tuple[str, torch.Tensor]] = []
        _flatten(out, "", outs)
        if outs:
            self._busy = True
            try:
                for arg, t in outs:
                    self._emit_t(make("output", arg), t)
            finally:
                self._busy = False
        return out
