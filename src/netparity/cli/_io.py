"""Which command-line arguments a command reads and which it writes: the one output guard.

Every subcommand declares its path arguments with :func:`add_input` and :func:`add_output`
(thin wrappers of ``ArgumentParser.add_argument`` that also record the argument's role).
:func:`netparity.cli.main` calls :func:`guard` after parsing and before the command runs (so
before any framework is imported or any script launched): every output given is checked
against every input given (:func:`netparity.outputs.check_output`: never onto or inside an
input, by path and by inode; never through a symlink; only a regular file, a folder or a new
path), two outputs may not name one file, and a trace or work folder output must be one
netparity may write into (:func:`netparity.trace.claim.check_trace_dir`). A new subcommand
inherits all of it by declaring its arguments this way; ``tests/safety/test_output_guard.py``
walks the parser and fails on an output option that is not declared.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> _ = add_input(p, "trace", kind="trace")
    >>> _ = add_output(p, "--json", stdout=True)
    >>> guard(p.parse_args(["runs/a", "--json", "runs/a/manifest.json"]))
    Traceback (most recent call last):
    ...
    netparity.errors.UsageError: runs/a/manifest.json: the output --json would be written inside the input runs/a; choose a path outside it
"""

from __future__ import annotations

import argparse
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netparity.errors import UsageError

#: kinds of input: a file, a trace directory, a file or folder (``scan`` paths), a spec (a
#: file, or a module name that is no path), a command line (its existing files are inputs)
INPUT_KINDS = ("file", "trace", "path", "spec", "command")
#: kinds of output: a file, a file or a folder (``export``), a trace directory, a work folder
#: netparity fills with traces (``owned``) and report files (``step``, ``demo``)
OUTPUT_KINDS = ("file", "file_or_dir", "trace", "workdir")


@dataclass(frozen=True)
class Role:
    """What an argument is to the guard."""

    io: str  # "input" or "output"
    kind: str
    stdout: bool = False  # output: "-" writes to stdout
    force: str | None = None  # output: dest of the flag that allows replacing what exists
    traces: tuple[str, ...] = ()  # workdir: the trace folders netparity writes in it
    files: tuple[str, ...] = ()  # workdir: the report files netparity writes in it


_ROLES: weakref.WeakKeyDictionary[argparse.Action, Role] = weakref.WeakKeyDictionary()
#: the namespace attribute naming the parser of the command parsed (set as a default by the
#: parsers that declare inputs or outputs; a positional may share ``dest`` with a subparsers
#: action, as ``run``'s ``command`` does, so the chosen parser cannot be found by its dest)
_PARSER = "_netparity_io_parser"


def add_input(p: argparse.ArgumentParser, *flags: str, kind: str = "file",
              **kwargs: Any) -> argparse.Action:
    """``p.add_argument(*flags, **kwargs)`` for a path the command reads."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"input kind must be one of {INPUT_KINDS}, not {kind!r}")
    action = p.add_argument(*flags, **kwargs)
    _ROLES[action] = Role("input", kind)
    p.set_defaults(**{_PARSER: p})
    return action


def add_output(p: argparse.ArgumentParser, *flags: str, kind: str = "file",
               stdout: bool = False, force: str | None = None, traces: tuple[str, ...] = (),
               files: tuple[str, ...] = (), **kwargs: Any) -> argparse.Action:
    """``p.add_argument(*flags, **kwargs)`` for a path the command writes.

    Args:
        kind: ``file``, ``file_or_dir``, ``trace`` or ``workdir`` (see :data:`OUTPUT_KINDS`).
        stdout: ``-`` means standard output.
        force: the dest of the option that allows replacing an existing output (``--force``,
            ``--overwrite``); without it an existing file or trace is refused up front.
        traces, files: for ``workdir``, the trace folders and files netparity writes in it.
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"output kind must be one of {OUTPUT_KINDS}, not {kind!r}")
    action = p.add_argument(*flags, **kwargs)
    _ROLES[action] = Role("output", kind, stdout, force, tuple(traces), tuple(files))
    p.set_defaults(**{_PARSER: p})
    return action


def role(action: argparse.Action) -> Role | None:
    """The role :func:`add_input` / :func:`add_output` recorded for ``action``, or None."""
    return _ROLES.get(action)


def subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:  # type: ignore[type-arg]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            yield a


def leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
           ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command's parser with its words (``("ckpt", "map")``), nested ones included."""
    subs = list(subparsers(parser))
    if not subs:
        yield prefix, parser
    for s in subs:
        for name, child in s.choices.items():
            yield from leaves(child, (*prefix, name))


def _values(v: Any) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in v] if isinstance(v, list) else [str(v)]


def _inputs(kind: str, values: list[str]) -> list[str]:
    if kind == "command":  # the files a launched command names (train.py, a config...)
        return [a for a in values if a != "--" and os.path.isfile(a)]
    if kind == "spec":  # a module name is no path
        return [a for a in values if os.path.exists(a)]
    return values


def guard(args: argparse.Namespace) -> None:
    """Refuse, before the command runs, any output argument of ``args`` that would land on,
    in or through what the command reads, on a special file, or on what netparity did not
    write (see the module docstring). One :class:`UsageError` / ``TraceError`` line."""
    from netparity.outputs import check_output

    leaf = getattr(args, _PARSER, None)
    if leaf is None:  # a command without path arguments
        return
    ins: list[str] = []
    outs: list[tuple[argparse.Action, Role, str]] = []
    for a in leaf._actions:
        r = role(a)
        if r is None:
            continue
        vals = _values(getattr(args, a.dest, None))
        if r.io == "input":
            ins += _inputs(r.kind, vals)
        else:
            outs += [(a, r, v) for v in vals if not (r.stdout and v == "-")]
    seen: dict[Path, str] = {}
    for a, r, dest in outs:
        flag = a.option_strings[-1] if a.option_strings else a.dest.upper()
        what = f"output {flag}" if a.option_strings else "output"
        if r.kind in ("trace", "workdir"):
            check_output(dest, ins, what=what, kind="dir", may_hold_inputs=r.kind == "workdir")
        else:
            check_output(dest, ins, what=what, kind=r.kind)
        key = Path(dest).resolve()
        if key in seen:
            raise UsageError(f"{dest}: named by both {seen[key]} and {flag}; give each output "
                             "its own path")
        seen[key] = flag
        force = bool(getattr(args, r.force, False)) if r.force else None
        if r.kind == "trace":
            from netparity.trace.claim import check_trace_dir

            check_trace_dir(dest, overwrite=bool(force))
        elif r.kind == "workdir":
            _check_workdir(Path(dest), r, ins, what)
        elif r.kind == "file" and force is False and os.path.lexists(dest):
            raise UsageError(f"{dest}: exists; pass {_flag(leaf, r.force)} to replace it")


def _flag(parser: argparse.ArgumentParser, dest: str | None) -> str:
    for a in parser._actions:
        if a.dest == dest and a.option_strings:
            return a.option_strings[-1]
    return f"--{dest}"


def _check_workdir(out: Path, r: Role, ins: list[str], what: str) -> None:
    """A work folder (``step -o``): each trace folder in it is one netparity may replace (a
    netparity trace, set aside until the new one is complete), each report file a regular file
    or absent, and no input lies in any of them."""
    from netparity.outputs import check_output
    from netparity.trace.claim import check_trace_dir

    for name in r.traces:
        check_output(out / name, ins, what=f"{what} trace {name}", kind="dir")
        check_trace_dir(out / name, overwrite=True)
    for name in r.files:
        check_output(out / name, ins, what=f"{what} report {name}", kind="file")
