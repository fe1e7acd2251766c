"""The ``skupper`` command tree and its parsing, as upstream's CLI (cobra and pflag) behaves for a user: commands
found among the arguments wherever flags stand, ``--flag value``, ``--flag=value``, ``-n value``, ``-nvalue``,
boolean flags that take ``=false`` only, ``--`` ending the flags; the same words and exit codes for unknown
commands (with ``Did you mean this?``), unknown or malformed flags, and the same layout of help and usage.

Standard library only, and no verb is imported until it runs: a verb is a :class:`Lazy` entry (its name, one line
of help and its module) until the arguments select it (``skupper --help`` loads none).
"""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Awaitable, Callable, Sequence
from types import SimpleNamespace
from typing import Any, Literal, TextIO

from . import durations

__all__ = ["GLOBAL_FLAGS", "Args", "Command", "Flag", "Lazy", "ParseError", "Parsed", "UnknownCommand", "help_text",
           "parse", "usage_text"]

FlagKind = Literal["string", "bool", "int", "duration"]
#: the parsed flags and arguments of a command (attributes named as the flags, ``-`` as ``_``)
Args = SimpleNamespace
Run = Callable[[Args, Any], Awaitable[None]]


class Flag:
    """A flag as pflag defines it: long name, kind, default, usage text and an optional one-letter shorthand.
    ``values``: what shell completion offers for its value; ``files``: complete file names."""

    __slots__ = ("default", "files", "hidden", "kind", "name", "short", "usage", "values")

    def __init__(self, name: str, kind: FlagKind, default: str | bool | int | datetime.timedelta, usage: str, *,
                 short: str = "", hidden: bool = False, values: tuple[str, ...] = (), files: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.default = default
        self.usage = usage
        self.short = short
        self.hidden = hidden
        self.values = values
        self.files = files

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def default_text(self) -> str:
        """The default as pflag prints it (``DefValue``)."""
        if self.kind == "bool":
            return "true" if self.default else "false"
        if self.kind == "duration":
            assert isinstance(self.default, datetime.timedelta)
            return durations.go_duration(self.default)
        return str(self.default)

    def convert(self, text: str) -> str | bool | int | datetime.timedelta:
        """``text`` as this flag's value; ValueError with pflag's reason."""
        if self.kind == "bool":
            return _go_bool(text)
        if self.kind == "int":
            return _go_int(text)
        if self.kind == "duration":
            return durations.parse(text)
        return text


def _go_bool(text: str) -> bool:
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"strconv.ParseBool: parsing {durations.go_quote(text)}: invalid syntax")


def _go_int(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 0, 64)``: decimal, ``0x``, ``0o``, ``0b``, ``_`` between digits."""
    body = text[1:] if text[:1] in "+-" else text
    try:
        if not body or body != body.strip() or body.startswith("_") or body.endswith("_"):
            raise ValueError
        value = int(text, 0) if body[:2].lower() in ("0x", "0o", "0b") else int(text.replace("_", ""), 10)
    except ValueError:
        raise ValueError(f"strconv.ParseInt: parsing {durations.go_quote(text)}: invalid syntax") from None
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"strconv.ParseInt: parsing {durations.go_quote(text)}: value out of range")
    return value


HELP_FLAG_NAME = "help"

#: upstream's persistent flags (``--platform``: ``kubernetes``; ``skupper system`` also podman, docker, linux)
GLOBAL_FLAGS = (
    Flag("context", "string", "", "Set the kubeconfig context", short="c"),
    Flag("kubeconfig", "string", "", "Path to the kubeconfig file to use", files=True),
    Flag("namespace", "string", "", "Set the namespace", short="n"),
    Flag("platform", "string", "", "Set the platform type to use [kubernetes, podman, docker, linux]",
         short="p", values=("kubernetes", "podman", "docker", "linux")),
)


class Command:
    """One command: ``use`` is its name and the arguments it takes (``create <name> <port>``); ``run`` is called
    with the parsed flags and positional arguments (in ``args.<positional>``) and the cluster session (None for an
    ``offline`` command); a command with ``children`` and no ``run`` only groups them; ``platforms``: the values of
    ``--platform`` it serves. ``run`` is a coroutine that
    never suspends (blocking requests and pauses) unless ``event_loop``: then it runs in asyncio's loop."""

    def __init__(self, use: str, short: str, *, long: str = "", example: str = "", flags: tuple[Flag, ...] = (),
                 run: Run | None = None, offline: bool = False, positional: str = "args",
                 children: list[Command | Lazy] | None = None, hidden: bool = False, flags_in_use: bool = True,
                 event_loop: bool = False, platforms: tuple[str, ...] = ("", "kubernetes")) -> None:
        self.use = use
        self.short = short
        self.long = long
        self.example = example
        self.flags = flags
        self.run = run
        self.offline = offline
        self.positional = positional
        self.children: list[Command | Lazy] = children or []
        self.hidden = hidden
        self.flags_in_use = flags_in_use
        self.event_loop = event_loop
        self.platforms = platforms          # the --platform values it serves ("": not given)

    @property
    def name(self) -> str:
        return self.use.split(" ", 1)[0]

    def child(self, name: str) -> Command | None:
        for index, entry in enumerate(self.children):
            if entry.name == name:
                if isinstance(entry, Lazy):
                    entry = self.children[index] = entry.load()
                return entry
        return None


class Lazy:
    """A command known by its name and one-line help until it is used: ``module.command()`` makes it."""

    def __init__(self, name: str, short: str, module: str, hidden: bool = False) -> None:
        self.name = name
        self.short = short
        self.module = module
        self.hidden = hidden

    def load(self) -> Command:
        made: Command = importlib.import_module(self.module).command()
        return made


class ParseError(Exception):
    """A flag that cannot be parsed: cobra prints ``Error: <message>`` and the command's usage."""

    def __init__(self, message: str, path: list[Command]) -> None:
        super().__init__(message)
        self.path = path


class UnknownCommand(Exception):
    """An unknown command under the root: cobra's message with its suggestions."""


class Parsed:
    """The command the arguments chose (``path``: from the root), its flags and positional arguments, and
    whether help was asked for (or the command only groups others)."""

    def __init__(self, path: list[Command], args: Args, help: bool = False) -> None:
        self.path = path
        self.args = args
        self.help = help

    @property
    def command(self) -> Command:
        return self.path[-1]


def command_path(path: Sequence[Command]) -> str:
    return " ".join(c.name for c in path)


def _all_flags(path: Sequence[Command]) -> list[Flag]:
    """The command's own flags, its help flag and the inherited global flags."""
    return [*path[-1].flags, _help_flag(path[-1]), *GLOBAL_FLAGS]


def _help_flag(command: Command) -> Flag:
    return Flag(HELP_FLAG_NAME, "bool", False, f"help for {command.name}", short="h")


def _takes_value(token: str, flags: Sequence[Flag]) -> bool:
    """Whether the (unknown or non-boolean) flag ``token`` consumes the next argument, as cobra's search for the
    command path assumes."""
    if "=" in token:
        return False
    if token.startswith("--"):
        name = token[2:]
        return not any(f.name == name and f.kind == "bool" for f in flags)
    return len(token) == 2 and not any(f.short == token[1] and f.kind == "bool" for f in flags)


def _command_words(args: Sequence[str], flags: Sequence[Flag]) -> list[str]:
    words: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token == "--":
            break
        if token.startswith("-") and _takes_value(token, flags):
            if len(args) - index <= 1:
                break
            index += 1
            continue
        if token and not token.startswith("-"):
            words.append(token)
    return words


def _without_first(args: list[str], word: str, flags: Sequence[Flag]) -> list[str]:
    """``args`` without the first ``word`` that is not a flag's value."""
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        if token.startswith("-"):
            index += 2 if _takes_value(token, flags) else 1
            continue
        if token == word:
            return args[:index] + args[index + 1:]
        index += 1
    return args


def _find(root: Command, args: list[str]) -> tuple[list[Command], list[str]]:
    path = [root]
    rest = list(args)
    while True:
        words = _command_words(rest, _all_flags(path))
        if not words:
            return path, rest
        found = path[-1].child(words[0])
        if found is None:
            return path, rest
        rest = _without_first(rest, words[0], _all_flags(path))
        path.append(found)


def _levenshtein(a: str, b: str) -> int:
    a, b = a.lower(), b.lower()
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def suggestions(root: Command, typed: str) -> list[str]:
    """cobra's suggestions: commands within 2 edits of ``typed`` or starting with it, in the order listed."""
    return [c.name for c in _visible(root) if _levenshtein(typed, c.name) <= 2
            or c.name.lower().startswith(typed.lower())]


def parse(root: Command, args: Sequence[str]) -> Parsed:
    """The command ``args`` select and its flags; :class:`UnknownCommand` or :class:`ParseError` as cobra
    reports them."""
    path, rest = _find(root, list(args))
    command = path[-1]
    if len(path) == 1 and command.children:
        words = _command_words(rest, _all_flags(path))
        if words:
            hint = suggestions(root, words[0])
            more = "\n\nDid you mean this?\n" + "".join(f"\t{s}\n" for s in hint) if hint else ""
            raise UnknownCommand(f"unknown command {_quote(words[0])} for {_quote(command_path(path))}{more}")
    values, positional = _parse_flags(path, rest)
    namespace = Args(**{f.dest: f.default for f in _all_flags(path)})
    for name, value in values.items():
        setattr(namespace, name, value)
    setattr(namespace, command.positional, positional)
    asked = bool(getattr(namespace, HELP_FLAG_NAME))
    return Parsed(path, namespace, help=asked or command.run is None)


def _quote(text: str) -> str:
    return durations.go_quote(text)


def _parse_flags(path: list[Command], args: list[str]) -> tuple[dict[str, Any], list[str]]:
    flags = _all_flags(path)
    by_name = {f.name: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    values: dict[str, Any] = {}
    positional: list[str] = []

    def fail(message: str) -> ParseError:
        return ParseError(message, path)

    def assign(flag: Flag, text: str) -> None:
        try:
            values[flag.dest] = flag.convert(text)
        except ValueError as e:
            shown = f"-{flag.short}, --{flag.name}" if flag.short else f"--{flag.name}"
            raise fail(f"invalid argument {_quote(text)} for {_quote(shown)} flag: {e}") from None

    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token == "--":
            positional.extend(args[index:])
            break
        if not token.startswith("-") or token == "-":
            positional.append(token)
            continue
        if token.startswith("--"):
            name, has_value, value = token[2:].partition("=")
            if not name or name[0] in "-=":
                raise fail(f"bad flag syntax: {token}")
            flag = by_name.get(name)
            if flag is None:
                raise fail(f"unknown flag: --{name}")
            if has_value:
                assign(flag, value)
            elif flag.kind == "bool":
                assign(flag, "true")
            elif index < len(args):
                assign(flag, args[index])
                index += 1
            else:
                raise fail(f"flag needs an argument: {token}")
            continue
        shorts = token[1:]
        while shorts:
            letter = shorts[0]
            flag = by_short.get(letter)
            if flag is None:
                raise fail(f"unknown shorthand flag: {_rune(letter)} in -{shorts}")
            if len(shorts) > 2 and shorts[1] == "=":
                assign(flag, shorts[2:])
                shorts = ""
            elif flag.kind == "bool":
                assign(flag, "true")
                shorts = shorts[1:]
            elif len(shorts) > 1:
                assign(flag, shorts[1:])
                shorts = ""
            elif index < len(args):
                assign(flag, args[index])
                index += 1
                shorts = ""
            else:
                raise fail(f"flag needs an argument: {_rune(letter)} in -{shorts}")
    return values, positional


def _rune(letter: str) -> str:
    """A character as Go's ``%q`` prints a rune."""
    return "'\\''" if letter == "'" else "'\\\\'" if letter == "\\" else f"'{letter}'"


# ---- help and usage, in cobra's layout ----------------------------------------------------------------------------

def _visible(command: Command) -> list[Command | Lazy]:
    return sorted((c for c in command.children if not c.hidden), key=lambda c: c.name)


def _flag_lines(flags: Sequence[Flag]) -> str:
    """pflag's ``FlagUsages``: sorted by name, the usage column aligned, multi-line usages indented to it."""
    entries = []
    for flag in sorted((f for f in flags if not f.hidden), key=lambda f: f.name):
        head = f"  -{flag.short}, --{flag.name}" if flag.short else f"      --{flag.name}"
        if flag.kind != "bool":
            head += f" {flag.kind}"
        usage = flag.usage
        default = flag.default_text()
        if default not in ("", "false", "0", "0s"):
            usage += f' (default "{default}")' if flag.kind == "string" else f" (default {default})"
        entries.append((head, usage))
    width = max((len(h) for h, _ in entries), default=0) + 1     # pflag counts a separator in the widest head
    lines = []
    for head, usage in entries:
        usage = usage.replace("\n", "\n" + " " * (width + 2))
        lines.append(f"{head} {' ' * (width - len(head))} {usage}\n")
    return "".join(lines)


def usage_text(path: Sequence[Command]) -> str:
    """cobra's usage of the command at the end of ``path`` (ends with a newline)."""
    command = path[-1]
    full = command_path(path)
    parts = ["Usage:"]
    if command.run is not None:
        use = " ".join([*(c.name for c in path[:-1]), command.use])
        parts.append(f"\n  {use} [flags]" if command.flags_in_use and "[flags]" not in use else f"\n  {use}")
    children = _visible(command)
    if children:
        parts.append(f"\n  {full} [command]")
    if command.example:
        parts.append(f"\n\nExamples:\n{command.example}")
    if children:
        padding = max(11, *(len(c.name) for c in children))
        parts.append("\n\nAvailable Commands:")
        parts.extend(f"\n  {c.name:<{padding}} {c.short}" for c in children)
    local = [*command.flags, _help_flag(command)] + ([*GLOBAL_FLAGS] if len(path) == 1 else [])
    parts.append("\n\nFlags:\n" + _flag_lines(local).rstrip())
    if len(path) > 1:
        parts.append("\n\nGlobal Flags:\n" + _flag_lines(GLOBAL_FLAGS).rstrip())
    if children:
        parts.append(f'\n\nUse "{full} [command] --help" for more information about a command.')
    return "".join(parts) + "\n"


def help_text(path: Sequence[Command]) -> str:
    """cobra's help: the long description (else the short one), then the usage."""
    command = path[-1]
    return (command.long or command.short).rstrip() + "\n\n" + usage_text(path)


def write(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()
