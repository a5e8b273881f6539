"""The phase of an op that runs outside every module: the loss, or gradient handling.

An op recorded while no module runs is not part of the model's forward pass when it runs after
the model returned (the loss function: cross entropy, label smoothing) or after a backward pass
and before the optimizer's step (clipping's norms and ``mul``, unscaling, dividing an
accumulated gradient). Recorded with module path ``""`` and direction ``forward``, they were
reported as "FORWARD at <root>". A capture tells :class:`OutsidePhase` when the model's root
module starts and returns, when a backward op runs and when the optimizer steps, and asks it
where each op outside the modules belongs:

* before the model (input preparation): ``("", "forward")``, as before;
* after the model returned, before any backward: :data:`LOSS` (``"<loss>"``), ``forward``;
* after a backward pass, before the optimizer's step (or the next forward):
  :data:`GRADIENTS` (``"<gradient handling>"``), direction ``update`` (it changes what the
  optimizer receives).

Each stretch of one phase is one "call" of that pseudo-module (its ``module_call``: the first
loss of a step is 0, the second micro-batch's loss 1), its ops numbered from 0 (``call``).

Example:
    >>> ph = OutsidePhase()
    >>> ph.where() is None                      # before the model: the root, as ever
    True
    >>> ph.root_started(); ph.root_returned()
    >>> ph.where()
    ('<loss>', 'forward', 0, 0)
    >>> ph.backward_ran(); ph.where()
    ('<gradient handling>', 'update', 0, 0)
"""

from __future__ import annotations

#: the pseudo-module path of ops run after the model returned and before backward
LOSS = "<loss>"
#: the pseudo-module path of ops run after backward and before the optimizer's step
GRADIENTS = "<gradient handling>"
PSEUDO_MODULES = (LOSS, GRADIENTS)


class OutsidePhase:
    """Where the ops outside every module of one step belong (see the module docstring)."""

    def __init__(self) -> None:
        self.after_root = False  # the root module returned (and no backward ran since)
        self.after_backward = False  # a backward op ran since the root module started
        self.current: str | None = None  # the phase of the last op outside the modules
        self.calls: dict[str, int] = {}  # stretches of each phase so far
        self.ops = 0  # ops of the current stretch

    def root_started(self) -> None:
        self.after_root = self.after_backward = False
        self.current = None

    def root_returned(self) -> None:
        self.after_root = True
        self.current = None if self.current != LOSS else LOSS

    def backward_ran(self) -> None:
        if not self.after_backward:
            self.after_backward = True
            self.current = None

    def optimizer_stepped(self) -> None:
        self.after_root = self.after_backward = False
        self.current = None

    def where(self) -> tuple[str, str, int, int] | None:
        """``(module path, direction, module call, op index)`` of the next op outside every
        module, or None where it belongs to the root (before the model)."""
        label = GRADIENTS if self.after_backward else LOSS if self.after_root else None
        if label is None:
            return None
        if label != self.current:
            self.current = label
            self.calls[label] = self.calls.get(label, -1) + 1
            self.ops = 0
        idx = self.ops
        self.ops += 1
        return label, "update" if label == GRADIENTS else "forward", self.calls[label], idx
