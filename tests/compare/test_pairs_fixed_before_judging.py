"""A comparison's pairs do not depend on which judges ran (issue 28): the leaf replays change
statuses and reasons only, and the steps after them (a module input "laid out differently",
ops "restructured") set pairs aside as not judged instead of taking them out, so the evidence
(how many pairs, which are paired) is the same with and without a replay.

How "without a replay" is made, with no switch in the code and no mock: the leaf replays read
the reference's ``capture_notes.json`` section ``modules`` (the leaves' classes and attributes);
a copy of the reference trace without that section is the same trace to every other stage
(pairing, tables, localisation), so comparing the candidate against it is the comparison with
no replay applied.

The pair: a float32 reference against a bfloat16 candidate whose GELU hands back its input
gradient with the features in reverse order (forward exact). The table fails the GELU's bfloat16 input and output; the
forward replay clears the output (the GELU adds nothing of its own) and the backward replay
fails the gradient the GELU hands back (introduced in backward). Before the fix, that state
matched "a module input laid out differently" (input failing, output passing, input gradient
failing, equal RMS), so the two pairs were taken out of the result -- the pair count moved
with the replay, and the real backward bug was hidden.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402

F = torch.nn.functional


class _FlippedGrad(torch.autograd.Function):
    """Exact GELU forward; backward hands on the right gradient with its features in reverse
    order (the same values, so the same RMS, in the wrong places)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1.0 + torch.erf(x * 0.5 ** 0.5))
        pdf = torch.exp(-0.5 * x * x) * (2.0 * torch.pi) ** -0.5
        return (g * (cdf + x * pdf)).flip(-1)


class _BadGELU(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        return _FlippedGrad.apply(x)


class _Net(torch.nn.Module):
    def __init__(self, bad: bool) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.act = _BadGELU() if bad else torch.nn.GELU()
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.act(self.fc1(x)))


def _capture(path: Path, dtype: Any, bad: bool) -> Path:
    torch.manual_seed(0)
    model = _Net(bad).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    with netparity.capture(model, str(path), level="module", payload="tensors",
                           optimizer=opt) as cap:
        for _ in range(2):
            x = torch.randn(16, 8, generator=g).to(dtype)
            y = torch.randint(0, 4, (16,), generator=g)
            opt.zero_grad()
            loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
            cap.record_loss(loss)
            cap.step()
    return path


def _without_replay(ref: Path, to: Path) -> Path:
    """A copy of ``ref`` without the notes the leaf replays need (module docstring)."""
    shutil.copytree(ref, to)
    notes = to / "rank0" / "capture_notes.json"
    data = json.loads(notes.read_text())
    assert data.pop("modules", None)
    notes.write_text(json.dumps(data))
    return to


def test_the_pairs_are_the_same_with_and_without_the_leaf_replays(tmp_path: Path) -> None:
    ref = _capture(tmp_path / "ref", torch.float32, bad=False)
    cand = _capture(tmp_path / "cand", torch.bfloat16, bad=True)
    replayed = netparity.compare(ref, cand)
    plain = netparity.compare(_without_replay(ref, tmp_path / "bare"), cand)
    assert replayed.settings.get("leaf_replay") and not plain.settings.get("leaf_replay")
    st_r = {p.key: p.status for p in replayed.all_pairs()}
    st_p = {p.key: p.status for p in plain.all_pairs()}
    assert any(st_r[k] != s for k, s in st_p.items() if k in st_r)  # the replays judged
    assert sorted(st_r) == sorted(st_p)  # ... and changed no pairing
    assert replayed.n_pairs() == plain.n_pairs()
    # the GELU's wrong backward is named, not set aside as an input laid out differently
    grads = [p for p in replayed.all_pairs() if p.module == "act"
             and p.direction == "backward" and p.role == "output"]
    assert grads and all(p.status == "fail" for p in grads), [(p.key, p.reason) for p in grads]
    assert not replayed.unmatched.get("restructured")
    assert not replayed
