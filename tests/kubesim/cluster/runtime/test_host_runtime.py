"""Containers run as host processes (``runtime.hostprocess``): a small program of a registered image sees what a
container would - its arguments with ``$(VAR)`` expanded and paths translated into its volumes, the environment the
kubelet builds (downward API, ConfigMap keys, resources, the API server's address), its ServiceAccount token - and
kubesim's kubelet manages the process like a container (readiness on the Pod IP, stop on delete, restarts and
CrashLoopBackOff, ``executable file not found``, logs)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from clusterhelpers import wait_for, wait_for_event
from traffichelpers import FAST_RESTARTS, NS, container, eventually, pod, ready_pod

from kubesim.cluster.runtime.hostprocess import HostImage, HostProcessHandler
from kubesim.sim import KubeSim
from kubesim.testing.traffic import who_answers

PROBE = textwrap.dedent('''\
    import http.server, json, os, signal, socket, sys
    options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--") and "=" in arg)
    if options.get("fail"):
        print("probe: failing on purpose with", options["fail"], flush=True)
        sys.exit(int(options["fail"]))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(options["socket"])
    names = ["POD_NAME", "MY_NODE", "MY_IP", "FROM_CONFIG", "MEMORY_MI", "KUBERNETES_SERVICE_HOST",
             "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_ACCOUNT_DIR", "HOSTNAME", "PATH", "DATA_DIR", "KUBECONFIG"]
    record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(), "env": {n: os.environ.get(n) for n in names}}
    with open(options["out"], "w") as out:
        json.dump(record, out)
    class Hostname(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = os.environ["HOSTNAME"].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    host, port = options["listen"].rsplit(":", 1)
    server = http.server.HTTPServer((host, int(port)), Hostname)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("probe: serving on", options["listen"], flush=True)
    server.serve_forever()
''')


@pytest_asyncio.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "probe"
    program.write_text(f"#!{sys.executable}\n{PROBE}")
    program.chmod(0o755)
    async with KubeSim(nodes=1, **FAST_RESTARTS) as running:
        assert running.cluster is not None
        image = HostImage(entrypoint=("/app/bin/probe",), programs={"/app/bin": bin_dir},
                          env={"PATH": "/app/bin:/usr/bin:/bin"})
        running.cluster.runtime.register("example.test/probe", HostProcessHandler(image))
        yield running


def probe_pod(name: str, *args: str, **fields: Any) -> dict[str, Any]:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "FROM_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
        {"name": "MEMORY_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "DATA_DIR", "value": "/data"},
    ]
    probe = container("probe", "example.test/probe:1", args=list(args), ports=[("http", 8080)], env=env,
                      resources={"limits": {"memory": "96Mi"}},
                      volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "sock", "mountPath": "/sock"}],
                      **fields)
    return pod(name, probe, serviceAccountName="probe",
               volumes=[{"name": "data", "emptyDir": {}}, {"name": "sock", "emptyDir": {}}])


async def settings(sim: KubeSim, *, account: bool = True) -> None:
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "settings", "namespace": NS},
                                        "data": {"greeting": "hello"}}, NS)
    if account:
        await sim.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                 "metadata": {"name": "probe", "namespace": NS}}, NS)


async def run(*argv: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert not check or process.returncode == 0, out.decode()
    return out.decode()


def same_file(first: str | Path, second: str | Path) -> bool:
    return os.path.samefile(first, second)


def volume_dir(sim: KubeSim, running: dict[str, Any], volume: str, plugin: str = "kubernetes.io~empty-dir") -> Path:
    assert sim.cluster is not None
    return (sim.cluster.kubelet_dir(running["spec"]["nodeName"]) / "pods" / running["metadata"]["uid"] / "volumes"
            / plugin / volume)


async def test_a_host_process_sees_its_container_environment(sim: KubeSim) -> None:
    await settings(sim)
    await sim.api.create("pods", probe_pod("probe", "--out=$(DATA_DIR)/out.json", "--socket=/sock/app.sock",
                                           "--listen=0.0.0.0:8080", "--name=$(POD_NAME)", "$$(POD_NAME)",
                                           readinessProbe={"tcpSocket": {"port": "http"}, "periodSeconds": 1}), NS)
    running = await ready_pod(sim.api, "probe")  # Ready: its readiness probe reached the port on the Pod IP
    pod_ip = running["status"]["podIP"]
    assert await who_answers(pod_ip, 8080) == "probe"  # HOSTNAME is the Pod's
    record = json.loads((volume_dir(sim, running, "data") / "out.json").read_text())

    out, sock, listen, name, literal = record["argv"]
    assert out.startswith("--out=") and out.endswith("/data/out.json") and len(out) < 60  # through the short view
    assert same_file(out.removeprefix("--out="), volume_dir(sim, running, "data") / "out.json")
    socket_path = sock.removeprefix("--socket=")
    assert len(socket_path) < 108
    assert stat.S_ISSOCK(os.stat(volume_dir(sim, running, "sock") / "app.sock").st_mode)
    assert listen == f"--listen={pod_ip}:8080"  # never every interface
    assert (name, literal) == ("--name=probe", "$(POD_NAME)")
    env = record["env"]
    assert (env["POD_NAME"], env["MY_NODE"], env["MY_IP"]) == ("probe", running["spec"]["nodeName"], pod_ip)
    assert (env["FROM_CONFIG"], env["MEMORY_MI"], env["HOSTNAME"]) == ("hello", "96", "probe")
    assert env["KUBECONFIG"] is None  # nothing of kubesim's own environment
    assert env["PATH"].split(":")[0].endswith("/bin") and "/app/bin" not in env["PATH"]
    assert (env["KUBERNETES_SERVICE_HOST"], int(env["KUBERNETES_SERVICE_PORT"])) == (
        "127.0.0.1", int(sim.url.rsplit(":", 1)[1]))

    # The token volume: an in-cluster client finds it through KUBERNETES_SERVICE_ACCOUNT_DIR and is the
    # ServiceAccount (which no role grants anything: 403, not 401).
    account_dir = Path(env["KUBERNETES_SERVICE_ACCOUNT_DIR"])
    assert (account_dir / "namespace").read_text() == NS
    token = (account_dir / "token").read_text()
    async with aiohttp.ClientSession() as session, session.get(
            f"{sim.url}/api/v1/namespaces/{NS}/pods", ssl=False,
            headers={"Authorization": f"Bearer {token}"}) as answer:
        assert answer.status == 403
        assert 'User "system:serviceaccount:default:probe"' in (await answer.json())["message"]

    # Deleting the Pod stops the process (SIGTERM), and the token dies with the Pod.
    await sim.api.delete("pods", "probe", NS)
    await wait_for(sim.api, "pods", "probe", NS, lambda found: found is None)
    with pytest.raises(ProcessLookupError):
        os.kill(record["pid"], 0)
    async with aiohttp.ClientSession() as session, session.get(
            f"{sim.url}/api/v1/namespaces/{NS}/pods", ssl=False,
            headers={"Authorization": f"Bearer {token}"}) as answer:
        assert answer.status == 401


async def test_a_crashing_program_goes_into_crash_loop_back_off_with_its_output_logged(sim: KubeSim) -> None:
    await settings(sim)
    await sim.api.create("pods", probe_pod("crasher", "--fail=3"), NS)

    def backing_off(found: dict[str, Any] | None) -> bool:
        statuses = (found or {}).get("status", {}).get("containerStatuses") or []
        return bool(statuses) and (statuses[0].get("state", {}).get("waiting") or {}).get("reason") == \
            "CrashLoopBackOff"

    found = await wait_for(sim.api, "pods", "crasher", NS, backing_off)
    assert found is not None
    status = found["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert sim.cluster is not None
    log = sim.cluster.container_log_path(NS, "crasher", "probe")
    assert log is not None
    assert log.read_text().count("probe: failing on purpose with 3") >= 2
    # kubectl logs reads the same file through the API server (pods/log)
    kubectl = [str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path)]
    assert await run(*kubectl, "logs", "crasher") == await asyncio.to_thread(log.read_text)
    assert (await run(*kubectl, "logs", "crasher", "-c", "probe", "--tail=1")).strip() == \
        "probe: failing on purpose with 3"
    refused = await run(*kubectl, "logs", "crasher", "--previous", check=False)
    assert "previous is not available" in refused


async def test_a_program_outside_the_image_does_not_start(sim: KubeSim) -> None:
    await settings(sim)
    await sim.api.create("pods", probe_pod("lost", command=["/usr/bin/env"]), NS)
    await wait_for_event(sim.api, NS, "BackOff", "lost")

    async def start_error() -> str | None:
        found = await sim.api.get("pods", "lost", NS)
        statuses = found["status"].get("containerStatuses") or []
        terminated = (statuses[0].get("lastState") or {}).get("terminated") if statuses else None
        return (terminated or {}).get("message")

    message = await eventually(start_error, 10, "the StartError message")
    assert 'exec: "/usr/bin/env": no such file in the image\'s programs on this machine' in message


async def test_a_missing_configmap_keeps_the_container_from_starting(sim: KubeSim) -> None:
    await sim.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                 "metadata": {"name": "probe", "namespace": NS}}, NS)
    await sim.api.create("pods", probe_pod("unconfigured", "--out=/data/out.json", "--socket=/sock/s.sock",
                                           "--listen=0.0.0.0:8080"), NS)
    event = await wait_for_event(sim.api, NS, "Failed", "unconfigured")
    assert event["message"] == 'Error: configmap "settings" not found'
    found = await sim.api.get("pods", "unconfigured", NS)
    assert found["status"]["phase"] == "Pending" and not found["status"].get("containerStatuses")
    await settings(sim, account=False)  # the kubelet retries: once the ConfigMap exists the container runs
    await ready_pod(sim.api, "unconfigured", within=30)


def _process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie not yet reaped by init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")


async def test_a_stop_cancelled_during_the_grace_period_still_kills_the_process_group(tmp_path: Path) -> None:
    """A container stopping with a long grace period, whose stop is cancelled (the kubelet stops meanwhile): the
    process that ignores SIGTERM, and the child it started, are killed all the same."""
    from kubesim.cluster.runtime.hostprocess import HostProcess

    pid_file = tmp_path / "child.pid"
    script = ("import os, signal, subprocess, sys, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
              "time.sleep(60)\n")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, start_new_session=True)
    with (tmp_path / "log").open("wb") as log:
        container = HostProcess(process, log)
        async def child_started() -> str | bool:
            return pid_file.exists() and pid_file.read_text()
        await eventually(child_started, 10, "the child started")
        child = int(pid_file.read_text())
        stopping = asyncio.create_task(container.stop(60))
        await asyncio.sleep(0.2)                      # SIGTERM sent and ignored; the grace period runs
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        await asyncio.wait_for(process.wait(), 5)     # the main process was killed
        assert process.returncode == -9

        async def child_gone() -> bool:
            return _process_gone(child)
        await eventually(child_gone, 5, "the child killed with its group")
