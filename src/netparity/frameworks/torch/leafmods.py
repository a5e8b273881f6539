"""Leaf ``torch.nn`` modules rebuilt from what a capture recorded of them (class name, plain
attributes, training flag) and run in float64: the PyTorch half of plain ``compare``'s
calibration by replay (:mod:`netparity.compare.leafreplay`). A class named by a trace is looked
up among ``torch.nn``'s built-in modules, never imported. A MindSpore reference's leaf Cells
(``Dense``, ``Conv2d``, ``LayerNorm``, ``BatchNorm2d`` in training, activations) are replayed
as the same math in float64 PyTorch (:func:`_ms_leaf`): MindSpore's CPU kernels lack float64
for most of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_RANDOM = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
           "FeatureAlphaDropout", "RReLU")


def module_class(name: Any) -> Any:
    """The ``torch.nn`` built-in class named ``name`` (looked up, never imported), else None."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        return None
    cls = vars(torch.nn.modules).get(name)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)
            and (cls.__module__ or "").startswith("torch.nn.modules.")
            and cls is not torch.nn.Module):
        return None
    return cls


def build_leaf(meta: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
    """The leaf module of ``meta`` in float64 with ``params``, or None when it cannot be (a
    MindSpore reference's Cell, ``meta["framework"] == "mindspore"``: :func:`_ms_leaf`)."""
    if meta.get("framework") == "mindspore":
        return _ms_leaf(meta, params)
    cls = module_class(meta.get("class"))
    attrs, training = meta.get("attrs"), meta.get("training")
    if cls is None or not isinstance(attrs, dict) or not isinstance(training, bool):
        return None
    if cls.__name__ in _RANDOM and training and attrs.get("p", 1.0) != 0.0:
        return None
    mod = cls.__new__(cls)
    torch.nn.Module.__init__(mod)
    for k, v in attrs.items():
        if not isinstance(k, str) or not k.isidentifier() or k.startswith("_"):
            return None
        setattr(mod, k, tuple(v) if isinstance(v, list) else v)
    for n, v in params.items():
        mod.register_parameter(n, torch.nn.Parameter(torch.from_numpy(np.array(v, np.float64)),
                                                     requires_grad=False))
    if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
        if not training:
            return None  # eval mode normalises by running statistics the trace does not hold
        c = int(attrs.get("num_features", 0))
        mod.register_buffer("running_mean", torch.zeros(c, dtype=torch.float64))
        mod.register_buffer("running_var", torch.ones(c, dtype=torch.float64))
        mod.register_buffer("num_batches_tracked", torch.tensor(0))
    mod.train(training)
    return mod


def run_leaf(mod: Any, ins: list[np.ndarray]) -> np.ndarray | None:
    with torch.no_grad():
        out = mod(*[torch.from_numpy(np.asarray(x, np.float64).copy()) for x in ins])
    return out.numpy() if isinstance(out, torch.Tensor) else None


def vjp_leaf(mod: Any, ins: list[np.ndarray], grad_out: np.ndarray,
             wanted: list[int]) -> tuple[list[np.ndarray], dict[str, np.ndarray]] | None:
    """The backward of ``mod`` (from :func:`build_leaf`) in float64: its forward on ``ins``,
    then the vector-Jacobian product with ``grad_out``; returns the gradients w.r.t. the
    inputs numbered in ``wanted`` and w.r.t. its own parameters (by name), or None when the
    output is not one tensor of ``grad_out``'s size."""
    xs = [torch.from_numpy(np.asarray(x, np.float64).copy()) for x in ins]
    for i in wanted:
        xs[i].requires_grad_(True)
    params = dict(mod.named_parameters(recurse=False))
    for p in params.values():
        p.requires_grad_(True)
    with torch.enable_grad():
        # (a clone per input: an in-place leaf may not overwrite a tensor autograd differentiates)
        out = mod(*[x.clone() if x.requires_grad else x for x in xs])
    g = np.asarray(grad_out, np.float64)
    if not isinstance(out, torch.Tensor) or out.numel() != g.size:
        return None
    targets = [xs[i] for i in wanted] + list(params.values())
    if not targets:
        return None
    got = torch.autograd.grad(out, targets, torch.from_numpy(g.copy()).reshape(out.shape),
                              allow_unused=True)
    arrays = [np.zeros(tuple(t.shape)) if d is None else d.detach().numpy()
              for t, d in zip(targets, got)]
    return arrays[:len(wanted)], dict(zip(params, arrays[len(wanted):]))


# ---- a MindSpore reference's leaf Cells, replayed as float64 PyTorch math ------------------
# MindSpore's own float64 kernels are missing on CPU for most of these; the math is the same in
# any framework, so the Cell's documented semantics are written here in torch.nn.functional and
# held to the same self-check as everything else (the replay must make the reference's own
# output again to a few units of its precision, or the call is not replayed).

_MS_ACT = {"ReLU": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
           "SiLU": torch.nn.functional.silu}


class _Fn(torch.nn.Module):
    """A float64 replay of a MindSpore leaf Cell: ``fn(*inputs)``."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(v)
    if len(t) == 2 and all(isinstance(x, int) for x in t):
        return (int(t[0]), int(t[1]))
    if len(t) == 4 and all(isinstance(x, int) for x in t) and t[0] == t[1] and t[2] == t[3]:
        return (int(t[0]), int(t[2]))  # MindSpore's (top, bottom, left, right), symmetric
    raise ValueError(f"not a pair: {v!r}")


def _ms_conv2d(a: dict[str, Any], w: torch.Tensor, b: torch.Tensor | None) -> Any:
    F = torch.nn.functional
    if a.get("data_format", "NCHW") != "NCHW":
        return None
    stride, dil = _pair(a.get("stride", 1)), _pair(a.get("dilation", 1))
    groups, mode = int(a.get("group", 1)), str(a.get("pad_mode", "same")).lower()
    k = tuple(w.shape[2:])
    if mode == "pad":
        pad = a.get("padding", 0)
        if isinstance(pad, int):
            lrtb = (pad, pad, pad, pad)
        else:
            t = tuple(pad)
            if len(t) != 4:
                return None
            lrtb = (t[2], t[3], t[0], t[1])  # (top, bottom, left, right) -> F.pad's order
    elif mode == "valid":
        lrtb = (0, 0, 0, 0)
    elif mode != "same":
        return None

    def run(x: torch.Tensor) -> torch.Tensor:
        nonlocal lrtb
        if mode == "same":  # TensorFlow's rule: output ceil(in / stride), the extra row last
            tot = [max((-(-x.shape[2 + i] // stride[i]) - 1) * stride[i]
                       + (k[i] - 1) * dil[i] + 1 - x.shape[2 + i], 0) for i in (0, 1)]
            lrtb = (tot[1] // 2, tot[1] - tot[1] // 2, tot[0] // 2, tot[0] - tot[0] // 2)
        return F.conv2d(F.pad(x, lrtb), w, b, stride, 0, dil, groups)

    return run


def _ms_leaf(meta: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
    """The float64 replay of a MindSpore leaf Cell recorded as ``meta``, or None."""
    F = torch.nn.functional
    cls, a = meta.get("class"), meta.get("attrs")
    training = meta.get("training")
    if not isinstance(a, dict) or not isinstance(training, bool):
        return None
    p = {n: torch.from_numpy(np.array(v, np.float64)) for n, v in params.items()}
    w, b = p.get("weight"), p.get("bias")
    g, beta = p.get("gamma"), p.get("beta")
    fn: Any = None
    if cls in _MS_ACT:
        fn = _MS_ACT[cls]
    elif cls == "GELU" and a.get("approximate") in ("none", False, "tanh", True):
        approx = "tanh" if a.get("approximate") in ("tanh", True) else "none"

        def fn(x: torch.Tensor) -> torch.Tensor:
            return F.gelu(x, approximate=approx)
    elif cls == "Dense" and a.get("activation") is None and w is not None:
        def fn(x: torch.Tensor) -> torch.Tensor:
            return F.linear(x, w, b)
    elif cls == "LayerNorm" and g is not None and beta is not None:
        shape = tuple(int(d) for d in a.get("normalized_shape") or ())
        if shape and a.get("begin_norm_axis", -1) in (-len(shape), -1 if len(shape) == 1 else 0):
            eps = float(a.get("epsilon", 1e-7))

            def fn(x: torch.Tensor) -> torch.Tensor:
                return F.layer_norm(x, shape, g, beta, eps)
    elif cls == "Conv2d" and w is not None:
        fn = _ms_conv2d(a, w, b)
    elif (cls == "BatchNorm2d" and training and a.get("use_batch_statistics") in (None, True)
          and g is not None and beta is not None):
        eps = float(a.get("eps", 1e-5))

        def fn(x: torch.Tensor) -> torch.Tensor:
            return F.batch_norm(x, None, None, g, beta, True, 0.0, eps)
    elif cls == "Dropout" and (not training or a.get("p") == 0.0):
        def fn(x: torch.Tensor) -> torch.Tensor:
            return x
    return None if fn is None else _Fn(fn)
