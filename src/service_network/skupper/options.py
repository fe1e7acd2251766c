"""Flags shared by several verbs (``--wait``, ``--timeout``, ``-o``) with upstream's kinds and defaults, and their
checks with upstream's messages. Values are checked by the verbs (exit code 2 with every problem listed), not by
the parser, as upstream."""

from __future__ import annotations

import datetime

from .cmdline import Flag
from .common import WAIT_CHOICES
from .durations import parse as duration
from .validate import duration_at_least, option_problem

__all__ = ["OUTPUTS", "check_output", "check_timeout", "check_wait", "delete_wait_flag", "output_flag",
           "timeout_flag", "wait_flag"]

MIN_TIMEOUT = datetime.timedelta(seconds=10)
OUTPUTS = ("json", "yaml")
TIMEOUT_USAGE = "raise an error if the operation does not complete in the given period of time"


def wait_flag(default: str) -> Flag:
    return Flag("wait", "string", default, "Wait for the given status before exiting. Choices: configured, ready, "
                "none", values=WAIT_CHOICES)


def delete_wait_flag() -> Flag:
    return Flag("wait", "bool", True, "Wait for deletion to complete before exiting")


def timeout_flag(default: str) -> Flag:
    return Flag("timeout", "duration", duration(default), TIMEOUT_USAGE)


def output_flag(default: str, usage: str = "print the resources to the console. Choices: json, yaml") -> Flag:
    return Flag("output", "string", default, usage, short="o", values=OUTPUTS)


def check_timeout(value: datetime.timedelta) -> list[str]:
    problem = duration_at_least(value, MIN_TIMEOUT)
    return [f"timeout is not valid: {problem}"] if problem else []


def check_wait(value: str) -> list[str]:
    problem = option_problem(value, WAIT_CHOICES)
    return [f"status is not valid: {problem}"] if problem else []


def check_output(value: str | None) -> list[str]:
    if not value:
        return []
    problem = option_problem(value, OUTPUTS)
    return [f"output type is not valid: {problem}"] if problem else []
