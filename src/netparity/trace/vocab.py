"""Canonical op vocabulary shared by every framework.

Capture stores both the framework's native name (``aten.convolution.default``, ``Conv2D``,
``torch.nn.Conv2d``) and a canonical name from this vocabulary (``conv``), so alignment across
frameworks starts from comparable names. Names are only a hint to the aligner: shapes and value
statistics decide (see :mod:`netparity.align`).

Example:
    >>> canonical_op("torch", "aten.convolution.default")
    'conv'
    >>> canonical_op("mindspore", "Conv2D")
    'conv'
    >>> canonical_op("torch", "torch.nn.BatchNorm2d"), canonical_op("mindspore", "BatchNorm2d")
    ('batch_norm', 'batch_norm')
"""

from __future__ import annotations

import re
from functools import lru_cache

#: alias (normalised: lower snake case, no framework prefix, no overload) -> canonical name
ALIASES: dict[str, str] = {
    # convolution
    "convolution": "conv", "conv2d": "conv", "conv1d": "conv", "conv3d": "conv",
    "_convolution": "conv", "mkldnn_convolution": "conv", "conv_2d": "conv",
    "convolution_backward": "conv_backward", "conv2d_backprop_input": "conv_backward",
    "conv2d_backprop_filter": "conv_backward",
    "conv_transpose2d": "conv_transpose", "conv2d_transpose": "conv_transpose",
    # normalisation
    "batch_norm": "batch_norm", "batchnorm": "batch_norm", "batch_norm2d": "batch_norm",
    "batch_norm1d": "batch_norm", "batch_norm3d": "batch_norm", "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit": "batch_norm", "_native_batch_norm_legit_functional": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm", "cudnn_batch_norm": "batch_norm",
    "native_batch_norm_backward": "batch_norm_backward", "batch_norm_grad": "batch_norm_backward",
    "layer_norm": "layer_norm", "layernorm": "layer_norm", "native_layer_norm": "layer_norm",
    "native_layer_norm_backward": "layer_norm_backward", "layer_norm_grad": "layer_norm_backward",
    "group_norm": "group_norm", "native_group_norm": "group_norm", "groupnorm": "group_norm",
    # linear algebra
    "linear": "linear", "dense": "linear", "addmm": "linear", "mm": "matmul", "matmul": "matmul",
    "bmm": "matmul", "batch_mat_mul": "matmul", "batchmatmul": "matmul", "mat_mul": "matmul",
    "einsum": "matmul", "baddbmm": "matmul",
    # activations
    "relu": "relu", "relu_": "relu", "re_lu": "relu", "threshold_backward": "relu_backward",
    "relu_grad": "relu_backward", "re_l_u_grad": "relu_backward",
    "gelu": "gelu", "ge_lu": "gelu", "fast_gelu": "gelu", "gelu_backward": "gelu_backward",
    "sigmoid": "sigmoid", "tanh": "tanh", "silu": "silu", "softmax": "softmax",
    "_softmax": "softmax", "log_softmax": "log_softmax", "_log_softmax": "log_softmax",
    "prelu": "prelu", "p_re_lu": "prelu", "leaky_relu": "leaky_relu", "hardtanh": "hardtanh",
    "softmax_backward_data": "softmax_backward", "_softmax_backward_data": "softmax_backward",
    # pooling
    "max_pool2d": "max_pool", "max_pool2d_with_indices": "max_pool", "max_pool": "max_pool",
    "maxpool2d": "max_pool", "max_pool_with_argmax": "max_pool",
    "max_pool2d_with_indices_backward": "max_pool_backward", "max_pool_grad": "max_pool_backward",
    "avg_pool2d": "avg_pool", "avgpool2d": "avg_pool", "adaptive_avg_pool2d": "avg_pool",
    "_adaptive_avg_pool2d": "avg_pool", "adaptive_avg_pool2d_backward": "avg_pool_backward",
    "_adaptive_avg_pool2d_backward": "avg_pool_backward",
    "mean": "mean", "reduce_mean": "mean", "sum": "sum", "reduce_sum": "sum",
    # elementwise
    "add": "add", "add_": "add", "bias_add": "add", "sub": "sub", "mul": "mul", "mul_": "mul", "div": "div",
    "real_div": "div", "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "pow": "pow", "square": "square", "abs": "abs", "where": "where",
    "select": "where", "maximum": "maximum", "minimum": "minimum", "clamp": "clamp",
    "clip_by_value": "clamp", "erf": "erf", "cast": "cast", "_to_copy": "cast", "to": "cast",
    # losses
    "cross_entropy": "cross_entropy", "cross_entropy_loss": "cross_entropy",
    "softmax_cross_entropy_with_logits": "cross_entropy", "nll_loss": "nll_loss",
    "nll_loss_forward": "nll_loss", "mse_loss": "mse_loss",
    # shape
    "view": "reshape", "reshape": "reshape", "_unsafe_view": "reshape", "flatten": "reshape",
    "permute": "transpose", "transpose": "transpose", "t": "transpose", "expand": "broadcast",
    "broadcast_to": "broadcast", "cat": "concat", "concat": "concat", "stack": "stack",
    "split": "split", "slice": "slice", "strided_slice": "slice", "squeeze": "squeeze",
    "unsqueeze": "expand_dims", "expand_dims": "expand_dims", "clone": "identity",
    "contiguous": "identity", "identity": "identity", "detach": "identity", "copy_": "copy",
    "alias": "identity", "lift_fresh": "identity", "lift_fresh_copy": "identity",
    "_reshape_alias": "reshape", "view_as": "reshape", "unflatten": "reshape",
    "as_strided": "reshape", "narrow": "slice", "unbind": "split", "chunk": "split",
    "split_with_sizes": "split", "movedim": "transpose", "swapaxes": "transpose",
    "swapdims": "transpose", "expand_as": "broadcast", "numpy_t": "transpose",
    # MindSpore's *Ext primitives (mint) are the same ops
    "mat_mul_ext": "matmul", "batch_mat_mul_ext": "matmul", "sum_ext": "sum",
    "mean_ext": "mean", "transpose_ext": "transpose", "softmax_ext": "softmax",
    # containers
    "sequential_cell": "sequential", "cell_list": "module_list",
    # embedding / attention / dropout
    "embedding": "embedding", "gather": "gather", "embedding_dense_backward": "embedding_backward",
    "scaled_dot_product_attention": "attention", "multihead_attention": "attention",
    "multi_head_attention": "attention",
    "dropout": "dropout", "native_dropout": "dropout", "flatten_module": "flatten",
    # optimizer
    "_foreach_add": "add", "_foreach_mul": "mul", "_foreach_add_": "add", "_foreach_mul_": "mul",
    "apply_momentum": "momentum_update", "sgd": "sgd_update", "adam": "adam_update",
}

#: Canonical ops whose output is the input's elements rearranged (views, copies, reshapes): an
#: output of one of these carries no computation of its own, so alignment never pairs one with
#: a computing op (a layer norm with an ``aten.alias`` of the same data), only with another
#: such op or inside an N:M group.
VIEW_OPS = frozenset({"reshape", "transpose", "broadcast", "expand_dims", "squeeze", "slice",
                      "identity", "split", "flatten"})

#: Canonical ops that allocate a tensor without initialising it (``empty``, autograd's
#: ``new_empty_strided``): their output is whatever the memory held -- NaN included -- until
#: the next op fills it, so it is neither captured nor judged nor taken for a NaN's origin.
UNINITIALISED_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                               "new_empty_strided", "empty_permuted"})

#: Canonical in-place ops that overwrite their first argument whole, whatever it held (its value
#: before the op is not an input of the computation: often an allocation's garbage)
OVERWRITING_OPS = frozenset({"copy", "fill", "zero"})

#: Ops whose data input is not their first argument (normalised native name -> argument
#: position): ``addmm(bias, x, w)`` and its relatives take the added term first. Alignment
#: matches a call's *primary* input against the other side's (``addmm``'s ``x`` against
#: ``MatMul``'s ``x``), which is what lets ``addmm`` pair with ``MatMul + BiasAdd``.
PRIMARY_INPUT = {"addmm": 1, "addmv": 1, "addbmm": 1, "baddbmm": 1, "addr": 1}

_PREFIX = re.compile(r"^(aten|prims|torch\.nn\.modules\.[a-z_]+|torch\.nn|torch|mindspore\.nn|"
                     r"mindspore\.ops|mindspore|nn|ops|P|F)\.")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise(native: str) -> str:
    """Strip framework prefixes and overload suffixes; lower snake case.

    ``aten.add_.Tensor`` -> ``add_``; ``torch.nn.Conv2d`` -> ``conv2d``; ``BatchNorm2d`` ->
    ``batch_norm2d``; ``ReLU`` -> ``re_lu`` (mapped by the alias table).
    """
    s = native.strip()
    while True:
        t = _PREFIX.sub("", s)
        if t == s:
            break
        s = t
    parts = s.split(".")
    if len(parts) >= 2 and (parts[-1] in ("default", "Tensor", "Scalar", "out", "int", "dim",
                                          "self", "input", "using_ints", "vec", "List")
                            or parts[-1][:1].islower() and len(parts) == 2 and parts[-1] != parts[0]):
        s = parts[0]
    else:
        s = parts[-1]
    s = _CAMEL.sub("_", s).lower()
    s = s.replace("batch_norm_", "batch_norm").replace("__", "_")
    return s


#: PyTorch ops whose normalised name means something else in MindSpore: ``aten.select`` picks
#: one index along a dimension (a view), MindSpore's ``Select`` is ``where``
_ATEN_ALIASES = {"select": "slice"}


@lru_cache(maxsize=8192)
def canonical_op(framework: str, native: str) -> str:
    """Canonical op name for a framework's native op or module class name."""
    n = normalise(native)
    if native.startswith("aten.") and n in _ATEN_ALIASES:
        return _ATEN_ALIASES[n]
    if n in ALIASES:
        return ALIASES[n]
    base = n.rstrip("_")
    if base in ALIASES:
        return ALIASES[base]
    compact = n.replace("_", "")
    for k, v in ALIASES.items():
        if k.replace("_", "") == compact:
            return v
    return base


def is_view_op(op: str) -> bool:
    """Whether a canonical op only rearranges its input's elements (see :data:`VIEW_OPS`);
    MindSpore's view kernels (``TransposeView``, ``SliceExtView``...) count too.

    Example:
        >>> is_view_op(canonical_op("torch", "aten.alias.default")), is_view_op("layer_norm")
        (True, False)
    """
    return op in VIEW_OPS or op.endswith("_view")


@lru_cache(maxsize=8192)
def primary_input(native: str) -> int:
    """Position of a native op's data input among its inputs (see :data:`PRIMARY_INPUT`).

    Example:
        >>> primary_input("aten.addmm.default"), primary_input("MatMul")
        (1, 0)
    """
    return PRIMARY_INPUT.get(normalise(native).rstrip("_"), 0) if native else 0
