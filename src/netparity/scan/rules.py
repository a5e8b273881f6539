"""Trap rules: turn a table entry's ``traps`` and the arguments written at a call into advice.

A trap is a counterpart that exists but computes other numbers unless something is set
(BatchNorm's momentum convention, Conv2d's default ``pad_mode="same"``...). Each rule reads the
argument values at the call site (:class:`netparity.scan.static.Use`) and returns one sentence
saying what to set in MindSpore, or None when the call is safe as written. The rules are named in
the table (``"rule": "conv_padding"``) so the table stays data and the logic stays here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from netparity.scan.static import Arg, Use

Rule = Callable[[Mapping[str, Any], Use], "str | None"]


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _always(trap: Mapping[str, Any], use: Use) -> str | None:
    return str(trap["note"])


def _arg_default(trap: Mapping[str, Any], use: Use) -> str | None:
    arg, ms_arg = trap["arg"], trap.get("ms_arg", trap["arg"])
    given = use.arg(arg, trap.get("pos"))
    if given is None:
        value: Any = trap.get("torch_default")
        shown = f"{arg}={_fmt(value)} (PyTorch default)"
        known = True
    else:
        value, known = given.value, given.known
        shown = f"{arg}={given.text}"
    if known and value is None:
        return None  # e.g. momentum=None: another rule speaks about it
    if (trap.get("transform") != "one_minus" and "ms_default" in trap and known
            and value == trap["ms_default"]):
        return None  # MindSpore's default is already this value: nothing to set
    if trap.get("transform") == "one_minus":
        target = (f"{round(1.0 - float(value), 10)}" if known and isinstance(value, (int, float))
                  else f"1 - ({given.text if given else value})")
    else:
        target = _fmt(value) if known else (given.text if given else "?")
    return f"{shown} -> set {ms_arg}={target}: {trap['note']}"


def _when_arg(trap: Mapping[str, Any], use: Use) -> str | None:
    given = use.arg(trap["arg"], trap.get("pos"))
    if given is None:
        return None
    if "only" in trap and not (given.known and given.value == trap["only"]):
        return None
    if "unless" in trap and given.known and given.value == trap["unless"]:
        return None
    return f"{trap['arg']}={given.text}: {trap['note']}"


def _when_absent(trap: Mapping[str, Any], use: Use) -> str | None:
    """The note when the call does not pass ``arg`` (MindSpore's default for it differs)."""
    if use.arg(trap["arg"], trap.get("pos")) is not None:
        return None
    return f"no {trap['arg']}=: {trap['note']}"


def _ms_padding(pad: Arg, dims: int) -> str:
    """PyTorch's padding as MindSpore's ``padding`` wants it: an int stays, a tuple of one value
    per spatial dim becomes (before, after) per dim (2-D: 4 values, 3-D: 6); 1-D takes an int."""
    if pad.known and isinstance(pad.value, (tuple, list)):
        vals = [int(v) for v in pad.value]
        if len(vals) == 1 or (dims == 1 and len(set(vals)) == 1):
            return str(vals[0])
        if len(vals) == dims:
            return str(tuple(v for v in vals for _ in (0, 1)))
        return str(tuple(vals))
    if pad.known:
        return pad.text
    return (f"{pad.text} (an int as is; a tuple (h, w) written (h, h, w, w), (d, h, w) as "
            f"(d, d, h, h, w, w))")


def _conv_padding(trap: Mapping[str, Any], use: Use) -> str | None:
    pad = use.arg("padding", trap.get("pos"))
    mode = use.kwargs.get("padding_mode")
    dims = int(trap.get("dims", 2))
    extra = ""
    if mode is not None and not (mode.known and mode.value == "zeros"):
        extra = (f"; padding_mode={mode.text}: pad explicitly first (mindspore.nn.Pad / "
                 f"ops.pad with mode) and use pad_mode='valid'")
    base = "MindSpore's default pad_mode='same' would pad by itself"
    if pad is None or (pad.known and pad.value in (0, (0,), (0, 0), (0, 0, 0))):
        return f"padding={pad.text if pad else '0 (default)'} -> set pad_mode='valid': {base}{extra}"
    if pad.known and pad.value == "same":
        return (f"padding='same' -> set pad_mode='same': odd kernels give the same numbers; even "
                f"kernels: check which side gets the extra row{extra}")
    if pad.known and pad.value == "valid":
        return f"padding='valid' -> set pad_mode='valid': {base}{extra}"
    return (f"padding={pad.text} -> set pad_mode='pad', padding={_ms_padding(pad, dims)}: "
            f"{base} (and 'same' pads asymmetrically when the stride is > 1){extra}")


def _pool_padding(trap: Mapping[str, Any], use: Use) -> str | None:
    settings: list[str] = []
    why: list[str] = []
    stride = use.arg("stride", trap.get("stride_pos"))
    kernel = use.arg("kernel_size", 0)
    if stride is None or (stride.known and stride.value is None):
        settings.append(f"stride={kernel.text if kernel else 'kernel_size'}")
        why.append("stride not given (PyTorch: = kernel_size, MindSpore: 1)")
    pad = use.arg("padding", trap.get("padding_pos"))
    ceil = use.kwargs.get("ceil_mode")
    ceil_on = ceil is not None and not (ceil.known and ceil.value is False)
    padded = pad is not None and not (pad.known and pad.value in (0, (0,), (0, 0)))
    if padded or (ceil_on and trap.get("max")):
        settings.append("pad_mode='pad'")
        settings.append(f"padding={_ms_padding(pad, int(trap.get('dims', 2))) if padded and pad else 0}")
        why.append("MindSpore's default pad_mode='valid' ignores padding"
                   + (" and refuses ceil_mode" if trap.get("max") and ceil_on else ""))
    if ceil_on and ceil is not None:
        settings.append(f"ceil_mode={ceil.text}")
    if not why:
        return None
    return "-> set " + ", ".join(settings) + ": " + "; ".join(why)


def _ddof(trap: Mapping[str, Any], use: Use) -> str | None:
    unbiased = use.kwargs.get("unbiased")
    correction = use.kwargs.get("correction")
    if unbiased is not None:
        if not unbiased.known:
            return f"unbiased={unbiased.text} -> set ddof=int({unbiased.text}): {trap['note']}"
        return None if not unbiased.value else f"unbiased=True -> set ddof=1: {trap['note']}"
    if correction is not None:
        return f"correction={correction.text} -> set ddof={correction.text}: {trap['note']}"
    if len(use.args) >= 3 and use.args[2].known and isinstance(use.args[2].value, bool):
        return None if not use.args[2].value else f"unbiased=True -> set ddof=1: {trap['note']}"
    return f"unbiased (PyTorch default) -> set ddof=1: {trap['note']}"


def _dropout_p(trap: Mapping[str, Any], use: Use) -> str | None:
    if "p" in use.kwargs:
        return None  # keyword p means the drop probability in both
    pos: Arg | None = use.arg("", trap.get("pos", 0))
    if pos is None:
        return None  # both default to dropping half
    return (f"Dropout({pos.text}) positional: mindspore.nn.Dropout's first parameter is "
            f"keep_prob, so write p={pos.text} (keep_prob would be {pos.text}, i.e. drop "
            f"1 - {pos.text})")


def _weight_decay_all(trap: Mapping[str, Any], use: Use) -> str | None:
    if not use.params_from_model:
        return None
    wd = use.kwargs.get("weight_decay")
    if wd is None or (wd.known and not wd.value):
        return None
    return f"weight_decay={wd.text} on model.parameters(): {trap['note']}"


RULES: dict[str, Rule] = {
    "always": _always,
    "arg_default": _arg_default,
    "when_arg": _when_arg,
    "when_absent": _when_absent,
    "conv_padding": _conv_padding,
    "pool_padding": _pool_padding,
    "dropout_p": _dropout_p,
    "ddof": _ddof,
    "weight_decay_all": _weight_decay_all,
}


def evaluate(traps: list[Mapping[str, Any]], use: Use) -> list[str]:
    """The trap messages that apply to ``use`` (an unknown rule name is a table bug: KeyError)."""
    out = []
    for trap in traps:
        msg = RULES[trap["rule"]](trap, use)
        if msg:
            out.append(msg)
    return out
