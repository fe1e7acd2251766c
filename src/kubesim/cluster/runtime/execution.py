"""``kubectl exec`` in a kubesim container: a small, shell-less command set over the container's view of its files
(the volumes mounted into it, as ``ContainerSpec.host_path`` maps them) and environment.

kubesim's containers are programs inside the kubesim process (or host processes of the project's image) without
their own root file system, so what ``exec`` can show is what Kubernetes put into the container: its volumes (a
listener volume's files, ConfigMaps, Secrets, the ServiceAccount token, emptyDirs), its environment and hostname.
Commands: ``cat FILE...``, ``ls [-1|-l|-a] [PATH...]`` (``-l`` shows a symbolic link as ``l... name -> target``, as
a listener volume's ``default-address`` is one; without ``-a`` dot files are hidden), ``env``/``printenv [NAME...]``,
``echo ARGS``, ``hostname``, ``pwd``, ``true``, ``false``, ``test -e|-f|-d PATH``, and ``sh -c`` / ``bash -c`` with
those and the shell's own ``cd`` (words split as a shell would; ``&&`` and ``;`` chain commands; relative paths are
relative to the working directory, ``/`` at the start; no pipes or redirections). Anything else is "executable file
not found", exit code 127, as a container runtime answers for a missing program. Output is bounded.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubesim.cluster.runtime.registry import ContainerSpec

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


@dataclass
class _Shell:
    """One exec: the container and its working directory (``cd`` in ``sh -c`` moves it)."""

    spec: ContainerSpec
    cwd: str = "/"

    def path(self, name: str) -> str:
        """``name`` as an absolute, normalised path in the container (relative to the working directory)."""
        return "/" + posixpath.normpath(posixpath.join(self.cwd, name)).lstrip("/")


def _cat(shell: _Shell, args: Sequence[str], result: ExecResult) -> None:
    for name in args or ["-"]:
        host = shell.spec.host_path(shell.path(name))
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


def _long_entry(shell: _Shell, path: str, entry: str) -> str:
    """One ``ls -l`` line: a directory, a file with its size, or a symbolic link with its target."""
    child = shell.spec.host_path(path)
    mode, size, target = "drwxr-xr-x", 0, ""
    if child is not None:
        try:
            info = child.lstat()
            if stat.S_ISLNK(info.st_mode):
                mode, size, target = "lrwxrwxrwx", info.st_size, f" -> {os.readlink(child)}"
            elif not stat.S_ISDIR(info.st_mode):
                mode, size = "-rw-r--r--", info.st_size
        except OSError:
            pass
    return f"{mode} 1 root root {size:>8} {entry}{target}\n"


def _ls(shell: _Shell, args: Sequence[str], result: ExecResult) -> None:
    flags = "".join(a[1:] for a in args if a.startswith("-"))
    paths = [a for a in args if not a.startswith("-")] or ["."]
    long, everything = "l" in flags, "a" in flags
    for i, name in enumerate(paths):
        path = shell.path(name)
        host = shell.spec.host_path(path)
        # a file, or with -l a symbolic link itself (ls -l LINK shows the link, ls LINK/ what it points to)
        if host is not None and (host.is_file() or (long and host.is_symlink() and not name.endswith("/"))):
            result.out((_long_entry(shell, path, name) if long else f"{name}\n").encode())
            continue
        entries = _children(shell.spec, path)
        if entries is None:
            result.err(f"ls: cannot access '{name}': No such file or directory\n".encode())
            result.code = 2
            continue
        if len(paths) > 1:
            result.out(f"{'' if i == 0 else chr(10)}{name}:\n".encode())
        shown = ([".", ".."] if everything else []) + [e for e in entries if everything or not e.startswith(".")]
        for entry in shown:
            if long:
                result.out(_long_entry(shell, posixpath.normpath(posixpath.join(path, entry)), entry).encode())
            else:
                result.out(f"{entry}\n".encode())


def _cd(shell: _Shell, args: Sequence[str], result: ExecResult) -> None:
    target = shell.path(args[0] if args else "/")
    if not _is_dir(shell.spec, target):
        result.err(f"sh: cd: can't cd to {(args or ['/'])[0][:100]}: No such file or directory\n".encode())
        result.code = 2
        return
    shell.cwd = target


def _one(shell: _Shell, argv: Sequence[str], result: ExecResult, *, in_shell: bool = False) -> None:
    spec = shell.spec
    program, args = posixpath.basename(argv[0]), list(argv[1:])
    env = dict(spec.env)
    env.setdefault("HOSTNAME", spec.hostname)
    if program == "cat":
        _cat(shell, args, result)
    elif program == "ls":
        _ls(shell, args, result)
    elif program == "cd" and in_shell and argv[0] == "cd":
        _cd(shell, args, result)
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
        result.out(f"{shell.cwd}\n".encode())
    elif program in ("true", "false"):
        result.code = 0 if program == "true" else 1
    elif program in ("test", "[") and len(args) >= 2 and args[0] in ("-e", "-f", "-d"):
        path = shell.path(args[1])
        host = spec.host_path(path)
        exists = host is not None and host.exists()
        result.code = 0 if (args[0] == "-e" and (exists or _is_dir(spec, path))) or (
            args[0] == "-f" and exists and host is not None and host.is_file()) or (
            args[0] == "-d" and _is_dir(spec, path)) else 1
    elif program in ("sh", "bash", "ash") and len(args) >= 2 and args[0] == "-c":
        _script(shell, args[1], result)
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


def _script(outer: _Shell, text: str, result: ExecResult) -> None:
    """``sh -c TEXT``: commands chained with ``&&`` (stop at the first failure) or ``;``; ``$NAME`` expanded; a
    ``cd`` moves the working directory of the commands after it (in this shell only)."""
    shell = _Shell(outer.spec, outer.cwd)
    env = dict(shell.spec.env)
    env.setdefault("HOSTNAME", shell.spec.hostname)
    try:
        # ; & | < > end a word as in a shell ("cd /x; ls"), unless quoted
        lexer = shlex.shlex(expand_parameters(text[:10_000], env), posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as e:
        result.err(f"sh: syntax error: {e}\n".encode())
        result.code = 2
        return
    command: list[str] = []
    for word in [*words, ";"]:
        if word in ("&&", ";"):
            if command:
                result.code = 0
                _one(shell, command, result, in_shell=True)
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
    _one(_Shell(spec), list(argv), result)
    return result
