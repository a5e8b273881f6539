"""Hostile content is one ``netparity: error:`` line and exit 2, never a traceback or a hang
(issue 29): malformed shape strings, shapes whose element count overflows, JSON nested deeper
than the interpreter can recurse (manifest, index ``extra``, saved results, mapping files,
profiler traces, checkpoint headers), manifest fields and timing rows of the wrong type."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.errors import NetparityError
from netparity.untrusted import MAX_JSON_DEPTH, ContentError, load_json, parse_shape

from .helpers import assert_one_line_error, run_cli
from .test_boundary import _unconstrained
from .test_confined_reads import make_trace

DEEP = "[" * 100_000 + "]" * 100_000


# ---- the parsers: any input is a value or a NetparityError -----------------------------------

@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(alphabet="[]0123456789,- .e", max_size=40),
                 st.lists(st.integers(-2, 2**40), max_size=70).map(json.dumps),
                 st.binary(max_size=20), st.none(), st.integers()))
def test_parse_shape_is_a_shape_or_one_error(text):
    try:
        dims = parse_shape(text)
    except NetparityError:
        return
    assert isinstance(dims, tuple) and all(type(d) is int and d >= 0 for d in dims)
    assert json.loads(text) == list(dims)


@pytest.mark.parametrize("text", ["[1,,2]", "[1,2", "[1.5]", "[-1]", "[true]", "{}", '"3"',
                                  "[2147483648,2147483648,2147483648]", "[1]" + " " * 5000,
                                  json.dumps([1] * 65), "[[1]]", "", "null"])
def test_bad_shapes(text):
    with pytest.raises(ContentError):
        parse_shape(text)


_nested = st.recursive(st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
                       lambda inner: st.lists(inner, max_size=2)
                       | st.dictionaries(st.text(alphabet='[{"\\', max_size=3), inner,
                                         max_size=2), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_nested.map(json.dumps), st.text(alphabet='[]{}",:1\\ ', max_size=60),
                 st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
                 st.integers(1, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n)))
def test_load_json_is_a_value_or_one_error(text):
    try:
        value = load_json(text, what="x")
    except NetparityError:
        assert text.count("[") + text.count("{") > MAX_JSON_DEPTH or not _valid(text)
        return
    assert value == json.loads(text)


def _valid(text):
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


_JSON = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3),
    max_leaves=30)


def _depth(v: object) -> int:
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=_JSON, chunk=st.sampled_from([1, 2, 3, 7, 1 << 22]), limit=st.integers(0, 6))
def test_the_depth_pass_is_exact_across_chunk_boundaries(value, chunk, limit):
    """The depth check reads a document in chunks (bounded memory): a string, an escape or
    a bracket run cut by a chunk boundary counts as if whole."""
    import netparity.untrusted as u

    saved = u._DEPTH_CHUNK
    u._DEPTH_CHUNK = chunk
    try:
        text = json.dumps(value)
        assert u._too_deep(text, limit) == (_depth(value) > limit)
    finally:
        u._DEPTH_CHUNK = saved


def test_brackets_inside_strings_do_not_count_as_depth():
    text = json.dumps({"name": "[" * 10_000, "esc": '\\"[[[' * 500, "k": [[1]]})
    assert load_json(text, what="x")["k"] == [[1]]
    with pytest.raises(ContentError, match="deeper than"):
        load_json(json.dumps({"name": "[" * 300}) + "[" * 300, what="x")


# ---- every command that reads the content ----------------------------------------------------

def _rows(out: Path, sql: str, *params: object) -> None:
    db = _unconstrained(out)
    db.execute(sql, params)
    db.commit()
    db.close()


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_trace(tmp_path_factory.mktemp("good") / "t", kind="module")


def _copy(good: Path, tmp_path: Path) -> Path:
    out = tmp_path / "t"
    shutil.copytree(good, out)
    return out


@pytest.mark.parametrize("shape, needle", [
    ("[1,,2]", "'[1,,2]' is not a list of non-negative integers"),
    ("[2147483648,2147483648,2147483648]", "more elements than any tensor"),
])
def test_bad_shapes_in_index_rows(good, tmp_path, shape, needle):
    out = _copy(good, tmp_path)
    _rows(out, "UPDATE records SET shape = ?", shape)
    for argv in (("inspect", str(out)), ("compare", str(out), str(good)),
                 ("compare", str(out), str(out)), ("align", str(out), str(good)),
                 ("export", str(out), "-o", str(tmp_path / "x.npz"))):
        assert_one_line_error(run_cli(*argv), needle)


def test_deep_json_in_manifest_result_and_mapping(good, tmp_path):
    out = _copy(good, tmp_path)
    (out / "manifest.json").write_text(DEEP)
    assert_one_line_error(run_cli("inspect", str(out)), "nested deeper than")
    res = tmp_path / "result.json"
    res.write_text(DEEP)
    assert_one_line_error(run_cli("recheck", str(res)), "nested deeper than")
    mp = tmp_path / "map.json"
    mp.write_text(DEEP)
    assert_one_line_error(run_cli("compare", str(good), str(good), "--mapping", str(mp)),
                          "nested deeper than")
    mpy = tmp_path / "map.yaml"
    mpy.write_text("".join("  " * i + "a:\n" for i in range(3000)))
    assert_one_line_error(run_cli("compare", str(good), str(good), "--mapping", str(mpy)),
                          "nested too deeply")
    prof = tmp_path / "x.pt.trace.json.gz"
    prof.write_bytes(gzip.compress(('{"traceEvents": ' + DEEP + "}").encode()))
    assert_one_line_error(run_cli("perf", str(prof)), "nested deeper than")
    st_file = tmp_path / "w.safetensors"
    header = DEEP.encode()
    st_file.write_bytes(len(header).to_bytes(8, "little") + header)
    assert_one_line_error(run_cli("ckpt", "show", str(st_file)))


def test_json_deeper_than_the_stack_in_an_index_extra(good, tmp_path):
    """SQLite's json_valid accepts 999 levels; Python's decoder gave up earlier."""
    out = _copy(good, tmp_path)
    _rows(out, "UPDATE records SET extra = ?", '{"a":' + "[" * 990 + "]" * 990 + "}")
    for argv in (("inspect", str(out)), ("compare", str(out), str(good))):
        assert_one_line_error(run_cli(*argv), "nested deeper than")


# ---- perf: manifest fields and timing rows -------------------------------------------------

def _timing_trace(out: Path, module: str = "fc") -> Path:
    """A trace with the records and manifest facts ``netparity.profile`` writes, made without a
    framework (the shapes of capture/timing.py's records)."""
    from netparity.trace import Record, TraceWriter

    with TraceWriter(out, manifest={"loader": {"class": "DataLoader", "num_workers": 0},
                                    "params": [["w", [4, 4]]], "param_bytes": [64],
                                    "memory": "rss_peak", "module_memory": "rss_peak"}) as w:
        for s in range(3):
            t = float(s)
            recs = [Record(kind="timing", op=ph, step=s, direction="forward", role="output",
                           extra={"t": t, "d": 0.1}) for ph in
                    ("step", "data", "forward", "backward", "optimizer", "other")]
            recs.append(Record(kind="timing", op="module", native="Linear", module=module,
                               step=s, direction="forward", role="output",
                               extra={"t": t, "d": 0.05, "self": 0.05}))
            recs.append(Record(kind="timing", op="grads", step=s, direction="backward",
                               role="output", extra={"t": t, "d": 0.01, "ready": [[0, t]]}))
            w.add_many(recs)
    return out


@pytest.mark.parametrize("where, key, value", [
    ("manifest", "loader", [1]), ("manifest", "params", [["w", "4x4"]]),
    ("manifest", "params", [[3, [4]]]), ("manifest", "param_bytes", ["64"]),
    ("manifest", "memory", {"x": 1}), ("manifest", "module_memory", 3),
    ("extra", "step", [1, 2]), ("extra", "step", {"t": "soon", "d": 0.1}),
    ("extra", "module", {"t": 0.0, "d": [1]}), ("extra", "grads", {"ready": [[0, "x"]]}),
    ("extra", "forward", {"t": 0.0, "d": 1e400}),
])
def test_perf_on_fields_of_the_wrong_type(tmp_path, where, key, value):
    out = _timing_trace(tmp_path / "t")
    assert run_cli("perf", str(out)).returncode == 0
    if where == "manifest":
        m = json.loads((out / "manifest.json").read_text())
        m[key] = value
        (out / "manifest.json").write_text(json.dumps(m))
    else:
        db = sqlite3.connect(out / "rank0" / "index.sqlite")
        db.execute("UPDATE records SET extra = ? WHERE kind = 'timing' AND op = ?",
                   (json.dumps(value).replace("Infinity", "1e400"), key))
        db.commit()
        db.close()
    assert_one_line_error(run_cli("perf", str(out)), "corrupt")


# ---- a reader that goes away: `netparity ... | head -1` ---------------------------------------

def _run_into_closed_pipe(*argv: str):
    """The command with its stdout a pipe whose reader has already gone (every write fails
    with EPIPE, what ``| head -1`` does to a longer output)."""
    import os
    import subprocess
    import sys

    from .helpers import SRC

    r, w = os.pipe()
    os.close(r)
    env = dict(os.environ, PYTHONPATH=SRC)
    try:
        return subprocess.run([sys.executable, "-m", "netparity", *argv], stdout=w,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    finally:
        os.close(w)


def _subcommands() -> list[str]:
    from netparity.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


def test_every_subcommand_into_a_closed_pipe_keeps_its_status(good, tmp_path):
    res = tmp_path / "r.json"
    assert run_cli("compare", str(good), str(good), "--json", str(res)).returncode == 0
    runs = [("--help",), *((c, "--help") for c in _subcommands()),
            ("inspect", str(good)), ("compare", str(good), str(good)),
            ("align", str(good), str(good)), ("numerics", str(good)), ("recheck", str(res)),
            ("compare", str(good), str(good), "--json", "-")]
    for argv in runs:  # each exits 0 with a reader (the traces agree; rich used to exit 1)
        p = _run_into_closed_pipe(*argv)
        assert (p.returncode, p.stderr) == (0, ""), (argv, p.returncode, p.stderr[-600:])


# ---- names that look like markup or terminal control sequences --------------------------------

#: module names a real ``nn.ModuleDict`` may hold (keys are free text)
HOSTILE = ["cls[/]", "box[red]", "esc\x1b[2Jx", "bell\x07\rmod", "[bold]b[/bold]"]


def _hostile_trace(out: Path, scale: float = 1.0) -> Path:
    import numpy as np

    from netparity.trace import Record, TraceWriter

    with TraceWriter(out) as w:
        for step in range(2):
            for i, name in enumerate(HOSTILE):
                a = (np.arange(8, dtype=np.float32) + i) * (scale if i == 1 else 1.0)
                w.add(Record(kind="module", op="Linear", native=name + "Cls", module=name,
                             step=step, dtype="float32", shape=(8,)), payload=a)
                w.add(Record(kind="param", module=name + ".weight", role="param",
                             direction="update", step=step, dtype="float32", shape=(4,)),
                      payload=np.full(4, step + 1.0, np.float32))
            w.add(Record(kind="loss", op="loss", step=step, dtype="float32", shape=()),
                  payload=np.float32(1.0 + step))
    return out


def _hostile_op_trace(out: Path) -> Path:
    """Op calls at the hostile module names, one computing in float16 in a float32 run."""
    import numpy as np

    from netparity.trace import Record, TraceWriter

    with TraceWriter(out, manifest={"framework": "torch"}) as w:
        for i, name in enumerate(HOSTILE):
            dt = "float16" if i == 1 else "float32"
            x = np.linspace(-1, 1, 8).astype(dt)
            ev = w.next_event()
            for role, v in (("input", x), ("output", np.maximum(x, 0))):
                w.add(Record(kind="op", op="relu", native="aten.relu.default", module=name,
                             role=role, arg="0" if role == "input" else "", dtype=dt,
                             shape=(8,), event=ev), payload=v)
    return out


def _cli_out(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from netparity.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse: a bad argument or --help
            rc = int(e.code or 0)
    return rc, out.getvalue(), err.getvalue()


#: subcommands that print no text read from a file, or need a framework run (their output
#: still goes through the one console: test_stdout_goes_through_the_console)
NOT_RENDERED = {"run": "runs a script", "step": "runs two frameworks",
                "bisect": "runs two specs",
                "demo": "runs two frameworks", "msdump": "needs a MindSpore dump"}


def test_every_subcommand_prints_hostile_names_as_text(tmp_path):
    import numpy as np

    from netparity.ckpt import save_checkpoint

    d = tmp_path / "d[red]"  # paths are printed too
    d.mkdir()
    a = _hostile_trace(d / "a")
    b = _hostile_trace(d / "b", scale=2.0)
    res = tmp_path / "r.json"
    ck = tmp_path / "w.npz"
    save_checkpoint({n + ".weight": np.ones(3, np.float32) for n in HOSTILE}, ck)
    ck2 = tmp_path / "w2.npz"
    save_checkpoint({n + ".weight": np.full(3, 2, np.float32) for n in HOSTILE}, ck2)
    ck3 = tmp_path / "w3.npz"  # other names: map lists them
    save_checkpoint({"model." + n + ".kernel": np.ones(3, np.float32) for n in HOSTILE}, ck3)
    src = tmp_path / "m[red]x\x1b[2J.py"
    src.write_text("import torch\nm = torch.nn.Linear(2, 2)\n")
    perf = _timing_trace(tmp_path / "p", module=HOSTILE[0])
    runs = {
        "inspect": [("inspect", str(a))],
        "compare": [("compare", str(a), str(b), "--json", str(res)),
                    ("compare", str(a), str(b), "-q")],
        "align": [("align", str(a), str(b))],
        "recheck": [("recheck", str(res))],
        "numerics": [("numerics", str(a))],
        "perf": [("perf", str(perf))],
        "ckpt": [("ckpt", "show", str(ck)), ("ckpt", "map", str(ck), str(ck3)),
                 ("ckpt", "diff", str(ck), str(ck2))],
        "scan": [("scan", str(src), "--no-verify", "--detail")],  # (lines: the roll-up names APIs)
        "export": [("export", str(a), "-o", str(tmp_path / "o[red]\x1b[2J.npz"))],
        "precision": [("precision", str(_hostile_op_trace(d / "ops")))],
        "view": [("view", str(a), str(b), "-o", str(tmp_path / "v[red]\x1b[2J.html"))],
    }
    assert set(runs) | set(NOT_RENDERED) == set(_subcommands())
    for argvs in runs.values():
        for argv in argvs:
            rc, out, err = _cli_out(*argv)
            assert rc in (0, 1) and not err.strip(), (argv, rc, err)
            assert "\x1b" not in out and "\x07" not in out and "\r" not in out, (argv, out)
            shown = [n for n in ("cls[/]", "box[red]", "[bold]b[/bold]", "esc\\x1b[2Jx",
                                 "[red]") if n in out]
            assert shown, (argv, out[-2000:])


def test_a_5mb_module_name_is_shortened_on_the_terminal(tmp_path):
    out = make_trace(tmp_path / "t", kind="module")
    _rows(out, "UPDATE records SET module = ?", "m" * 5_000_000)
    rc, text, err = _cli_out("numerics", str(out))  # (its tables name modules)
    assert rc == 0 and not err, err
    # (the name is folded in its table column: the marker may be split across lines)
    assert text.count("m") < 2000 and len(text) < 100_000, len(text)
    from netparity.cli import one_line

    assert len(one_line(ValueError(f"no module {'m' * 5_000_000!r}\n"))) < 1100  # errors too


def test_stdout_goes_through_the_console():
    """No command writes to stdout but through :func:`netparity.cli._common.say` or the
    console of :func:`netparity.report.terminal.make_console` (which escapes every string):
    no bare ``print``, no other rich ``Console``, no markup."""
    import ast

    import netparity

    pkg = Path(netparity.__file__).parent
    bad = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        if rel.startswith(("examples/", "frameworks/")):  # scripts' own output and launchers
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                    f, ast.Attribute) else ""
                kws = {k.arg for k in node.keywords}
                if name == "print" and isinstance(f, ast.Name) and "file" not in kws:
                    bad.append(f"{rel}:{node.lineno}: print to stdout")
                if name == "Console" and rel != "report/terminal.py":
                    bad.append(f"{rel}:{node.lineno}: a console of its own")
            if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
                bad.append(f"{rel}:{node.lineno}: rich markup")
    assert not bad, bad


# ---- numeric options: finite and in range -----------------------------------------------------

def _numeric_options():
    """(subcommand path, option, its type) for every numeric option of every subcommand."""
    import argparse

    from netparity.cli import build_parser

    out = []

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, (*path, name))
            elif a.option_strings and a.type not in (None, str) and not a.choices:
                out.append((path, a.option_strings[-1], a.type))  # (choices: a range)
    walk(build_parser(), ())
    return out


def test_every_numeric_option_refuses_nan_inf_and_negatives(tmp_path):
    from netparity.cli._common import Number

    opts = _numeric_options()
    assert len(opts) >= 20
    assert not [(p, o) for p, o, t in opts if t in (int, float)], \
        "numeric options take their type from netparity.cli._common.Number"
    floats = [(p, o) for p, o, t in opts if isinstance(t, Number) and t.kind is float]
    assert (("numerics",), "--factor") in floats and (("compare",), "--rtol") in floats
    for path, opt, t in opts:
        if not isinstance(t, Number):
            continue
        for bad in ("nan", "inf", "-inf", "-1", "1e999", "x"):
            rc, out, err = _cli_out(*path, opt, bad, "--help")
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert rc == 2 and not out and len(lines) == 1, (path, opt, bad, rc, err, out[:200])
            assert lines[0].startswith("netparity: error: ") and opt in lines[0], lines


def test_factor_nan_no_longer_hides_an_explosion(tmp_path):
    log = tmp_path / "loss.txt"
    log.write_text("".join(f"step {i} loss: {v}\n" for i, v in enumerate([2, 1.9, 1.8, 90])))
    out = _hostile_trace(tmp_path / "t")
    assert _cli_out("numerics", str(out), "--loss", str(log))[0] == 1
    rc, _, err = _cli_out("numerics", str(out), "--loss", str(log), "--factor", "nan")
    assert rc == 2 and "--factor" in err and "finite" in err, err


# ---- scan: special files and deeply nested source ---------------------------------------------

def test_scan_of_a_fifo_a_device_and_a_deep_expression(tmp_path):
    import os

    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    deep = tmp_path / "gen.py"
    deep.write_text("x = " + " + ".join(["1"] * 20_000) + "\n")
    shallow = tmp_path / "ok.py"
    shallow.write_text("import torch\ny = " + " + ".join(["1"] * 300) + "\n")
    for argv, needle in ((("scan", str(fifo), "--no-verify"), "not a regular file"),
                         (("scan", "/dev/zero", "--no-verify"), "not a regular file"),
                         (("scan", str(deep), "--no-verify"), "nested too deeply")):
        assert_one_line_error(run_cli(*argv, timeout=60), needle)
    assert run_cli("scan", str(shallow), "--no-verify", timeout=60).returncode == 0


# ---- profiler traces: events of the wrong type --------------------------------------------------

def _kineto(events):
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 100,
         "tid": 1, "pid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50, "tid": 1,
         "pid": 1, "args": {"Input type": ["float", "float"]}}, *events]}


@pytest.mark.parametrize("bad", [
    {"dur": "x"}, {"dur": [1]}, {"dur": -5}, {"ts": "soon"}, {"ts": None}, {"name": 3},
    {"args": [1, 2]}, {"tid": [1]}, {"cat": {"a": 1}},
])
def test_profiler_events_of_the_wrong_type(tmp_path, bad):
    good = tmp_path / "good.pt.trace.json"
    good.write_text(json.dumps(_kineto([])))
    assert run_cli("perf", str(good)).returncode == 0
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 20, "dur": 5, "tid": 1,
          "pid": 1, **bad}
    p = tmp_path / "x.pt.trace.json"
    p.write_text(json.dumps(_kineto([ev])))
    assert_one_line_error(run_cli("perf", str(p)), "event 2", "damaged profiler trace")


@pytest.mark.parametrize("shape, needle", [
    ([2**32, 2**32], "more elements than any tensor"), ([-1, -4], "non-negative"),
    (["x"], "non-negative"), ([1.5], "non-negative"), ("[4]", "non-negative"),
])
def test_safetensors_header_shapes(tmp_path, shape, needle):
    h = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}}).encode()
    p = tmp_path / "w.safetensors"
    p.write_bytes(len(h).to_bytes(8, "little") + h + b"\0" * 16)
    assert_one_line_error(run_cli("ckpt", "show", str(p)), "tensor 'w': shape", needle)


def test_progress_stages_with_hostile_names_on_a_terminal():
    import io

    from netparity.report.progress import RichProgress
    from netparity.report.terminal import make_console

    buf = io.StringIO()
    bar = RichProgress(make_console(buf, force_terminal=True))
    for name in HOSTILE:
        bar.stage(f"compare {name}", total=2)
        bar.advance(2)
    bar.done()
    out = buf.getvalue()
    assert "\x1b[2J" not in out and "\x07" not in out and "cls[/]" in out and "box[red]" in out
