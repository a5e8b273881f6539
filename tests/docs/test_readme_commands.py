"""Every command in the README runs, as a newcomer pastes it, and prints what the README says.

The README's ``bash`` blocks are run in order in a scratch folder that holds the repository's
``examples/`` and ``src/`` (so the relative paths resolve and nothing is written into the
checkout); ``.venv/bin/netparity`` is this interpreter's netparity, and ``python`` on PATH is
this interpreter. Each command must exit 0 or 1 (a verdict), never 2 or with a traceback. The
lines of a plain block right after a ``bash`` block that carry a verdict (``PASS``/``FAIL``,
``first divergence``, ``netparity: stopped``) must appear in what that block's commands printed
(``…`` in such a line stands for figures that vary with the machine).
The ``python`` block runs with the quickstart script's model, data and optimizer defined.

Declared substitutions (the only ones): ``make demo``/``make test`` are not run here (``make
test`` is this run; ``make demo`` is ``netparity demo``, run below); ``netparity demo`` runs at
a reduced size (ResNet-50 at 32 px, batch 2, 1 step: ~25 s instead of ~100 s).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mindspore")

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEMO_SMALL = ["--depth", "50", "--image-size", "32", "--batch-size", "2", "--steps", "1"]
VERDICT = re.compile(r"^(PASS|FAIL|WARN|INCOMPLETE|first divergence|netparity: stopped)")


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def commands(body: str) -> list[str]:
    """The shell commands of a block: continuations joined, comments dropped."""
    out: list[str] = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def argv_for(cmd: str) -> list[str] | None:
    words = shlex.split(cmd)
    if words[0] == "make":
        return None  # see the module docstring
    assert words[0] == ".venv/bin/netparity", f"README command not run by this test: {cmd}"
    argv = [sys.executable, "-m", "netparity", *words[1:]]
    if words[1] == "demo" and "--list-bugs" not in words:
        argv += DEMO_SMALL + ["-o", "netparity-demo", "-q"]
    return argv


def _norm(s: str) -> str:
    return " ".join(s.split())


PRELUDE = """
import sys, torch
sys.path.insert(0, "examples/quickstart")
from train import Net
torch.manual_seed(0)
model = Net(1e-5)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = torch.nn.CrossEntropyLoss()
loader = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))) for _ in range(2)]
"""


@pytest.mark.slow
def test_every_readme_command_runs_and_prints_what_the_readme_shows(tmp_path: Path) -> None:
    for name in ("examples", "src"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    seen: list[str] = []
    printed = ""
    last_lang = ""
    ran = 0
    for lang, body in blocks(README.read_text()):
        if lang == "bash":
            printed = ""
            for cmd in commands(body):
                argv = argv_for(cmd)
                if argv is None:
                    continue
                p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=600)
                assert p.returncode in (0, 1) and "Traceback" not in p.stderr, \
                    (cmd, p.returncode, p.stderr[-3000:])
                printed += p.stdout + p.stderr
                seen.append(cmd)
                ran += 1
        elif lang == "python":
            p = subprocess.run([sys.executable, "-c", PRELUDE + body], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-3000:]
            assert (tmp_path / "runs" / "mine" / "manifest.json").is_file()
            ran += 1
        elif lang == "" and last_lang == "bash":
            claims = [ln for ln in body.splitlines() if VERDICT.match(ln.strip())]
            for claim in claims:  # "…" stands for figures that vary with the machine
                pattern = ".*?".join(re.escape(_norm(part)) for part in claim.split("…"))
                assert re.search(pattern, _norm(printed)), (claim, printed[-3000:])
        last_lang = lang
    # every walk-through ran: demo, ckpt, step, run/compare, numerics, perf, scan, the API
    assert ran >= 15, seen
    for sub in ("demo", "ckpt map", "ckpt diff", "step", "run -o", "compare", "view",
                "numerics", "perf", "scan", "precision", "bisect"):
        assert any(f"netparity {sub}" in c for c in seen), (sub, seen)
