"""Go durations as upstream's CLI reads and prints them (pure, standard library only): :func:`parse` accepts what
Go's ``time.ParseDuration`` accepts (``60s``, ``1h30m``, ``1.5h``, ``-2m``, ``0``) and fails with its words
(``time: missing unit in duration "60"``); :func:`go_duration` prints as Go's ``Duration.String()``."""

from __future__ import annotations

import datetime

__all__ = ["go_duration", "go_quote", "parse"]

#: Go's units, in nanoseconds (``µ`` is U+00B5, ``μ`` U+03BC: Go accepts both)
_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
          "m": 60_000_000_000, "h": 3_600_000_000_000}
_MAX = (1 << 63) - 1
_DIGITS = "0123456789"


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q``/``strconv.Quote`` prints it, for the characters a flag value holds."""
    out = []
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _digits(text: str) -> int:
    """How many leading characters of ``text`` are decimal digits."""
    count = 0
    while count < len(text) and text[count] in _DIGITS:
        count += 1
    return count


def parse(text: str) -> datetime.timedelta:
    """A Go duration; ValueError with Go's message when ``text`` is not one."""
    invalid = ValueError(f"time: invalid duration {go_quote(text)}")
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return datetime.timedelta(0)
    if not rest:
        raise invalid
    total = 0
    while rest:
        if rest[0] != "." and rest[0] not in _DIGITS:
            raise invalid
        whole_len = _digits(rest)
        whole = rest[:whole_len]
        rest = rest[whole_len:]
        fraction = ""
        if rest[:1] == ".":
            rest = rest[1:]
            fraction_len = _digits(rest)
            fraction, rest = rest[:fraction_len], rest[fraction_len:]
        if not whole and not fraction:
            raise invalid
        unit_len = 0
        while unit_len < len(rest) and rest[unit_len] != "." and rest[unit_len] not in _DIGITS:
            unit_len += 1
        if unit_len == 0:
            raise ValueError(f"time: missing unit in duration {go_quote(text)}")
        unit, rest = rest[:unit_len], rest[unit_len:]
        if unit not in _UNITS:
            raise ValueError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(text)}")
        scale = _UNITS[unit]
        value = int(whole or "0") * scale
        if fraction:
            value += int(fraction) * scale // 10 ** len(fraction)
        total += value
        if total > _MAX:
            raise invalid
    nanoseconds = -total if negative else total
    return datetime.timedelta(microseconds=nanoseconds / 1000)


def go_duration(value: datetime.timedelta) -> str:
    """Go's ``time.Duration.String()``: ``10s``, ``1m0s``, ``15m0s``, ``1h30m0s``, ``1.5s``, ``500ms``, ``0s``."""
    nanoseconds = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    nanoseconds = abs(nanoseconds)
    if nanoseconds < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("\u00b5s", 1_000), ("ns", 1)):
            if nanoseconds >= size:
                return sign + _decimal(nanoseconds, size) + unit
    hours, rest = divmod(nanoseconds, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _decimal(rest, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _decimal(value: int, size: int) -> str:
    whole, fraction = divmod(value, size)
    if not fraction:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}." + f"{fraction:0{digits}d}".rstrip("0")
