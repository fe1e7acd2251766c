"""``kubectl exec`` in a kubesim container: a small, shell-less command set over the container's view of its files
(the volumes mounted into it, as ``ContainerSpec.host_path`` maps them) and environment.

kubesim's containers are programs inside the kubesim process (or host processes of the project's image) without
their own root file system, so what ``exec`` can show is what Kubernetes put into the container: its volumes (a
listener volume's files, ConfigMaps, Secrets, the ServiceAccount token, emptyDirs), its environment and hostname.
Commands: ``cat FILE...``, ``ls [-1|-l|-a] [PATH...]``, ``env``/``printenv [NAME...]``, ``echo ARGS``, ``hostname``,
``pwd``, ``true``, ``false``, ``test -e|-f|-d PATH``, and ``sh -c`` / ``bash -c`` with one of those (words split as
a shell would; ``&&`` and ``;`` chain commands; no pipes or redirections). Anything else is "executable file not
found", exit code 127, as a container runtime answers for a missing program. Output is bounded.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from .registry import ContainerSpec

__all__ = ["ExecResult", "run_command"]

MAX_OUTPUT = 4 * 1024 * 1024


@dataclass
class ExecResult:
    code: int = 0
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    def out(self, data: bytes) -> None:
        self.stdout += data[: max(0, MAX_OUTPUT - len(self.stdout))]

    def err(self, data: bytes) -> None:
        self.stderr += data[: max(0, MAX_OUTPUT - len(self.stderr))]


def _children(spec: ContainerSpec, path: str) -> list[str] | None:
    """Names under ``path`` in the container's view: a mounted directory's entries, or the next components of mount
    paths below it (``/`` lists the top directories of the mounts); None when nothing is there."""
    host = spec.host_path(path)
    if host is not None:
        try:
            return sorted(p.name for p in host.iterdir()) if host.is_dir() else None
        except OSError:
            return None
    prefix = posixpath.normpath("/" + path.lstrip("/")).rstrip("/") + "/"
    names = {mount[len(prefix):].split("/", 1)[0] for mount, _ in spec.mounts() if mount.startswith(prefix)}
    return sorted(n for n in names if n) or None


def _is_dir(spec: ContainerSpec, path: str) -> bool:
    host = spec.host_path(path)
    return host.is_dir() if host is not None else _children(spec, path) is not None


def _cat(spec: ContainerSpec, args: Sequence[str], result: ExecResult) -> None:
    for name in args or ["-"]:
        host = spec.host_path(name)
        if host is None or not host.exists():
            result.err(f"cat: {name}: No such file or directory\n".encode())
            result.code = 1
        elif host.is_dir():
            result.err(f"cat: {name}: Is a directory\n".encode())
            result.code = 1
        else:
            try:
                with host.open("rb") as f:
                    result.out(f.read(MAX_OUTPUT))
            except OSError as e:
                result.err(f"cat: {name}: {e.strerror}\n".encode())
                result.code = 1


def _ls(spec: ContainerSpec, args: Sequence[str], result: ExecResult) -> None:
    flags = {a for a in args if a.startswith("-")}
    paths = [a for a in args if not a.startswith("-")] or ["."]
    long = any("l" in f for f in flags)
    for i, name in enumerate(paths):
        path = "/" if name == "." else name
        host = spec.host_path(path)
        if host is not None and host.is_file():
            result.out(f"{name}\n".encode())
            continue
        entries = _children(spec, path)
        if entries is None:
            result.err(f"ls: cannot access '{name}': No such file or directory\n".encode())
            result.code = 2
            continue
        if len(paths) > 1:
            result.out(f"{'' if i == 0 else chr(10)}{name}:\n".encode())
        for entry in entries:
            if long:
                child = spec.host_path(posixpath.join(path, entry))
                kind, size = "d", 0
                if child is not None:
                    try:
                        info = child.stat()
                        kind, size = ("d" if stat.S_ISDIR(info.st_mode) else "-"), info.st_size
                    except OSError:
                        pass
                result.out(f"{kind}rw-r--r-- 1 root root {size:>8} {entry}\n".encode())
            else:
                result.out(f"{entry}\n".encode())


def _one(spec: ContainerSpec, argv: Sequence[str], result: ExecResult) -> None:
    program, args = posixpath.basename(argv[0]), list(argv[1:])
    env = dict(spec.env)
    env.setdefault("HOSTNAME", spec.hostname)
    if program == "cat":
        _cat(spec, args, result)
    elif program == "ls":
        _ls(spec, args, result)
    elif program in ("env", "printenv") and (program == "env" or not args):
        result.out("".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode())
    elif program == "printenv":
        found = [env[a] for a in args if a in env]
        result.out("".join(f"{v}\n" for v in found).encode())
        result.code = 0 if len(found) == len(args) else 1
    elif program == "echo":
        result.out((" ".join(args) + "\n").encode())
    elif program == "hostname":
        result.out(f"{spec.hostname}\n".encode())
    elif program == "pwd":
        result.out(b"/\n")
    elif program in ("true", "false"):
        result.code = 0 if program == "true" else 1
    elif program in ("test", "[") and len(args) >= 2 and args[0] in ("-e", "-f", "-d"):
        host = spec.host_path(args[1])
        exists = host is not None and host.exists()
        result.code = 0 if (args[0] == "-e" and (exists or _is_dir(spec, args[1]))) or (
            args[0] == "-f" and exists and host is not None and host.is_file()) or (
            args[0] == "-d" and _is_dir(spec, args[1])) else 1
    elif program in ("sh", "bash", "ash") and len(args) >= 2 and args[0] == "-c":
        _script(spec, args[1], result)
    else:
        result.err(f'exec: "{argv[0][:100]}": executable file not found in $PATH\n'.encode())
        result.code = 127


_PARAMETER = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_parameters(text: str, env: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by the variable's value (empty when unset), except inside single quotes;
    a value stays one word (quoted for the word splitting that follows)."""
    out: list[str] = []
    quote = ""
    at = 0
    while at < len(text):
        char = text[at]
        if char == "\\" and quote != "'" and at + 1 < len(text):
            out.append(text[at:at + 2])
            at += 2
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        elif char == "$" and quote != "'":
            found = _PARAMETER.match(text, at)
            if found is not None:
                value = env.get(found.group(1) or found.group(2), "")
                if quote == '"':
                    out.append(re.sub(r'(["\\$`])', r"\\\1", value))
                else:
                    out.append(shlex.quote(value))
                at = found.end()
                continue
        out.append(char)
        at += 1
    return "".join(out)


def _script(spec: ContainerSpec, text: str, result: ExecResult) -> None:
    """``sh -c TEXT``: commands chained with ``&&`` (stop at the first failure) or ``;``; ``$NAME`` expanded."""
    env = dict(spec.env)
    env.setdefault("HOSTNAME", spec.hostname)
    try:
        words = shlex.split(expand_parameters(text[:10_000], env), posix=True)
    except ValueError as e:
        result.err(f"sh: syntax error: {e}\n".encode())
        result.code = 2
        return
    command: list[str] = []
    for word in [*words, ";"]:
        if word in ("&&", ";"):
            if command:
                result.code = 0
                _one(spec, command, result)
                if word == "&&" and result.code != 0:
                    return
            command = []
        elif word in ("|", ">", ">>", "<", "||"):
            result.err(f"sh: {word}: pipes and redirections are not supported in kubesim's exec\n".encode())
            result.code = 2
            return
        else:
            command.append(word)


def run_command(spec: ContainerSpec, argv: Sequence[str]) -> ExecResult:
    """Run ``argv`` in the container's view."""
    result = ExecResult()
    if not argv:
        result.err(b"exec: no command given\n")
        result.code = 1
        return result
    _one(spec, list(argv), result)
    return result
