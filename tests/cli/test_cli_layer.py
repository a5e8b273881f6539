"""The CLI's own contract: every listed subcommand loads (or the CLI says which does not),
piped output is not wrapped at 80 columns, --quiet everywhere long work runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import netparity.cli as cli
from netparity.cli import build_parser, main
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_a_missing_subcommand_module_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "netparity.cli.nope_cmd"))
    assert main(["--version"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "netparity.cli.nope_cmd cannot be imported" in err[0]


def test_a_module_without_register_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("netparity.cli._common",))
    assert main(["--version"]) == 2
    assert "has no register(subparsers)" in capsys.readouterr().err


def test_every_listed_subcommand_registers():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    names = set(sub.choices)  # type: ignore[arg-type]
    assert {"inspect", "export", "run", "align", "compare", "recheck", "ckpt", "msdump", "step",
            "demo"} <= names
    for cmd in ("compare", "step", "demo"):
        opts = {o for a in sub.choices[cmd]._actions for o in a.option_strings}  # type: ignore[index]
        assert "--quiet" in opts, cmd


def _trace(path: Path, scale: float) -> None:
    name = "encoder.layers.0.self_attention.query_key_value.projection"
    with TraceWriter(path, manifest={"framework": "numpy", "device": "cpu"}) as w:
        a = np.linspace(-1, 1, 64, dtype=np.float32) * scale
        w.add(Record(kind="module", module=name, native="Linear", op="linear", role="output",
                     dtype="float32", shape=a.shape, stats=compute_stats(a), event=0),
              payload=a)


def test_piped_compare_output_is_not_wrapped_at_80_columns(tmp_path):
    _trace(tmp_path / "a", 1.0)
    _trace(tmp_path / "b", 1.01)
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "netparity", "compare", str(tmp_path / "a"),
                        str(tmp_path / "b")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    first = next(line for line in p.stdout.splitlines() if line.startswith("first divergence"))
    assert "encoder.layers.0.self_attention.query_key_value.projection" in first
    assert len(first) > 80  # one line, as on a wide terminal
    assert "\x1b[" not in p.stdout  # no progress redraws, no colours in a pipe
