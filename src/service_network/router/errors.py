"""The router's named errors, and the one table mapping them to the exit codes of ``service-network router``."""

from __future__ import annotations

__all__ = [
    "EXIT_CODES",
    "ConfigError",
    "HaproxyConfigRejected",
    "HaproxyNotFound",
    "HaproxyStartError",
    "ReloadFailed",
    "RouterBinaryNotFound",
    "RouterError",
    "RouterStartError",
    "RuntimeApiError",
    "RuntimeApiUnavailable",
    "RuntimeCommandFailed",
    "StateDirError",
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


class StateDirError(RouterError):
    """The state directory cannot hold the router's files and sockets."""


class HaproxyNotFound(RouterError):
    """No ``haproxy`` executable."""

    def __init__(self, name: str = "haproxy") -> None:
        if "/" in name:
            text = f"haproxy not found at {name}: install it with apt-get install haproxy"
        else:
            text = f"{name} not found on PATH: install it with apt-get install haproxy"
        super().__init__(text)


class RouterBinaryNotFound(RouterError):
    """No ``service-network-router`` executable (the Rust data plane)."""

    def __init__(self, name: str = "service-network-router") -> None:
        super().__init__(f"{truncate(name)[1:-1]} not found: build it with "
                         "cargo build --release --locked --manifest-path router/Cargo.toml "
                         "(scripts/_venv.sh does), or point ROUTER_BIN at it")


class RouterStartError(RouterError):
    """The router process did not start (its own messages are in the log)."""


class HaproxyConfigRejected(RouterError):
    """``haproxy -c`` refused a rendered configuration (nothing was replaced)."""

    def __init__(self, output: str) -> None:
        self.output = output
        super().__init__(f"haproxy refused the rendered configuration (the running one is kept):\n{output[-4000:]}")


class HaproxyStartError(RouterError):
    """HAProxy did not start (its own messages are included)."""


class ReloadFailed(RouterError):
    """A reload did not produce a new worker; the previous worker keeps serving the previous configuration."""


class RuntimeApiError(RouterError):
    """Base of runtime API (master CLI) errors."""


class RuntimeApiUnavailable(RuntimeApiError):
    """The master socket cannot be reached."""


class RuntimeCommandFailed(RuntimeApiError):
    """HAProxy answered a runtime command with an error."""

    def __init__(self, command: str, answer: str) -> None:
        self.command = command
        self.answer = answer
        super().__init__(f"haproxy refused {command!r}: {answer.strip()[:500] or '(empty answer)'}")


# exit codes of `service-network router` per error class (first match wins, so subclasses come first)
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConfigError, 2),
    (StateDirError, 2),
    (HaproxyNotFound, 3),
    (RouterBinaryNotFound, 3),
    (RouterStartError, 4),
    (HaproxyConfigRejected, 4),
    (HaproxyStartError, 4),
    (RouterError, 1),
]


def exit_code(error: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 1
