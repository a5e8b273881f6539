"""Outputs never land on inputs, for every command (issue 29: ``step -o OUT`` removed a user's
``OUT/ref`` holding a ``manifest.json`` of their own; ``inspect --json T/manifest.json``
destroyed the trace; ``run -o`` into a folder of user files started the script and killed it at
its first forward; ``msdump config -o`` hung on a FIFO; ``export -o DIR --force`` was refused).

The matrix test takes the commands and their output options from the parser itself
(:mod:`netparity.cli._io`): a new command or option is covered without editing this file, and
an output option that is not declared fails :func:`test_every_path_argument_is_declared`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from netparity.cli import build_parser, main
from netparity.cli._io import leaves, role
from netparity.trace import Record, TraceWriter

from .helpers import SRC, assert_one_line_error, run_cli, snapshot

#: option names and help words that say "this argument is written"
OUTPUT_FLAGS = {"-o", "--out", "--output", "--json", "--csv", "--html", "--chrome",
                "--emit-mapping", "--dst", "--save", "--report"}
WRITES = re.compile(r"\b(write|writes|written|save|saves|saved to)\b", re.I)
PATH_METAVARS = {"FILE", "TRACE", "DIR", "PATH", "OUT"}


def undeclared(parser: argparse.ArgumentParser) -> list[str]:
    """Path arguments of any command that are not declared with add_input/add_output: every
    positional, any option that looks like an output (its name or its help) or a path."""
    bad = []
    for words, leaf in leaves(parser):
        for a in leaf._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or \
                    a.nargs == 0 or role(a) is not None:
                continue
            looks = (not a.option_strings or OUTPUT_FLAGS & set(a.option_strings)
                     or WRITES.search(a.help or "") or a.metavar in PATH_METAVARS
                     or a.dest in ("dst", "out", "output"))
            if looks:
                bad.append(f"{' '.join(words)} {'/'.join(a.option_strings) or a.dest}")
    return bad


def test_every_path_argument_is_declared():
    assert undeclared(build_parser()) == []


def test_the_parser_walk_catches_an_undeclared_output():
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    new = sub.add_parser("newcmd")
    new.add_argument("--html", help="an HTML page")
    new.add_argument("--summary", metavar="FILE", help="also write a summary")
    assert undeclared(p) == ["newcmd --html", "newcmd --summary"]


def make_trace(out: Path) -> Path:
    with TraceWriter(out) as w:
        w.add(Record(kind="custom", op="x", call=0, dtype="float32", shape=(4,)),
              payload=np.arange(4, dtype=np.float32))
    return out


def _inputs(tmp: Path, leaf: argparse.ArgumentParser) -> dict[str, list[str]]:
    """A small real input for every input argument of ``leaf`` (each its own path)."""
    vals: dict[str, list[str]] = {}
    for a in leaf._actions:
        r = role(a)
        if r is None or r.io != "input":
            continue
        name = f"in_{a.dest}"
        if r.kind == "trace":
            p = make_trace(tmp / name)
        elif r.kind == "spec":
            p = tmp / f"{name}.py"
            p.write_text("def build(**options):\n    raise SystemExit('not run')\n")
        else:
            p = tmp / f"{name}.json"
            p.write_text("{}\n")
        vals[a.dest] = ["python", str(p)] if r.kind == "command" else [str(p)]
    return vals


def _argv(words: tuple[str, ...], leaf: argparse.ArgumentParser, inputs: dict[str, list[str]],
          target: argparse.Action, dest: str, tmp: Path) -> list[str]:
    pos: list[str] = []
    opts: list[str] = []
    tail: list[str] = []  # REMAINDER arguments come last
    for a in leaf._actions:
        r = role(a)
        if a is target:
            vals = [dest]
        elif r is not None and r.io == "input":
            vals = inputs[a.dest]
        elif r is not None:  # another output: a fresh path, unless required it is left out
            if not (a.required or not a.option_strings):
                continue
            vals = [str(tmp / f"other_{a.dest}")]
        elif a.required:  # e.g. msdump config --dir
            vals = [str(tmp / f"value_{a.dest}")]
        else:
            continue
        if a.nargs == argparse.REMAINDER:
            tail += ([a.option_strings[0]] if a.option_strings else ["--"]) + vals
        elif a.option_strings:
            opts += [a.option_strings[0], *vals]
        else:
            pos += vals
    return [*words, *pos, *opts, *tail]


def _targets(tmp: Path, leaf: argparse.ArgumentParser, inputs: dict[str, list[str]]
             ) -> list[str]:
    out = ["/dev/null", str(tmp / "fifo")]
    for a in leaf._actions:
        r = role(a)
        if r is None or r.io != "input":
            continue
        p = Path(inputs[a.dest][-1])
        link = tmp / f"link_to_{a.dest}"
        link.symlink_to(p)
        out += [str(p), str(link)]
        if r.kind == "trace":
            out += [str(p / "manifest.json"), str(p / "rank0" / "index.sqlite"),
                    str(link / "manifest.json")]
    return out


def _commands() -> list[tuple[tuple[str, ...], str]]:
    return [(words, (a.option_strings or [a.dest])[-1])
            for words, leaf in leaves(build_parser()) for a in leaf._actions
            if (r := role(a)) is not None and r.io == "output"]


@pytest.mark.parametrize("words, flag", _commands(), ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else v)
def test_an_output_onto_an_input_a_special_file_or_a_link_is_refused_before_any_work(
        tmp_path, monkeypatch, capsys, words, flag):
    parser = build_parser()
    leaf = dict(leaves(parser))[words]
    target = next(a for a in leaf._actions if (a.option_strings or [a.dest])[-1] == flag)
    ran: list[tuple[str, ...]] = []
    for _, p in leaves(parser):  # a command the guard lets through must not do anything
        p.set_defaults(func=lambda args, w=words: ran.append(w) or 0)
    monkeypatch.setattr("netparity.cli.build_parser", lambda: parser)
    inputs = _inputs(tmp_path, leaf)
    os.mkfifo(tmp_path / "fifo")
    targets = _targets(tmp_path, leaf, inputs)
    before = snapshot(tmp_path)
    for dest in targets:
        argv = _argv(words, leaf, inputs, target, dest, tmp_path)
        rc = main(argv)
        err = capsys.readouterr().err
        assert_one_line_error(subprocess.CompletedProcess(argv, rc, "", err))
        assert not ran, (argv, err)
    assert snapshot(tmp_path) == before
    assert stat.S_ISFIFO((tmp_path / "fifo").lstat().st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_the_guard_runs_before_a_framework_is_imported_or_a_script_started(tmp_path):
    # one child process, several refused commands, then: was torch or MindSpore imported?
    spec = tmp_path / "spec.py"
    spec.write_text("raise SystemExit('imported')\n")
    (tmp_path / "out" / "ref").mkdir(parents=True)
    (tmp_path / "out" / "ref" / "manifest.json").write_text("{}")
    script = tmp_path / "train.py"
    script.write_text("open('STARTED', 'w').close()\n")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    code = f"""
import sys
from netparity.cli import main
rcs = [main(a) for a in (
    ["step", {str(spec)!r}, {str(spec)!r}, "-o", {str(tmp_path / "out")!r}],
    ["demo", "-o", "/dev/null"],
    ["run", "-o", {str(tmp_path / "user")!r}, "--", sys.executable, {str(script)!r}],
    ["ckpt", "convert", {str(spec)!r}, {str(spec)!r}],
)]
print(rcs, [m for m in ("torch", "mindspore") if m in sys.modules])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert p.stdout.strip() == "[2, 2, 2, 2] []", (p.stdout, p.stderr)
    assert not (tmp_path / "STARTED").exists()


def test_step_never_removes_a_user_folder_holding_a_manifest(tmp_path):
    # the report's reproduction: OUT/ref/manifest.json is any JSON, the specs do not exist
    out = tmp_path / "out"
    (out / "ref" / "data").mkdir(parents=True)
    (out / "ref" / "data" / "x.csv").write_text("1,2\n")
    (out / "ref" / "manifest.json").write_text("{}")
    (out / "cand").mkdir()
    (out / "cand" / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    before = snapshot(tmp_path)
    p = run_cli("step", "missing_a.py", "missing_b.py", "-o", str(out), cwd=tmp_path)
    assert_one_line_error(p, "did not write")
    (out / "ref" / "data" / "x.csv").unlink()  # only another tool's manifest.json is left
    (out / "ref" / "data").rmdir()
    p = run_cli("step", "missing_a.py", "missing_b.py", "-o", str(out), cwd=tmp_path)
    assert_one_line_error(p, "not a netparity manifest")
    (out / "ref" / "data").mkdir()
    (out / "ref" / "data" / "x.csv").write_text("1,2\n")
    assert snapshot(tmp_path) == before


def test_step_with_a_missing_spec_leaves_an_old_trace_in_place(tmp_path):
    out = tmp_path / "out"
    for name in ("ref", "cand"):
        make_trace(out / name)
    before = snapshot(out)
    p = run_cli("step", "missing_a.py", "missing_b.py", "-o", str(out), cwd=tmp_path)
    assert_one_line_error(p)
    assert snapshot(out) == before


def test_run_into_a_folder_of_user_files_is_refused_before_the_script_starts(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("open('STARTED', 'w').close()\n")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    make_trace(tmp_path / "old")
    before = snapshot(tmp_path)
    for out, needle in (("user", "did not write (notes.txt)"), ("old", "--overwrite"),
                        (".", "holds the input"), ("train.py", "not a directory")):
        p = run_cli("run", "-o", out, "--", sys.executable, "train.py", cwd=tmp_path)
        assert_one_line_error(p, needle)
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "STARTED").exists()


def test_msdump_config_refuses_a_fifo_without_hanging_and_writes_atomically(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    p = run_cli("msdump", "config", "-o", str(tmp_path / "fifo"), "--dir", "d", timeout=60)
    assert_one_line_error(p, "special file")
    (tmp_path / "real.json").write_text("mine")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    p = run_cli("msdump", "config", "-o", str(tmp_path / "link.json"), "--dir", "d")
    assert_one_line_error(p, "symbolic link")
    assert (tmp_path / "real.json").read_text() == "mine"
    p = run_cli("msdump", "config", "-o", str(tmp_path / "cfg.json"), "--dir", "d")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["cfg.json", "fifo", "link.json", "real.json"]


def test_export_into_an_existing_folder_with_force_and_a_new_folder_atomically(tmp_path):
    t = make_trace(tmp_path / "t")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "mine.txt").write_text("mine")
    p = run_cli("export", str(t), "-o", str(tmp_path / "dst"))
    assert_one_line_error(p, "--force")
    p = run_cli("export", str(t), "-o", str(tmp_path / "dst"), "--force")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path / "dst")) == ["0.0.custom.x.forward.output.npy",
                                                    "mine.txt"]
    p = run_cli("export", str(t), "-o", str(tmp_path / "new"))
    assert p.returncode == 0, p.stderr
    # built in a hidden sibling and renamed into place: no temporary left beside it
    assert sorted(os.listdir(tmp_path)) == ["dst", "new", "t"]


TINY_SPEC = '''
import numpy as np
import torch

def build(steps, fail_at=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 4)).astype(np.float32), rng.integers(0, 3, 2))
               for _ in range(steps)]
    done = []

    def train_step(x, y):
        if len(done) == (-1 if fail_at is None else int(fail_at)):
            raise RuntimeError("the candidate crashed mid-run")
        done.append(1)
        out = model(torch.as_tensor(x))
        loss = (out ** 2).mean() + 0 * float(y[0])
        opt.zero_grad(); loss.backward(); opt.step()
        return loss.item()

    return dict(framework="torch", model=model, batches=batches, train_step=train_step,
                optimizer=opt)
'''


def test_step_keeps_an_old_trace_until_the_new_one_is_complete(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed")
    from netparity.errors import UsageError
    from netparity.trace.claim import ASIDE_PREFIX
    from netparity.workflow.step import run_step_parity

    spec = tmp_path / "tiny_spec.py"
    spec.write_text(TINY_SPEC)
    out = tmp_path / "out"
    kw = {"steps": 2, "noise": False, "free_running": False, "run_eval": False}
    run_step_parity(str(spec), str(spec), out, **kw)
    old_cand = snapshot(out / "cand")
    with pytest.raises(UsageError, match="crashed mid-run"):
        run_step_parity(str(spec), str(spec), out, cand_options={"fail_at": 1}, **kw)
    # the candidate's capture died at step 1: its old trace is still there, whole, set aside
    # in the folder (never deleted before the new one was complete)
    aside = [p for p in (out / "cand").iterdir() if p.name.startswith(ASIDE_PREFIX)]
    assert len(aside) == 1
    assert snapshot(aside[0]) == {k: v for k, v in old_cand.items()
                                  if not k.startswith(("rank0/index.sqlite-", "."))}
