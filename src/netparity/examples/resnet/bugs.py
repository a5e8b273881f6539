"""The classic migration bugs the ResNet demo can inject, one line each (no framework needed).

Model bugs change the MindSpore network built by :mod:`ms_resnet`; training bugs change what
:mod:`ms_train` does. Every builder accepts any name in :data:`BUGS` (a training bug leaves the
network untouched), so one ``bug=`` option can be passed to every part of a spec.

Example:
    >>> from netparity.examples.resnet.bugs import BUGS, check_bug
    >>> sorted(BUGS)[:2]
    ['bn-decay', 'bn-eps']
    >>> check_bug(None) is None
    True
"""

from __future__ import annotations

from netparity.errors import UsageError

__all__ = ["BUGS", "FOUND_AT", "MODEL_BUGS", "TRAIN_BUGS", "check_bug", "describe_bugs",
           "expected_place"]

MODEL_BUGS: dict[str, str] = {
    "bn-momentum": "BatchNorm momentum copied as 0.1 instead of converted to 0.9 "
    "(MindSpore momentum = 1 - PyTorch momentum): running statistics drift",
    "bn-eps": "BatchNorm epsilon 1e-3 instead of PyTorch's 1e-5: every BN output shifts slightly",
    "same-pad": "pad_mode='same' instead of symmetric padding=1 in the first stride-2 3x3 "
    "convolution (layer2.0.conv2 in ResNet-50, layer2.0.conv1 in ResNet-18): "
    "the window shifts by one pixel",
    "relu-approx": "the first residual block's ReLU written as a close approximation "
    "(LeakyReLU, slope 1e-3): outputs shift by ~1e-3 relative, below any fixed tolerance",
}

TRAIN_BUGS: dict[str, str] = {
    "bn-decay": "weight decay also applied to BatchNorm gamma/beta (and biases): "
    "the update of those parameters differs",
    "warmup": "warmup learning rate off by one step (lr_init + inc * i instead of * (i + 1)): "
    "the first update differs",
    "eval-mode": "evaluation without switching BatchNorm to inference mode "
    "(batch statistics used instead of moving averages)",
    "label-smooth": "label smoothing's off-value s / C instead of s / (C - 1): the loss differs "
    "while every forward output agrees",
    "lr-decay": "cosine decay measured over all steps instead of the steps after warmup: the "
    "learning rate is right at step 0 and wrong from step 1 on",
}

BUGS: dict[str, str] = {**MODEL_BUGS, **TRAIN_BUGS}

#: where the one-step workflow must name each bug: (phase, place, step); the place of
#: "same-pad" depends on the depth (the first stride-2 3x3 convolution), given as {depth: place}
FOUND_AT: dict[str, tuple[str, str | dict[int, str], int | None]] = {
    "bn-eps": ("forward", "bn1", 0),
    "same-pad": ("forward", {18: "layer2.0.conv1", 34: "layer2.0.conv1", 50: "layer2.0.conv2"}, 0),
    "bn-momentum": ("update", "bn1", 0),
    "bn-decay": ("update", "bn1", 0),
    "warmup": ("update", "optimizer (learning rate)", 0),
    "eval-mode": ("eval", "bn1", None),
    "relu-approx": ("forward", "layer1.0.relu", 0),
    "label-smooth": ("loss", "loss", 0),
    "lr-decay": ("later-steps", "optimizer (learning rate)", 1),
}


def expected_place(bug: str, depth: int) -> tuple[str, str, int | None]:
    """(phase, place, step) where the workflow must name ``bug`` on a ResNet of ``depth``.

    Example:
        >>> expected_place("same-pad", 50)
        ('forward', 'layer2.0.conv2', 0)
    """
    phase, where, step = FOUND_AT[bug]
    if isinstance(where, dict):
        where = where[50 if depth >= 50 else 18]
    return phase, where, step


def check_bug(bug: str | None) -> str | None:
    """Validate a bug name (``None`` means no bug).

    Raises:
        UsageError: the name is not in :data:`BUGS`.

    Example:
        >>> check_bug("bn-eps")
        'bn-eps'
    """
    if bug is None or bug in BUGS:
        return bug
    raise UsageError(f"unknown ResNet demo bug {bug!r}; choose one of: {', '.join(BUGS)}")


def describe_bugs() -> str:
    """One line per bug, ``name: description``.

    Example:
        >>> describe_bugs().splitlines()[0].startswith("bn-momentum:")
        True
    """
    return "\n".join(f"{name}: {text}" for name, text in BUGS.items())
