"""Backward attribution of the PyTorch capture: which module an op run by autograd belongs to.

In each module's forward post-hook, the autograd nodes its outputs depend on (down to the
nodes of its inputs) are walked; each node not yet claimed gets a pre-hook/post-hook pair that
sets the "current backward module" while it runs. Inner modules' hooks run first, so they
claim their own nodes and the parent keeps the rest (e.g. a residual add).
"""

from __future__ import annotations

import functools
from typing import Any

from netparity.frameworks.torch._common import (
    TorchCaptureBase,
    _Call,
)


class BackwardAttribution(TorchCaptureBase):
    """Claims autograd nodes for modules and tracks the running backward module."""

    def _start_bwd(self, info: _Call) -> None:
        if info.bwd_call < 0:
            info.bwd_call = self._bwd_calls.get(info.path, 0)
            self._bwd_calls[info.path] = info.bwd_call + 1
            info.bwd_event = self.next_event()

    def _claim(self, info: _Call, roots: list[Any]) -> None:
        """Give the autograd nodes behind ``roots`` (not claimed by inner modules) to ``info``."""
        claimed = self._claimed
        stop = info.in_nodes
        todo = list(roots)
        pre = functools.partial(self._node_pre, info)
        post = self._node_post
        hooks = self._step_hooks
        seen: set[Any] = set()
        while todo:
            node = todo.pop()
            if node is None or node in stop or node in seen:
                continue
            seen.add(node)
            owner = claimed.get(node)
            if owner is not None:
                # an inner module's subgraph: resume below its inputs instead of re-walking it
                todo.extend(owner.in_nodes)
                continue
            claimed[node] = info
            hooks.append(node.register_prehook(pre))
            hooks.append(node.register_hook(post))
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)

    def _node_pre(self, info: _Call, grad_outputs: Any) -> None:
        self._start_bwd(info)
        self._tls.bwd.append(info)
        return None

    def _node_post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self._tls.bwd:
            self._tls.bwd.pop()
        return None
