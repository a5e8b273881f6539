"""Plumbing between `netparity step` and user specs: a spec's own directory is importable, and
the number of steps reaches ``build`` without being repeated as an option."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")

from netparity.workflow.spec import load_spec  # noqa: E402
from netparity.workflow.step import run_step_parity  # noqa: E402

SPEC = textwrap.dedent('''
    import numpy as np
    import torch
    from tiny_helper import make_model   # a module next to this spec

    def build(steps, lr=0.1, lr_from_step_2=None):
        torch.manual_seed(0)
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        rng = np.random.default_rng(0)
        batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4))
                   for _ in range(steps)]   # exactly as many as asked for

        done = []

        def train_step(x, y):
            if lr_from_step_2 is not None and len(done) == 2:
                opt.param_groups[0]["lr"] = lr_from_step_2   # the mistake, from step 2 on
            done.append(1)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(torch.as_tensor(x)),
                                                     torch.as_tensor(y).long())
            loss.backward()
            opt.step()
            return float(loss)

        return {"framework": "torch", "model": model, "batches": batches,
                "train_step": train_step, "optimizer": opt, "lr_schedule": [lr] * steps}
''')
HELPER = textwrap.dedent('''
    import torch

    def make_model():
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
''')


@pytest.fixture
def spec_file(tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "tiny_helper.py").write_text(HELPER)
    (d / "tiny_spec.py").write_text(SPEC)
    return d / "tiny_spec.py"


def test_spec_imports_a_helper_next_to_it_and_gets_the_steps(spec_file):
    spec = load_spec(str(spec_file), defaults={"steps": 4})
    assert len(spec.batches) == 4
    # an explicit option wins over the default
    assert len(load_spec(str(spec_file), defaults={"steps": 4}, steps=2).batches) == 2


def test_step_passes_its_step_count_to_the_specs(spec_file, tmp_path):
    r = run_step_parity(str(spec_file), str(spec_file), tmp_path / "run", steps=4,
                        run_eval=False, free_running=False)
    assert len(r.losses["ref"]) == 4
    assert r, [(p.name, p.status, p.summary) for p in r.phases]


def test_a_later_step_bug_is_named_at_its_step(spec_file, tmp_path):
    # the candidate's learning rate is right at step 0 and wrong from step 2 on: with every
    # step started from the reference's state, step 2 is where it shows, as a learning rate
    r = run_step_parity(str(spec_file), str(spec_file), tmp_path / "run", steps=4,
                        cand_options={"lr_from_step_2": 0.2}, run_eval=False,
                        free_running=False)
    assert r.first_phase == "later-steps", [(p.name, p.status, p.summary) for p in r.phases]
    assert r.first.step == 2 and r.first.where == "optimizer (learning rate)"
