"""Events are evidence: the mirrored Events that say why a pod does not run (FailedScheduling, FailedMount,
FailedCreatePodSandBox, UnexpectedAdmissionError, device-plugin Allocate failures, DRA FailedPrepareDynamicResources)
on the pending-pod page, the device page and in the explainer's "what the cluster said", with counts and last-seen
times — scoped like the pods they are about. Against the demo served by the simulator and synced."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inventory.models import Device, Event, Path, Pod
from inventory.selectors import evidence_events
from portal.tenancy.roles import Role
from tests.conftest import make_user, sync_once
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow


def _event(sim: Any, pod: Pod, reason: str, message: str, count: int, last: str) -> None:
    sim.store.create("events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{pod.name}.{reason.lower()}", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                           "uid": pod.uid},
        "reason": reason, "message": message, "type": "Warning", "count": count,
        "firstTimestamp": "2026-11-30T10:00:00Z", "lastTimestamp": last, "source": {"component": "kubelet"}})


def test_pending_pods_and_the_explainer_show_what_the_cluster_said(live_demo, platform_admin, member) -> None:
    sim, cluster = live_demo
    pending = Pod.objects.live().filter(cluster=cluster, stage="pending-unscheduled", accelerator=True).first()
    assert pending is not None
    _event(sim, pending, "FailedMount", 'MountVolume.SetUp failed for volume "cdi" : not found', 3,
           "2026-12-01T09:30:00Z")
    Event.objects.all().delete()  # nothing from an earlier listing: the sync must bring them
    sync_once(cluster)
    said = evidence_events(cluster_ids=[cluster.pk], uids=[pending.uid])[pending.uid]
    assert {"FailedScheduling", "FailedMount"} <= {e.reason for e in said}
    mount = next(e for e in said if e.reason == "FailedMount")
    assert (mount.count, mount.last_seen.isoformat()) == (3, "2026-12-01T09:30:00+00:00")

    page = Client()
    page.force_login(platform_admin)
    body = page.get(reverse("inventory:pending_pods"), {"namespace": pending.namespace}).content.decode()
    assert 'data-testid="cluster-said"' in body
    assert 'data-reason="FailedMount"' in body
    assert "2026-12-01 09:30" in body
    explained = page.get(reverse("catalog:pod_explain", kwargs={"pk": pending.pk})).content.decode()
    assert "What the cluster said" in explained
    assert 'data-reason="FailedScheduling"' in explained

    # Another tenant's member sees neither the pod nor its events.
    outsider = make_user("outsider-member", Role.TENANT_MEMBER)
    give_namespaces(outsider, cluster, "vision-team" if pending.namespace != "vision-team" else "batch-jobs",
                    tenant_slug="elsewhere", role="member")
    page.force_login(outsider)
    assert "cdi&quot; : not found" not in page.get(reverse("inventory:pending_pods")).content.decode()
    assert page.get(reverse("catalog:pod_explain", kwargs={"pk": pending.pk})).status_code == 404


def test_the_device_page_shows_allocate_failures_of_its_pods(live_demo, platform_admin) -> None:
    sim, cluster = live_demo
    device = next(d for d in Device.objects.filter(cluster=cluster, path=Path.DEVICE_PLUGIN).order_by("pk")
                  if Pod.objects.live().filter(cluster=cluster, node_name=d.node_name, accelerator=True,
                                               extended_requests__has_key=d.resource_name).exists())
    holder = Pod.objects.live().filter(cluster=cluster, node_name=device.node_name, accelerator=True,
                                       extended_requests__has_key=device.resource_name).order_by("name").first()
    _event(sim, holder, "UnexpectedAdmissionError",
           "Allocate failed due to rpc error: code = Unknown desc = device GPU-1 unhealthy, which is unexpected", 2,
           "2026-12-01T08:00:00Z")
    sync_once(cluster)
    page = Client()
    page.force_login(platform_admin)
    body = page.get(reverse("inventory:device_detail", kwargs={"pk": device.pk})).content.decode()
    assert "Events of its holders" in body
    assert 'data-reason="UnexpectedAdmissionError"' in body
    assert "device plugin" in body
    assert f"Pod {holder.name}" in body
