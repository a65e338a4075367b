"""The ``verispec`` parser: the command table, each command's module adding its own parser (standard library
only: every module of the table imports nothing a command runs until it runs)."""

from __future__ import annotations

import argparse

from verispec.cli import (
    bound,
    check_engine,
    check_external,
    compare,
    confined,
    decode,
    derive,
    exact,
    hunt,
    latency,
    listing,
    models,
    optimum,
    predict,
    report,
    selector,
    sweep,
)
from verispec.cli.options import Parser, VersionAction

#: Each command, in the order --help lists them, and its module: ``add_parser(subparsers)`` adds the command and
#: every option of it, ``run(args)`` runs it and returns the exit status.
COMMANDS = {
    "exact": exact, "compare": compare, "hunt": hunt, "check-external": check_external,
    "check-engine": check_engine, "optimum": optimum,
    "bound": bound, "list": listing, "decode": decode, "predict": predict, "derive": derive, "sweep": sweep,
    "report": report, "latency": latency, "models": models, "selector": selector,
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="verispec", description="Exact analysis of speculative-decoding verifiers.")
    parser.add_argument("--version", action=VersionAction, help="print 'verispec VERSION' and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_parser(subparsers)
    confined.add_options(subparsers)
    return parser
