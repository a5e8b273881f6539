"""The whole PyTorch -> MindSpore table, walked against the installed MindSpore 2.10."""

from __future__ import annotations

import inspect

import pytest

from netparity.frameworks.mindspore import api as mindspore_api
from netparity.scan.analyze import load_table
from netparity.scan.rules import RULES

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def table() -> dict:
    pytest.importorskip("mindspore")
    return load_table()


def test_table_covers_the_namespaces_that_matter(table: dict) -> None:
    apis = table["apis"]
    assert len(apis) >= 500
    for prefix in ("torch.nn.", "torch.nn.functional.", "torch.optim.", "torch.optim.lr_scheduler.",
                   "torch.utils.data.", "torch.distributed.", "torch.amp.", "torch.cuda.amp.",
                   "torch.Tensor."):
        assert sum(n.startswith(prefix) for n in apis) >= 2, prefix
    assert len(table["aten"]) >= 100


def test_every_counterpart_and_argument_exists_in_installed_mindspore(table: dict) -> None:
    check = mindspore_api.check_entries(table["apis"])
    assert check.version is not None and check.version.startswith("2.10")
    assert check.checked >= 500
    assert check.problems == {}


def test_every_aten_primitive_exists(table: dict) -> None:
    check = mindspore_api.check_primitives(table["aten"])
    assert check.problems == {}


def test_check_catches_an_invented_counterpart_or_argument(table: dict) -> None:
    fake = {
        "torch.nn.Fake": {"target": "mindspore.nn.NoSuchLayer"},
        "torch.nn.Conv2d": {"target": "mindspore.nn.Conv2d", "args": {"groups": "groupz"}},
    }
    problems = mindspore_api.check_entries(fake).problems
    assert "does not exist" in problems["torch.nn.Fake"][0]
    assert "no argument groupz" in problems["torch.nn.Conv2d"][0]


def test_stated_mindspore_defaults_match_the_signatures(table: dict) -> None:
    """Every ``ms_default`` a trap states is the installed signature's default."""
    seen = 0
    for name, entry in table["apis"].items():
        for trap in entry.get("traps", []):
            if "ms_default" not in trap:
                continue
            params = inspect.signature(
                mindspore_api.resolve(entry["target"]).__init__
                if inspect.isclass(mindspore_api.resolve(entry["target"]))
                else mindspore_api.resolve(entry["target"])).parameters
            assert params[trap["ms_arg"]].default == trap["ms_default"], name
            seen += 1
    assert seen >= 5


def test_stated_torch_defaults_match_the_signatures(table: dict) -> None:
    torch = pytest.importorskip("torch")
    seen = 0
    for name, entry in table["apis"].items():
        for trap in entry.get("traps", []):
            if "torch_default" not in trap:
                continue
            obj = torch
            for part in name.split(".")[1:]:
                obj = getattr(obj, part)
            fn = obj.__init__ if inspect.isclass(obj) else obj
            assert inspect.signature(fn).parameters[trap["arg"]].default == trap["torch_default"], name
            seen += 1
    assert seen >= 8


def test_entries_are_well_formed(table: dict) -> None:
    for name, entry in table["apis"].items():
        assert name.startswith("torch."), name
        status = entry.get("status")
        assert status in (None, "missing", "not_needed"), name
        if status is None:
            assert entry["target"].startswith("mindspore."), name
        if status == "missing":
            assert "target" not in entry, name
        for trap in entry.get("traps", []):
            assert trap["rule"] in RULES, name


def test_check_is_skipped_without_mindspore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mindspore_api, "mindspore_version", lambda: None)
    check = mindspore_api.check_entries({"torch.nn.ReLU": {"target": "mindspore.nn.ReLU"}})
    assert check.skipped and check.checked == 0


def test_stated_behaviours_hold_numerically(table: dict) -> None:
    """The facts behind three traps, measured on the installed frameworks."""
    import numpy as np

    ms = pytest.importorskip("mindspore")
    torch = pytest.importorskip("torch")
    # BatchNorm: MindSpore moving = m*moving + (1-m)*batch, so momentum=0.9 == PyTorch's 0.1
    x = np.random.default_rng(0).normal(3.0, 1.0, (8, 2, 4, 4)).astype(np.float32)
    bn = ms.nn.BatchNorm2d(2, momentum=0.9, moving_mean_init="zeros")
    bn.set_train(True)
    bn(ms.Tensor(x))
    tbn = torch.nn.BatchNorm2d(2, momentum=0.1).train()
    tbn(torch.from_numpy(x))
    np.testing.assert_allclose(bn.moving_mean.asnumpy(), tbn.running_mean.numpy(), rtol=1e-5)
    # Embedding: MindSpore's default table is Normal(sigma=0.01), PyTorch's N(0, 1)
    std = ms.nn.Embedding(2000, 50).embedding_table.asnumpy().std()
    assert 0.009 < std < 0.011
    # label smoothing: PyTorch's target is on = 1 - eps + eps/C, off = eps/C
    logits = torch.randn(4, 5)
    y = torch.tensor([0, 1, 2, 3])
    eps, c = 0.1, 5
    soft = torch.full((4, c), eps / c)
    soft[torch.arange(4), y] = 1 - eps + eps / c
    torch.testing.assert_close(torch.nn.functional.cross_entropy(logits, y, label_smoothing=eps),
                               torch.nn.functional.cross_entropy(logits, soft))
