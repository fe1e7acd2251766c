"""`listener-operator local up` runs the service network's site controller as a Pod of the Helm chart (value
``serviceNetwork.enabled``), which applies the skupper.io CRDs: a user applies the Skupper example with kubectl, sees the statuses with kubectl, and a client reaches the backend Pods through the Listener's Service
and the site's router (a real router Pod: HAProxy run by `service-network run router`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from test_local import KUBECTL, REPO, Background, operator_command, workdir  # noqa: F401 - fixture by name

from kubesim.testing.patience import patience
from kubesim.testing.traffic import who_answers


def test_kubectl_apply_of_the_skupper_example_works_on_local_up(workdir: Path) -> None:  # noqa: F811
    state = workdir / "s"
    run = Background(operator_command("local", "up", "--nodes", "1", "--state-dir", str(state)), workdir)
    try:
        kubeconfig = Path(run.wait_for(r"Ready\. kubeconfig: (\S+)").group(1))
        kubectl = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache")]
        subprocess.run([*kubectl, "apply", "-f", str(REPO / "examples" / "service-network")], check=True,
                       capture_output=True, timeout=60)
        deadline = time.monotonic() + patience(60)
        table = ""
        while time.monotonic() < deadline:
            table = subprocess.run([*kubectl, "get", "sites,lnr,cnr", "-n", "hello-world"], capture_output=True,
                                   text=True, timeout=60).stdout
            if table.count(" Ready ") == 3:
                break
            time.sleep(0.5)
        assert table.count(" Ready ") == 3, table
        # The Site is served by the chart's site controller Pod in the release namespace, which applied the CRDs.
        site = _json(kubectl, "get", "site", "west", "-n", "hello-world")
        assert site["status"]["controller"]["namespace"] == "listener-operator", site["status"]
        controllers = _json(kubectl, "get", "pods", "-n", "listener-operator", "-l",
                            "app.kubernetes.io/role=service-network-controller")["items"]
        assert [pod["status"]["phase"] for pod in controllers] == ["Running"], controllers
        assert controllers[0]["spec"]["serviceAccountName"] == "listener-operator-service-network-controller"
        crd = _json(kubectl, "get", "crd", "sites.skupper.io", "--show-managed-fields")
        assert {entry["manager"] for entry in crd["metadata"]["managedFields"]} == {"service-network-controller"}
        service = json.loads(subprocess.run([*kubectl, "get", "service", "backend", "-n", "hello-world", "-o",
                                             "json"], capture_output=True, text=True, timeout=60).stdout)
        assert service["spec"]["selector"]["skupper.io/component"] == "router"
        pods = json.loads(subprocess.run([*kubectl, "get", "pods", "-n", "hello-world", "-l", "app=backend", "-o",
                                          "json"], capture_output=True, text=True, timeout=60).stdout)["items"]
        answers = asyncio.run(_ask(service["spec"]["clusterIP"], 8080, 6))
        assert set(answers) == {pod["metadata"]["name"] for pod in pods}, answers
        assert run.stop() == 0, run.output()
    finally:
        run.kill()


def _json(kubectl: list[str], *args: str) -> dict[str, Any]:
    result = subprocess.run([*kubectl, *args, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


async def _ask(ip: str, port: int, count: int) -> list[str]:
    answers = []
    deadline = time.monotonic() + patience(20)
    while len(answers) < count and time.monotonic() < deadline:
        try:
            answers.append(await who_answers(ip, port, seconds=3))
        except OSError:
            await asyncio.sleep(0.2)
    return answers
