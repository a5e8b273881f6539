"""seed_everything makes Python, NumPy and the frameworks present repeatable."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest

from netparity import seed_everything

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="PyTorch is not installed")
needs_mindspore = pytest.mark.skipif(importlib.util.find_spec("mindspore") is None,
                                     reason="MindSpore is not installed")


def test_python_numpy_repeatable():
    seed_everything(11)
    a = (random.random(), np.random.rand())
    seed_everything(11)
    assert a == (random.random(), np.random.rand())


@needs_torch
def test_torch_seeded_and_reported():
    import torch

    done = seed_everything(5, frameworks=["torch"])
    x = torch.randn(4)
    seed_everything(5)
    assert torch.equal(x, torch.randn(4))
    assert done["torch"]["manual_seed"] == 5 and done["torch"]["deterministic_algorithms"]
    torch.use_deterministic_algorithms(False)


@needs_mindspore
def test_mindspore_seeded_and_repeatable():
    import mindspore as ms
    from mindspore import nn, ops

    done = seed_everything(9, frameworks=["mindspore"], deterministic=False)
    assert done["mindspore"]["set_seed"] == 9 and ms.get_seed() == 9
    a = ops.standard_normal((3,)).asnumpy()
    w1 = nn.Dense(3, 2).weight.asnumpy()
    seed_everything(9, deterministic=False)
    b = ops.standard_normal((3,)).asnumpy()
    w2 = nn.Dense(3, 2).weight.asnumpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(w1, w2)
