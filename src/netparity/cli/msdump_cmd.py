"""``netparity msdump``: MindSpore graph-mode dump configuration and import.

Examples::

    netparity msdump config -o dump.json --dir /tmp/msdump --iteration "0|1"
    MINDSPORE_DUMP_CONFIG=dump.json python train.py
    netparity msdump import /tmp/msdump -o runs/ms_graph
"""

from __future__ import annotations

import argparse
from typing import Any

from netparity.cli._io import add_input, add_output


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "msdump",
        help="MindSpore graph-mode dump: write its config, import it into a trace",
        description="Write a MindSpore dump configuration, or import a dump directory "
        "into a netparity trace.",
    )
    sub = p.add_subparsers(dest="msdump_command", metavar="ACTION")
    imp = sub.add_parser("import", help="convert a MindSpore dump directory into a trace")
    add_input(imp, "dump_dir", kind="path", help="the dump 'path' of the config (holds rank_*)")
    add_output(imp, "-o", "--output", kind="trace", force="overwrite", required=True,
               help="trace directory to write")
    imp.add_argument("--stats-only", action="store_true", help="do not store tensor payloads")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing trace")
    imp.add_argument("--wrapper", action="append", default=None, metavar="ATTR",
                     help="scope attribute of a training wrapper to drop from module paths "
                     "(repeatable; default: network, _backbone, _network, backbone)")
    cfg = sub.add_parser("config", help="write a MindSpore dump configuration JSON")
    add_output(cfg, "-o", "--output", required=True, help="the JSON file to write")
    cfg.add_argument("--dir", required=True, dest="dump_dir", help="where MindSpore will dump")
    cfg.add_argument("--net-name", default="Net")
    cfg.add_argument("--iteration", default="all", help='"all" or e.g. "0|5-8"')
    cfg.add_argument("--saved-data", default="tensor", choices=("tensor", "statistic", "full"))
    cfg.add_argument("--input-output", type=int, default=0, choices=(0, 1, 2),
                     help="0 inputs and outputs, 1 inputs, 2 outputs")
    cfg.add_argument("--kernel", action="append", default=[], metavar="SCOPE",
                     help="dump only this full-scope op name (repeatable)")
    p.set_defaults(func=run, _msdump_parser=p)


def run(args: argparse.Namespace) -> int:
    from netparity.cli._common import say
    from netparity.frameworks.mindspore.dump import DEFAULT_WRAPPERS, import_dump, write_dump_config

    if args.msdump_command == "import":
        counts = import_dump(args.dump_dir, args.output, payload=not args.stats_only,
                             wrappers=args.wrapper or DEFAULT_WRAPPERS, overwrite=args.overwrite)
        say(f"imported {counts['records']} tensors from {counts['ranks']} rank(s) into "
              f"{args.output}" + (f" ({counts['skipped']} files skipped)" if counts["skipped"]
                                  else ""))
        return 0
    if args.msdump_command == "config":
        path = write_dump_config(args.output, args.dump_dir, net_name=args.net_name,
                                 iteration=args.iteration, saved_data=args.saved_data,
                                 input_output=args.input_output, kernels=args.kernel)
        say(f"wrote {path}; run with MINDSPORE_DUMP_CONFIG={path.resolve()}")
        return 0
    args._msdump_parser.print_help()
    return 2
