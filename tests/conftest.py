"""Shared test set-up: framework availability and small helpers."""

from __future__ import annotations

import importlib.util
import shutil

import pytest


def has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


HAS_TORCH = has("torch")
HAS_MINDSPORE = has("mindspore")
HAS_CHROMIUM = shutil.which("chromium") is not None or shutil.which("chromium-browser") is not None

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
needs_mindspore = pytest.mark.skipif(not HAS_MINDSPORE, reason="MindSpore is not installed")
