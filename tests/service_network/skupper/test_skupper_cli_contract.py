"""The ``skupper`` command's contract, verb by verb: the objects it creates for given flags (upstream's defaults:
host and routing key = the name, selector ``app=<name>``, ``linkAccess: default``, ...), what ``generate`` prints,
and upstream's words and exit codes for bad input (2: arguments and flags, 1: the cluster refused or flag
parsing). Runs the installed ``skupper`` script against a kubesim API server (no nodes needed: ``--wait none``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli_cluster, cli_env
from cli_support import run_in as run

from kubesim.sim import KubeSim

NAME_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])*(\.[a-z0-9]([-a-z0-9]*[a-z0-9])*)*$"


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with cli_cluster(tmp_path / "kubeconfig") as server:
        yield server


# ---- generate: no cluster --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "expected"), [
    (["site", "generate", "west", "--enable-link-access"],
     "apiVersion: skupper.io/v2alpha1\nkind: Site\nmetadata:\n  name: west\nspec:\n  linkAccess: default\n"),
    (["site", "generate", "west", "--enable-ha"],
     "apiVersion: skupper.io/v2alpha1\nkind: Site\nmetadata:\n  name: west\nspec:\n  ha: true\n"),
    (["listener", "generate", "backend", "8080"],
     "apiVersion: skupper.io/v2alpha1\nkind: Listener\nmetadata:\n  name: backend\nspec:\n  host: backend\n"
     "  port: 8080\n  routingKey: backend\n  type: tcp\n"),
    (["connector", "generate", "backend", "8080", "--routing-key", "be", "--include-not-ready"],
     "apiVersion: skupper.io/v2alpha1\nkind: Connector\nmetadata:\n  name: backend\nspec:\n"
     "  includeNotReadyPods: true\n  port: 8080\n  routingKey: be\n  selector: app=backend\n  type: tcp\n"),
    (["connector", "generate", "db", "5432", "--host", "db.example", "-n", "east"],
     "apiVersion: skupper.io/v2alpha1\nkind: Connector\nmetadata:\n  name: db\n  namespace: east\nspec:\n"
     "  host: db.example\n  port: 5432\n  routingKey: db\n  type: tcp\n"),
])
async def test_generate_prints_upstreams_objects(args: list[str], expected: str) -> None:
    code, out, err = await run(*args)
    assert (code, out) == (0, expected + "\n"), err


@pytest.mark.parametrize(("args", "code", "expected"), [
    (["listener", "generate", "backend"], 2, "listener name and port must be configured\n"),
    (["listener", "generate", "a", "1", "2"], 2, "only two arguments are allowed for this command\n"),
    (["listener", "generate", "Bad_Name", "80"], 2,
     f"listener name is not valid: value does not match this regular expression: {NAME_RE}\n"),
    (["listener", "generate", "web", "http"], 2,
     'listener port is not valid: strconv.Atoi: parsing "http": invalid syntax\n'),
    (["connector", "generate", "web", "80", "--host", "10.0.0.1", "--selector", "a=b"], 2,
     "If host is configured, cannot configure workload or selector\n"
     "If selector is configured, cannot configure workload or host\n"),
    (["connector", "generate", "web", "80", "--workload", "pod/web"], 2,
     "workload is not valid: resource-type does not match expected value: deployment/service/daemonset/statefulset\n"),
    (["site", "generate", "west", "--link-access-type", "route"], 2,
     "for the site to work with this type of linkAccess, the --enable-link-access option must be set to true\n"),
    (["site", "generate", "west", "--enable-link-access", "--link-access-type", "ingress"], 2,
     "link access type is not valid: value ingress not allowed. It should be one of this options: "
     "[route loadbalancer default nodeport local]\n"),
])
async def test_bad_input_gets_upstreams_words_and_exit_code(args: list[str], code: int, expected: str) -> None:
    assert (await run(*args))[:2] == (code, expected)


async def test_flag_errors_are_reported_as_cobra_does() -> None:
    code, out, err = await run("listener", "generate", "a", "1", "--no-such-flag")
    assert code == 1 and err.startswith("Error: unknown flag: --no-such-flag\nUsage:\n"
                                        "  skupper listener generate <name> <port> [flags]\n")
    assert out == "unknown flag: --no-such-flag\n"                    # cobra's message, printed again
    code, out, _ = await run("site", "create", "west", "--timeout", "60")
    assert (code, out) == (1, 'invalid argument "60" for "--timeout" flag: time: missing unit in duration "60"\n')


# ---- against the API ---------------------------------------------------------------------------------------------

async def test_objects_created_for_the_flags(sim: KubeSim, tmp_path: Path) -> None:
    async def get(resource: str, name: str) -> dict[str, Any]:
        return await sim.api.get(f"{resource}.skupper.io", name, "west")

    assert (await run("site", "create", "west", "--enable-link-access", "--link-access-type", "loadbalancer",
                      "--wait", "none", sim=sim))[:2] == (0, "")
    assert (await get("sites", "west"))["spec"] == {"linkAccess": "loadbalancer"}
    assert (await run("site", "create", "other", "--wait", "none", sim=sim))[:2] == (
        2, "There is already a site created for this namespace\n")
    assert (await run("site", "update", "--enable-ha", "--wait", "none", "--timeout", "5s", sim=sim))[:2] == (
        2, "timeout is not valid: duration must not be less than 10s; got 5s\n")
    assert (await run("site", "update", "--enable-ha", "--wait", "none", sim=sim))[0] == 0
    assert (await get("sites", "west"))["spec"] == {"linkAccess": "loadbalancer", "ha": True}

    assert (await run("listener", "create", "backend", "8080", "--wait", "none", sim=sim))[:2] == (0, "")
    assert (await get("listeners", "backend"))["spec"] == {"host": "backend", "port": 8080, "routingKey": "backend",
                                                           "type": "tcp"}
    assert (await run("listener", "create", "backend", "8080", "--wait", "none", sim=sim))[:2] == (
        2, "There is already a listener backend created for namespace west\n")
    assert (await run("listener", "create", "tls", "443", "--tls-credentials", "nope", "--wait", "none",
                      sim=sim))[:2] == (2, "tls-secret is not valid: does not exist\n")
    assert (await run("listener", "update", "backend", "--port", "9090", "--wait", "none", sim=sim))[0] == 0
    assert (await get("listeners", "backend"))["spec"]["port"] == 9090
    assert (await get("listeners", "backend"))["spec"]["routingKey"] == "backend"       # kept
    assert (await run("listener", "update", "nope", "--wait", "none", sim=sim))[:2] == (
        2, "listener nope must exist in namespace west to be updated\n")

    await sim.api.create("deployments.apps", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db", "namespace": "west"},
        "spec": {"selector": {"matchLabels": {"tier": "data", "app": "db"}},
                 "template": {"metadata": {"labels": {"tier": "data", "app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "db"}]}}}}, "west")
    assert (await run("connector", "create", "db", "5432", "--workload", "deployment/db", "--wait", "none",
                      sim=sim))[:2] == (0, "")
    assert (await get("connectors", "db"))["spec"] == {"port": 5432, "routingKey": "db", "selector": "app=db,tier=data",
                                                       "type": "tcp"}
    code, out, _ = await run("connector", "create", "web", "80", "--workload", "deployment/nope", "--wait", "none",
                             sim=sim)
    assert code == 2 and out.startswith("failed trying to get Deployment specified by workload: ")
    assert (await run("connector", "update", "db", "--selector", "app=db2", "--include-not-ready", "--wait", "none",
                      sim=sim))[0] == 0
    spec = (await get("connectors", "db"))["spec"]
    assert (spec["selector"], spec["includeNotReadyPods"]) == ("app=db2", True)

    # the site is not Ready (no controller here): tokens cannot be issued; a missing file cannot be redeemed
    assert (await run("token", "issue", "t.yaml", sim=sim, cwd=tmp_path))[:2] == (
        2, "there is no active skupper site in this namespace\n")
    code, out, _ = await run("token", "redeem", "missing.yaml", sim=sim, cwd=tmp_path)
    assert code == 2 and "token file does not exist: " in out

    status = (await run("listener", "status", sim=sim))[1].splitlines()
    assert status[0].split() == ["NAME", "STATUS", "ROUTING-KEY", "HOST", "PORT", "MATCHING-CONNECTOR", "MESSAGE"]
    assert status[1].split() == ["backend", "backend", "backend", "9090", "false"]
    assert (await run("listener", "delete", "backend", sim=sim))[:2] == (0, 'Listener "backend" deleted\n')
    assert (await run("listener", "delete", "backend", sim=sim))[:2] == (
        2, "listener backend does not exist in namespace west\n")
    assert (await run("site", "delete", "--all", sim=sim))[:2] == (0, 'Site "west" is deleted\n')
    connectors, _ = await sim.api.list("connectors.skupper.io", "west")
    assert connectors == []


async def test_without_the_crds_the_command_says_how_to_install_them(tmp_path: Path) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as bare:
        code, out, _ = await run("listener", "status", sim=bare)
    assert (code, out) == (2, 'The Skupper CRDs are not yet installed. To install them, run\n'
                              '"kubectl apply -f https://skupper.io/v2/install.yaml"\n')


async def test_service_network_serves_the_same_verbs() -> None:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "service-network"), "listener", "generate", "backend", "8080",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env())
    out, _ = await process.communicate()
    assert process.returncode == 0 and (await run("listener", "generate", "backend", "8080"))[1] == out.decode()
