"""`listener-operator local up` and `demo`, run as a person runs them: subprocesses in a temporary directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim.testing.patience import patience

REPO = Path(__file__).resolve().parents[3]
KUBECTL = str(Path(sys.executable).parent / "kubectl")


def operator_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "listener_operator.cli", *args]


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short path: Unix socket paths under the state dir must stay below 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="lo", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Background:
    """A long-running command whose output is collected line by line."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.log = cwd / f"out-{time.monotonic_ns()}.txt"
        self._file = self.log.open("w")
        self.process = subprocess.Popen(argv, cwd=cwd, stdout=self._file, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, text=True)

    def output(self) -> str:
        return self.log.read_text()

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} not seen; exit={self.process.poll()} output:\n{self.output()}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            self._file.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._file.close()


def deep_state_dir(workdir: Path) -> Path:
    """A state directory as deep as an ordinary checkout's ``.state/local`` (over 60 characters): Unix socket paths
    are limited to 107 bytes, so nothing with a socket may live under it."""
    path = workdir / "home" / "alice" / "src" / "listener-operator-checkout" / ".state" / "local"
    assert len(str(path)) >= 60
    return path


def assert_clean(state: Path, output: str, *, stored: bool = True) -> None:
    """After a run only its logs and the stored cluster (``stored``: the run keeps one) remain in the state directory,
    its run directory is gone, no operator process of it is left, and no traceback was shown."""
    assert sorted(os.listdir(state)) == (["kubesim.db", "logs"] if stored else ["logs"]), os.listdir(state)
    run_dirs = re.findall(r"/run -> (\S+)\)", output)
    assert run_dirs, output
    for run_dir in run_dirs:
        assert not os.path.exists(run_dir), run_dir
        # the Pods' processes: operator, node plugins, the site controller, routers
        assert processes_working_in(run_dir) == [], run_dir
    assert "Traceback" not in output


def processes_working_in(directory: str) -> list[int]:
    """Processes whose working directory is (or was, before it was removed) inside ``directory``: kubesim starts
    each operator container in its view there."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(directory.rstrip("/") + "/"):
            found.append(int(entry.name))
    return found


def stop_cleanly(run: Background, sig: signal.Signals, state: Path) -> None:
    """A signal stops the run as asked (exit code 0, saying so) and leaves the state directory clean."""
    assert run.stop(sig) == 0, run.output()
    assert f"Stopping ({sig.name})" in run.output()
    assert_clean(state, run.output())


def test_demo_once_from_a_deep_state_dir_shows_listeners_and_a_volume_tree_and_leaves_it_clean(
        workdir: Path) -> None:
    state = deep_state_dir(workdir)
    result = subprocess.run(operator_command("demo", "--once", "--state-dir", str(state),
                                             "--examples", str(REPO / "examples")),
                            cwd=workdir, capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert_clean(state, output)
    # the volume is shown where a person finds it: through the state directory's run link
    assert f"{state}/run/cluster/kubelet/" in output, output
    assert "Everything came up, and every published address reached its Pods." in output
    assert "run '. .venv/bin/activate' to have them on PATH." in output      # what a new user needs next
    # A real connection to each published address reaches the Pod behind it: each per-replica Listener its own
    # replica, the shared Listener both Deployment replicas, and the Pod-less ClusterIP Listener refuses.
    for replica in range(3):
        assert re.search(rf"default/listener-broker-{replica}\s+127\.\d+\.1\.\d+:3\d{{4}}\s+-> broker-{replica} \(2 connections\)\n",
                         output), output
    web = re.search(r"default/web\s+127\.\d+\.3\.\d+:8080\s+-> (web-\S+), (web-\S+) \(4 connections\)", output)
    assert web and web.group(1) != web.group(2), output
    assert re.search(r"default/internal-api\s+internal-api\.default\.svc\.cluster\.local:9000\s+-> connection refused "
                     r"\(expected: no Pod mounts this Listener\)", output), output
    assert "FAILED" not in output
    # The table lists every Listener: three per-replica ones from the StatefulSet, the shared one, the ClusterIP one.
    for name in ("default/listener-broker-0", "default/listener-broker-1", "default/listener-broker-2",
                 "default/web", "default/internal-api"):
        assert name in output, output
    assert re.search(r"default/internal-api\s+demo-clusterip\s+ClusterIP\s+internal-api\.default\.svc\.cluster\.local "
                     r"\[grpc=9000\]", output), output
    # Per-replica NodePort listeners publish a node IP (127.B.1.x in the cluster's address block) and a nodePort.
    assert re.search(r"default/listener-broker-0\s+external-stable\s+NodePort\s+127\.\d+\.1\.\d+ \[kafka=3\d{4}\]",
                     output), output
    # The Pod's volume, as the Pod reads it.
    assert re.search(r"default-address -> addresses/127\.\d+\.1\.\d+", output), output
    assert re.search(r"kafka: '3\d{4}'", output), output
    # The service network: the Skupper-style example is Ready and a client reaches the backend Pods through the
    # Listener's Service and the site's router.
    assert re.search(r"Listener\s+hello-world/backend\s+Ready\s+OK", output), output
    assert re.search(r"client -> backend\.hello-world:8080 -> router -> backend-\S+, backend-\S+, backend-\S+ "
                     r"\(6 connections\)", output), output
    # ... and the example's NetworkObserver sees the site, the service and its three Pods
    assert re.search(r"Network observer \(NetworkObserver network-observer in hello-world, the hello-world site\): "
                     r"console https://127\.[\d.]+:8443/ \(user skupper, password \S+; [^)]*\)\n.*\n"
                     r"  sees 1 sites \(\S+\), 0 links up, 1 services, 4 processes", output), output


def kubectl_json(kubeconfig: Path, workdir: Path, *args: str) -> dict:
    result = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache"),
                             "get", *args, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_demo_objects_are_visible_to_kubectl_while_it_runs(workdir: Path) -> None:
    state = workdir / "s"
    run = Background(operator_command("demo", "--state-dir", str(state), "--examples", str(REPO / "examples")),
                     workdir)
    try:
        run.wait_for(r"Press Ctrl-C to stop", timeout=120)
        kubeconfig = state / "kubeconfig"
        listeners = kubectl_json(kubeconfig, workdir, "listeners", "-n", "default")["items"]
        by_name = {item["metadata"]["name"]: item for item in listeners}
        assert set(by_name) == {"listener-broker-0", "listener-broker-1", "listener-broker-2", "web", "internal-api"}
        for item in listeners:
            assert item["status"]["ingressAddresses"], item
            ready = [c for c in item["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", item
        # Per-replica Listeners are named after their PVCs and owned by the PVs (upstream's ownership chain).
        assert by_name["listener-broker-0"]["metadata"]["ownerReferences"][0]["kind"] == "PersistentVolume"
        pods = kubectl_json(kubeconfig, workdir, "pods", "-n", "default")["items"]
        assert len(pods) == 5
        assert all(pod["status"]["phase"] == "Running" for pod in pods)
        claims = kubectl_json(kubeconfig, workdir, "pvc", "-n", "default")["items"]
        assert {claim["status"]["phase"] for claim in claims} == {"Bound"}
        # Every Pod has a PodListeners record of its listener volume, as secret-operator expects.
        records = kubectl_json(kubeconfig, workdir, "podlisteners", "-n", "default")["items"]
        assert {record["metadata"]["name"] for record in records} == {f"pod-{pod['metadata']['uid']}" for pod in pods}
        assert all(record["spec"]["listeners"]["listener"]["ingressAddresses"] for record in records)
        # The services backing the Listeners.
        services = {svc["metadata"]["name"]: svc for svc in
                    kubectl_json(kubeconfig, workdir, "services", "-n", "default")["items"]}
        assert services["web"]["spec"]["type"] == "LoadBalancer"
        assert services["listener-broker-1"]["spec"]["type"] == "NodePort"
        # What a Pod finds in its listener volume, as a platform engineer looks: kubectl exec
        exec_result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache"), "exec", "broker-0",
             "-n", "default", "--", "cat", "/stackable/listener/default-address/address"],
            capture_output=True, text=True, timeout=60)
        published = by_name["listener-broker-0"]["status"]["ingressAddresses"][0]["address"]
        assert (exec_result.returncode, exec_result.stdout.strip()) == (0, published), exec_result.stderr
        exec_pod = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache"), "exec",
                    "broker-0", "-n", "default", "--"]
        listing = subprocess.run([*exec_pod, "sh", "-c", "cd /stackable/listener && ls"], capture_output=True,
                                 text=True, timeout=60)
        assert (listing.returncode, listing.stdout.split()) == (0, ["addresses", "default-address"]), listing.stderr
        long_listing = subprocess.run([*exec_pod, "ls", "-la", "/stackable/listener"], capture_output=True,
                                      text=True, timeout=60)
        lines = {(line.split()[-3] if " -> " in line else line.split()[-1]): line
                 for line in long_listing.stdout.splitlines()}
        assert lines["default-address"].startswith("l") and lines["default-address"].endswith(
            " default-address -> ..data/default-address"), long_listing.stdout
        assert lines["..data"].startswith("l") and " ..data -> ..v-" in lines["..data"], long_listing.stdout
        assert run.stop(signal.SIGINT) == 0, run.output()
    finally:
        run.kill()


def test_local_up_serves_kubectl_and_stops_cleanly(workdir: Path) -> None:
    state = deep_state_dir(workdir)
    run = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state)), workdir)
    try:
        kubeconfig = Path(run.wait_for(r"Ready\. kubeconfig: (\S+)").group(1))
        assert kubeconfig == state / "kubeconfig"
        listener = {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                    "metadata": {"name": "api", "namespace": "default"},
                    "spec": {"className": "cluster-internal", "ports": [{"name": "http", "port": 80}]}}
        manifest = workdir / "listener.json"
        manifest.write_text(json.dumps(listener))
        kubectl = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache")]
        subprocess.run([*kubectl, "apply", "-f", str(manifest)], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + patience(30)
        table = ""
        while time.monotonic() < deadline:
            table = subprocess.run([*kubectl, "get", "listeners,listenerclasses,pods,pvc", "-A"], capture_output=True,
                                   text=True, timeout=60).stdout
            if "api.default.svc.cluster.local" in table:
                break
            time.sleep(0.5)
        # Printer columns of the Listener CRD: class, service, first address, then ours: Ready and its reason.
        assert re.search(r"default\s+listener\.listeners\.stackable\.tech/api\s+cluster-internal\s+api\s+"
                         r"api\.default\.svc\.cluster\.local\s+\w+\s+\w+\s+\d+s", table), table
        assert re.search(r"listenerclass\.listeners\.stackable\.tech/external-stable\s+NodePort", table), table
        stop_cleanly(run, signal.SIGINT, state)
    finally:
        run.kill()


def test_local_up_twice_on_a_state_dir_resumes_the_cluster_and_fresh_starts_over(workdir: Path) -> None:
    """Stop the local cluster and start it again: its objects, and the address a Listener published, are there
    again; --fresh discards them."""
    state = workdir / "state"
    kubectl = [KUBECTL, "--kubeconfig", str(state / "kubeconfig"), "--cache-dir", str(workdir / "cache")]
    listener = {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                "metadata": {"name": "api", "namespace": "default"},
                "spec": {"className": "external-stable", "ports": [{"name": "http", "port": 80}]}}
    manifest = workdir / "listener.json"
    manifest.write_text(json.dumps(listener))

    def addresses() -> str:
        deadline = time.monotonic() + patience(30)
        found = ""
        while time.monotonic() < deadline:
            found = subprocess.run([*kubectl, "get", "listener", "api", "-o",
                                    "jsonpath={.status.ingressAddresses}"], capture_output=True, text=True,
                                   timeout=60).stdout
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError("the Listener got no address")

    first = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state)), workdir)
    try:
        first.wait_for(r"Ready\. kubeconfig: ")
        assert "the cluster is kept in" in first.output()
        subprocess.run([*kubectl, "apply", "-f", str(manifest)], check=True, capture_output=True, timeout=60)
        published = addresses()
        uid = subprocess.run([*kubectl, "get", "listener", "api", "-o", "jsonpath={.metadata.uid}"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        stop_cleanly(first, signal.SIGINT, state)
    finally:
        first.kill()

    second = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state)), workdir)
    try:
        second.wait_for(r"Ready\. kubeconfig: ")
        assert re.search(r"resumed the cluster stored in \S+kubesim\.db \(\d+ objects", second.output())
        assert subprocess.run([*kubectl, "get", "listener", "api", "-o", "jsonpath={.metadata.uid}"],
                              capture_output=True, text=True, timeout=60, check=True).stdout == uid
        assert addresses() == published
        stop_cleanly(second, signal.SIGINT, state)
    finally:
        second.kill()

    fresh = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state), "--fresh"),
                       workdir)
    try:
        fresh.wait_for(r"Ready\. kubeconfig: ")
        assert "the cluster is kept in" in fresh.output() and "resumed" not in fresh.output()
        gone = subprocess.run([*kubectl, "get", "listener", "api"], capture_output=True, text=True, timeout=60)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
        stop_cleanly(fresh, signal.SIGINT, state)
    finally:
        fresh.kill()


def plant_leftovers(state: Path) -> tuple[Path, list[Path]]:
    """What a run killed with SIGKILL, and an earlier version, left: a lock naming a dead pid, a kubeconfig of a
    server that is gone, the link to a run directory and that directory, old sockets and Pod directories."""
    state.mkdir(parents=True)
    (state / "local-up.lock").write_text("999999999")
    (state / "kubeconfig").write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n"
                                      "    server: https://127.0.0.1:9\n")
    stale_run = Path(tempfile.mkdtemp(prefix="lo-run-", dir="/tmp"))
    (stale_run / "csi").mkdir()
    (stale_run / "csi" / "controller.sock").write_text("")
    (state / "run").symlink_to(stale_run)
    legacy = [state / "csi" / "controller.sock",
              state / "cluster" / "kubelet" / "node-1" / "pods" / "old-pod-uid" / "volumes" / "x"]
    for path in legacy:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return stale_run, legacy


def test_local_up_clears_what_a_killed_run_left_and_stops_cleanly_on_sigterm(workdir: Path) -> None:
    state = deep_state_dir(workdir)
    stale_run, legacy = plant_leftovers(state)
    run = Background(operator_command("local", "up", "--nodes", "1", "--state-dir", str(state)), workdir)
    try:
        run.wait_for(r"Ready\. kubeconfig")
        assert not stale_run.exists()
        assert not any(path.exists() for path in legacy)
        assert (state / "local-up.lock").read_text() == str(run.process.pid)
        assert os.readlink(state / "run") != str(stale_run)
        assert "127.0.0.1:9" not in (state / "kubeconfig").read_text()
        stop_cleanly(run, signal.SIGTERM, state)
    finally:
        run.kill()
        shutil.rmtree(stale_run, ignore_errors=True)


def test_local_up_interrupted_while_starting_leaves_a_clean_state_dir(workdir: Path) -> None:
    state = deep_state_dir(workdir)
    run = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state)), workdir)
    try:
        run.wait_for(r"kubesim API server at")
        stop_cleanly(run, signal.SIGINT, state)
        assert "Ready." not in run.output()
    finally:
        run.kill()


def node_plugin_pids(parent: int) -> list[str]:
    """The node plugins' processes of one `local up` (kubesim runs each container as a child process)."""
    found = subprocess.run(["pgrep", "-P", str(parent), "-f", "listener-operator run node"], capture_output=True,
                           text=True).stdout.split()
    return sorted(found)


def test_local_up_reports_a_crashed_node_plugin(workdir: Path) -> None:
    """A node plugin killed once is restarted by kubesim's kubelet (reported, the run goes on); killed again, it
    is in CrashLoopBackOff, which ends the run with the container's log."""
    state = workdir / "s"
    run = Background(operator_command("local", "up", "--nodes", "2", "--state-dir", str(state)), workdir)
    try:
        run.wait_for(r"Ready\. kubeconfig")
        pids = node_plugin_pids(run.process.pid)
        assert len(pids) == 2, pids
        os.kill(int(pids[0]), signal.SIGKILL)
        run.wait_for(r"warning: operator Pod listener-operator/listener-operator-csi-node-driver-\S+: container "
                     r"csi-node-service exited \(exit code 137\) after \d restart\(s\)")
        deadline = time.monotonic() + patience(30)
        while (restarted := node_plugin_pids(run.process.pid)) == pids or len(restarted) != 2:
            assert time.monotonic() < deadline, restarted
            time.sleep(0.1)
        assert run.process.poll() is None, run.output()  # one crash does not end the run
        (again,) = set(restarted) - set(pids)
        os.kill(int(again), signal.SIGKILL)
        code = run.process.wait(60)
        output = run.output()
        assert code == 1, output
        assert re.search(r"error: operator Pod listener-operator/listener-operator-csi-node-driver-\S+: container "
                         r"csi-node-service is in CrashLoopBackOff \(exit code 137\) after 1 restart\(s\); last "
                         r"lines of \S+csi-node-service\.log:", output), output
        assert "CSI server listening on" in output  # the end of the node plugin's own log
        assert "Traceback" not in output
        # The operator's logs outlive the run.
        assert any(path.name.endswith("_csi-node-service.log") for path in (state / "logs").iterdir())
    finally:
        run.kill()


def test_second_local_up_on_the_same_state_dir_is_refused(workdir: Path) -> None:
    state = workdir / "s"
    first = Background(operator_command("local", "up", "--nodes", "1", "--state-dir", str(state)), workdir)
    try:
        first.wait_for(r"Ready\. kubeconfig")
        second = subprocess.run(operator_command("local", "up", "--nodes", "1", "--state-dir", str(state)),
                                cwd=workdir, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"another `local up` is already running on {state}" in second.stderr
        assert "Traceback" not in second.stderr + second.stdout
    finally:
        first.stop()
        first.kill()


def test_local_up_reports_a_port_in_use(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(operator_command("local", "up", "--port", str(port), "--state-dir",
                                                 str(workdir / "s")),
                                cwd=workdir, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_local_up_reports_an_unwritable_state_dir(workdir: Path) -> None:
    blocker = workdir / "file"
    blocker.write_text("not a directory")
    result = subprocess.run(operator_command("local", "up", "--state-dir", str(blocker / "state")),
                            cwd=workdir, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"state directory {blocker / 'state'} is not writable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_two_local_clusters_run_side_by_side_in_distinct_address_blocks(workdir: Path) -> None:
    first = Background(operator_command("local", "up", "--nodes", "1", "--state-dir", str(workdir / "a")), workdir)
    second = Background(operator_command("local", "up", "--nodes", "1", "--state-dir", str(workdir / "b")), workdir)
    try:
        blocks = [int(run.wait_for(r"address block (\d+) \(127\.\d+\.0\.0/16\)").group(1)) for run in (first, second)]
        assert blocks[0] != blocks[1]
        for run in (first, second):
            run.wait_for(r"Ready\. kubeconfig")
        # Asking for a block another local cluster holds is refused with the holder named, not a traceback.
        taken = subprocess.run(operator_command("local", "up", "--nodes", "1", "--address-block", str(blocks[0]),
                                                "--state-dir", str(workdir / "c")),
                               cwd=workdir, capture_output=True, text=True, timeout=60)
        assert taken.returncode == 1
        assert f"address block {blocks[0]} (127.{blocks[0]}.0.0/16) is in use by another kubesim" in taken.stderr
        assert "Traceback" not in taken.stderr + taken.stdout
    finally:
        for run in (first, second):
            run.stop()
            run.kill()


def test_local_up_refuses_a_bad_address_block(workdir: Path) -> None:
    result = subprocess.run(operator_command("local", "up", "--address-block", "300", "--state-dir",
                                             str(workdir / "s")),
                            cwd=workdir, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "--address-block must be from 1 to 254" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_local_up_no_operator_lets_a_user_rehearse_helm_install(workdir: Path) -> None:
    """``local up --no-operator``: nothing installed (no operator Pods, no CRDs); ``helm install`` of the chart then
    runs the operator from the image on the nodes, and ListenerClasses appear as on a real cluster."""
    state = deep_state_dir(workdir)
    run = Background(operator_command("local", "up", "--no-operator", "--nodes", "1", "--state-dir", str(state)),
                     workdir)
    try:
        kubeconfig = Path(run.wait_for(r"Ready\. kubeconfig: (\S+)").group(1))
        assert "nothing installed (--no-operator)" in run.output()
        assert kubectl_json(kubeconfig, workdir, "pods", "-A")["items"] == []
        helm = str(Path(sys.executable).parent / "helm")
        installed = subprocess.run(
            [helm, "--kubeconfig", str(kubeconfig), "install", "listener-operator",
             str(REPO / "deploy" / "helm" / "listener-operator"), "--namespace", "listener-operator",
             "--create-namespace"], capture_output=True, text=True, timeout=120,
            env={"HOME": str(workdir), "PATH": "/usr/bin:/bin"})
        assert installed.returncode == 0 and "STATUS: deployed" in installed.stdout, installed.stderr
        deadline = time.monotonic() + patience(120)
        classes: list[str] = []
        while time.monotonic() < deadline and "external-stable" not in classes:
            result = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(workdir / "cache"),
                                     "get", "listenerclasses", "-o", "name"], capture_output=True, text=True,
                                    timeout=60)
            classes = [line.split("/")[-1] for line in result.stdout.split()]
            time.sleep(1)
        assert "external-stable" in classes, run.output()
        stop_cleanly(run, signal.SIGINT, state)
    finally:
        run.kill()
