"""Culprits by replay: the candidate's module fed the reference's inputs.

Real PyTorch (and MindSpore) modules throughout; the pairs are small so each test takes seconds.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from netparity.analyzers.replay import ReplayOutcome, judge, normwise_error, refine_forward
from netparity.analyzers.step import Phase

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from netparity.errors import FrameworkError  # noqa: E402
from netparity.frameworks.models import run_module  # noqa: E402
from netparity.workflow.step import run_step_parity  # noqa: E402

SPEC = textwrap.dedent('''
    import numpy as np
    import torch
    from torch import nn

    class _TanhFn(torch.autograd.Function):
        """tanh with a hand-written backward 1% off: a custom gradient ported wrongly."""

        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1 - y * y) * 1.01

    class Tanh(nn.Tanh):
        def forward(self, x):
            return _TanhFn.apply(x)

    class Block(nn.Module):
        """Two children and a scaling written in the block's own forward."""

        def __init__(self, scale, p, bad_grad):
            super().__init__()
            self.lin1, self.lin2 = nn.Linear(16, 16), nn.Linear(16, 16)
            self.act = Tanh() if bad_grad else nn.Tanh()
            self.drop = nn.Dropout(p)
            self.scale = scale

        def forward(self, x):
            h = self.act(self.lin1(x)) * self.scale    # the block's own code
            return self.drop(self.lin2(h))

    def build(steps, scale=1.0, p=0.0, bad_grad=False, adam_eps=None):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), Block(scale, p, bad_grad), nn.Linear(16, 3))
        opt = (torch.optim.SGD(model.parameters(), lr=0.1) if adam_eps is None else
               torch.optim.Adam(model.parameters(), lr=0.1, eps=float(adam_eps)))
        rng = np.random.default_rng(0)
        batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4))
                   for _ in range(steps)]

        def train_step(x, y):
            model.train()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(torch.as_tensor(x)),
                                               torch.as_tensor(y).long())
            loss.backward()
            opt.step()
            return float(loss)

        return {"framework": "torch", "model": model, "batches": batches,
                "train_step": train_step, "optimizer": opt, "lr_schedule": [0.1] * steps}
''')


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "block_spec.py"
    p.write_text(SPEC)
    return str(p)


def _run(spec, tmp_path, options=None, **cand):
    return run_step_parity(spec, spec, tmp_path / "run", steps=1, options=options,
                           cand_options=cand, run_eval=False, free_running=False)


def test_a_difference_made_in_a_modules_own_code_is_named_there_by_replay(spec, tmp_path):
    r = _run(spec, tmp_path, scale=1.001)
    fwd = r.phase("forward")
    assert (r.first_phase, r.where) == ("forward", "1")
    table = {o["module"]: o for o in fwd.evidence["replay"]}
    # the child that first carries the difference reproduces the reference on its inputs ...
    assert table["1.lin2"]["verdict"] == "reproduces"
    assert table["1.lin2"]["accumulated"] > 1e-4 and table["1.lin2"]["local"] < 1e-6
    # ... and the block itself, fed the same inputs, does not
    assert table["1"]["verdict"] == "introduced"
    assert table["1"]["local"] > table["1"]["bound"]
    assert "replay" in fwd.evidence["verdict"]
    # the report shows local vs accumulated error per replayed module
    import io

    from netparity.report.terminal import make_console, render_terminal

    buf = io.StringIO()
    render_terminal(r, console=make_console(buf))
    lines = [ln for ln in buf.getvalue().splitlines() if "1.lin2" in ln and "reproduces" in ln]
    assert lines and "local (replay)" in buf.getvalue()


def test_a_wrong_custom_gradient_is_named_by_backward_replay(spec, tmp_path):
    r = _run(spec, tmp_path, bad_grad=True)
    assert r.phase("forward").status == "pass"
    bwd = r.phase("backward")
    assert (r.first_phase, r.where) == ("backward", "1.act"), bwd.summary
    row = {o["module"]: o for o in bwd.evidence["replay"]}["1.act"]
    assert row["direction"] == "backward" and row["verdict"] == "introduced"
    assert row["local"] == pytest.approx(0.01, rel=0.05)  # the 1% of its backward


def test_an_optimizer_setting_is_named_by_optimizer_replay(spec, tmp_path):
    # Adam's eps 1e-6 instead of 1e-8 (Keras and other libraries differ): the candidate's
    # optimizer, stepped on the reference's gradients from the same state, does not reproduce
    # the reference's update, which the gradients' noise cannot explain
    r = _run(spec, tmp_path, options={"adam_eps": 1e-8}, adam_eps=1e-6)
    upd = r.phase("update")
    assert r.first_phase == "update", [(p.name, p.status, p.summary) for p in r.phases]
    rep = upd.evidence["optimizer_replay"]
    assert rep["params"] == 8 and rep["largest_rel_err"] > 1e3 * rep["largest_noise"]


def test_optimizer_replay_passes_the_same_adam(spec, tmp_path):
    r = _run(spec, tmp_path, options={"adam_eps": 1e-8})
    assert r, [(p.name, p.status, p.summary) for p in r.phases]
    assert "optimizer replay" in r.phase("update").summary


def test_a_faithful_pair_runs_no_replay_and_passes(spec, tmp_path):
    r = _run(spec, tmp_path)
    assert r, [(p.name, p.status, p.summary) for p in r.phases]
    assert "replay" not in r.phase("forward").evidence
    # the optimizer is replayed whenever the update phase is judged
    assert r.phase("update").evidence["optimizer_replay"]["params"] == 8


def test_a_module_drawing_random_numbers_is_not_replayed_and_the_comparison_stands(
        spec, tmp_path):
    # dropout draws a new mask on replay: the reference cannot reproduce its own output there,
    # so replay must not judge that call (and must not crash the workflow)
    r = _run(spec, tmp_path, options={"p": 0.5}, scale=1.001)
    assert r.first_phase == "forward"
    rows = r.phase("forward").evidence.get("replay", [])
    random_calls = [o for o in rows if o["module"] in ("1.drop", "1")]
    assert random_calls and all(o["verdict"] == "not replayed" for o in random_calls)
    assert all("random" in o["reason"] for o in random_calls)


def test_a_module_that_differs_in_a_setting_is_named_by_replay(spec, tmp_path):
    # dropout only in the candidate: the reference's dropout is the identity and reproduces
    # itself, the candidate's zeroes half of the same inputs
    r = _run(spec, tmp_path, p=0.5)
    assert (r.first_phase, r.where) == ("forward", "1.drop")
    row = {o["module"]: o for o in r.phase("forward").evidence["replay"]}["1.drop"]
    assert row["verdict"] == "introduced" and row["local"] > 0.5


KINK_SPEC = textwrap.dedent('''
    import copy

    import numpy as np
    import torch
    from torch import nn

    class Reordered(nn.Linear):
        """x @ W.T + b as ((3x) @ W.T) / 3 + b: equal in exact arithmetic, a few units in the
        last place apart in float32 -- a port that orders its arithmetic differently."""

        def forward(self, x):
            return (x * 3) @ self.weight.T / 3 + self.bias

    def _straddle(orders):
        """The nudge, in units in the last place, that puts one ReLU input on opposite sides of
        0 in the two orders (``orders(k)`` -> both values), farthest from 0."""
        best, best_m = None, -1.0
        for k in range(-64, 65):
            a, c = orders(k)
            if (a > 0) != (c > 0) and min(abs(a), abs(c)) > best_m:
                best, best_m = k, min(abs(a), abs(c))
        assert best is not None, "no nudge puts the two orders on opposite sides of 0"
        return best

    def _both(x, w, b):
        """The first layer's outputs in the two orders."""
        return x @ w.T + b, (x * 3) @ w.T / 3 + b

    def build(steps=1, reorder=False, kink_step=0):
        torch.manual_seed(0)
        model = nn.Sequential(Reordered(8, 16) if reorder else nn.Linear(8, 16), nn.ReLU(),
                              nn.Linear(16, 3))
        rng = np.random.default_rng(0)
        batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4))
                   for _ in range(steps)]
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def train_step(x, y, m=model, o=opt):
            m.train()
            o.zero_grad()
            loss = nn.functional.cross_entropy(m(torch.as_tensor(x)), torch.as_tensor(y).long())
            loss.backward()
            o.step()
            return float(loss.detach())

        def weights():  # the first layer's weights at the start of step kink_step
            if kink_step == 0:
                return model[0].weight.detach(), model[0].bias.detach()
            ahead = copy.deepcopy(model)
            train_step(*batches[0], m=ahead, o=torch.optim.SGD(ahead.parameters(), lr=0.1))
            return ahead[0].weight.detach(), ahead[0].bias.detach()

        # the ReLU input (sample i, unit j) of step kink_step whose sum the two orders round
        # most differently; its bias then moves it to within rounding of 0
        x = torch.as_tensor(batches[kink_step][0])
        w, b = weights()
        a, c = _both(x, w, torch.zeros_like(b))
        i, j = divmod(int(torch.argmax(torch.abs(a - c))), a.shape[1])
        bias = model[0].bias
        b0 = bias[j].item() - (a[i, j].item() + b[j].item())
        ulp = float(np.spacing(np.float32(abs(b0))))

        def set_bias(k):
            with torch.no_grad():
                bias[j] = float(np.float32(b0)) + k * ulp

        def orders(k):
            set_bias(k)
            a, c = _both(x, *weights())  # the whole batch: as the run computes it
            return a[i, j].item(), c[i, j].item()

        for _ in range(4):  # the step-0 update of the bias depends a little on the bias
            b0 -= orders(0)[0]
        set_bias(_straddle(orders))
        return {"framework": "torch", "model": model, "batches": batches,
                "train_step": train_step, "optimizer": opt, "lr_schedule": [0.1] * steps}
''')


def test_a_relu_mask_flipped_by_rounding_is_cleared_by_replay(tmp_path):
    # The ResNet-18 demo at batch 8 failed a faithful port this way: one ReLU input within
    # rounding noise of 0 lands on the other side in the candidate, so one element of the
    # ReLU's input gradient is zero on one side and full-size on the other (normwise ~7 %)
    # and the parameter gradients upstream carry it. The comparison calls the ReLU
    # "introduced" (its incoming gradient agrees); replay shows the candidate's ReLU computes
    # exactly the reference's gradient on the reference's tensors: no one's own difference.
    p = tmp_path / "kink_spec.py"
    p.write_text(KINK_SPEC)
    r = run_step_parity(str(p), str(p), tmp_path / "run", steps=1, cand_options={"reorder": True},
                        run_eval=False, free_running=False, noise=False)
    bwd = r.phase("backward")
    assert r, [(ph.name, ph.status, ph.summary) for ph in r.phases]
    assert bwd.evidence["verdict"] == "amplified noise (replay)"
    assert "diverges first at 1" in bwd.evidence["compare_said"]  # what replay overturned
    row = {o["module"]: o for o in bwd.evidence["replay"]}["1"]
    assert row["verdict"] == "reproduces" and row["accumulated"] > 1e-2
    assert "2 parameter gradient(s) carry it" in bwd.summary
    # a passing verdict's first screen says nothing of divergence; the evidence stays in JSON
    import io

    from netparity.report.terminal import make_console, render_terminal

    buf = io.StringIO()
    render_terminal(r, console=make_console(buf))
    assert "diverge" not in buf.getvalue().lower() and "local (replay)" not in buf.getvalue()
    assert r.to_json()["phases"][4]["evidence"]["replay"]  # step.json keeps the evidence


def test_a_relu_mask_flipped_at_a_later_step_is_cleared_by_that_steps_replay(tmp_path):
    # the same at step 1: both sides start it from the reference's state after step 0, and
    # that step's diverging modules are replayed from that state
    p = tmp_path / "kink_spec.py"
    p.write_text(KINK_SPEC)
    r = run_step_parity(str(p), str(p), tmp_path / "run", steps=2,
                        cand_options={"reorder": True}, options={"steps": 2, "kink_step": 1},
                        run_eval=False, free_running=False, noise=False)
    later = r.phase("later-steps")
    assert r, [(ph.name, ph.status, ph.summary) for ph in r.phases]
    assert "replay" not in r.phase("backward").evidence  # step 0 agrees outright
    cleared = later.evidence["cleared_by_replay"]
    assert [(c["step"], c["phase"]) for c in cleared] == [(1, "backward")]
    assert {o["module"]: o["verdict"] for o in cleared[0]["replay"]}["1"] == "reproduces"


def test_replay_leaves_the_models_weights_and_modes_as_they_were():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    m.eval()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = run_module(m, "", [("0", x, "float32")], train=True)
    assert [a for a, _ in out] == [""] and out[0][1].shape == (3, 4)
    assert not m.training and not m[1].training  # mode restored
    # train-mode BatchNorm updated its running statistics: restoring them is the caller's job,
    # which the step workflow does; the parameters themselves are untouched
    assert torch.equal(before["0.weight"], m.state_dict()["0.weight"])


def test_replay_refuses_what_tensors_cannot_rebuild():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4))
    x = np.zeros((1, 4), np.float32)
    with pytest.raises(FrameworkError, match="no submodule"):
        run_module(m, "nope", [("0", x, "float32")])
    with pytest.raises(FrameworkError, match="nested"):
        run_module(m, "0", [("0.1", x, "float32")])
    with pytest.raises(FrameworkError, match="not a tensor"):
        run_module(m, "0", [("1", x, "float32")])


def test_mindspore_cell_replay_matches_a_direct_call():
    ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")
    net = ms.nn.SequentialCell([ms.nn.Dense(4, 3), ms.nn.ReLU()])
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    out = run_module(net, "0", [("0", x, "float32")])
    np.testing.assert_array_equal(out[0][1], net[0](ms.Tensor(x)).asnumpy())


# ---- the judging half, on numbers ---------------------------------------------------------
def test_normwise_error_refuses_outputs_that_do_not_correspond():
    a = np.ones(4, np.float32)
    assert normwise_error([a], [a]) == 0.0
    assert normwise_error([a], [a * 1.01]) == pytest.approx(0.01, rel=1e-6)
    assert normwise_error([a], [np.ones(3)]) == float("inf")
    assert normwise_error([a], []) == float("inf")
    assert normwise_error([a], [np.array([1, 1, np.nan, 1])]) == float("inf")


def test_judge_scales_the_noise_to_a_coarser_candidate():
    o = ReplayOutcome("k", "m", "m", "linear", accumulated=1e-2)
    judge(o, local=1e-3, noise=1e-5, ref_dtype="float32", cand_dtype="float32")
    assert o.introduced
    # the same local error is bfloat16 rounding for a bfloat16 candidate
    judge(o, local=1e-3, noise=1e-5, ref_dtype="float32", cand_dtype="bfloat16")
    assert not o.introduced and o.verdict == "reproduces"


def test_refine_keeps_the_comparisons_answer_without_a_replayed_culprit():
    fwd = Phase("forward", status="fail", where="a", step=0, summary="a diverges first")
    o = ReplayOutcome("k", "a", "a", "linear", accumulated=1e-2)
    judge(o, local=1e-9, noise=1e-8, ref_dtype="float32", cand_dtype="float32")
    refine_forward(fwd, [o])
    assert fwd.where == "a" and fwd.status == "fail" and "replay: none of the 1" in fwd.summary
