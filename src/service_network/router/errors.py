"""The router's named errors, and the one table mapping them to the exit codes of ``service-network router``."""

from __future__ import annotations

__all__ = [
    "EXIT_CODES",
    "ConfigError",
    "RouterBinaryNotFound",
    "RouterError",
    "RouterStartError",
    "exit_code",
    "truncate",
]

_MAX_ECHO = 200


def truncate(text: str, limit: int = _MAX_ECHO) -> str:
    """``text`` as a repr, cut to ``limit`` characters: errors never echo a huge input back."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text)} characters)"


class RouterError(Exception):
    """Base of every error the router reports to its user."""


class ConfigError(RouterError):
    """The router configuration is invalid; ``problems`` lists each one with its field path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid router configuration:\n" + "\n".join(f"  - {p}" for p in problems))


class RouterBinaryNotFound(RouterError):
    """No ``service-network-router`` executable (the data plane)."""

    def __init__(self, name: str = "service-network-router") -> None:
        super().__init__(f"{truncate(name)[1:-1]} not found: build it with "
                         "cargo build --release --locked --manifest-path router/Cargo.toml "
                         "(scripts/_venv.sh does), or point ROUTER_BIN at it")


class RouterStartError(RouterError):
    """The router process did not start (its own messages are in the log)."""


# exit codes of `service-network router` per error class (first match wins, so subclasses come first)
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConfigError, 2),
    (RouterBinaryNotFound, 3),
    (RouterStartError, 4),
    (RouterError, 1),
]


def exit_code(error: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 1
