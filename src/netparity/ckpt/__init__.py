"""Checkpoints: read/write every format as numpy, map names across frameworks, convert, diff.

Public API::

    load_checkpoint(path) -> CheckpointDict            # {name: np.ndarray} + .dtypes, .format...
    save_checkpoint(tensors, path, fmt=None)           # by suffix: .pt .safetensors .ckpt .npz
    map_names(ref, cand, *, ref_model=None, cand_model=None, mapping=None) -> NameMap
    convert(src, dst, *, mapping=None, target=None, template=None) -> ConvertReport
    diff(a, b, *, mapping=None, rtol=1e-5, atol=1e-8) -> DiffResult   # truthy when equal
    torch_to_mindspore_names(shapes) / mindspore_to_torch_names(shapes) -> RenameResult

Only :func:`load_checkpoint` of ``.pt`` files and :func:`save_checkpoint` of ``.pt``/``.ckpt``
import a framework (PyTorch / MindSpore), lazily; MindSpore ``.ckpt`` files are *read* without it.

Example:
    >>> import numpy as np
    >>> from netparity.ckpt import map_names
    >>> map_names({"emb.weight": np.zeros((9, 2))}, {"emb.embedding_table": np.zeros((9, 2))}).pairs[0].how
    'rule'
"""

from netparity.ckpt.convert import ConvertReport, convert
from netparity.ckpt.diff import DiffResult, ParamDiff, diff
from netparity.ckpt.io import CheckpointDict, detect_format, load_checkpoint, save_checkpoint
from netparity.ckpt.mapping import NameMap, Pair, map_names, model_info, state_of
from netparity.ckpt.rules import mindspore_to_torch_names, torch_to_mindspore_names

__all__ = [
    "CheckpointDict", "ConvertReport", "DiffResult", "NameMap", "Pair", "ParamDiff",
    "convert", "detect_format", "diff", "load_checkpoint", "map_names", "mindspore_to_torch_names",
    "model_info", "save_checkpoint", "state_of", "torch_to_mindspore_names",
]
