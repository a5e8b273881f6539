"""``netparity ckpt {show,map,convert,diff}``: checkpoints across frameworks.

Exit status: 0 success / equal, 1 ``diff`` found differences (or ``map``/``convert`` left
parameters unmatched), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from netparity.cli._common import COUNT, TOLERANCE
from netparity.cli._io import add_input, add_output


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ckpt", help="show, map, convert and diff checkpoints",
                              description=__doc__)
    sub = p.add_subparsers(dest="ckpt_command", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    s = sub.add_parser("show", help="names, shapes, dtypes and counts of a checkpoint")
    add_input(s, "file")
    s.add_argument("--limit", type=COUNT, default=200, help="rows to print (default 200)")
    s.set_defaults(func=run_show)

    m = sub.add_parser("map", help="match parameter names between two checkpoints")
    add_input(m, "ref")
    add_input(m, "cand")
    add_output(m, "-o", "--output", help="write the mapping file (JSON {\"params\": ...})")
    add_input(m, "--mapping", help="start from this mapping file")
    add_output(m, "--json", stdout=True, help="write the full result as JSON ('-' = stdout)")
    m.set_defaults(func=run_map)

    c = sub.add_parser("convert", help="convert a checkpoint to the other framework")
    add_input(c, "src")
    add_output(c, "dst", force="force",
               help="output; suffix picks format and naming (.ckpt, .pt, ...)")
    add_input(c, "--mapping", help="mapping file (YAML/JSON)")
    add_input(c, "--template", help="checkpoint of the target side to map names against")
    c.add_argument("--target", choices=("mindspore", "torch"), help="naming to convert to")
    add_output(c, "--json", stdout=True, help="write the report as JSON ('-' = stdout)")
    c.add_argument("-f", "--force", action="store_true",
                   help="replace an existing DST (without it an existing file is refused); "
                        "the file is written atomically either way")
    c.set_defaults(func=run_convert)

    d = sub.add_parser("diff", help="compare two checkpoints parameter by parameter")
    add_input(d, "a", help="reference checkpoint")
    add_input(d, "b", help="candidate checkpoint")
    add_input(d, "--mapping", help="mapping file (YAML/JSON)")
    d.add_argument("--rtol", type=TOLERANCE, default=None, help="relative tolerance (1e-5)")
    d.add_argument("--atol", type=TOLERANCE, default=None, help="absolute tolerance (1e-8)")
    add_output(d, "--json", stdout=True, help="write the result as JSON ('-' = stdout)")
    d.add_argument("--all", action="store_true", help="list matching parameters too")
    d.set_defaults(func=run_diff)


def _console() -> Any:
    from netparity.report.terminal import make_console

    return make_console()


def _table(*cols: str) -> Any:
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for c in cols:
        t.add_column(c, overflow="fold")
    return t


def _shape(s: Any) -> str:
    return str(tuple(int(d) for d in s))


def _write_json(path: str | None, data: Any) -> None:
    if path:
        from netparity.report.json_report import write_json

        write_json(data, path)


def run_show(args: argparse.Namespace) -> int:
    from netparity.ckpt import load_checkpoint

    ck = load_checkpoint(args.file)
    con = _console()
    t = _table("name", "shape", "dtype", "elements")
    for i, (k, v) in enumerate(ck.items()):
        if i >= args.limit:
            t.add_row(f"... {len(ck) - args.limit} more", "", "", "")
            break
        t.add_row(k, _shape(v.shape), ck.dtype(k), f"{v.size:,}")
    con.print(t)
    n = sum(v.size for v in ck.values())
    nbytes = sum(v.nbytes for v in ck.values())
    con.print(f"{ck.format}: {len(ck)} tensors, {n:,} elements, {nbytes / 2**20:.1f} MiB"
              + (f" (from key {ck.source_key!r})" if ck.source_key else ""))
    for note in ck.notes:
        con.print(f"note: {note}")
    return 0


def run_map(args: argparse.Namespace) -> int:
    from netparity.ckpt import map_names

    nm = map_names(args.ref, args.cand, mapping=args.mapping)
    con = _console()
    t = _table("reference", "candidate", "how", "shapes")
    for p in nm.pairs:
        if p.how == "exact" and p.shape_ok:
            continue  # identical names are the boring majority; counted below
        shapes = _shape(p.ref_shape) if tuple(p.ref_shape) == tuple(p.cand_shape) else (
            f"{_shape(p.ref_shape)} -> {_shape(p.cand_shape)}"
            + ("" if p.shape_ok else " MISMATCH"))
        t.add_row(p.ref, p.cand, p.how, shapes)
    if t.row_count:
        con.print(t)
    _print_leftovers(con, nm.unmatched_ref, nm.unmatched_cand, nm.ambiguous)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(nm.counts().items()))
    con.print(f"{len(nm.pairs)} matched ({counts or 'none'}), {len(nm.unmatched_ref)} + "
              f"{len(nm.unmatched_cand)} unmatched, {len(nm.ambiguous)} ambiguous")
    for note in nm.notes:
        con.print(f"note: {note}")
    if args.output:
        nm.save(args.output)
        con.print(f"mapping written to {args.output}")
    _write_json(args.json, nm.to_json())
    return 0 if nm else 1


def _print_leftovers(con: Any, ur: list[str], uc: list[str], amb: dict[str, list[str]]) -> None:
    if amb:
        t = _table("ambiguous reference", "candidates")
        for r, cs in amb.items():
            t.add_row(r, ", ".join(cs))
        con.print(t)
    if ur or uc:
        t = _table("unmatched reference", "unmatched candidate")
        for i in range(max(len(ur), len(uc))):
            t.add_row(ur[i] if i < len(ur) else "", uc[i] if i < len(uc) else "")
        con.print(t)


def run_convert(args: argparse.Namespace) -> int:
    from rich.text import Text

    from netparity.ckpt import convert

    rep = convert(args.src, args.dst, mapping=args.mapping, template=args.template,
                  target=args.target, overwrite=args.force)
    con = _console()
    renamed = {k: v for k, v in rep.names.items() if k != v}
    if renamed:
        t = _table("source", "written as", "how")
        for k, v in renamed.items():
            t.add_row(k, v, rep.how.get(k, ""))
        con.print(t)
    for k, (a, b) in rep.reshaped.items():
        con.print(f"reshaped {k}: {_shape(a)} -> {_shape(b)}")
    for k, why in {**rep.dropped, **rep.added}.items():
        con.print(f"{'dropped' if k in rep.dropped else 'added'} {k}: {why}")
    if rep.missing:
        con.print(Text.assemble(("missing", "bold"), " (template has them, source does not): "
                                f"{', '.join(rep.missing)}"))
    con.print(f"wrote {rep.written} tensors to {rep.dst}"
              + (f" with {rep.target} names" if rep.target else ""))
    for note in rep.notes:
        con.print(f"note: {note}")
    _write_json(args.json, rep.to_json())
    return 0 if rep else 1


def run_diff(args: argparse.Namespace) -> int:
    from rich.text import Text

    from netparity.ckpt import diff
    from netparity.ckpt.diff import DEFAULT_ATOL, DEFAULT_RTOL

    rtol = DEFAULT_RTOL if args.rtol is None else args.rtol
    atol = DEFAULT_ATOL if args.atol is None else args.atol
    res = diff(args.a, args.b, mapping=args.mapping, rtol=rtol, atol=atol)
    con = _console()
    t = _table("reference", "candidate", "shape", "max abs", "max rel", "bad elems", "")
    for p in res.params:
        if p.ok and not args.all:
            continue
        shape = _shape(p.ref_shape) if p.shape_ok else (
            f"{_shape(p.ref_shape)} vs {_shape(p.cand_shape)}")
        t.add_row(p.ref, p.cand if p.cand != p.ref else "=", shape,
                  "" if p.max_abs is None else f"{p.max_abs:.3g}",
                  "" if p.max_rel is None else f"{p.max_rel:.3g}",
                  str(p.mismatched) if p.shape_ok else "shape",
                  "ok" if p.ok else Text("DIFF", style="bold red"))
    if t.row_count:
        con.print(t)
    _print_leftovers(con, res.unmatched_ref, res.unmatched_cand, res.ambiguous)
    for side, c in (("reference", res.counts_ref), ("candidate", res.counts_cand)):
        if c is not None:
            tr = "all stored" if c.trainable_tensors is None else (
                f"{c.trainable_tensors} trainable ({c.trainable_elements:,} elements)")
            con.print(f"{side}: {c.tensors} tensors, {c.elements:,} elements; {tr}")
    bad = res.differing()
    con.print(f"{len(res.params) - len(bad)}/{len(res.params)} parameters equal within "
              f"rtol={rtol:g} atol={atol:g}; largest abs difference {res.max_abs:.3g}")
    for note in res.notes:
        con.print(f"note: {note}")
    _write_json(args.json, res.to_json())
    sys.stdout.flush()
    return 0 if res else 1
