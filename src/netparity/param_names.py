"""PyTorch <-> MindSpore parameter-leaf spellings: the one table that checkpoint mapping
(:mod:`netparity.ckpt.rules`) and trace alignment (:mod:`netparity.align.names`) both use.

Example:
    >>> MS_TO_TORCH_LEAF["moving_variance"], BN_TORCH_TO_MS["weight"]
    ('running_var', 'gamma')
    >>> leaf_alternatives()["weight"]
    ('gamma', 'embedding_table')
    >>> split_param("layer1.0.bn1.weight"), split_param("scale")
    (('layer1.0.bn1', 'weight'), ('', 'scale'))
"""

from __future__ import annotations

#: MindSpore leaf name -> PyTorch leaf name (unambiguous in this direction; the other direction
#: needs the module's kind: a PyTorch ``weight`` is ``gamma`` only in a norm layer)
MS_TO_TORCH_LEAF: dict[str, str] = {
    "gamma": "weight",
    "beta": "bias",
    "moving_mean": "running_mean",
    "moving_variance": "running_var",
    "embedding_table": "weight",
}

#: PyTorch BatchNorm leaf -> MindSpore BatchNorm leaf
BN_TORCH_TO_MS: dict[str, str] = {
    pt: ms for ms, pt in MS_TO_TORCH_LEAF.items() if ms in ("gamma", "beta", "moving_mean",
                                                            "moving_variance")
}


def leaf_alternatives() -> dict[str, tuple[str, ...]]:
    """Each leaf name -> the names the same tensor may have in the other framework."""
    alt: dict[str, list[str]] = {}
    for ms, pt in MS_TO_TORCH_LEAF.items():
        alt.setdefault(pt, []).append(ms)
        alt.setdefault(ms, []).append(pt)
    return {k: tuple(v) for k, v in alt.items()}


def split_param(name: str) -> tuple[str, str]:
    """``"a.b.weight"`` -> ``("a.b", "weight")``; a bare name has the root module ``""``."""
    mod, _, leaf = name.rpartition(".")
    return mod, leaf
