"""The loss scale of ``torch.amp.GradScaler``, recorded by the capture itself.

While a capture is installed, ``GradScaler.scale`` and ``GradScaler.update`` are wrapped (the
class's methods, put back on uninstall; only the ``scaler=`` instance when one is given, every
instance otherwise). After each ``update()`` two records are written, the names
:func:`netparity.analyzers.health.loss_scale_history` reads:

* ``loss_scale`` -- ``scaler.get_scale()`` after the update (the scale the next step uses);
* ``loss_scale_overflow`` -- 1 when the scaler found NaN/Inf in this step's gradients (it then
  skipped ``optimizer.step()``), else 0.

Once a scaler has scaled a loss, non-finite gradients are the scaler's business: the live
``stop_on_nonfinite`` checks no longer stop in the backward or the update (the forward still
is). Under ``netparity run`` (steps end at ``optimizer.step()``), once a scaler is seen the
step ends at ``scaler.update()`` instead, so a skipped ``optimizer.step()`` still ends one.

Example:
    >>> with capture(model, d, scaler=scaler) as cap:    # doctest: +SKIP
    ...     scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); cap.step()
"""

from __future__ import annotations

from typing import Any

import torch

_GS = torch.amp.GradScaler


class ScalerWatch:
    """Mixin of :class:`~netparity.frameworks.torch.capture.TorchCapture`."""

    scaler: Any = None
    _scaler_seen = False
    _scaler_orig: tuple[Any, Any] | None = None
    # provided by the capture this is mixed into
    _busy: bool
    auto_step: bool

    def _install_scaler(self) -> None:
        if self._scaler_orig is not None:
            return
        orig_update, orig_scale = _GS.update, _GS.scale
        cap = self

        def update(scaler: Any, new_scale: Any = None) -> Any:
            if cap.scaler is not None and scaler is not cap.scaler:
                return orig_update(scaler, new_scale)
            found = cap._found_inf(scaler)
            out = orig_update(scaler, new_scale)
            cap._record_scale(scaler, found)
            return out

        def scale(scaler: Any, outputs: Any) -> Any:
            if cap.scaler is None or scaler is cap.scaler:
                cap._scaler_seen = bool(getattr(scaler, "_enabled", True))
            return orig_scale(scaler, outputs)

        self._scaler_orig = (orig_update, orig_scale)
        setattr(_GS, "update", update)  # noqa: B010 - (a method swap mypy would refuse)
        setattr(_GS, "scale", scale)  # noqa: B010

    def _remove_scaler(self) -> None:
        if self._scaler_orig is not None:
            setattr(_GS, "update", self._scaler_orig[0])  # noqa: B010
            setattr(_GS, "scale", self._scaler_orig[1])  # noqa: B010
            self._scaler_orig = None

    @staticmethod
    def _found_inf(scaler: Any) -> float | None:
        """How many devices found NaN/Inf in this step's unscaled gradients (``None``: the
        scaler is disabled or did not check)."""
        if not getattr(scaler, "_enabled", True):
            return None
        try:
            with torch._C._DisableTorchDispatch():
                return sum(float(v) for st in scaler._per_optimizer_states.values()
                           for v in st.get("found_inf_per_device", {}).values())
        except (AttributeError, TypeError):  # another GradScaler layout: the scale only
            return None

    def _record_scale(self, scaler: Any, found: float | None) -> None:
        if not getattr(scaler, "_enabled", True):
            return
        busy, self._busy = self._busy, True
        try:
            with torch._C._DisableTorchDispatch():
                scale = torch.tensor(float(scaler.get_scale()), dtype=torch.float64)
                over = None if found is None else torch.tensor(float(found > 0))
        finally:
            self._busy = busy
        self.record("loss_scale", scale)  # type: ignore[attr-defined]
        if over is not None:
            self.record("loss_scale_overflow", over)  # type: ignore[attr-defined]
        if self.auto_step:  # netparity run: with a scaler, update() ends the step (the
            self.step()  # type: ignore[attr-defined]  # optimizer's hook may not have run)
