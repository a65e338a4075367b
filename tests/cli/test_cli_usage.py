"""The usage text of ``verispec`` (the module docstring of verispec.cli, what a reader of the code sees first) names
every command the parser has, every step of ``selector``, and every exit status ``verispec.verdict`` defines."""

from __future__ import annotations

import re

import verispec.cli
import verispec.verdict
from verispec.cli.parser import COMMANDS, build_parser

USAGE = verispec.cli.__doc__


def test_the_usage_names_every_command_and_selector_step():
    named = set(re.findall(r"^\s+verispec ([a-z][a-z-]*)", USAGE, re.M))
    assert named == set(COMMANDS), (named ^ set(COMMANDS))
    parser = build_parser()
    selector = next(action for action in parser._subparsers._group_actions[0].choices["selector"]._actions
                    if action.choices)
    steps = re.search(r"verispec selector ([a-z |]+?)\s{2,}", USAGE)[1].replace(" ", "").split("|")
    assert set(steps) == set(selector.choices)


def test_the_usage_states_every_exit_status():
    statuses = {value for name, value in vars(verispec.verdict).items() if name.startswith("EXIT_")}
    stated = {int(number) for number in re.findall(r"(\d+) [a-z]", USAGE.split("Exit statuses:")[1].split(".")[0])}
    assert statuses <= stated, statuses - stated
