"""Flags shared by several verbs (``--wait``, ``--timeout``, ``-o``) and their checks, with upstream's defaults and
messages. Values are checked by the verbs (exit code 2 with every problem listed), not by the parser, as upstream."""

from __future__ import annotations

import argparse
import datetime

from .common import WAIT_CHOICES, duration
from .validate import duration_at_least, option_problem

__all__ = ["add_output", "add_wait", "bool_flag", "check_output", "check_timeout", "check_wait", "duration"]

MIN_TIMEOUT = datetime.timedelta(seconds=10)


def bool_flag(text: str) -> bool:
    """``--wait=false`` as Go's flag parser reads booleans."""
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f'invalid argument "{text[:32]}": parse error')


def add_wait(parser: argparse.ArgumentParser, wait: str, timeout: str) -> None:
    parser.add_argument("--wait", default=wait,
                        help=f"Wait for the given status before exiting. Choices: configured, ready, none "
                             f"(default {wait})")
    parser.add_argument("--timeout", type=duration, default=duration(timeout),
                        help=f"raise an error if the operation does not complete in the given period of time "
                             f"(default {timeout})")


def add_output(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument("-o", "--output", default=default,
                        help="print status of resources. Choices: json, yaml" if default is None else
                        f"print the resource. Choices: json, yaml (default {default})")


def check_timeout(value: datetime.timedelta) -> list[str]:
    problem = duration_at_least(value, MIN_TIMEOUT)
    return [f"timeout is not valid: {problem}"] if problem else []


def check_wait(value: str) -> list[str]:
    problem = option_problem(value, WAIT_CHOICES)
    return [f"status is not valid: {problem}"] if problem else []


def check_output(value: str | None) -> list[str]:
    if value is None:
        return []
    problem = option_problem(value, ("json", "yaml"))
    return [f"output type is not valid: {problem}"] if problem else []
