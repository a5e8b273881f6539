"""``emulate_fp16("fp16-ops=conv,pool")``: run a live PyTorch step with the chosen operator
classes in float16 on the CPU (docs/precision.md, "--emulate")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from netparity.precision.standards import parse_emulate


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
