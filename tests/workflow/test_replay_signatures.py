"""Replay across modules whose calls differ: the reference's module called the way transformers
calls its LLaMA attention (``hidden_states=`` by keyword, ``position_embeddings=(cos, sin)`` as
a tuple, the mask, and a second output, the attention weights), the candidate's as a port
writes it (one positional input; it builds the tables and the mask itself; one output).

Before the fix the reference's call could not be rebuilt ("argument 'kw.position_embeddings.0'
is nested") and the candidate could not be fed the reference's inputs, so a mistake inside the
attention was blamed on the whole model (``<root>``). Real PyTorch modules; seconds per test.
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from netparity.frameworks.base import call_arguments  # noqa: E402
from netparity.workflow.step import run_step_parity  # noqa: E402

SPEC = textwrap.dedent('''
    import numpy as np
    import torch
    from torch import nn

    T, D = 6, 8

    def tables(theta):
        inv = 1.0 / theta ** (torch.arange(0, D, 2).float() / D)
        f = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat([f, f], -1)
        return emb.cos(), emb.sin()

    def rotate(x):
        return torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)

    class RefAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(D, D, bias=False)

        def forward(self, hidden_states, position_embeddings, attention_mask):
            cos, sin = position_embeddings
            q = self.q(hidden_states)
            q = q * cos + rotate(q) * sin
            w = torch.softmax(q @ hidden_states.transpose(1, 2) + attention_mask, -1)
            return w @ hidden_states, w

    class PortAttention(nn.Module):
        def __init__(self, theta):
            super().__init__()
            self.q = nn.Linear(D, D, bias=False)
            self.cos, self.sin = tables(theta)
            self.mask = torch.triu(torch.full((T, T), -1e9), 1)

        def forward(self, x):
            q = self.q(x)
            q = q * self.cos + rotate(q) * self.sin
            return torch.softmax(q @ x.transpose(1, 2) + self.mask, -1) @ x

    class Net(nn.Module):
        def __init__(self, side, theta):
            super().__init__()
            self.inp = nn.Linear(4, D)
            self.attn = RefAttention() if side == "ref" else PortAttention(theta)
            self.out = nn.Linear(D, 3)

        def forward(self, x):
            h = self.inp(x)
            if isinstance(self.attn, RefAttention):
                mask = torch.triu(torch.full((T, T), -1e9), 1).expand(x.shape[0], T, T)
                h, _ = self.attn(hidden_states=h, position_embeddings=tables(10000.0),
                                 attention_mask=mask)
            else:
                h = self.attn(h)
            return self.out(h).mean(1)

    def build(steps, side="ref", theta=10000.0):
        torch.manual_seed(0)
        model = Net(side, float(theta))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        batches = [(rng.standard_normal((2, T, 4)).astype(np.float32), rng.integers(0, 3, 2))
                   for _ in range(steps)]

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(torch.as_tensor(x)),
                                               torch.as_tensor(y).long())
            loss.backward()
            opt.step()
            return float(loss)

        return {"framework": "torch", "model": model, "batches": batches, "optimizer": opt,
                "train_step": step}
''')


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "sig_spec.py"
    p.write_text(SPEC)
    return str(p)


def test_a_tuple_argument_is_rebuilt_as_a_tuple():
    assert call_arguments([("kw.hidden_states", "h"), ("kw.position_embeddings.0", "c"),
                           ("kw.position_embeddings.1", "s")]) == (
        [], {"hidden_states": "h", "position_embeddings": ("c", "s")})


def test_a_mistake_inside_an_attention_called_differently_is_named_there(spec, tmp_path):
    r = run_step_parity(spec, spec, tmp_path / "run", steps=1, ref_options={"side": "ref"},
                        cand_options={"side": "port", "theta": 500000.0}, run_eval=False,
                        free_running=False)
    assert (r.first_phase, r.where) == ("forward", "attn"), r.phase("forward").summary
    rows = {o["module"]: o for o in r.phase("forward").evidence["replay"]}
    assert rows["attn"]["verdict"] == "introduced"
    assert rows["attn"]["local"] > 1e-3  # the attention's own error, measured by replay


def test_the_faithful_port_called_differently_passes(spec, tmp_path):
    r = run_step_parity(spec, spec, tmp_path / "run", steps=1, ref_options={"side": "ref"},
                        cand_options={"side": "port"}, run_eval=False, free_running=False)
    assert r.first_phase is None, [(p.name, p.status, p.summary) for p in r.phases]
