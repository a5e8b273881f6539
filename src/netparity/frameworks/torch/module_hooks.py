"""Module hooks of the PyTorch capture: names, forward inputs/outputs, backward gradients.

Forward pre/post hooks (``with_kwargs=True``, ``always_call=True``; or global module hooks in
the launcher's global mode) record inputs and outputs and keep the stack of running modules.
Backward gradients use *tensor* hooks registered on the module's outputs (gradient w.r.t. the
outputs, role ``input``) and on the autograd edges that feed its inputs (gradient w.r.t. the
inputs *through this module*, role ``output``) rather than ``register_full_backward_hook``,
whose identity autograd function turns outputs into views and breaks
``nn.ReLU(inplace=True)`` after batch-norm. A tensor hook registered before an in-place update
receives the gradient of the value before the update, which is exactly the module's
input/output value.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Container
from typing import Any

import torch

from netparity.frameworks.torch._common import (
    TorchCaptureBase,
    _bwd_record,
    _Call,
    _flatten,
    _fwd_record,
    _in_backward,
    _native_name,
    _ReLU,
    _Tensor,
)
from netparity.frameworks.torch.compiled import clean_name, unwrap
from netparity.frameworks.torch.stats_plan import GradSlot
from netparity.trace.vocab import canonical_op

#: plain attribute types a leaf module's constructor settings are recorded with
_PLAIN = (bool, int, float, str, type(None))


def _plain(v: Any) -> bool:
    if isinstance(v, tuple):
        return len(v) <= 16 and all(isinstance(x, _PLAIN) for x in v)
    return isinstance(v, _PLAIN) and not (isinstance(v, str) and len(v) > 64)


def leaf_meta(module: torch.nn.Module) -> dict[str, Any]:
    """What a float64 replay of a leaf ``torch.nn`` module needs besides its tensors
    (:mod:`netparity.compare.leafreplay`): its class name, its public attributes of plain
    types (eps, stride, approximate, ...), its training flag and parameter names; a subclass
    from another library (timm's LayerNorm) is recorded as its nearest ``torch.nn`` base with
    ``subclass`` naming it. ``{}`` for a module with children or no ``torch.nn`` base."""
    cls = type(module)
    base = next((c for c in cls.__mro__ if (c.__module__ or "").startswith("torch.nn.modules.")
                 and c is not torch.nn.Module), None)
    if base is None or module._modules:
        return {}
    attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(module).items()
             if not k.startswith("_") and k != "training" and _plain(v)}
    sub = {} if base is cls else {"subclass": f"{cls.__module__}.{cls.__qualname__}"}
    return {"class": base.__name__, **sub, "attrs": attrs, "training": bool(module.training),
            "params": [n for n, _ in module.named_parameters(recurse=False)]}


class ModuleHooks(TorchCaptureBase):
    """Module naming, forward records and module gradient hooks."""

    def _name_tree(self, root: torch.nn.Module, prefix: str) -> None:
        # (a compiled wrapper's ``_orig_mod`` is no part of the eager model's names)
        self._trees.append(root)
        for name, m in root.named_modules(prefix=prefix):
            self._names.setdefault(id(m), clean_name(name))
        for name, p in root.named_parameters(prefix=prefix):
            self._param_names.setdefault(id(p), clean_name(name))

    def _name_of(self, module: torch.nn.Module, parent: str | None | bool = False) -> str:
        """The module's path; global mode names a module seen for the first time under
        ``parent`` (the running module's path, ``None`` at the root; by default the recording
        stack's top)."""
        n = self._names.get(id(module))
        if n is not None:
            return n
        if parent is False:
            parent = self._tls.stack[-1].path if self._tls.stack else None
        # global mode: a module seen for the first time; a root (nothing running) names its tree
        if parent is None:
            prefix = "" if self._roots == 0 else type(module).__name__
            self._roots += 1
            self._name_tree(module, prefix)
            return self._names[id(module)]
        n = f"{parent}.<{type(module).__name__}>" if parent else f"<{type(module).__name__}>"
        self._names[id(module)] = n
        return n

    def _module_names(self, module: torch.nn.Module) -> tuple[str, str]:
        t = type(unwrap(module))  # a compiled boundary is recorded as the module it compiles
        hit = self._canon_mod.get(t)
        if hit is None:
            hit = (_native_name(t), canonical_op("torch", t.__name__))
            self._canon_mod[t] = hit
        return hit

    def _global_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self._busy or os.getpid() != self._pid:
            return
        self._pre(self._name_of(module), module, args, {})

    def _global_post(self, module: torch.nn.Module, args: Any, kwargs: Any,
                     out: Any = None) -> None:
        # (out defaults: when forward raises, torch calls global always-call hooks as
        # hook(module, args, result) even if they were registered with_kwargs)
        if self._busy or os.getpid() != self._pid:
            return
        st = self._tls.stack
        if not st or st[-1].module is not module:
            return
        info = st[-1]
        if kwargs and self._on and not info.recompute and self.policy.modules:
            # global pre-hooks get no keyword arguments: record them here
            self._record_module(info, kwargs, "input", "kw")
        self._post(info.path, module, out)
        if (self.detect_loss and not st and not info.recompute and self._on
                and isinstance(module, torch.nn.modules.loss._Loss)
                and isinstance(out, _Tensor)):
            self.record_loss(out)

    def _pre_hook(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if self._busy:
            return None
        self._pre(path, module, args, kwargs)
        return None

    def _post_hook(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any,
                   out: Any) -> None:
        if self._busy:
            return None
        self._post(path, module, out)
        return None

    def _pre(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        native, op = self._module_names(module)
        info = _Call(path, module, native, op)
        info.recompute = _in_backward()  # forward re-run inside backward: checkpointing
        if not self._tls.stack and not info.recompute:
            self._phase.root_started()
        p = self.policy
        if self._on and not info.recompute:
            info.fwd_call = self._fwd_calls.get(path, 0)
            self._fwd_calls[path] = info.fwd_call + 1
            info.event = self.next_event()
            wanted = p.wants_name(path, op)
            if p.modules and wanted:
                info.source = self._source()
                if path not in self._leaf_meta:
                    self._leaf_meta[path] = leaf_meta(module)
                if p.wants_direction("forward"):
                    if (type(module) is _ReLU and module.inplace and not kwargs
                            and len(args) == 1 and isinstance(args[0], _Tensor)
                            and not (p.tensors or p.hashes)):
                        self._relu_input(info, args[0])
                    else:
                        self._record_module(info, args, "input", "")
                    if kwargs:
                        self._record_module(info, kwargs, "input", "kw")
        if self._on and p.wants_direction("backward") and torch.is_grad_enabled():
            # (under no_grad -- e.g. the first pass of a reentrant checkpoint -- this call
            # builds no graph, so it gets no gradient hooks)
            fresh = path not in self._hooked
            if fresh or not info.recompute:
                tensors: list[tuple[str, torch.Tensor]] = []
                _flatten(args, "", tensors)
                if kwargs:
                    _flatten(kwargs, "kw", tensors)
                for arg, t in tensors:
                    if t.requires_grad:
                        if p.modules and p.wants_name(path, op):
                            # resolved in _post into hooks on the edges that feed this input
                            info.in_edges.append((arg, t.grad_fn, t.output_nr, t))
                        if p.ops and t.grad_fn is not None:
                            info.in_nodes.add(t.grad_fn)
        self._tls.stack.append(info)

    def _post(self, path: str, module: torch.nn.Module, out: Any) -> None:
        st = self._tls.stack
        if not st or st[-1].module is not module:
            return
        info = st.pop()
        if not st and not info.recompute:
            self._phase.root_returned()
        if out is None or not self._on:
            return
        p = self.policy
        if (not info.recompute and p.modules and p.wants_direction("forward")
                and p.wants_name(path, info.op)
                and (info.relu is None or not self._relu_output(info, out))):
            self._record_module(info, out, "output", "",
                                self._relu_feeds.get((path, info.fwd_call), ()))
        if not p.wants_direction("backward"):
            return
        fresh = path not in self._hooked
        if info.recompute and not fresh:
            return  # non-reentrant checkpoint: the original graph already carries the hooks
        tensors: list[tuple[str, torch.Tensor]] = []
        _flatten(out, "", tensors)
        roots = []
        for arg, t in tensors:
            if t.requires_grad:
                if p.modules and p.wants_name(path, info.op):
                    self._step_hooks.append(t.register_hook(
                        functools.partial(self._grad_hook, info, "input", arg)))
                if t.grad_fn is not None:
                    roots.append(t.grad_fn)
        if info.in_edges:
            self._hook_input_grads(info, tensors)
        if any(t.requires_grad for _, t in tensors):
            self._hooked.add(path)
        if p.ops and roots:
            self._claim(info, roots)

    def _write_module_notes(self) -> None:
        """``modules`` of ``capture_notes.json``: the leaf ``torch.nn`` modules' settings."""
        meta = {k: v for k, v in self._leaf_meta.items() if v}
        if self.writer is None or not meta:
            return
        from netparity.capture.notes import write_notes

        write_notes(self.writer.rank_dir, {"modules": meta})

    def _record_module(self, info: _Call, obj: Any, role: str, prefix: str,
                       relu: Container[str] = ()) -> Any:
        """Record the tensors of a forward input/output structure; returns the last one's
        reuse-cache entry (see :meth:`_emit_all`)."""
        tensors: list[tuple[str, torch.Tensor]] = []
        _flatten(obj, prefix, tensors)
        if not tensors:
            return None

        return self._emit_all(lambda arg: _fwd_record(info, role, arg), tensors, relu)

    def _grad_hook(self, info: _Call, role: str, arg: str, grad: torch.Tensor,
                   extra: dict[str, Any] | None = None) -> None:
        if not self._on or grad is None or self._busy:
            return None
        self._start_bwd(info)
        self._emit_all(lambda a: _bwd_record(info, role, a, extra), [(arg, grad)])
        return None

    def _hook_input_grads(self, info: _Call, outs: list[tuple[str, torch.Tensor]]) -> None:
        """Record the gradient w.r.t. each input *through this module* (what
        ``register_full_backward_hook`` reports), not the input tensor's total gradient.

        A tensor hook on an input would see the sum over every use of the tensor (e.g. a
        residual block's input feeds its first layer and its shortcut). Instead, walk the autograd nodes between
        the module's outputs and its inputs and hook the edges that end at an input: their
        gradients, summed, are the module's contribution. In-place updates inside the module
        keep working because the input's node is taken before the module runs. An output that
        *is* an input (identity, in-place activation without a node of its own) passes the
        output's gradient through.
        """
        keys: dict[tuple[int, int], str] = {}
        leaves: dict[int, str] = {}
        stop: set[Any] = set()
        for arg, node, nr, t in info.in_edges:
            if node is None:
                leaves[id(t)] = arg
            else:
                keys[(id(node), nr)] = arg
                stop.add(node)
        info.in_edges = []  # drop tensor references
        acc = info.in_acc
        hooks = self._step_hooks
        todo: list[Any] = []
        for _, t in outs:
            if not t.requires_grad:
                continue
            if t.grad_fn is None:
                continue
            hit = keys.get((id(t.grad_fn), t.output_nr))
            if hit is not None:  # the output is the input itself: gradient passes through
                acc.setdefault(hit, GradSlot()).expected += 1
                hooks.append(t.register_hook(functools.partial(self._in_grad_tensor, info, hit)))
            else:
                todo.append(t.grad_fn)
        edges: dict[Any, list[tuple[int, str]]] = {}
        seen: set[Any] = set()
        budget = 100_000  # bounds the walk if the outputs depend on a huge outside graph
        while todo and budget:
            node = todo.pop()
            if node in seen or node in stop:
                continue
            seen.add(node)
            budget -= 1
            for j, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                found = keys.get((id(nxt), nr))
                if found is None and leaves:
                    var = getattr(nxt, "variable", None)
                    found = leaves.get(id(var)) if var is not None else None
                if found is not None:
                    edges.setdefault(node, []).append((j, found))
                    acc.setdefault(found, GradSlot()).expected += 1
                elif nxt not in stop:
                    todo.append(nxt)
        for node, lst in edges.items():
            key = id(node)
            self._node_edges.setdefault(key, []).append((info, lst))
            hooks.append(node.register_hook(
                functools.partial(self._in_grad_node, info, lst, key)))

    def _in_grad_node(self, info: _Call, lst: list[tuple[int, str]], key: int,
                      grad_inputs: Any, grad_outputs: Any) -> None:
        entries = self._node_edges.pop(key, None)  # (the node's first hook to run)
        if entries is not None and len(entries) > 1:
            self._sum_with_last_part(entries, grad_inputs)
        for j, arg in lst:
            self._in_grad_part(info, arg, grad_inputs[j] if j < len(grad_inputs) else None)
        return None

    def _in_grad_tensor(self, info: _Call, arg: str, grad: torch.Tensor) -> None:
        self._in_grad_part(info, arg, grad)
        return None

    def _in_grad_part(self, info: _Call, arg: str, grad: torch.Tensor | None) -> None:
        if not self._on or self._busy:
            return
        slot = info.in_acc.get(arg)
        if slot is None:
            return
        slot.arrived += 1
        if grad is not None:
            if slot.expected == 1:  # the usual case: one edge, record it now, no copy
                self._grad_hook(info, "output", arg, grad)
                return
            # Keep a reference, no copy: autograd's input buffer adds a contribution into a
            # gradient in place only when it holds the last reference (InputBuffer's
            # accumulate), which this one prevents; the version is checked anyway.
            slot.parts.append((grad, grad._version))
        if slot.arrived >= slot.expected and slot.parts:
            parts, slot.parts = slot.parts, []
            self._record_grad_sum(info, arg, parts)
