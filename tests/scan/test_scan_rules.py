"""Trap rules read the argument values written at the call site."""

from __future__ import annotations

from netparity.scan.analyze import Finding, classify, load_table
from netparity.scan.static import module_names, scan_source


def _findings(src: str) -> list[Finding]:
    table = load_table()
    known = set(table["apis"])
    uses = scan_source("import torch\nfrom torch import nn, optim\n" + src, "t.py", known,
                       module_names(known))
    return [classify(u, table, {}) for u in uses]


def _one(src: str) -> Finding:
    (f,) = _findings(src)
    return f


def test_batchnorm_momentum_is_converted_from_the_value_used() -> None:
    f = _one("nn.BatchNorm2d(8, momentum=0.01)\n")
    assert f.status == "trap" and f.line == 3
    assert "set momentum=0.99" in f.note
    f = _one("nn.BatchNorm1d(8, 1e-3, 0.2)\n")  # positional momentum
    assert "set momentum=0.8" in f.note
    f = _one("nn.BatchNorm2d(8, momentum=None)\n")
    assert "no MindSpore counterpart" in f.note and "set momentum" not in f.note


def test_conv_padding_modes() -> None:
    assert "pad_mode='pad', padding=2" in _one("nn.Conv2d(3, 8, 5, 1, 2)\n").note
    assert "pad_mode='valid'" in _one("nn.Conv2d(3, 8, 1)\n").note
    assert "pad_mode='same'" in _one("nn.Conv2d(3, 8, 3, padding='same')\n").note
    reflect = _one("nn.Conv2d(3, 8, 3, padding=1, padding_mode='reflect')\n").note
    assert "pad explicitly first" in reflect
    # bias: PyTorch default True differs from MindSpore's has_bias=False; bias=False matches
    assert "has_bias=True" in _one("nn.Conv2d(3, 8, 3, padding=1)\n").note
    assert "has_bias" not in " ".join(_one("nn.Conv2d(3, 8, 3, padding=1, bias=False)\n").traps)


def test_dropout_positional_is_keep_prob_in_mindspore() -> None:
    f = _one("nn.Dropout(0.2)\n")
    assert f.status == "trap" and "write p=0.2" in f.note
    assert _one("nn.Dropout(p=0.2)\n").status == "mapped"
    assert _one("nn.Dropout()\n").status == "mapped"


def test_defaults_that_differ() -> None:
    assert "set epsilon=1e-05" in _one("nn.LayerNorm(16)\n").note
    assert _one("nn.LayerNorm(16, eps=1e-7)\n").status == "mapped"
    assert "set alpha=0.01" in _one("nn.LeakyReLU()\n").note
    assert "approximate=False" in _one("nn.GELU()\n").note
    pool = _one("nn.MaxPool2d(2)\n")
    assert "set stride=2" in pool.note
    assert _one("nn.MaxPool2d(2, 2)\n").status == "mapped"


def test_weight_decay_on_all_parameters_is_not_a_trap() -> None:
    # PyTorch decays BatchNorm gamma/beta too: filtering them is a habit of ports, not a default
    # difference (issue 32: a false trap)
    f = _one("opt = optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)\n")
    assert f.status == "mapped" and "as in PyTorch" in f.note


def test_label_smoothing_and_missing_composition() -> None:
    # MindSpore's CrossEntropyLoss(label_smoothing=eps) computes PyTorch's loss (issue 32: a false
    # trap; measured in test_scan_semantics.py)
    f = _one("nn.CrossEntropyLoss(label_smoothing=0.1)\n")
    assert f.status == "mapped" and "off=eps/C" in f.note
    f = _one("torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=10)\n")
    assert f.status == "missing" and "learning_rate" in f.note


def test_reference_without_call_has_no_trap() -> None:
    f = _one("ok = isinstance(m, nn.BatchNorm2d)\n")
    assert f.status == "mapped" and f.target.startswith("mindspore.nn.BatchNorm2d")


def test_graph_mode_differences_are_flagged() -> None:
    f = _one("idx = torch.nonzero(mask)\n")
    assert f.status == "mapped" and "output shape depends on the data" in f.graph
    assert _one("nn.ReLU()\n").graph == ""


def test_mindspore_facts_found_while_porting_are_traps() -> None:
    # each checked on MindSpore 2.10 CPU (issue 28): the padding row's gradient is not masked;
    # Conv2dTranspose's output_padding rows are zeros; AvgPool2d(pad_mode='same') leaves the
    # padding out of the average
    assert "gradient is not masked" in _one("nn.Embedding(10, 4, padding_idx=0)\n").note
    assert "not masked" not in _one("nn.Embedding(10, 4)\n").note
    convt = _one("nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)\n").note
    assert "fills the extra rows/columns with zeros" in convt
    assert "zeros" not in _one("nn.ConvTranspose2d(8, 4, 3, 2, 1, 0)\n").note
    assert "averages the zero padding in" in _one("nn.AvgPool2d(3, 1, 1)\n").note
    assert "averages the zero padding in" not in _one("nn.AvgPool2d(2)\n").note
