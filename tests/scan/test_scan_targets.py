"""Every counterpart the scan advises is checked three ways on the installed MindSpore (exists,
not deprecated, runs on the device), a project is scanned with its local imports, and the terminal
shows one row per API (issue 32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netparity.cli import main
from netparity.scan import targets
from netparity.scan.analyze import load_table, scan_paths

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def ms():  # type: ignore[no-untyped-def]
    mindspore = pytest.importorskip("mindspore")
    mindspore.set_context(pynative_synchronize=True)
    return mindspore


def _scan(tmp_path: Path, src: str, device: str = "cpu") -> dict:
    f = tmp_path / "t.py"
    f.write_text("import torch\nimport torch.nn.functional as F\nfrom torch import nn, optim\n"
                 + src)
    return {x.name: x for x in scan_paths([str(f)], device=device).findings}


def test_every_advised_target_exists_is_current_and_runs_on_cpu(ms) -> None:  # noqa: ANN001
    """For every table entry, the counterpart advised for CPU exists, is not deprecated unless
    nothing current exists, and neither its docstring nor a measurement says it lacks CPU."""
    table = load_table()
    version = ms.__version__
    measured = table["cpu_runs"]
    seen = 0
    for name, entry in table["apis"].items():
        if not entry.get("target"):
            continue
        choice = targets.choose(entry, "cpu", version, measured)
        if choice.blocked:
            continue  # reported as missing on CPU, with the reasons
        f = targets.facts(choice.target)
        assert f.exists, name
        assert targets.runs_on(choice.target, "cpu", measured) is not False, name
        if f.deprecated:  # only as the last resort, and said so
            assert "still runs" in choice.reasons[-1], name
        seen += 1
    assert seen >= 500


def test_device_claims_are_confirmed_by_calling_the_targets_on_cpu(ms) -> None:  # noqa: ANN001
    """The measured CPU facts of the table hold: a sample of each kind is called on small
    tensors here (no kernel -> "unregistered"; runs -> a tensor)."""
    x = ms.Tensor(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    runs = {"mindspore.ops.stack": lambda: ms.ops.stack([x, x]),
            "mindspore.Tensor.transpose": lambda: x.transpose(1, 0),
            "mindspore.ops.var": lambda: ms.ops.var(x, 1, ddof=1),
            "mindspore.ops.tensor_scatter_elements": lambda: ms.ops.tensor_scatter_elements(
                x, ms.Tensor(np.array([[0], [2]], np.int64)), x[:, :1], 1),
            "mindspore.ops.tile": lambda: ms.ops.tile(x, (2, 1)),
            "mindspore.mint.distributed.is_initialized":
                lambda: ms.mint.distributed.is_initialized()}
    fails = {"mindspore.mint.stack": lambda: ms.mint.stack([x, x]),
             "mindspore.mint.var": lambda: ms.mint.var(x, 1),
             "mindspore.Tensor.clone": lambda: x.clone(),
             "mindspore.mint.nn.functional.gelu": lambda: ms.mint.nn.functional.gelu(x)}
    measured = load_table()["cpu_runs"]
    for name, call in runs.items():
        out = call()
        if isinstance(out, ms.Tensor):
            out.asnumpy()
        assert targets.runs_on(name, "cpu", measured) is not False, name
    for name, call in fails.items():
        with pytest.raises(Exception, match="unregistered|not supported"):
            call().asnumpy()
        assert targets.runs_on(name, "cpu", measured) is False, name


def test_device_switch_deprecation_and_wrong_mappings(ms, tmp_path: Path) -> None:  # noqa: ANN001
    src = ("a = torch.stack([x, y])\nb = torch.var(x)\nc = F.leaky_relu(x)\n"
           "d = optim.AdamW(m.parameters())\ne = torch.from_numpy(n)\n"
           "f = torch.distributed.is_initialized()\ng = F.rms_norm(x, (4,))\n"
           "h = torch.distributed.all_reduce(t)\ni = torch.is_tensor(x)\n"
           "j = nn.InstanceNorm2d(3)\nk = nn.SyncBatchNorm(8, 1e-5, 0.01)\n"
           "s = torch.cuda.amp.GradScaler()\n")
    cpu = _scan(tmp_path, src, "cpu")
    assert cpu["torch.stack"].target == "mindspore.ops.stack"
    assert "does not run on CPU" in cpu["torch.stack"].note
    assert cpu["torch.var"].target == "mindspore.ops.var" and "set ddof=1" in cpu["torch.var"].note
    assert "set alpha=0.01" in cpu["torch.nn.functional.leaky_relu"].note
    assert cpu["torch.optim.AdamW"].target == "mindspore.experimental.optim.AdamW"
    assert cpu["torch.from_numpy"].target == "mindspore.from_numpy"
    assert "deprecated" in cpu["torch.from_numpy"].note
    assert cpu["torch.distributed.is_initialized"].target == \
        "mindspore.mint.distributed.is_initialized"
    rms = cpu["torch.nn.functional.rms_norm"]
    assert rms.status == "missing" and "rsqrt" in rms.note and not rms.blocking
    assert cpu["torch.distributed.all_reduce"].target == "mindspore.ops.communication.all_reduce"
    assert "isinstance" in cpu["torch.is_tensor"].note
    inst = cpu["torch.nn.InstanceNorm2d"]
    assert inst.target == "mindspore.nn.GroupNorm" and "set affine=False" in inst.note
    sync = cpu["torch.nn.SyncBatchNorm"]
    assert sync.target == "mindspore.nn.BatchNorm2d" and "set momentum=0.99" in sync.note
    assert "scale_window=2000" in cpu["torch.cuda.amp.GradScaler"].note
    # on Ascend the primary targets stand
    asc = _scan(tmp_path, src, "ascend")
    assert asc["torch.stack"].target.startswith("mindspore.mint.stack")
    assert asc["torch.optim.AdamW"].target == "mindspore.mint.optim.AdamW"
    assert "set affine=False" in asc["torch.nn.InstanceNorm2d"].note  # GPU-only there
    assert asc["torch.nn.InstanceNorm2d"].target == "mindspore.nn.GroupNorm"


def test_docstring_facts_are_read() -> None:
    class Api:
        """Do it.

        .. warning::
            `mindspore.x.old` is deprecated from version 2.9.0 and will be removed. Please use
            :func:`mindspore.x.new` instead.

        Supported Platforms:
            ``Ascend`` ``GPU``
        """

    platforms, deprecated, rep = targets._doc_facts(Api)
    assert platforms == {"ascend", "gpu"} and deprecated and rep == "mindspore.x.new"


def test_a_script_is_scanned_with_its_local_imports(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text("from torch import nn\nbn = nn.BatchNorm2d(4)\n")
    (tmp_path / "model.py").write_text("from torch import nn\nfrom pkg.layers import bn\n"
                                       "conv = nn.Conv2d(1, 2, 3)\n")
    (tmp_path / "train.py").write_text("import model\nimport numpy\n")
    r = scan_paths([str(tmp_path / "train.py")], verify=False)
    assert {Path(f).name for f in r.files} == {"train.py", "model.py", "layers.py"}
    assert {f.name for f in r.findings} == {"torch.nn.BatchNorm2d", "torch.nn.Conv2d"}
    only = scan_paths([str(tmp_path / "train.py")], verify=False, follow=False)
    assert only.findings == []


def test_rollup_fits_per_api_and_detail_lists_lines(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # (a narrow table folds the API's name)
    src = tmp_path / "t.py"
    src.write_text("from torch import nn\n" + "nn.BatchNorm2d(8)\n" * 40)
    assert main(["scan", str(src), "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert out.count("torch.nn.BatchNorm2d") == 1 and "40" in out and "t.py:2" in out
    assert "t.py:41" not in out
    assert main(["scan", str(src), "--no-verify", "--detail"]) == 0
    assert "t.py:41" in capsys.readouterr().out
