"""Hand-curated part of the scan table (merged over the automatic lookup by gen_scan_mapping.py).

Every default quoted below was read from the installed torch 2.13 / MindSpore 2.10 signatures or
sources when written; ``tests/scan/test_mapping_table.py`` re-checks the MindSpore side.

Trap rules (evaluated per call site by ``netparity.scan.rules``):
  always        -- differs whatever the arguments; ``note`` says what to set
  arg_default   -- ``arg`` (positional index ``pos``) has a different default/convention; the
                   message shows the value used at the call (or the torch default) and the
                   MindSpore value to set (``transform``: one_minus | same); with
                   ``same``, no trap when the value equals ``ms_default`` (MindSpore's own
                   default, checked against the installed signature by the table test)
  when_arg      -- a trap only when ``arg`` is passed (and not equal to ``unless``)
  conv_padding  -- Conv*: MindSpore's default pad_mode is "same"; ``dims``: 1/2/3 (a tuple padding
                   is written with 2*dims values in MindSpore)
  pool_padding  -- MaxPool/AvgPool: MindSpore's default stride is 1 and pad_mode "valid" (padding or
                   MaxPool's ceil_mode need pad_mode="pad")
  ddof          -- std/var: PyTorch divides by N - 1 by default, the MindSpore target by N
Table fields read by the scan besides target/alt/traps: ``device_alt`` (counterparts to advise
where neither the target nor an ``alt`` runs on the device), ``alt_traps`` (alt -> trap rules
evaluated instead of ``traps`` when that alternative is the one advised), ``compose`` (how to write
it where no counterpart exists, or where the counterpart is deprecated).
  dropout_p     -- mindspore.nn.Dropout's first positional argument is keep_prob
  weight_decay_all -- optimizer built from model.parameters() with weight_decay > 0
"""

from __future__ import annotations

from typing import Any

_BN_TRAPS: list[dict[str, Any]] = [
    {"rule": "arg_default", "arg": "momentum", "pos": 2, "torch_default": 0.1,
     "transform": "one_minus", "ms_arg": "momentum", "ms_default": 0.9,
     "note": "momentum convention: PyTorch updates running = (1-m)*running + m*batch, "
             "MindSpore moving = m*moving + (1-m)*batch (default 0.9)"},
    {"rule": "when_arg", "arg": "momentum", "pos": 2, "only": None,
     "note": "momentum=None (cumulative average via num_batches_tracked) has no MindSpore "
             "counterpart"},
    {"rule": "always", "id": "num_batches_tracked",
     "note": "state_dict key num_batches_tracked has no MindSpore parameter: drop it when "
             "converting checkpoints; running_mean/running_var -> moving_mean/moving_variance, "
             "weight/bias -> gamma/beta"},
]


def _conv(ms: str, alt: str, dims: int = 2) -> dict[str, Any]:
    return {
        "target": ms, "alt": [alt],
        "args": {"groups": "group", "bias": "has_bias"},
        "defaults": {"pad_mode": "'same' (PyTorch pads 0 by default)",
                     "has_bias": "False (PyTorch bias=True)"},
        "traps": [
            {"rule": "conv_padding", "pos": 4, "dims": dims, "ms_args": ["pad_mode", "padding"]},
            {"rule": "arg_default", "arg": "bias", "pos": 7, "torch_default": True,
             "transform": "same", "ms_arg": "has_bias", "ms_default": False,
             "note": "bias default differs: MindSpore has_bias=False"},
        ],
        "notes": "default init is the same law (HeUniform(sqrt(5)) = kaiming_uniform(a=sqrt(5)), "
                 "bias U(+-1/sqrt(fan_in))) but another random stream: load the PyTorch "
                 "weights for parity. Weight layout (out, in/groups, kH, kW) is the same. "
                 f"{alt} keeps PyTorch's argument names and defaults.",
    }


def _pool(ms: str, alt: str, dims: int = 2) -> dict[str, Any]:
    return {
        "target": ms, "alt": [alt],
        "defaults": {"stride": "1 (PyTorch: kernel_size)", "pad_mode": "'valid'"},
        "traps": [{"rule": "pool_padding", "stride_pos": 1, "padding_pos": 2, "dims": dims,
                   "max": ".Max" in ms, "ms_args": ["stride", "pad_mode", "padding"]}],
        "notes": f"{alt} keeps PyTorch's defaults (stride=None -> kernel_size).",
    }


#: a CPU form that is another call: the line must be rewritten as the note says
_REWRITE = {"rule": "always", "note": "no in-place CPU kernel: rewrite the line as the CPU form "
                                      "below (a new tensor)"}
_SCALER = {"rule": "always",
           "note": "DynamicLossScaler has no defaults: pass scale_value=65536, scale_factor=2, "
                   "scale_window=2000 (PyTorch's); backoff is division by scale_factor (PyTorch "
                   "backoff_factor=0.5 matches only for factor 2)"}
_DDOF = {"rule": "ddof", "note": "the MindSpore call divides by N (ddof=0) by default, PyTorch by "
                                 "N - 1 (unbiased, correction=1)"}
_INST_AFFINE = {"rule": "arg_default", "arg": "affine", "pos": 3, "torch_default": False,
                "transform": "same", "ms_arg": "affine", "ms_default": True,
                "note": "affine default differs (MindSpore affine=True adds a trained scale and "
                        "shift)"}
_INST_GN = [_INST_AFFINE,
            {"rule": "always", "note": "no InstanceNorm kernel on this device: write "
                                       "mindspore.nn.GroupNorm(num_groups=C, num_channels=C, "
                                       "eps=eps) with C = num_features (one group per channel "
                                       "is instance norm with PyTorch's default "
                                       "track_running_stats=False)"}]
_RMS = ("x * mindspore.ops.rsqrt(x.pow(2).mean(-1, keep_dims=True) + eps) * weight "
        "(eps=None: finfo(dtype).eps as PyTorch); mindspore.ops.rms_norm has another signature "
        "(x, gamma, epsilon) and an Ascend kernel only")
_WD = {"rule": "weight_decay_all",
       "note": "weight decay is applied to every parameter passed, BatchNorm gamma/beta and "
               "biases included; many MindSpore ports filter them (params whose name has "
               "'gamma'/'beta'/'bias' get weight_decay=0.0 in a group) -- do the same on both "
               "sides or neither"}


def _opt(target: str, extra: str = "", cpu: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "optimizer", "target": target,
        "notes": ("argument names and defaults follow PyTorch; pass net.trainable_params(). "
                  + extra + " Weight decay applies to every parameter passed, as in PyTorch "
                  "(BatchNorm gamma/beta included): keep the same parameter groups on both "
                  "sides.").strip()}
    if cpu:
        out["device_alt"] = [cpu]
    return out


def _sched(name: str) -> dict[str, Any]:
    return {"kind": "scheduler",
            "target": f"mindspore.experimental.optim.lr_scheduler.{name}",
            "notes": "works with the optimizers of mindspore.experimental.optim / mindspore.mint."
                     "optim; for mindspore.nn optimizers precompute a per-step list "
                     "(mindspore.nn.cosine_decay_lr, piecewise_constant_lr, warmup_lr) and pass "
                     "it as learning_rate"}


_DYN = ("output shape depends on the data: fine in PyNative; in Graph mode (mindspore.jit) it "
        "needs dynamic-shape support and breaks static compilation -- prefer a fixed-shape form "
        "(where/masked_fill with a mask)")

CURATED: dict[str, dict[str, Any]] = {
    # ---------------------------------------------------------------- modules with traps
    "torch.nn.BatchNorm1d": {"target": "mindspore.nn.BatchNorm1d", "alt": ["mindspore.mint.nn.BatchNorm1d"],
                             "defaults": {"momentum": "0.9 (= 1 - PyTorch 0.1)"}, "traps": _BN_TRAPS,
                             "notes": "mindspore.mint.nn.BatchNorm1d keeps the PyTorch convention (momentum=0.1)"},
    "torch.nn.BatchNorm2d": {"target": "mindspore.nn.BatchNorm2d", "alt": ["mindspore.mint.nn.BatchNorm2d"],
                             "defaults": {"momentum": "0.9 (= 1 - PyTorch 0.1)"}, "traps": _BN_TRAPS,
                             "notes": "mindspore.mint.nn.BatchNorm2d keeps the PyTorch convention (momentum=0.1)"},
    "torch.nn.BatchNorm3d": {"target": "mindspore.nn.BatchNorm3d", "alt": ["mindspore.mint.nn.BatchNorm3d"],
                             "defaults": {"momentum": "0.9 (= 1 - PyTorch 0.1)"}, "traps": _BN_TRAPS},
    "torch.nn.Conv1d": _conv("mindspore.nn.Conv1d", "mindspore.mint.nn.Conv1d", 1),
    "torch.nn.Conv2d": _conv("mindspore.nn.Conv2d", "mindspore.mint.nn.Conv2d", 2),
    "torch.nn.Conv3d": _conv("mindspore.nn.Conv3d", "mindspore.mint.nn.Conv3d", 3),
    "torch.nn.ConvTranspose1d": {"target": "mindspore.nn.Conv1dTranspose",
                                 "args": {"groups": "group", "bias": "has_bias"},
                                 "traps": [{"rule": "conv_padding", "pos": 4, "dims": 2, "ms_args": ["pad_mode", "padding"]}]},
    "torch.nn.ConvTranspose2d": {"target": "mindspore.nn.Conv2dTranspose",
                                 "alt": ["mindspore.mint.nn.ConvTranspose2d"],
                                 "args": {"groups": "group", "bias": "has_bias"},
                                 "traps": [{"rule": "conv_padding", "pos": 4, "dims": 2, "ms_args": ["pad_mode", "padding"]},
                                           {'rule': 'when_arg', 'arg': 'output_padding', 'pos': 5, 'unless': 0, 'note': "MindSpore's Conv2dTranspose(pad_mode='pad', output_padding=...) fills the extra rows/columns with zeros where PyTorch computes them (MindSpore 2.10 CPU: the last row 0 against the kernel's values); crop a larger output or pad the input instead, and check the last row/column against PyTorch"}]},
    "torch.nn.ConvTranspose3d": {"target": "mindspore.nn.Conv3dTranspose",
                                 "args": {"groups": "group", "bias": "has_bias"},
                                 "traps": [{"rule": "conv_padding", "pos": 4, "dims": 2, "ms_args": ["pad_mode", "padding"]}]},
    "torch.nn.Linear": {"target": "mindspore.nn.Dense", "alt": ["mindspore.mint.nn.Linear"],
                        "args": {"in_features": "in_channels", "out_features": "out_channels",
                                 "bias": "has_bias"},
                        "notes": "weight layout is (out, in) in both: copy it without transposing; "
                                 "default init is the same law (HeUniform(sqrt(5)), bias "
                                 "U(+-1/sqrt(fan_in))) but another random stream"},
    "torch.nn.Dropout": {"target": "mindspore.nn.Dropout", "alt": ["mindspore.mint.nn.Dropout"],
                         "traps": [{"rule": "dropout_p", "pos": 0, "ms_arg": "p"}],
                         "notes": "p is the drop probability in both when passed by keyword; "
                                  "dropout draws another random mask"},
    "torch.nn.LayerNorm": {"target": "mindspore.nn.LayerNorm", "alt": ["mindspore.mint.nn.LayerNorm"],
                           "args": {"eps": "epsilon"},
                           "defaults": {"epsilon": "1e-07 (PyTorch eps=1e-05)"},
                           "traps": [{"rule": "arg_default", "arg": "eps", "pos": 1,
                                      "torch_default": 1e-05, "transform": "same",
                                      "ms_arg": "epsilon", "ms_default": 1e-07,
                                      "note": "default epsilon differs (MindSpore 1e-07)"}],
                           "notes": "normalized_shape must be a tuple; set begin_norm_axis/"
                                    "begin_params_axis=-len(normalized_shape)"},
    "torch.nn.GELU": {"target": "mindspore.nn.GELU", "alt": ["mindspore.mint.nn.GELU"],
                      "defaults": {"approximate": "True (tanh form; PyTorch 'none' = exact erf)"},
                      "traps": [{"rule": "always",
                                 "note": "mindspore.nn.GELU defaults to the tanh approximation: "
                                         "set approximate=False for PyTorch's exact GELU "
                                         "(approximate='tanh' -> approximate=True)"}]},
    "torch.nn.LeakyReLU": {"target": "mindspore.nn.LeakyReLU",
                           "args": {"negative_slope": "alpha"},
                           "traps": [{"rule": "arg_default", "arg": "negative_slope", "pos": 0,
                                      "torch_default": 0.01, "transform": "same", "ms_arg": "alpha", "ms_default": 0.2,
                                      "note": "default slope differs (MindSpore alpha=0.2)"}]},
    "torch.nn.PReLU": {"target": "mindspore.nn.PReLU",
                       "args": {"num_parameters": "channel", "init": "w"}},
    "torch.nn.Embedding": {"target": "mindspore.nn.Embedding", "alt": ["mindspore.mint.nn.Embedding"],
                           "args": {"num_embeddings": "vocab_size", "embedding_dim": "embedding_size"},
                           "traps": [{"rule": "always",
                                      "note": "default table init differs: PyTorch N(0, 1), "
                                              "MindSpore embedding_table='normal' (Normal, "
                                              "sigma=0.01): set embedding_table or load weights"},
                                     {'rule': 'when_arg', 'arg': 'padding_idx', 'pos': 2, 'unless': None, 'note': "MindSpore's nn.Embedding(padding_idx=...) only zeroes that row at init: its gradient is not masked, so the padding row trains where PyTorch's stays fixed (verified on MindSpore 2.10 CPU: gradient 2.0 per use against 0); zero that row's gradient (or the row after each step) by hand"}]},
    "torch.nn.Softmax": {"target": "mindspore.nn.Softmax", "alt": ["mindspore.mint.nn.Softmax"],
                         "args": {"dim": "axis"}},
    "torch.nn.LogSoftmax": {"target": "mindspore.nn.LogSoftmax", "args": {"dim": "axis"}},
    "torch.nn.MaxPool1d": _pool("mindspore.nn.MaxPool1d", "mindspore.mint.nn.MaxPool2d", 1),
    "torch.nn.MaxPool2d": _pool("mindspore.nn.MaxPool2d", "mindspore.mint.nn.MaxPool2d"),
    "torch.nn.AvgPool1d": _pool("mindspore.nn.AvgPool1d", "mindspore.mint.nn.AvgPool2d", 1),
    "torch.nn.AvgPool2d": {**_pool("mindspore.nn.AvgPool2d", "mindspore.mint.nn.AvgPool2d"),
                           "traps": [*_pool("x", "x")["traps"], {'rule': 'when_arg', 'arg': 'padding', 'pos': 2, 'unless': 0, 'note': "PyTorch averages the zero padding in (count_include_pad=True by default); MindSpore's AvgPool2d(pad_mode='same') leaves it out (a 3x3 corner: 3.5 against PyTorch's 1.56 on MindSpore 2.10 CPU): use pad_mode='pad' with the padding, or count_include_pad=False on both sides"}]},
    "torch.nn.AdaptiveAvgPool2d": {
        "target": "mindspore.nn.AdaptiveAvgPool2d", "alt": ["mindspore.mint.nn.AdaptiveAvgPool2d"],
        "notes": "for output_size 1 and fixed input shapes the reference port uses "
                 "ops.ReduceMean(keep_dims=True) over axes (2, 3): same numbers, static in "
                 "Graph mode"},
    "torch.nn.CrossEntropyLoss": {
        "target": "mindspore.nn.CrossEntropyLoss", "alt": ["mindspore.mint.nn.CrossEntropyLoss"],
        "notes": "same defaults (reduction='mean', ignore_index=-100) and the same "
                 "label_smoothing (on=1-eps+eps/C, off=eps/C: checked numerically); do not port "
                 "it as OneHot(on_value=1-eps, off_value=eps/(C-1)), which gives other numbers; "
                 "mindspore.nn.SoftmaxCrossEntropyWithLogits defaults to sparse=False, "
                 "reduction='none' -- pass sparse=True, reduction='mean' if used instead"},
    "torch.nn.Module": {"target": "mindspore.nn.Cell",
                        "notes": "forward -> construct; parameters() -> trainable_params(); "
                                 "train()/eval() -> set_train(True/False)"},
    "torch.nn.Identity": {"target": "mindspore.nn.Identity"},
    "torch.nn.Flatten": {"target": "mindspore.nn.Flatten", "alt": ["mindspore.mint.nn.Flatten"]},
    # ---------------------------------------------------------------- torch functions
    "torch.no_grad": {"kind": "function", "status": "not_needed",
                      "notes": "drop it: MindSpore only differentiates what runs inside "
                               "mindspore.value_and_grad / mindspore.grad, so code outside them "
                               "records nothing (mindspore.ops.stop_gradient(x) inside them)"},
    "torch.enable_grad": {"kind": "function", "status": "missing",
                          "compose": "wrap the computation in mindspore.value_and_grad"},
    "torch.manual_seed": {"kind": "function", "target": "mindspore.set_seed",
                          "notes": "different generators: random numbers differ; share data "
                                   "and initial weights instead"},
    "torch.save": {"kind": "function", "target": "mindspore.save_checkpoint",
                   "notes": "parameter names differ (BatchNorm gamma/beta/moving_*); use "
                            "netparity ckpt to convert"},
    "torch.load": {"kind": "function", "target": "mindspore.load_checkpoint",
                   "alt": ["mindspore.load_param_into_net"]},
    "torch.compile": {"kind": "function", "target": "mindspore.jit",
                      "notes": "Graph mode: Python control flow on tensor values and dynamic "
                               "shapes are restricted"},
    "torch.from_numpy": {"kind": "function", "target": "mindspore.Tensor.from_numpy",
                         "device_alt": ["mindspore.from_numpy", "mindspore.tensor"]},
    "torch.nonzero": {"kind": "function", "modes": {"graph": _DYN}},
    "torch.unique": {"kind": "function", "modes": {"graph": _DYN}},
    "torch.masked_select": {"kind": "function", "modes": {"graph": _DYN}},
    "torch.tensordot": {"kind": "function", "target": "mindspore.ops.tensor_dot",
                        "args": {"dims": "axes"}},
    "torch.logsumexp": {"kind": "function", "target": "mindspore.ops.logsumexp",
                        "notes": "older ports compose it as Log(ReduceSum(Exp(x - max)) ) + max "
                                 "(subtract the max first, as PyTorch does, to avoid overflow)"},
    "torch.frexp": {"kind": "function", "status": "missing",
                    "compose": "e = floor(log2(|x|)) + 1; m = x / 2**e (ops.log2, ops.floor, "
                               "ops.pow); x == 0 -> m = 0, e = 0"},
    "torch.istft": {"kind": "function", "status": "missing",
                    "compose": "inverse FFT per frame (mindspore.ops.irfft) and overlap-add with "
                               "the window, divided by the summed squared window"},
    "torch.complex": {"kind": "function", "target": "mindspore.ops.Complex",
                      "notes": "a primitive: mindspore.ops.Complex()(real, imag)"},
    "torch.nn.utils.clip_grad_norm_": {
        "kind": "function", "target": "mindspore.ops.clip_by_global_norm",
        "args": {"max_norm": "clip_norm"},
        "compose": "total = sqrt(sum(mindspore.ops.sum(g * g) for g in grads)); grads = "
                   "[g * min(1.0, max_norm / (total + 1e-6)) for g in grads] (PyTorch's formula)",
        "traps": [{"rule": "always",
                   "note": "returns the clipped gradients (grads = ops.clip_by_global_norm(grads, "
                           "max_norm)) instead of clipping .grad in place and returning the "
                           "total norm"}],
        "notes": "functional: returns the clipped gradient tuple instead of editing .grad; "
                 "call it on the grads from value_and_grad before the optimizer"},
    "torch.nn.utils.clip_grad_value_": {"kind": "function", "target": "mindspore.ops.clip_by_value",
                                        "device_alt": ["mindspore.ops.clamp"],
                                        "notes": "functional on the gradient tuple"},
    # ---------------------------------------------------------------- init
    "torch.nn.init.kaiming_normal_": {"kind": "init", "target": "mindspore.common.initializer.HeNormal",
                                      "args": {"a": "negative_slope"},
                                      "notes": "initializer object: weight.set_data(initializer("
                                               "HeNormal(...), shape, dtype)); another random stream"},
    "torch.nn.init.kaiming_uniform_": {"kind": "init", "target": "mindspore.common.initializer.HeUniform",
                                       "args": {"a": "negative_slope"}},
    "torch.nn.init.xavier_uniform_": {"kind": "init", "target": "mindspore.common.initializer.XavierUniform"},
    "torch.nn.init.xavier_normal_": {"kind": "init", "target": "mindspore.common.initializer.XavierNormal"},
    "torch.nn.init.normal_": {"kind": "init", "target": "mindspore.common.initializer.Normal",
                              "args": {"std": "sigma"},
                              "traps": [{"rule": "arg_default", "arg": "std", "pos": 2,
                                         "torch_default": 1.0, "transform": "same", "ms_arg": "sigma", "ms_default": 0.01,
                                         "note": "default std differs (MindSpore Normal sigma=0.01)"}]},
    "torch.nn.init.trunc_normal_": {"kind": "init", "target": "mindspore.common.initializer.TruncatedNormal",
                                    "args": {"std": "sigma"},
                                    "traps": [{"rule": "arg_default", "arg": "std", "pos": 2,
                                               "torch_default": 1.0, "transform": "same",
                                               "ms_arg": "sigma", "ms_default": 0.01,
                                               "note": "default std differs (MindSpore sigma=0.01)"}]},
    "torch.nn.init.uniform_": {"kind": "init", "target": "mindspore.common.initializer.Uniform",
                               "traps": [{"rule": "always",
                                          "note": "PyTorch U(a, b) (default U(0, 1)); MindSpore "
                                                  "Uniform(scale) is U(-scale, scale): only "
                                                  "symmetric ranges map directly"}]},
    "torch.nn.init.constant_": {"kind": "init", "target": "mindspore.common.initializer.Constant"},
    "torch.nn.init.zeros_": {"kind": "init", "target": "mindspore.common.initializer.Zero"},
    "torch.nn.init.ones_": {"kind": "init", "target": "mindspore.common.initializer.One"},
    "torch.nn.init.orthogonal_": {"kind": "init", "target": "mindspore.common.initializer.Orthogonal"},
    "torch.nn.init.eye_": {"kind": "init", "target": "mindspore.common.initializer.Identity"},
    "torch.nn.init.dirac_": {"kind": "init", "target": "mindspore.common.initializer.Dirac"},
    # ---------------------------------------------------------------- optimizers
    "torch.optim.SGD": _opt("mindspore.mint.optim.SGD",
                            "mindspore.nn.SGD / nn.Momentum name it learning_rate.",
                            "mindspore.experimental.optim.SGD"),
    "torch.optim.Adam": _opt("mindspore.mint.optim.Adam", cpu="mindspore.experimental.optim.Adam"),
    "torch.optim.AdamW": _opt("mindspore.mint.optim.AdamW",
                              "mindspore.nn.AdamWeightDecay differs: eps=1e-06, weight_decay=0.0 "
                              "by default (PyTorch 1e-08, 0.01).",
                              "mindspore.experimental.optim.AdamW"),
    "torch.optim.Adagrad": _opt("mindspore.experimental.optim.Adagrad"),
    "torch.optim.Adadelta": _opt("mindspore.experimental.optim.Adadelta"),
    "torch.optim.Adamax": _opt("mindspore.experimental.optim.Adamax"),
    "torch.optim.ASGD": _opt("mindspore.experimental.optim.ASGD"),
    "torch.optim.NAdam": _opt("mindspore.experimental.optim.NAdam"),
    "torch.optim.RAdam": _opt("mindspore.experimental.optim.RAdam"),
    "torch.optim.RMSprop": _opt("mindspore.experimental.optim.RMSprop"),
    "torch.optim.Rprop": _opt("mindspore.experimental.optim.Rprop"),
    "torch.optim.Optimizer": {"kind": "optimizer", "target": "mindspore.experimental.optim.Optimizer"},
    "torch.optim.LBFGS": {"kind": "optimizer", "status": "missing",
                          "compose": "no LBFGS optimizer in MindSpore 2.10: use "
                                     "scipy.optimize.minimize(method='L-BFGS-B') on host with "
                                     "mindspore.value_and_grad for the gradient"},
    "torch.optim.SparseAdam": {"kind": "optimizer", "status": "missing",
                               "compose": "mindspore.nn.LazyAdam updates only the rows that have "
                                          "gradients (closest counterpart)"},
    **{f"torch.optim.lr_scheduler.{n}": _sched(n) for n in (
        "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
        "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
        "MultiplicativeLR", "PolynomialLR", "ReduceLROnPlateau", "SequentialLR", "StepLR")},
    "torch.optim.lr_scheduler.OneCycleLR": {
        "kind": "scheduler", "status": "missing",
        "compose": "precompute the per-step learning rates (cosine warm-up then anneal, as "
                   "OneCycleLR's formula) into a list and pass it as learning_rate to the "
                   "optimizer"},
    "torch.optim.lr_scheduler.ChainedScheduler": {
        "kind": "scheduler", "status": "missing",
        "compose": "multiply the per-step lists of the chained schedules and pass the product "
                   "as learning_rate"},
    # ---------------------------------------------------------------- data
    "torch.utils.data.DataLoader": {
        "kind": "data", "target": "mindspore.dataset.GeneratorDataset",
        "args": {"batch_size": "(.batch(batch_size))", "num_workers": "num_parallel_workers"},
        "notes": "GeneratorDataset(source, column_names=[...], shuffle=...).batch(batch_size, "
                 "drop_remainder=drop_last); shuffling order differs -- feed both sides the "
                 "same order for parity"},
    "torch.utils.data.Dataset": {"kind": "data", "target": "mindspore.dataset.GeneratorDataset",
                                 "notes": "any class with __getitem__/__len__ is a valid source "
                                          "of GeneratorDataset"},
    "torch.utils.data.IterableDataset": {"kind": "data", "target": "mindspore.dataset.GeneratorDataset",
                                         "notes": "an iterable is a valid source"},
    "torch.utils.data.TensorDataset": {"kind": "data", "target": "mindspore.dataset.NumpySlicesDataset"},
    "torch.utils.data.DistributedSampler": {"kind": "data", "target": "mindspore.dataset.DistributedSampler",
                                            "args": {"num_replicas": "num_shards", "rank": "shard_id"}},
    "torch.utils.data.distributed.DistributedSampler": {
        "kind": "data", "target": "mindspore.dataset.DistributedSampler",
        "args": {"num_replicas": "num_shards", "rank": "shard_id"}},
    "torch.utils.data.RandomSampler": {"kind": "data", "target": "mindspore.dataset.RandomSampler"},
    "torch.utils.data.SequentialSampler": {"kind": "data", "target": "mindspore.dataset.SequentialSampler"},
    "torch.utils.data.SubsetRandomSampler": {"kind": "data", "target": "mindspore.dataset.SubsetRandomSampler"},
    "torch.utils.data.WeightedRandomSampler": {"kind": "data", "target": "mindspore.dataset.WeightedRandomSampler"},
    "torch.utils.data.Subset": {"kind": "data", "target": "mindspore.dataset.SubsetSampler",
                                "notes": "a sampler over the indices, passed to the dataset"},
    "torch.utils.data.random_split": {"kind": "data", "target": "mindspore.dataset.GeneratorDataset.split"},
    # ---------------------------------------------------------------- distributed
    "torch.distributed.init_process_group": {"kind": "distributed", "target": "mindspore.communication.init",
                                             "notes": "backend: 'nccl' -> 'nccl', Ascend 'hccl'; "
                                                      "launch with msrun instead of torchrun"},
    "torch.distributed.get_rank": {"kind": "distributed", "target": "mindspore.communication.get_rank"},
    "torch.distributed.get_world_size": {"kind": "distributed", "target": "mindspore.communication.get_group_size"},
    "torch.distributed.destroy_process_group": {"kind": "distributed", "target": "mindspore.communication.release"},
    "torch.distributed.all_reduce": {"kind": "distributed", "target": "mindspore.communication.comm_func.all_reduce",
                                     "notes": "functional: returns the result instead of reducing in place"},
    "torch.distributed.barrier": {"kind": "distributed", "target": "mindspore.communication.comm_func.barrier"},
    "torch.distributed.broadcast": {"kind": "distributed", "target": "mindspore.communication.comm_func.broadcast"},
    "torch.distributed.all_gather_into_tensor": {"kind": "distributed", "target": "mindspore.communication.comm_func.all_gather_into_tensor"},
    "torch.distributed.reduce_scatter_tensor": {"kind": "distributed", "target": "mindspore.communication.comm_func.reduce_scatter_tensor"},
    "torch.distributed.is_initialized": {"kind": "distributed",
                                         "target": "mindspore.mint.distributed.is_initialized"},
    "torch.nn.DataParallel": {"kind": "distributed", "status": "missing",
                              "compose": "single-process multi-device has no counterpart: one "
                                         "process per device with data parallel (msrun)"},
    # ---------------------------------------------------------------- AMP
    "torch.autocast": {"kind": "amp", "target": "mindspore.amp.auto_mixed_precision",
                       "notes": "network-level: auto_mixed_precision(net, amp_level='O1'|'O2'|...) "
                                "instead of a context manager; the op lists differ from "
                                "PyTorch's autocast lists"},
    "torch.amp.autocast": {"kind": "amp", "target": "mindspore.amp.auto_mixed_precision",
                           "notes": "network-level instead of a context manager"},
    "torch.cuda.amp.autocast": {"kind": "amp", "target": "mindspore.amp.auto_mixed_precision",
                                "notes": "network-level instead of a context manager"},
    "torch.amp.GradScaler": {"kind": "amp", "target": "mindspore.amp.DynamicLossScaler",
                             "args": {"init_scale": "scale_value", "growth_factor": "scale_factor",
                                      "growth_interval": "scale_window"},
                             "traps": [_SCALER]},
    "torch.cuda.amp.GradScaler": {"kind": "amp", "target": "mindspore.amp.DynamicLossScaler",
                                  "args": {"init_scale": "scale_value", "growth_factor": "scale_factor",
                                           "growth_interval": "scale_window"},
                                  "traps": [_SCALER]},
    # ---------------------------------------------------------------- tensor methods
    "torch.Tensor.cuda": {"kind": "method", "status": "not_needed",
                          "notes": "drop it: no per-tensor placement, choose the device once "
                                   "with mindspore.set_device('GPU'|'Ascend')"},
    "torch.Tensor.cpu": {"kind": "method", "status": "not_needed",
                         "notes": "drop it; .asnumpy() gives host data"},
    "torch.Tensor.backward": {"kind": "method", "status": "missing",
                              "compose": "grads = mindspore.value_and_grad(forward_fn, None, "
                                         "optimizer.parameters)(...); then optimizer(grads)"},
    "torch.Tensor.numpy": {"kind": "method", "target": "mindspore.Tensor.asnumpy"},
    # ---------------------------------------------------------------- no CPU kernel: CPU forms
    # (each measured on MindSpore 2.10 CPU by tests/scan/test_scan_targets.py)
    "torch.Tensor.scatter_": {"kind": "method", "target": "mindspore.Tensor.scatter_",
                              "device_alt": ["mindspore.ops.tensor_scatter_elements"],
                              "notes": "on CPU: out = ops.tensor_scatter_elements(x, index, src, "
                                       "axis) returns a new tensor (no in-place kernel)"},
    "torch.Tensor.scatter_add_": {"kind": "method", "target": "mindspore.Tensor.scatter_add_",
                                  "device_alt": ["mindspore.ops.tensor_scatter_elements"],
                                  "notes": "on CPU: ops.tensor_scatter_elements(x, index, src, "
                                           "axis, reduction='add') returns a new tensor"},
    "torch.Tensor.repeat": {"kind": "method", "target": "mindspore.Tensor.repeat",
                            "device_alt": ["mindspore.ops.tile"],
                            "notes": "Tensor.repeat(*sizes) == ops.tile(x, sizes)"},
    "torch.Tensor.clone": {"kind": "method", "target": "mindspore.Tensor.clone",
                           "device_alt": ["mindspore.Tensor.copy"]},
    "torch.clone": {"kind": "function", "target": "mindspore.mint.clone",
                    "device_alt": ["mindspore.Tensor.copy"]},
    "torch.Tensor.fill_": {"kind": "method", "target": "mindspore.Tensor.fill_",
                           "device_alt": ["mindspore.ops.full_like"],
                           "notes": "on CPU: x = ops.full_like(x, value) (a new tensor)"},
    "torch.Tensor.zero_": {"kind": "method", "target": "mindspore.Tensor.zero_",
                           "device_alt": ["mindspore.ops.zeros_like"],
                           "notes": "on CPU: x = ops.zeros_like(x) (a new tensor)"},
    "torch.Tensor.index_add_": {"kind": "method", "target": "mindspore.Tensor.index_add_",
                                "device_alt": ["mindspore.ops.index_add"],
                                "notes": "on CPU: ops.index_add(param, indices (int32), y, axis) "
                                         "on a Parameter"},
    # the in-place initialisers and helpers timm uses, each with a CPU form measured to run
    "torch.Tensor.normal_": {"kind": "method", "target": "mindspore.Tensor.normal_",
                             "device_alt": ["mindspore.ops.normal"],
                             "alt_traps": {"mindspore.ops.normal": [_REWRITE]},
                             "notes": "on CPU: x = ops.normal(x.shape, mean, std) (a new tensor; "
                                      "a Parameter: p.set_data(initializer(Normal(sigma=std, "
                                      "mean=mean), p.shape, p.dtype)))"},
    "torch.Tensor.uniform_": {"kind": "method", "target": "mindspore.Tensor.uniform_",
                              "device_alt": ["mindspore.ops.uniform"],
                              "alt_traps": {"mindspore.ops.uniform": [_REWRITE]},
                              "notes": "on CPU: x = ops.uniform(x.shape, Tensor(a), Tensor(b)) "
                                       "(a new tensor; a Parameter: p.set_data(...))"},
    "torch.Tensor.bernoulli_": {"kind": "method", "target": "mindspore.Tensor.bernoulli_",
                                "device_alt": ["mindspore.ops.bernoulli"],
                                "alt_traps": {"mindspore.ops.bernoulli": [_REWRITE]},
                                "notes": "on CPU: x = ops.bernoulli(x, p=p) (a new tensor)"},
    "torch.Tensor.new_full": {"kind": "method", "target": "mindspore.Tensor.new_full",
                              "device_alt": ["mindspore.ops.full"],
                              "alt_traps": {"mindspore.ops.full": [_REWRITE]},
                              "notes": "on CPU: ops.full(size, fill_value, dtype=x.dtype)"},
    "torch.Tensor.masked_fill_": {"kind": "method", "target": "mindspore.Tensor.masked_fill_",
                                  "device_alt": ["mindspore.Tensor.masked_fill"],
                                  "notes": "on CPU: x = x.masked_fill(mask, value) (out of place)"},
    "torch.Tensor.clamp_": {"kind": "method", "target": "mindspore.Tensor.clamp_",
                            "device_alt": ["mindspore.Tensor.clamp"],
                            "notes": "on CPU: x = x.clamp(min, max) (out of place)"},
    "torch.einsum": {"kind": "function", "target": "mindspore.mint.einsum",
                     "alt": ["mindspore.ops.einsum"],
                     "compose": "write the contraction as transpose/reshape + ops.matmul "
                                "(ops.bmm), e.g. 'bij,bjk->bik' -> ops.bmm(a, b)"},
    "torch.roll": {"kind": "function", "target": "mindspore.mint.roll",
                   "alt": ["mindspore.ops.roll"],
                   "compose": "ops.cat((x.narrow(d, n - s, s), x.narrow(d, 0, n - s)), d) for a "
                              "shift s along dim d of size n (s taken mod n)"},
    "torch.nn.functional.normalize": {
        "kind": "function", "target": "mindspore.mint.nn.functional.normalize",
        "dropped": ["out"],
        "compose": "x / ops.norm(x, ord=p, dim=dim, keepdim=True).clamp(min=eps) (what PyTorch "
                   "computes)"},
    "torch.nn.functional.layer_norm": {
        "kind": "function", "target": "mindspore.mint.nn.functional.layer_norm",
        "alt": ["mindspore.ops.layer_norm"], "device_alt": ["mindspore.ops.LayerNorm"],
        "notes": "on CPU: ops.LayerNorm(begin_norm_axis=-k, begin_params_axis=-k, "
                 "epsilon=eps)(x, weight, bias)[0] with k = len(normalized_shape); weight and "
                 "bias are required (ones/zeros)",
        "alt_traps": {"mindspore.ops.LayerNorm": [
            {"rule": "arg_default", "arg": "eps", "pos": 4, "torch_default": 1e-05,
             "transform": "same", "ms_arg": "epsilon", "ms_default": 1e-07,
             "note": "default epsilon differs (ops.LayerNorm 1e-07)"}]}},
    "torch.nn.parallel.DistributedDataParallel": {
        "kind": "distributed", "target": "mindspore.nn.DistributedGradReducer",
        "notes": "data parallel: mindspore.set_auto_parallel_context(parallel_mode="
                 "'data_parallel', gradients_mean=True) and reduce gradients with "
                 "DistributedGradReducer",
        "compose": "one process on CPU: drop the wrapper (nothing to reduce); data parallel "
                   "needs Ascend or GPU for DistributedGradReducer"},
    "torch.Tensor.detach": {"kind": "method", "target": "mindspore.ops.stop_gradient"},
    "torch.Tensor.item": {"kind": "method", "target": "mindspore.Tensor.item",
                          "modes": {"graph": "host synchronisation; a Python number is not "
                                             "available inside a mindspore.jit function"}},
    "torch.Tensor.tolist": {"kind": "method", "target": "mindspore.Tensor.tolist",
                            "modes": {"graph": "host synchronisation; not inside mindspore.jit"}},
    "torch.Tensor.nonzero": {"kind": "method", "target": "mindspore.Tensor.nonzero",
                             "modes": {"graph": _DYN}},
    # ---------------------------------------------------------------- same op, other place
    "torch.nn.Softplus": {"target": "mindspore.ops.softplus", "alt": ["mindspore.mint.nn.functional.softplus"],
                          "notes": "functional counterpart; wrap in a Cell"},
    "torch.nn.LocalResponseNorm": {"target": "mindspore.nn.LRN",
                                   "notes": "MindSpore LRN uses depth_radius (= size // 2) and "
                                            "divides alpha differently: check the formula"},
    "torch.nn.RMSNorm": {"status": "missing", "compose": "a Cell with a weight Parameter: " + _RMS},
    "torch.nn.functional.rms_norm": {"kind": "function", "status": "missing", "compose": _RMS},
    "torch.nn.SyncBatchNorm": {"target": "mindspore.nn.SyncBatchNorm",
                               "alt": ["mindspore.mint.nn.SyncBatchNorm"],
                               "device_alt": ["mindspore.nn.BatchNorm2d"],
                               "defaults": {"momentum": "0.9 (= 1 - PyTorch 0.1)"},
                               "traps": _BN_TRAPS,
                               "alt_traps": {"mindspore.mint.nn.SyncBatchNorm": [],
                                             "mindspore.nn.BatchNorm2d": [
                                                 *_BN_TRAPS,
                                                 {"rule": "always", "note": "no SyncBatchNorm "
                                                  "on this device: BatchNorm2d is the "
                                                  "single-device equivalent (statistics are "
                                                  "not synchronised across devices)"}]}},
    **{f"torch.nn.InstanceNorm{d}d": {
        "target": f"mindspore.nn.InstanceNorm{d}d",
        **({"device_alt": ["mindspore.nn.GroupNorm"],
            "alt_traps": {"mindspore.nn.GroupNorm": _INST_GN}} if d == 2 else {}),
        "traps": [_INST_AFFINE]} for d in (1, 2, 3)},
    "torch.var": {"kind": "function", "target": "mindspore.mint.var", "alt": ["mindspore.ops.var"],
                  "alt_traps": {"mindspore.ops.var": [_DDOF]}},
    # wrong or missed, found by benchmarks/scan_accuracy.py (each call run on MindSpore 2.10 CPU)
    "torch.var_mean": {"kind": "function", "target": "mindspore.mint.var_mean",
                       "alt": ["mindspore.ops.var_mean"],
                       "alt_traps": {"mindspore.ops.var_mean": [_DDOF]}},
    "torch.Tensor.size": {"kind": "method", "target": "mindspore.Tensor.shape",
                          "traps": [{"rule": "always",
                                     "note": "x.size() -> x.shape, x.size(d) -> x.shape[d]: "
                                             "mindspore.Tensor.size is the element count (a "
                                             "property), calling it raises"}]},
    "torch.equal": {"kind": "function", "target": "mindspore.mint.equal", "alt": [],
                    "compose": "a.shape == b.shape and bool(ops.equal(a, b).all()) (ops.equal is "
                               "element-wise)"},
    "torch.normal": {"kind": "function", "target": "mindspore.mint.normal",
                     "alt": ["mindspore.ops.normal"],
                     "alt_traps": {"mindspore.ops.normal": [{
                         "rule": "always",
                         "note": "ops.normal(shape, mean, stddev) takes the shape first: "
                                 "torch.normal(mean, std) -> ops.normal(mean.shape, mean, std)"}]}},
    "torch.diag": {"kind": "function", "target": "mindspore.mint.diag",
                   "alt": ["mindspore.ops.diag"],
                   "alt_traps": {"mindspore.ops.diag": [{
                       "rule": "always",
                       "note": "for a 2-D input PyTorch extracts the diagonal (ops.diagonal(x)); "
                               "ops.diag builds a diagonal tensor (the same only for 1-D input)"}]}},
    "torch.Tensor.flip": {"kind": "method", "target": "mindspore.Tensor.flip",
                          "traps": [{"rule": "always",
                                     "note": "dims must be a tuple or list: x.flip(1) -> "
                                             "x.flip((1,)) (an int raises)"}]},
    "torch.nn.Unfold": {"kind": "module", "target": "mindspore.nn.Unfold",
                        "alt": ["mindspore.mint.nn.Unfold"],
                        "dropped": ["kernel_size", "dilation", "stride"],
                        "traps": [{"rule": "always",
                                   "note": "mindspore.nn.Unfold(ksizes=[1, k, k, 1], strides=[1, s, "
                                           "s, 1], rates=[1, d, d, 1]) takes 4-element lists and "
                                           "returns (N, C*k*k, OH, OW): reshape to PyTorch's "
                                           "(N, C*k*k, L)"}]},
    "torch.full": {"kind": "function", "target": "mindspore.mint.full",
                   "alt": ["mindspore.ops.full"],
                   "alt_traps": {"mindspore.ops.full": [{
                       "rule": "when_absent", "arg": "dtype",
                       "note": "pass dtype explicitly: without it ops.full makes an Int64 tensor "
                               "(ops.full((2, 3), 1.5) is all 1; PyTorch gives float32 1.5)"}]}},
    "torch.transpose": {"kind": "function", "target": "mindspore.mint.transpose",
                        "alt": ["mindspore.ops.swapaxes"],
                        "notes": "ops.transpose takes a whole permutation (torch.permute)"},
    "torch.Tensor.unfold": {"kind": "method", "status": "missing",
                            "compose": "windows of `size` every `step` along dim d: ops.stack("
                                       "[x.narrow(d, i, size) for i in range(0, n - size + 1, "
                                       "step)], d) then move the window axis last "
                                       "(mindspore.Tensor.unfold is im2col)"},
    "torch.nn.functional.fold": {
        "kind": "function", "target": "mindspore.mint.nn.functional.fold",
        "alt": ["mindspore.ops.fold"],
        "alt_traps": {"mindspore.ops.fold": [{
            "rule": "always", "note": "ops.fold wants output_size as an int32 Tensor: "
                                      "ops.fold(x, Tensor(output_size, mindspore.int32), ...)"}]}},
    "torch.nn.LSTMCell": {"kind": "module", "target": "mindspore.nn.LSTMCell",
                          "args": {"bias": "has_bias"}, "dropped": ["device"],
                          "traps": [{"rule": "always",
                                     "note": "pass hx=(h0, c0) explicitly (zeros of (batch, "
                                             "hidden)): MindSpore's LSTMCell has no default "
                                             "state; bias must be a bool"}]},
    "torch.nn.MaxPool3d": {**_pool("mindspore.nn.MaxPool3d", "", 3), "alt": [], "notes": ""},
    "torch.nn.AvgPool3d": _pool("mindspore.nn.AvgPool3d", "mindspore.mint.nn.AvgPool3d", 3),
    "torch.std": {"kind": "function", "target": "mindspore.mint.std", "alt": ["mindspore.ops.std"],
                  "alt_traps": {"mindspore.ops.std": [_DDOF]}},
    "torch.Tensor.var": {"kind": "method", "target": "mindspore.Tensor.var", "traps": [_DDOF]},
    "torch.Tensor.std": {"kind": "method", "target": "mindspore.Tensor.std", "traps": [_DDOF]},
    "torch.nn.functional.leaky_relu": {
        "kind": "function", "target": "mindspore.mint.nn.functional.leaky_relu",
        "alt": ["mindspore.ops.leaky_relu"],
        "alt_traps": {"mindspore.ops.leaky_relu": [
            {"rule": "arg_default", "arg": "negative_slope", "pos": 1, "torch_default": 0.01,
             "transform": "same", "ms_arg": "alpha", "ms_default": 0.2,
             "note": "default slope differs (mindspore.ops.leaky_relu alpha=0.2)"}]}},
    "torch.is_tensor": {"kind": "function", "status": "missing",
                        "compose": "isinstance(x, mindspore.Tensor) (mindspore.ops.is_tensor is "
                                   "deprecated)"},
    "torch.masked_fill": {"kind": "function", "target": "mindspore.ops.masked_fill",
                          "device_alt": ["mindspore.Tensor.masked_fill"]},
    "torch.Tensor.relu": {"kind": "method", "target": "mindspore.ops.relu"},
    "torch.Tensor.log_softmax": {"kind": "method", "target": "mindspore.ops.log_softmax"},
    "torch.as_tensor": {"kind": "function", "target": "mindspore.tensor"},
    "torch.nn.functional.scaled_dot_product_attention": {
        "kind": "function", "status": "missing",
        "compose": "softmax(q @ k.swapaxes(-2, -1) / sqrt(d) + mask) @ v with mindspore.mint."
                   "matmul and mindspore.mint.softmax (is_causal: add a -inf upper-triangular "
                   "mask from mindspore.mint.triu)"},
    "torch.nn.functional.pairwise_distance": {
        "kind": "function", "status": "missing",
        "compose": "mindspore.ops.norm(x1 - x2 + eps, ord=p, dim=-1)"},
    "torch.nn.functional.max_pool1d": {
        "kind": "function", "status": "missing",
        "compose": "unsqueeze to 2-D and use mindspore.mint.nn.functional.max_pool2d with "
                   "kernel (1, k), then squeeze"},
    "torch.nn.functional.instance_norm": {
        "kind": "function", "status": "missing",
        "compose": "(x - mean(x, dims=(2, 3), keepdim)) / sqrt(var(x, unbiased=False) + eps) "
                   "* weight + bias with mindspore.mint.mean/var"},
    # ---------------------------------------------------------------- dtypes, device
    **{f"torch.{n}": {"kind": "dtype", "target": f"mindspore.{n}"} for n in (
        "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
        "uint8", "bool", "complex64", "complex128")},
    "torch.float": {"kind": "dtype", "target": "mindspore.float32"},
    "torch.half": {"kind": "dtype", "target": "mindspore.float16"},
    "torch.double": {"kind": "dtype", "target": "mindspore.float64"},
    "torch.long": {"kind": "dtype", "target": "mindspore.int64"},
    "torch.int": {"kind": "dtype", "target": "mindspore.int32"},
    "torch.device": {"kind": "device", "target": "mindspore.set_device",
                     "notes": "no device objects: choose the device once for the process"},
    "torch.cuda.is_available": {"kind": "device", "status": "missing",
                                "compose": "mindspore.get_context('device_target') == 'GPU'"},
    "torch.backends.cudnn.deterministic": {"kind": "device", "target": "mindspore.set_deterministic"},
    "torch.backends.cudnn.benchmark": {"kind": "device", "status": "not_needed",
                                       "notes": "no switch: drop it (kernel selection is "
                                                "MindSpore's own)"},
    "torch.use_deterministic_algorithms": {"kind": "device", "target": "mindspore.set_deterministic"},
    "torch.Size": {"kind": "dtype", "status": "missing",
                   "compose": "shapes are plain tuples in MindSpore"},
    # ---------------------------------------------------------------- TorchScript, checkpointing
    "torch._assert": {"kind": "function", "status": "not_needed",
                      "notes": "a plain Python assert (it exists for TorchScript)"},
    "torch.jit.script": {"kind": "function", "target": "mindspore.jit",
                         "notes": "Graph-mode compilation; restrictions differ from TorchScript"},
    "torch.jit.trace": {"kind": "function", "target": "mindspore.jit"},
    "torch.jit.is_scripting": {"kind": "function", "status": "not_needed",
                               "notes": "TorchScript-only branch: keep the eager branch"},
    "torch.jit.unused": {"kind": "function", "status": "not_needed",
                         "notes": "TorchScript decorator: drop it"},
    "torch.jit._overload_method": {"kind": "function", "status": "not_needed",
                                   "notes": "TorchScript overload declaration: drop it"},
    "torch.jit.annotate": {"kind": "function", "status": "not_needed",
                           "notes": "TorchScript type hint: keep the value"},
    "torch.utils.checkpoint.checkpoint": {
        "kind": "function", "target": "mindspore.nn.Cell.recompute",
        "notes": "call sub_cell.recompute() once instead of wrapping each call"},
}

#: aten op (no overload) -> MindSpore primitive(s) in mindspore.ops (checked by the table test)
ATEN: dict[str, list[str]] = {
    "aten.convolution": ["Conv2D"], "aten.conv2d": ["Conv2D"], "aten.cudnn_convolution": ["Conv2D"],
    "aten.convolution_backward": ["Conv2DBackpropInput"],
    "aten.addmm": ["MatMul", "BiasAdd"], "aten.mm": ["MatMul"], "aten.bmm": ["BatchMatMul"],
    "aten.matmul": ["MatMul"], "aten.linear": ["MatMul", "BiasAdd"],
    "aten.native_batch_norm": ["BatchNorm"], "aten._native_batch_norm_legit": ["BatchNorm"],
    "aten._native_batch_norm_legit_functional": ["BatchNorm"],
    "aten._native_batch_norm_legit_no_training": ["BatchNorm"],
    "aten.batch_norm": ["BatchNorm"], "aten.cudnn_batch_norm": ["BatchNorm"],
    "aten.native_batch_norm_backward": ["BatchNorm"],
    "aten.relu": ["ReLU"], "aten.relu_": ["ReLU"], "aten.threshold_backward": ["ReLU"],
    "aten.max_pool2d_with_indices": ["MaxPoolWithArgmaxV2"], "aten.max_pool2d": ["MaxPool"],
    "aten.max_pool2d_with_indices_backward": ["MaxPoolWithArgmaxV2"],
    "aten.avg_pool2d": ["AvgPool"], "aten.adaptive_avg_pool2d": ["AdaptiveAvgPool2D"],
    "aten._adaptive_avg_pool2d": ["AdaptiveAvgPool2D"],
    "aten.mean": ["ReduceMean"], "aten.sum": ["ReduceSum"], "aten.amax": ["ReduceMax"],
    "aten.amin": ["ReduceMin"], "aten.prod": ["ReduceProd"], "aten.all": ["ReduceAll"],
    "aten.any": ["ReduceAny"], "aten.max": ["ArgMaxWithValue"], "aten.argmax": ["Argmax"],
    "aten.add": ["Add"], "aten.add_": ["Add"], "aten.sub": ["Sub"], "aten.mul": ["Mul"],
    "aten.mul_": ["Mul"], "aten.div": ["Div"], "aten.neg": ["Neg"], "aten.abs": ["Abs"],
    "aten.exp": ["Exp"], "aten.log": ["Log"], "aten.sqrt": ["Sqrt"], "aten.rsqrt": ["Rsqrt"],
    "aten.pow": ["Pow"], "aten.reciprocal": ["Reciprocal"], "aten.tanh": ["Tanh"],
    "aten.sigmoid": ["Sigmoid"], "aten.gelu": ["GeLU"], "aten.erf": ["Erf"],
    "aten.silu": ["Sigmoid", "Mul"], "aten.maximum": ["Maximum"], "aten.minimum": ["Minimum"],
    "aten.clamp": ["clamp"], "aten.clamp_min": ["Maximum"], "aten.clamp_max": ["Minimum"],
    "aten.view": ["Reshape"], "aten._unsafe_view": ["Reshape"], "aten.reshape": ["Reshape"],
    "aten.flatten": ["Reshape"], "aten.t": ["Transpose"], "aten.transpose": ["Transpose"],
    "aten.permute": ["Transpose"], "aten.expand": ["BroadcastTo"], "aten.unsqueeze": ["ExpandDims"],
    "aten.squeeze": ["Squeeze"], "aten.cat": ["Concat"], "aten.split": ["Split"],
    "aten.slice": ["StridedSlice"], "aten.select": ["StridedSlice"], "aten.gather": ["GatherD"],
    "aten.index_select": ["Gather"], "aten.where": ["Select"], "aten.repeat": ["Tile"],
    "aten._softmax": ["Softmax"], "aten.softmax": ["Softmax"], "aten._log_softmax": ["LogSoftmax"],
    "aten.log_softmax": ["LogSoftmax"], "aten._log_softmax_backward_data": ["LogSoftmax"],
    "aten.nll_loss_forward": ["NLLLoss"], "aten.nll_loss": ["NLLLoss"],
    "aten.nll_loss_backward": ["NLLLoss"], "aten.cross_entropy_loss": ["SoftmaxCrossEntropyWithLogits"],
    "aten.native_layer_norm": ["LayerNorm"], "aten.native_dropout": ["Dropout"],
    "aten.dropout": ["Dropout"], "aten.embedding": ["Gather"], "aten.one_hot": ["OneHot"],
    "aten._to_copy": ["Cast"], "aten.to": ["Cast"], "aten.clone": ["Identity"],
    "aten.copy_": ["Assign"], "aten.detach": ["StopGradient"], "aten.zeros": ["Zeros"],
    "aten.ones": ["Ones"], "aten.zeros_like": ["ZerosLike"], "aten.ones_like": ["OnesLike"],
    "aten.fill_": ["Fill"], "aten.full": ["Fill"], "aten.arange": ["Range"],
    "aten.eq": ["Equal"], "aten.lt": ["Less"], "aten.gt": ["Greater"],
    "aten.sort": ["Sort"], "aten.topk": ["TopK"], "aten.cumsum": ["CumSum"],
    "aten.isfinite": ["IsFinite"], "aten.isnan": ["IsNan"], "aten.floor": ["Floor"],
    "aten.ceil": ["Ceil"], "aten.round": ["Round"], "aten.sign": ["Sign"],
    "aten.constant_pad_nd": ["PadV3"], "aten.upsample_nearest2d": ["ResizeNearestNeighbor"],
    "aten.upsample_bilinear2d": ["ResizeBilinearV2"], "aten.masked_fill": ["MaskedFill"],
    "aten.nonzero": ["NonZero"], "aten.unique": ["Unique"], "aten.addcmul": ["Addcmul"],
    "aten.lerp": ["Lerp"], "aten.norm": ["LpNorm"], "aten.linalg_vector_norm": ["LpNorm"],
    "aten.sqrt_": ["Sqrt"], "aten.addcdiv_": ["Addcdiv"], "aten.addcmul_": ["Addcmul"],
    "aten.lerp_": ["Lerp"], "aten._foreach_add": ["Add"],
    "aten._foreach_mul": ["Mul"], "aten._foreach_add_": ["Add"], "aten._foreach_mul_": ["Mul"],
    "aten._foreach_addcmul_": ["Addcmul"], "aten._foreach_addcdiv_": ["Addcdiv"],
    "aten._foreach_sqrt": ["Sqrt"], "aten._foreach_div_": ["Div"], "aten._foreach_lerp_": ["Lerp"],
    "aten.empty": ["Zeros"], "aten.empty_like": ["ZerosLike"], "aten.new_empty_strided": ["Zeros"],
    # what a ResNet-18 / ViT / GPT training step (AdamW) dispatches on CPU besides the above
    # (torch 2.13, recorded with TorchDispatchMode; tests/scan/test_scan_runtime.py re-records it)
    "aten.stack": ["Stack"], "aten.randint": ["UniformInt"], "aten.randn": ["StandardNormal"],
    "aten.div_": ["Div"],
    "aten.bernoulli_": ["Bernoulli"], "aten._safe_softmax": ["Softmax"],
    "aten._softmax_backward_data": ["Softmax"],
    "aten._scaled_dot_product_flash_attention_for_cpu": ["BatchMatMul", "Softmax"],
    "aten._scaled_dot_product_flash_attention_for_cpu_backward": ["BatchMatMul", "Softmax"],
    "aten.embedding_dense_backward": ["UnsortedSegmentSum"], "aten.gelu_backward": ["GeLU"],
    "aten.native_layer_norm_backward": ["LayerNorm"], "aten.select_backward": ["StridedSlice"],
    "aten.lift_fresh": ["Identity"], "aten._local_scalar_dense": [],
    "aten._record_function_enter_new": [], "aten._record_function_exit": [],
}
