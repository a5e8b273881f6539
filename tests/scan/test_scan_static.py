"""Static scanning: import/alias resolution, tensor-receiver inference, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from netparity.errors import UsageError
from netparity.scan.analyze import load_table, scan_paths
from netparity.scan.static import module_names, scan_source


def _uses(src: str) -> list[tuple[str, int, str]]:
    known = set(load_table()["apis"])
    uses = scan_source(src, "x.py", known, module_names(known))
    return [(u.name, u.line, u.confidence) for u in uses]


def test_aliases_resolve_every_import_form() -> None:
    src = (
        "import torch as t\n"                              # 1
        "import torch.nn as nn\n"                          # 2
        "from torch.nn import functional as F\n"           # 3
        "from torch import optim\n"                        # 4
        "from torch.utils.data import DataLoader as DL\n"  # 5
        "import torch.distributed\n"                       # 6
        "conv = nn.Conv2d(3, 8, 3)\n"                      # 7
        "y = F.relu(t.zeros(2))\n"                         # 8
        "opt = optim.SGD([], lr=0.1)\n"                    # 9
        "dl = DL([1, 2])\n"                                # 10
        "torch.distributed.barrier()\n"                    # 11
        "sched = optim.lr_scheduler.StepLR(opt, 3)\n"      # 12
    )
    names = {(n, line) for n, line, _ in _uses(src)}
    assert names == {
        ("torch.nn.Conv2d", 7), ("torch.nn.functional.relu", 8), ("torch.zeros", 8),
        ("torch.optim.SGD", 9), ("torch.utils.data.DataLoader", 10),
        ("torch.distributed.barrier", 11), ("torch.optim.lr_scheduler.StepLR", 12),
    }


def test_non_torch_names_are_not_reported() -> None:
    src = "import numpy as np\nimport nn\nx = np.zeros(3)\nnn.Conv2d(1, 2, 3)\n"
    assert _uses(src) == []


def test_tensor_methods_only_on_inferred_receivers() -> None:
    src = (
        "import torch\n"
        "from torch import Tensor\n"
        "def f(x: Tensor, m):\n"
        "    a = x.view(-1)\n"            # 4: annotated parameter -> inferred
        "    b = m.view(-1)\n"            # 5: unknown receiver -> not reported
        "    c = torch.ones(3)\n"
        "    d = c.permute(0)\n"          # 7: assigned from a torch call -> inferred
        "    e = a.sum().item()\n"        # 8: chained on an inferred tensor
        "    c = m\n"
        "    return c.view(2)\n"          # 10: rebound to an unknown value -> not reported
    )
    uses = _uses(src)
    methods = [(n, line, c) for n, line, c in uses if n.startswith("torch.Tensor.")]
    assert methods == [
        ("torch.Tensor.view", 4, "inferred"),
        ("torch.Tensor.permute", 7, "inferred"),
        ("torch.Tensor.item", 8, "inferred"),
        ("torch.Tensor.sum", 8, "inferred"),
    ]


def test_attribute_chain_is_one_use() -> None:
    src = "import torch\nx = torch.nn.functional.softmax(torch.ones(2), dim=0)\n"
    assert [n for n, _, _ in _uses(src)] == ["torch.nn.functional.softmax", "torch.ones"]


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef f(:\n    pass\n")
    with pytest.raises(UsageError, match=r"bad\.py:3: syntax error"):
        scan_paths([str(bad)], verify=False)


def test_missing_path_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        scan_paths([str(tmp_path / "nope.py")], verify=False)
    binary = tmp_path / "b.py"
    binary.write_bytes(b"\xff\xfe\x00import torch")
    with pytest.raises(UsageError, match="cannot read"):
        scan_paths([str(binary)], verify=False)


def test_directory_is_walked_and_target_checked(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("import torch.nn as nn\nnn.ReLU()\n")
    (pkg / "sub" / "b.py").write_text("from torch import nn\nnn.GELU()\n")
    (pkg / "notes.txt").write_text("nn.Conv2d(")
    result = scan_paths([str(pkg)], verify=False)
    assert sorted(Path(f).name for f in result.files) == ["a.py", "b.py"]
    assert {f.name: f.status for f in result.findings} == {"torch.nn.ReLU": "mapped",
                                                          "torch.nn.GELU": "trap"}
    with pytest.raises(UsageError, match="only mindspore"):
        scan_paths([str(pkg)], to="jax", verify=False)


def test_real_model_files_from_an_installed_package() -> None:
    """torchvision's model files (read as text, never imported) scan with nothing missing."""
    import importlib.util

    spec = importlib.util.find_spec("torchvision")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchvision is not installed")
    models = Path(list(spec.submodule_search_locations)[0]) / "models"
    files = [models / n for n in ("resnet.py", "vgg.py", "densenet.py")]
    result = scan_paths([str(f) for f in files], verify=False)
    assert result.summary()["blocking"] == 0
    bn = [f for f in result.findings if f.name == "torch.nn.BatchNorm2d" and f.status == "trap"]
    assert bn and all("momentum" in f.note for f in bn)
    resnet = files[0].read_text().splitlines()
    for f in bn:
        assert "BatchNorm2d" in resnet[f.line - 1] or f.file != str(files[0])
