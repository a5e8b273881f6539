"""``emulate_fp16("fp16-ops=conv,pool")``: run a live PyTorch step with the chosen operator
classes in float16 on the CPU (docs/precision.md, "--emulate")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from netparity.errors import UsageError
from netparity.precision.standards import parse_emulate

#: the spec option (``--cand-opt emulate=fp16-ops=conv``; ``--emulate`` of ``step`` and
#: ``bisect``) that runs a side's ``train_step`` under :func:`emulate_fp16`
KEY = "emulate"


@contextmanager
def emulate_fp16(spec: str = "fp16-ops") -> Iterator[dict[str, int]]:
    """The block's PyTorch operators of the classes in ``spec`` (``fp16-ops``: the Ascend
    float16-only list) computed in float16, results handed back in their inputs' dtype; yields
    the calls emulated per aten name. Capture inside it (``netparity.capture``) and
    ``netparity precision`` names where float16 loses; compare the loss with a run without it
    to see what a float16-only device does to the loss."""
    from netparity.frameworks.torch.fp16_emulate import fp16_ops

    with fp16_ops(parse_emulate(spec)) as calls:
        yield calls


#: the attribute an emulated spec's model carries (its ``--emulate`` request), so that module
#: and operator replay (:mod:`netparity.workflow.replay`) run the candidate under the same
#: emulation as its training step -- without it, replay computed the candidate's modules in
#: float32 and cleared the float16 difference as rounding noise
ATTR = "_netparity_emulate"


def mark(model: Any, text: str | None) -> None:
    """Record on ``model`` that its spec runs under ``--emulate text`` (nothing for None)."""
    if text is not None:
        try:
            object.__setattr__(model, ATTR, text)
        except (AttributeError, TypeError):  # a model that refuses attributes: no replay emulation
            pass


def emulating(model: Any) -> Any:
    """The emulation ``model``'s spec runs under (:func:`emulate_fp16`), or a context that
    changes nothing."""
    import contextlib

    text = getattr(model, ATTR, None)
    return emulate_fp16(text) if isinstance(text, str) else contextlib.nullcontext()


def emulated(framework: str, train_step: Callable[[Any, Any], Any], text: str | None,
             source: str) -> Callable[[Any, Any], Any]:
    """``train_step`` run under :func:`emulate_fp16` (``text``: ``fp16-ops=...``); itself when
    ``text`` is ``None``. Every command that builds a spec passes through here (``step``'s
    captured, noise and free runs, ``bisect``'s runs), so the emulated side is the same in all."""
    if text is None:
        return train_step
    parse_emulate(text)  # a bad request is one line before anything runs
    if framework != "torch":
        raise UsageError(f"{source}: --emulate {text}: emulation runs PyTorch operators in "
                         f"float16; this spec is {framework}")

    def step(x: Any, y: Any) -> Any:
        with emulate_fp16(text):
            return train_step(x, y)

    step.emulate = text  # type: ignore[attr-defined]
    return step
