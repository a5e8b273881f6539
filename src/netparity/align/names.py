"""Name rules: module paths and parameter names that differ between frameworks.

Module paths are compared after :func:`norm_path`: lower case, underscores dropped
(``down_sample`` = ``downsample``), synonyms folded (``classifier``/``head`` = ``fc``) and
wrapper prefixes removed (``module.`` from DataParallel, ``network.``/``_backbone.`` from
MindSpore's training cells). Parameter leaves follow the PyTorch <-> MindSpore conventions of
:data:`LEAF_ALTERNATIVES` (BatchNorm ``weight/bias/running_mean/running_var`` <->
``gamma/beta/moving_mean/moving_variance``, LayerNorm/GroupNorm ``weight/bias`` <->
``gamma/beta``, Embedding ``weight`` <-> ``embedding_table``).

Example:
    >>> norm_path("layer1.0.down_sample.0") == norm_path("layer1.0.downsample.0")
    True
    >>> norm_path("network._backbone.classifier")
    'fc'
    >>> split_param("layer1.0.bn1.weight")
    ('layer1.0.bn1', 'weight')
"""

from __future__ import annotations

from functools import lru_cache

from netparity.param_names import MS_TO_TORCH_LEAF, leaf_alternatives
from netparity.param_names import split_param as split_param  # re-exported

#: path tokens (after lower-casing and dropping underscores) that name the same thing; the
#: parameter leaves come from the shared table in :mod:`netparity.param_names`
TOKEN_SYNONYMS: dict[str, str] = {
    "classifier": "fc",
    "head": "fc",
    "dense": "fc",
    "downsamplelayer": "downsample",
    "shortcut": "downsample",
    **{ms.replace("_", ""): pt.replace("_", "") for ms, pt in MS_TO_TORCH_LEAF.items()},
}
#: leading wrapper tokens that carry no structure (DataParallel, MindSpore WithLossCell...)
WRAPPER_PREFIXES = ("module", "network", "backbone", "model")

#: parameter leaf name -> the names the same tensor has in the other framework
LEAF_ALTERNATIVES: dict[str, tuple[str, ...]] = leaf_alternatives()


@lru_cache(maxsize=65536)
def norm_token(tok: str) -> str:
    t = tok.lower().replace("_", "").replace("-", "")
    return TOKEN_SYNONYMS.get(t, t)


@lru_cache(maxsize=65536)
def norm_path(path: str) -> str:
    """A module path with framework-specific spelling removed (see the module docstring)."""
    toks = [norm_token(t) for t in path.split(".") if t]
    while len(toks) > 1 and toks[0] in WRAPPER_PREFIXES:
        toks.pop(0)
    if len(toks) == 1 and toks[0] in WRAPPER_PREFIXES:
        toks = []
    return ".".join(toks)


def leaf(path: str) -> str:
    """Normalised last token of a path (``""`` for the root)."""
    return norm_token(path.rsplit(".", 1)[-1]) if path else ""
