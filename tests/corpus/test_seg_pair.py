"""The segmentation family of the corpus (``tests/corpus/seg_pair.py``): a PyTorch U-Net against
an independently written MindSpore port through ``netparity step``, with a warm-up + cosine
learning rate stepped every iteration on both sides. The faithful port and an equivalent rewrite
(hand-written loss, functional bilinear resize, a skip concatenated in the other order,
an emulated transposed convolution, a schedule cell) pass at module level and at ``--level
both``; four port mistakes are named in their phase, place and step.

Also, framework-free: a module fed the same values in another order (a concatenation the other
way round, the consumer's input channels swapped to match) is restructured, not a divergence, in
a plain ``compare`` at every level -- while the same concatenation without the matching swap is
still a forward divergence at the consumer."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import netparity  # noqa: E402

nn = torch.nn


class _Cat(nn.Module):
    """Two branches concatenated into a conv; ``swap``: concatenated the other way round, the
    conv's weight (kept in the reference's layout) swapped to match unless ``fix`` is False."""

    def __init__(self, swap: bool = False, fix: bool = True):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 2, 1)
        self.fuse = _SwappedConv(swap, fix)
        self.head = nn.Conv2d(5, 3, 1)
        self.swap = swap

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        return self.head(torch.relu(self.fuse(torch.cat([b, a] if self.swap else [a, b], 1))))


class _SwappedConv(nn.Conv2d):
    def __init__(self, swap: bool, fix: bool):
        super().__init__(6, 5, 3, padding=1)
        self.swap, self.fix = swap, fix

    def forward(self, x):
        w = self.weight
        if self.swap and self.fix:
            w = torch.cat([w[:, 4:], w[:, :4]], 1)
        return nn.functional.conv2d(x, w, self.bias, padding=1)


def _cat_pair(root: Path, level: str, fix: bool = True):
    torch.manual_seed(0)
    ref, cand = _Cat(), _Cat(swap=True, fix=fix)
    cand.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    for m, name in ((ref, "ref"), (cand, "cand")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with netparity.capture(m, str(root / name), level=level, payload="tensors",
                               optimizer=opt) as cap:
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            cap.record_loss(loss)
            cap.step()
    return netparity.compare(root / "ref", root / "cand", level=level)


@pytest.mark.parametrize("level", ["module", "both"])
def test_a_concatenation_in_the_other_order_is_restructured_not_a_divergence(tmp_path, level):
    """Every way to a verdict on two traces passes: the API's compare, a saved result
    re-judged (``recheck``) and the CLI's ``compare`` (exit 0); ``step`` is the MindSpore
    equivalent-rewrite row below."""
    from tests.safety.helpers import run_cli

    from netparity.analyzers.divergence import recheck
    from netparity.compare.results import CompareResult

    res = _cat_pair(tmp_path, level)
    assert res.status == "pass", (res.first_divergence, res.first_backward,
                                  [p.name for p in res.pairs_with_status("fail")])
    listed = res.unmatched.get("restructured", [])
    assert {(r["module"], r["direction"]) for r in listed if r["kind"] == "module"} == {
        ("fuse", "forward"), ("fuse", "backward")}
    assert any("input laid out differently" in n for n in res.notes)
    again = recheck(CompareResult.from_json(res.to_json()))
    assert again.status == "pass"
    cli = run_cli("compare", str(tmp_path / "ref"), str(tmp_path / "cand"), "--level", level)
    assert cli.returncode == 0, cli.stdout[-2000:] + cli.stderr[-2000:]


@pytest.mark.parametrize("level", ["module", "both"])
def test_the_same_concatenation_without_the_matching_swap_is_a_forward_divergence(tmp_path,
                                                                                  level):
    res = _cat_pair(tmp_path, level, fix=False)
    fd = res.first_divergence
    assert res.status == "fail" and fd is not None
    # the concatenation is the root's own code, between its children: named there (the
    # consumer's inputs already differ, so its own difference is propagated)
    assert (fd.module, fd.direction, fd.verdict) == ("", "forward", "introduced")
    assert not res.unmatched.get("restructured")


# ---- the MindSpore port through `netparity step` ------------------------------------------

def _step(tmp_path: Path, level: str = "module", **cand: object):
    pytest.importorskip("mindspore", reason="MindSpore is not installed")
    from tests.corpus import seg_pair

    from netparity.workflow.step import run_step_parity

    spec = str(Path(seg_pair.__file__))
    return run_step_parity(spec, spec, tmp_path / "run", steps=3,
                           cand_options={"framework": "mindspore", **cand}, level=level,
                           run_eval=False, free_running=False)


def _passes(r) -> None:
    assert r.first_phase is None, (r.first_phase, r.where, [p.summary for p in r.phases])
    assert not [p.name for p in r.phases if p.status in ("warn", "fail")]


@pytest.mark.parametrize("level", ["module", "both"])
@pytest.mark.parametrize("rewrite", [False, True], ids=["faithful", "equivalent-rewrite"])
def test_faithful_and_equivalent_rewrite_pass(tmp_path, rewrite, level):
    _passes(_step(tmp_path, level, rewrite=rewrite))


def test_the_schedule_as_a_learning_rate_schedule_cell_passes(tmp_path):
    _passes(_step(tmp_path, lr_cell=True))


@pytest.mark.parametrize("bug", [
    "deconv-pad", "lr-ahead", "align-corners", "no-ignore"])
def test_a_port_mistake_is_named_in_its_phase_and_place(tmp_path, bug):
    from tests.corpus import seg_pair

    r = _step(tmp_path, bug=bug)
    assert (r.first_phase, r.where, r.first.step) == seg_pair.FOUND_AT[bug], \
        [p.summary for p in r.phases]
    if bug == "lr-ahead":
        assert "learning rate" in r.first.summary
    if bug in ("deconv-pad", "align-corners"):
        assert "introduces" in r.first.summary
