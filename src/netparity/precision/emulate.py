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


def pop_emulate(build: Callable[..., Any], options: dict[str, Any]
                ) -> tuple[str | None, dict[str, Any]]:
    """(the ``emulate`` request, the options left for ``build``); a ``build`` that names an
    ``emulate`` argument keeps it (the request is then the spec's own)."""
    from netparity.workflow.compiled import pop_request

    text, rest = pop_request(build, options, KEY)
    return (str(text) if text not in (None, "", False) else None), rest


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
