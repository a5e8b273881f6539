"""Test suite set-up.

Tests that need a framework skip themselves with a reason (``pytest.importorskip``) so the rest
runs without it. Markers (``slow``, ``gpu``, ``browser``...) are declared in pyproject.toml.
Area-specific fixtures live in each directory's own conftest.py; import helpers from them by
path, not as ``conftest`` (several exist, and under xdist the name is ambiguous).
"""

from __future__ import annotations

import getpass
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

# torch.compile's compiled kernels are cached across processes keyed without PyTorch's CPU
# capability: a cache filled under the native (AVX-512) kernels makes every compile under
# ATEN_CPU_CAPABILITY=default fail ("at::vec has not been declared" in a precompiled header).
# One cache per capability (set before any test imports torch; subprocesses inherit it).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_"
    f"{os.environ.get('ATEN_CPU_CAPABILITY', 'native')}"))


@contextmanager
def _kernel_loops(portable: bool) -> Iterator[None]:
    """The C kernel with its portable loops (``portable``) or its fastest ones; skips the test
    where the kernel was not built."""
    from netparity import hoststats

    kernel = hoststats._kernel
    if kernel is None:
        pytest.skip("netparity._fastvec was not built")
    before = kernel.use_avx512()
    if portable:
        kernel.use_avx512(False)
    try:
        yield
    finally:
        kernel.use_avx512(before)


@pytest.fixture(params=["kernel", "kernel-portable", "numpy"])
def cpu_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test through the one-pass C kernel of netparity.hoststats (with its AVX-512 loops
    where the CPU has them, and again with its portable loops) and through its NumPy fallback
    (the kernel runs skipped where it was not built)."""
    from netparity import hoststats

    if request.param == "numpy":
        monkeypatch.setattr(hoststats, "_kernel", None)
        yield str(request.param)
        return
    with _kernel_loops(request.param == "kernel-portable"):
        yield str(request.param)


@pytest.fixture(params=["native", "portable"])
def kernel_loops(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test of the C kernel itself with its AVX-512 loops (where the CPU has them) and
    with its portable loops; skipped where the kernel was not built."""
    with _kernel_loops(request.param == "portable"):
        yield str(request.param)
