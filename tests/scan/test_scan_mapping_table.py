"""The whole PyTorch -> MindSpore table, walked against the installed MindSpore 2.10."""

from __future__ import annotations

import inspect

import pytest

from netparity.frameworks import mindspore_api
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
