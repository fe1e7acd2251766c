"""What ``skupper`` prints where upstream's CLI (2.2.1, cobra and pflag) defines it, byte for byte: unknown commands
(with cobra's suggestions) and flags, values a flag cannot take, ``version``, ``link status``, ``site status``, the
``--wait`` choices, ``-o json|yaml``, and a token file that holds no AccessToken. The expected texts are upstream's
(its source, and its binary run against the same kubesim cluster: docs/skupper-cli.md); the help and usage texts
around them are ours, in cobra's layout. Also: shell completion scripts complete verbs, flags and values."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli_cluster
from cli_support import run_in as skupper

from kubesim.sim import KubeSim
from service_network.skupper.formats import encode
from service_network.skupper.version import cli_version

GLOBAL_FLAGS = ("Global Flags:\n"
                "  -c, --context string      Set the kubeconfig context\n"
                "      --kubeconfig string   Path to the kubeconfig file to use\n"
                "  -n, --namespace string    Set the namespace\n")


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with cli_cluster(tmp_path / "kubeconfig") as server:
        yield server


async def create(sim: KubeSim, kind: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> None:
    resource = f"{kind.lower()}s.skupper.io"
    await sim.api.create(resource, {"apiVersion": "skupper.io/v2alpha1", "kind": kind,
                                    "metadata": {"name": name, "namespace": "west"}, "spec": spec}, "west")
    await sim.api.patch(resource, name, {"status": status}, namespace="west", subresource="status")


READY = {"status": "Ready", "message": "OK", "conditions": [
    {"type": "Ready", "status": "True", "reason": "Ready", "message": "OK",
     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


# ---- cobra's and pflag's words -------------------------------------------------------------------------------------

async def test_an_unknown_command_gets_cobras_words_and_suggestions() -> None:
    assert await skupper("sitex") == (
        1, 'unknown command "sitex" for "skupper"\n\nDid you mean this?\n\tsite\n\n',
        'Error: unknown command "sitex" for "skupper"\n\nDid you mean this?\n\tsite\n\n'
        "Run 'skupper --help' for usage.\n")
    assert await skupper("bogus") == (1, 'unknown command "bogus" for "skupper"\n',
                                      'Error: unknown command "bogus" for "skupper"\n'
                                      "Run 'skupper --help' for usage.\n")
    assert (await skupper("help"))[:2] == (1, 'unknown command "help" for "skupper"\n')   # upstream hides it too


async def test_an_unknown_subcommand_shows_the_groups_help() -> None:
    code, out, err = await skupper("site", "bogus")
    assert (code, err) == (0, "")
    assert "\nUsage:\n  skupper site [command]\n" in out and "\nAvailable Commands:\n  create      " in out


@pytest.mark.parametrize(("args", "message"), [
    (["version", "--bogus"], "unknown flag: --bogus"),
    (["version", "--bogus=1"], "unknown flag: --bogus"),
    (["version", "-x"], "unknown shorthand flag: 'x' in -x"),
    (["version", "---x"], "bad flag syntax: ---x"),
    (["version", "-n"], "flag needs an argument: 'n' in -n"),
    (["version", "--namespace"], "flag needs an argument: --namespace"),
])
async def test_a_flag_that_cannot_be_parsed_gets_pflags_words_and_the_usage(args: list[str], message: str) -> None:
    code, out, err = await skupper(*args)
    assert (code, out) == (1, message + "\n")
    assert err.startswith(f"Error: {message}\nUsage:\n  skupper version [flags]\n\nFlags:\n"
                          f"  -h, --help   help for version\n\n{GLOBAL_FLAGS}")
    assert err.endswith("\n\n")                  # cobra prints the usage with Println: one more newline


@pytest.mark.parametrize(("args", "message"), [
    (["site", "create", "west", "--timeout", "60"],
     'invalid argument "60" for "--timeout" flag: time: missing unit in duration "60"'),
    (["site", "create", "west", "--timeout=5x"],
     'invalid argument "5x" for "--timeout" flag: time: unknown unit "x" in duration "5x"'),
    (["site", "create", "west", "--timeout", "soon"],
     'invalid argument "soon" for "--timeout" flag: time: invalid duration "soon"'),
    (["site", "delete", "--wait=maybe"],
     'invalid argument "maybe" for "--wait" flag: strconv.ParseBool: parsing "maybe": invalid syntax'),
    (["token", "issue", "t.yaml", "--redemptions-allowed", "x"],
     'invalid argument "x" for "--redemptions-allowed" flag: strconv.ParseInt: parsing "x": invalid syntax'),
    (["listener", "update", "db", "--port", "80a"],
     'invalid argument "80a" for "--port" flag: strconv.ParseInt: parsing "80a": invalid syntax'),
    (["token", "issue", "t.yaml", "-r", "2"], "unknown shorthand flag: 'r' in -r"),   # 2.1 dropped the shorthand
])
async def test_a_value_a_flag_cannot_take(args: list[str], message: str) -> None:
    code, out, err = await skupper(*args)
    assert (code, out) == (1, message + "\n")
    assert err.startswith(f"Error: {message}\nUsage:\n  skupper {' '.join(args[:2])} ")


async def test_flags_stand_anywhere_and_booleans_take_only_equals() -> None:
    expected = (await skupper("listener", "generate", "db", "5432", "--routing-key", "k"))[1]
    assert expected.startswith("apiVersion: skupper.io/v2alpha1\nkind: Listener\n")
    assert (await skupper("--routing-key", "k", "listener", "generate", "db", "5432"))[1] == expected
    assert (await skupper("listener", "--routing-key=k", "generate", "db", "5432"))[1] == expected
    assert (await skupper("listener", "generate", "db", "5432", "--routing-key=k", "--", "-o"))[:2] == (
        2, "only two arguments are allowed for this command\n")
    code, out, _ = await skupper("site", "generate", "west", "--enable-link-access", "false")   # "false": an argument
    assert (code, out) == (2, "only one argument is allowed for this command.\n")
    assert "linkAccess" not in (await skupper("site", "generate", "west", "--enable-link-access=false"))[1]


async def test_version_prints_the_version_alone() -> None:
    assert cli_version() == importlib.metadata.version("listener-operator")
    assert await skupper("version") == (0, cli_version() + "\n", "")
    assert await skupper("version", "extra") == (0, cli_version() + "\n", "")     # arguments ignored, as upstream


# ---- against the API -----------------------------------------------------------------------------------------------

async def test_wait_choices_are_listed_in_upstreams_order(sim: KubeSim) -> None:
    assert (await skupper("site", "create", "west", "--wait", "bogus", sim=sim))[:2] == (
        2, "status is not valid: value bogus not allowed. It should be one of this options: [ready configured none]\n")
    assert (await skupper("listener", "create", "db", "5432", "--wait", "soon", sim=sim))[:2] == (
        2, "status is not valid: value soon not allowed. It should be one of this options: [ready configured none]\n")


async def test_site_status_and_link_status_as_upstream(sim: KubeSim) -> None:
    assert (await skupper("link", "status", sim=sim))[:2] == (2, "there is no skupper site available\n")
    assert (await skupper("site", "status", sim=sim))[:2] == (0, "There is no existing Skupper site resource\n")
    await create(sim, "Site", "west", {}, READY)
    assert await skupper("site", "status", sim=sim) == (0, "NAME\tSTATUS\tMESSAGE\nwest\tReady\tOK\n", "")
    assert await skupper("link", "status", sim=sim) == (0, "There are no link resources in the namespace\n", "")
    await create(sim, "Link", "link-east", {"cost": 1, "endpoints": [{"name": "inter-router", "host": "h",
                                                                      "port": "55671"}]}, READY)
    await create(sim, "Link", "l2", {"cost": 5, "endpoints": []}, {"status": "Pending", "message": "Not Operational"})
    assert await skupper("link", "status", sim=sim) == (
        0, "NAME\t\tSTATUS\tCOST\tMESSAGE\nl2\t\tPending\t5\tNot Operational\nlink-east\tReady\t1\tOK\n", "")
    assert await skupper("link", "status", "link-east", sim=sim) == (
        0, "Name\t: link-east\nStatus\t: Ready\nCost\t: 1\nMessage\t: OK\n", "")
    assert await skupper("link", "status", "nope", sim=sim) == (1, 'links.skupper.io "nope" not found\n', "")
    code, out, _ = await skupper("link", "status", "link-east", "-o", "json", sim=sim)
    assert code == 0 and out.startswith('{\n  "metadata": {') and out.endswith("\n}\n")  # no apiVersion: a get


async def test_connector_status_of_one_prints_upstreams_fields(sim: KubeSim) -> None:
    await create(sim, "Connector", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": 7000},
                 {**READY, "hasMatchingListener": True})
    assert await skupper("connector", "status", "backend", sim=sim) == (
        0, "Name:\t\tbackend\nStatus:\t\tReady\nRouting key:\tbackend\nSelector:\t\nHost:\t\t127.0.0.1\n"
           "Port:\t\t7000\nHas Matching Listener:true\nMessage:\tOK\n\n", "")


async def test_a_token_file_without_an_access_token_gets_the_api_servers_refusal(sim: KubeSim,
                                                                                 tmp_path: Path) -> None:
    """Upstream creates what it could decode (nothing: an AccessToken without a name) and prints the API server's
    answer; so does this command (kubesim's words here; a real API server's on a real cluster)."""
    await create(sim, "Site", "west", {}, READY)
    (tmp_path / "garbage.token").write_text("this: [is not a token\n")
    (tmp_path / "secret.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n")
    refusal = 'AccessToken.skupper.io "" is invalid: metadata.name: name or generateName is required\n'
    for name in ("garbage.token", "secret.yaml"):
        assert (await skupper("token", "redeem", name, sim=sim, cwd=tmp_path))[:2] == (1, refusal)


def test_resources_are_encoded_as_upstreams_encoders_do() -> None:
    """go-yaml v2's and encoding/json's output for the same map (checked against sigs.k8s.io/yaml v1.4.0 and Go's
    json.MarshalIndent): strings that would read as another type double-quoted, no line wrapping."""
    value = {"a": "2026-11-28T00:31:11Z", "b": "73", "c": "yes", "d": "y", "e": "1e3", "f": "plain text",
             "g": "line1\nline2\n", "i": "a: b", "n": "héllo <&>", "o": 7000, "p": True, "q": "-", "s": "Off",
             "t": ".5", "v": "x #y", "w": ["a", {"z": "1"}], "x": "w" * 100, "zero": 0, "empty": ""}
    assert encode(value, "yaml") == (
        'a: "2026-11-28T00:31:11Z"\nb: "73"\nc: "yes"\nd: "y"\ne: "1e3"\nf: plain text\ng: |\n  line1\n  line2\n'
        "i: 'a: b'\n\"n\": héllo <&>\no: 7000\np: true\nq: '-'\ns: \"Off\"\nt: \".5\"\nv: 'x #y'\nw:\n- a\n"
        f'- z: "1"\nx: {"w" * 100}\n')
    assert encode({"n": "héllo <&>", "o": 7000}, "json") == '{\n  "n": "héllo \\u003c\\u0026\\u003e",\n  "o": 7000\n}'


# ---- completion ----------------------------------------------------------------------------------------------------

def bash_complete(script: Path, *words: str) -> list[str]:
    """What the script's completion function offers for the command line ``words`` (the last: being typed)."""
    listing = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\nCOMP_WORDS=({listing})\nCOMP_CWORD={len(words) - 1}\n"
               '__skupper_complete\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          timeout=30, check=True)
    return [line for line in done.stdout.splitlines() if line]


async def test_bash_completion_completes_verbs_flags_and_values(tmp_path: Path) -> None:
    code, out, err = await skupper("completion", "bash")
    assert (code, err) == (0, "")
    script = tmp_path / "skupper.bash"
    script.write_text(out)
    assert bash_complete(script, "skupper", "si") == ["site"]
    assert bash_complete(script, "skupper", "l") == ["link", "listener"]
    assert bash_complete(script, "skupper", "site", "") == ["create", "delete", "generate", "status", "update"]
    assert bash_complete(script, "skupper", "-n", "west", "listener", "cr") == ["create"]
    assert bash_complete(script, "skupper", "site", "create", "west", "--ti") == ["--timeout"]
    assert bash_complete(script, "skupper", "site", "status", "--") == [
        "--context", "--help", "--kubeconfig", "--namespace", "--output", "--platform"]
    assert bash_complete(script, "skupper", "site", "status", "-o", "") == ["json", "yaml"]
    assert bash_complete(script, "skupper", "site", "create", "w", "--wait=r") == ["--wait=ready"]
    assert bash_complete(script, "skupper", "listener", "create", "db", "--wait", "") == [
        "ready", "configured", "none"]


@pytest.mark.parametrize("shell", ["zsh", "fish", "powershell"])
async def test_the_other_shells_get_a_script_for_every_verb(shell: str, tmp_path: Path) -> None:
    code, out, err = await skupper("completion", shell)
    assert (code, err) == (0, "")
    for word in ("site", "listener", "connector", "token", "link", "debug", "system", "version", "--timeout",
                 "--output", "ready"):
        assert word in out
    script = tmp_path / f"skupper.{shell}"
    script.write_text(out)
    syntax_check(shell, script)


def syntax_check(shell: str, script: Path) -> None:
    """The shell's own syntax check of the script, where the shell is installed."""
    checker = {"zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"], "powershell": []}[shell]
    if checker and shutil.which(checker[0]):
        subprocess.run([*checker, str(script)], check=True, timeout=30)
