"""Property: after every applied watch batch, the incrementally maintained derived tables equal a from-scratch
recomputation — under random event sequences (seeded, reproducible) produced by the simulator's churn and by our own
mutations (pods bound/started/finished/deleted or served by a DRA claim, GPUs unhealthy, cordons, device taints,
claims allocated/released, pools bumped to a new generation or losing a slice). Events travel the real path: simulator → HTTP watch → batches.
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.forms.models import model_to_dict

from inventory.k8s.types import WatchEvent
from inventory.kinds import kind_ref
from inventory.leases import lease_backend
from inventory.models import AllocationInterval, ClaimAllocation, Cluster, Device, Finding, SyncState
from inventory.services.clients import client_for
from inventory.services.derive import derive_cluster
from inventory.services.sync import _apply_events, sync_state_for
from kubesim import Simulator
from tests.inventory.conftest import _sync_once

KINDS = ("nodes", "pods", "resourceslices", "resourceclaims")
IGNORED = {"id", "updated_at", "first_seen_at"}


class Rollback(Exception):  # noqa: N818 - control flow, not an error
    pass


def snapshot(cluster: Cluster) -> dict[str, list[tuple]]:
    out = {}
    for model in (Device, Finding, AllocationInterval, ClaimAllocation):
        rows = []
        for obj in model.objects.filter(cluster=cluster):
            data = {k: v for k, v in model_to_dict(obj).items() if k not in IGNORED}
            rows.append(tuple(sorted((k, repr(v)) for k, v in data.items())))
        out[model.__name__] = sorted(rows)
    return out


def from_scratch(cluster: Cluster) -> dict[str, list[tuple]]:
    result: dict[str, list[tuple]] = {}
    try:
        with transaction.atomic():
            derive_cluster(cluster_id=cluster.pk)
            result = snapshot(cluster)
            raise Rollback
    except Rollback:
        pass
    return result


def vendor_limits(pod: dict[str, Any]) -> list[str]:
    """The extended resources the pod's first container asks for."""
    containers = pod["spec"].get("containers") or [{}]
    return [r for r in ((containers[0].get("resources") or {}).get("limits") or {}) if "/" in r]


class Mutator:
    """Random, valid changes to the simulator's objects (what a busy GPU cluster does)."""

    def __init__(self, sim: Simulator, rng: random.Random) -> None:
        self.sim, self.rng, self.n = sim, rng, 0

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return self.sim.store.objects(kind)

    def gpu_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.objects("nodes") if any("/" in k for k in n["status"].get("allocatable", {}))
                and any(k.startswith("nvidia.com/") for k in n["status"].get("allocatable", {}))]

    def bind_pod(self) -> None:
        node = self.rng.choice(self.gpu_nodes())
        resource = self.rng.choice([k for k in node["status"]["allocatable"] if k.startswith("nvidia.com/")])
        self.n += 1
        self.sim.store.create("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"prop-{self.n}", "namespace": "ml-research"},
            "spec": {"nodeName": node["metadata"]["name"], "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {resource: str(self.rng.randint(1, 2))}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]},
        })

    def finish_pod(self) -> None:
        self.n += 1
        pods = [p for p in self.objects("pods") if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                and vendor_limits(p)]  # what the node's devices count
        if pods:
            pod = copy.deepcopy(self.rng.choice(pods))
            pod["status"]["phase"] = self.rng.choice(["Succeeded", "Failed"])
            # As the kubelet reports it: when each container ended (the interval's end comes from there).
            pod["status"]["containerStatuses"] = [
                {"name": c["name"], "restartCount": 0, "ready": False, "state": {"terminated": {
                    "exitCode": 0, "startedAt": "2026-11-01T00:00:00Z", "finishedAt": f"2026-11-02T00:{self.n % 60:02d}:00Z"}}}
                for c in pod["spec"]["containers"]]
            self.sim.store.update("pods", pod, subresource="status")

    def delete_pod(self) -> None:
        pods = self.objects("pods")
        if pods:
            pod = self.rng.choice(pods)
            self.sim.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def start_or_stall_pod(self) -> None:
        """A bound pod goes Pending → Running (or back, as far as the portal can tell): what it holds is unchanged."""
        pods = [p for p in self.objects("pods") if p["spec"].get("nodeName")
                and p["status"].get("phase") in ("Pending", "Running")]
        if pods:
            pod = copy.deepcopy(self.rng.choice(pods))
            pod["status"]["phase"] = "Running" if pod["status"]["phase"] == "Pending" else "Pending"
            self.sim.store.update("pods", pod, subresource="status")

    def serve_by_claim(self) -> None:
        """The scheduler satisfies (or no longer) a pod's extended request with a generated DRA claim
        (DRAExtendedResource): the node's device-plugin units no longer hold it."""
        allocatable = {n["metadata"]["name"]: n["status"]["allocatable"] for n in self.gpu_nodes()}
        pods = [p for p in self.objects("pods") if p["status"].get("phase") in ("Pending", "Running")
                and set(vendor_limits(p)) & set(allocatable.get(p["spec"].get("nodeName"), ()))]
        if not pods:
            self.bind_pod()  # one to serve next time
        else:
            pod = copy.deepcopy(self.rng.choice(pods))
            if pod["status"].pop("extendedResourceClaimStatus", None) is None:
                pod["status"]["extendedResourceClaimStatus"] = {
                    "resourceClaimName": f"{pod['metadata']['name'][:40]}-extended", "requestMappings": [
                        {"containerName": pod["spec"]["containers"][0]["name"], "requestName": f"request-{i}",
                         "resourceName": resource} for i, resource in enumerate(sorted(vendor_limits(pod)))]}
            self.sim.store.update("pods", pod, subresource="status")

    def flap_gpu(self) -> None:
        node = copy.deepcopy(self.rng.choice(self.gpu_nodes()))
        resource = self.rng.choice([k for k in node["status"]["allocatable"] if k.startswith("nvidia.com/")])
        capacity = int(node["status"]["capacity"][resource])
        node["status"]["allocatable"][resource] = str(self.rng.randint(max(0, capacity - 2), capacity))
        self.sim.store.update("nodes", node, subresource="status")

    def cordon(self) -> None:
        node = copy.deepcopy(self.rng.choice(self.objects("nodes")))
        node["spec"]["unschedulable"] = not node["spec"].get("unschedulable", False)
        self.sim.store.update("nodes", node)

    def move_node_pool(self) -> None:
        """A node's pool label changes (DRA devices carry their node's pool)."""
        node = copy.deepcopy(self.rng.choice(self.objects("nodes")))
        labels = node["metadata"].setdefault("labels", {})
        labels[settings.PORTAL_NODE_POOL_LABELS[0]] = f"pool-{self.rng.randint(1, 3)}"
        self.sim.store.update("nodes", node)

    def flip_ready(self) -> None:
        """A node's Ready condition flips (DRA devices carry their node's schedulability)."""
        node = copy.deepcopy(self.rng.choice(self.objects("nodes")))
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None:
            conditions.append({"type": "Ready", "status": "False"})
        else:
            ready["status"] = "False" if ready.get("status") == "True" else "True"
        self.sim.store.update("nodes", node, subresource="status")

    def taint_device(self) -> None:
        slices = [s for s in self.objects("resourceslices") if s["spec"].get("devices")]
        rs = copy.deepcopy(self.rng.choice(slices))
        device = self.rng.choice(rs["spec"]["devices"])
        if device.get("taints"):
            device.pop("taints")
        else:
            device["taints"] = [{"key": "prop/ecc", "value": "x", "effect": self.rng.choice(["NoSchedule", "None"])}]
        self.sim.store.update("resourceslices", rs)

    def allocate_claim(self) -> None:
        slices = [s for s in self.objects("resourceslices") if s["spec"].get("devices")]
        rs = self.rng.choice(slices)
        device = self.rng.choice(rs["spec"]["devices"])
        self.n += 1
        self.sim.store.create("resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"prop-claim-{self.n}", "namespace": "ml-research"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": rs["spec"]["driver"], "pool": rs["spec"]["pool"]["name"],
                 "device": device["name"], "adminAccess": self.rng.random() < 0.2}]}}},
        })

    def release_claim(self) -> None:
        claims = [c for c in self.objects("resourceclaims") if (c.get("status") or {}).get("allocation")]
        if claims:
            claim = copy.deepcopy(self.rng.choice(claims))
            if self.rng.random() < 0.5:
                self.sim.store.delete("resourceclaims", claim["metadata"]["namespace"], claim["metadata"]["name"])
            else:
                claim["status"] = {}
                self.sim.store.update("resourceclaims", claim, subresource="status")

    def bump_pool(self) -> None:
        """A driver republishes a pool at generation+1, slice by slice (the pool is incomplete in between)."""
        slices = self.objects("resourceslices")
        rs = self.rng.choice(slices)
        driver, name = rs["spec"]["driver"], rs["spec"]["pool"]["name"]
        same = [s for s in slices if s["spec"]["pool"]["name"] == name and s["spec"]["driver"] == driver]
        generation = max(s["spec"]["pool"]["generation"] for s in same)
        current = [s for s in same if s["spec"]["pool"]["generation"] == generation]
        self.n += 1
        for index, old in enumerate(current[: self.rng.randint(1, len(current))]):
            new = copy.deepcopy(old)
            new["metadata"] = {"name": f"{old['metadata']['name'][:40]}-g{generation + 1}-{self.n}-{index}"}
            new["spec"]["pool"] = {**old["spec"]["pool"], "generation": generation + 1}
            self.sim.store.create("resourceslices", new)
            if self.rng.random() < 0.7:  # sometimes the old generation lingers for a while
                self.sim.store.delete("resourceslices", None, old["metadata"]["name"])

    def step(self) -> None:
        actions = [self.bind_pod, self.finish_pod, self.delete_pod, self.start_or_stall_pod, self.serve_by_claim,
                   self.flap_gpu, self.cordon, self.move_node_pool,
                   self.flip_ready, self.taint_device, self.allocate_claim, self.release_claim, self.bump_pool]
        self.rng.choice(actions)()


def drain(client: Any, kind: str, resource_version: str, until: int) -> list[WatchEvent]:
    """The events after `resource_version` up to the store's resourceVersion `until`, through a real watch.

    Churn keeps writing meanwhile; the watch's bookmarks tell when the stream has passed `until`.
    """
    events: list[WatchEvent] = []
    with client.watch(kind_ref(kind), resource_version=resource_version, timeout_seconds=10) as stream:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            batch, ended = stream.next_batch(max_items=1000, max_wait=0.3, deadline=time.monotonic() + 1.5)
            for event in batch:
                if event.type != "BOOKMARK" and int(event.resource_version) <= until:
                    events.append(event)
            if ended or any(int(e.resource_version or 0) >= until for e in batch):
                return events
    raise AssertionError(f"watch of {kind} did not reach resourceVersion {until}")


@pytest.mark.slow  # three seeded churn runs, 20-30 s each
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_derivation_equals_recomputation_after_every_batch(
    sim: Simulator, cluster: Cluster, seed: int
) -> None:
    rng = random.Random(seed)
    _sync_once(cluster)
    assert snapshot(cluster) == from_scratch(cluster)
    mutator = Mutator(sim, rng)
    sim.churn.start(rate_per_second=8, seed=seed)  # the simulator's own churn runs alongside our mutations
    client = client_for(cluster)
    leases = {k: lease_backend().acquire(sync_state_for(cluster_id=cluster.pk, kind=k), 120) for k in KINDS}
    checked = 0
    try:
        for _round in range(6):
            for _ in range(rng.randint(1, 6)):
                mutator.step()
            for kind in rng.sample(KINDS, len(KINDS)):
                resource_version = SyncState.objects.get(cluster=cluster, kind=kind).resource_version
                events = drain(client, kind, resource_version, sim.store.resource_version)
                while events:  # random batch sizes, as the watcher would cut them
                    size = rng.randint(1, 8)
                    batch, events = events[:size], events[size:]
                    _apply_events(cluster_id=cluster.pk, kind=kind, events=batch, lease=leases[kind])
                    assert snapshot(cluster) == from_scratch(cluster), f"seed {seed}, after a {kind} batch"
                    checked += 1
    finally:
        sim.churn.stop()
        client.close()
        for lease in leases.values():
            lease.release()
    assert checked >= 8
