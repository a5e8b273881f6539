"""Regenerate ``src/netparity/scan/mapping.json`` (the PyTorch -> MindSpore table of ``netparity scan``).

Run with both frameworks installed:  ``python tools/gen_scan_mapping.py``.

How the table is made (semi-automatic, then curated):

1. Candidates: public ``torch.nn`` module classes, ``torch.nn.functional`` functions, a list of
   common ``torch`` functions and ``Tensor`` methods, plus hand-written entries for optimizers,
   LR schedulers, data, distributed, AMP and ``torch.nn.init``.
2. Each candidate is looked up by the same name (or a known rename) in the MindSpore namespaces
   below, in order; the first hit that exists in the INSTALLED MindSpore is the target. Argument
   renames are derived from the two signatures (``inspect.signature``) with a fixed list of
   known renames; torch arguments with no counterpart are listed as ``dropped``.
3. ``CURATED`` overrides are merged on top: traps (rules evaluated by ``netparity.scan.rules``
   against the argument values at each call), defaults that differ, notes, mode remarks and
   compositions for missing APIs. Every default quoted there was read from the installed
   packages (torch 2.13, MindSpore 2.10) when the table was written.

Nothing here runs at scan time; the scan reads only the JSON.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import mindspore
import torch

OUT = Path(__file__).resolve().parent.parent / "src" / "netparity" / "scan" / "mapping.json"

#: torch arg name -> MindSpore arg name, applied only when MindSpore lacks the torch name
RENAMES = {
    "groups": "group", "bias": "has_bias", "dim": "axis", "keepdim": "keep_dims",
    "in_features": "in_channels", "out_features": "out_channels", "eps": "epsilon",
    "negative_slope": "alpha", "lr": "learning_rate", "num_embeddings": "vocab_size",
    "embedding_dim": "embedding_size", "input": "x", "other": "y",
}

#: classes/functions whose MindSpore name differs
NAME_RENAMES = {
    "torch.nn.Linear": "mindspore.nn.Dense",
    "torch.nn.Module": "mindspore.nn.Cell",
    "torch.nn.Sequential": "mindspore.nn.SequentialCell",
    "torch.nn.ModuleList": "mindspore.nn.CellList",
    "torch.nn.ModuleDict": "mindspore.nn.CellDict",
    "torch.nn.Parameter": "mindspore.Parameter",
    "torch.nn.ParameterList": "mindspore.ParameterTuple",
    "torch.Tensor": "mindspore.Tensor",
    "torch.tensor": "mindspore.tensor",
    "torch.no_grad": "mindspore._no_grad",
    "torch.nn.functional.linear": "mindspore.mint.nn.functional.linear",
}

def _words(text: str) -> list[str]:
    """Whitespace-separated names (keeps the long lists readable)."""
    return text.split()


COMMON_TORCH_FUNCS = _words("""
abs add addmm all allclose amax amin any arange argmax argmin argsort baddbmm bmm broadcast_to
cat ceil chunk clamp clip clone concat cos cosh cumprod cumsum diag diagonal div dot einsum empty
empty_like eq equal erf exp expand_dims eye flatten flip floor fmod full full_like gather ge gelu
gt index_select inverse isclose isfinite isinf isnan le lerp linspace log log1p log2 log_softmax
logical_and logical_not logical_or logsumexp lt masked_fill masked_select matmul max maximum mean
median meshgrid min minimum mm mul multinomial narrow ne neg nonzero norm normal numel ones
ones_like outer permute pow prod rand rand_like randint randn randn_like randperm reciprocal relu
remainder repeat_interleave reshape roll round rsqrt scatter scatter_add sigmoid sign sin sinh
softmax sort split sqrt square squeeze stack std sub sum t take tan tanh tensordot tile topk trace
transpose tril triu true_divide trunc unbind unique unsqueeze var var_mean std_mean vstack hstack
where zeros zeros_like from_numpy manual_seed no_grad enable_grad is_tensor tensor as_tensor
cdist cross diff histc bucketize searchsorted kron cartesian_prod rot90 atan2 frexp istft complex
logcumsumexp cummax nan_to_num bernoulli
""")

TENSOR_METHODS = _words("""
abs add add_ addmm all any argmax argmin argsort bool byte ceil char chunk clamp clamp_ clone
contiguous copy_ cos cpu cuda cumsum detach detach_ dim div div_ double eq exp expand expand_as
fill_ flatten flip float floor gather ge gt half int item le log long lt masked_fill masked_fill_
matmul max mean min mm mul mul_ ne neg norm numel numpy permute pow prod reciprocal relu repeat
reshape reshape_as round rsqrt scatter sigmoid sign size softmax sort split sqrt square squeeze
std sub sub_ sum t tanh to tolist topk transpose type type_as unsqueeze unsqueeze_ var view
view_as zero_ where backward requires_grad_ new_zeros new_ones new_full new_tensor index_select
narrow unfold chunk split triu tril fmod remainder log_softmax scatter_ index_add_ scatter_add_
masked_scatter_ normal_ uniform_ bernoulli_ exp_ clamp_min abs_ sqrt sqrt_ argmax half bfloat16
log_ exp_ sin cos floor_divide logical_not logical_and any nansum nanmean amax amin repeat_interleave
""")

NS_MODULE = ("mindspore.nn", "mindspore.mint.nn")
NS_FUNCTIONAL = ("mindspore.mint.nn.functional", "mindspore.ops")
NS_TORCH = ("mindspore.mint", "mindspore.ops")


def _resolve(dotted: str) -> Any:
    """The MindSpore object a dotted name denotes (the scan's own look-up), or None."""
    from netparity.frameworks.mindspore.api import resolve

    return resolve(dotted)


def _params(obj: Any) -> list[str] | None:
    try:
        sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return None
    return [p.name for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _auto(torch_name: str, namespaces: tuple[str, ...], kind: str) -> dict[str, Any]:
    short = torch_name.rsplit(".", 1)[1]
    candidates = ([NAME_RENAMES[torch_name]] if torch_name in NAME_RENAMES
                  else [f"{ns}.{short}" for ns in namespaces])
    hits = [c for c in candidates if _resolve(c) is not None]
    entry: dict[str, Any] = {"kind": kind}
    if not hits:
        entry["status"] = "missing"
        return entry
    entry["target"] = hits[0]
    if len(hits) > 1:
        entry["alt"] = hits[1:]
    tp = _params(_resolve(torch_name))
    mp = _params(_resolve(hits[0]))
    if tp is not None and mp is not None:
        args = {}
        dropped = []
        for a in tp:
            if a in mp:
                continue
            r = RENAMES.get(a)
            if r and r in mp:
                args[a] = r
            else:
                dropped.append(a)
        if args:
            entry["args"] = args
        if dropped:
            entry["dropped"] = dropped
    return entry


def _torch_nn_classes() -> list[str]:
    out = []
    for n in sorted(dir(torch.nn)):
        obj = getattr(torch.nn, n)
        if n.startswith("_") or not inspect.isclass(obj):
            continue
        if issubclass(obj, torch.nn.Module) or n in ("Parameter", "ParameterList"):
            if "Lazy" in n or n.startswith("Native") or n in ("Container",):
                continue
            out.append(f"torch.nn.{n}")
    return out


def _torch_functional() -> list[str]:
    F = torch.nn.functional
    names = [n for n in sorted(getattr(F, "__all__", None) or dir(F))
             if not n.startswith("_") and callable(getattr(F, n, None))
             and not inspect.isclass(getattr(F, n)) and not inspect.ismodule(getattr(F, n))]
    skip = {"Callable", "Optional", "List", "Tuple", "Union", "boolean_dispatch",
            "handle_torch_function", "has_torch_function", "has_torch_function_unary",
            "has_torch_function_variadic", "assert_int_or_pair", "annotations"}
    return [f"torch.nn.functional.{n}" for n in names if n not in skip]


def build() -> dict[str, Any]:
    apis: dict[str, dict[str, Any]] = {}
    for name in _torch_nn_classes():
        apis[name] = _auto(name, NS_MODULE, "module")
    for name in _torch_functional():
        apis[name] = _auto(name, NS_FUNCTIONAL, "function")
    for n in COMMON_TORCH_FUNCS:
        if hasattr(torch, n):
            apis[f"torch.{n}"] = _auto(f"torch.{n}", NS_TORCH, "function")
    for n in TENSOR_METHODS:
        tname = f"torch.Tensor.{n}"
        e: dict[str, Any] = {"kind": "method"}
        if hasattr(mindspore.Tensor, n):
            e["target"] = f"mindspore.Tensor.{n}"
        else:
            e["status"] = "missing"
        apis[tname] = e
    from netparity_scan_curated import CURATED  # type: ignore[import-not-found]

    for name, over in CURATED.items():
        base = apis.get(name, {})
        if ("target" in over or over.get("status") == "not_needed") and "status" in base \
                and "status" not in over:
            base.pop("status")
        if over.get("status") in ("missing", "not_needed"):
            base.pop("target", None)
            base.pop("alt", None)
        base.update(over)
        apis[name] = base
    # a curated target must exist: refuse to write a table that names something absent
    bad = [n for n, e in apis.items()
           for t in [e.get("target"), *e.get("alt", []), *e.get("device_alt", [])]
           if t and _resolve(t) is None]
    if bad:
        sys.exit(f"curated targets missing in the installed MindSpore: {bad}")
    from netparity_scan_curated import ATEN  # type: ignore[import-not-found]

    return {
        "schema": 1,
        "generated_with": {"torch": torch.__version__.split("+")[0],
                           "mindspore": mindspore.__version__},
        "apis": dict(sorted(apis.items())),
        "aten": dict(sorted(ATEN.items())),
        # measured by tools/probe_scan_cpu.py (wins over the docstrings for CPU)
        "cpu_runs": json.loads((Path(__file__).resolve().parent / "scan_cpu_runs.json")
                               .read_text()),
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    table = build()
    OUT.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    n = len(table["apis"])
    miss = sum(1 for e in table["apis"].values() if e.get("status") == "missing")
    print(f"wrote {OUT}: {n} APIs ({miss} missing), {len(table['aten'])} aten ops")
