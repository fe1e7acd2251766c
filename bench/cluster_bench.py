"""Benchmark: time from creating a 3-replica StatefulSet with CSI volumes to all Pods Ready.

Runs kubesim in-process with 3 nodes and the minimal test CSI driver (which answers at once), so the number is
the simulation's own overhead: scheduling, provisioning over gRPC, publishing and status propagation. Prints JSON.

    python bench/cluster_bench.py [--runs N] [--replicas R] [--policy OrderedReady|Parallel]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim


def _statefulset(name: str, replicas: int, policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": policy,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "sim",
                        "resources": {"requests": {"storage": "1"}},
                    },
                }
            ],
        },
    }


async def _wait_ready(api: Any, name: str, replicas: int) -> None:
    items, version = await api.list("statefulsets.apps", "default")
    for item in items:
        if item["metadata"]["name"] == name and item.get("status", {}).get("readyReplicas") == replicas:
            return
    async for _, obj in api.watch("statefulsets.apps", "default", resource_version=version):
        if obj["metadata"]["name"] == name and obj.get("status", {}).get("readyReplicas") == replicas:
            return


async def run_once(replicas: int, policy: str) -> float:
    state = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))
    driver = SimpleCsiDriver()
    try:
        async with KubeSim(nodes=3, state_dir=state, tls=False) as sim:
            assert sim.cluster is not None
            await deploy(sim.cluster, driver)
            start = time.perf_counter()
            await sim.api.create(
                "statefulsets.apps", _statefulset("bench", replicas, policy), namespace="default"
            )
            await asyncio.wait_for(_wait_ready(sim.api, "bench", replicas), 60)
            return time.perf_counter() - start
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--policy", choices=["OrderedReady", "Parallel"], default="OrderedReady")
    args = parser.parse_args()
    samples = [await run_once(args.replicas, args.policy) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "benchmark": "statefulset_csi_ready",
                "replicas": args.replicas,
                "nodes": 3,
                "pod_management_policy": args.policy,
                "runs": args.runs,
                "seconds": {
                    "min": round(min(samples), 4),
                    "median": round(statistics.median(samples), 4),
                    "max": round(max(samples), 4),
                },
                "samples": [round(s, 4) for s in samples],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
