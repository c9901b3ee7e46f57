"""Every upstream-shaped object the simulator serves (all v1 fields set, alpha ones included) syncs and derives."""

from __future__ import annotations

import redis
import yaml
from django.conf import settings

from inventory.kinds import MODELS, SYNCED_KINDS
from inventory.leases import lease_backend
from inventory.models import ClaimAllocation, Device, Pod, SyncIssue
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.derive import derive_cluster
from inventory.services.sync import cluster_sync_once
from kubesim import Simulator


def test_upstream_shaped_objects_sync_and_derive_without_error(transactional_db: None) -> None:
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    with Simulator(scenario="upstream", port=0) as sim:
        cluster = cluster_register(name="upstream", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        client = client_for(cluster)
        backend = lease_backend()
        try:
            cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda s: backend.acquire(s, 30))
        finally:
            client.close()
        expected = {kind: {o["metadata"]["uid"] for o in sim.store.objects(kind)} for kind in SYNCED_KINDS}
        slices = sim.store.objects("resourceslices")

    for kind in SYNCED_KINDS:
        stored = set(MODELS[kind].objects.filter(cluster=cluster).live().values_list("uid", flat=True))
        assert stored == expected[kind], kind
    assert not SyncIssue.objects.filter(cluster=cluster).exists()
    flagged = {row.name: row.issues for kind in SYNCED_KINDS for row in MODELS[kind].objects.filter(cluster=cluster)
               if row.issues}
    assert not flagged, flagged

    published = {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
                 for s in slices for d in s["spec"].get("devices", [])}
    derived = set(Device.objects.filter(cluster=cluster, path="dra").values_list("driver", "pool", "device_name"))
    assert derived  # the newest generation of each pool; every derived device was published
    assert derived <= published
    assert ClaimAllocation.objects.filter(cluster=cluster).exists()
    assert Pod.objects.filter(cluster=cluster, accelerator=True).exclude(stage="").exists()
    derive_cluster(cluster_id=cluster.pk)  # recomputing from scratch is stable too
    assert set(Device.objects.filter(cluster=cluster, path="dra").values_list("driver", "pool", "device_name")) == derived
