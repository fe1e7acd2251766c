"""csi-sanity, the Kubernetes CSI project's conformance tool (csi-test v5.6.0, ``scripts/install-csi-sanity``), run
against the CSI services as the chart runs them: ``helm template | kubectl apply`` into a kubesim node with the
project's image, then csi-sanity on the controller Pod's socket (the emptyDir the external-provisioner shares) and
the node plugin's socket (where kubelet finds it), with parameters naming a real PVC and target directories whose
``target`` is a link into kubelet's layout on the node (:func:`_path_commands`).

Every spec csi-sanity runs must pass. The specs that cannot apply to a driver like this one are skipped by name
(:data:`NOT_APPLICABLE`, with the reason; docs/behaviour.md "csi-sanity" lists them); csi-sanity skips the specs of
capabilities the driver does not advertise itself. Anything else that fails or is skipped fails this test.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml
from rendered_install import CHART_DIR
from test_install_run import BIN, NAMESPACE, ready_pods, run, until

from devenv.image import load_project_image
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience

CSI_SANITY = BIN / "csi-sanity"
PVC = "sanity-data"

#: The specs that cannot apply to this driver (a regular expression on the spec's full text -> why). The node
#: plugin publishes a volume only with the Pod information kubelet sends (podInfoOnMount: it finds the Pod, labels
#: it, writes its PodListeners) and only into a directory in kubelet's layout
#: (``<kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount``, behaviour.md "Target paths"); csi-sanity
#: publishes without Pod information, which the driver refuses by design (INVALID_ARGUMENT), and a volume it
#: provisioned has no PersistentVolume for the node to read.
NOT_APPLICABLE: dict[str, str] = {
    r"Node Service should work": "publishes without the Pod information kubelet sends",
    r"Node Service should be idempotent": "publishes without the Pod information kubelet sends",
    r"NodePublishVolume with single node multi writer capability": (
        "publishes without the Pod information kubelet sends, into <dir>/target and <dir>/other_target (not in "
        "kubelet's layout)"),
    r"NodeUnpublishVolume should remove target path": (
        "publishes without the Pod information kubelet sends before it unpublishes"),
}
#: csi-sanity's own skips that are expected: the capabilities this driver does not advertise ("... not supported"),
#: and a listener volume's size, which is none (capacity 0: "unknown").
EXPECTED_SKIP = re.compile(r"not supported$|^capacity of the volume is unknown$")
#: The specs csi-sanity v5.6.0 runs against this driver and that pass (at least).
MIN_PASSED = 24


def skip_pattern() -> str:
    return "|".join(f"({pattern})" for pattern in NOT_APPLICABLE)


async def _controller_socket(sim: KubeSim, node: str) -> Path | None:
    """The controller's CSI socket on the node's disk: in the emptyDir ``csi`` of a Ready controller Pod."""
    assert sim.cluster is not None
    pods = await ready_pods(sim, "provisioner", 2) or []
    sockets = [sim.cluster.kubelet_dir(node) / "pods" / pod["metadata"]["uid"] / "volumes"
               / "kubernetes.io~empty-dir" / "csi" / "csi.sock" for pod in pods]
    return next((s for s in sockets if s.is_socket()), None)


def _path_commands(directory: Path, kubelet: Path) -> tuple[Path, Path]:
    """``-csi.createmountpathcmd`` and ``-csi.removemountpathcmd``. csi-sanity publishes into ``<dir>/target``; the
    node plugin accepts only kubelet's layout (behaviour.md "Target paths", symbolic links resolved), so ``<dir>``
    is a new directory whose ``target`` is a link to ``<kubelet>/pods/<new uid>/volumes/kubernetes.io~csi/sanity/mount``
    (the directory kubelet would hand over; csi-sanity's cleanup unpublishes it)."""
    create, remove = directory / "create-target", directory / "remove-target"
    create.write_text("#!/bin/sh\nset -e\n"
                      f'volume="{kubelet}/pods/$(cat /proc/sys/kernel/random/uuid)/volumes/kubernetes.io~csi/sanity"\n'
                      'mkdir -p "$volume"\n'
                      f'dir=$(mktemp -d "{directory}/target-XXXXXX")\n'
                      'ln -s "$volume/mount" "$dir/target"\n'
                      'echo "$dir"\n')
    remove.write_text('#!/bin/sh\nrm -rf -- "$1"\n')
    for script in (create, remove):
        script.chmod(0o755)
    return create, remove


def _results(junit: Path) -> dict[str, tuple[str, str]]:
    """Spec name -> (passed | failed | skipped | pending, the skip message), from csi-sanity's JUnit report."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = re.sub(r"\s+", " ", case.get("name") or "").strip()
        status = case.get("status") or ""
        skipped = case.find("skipped")
        message = re.sub(r"^skipped( - )?", "", (skipped.get("message") or "") if skipped is not None else "")
        if case.find("failure") is not None or case.find("error") is not None or status in ("failed", "panicked"):
            results[name] = ("failed", "")
        elif status == "pending":
            results[name] = ("pending", "")
        elif skipped is not None or status == "skipped":
            results[name] = ("skipped", message)
        else:
            results[name] = ("passed", "")
    return results


async def test_csi_sanity_passes_every_applicable_spec(tmp_path: Path) -> None:
    assert CSI_SANITY.exists(), ("csi-sanity is not installed: scripts/install-csi-sanity (run by scripts/_venv.sh) "
                                 "builds it with Go 1.21 or later")
    async with KubeSim(nodes=1, discover_plugins=False) as sim:
        assert sim.cluster is not None
        load_project_image(sim.cluster.runtime)
        node = next(iter(sim.cluster.nodes))
        kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(tmp_path / "c")]
        rendered = await run(str(BIN / "helm"), "template", "listener-operator", str(CHART_DIR), "--namespace",
                             NAMESPACE)
        await run(*kubectl, "create", "namespace", NAMESPACE)
        await run(*kubectl, "apply", "--server-side", "-f", "-", stdin=rendered)
        await until(lambda: ready_pods(sim, "node-driver", 1), 60, "a Ready node plugin")
        found = await until(lambda: _controller_socket(sim, node), 60, "a Ready controller Pod's CSI socket")
        # a Unix socket's path has at most 107 bytes: the Pod's emptyDir is deeper, so a short link leads to it
        links = Path(tempfile.mkdtemp(prefix="sanity-", dir="/tmp"))
        controller = links / "controller.sock"
        controller.symlink_to(found)
        plugin = sim.cluster.kubelet_dir(node) / "plugins" / "listeners.stackable.tech" / "csi.sock"
        # the claim csi-sanity's CreateVolume parameters name, as the external-provisioner's would
        await sim.api.create("persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": PVC, "namespace": "default",
                         "annotations": {"listeners.stackable.tech/listener-class": "external-unstable"}},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "listeners.stackable.tech",
                     "resources": {"requests": {"storage": "1"}}}}, "default")
        parameters = tmp_path / "parameters.yaml"
        parameters.write_text(yaml.safe_dump({"csi.storage.k8s.io/pvc/name": PVC,
                                              "csi.storage.k8s.io/pvc/namespace": "default"}))
        create, remove = _path_commands(tmp_path, sim.cluster.kubelet_dir(node))
        junit = tmp_path / "junit.xml"
        log = (tmp_path / "csi-sanity.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            str(CSI_SANITY), f"-csi.endpoint=unix://{plugin}", f"-csi.controllerendpoint=unix://{controller}",
            f"-csi.testvolumeparameters={parameters}", f"-csi.createmountpathcmd={create}",
            f"-csi.removemountpathcmd={remove}", f"-csi.createstagingpathcmd={create}",
            f"-csi.removestagingpathcmd={remove}", f"-csi.junitfile={junit}", f"-ginkgo.skip={skip_pattern()}",
            "-ginkgo.no-color", "-ginkgo.v", stdout=log, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "HOME": str(tmp_path)})
        try:
            await asyncio.wait_for(process.wait(), patience(300))
        finally:
            log.close()
            shutil.rmtree(links, ignore_errors=True)
            if process.returncode is None:
                process.kill()
    output = (tmp_path / "csi-sanity.log").read_text(errors="replace")
    results = _results(junit)
    print("\n".join(f"{state:8} {name} {message}" for name, (state, message) in sorted(results.items())))
    failed = sorted(name for name, (state, _) in results.items() if state == "failed")
    assert failed == [], f"csi-sanity failed {failed}:\n{output[-20000:]}"
    assert process.returncode == 0, output[-20000:]
    by_name = {name for name, (state, message) in results.items() if state == "skipped" and not message}
    for pattern in NOT_APPLICABLE:
        assert any(re.search(pattern, name) for name in by_name), (pattern, sorted(by_name))
    assert all(any(re.search(p, name) for p in NOT_APPLICABLE) for name in by_name), sorted(by_name)
    unexpected = sorted(f"{name}: {message}" for name, (state, message) in results.items()
                        if state == "skipped" and message and not EXPECTED_SKIP.search(message))
    assert unexpected == [], unexpected
    passed = [name for name, (state, _) in results.items() if state == "passed"]
    assert len(passed) >= MIN_PASSED, sorted(passed)
