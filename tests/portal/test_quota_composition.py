"""Quotas that compose with everyone else's, against the simulator over real HTTP (which admits pods against every
ResourceQuota of their namespace, as the API server does): an approved increase raises the *effective* limit by the
approved amount whether the namespace holds one, two or three quotas, one of them written by another field manager;
a conflict is refused with its reason and fix unless the admin's policy lets the portal own accelerator keys; every
quota object written is audited before/after; and the validator's verdict is what the simulator's admission does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from audit.models import AuditEvent
from catalog.validation import context_for_cluster, validate_manifest
from inventory.k8s.semantics import effective_limits
from inventory.models import LimitRange, ResourceQuota
from inventory.services.clients import client_for
from portal.models import QuotaNamespaceState, QuotaOwnership, QuotaRequest, Tenant
from portal.quota.selectors import request_context
from portal.quota.services import (
    FIELD_MANAGER,
    QUOTA_NAME,
    is_accelerator_key,
    quota_apply,
    quota_request_create,
    quota_request_decide,
    quota_requests_confirm,
)
from tests.catalog.factories import OfferingFactory
from tests.conftest import live_cluster, sync_once
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
NS = "ml-research"  # the demo's namespace with 37 GPUs in use
GPU = "requests.nvidia.com/gpu"
DEMO = Path(__file__).resolve().parents[2] / "kubesim" / "scenarios" / "demo.yaml"
HIGH = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}


def _scenario(quotas: list[dict[str, Any]], objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec = yaml.safe_load(DEMO.read_text())
    spec["quotas"] = [q for q in spec["quotas"] if q["namespace"] != NS] + [{"namespace": NS, **q} for q in quotas]
    spec["objects"] = [*(spec.get("objects") or []), *objects]
    return spec


@pytest.fixture
def compose(transactional_db: None, lead: Any, approver: Any) -> Iterator[Any]:
    """`compose(quotas)` serves the demo with these quotas in ml-research, synced, the lead owning it."""
    stack: list[Any] = []

    def start(quotas: list[dict[str, Any]], objects: list[dict[str, Any]] = ()) -> tuple[Any, Any, Any]:
        manager = live_cluster(_scenario(quotas, list(objects)), name="composed")
        sim, cluster = manager.__enter__()
        stack.append(manager)
        give_namespaces(lead, cluster, NS, tenant_slug="ml-research", role="lead")
        h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu")
        return sim, cluster, h100

    yield start
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


def _grant(cluster: Any, offering: Any, lead: Any, approver: Any, units: int) -> QuotaRequest:
    request = quota_request_create(actor=lead, cluster_id=cluster.pk, namespace=NS, offering_id=offering.pk,
                                   units=units, justification="fine-tuning")
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    return request


def _hard(sim: Any) -> dict[str, dict[str, str]]:
    return {so.obj["metadata"]["name"]: dict(so.obj["spec"].get("hard") or {})
            for so in sim.store.sorted_objects("resourcequotas") if so.obj["metadata"]["namespace"] == NS}


def _effective(cluster: Any, pod_spec: dict[str, Any] | None = None) -> tuple[int, str]:
    """The effective limit of the GPU key for a pod, and the quota that binds, as the portal computes it."""
    quotas = [{"name": q.name, "hard": q.hard, "used": q.used, "spec": (q.raw or {}).get("spec")}
              for q in ResourceQuota.objects.live().filter(cluster=cluster, namespace=NS)]
    limits, _ = effective_limits(quotas, pod_spec or {"containers": []})
    return int(limits[GPU].limit), limits[GPU].binding.quota


def _pod(name: str, gpus: int, requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"} if requests is None else requests,
                 "limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", **spec, "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {k: v for k, v in resources.items() if v}}]}}


def _admitted(sim: Any, document: dict[str, Any]) -> tuple[bool, str]:
    api = k8s_config.new_client_from_config_dict(sim.kubeconfig())
    try:
        k8s.CoreV1Api(api).create_namespaced_pod(NS, document)
    except ApiException as exc:
        return False, f"{exc.status} {exc.body}"
    finally:
        api.close()
    return True, ""


def _verdict(cluster: Any, document: dict[str, Any]) -> bool:
    report = validate_manifest(yaml.safe_dump(document), context_for_cluster(cluster))
    return not any(f.code == "quota-exceeded" for f in report.findings)


def test_two_quotas_one_by_another_manager_conflict_refused_then_forced_by_policy(compose, lead, approver) -> None:
    sim, cluster, h100 = compose([{"name": "gpu-quota", "fieldManager": "platform-team", "hard": {GPU: "40"}},
                                  {"name": "team-cap", "hard": {GPU: "50", "requests.cpu": "1000"}}])
    assert _effective(cluster) == (40, "gpu-quota")
    request = _grant(cluster, h100, lead, approver, 8)

    # Default policy: the other manager's key is not forced; the reason and the fix are visible; nothing changes
    # on the conflicting object.
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "conflict"
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.FAILED
    assert 'conflict with "platform-team"' in request.apply_error
    assert "Fix: have that manager set requests.nvidia.com/gpu=48 on gpu-quota" in request.apply_error
    assert "quota ownership policies" in request.apply_error
    assert _hard(sim)["gpu-quota"] == {GPU: "40"}
    assert QUOTA_NAME not in _hard(sim)  # never a second, tighter quota beside theirs

    # The platform admin lets the portal own accelerator keys in the namespace: forced, both quotas rise by 8.
    QuotaOwnership.objects.create(cluster=cluster, namespace=NS, portal_owns_accelerator_keys=True)
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    hard = _hard(sim)
    assert hard == {"gpu-quota": {GPU: "48"}, "team-cap": {GPU: "58", "requests.cpu": "1000"}}  # no other key
    owners = {e["manager"] for e in sim.store.get("resourcequotas", NS, "gpu-quota")["metadata"]["managedFields"]
              if "f:requests.nvidia.com/gpu" in str(e.get("fieldsV1"))}
    assert owners == {FIELD_MANAGER}
    sync_once(cluster)
    assert _effective(cluster) == (48, "gpu-quota")  # 40 + 8
    quota_requests_confirm()
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.ACTIVE
    state = QuotaNamespaceState.objects.get(cluster=cluster, namespace=NS)
    assert (state.status, state.desired, state.observed) == ("in_sync", {GPU: "8"}, {GPU: "8"})
    assert state.baselines == {"gpu-quota": {GPU: "40"}, "team-cap": {GPU: "50"}}

    # The lead's page and the approver's context show the effective limit and which quota binds.
    page = Client()
    page.force_login(lead)
    body = page.get(reverse("portal:quota")).content.decode()
    assert 'data-quota="gpu-quota"' in body
    assert 'data-effective="48"' in body
    assert "(11 left, gpu-quota)" in body  # 48 - 37 in use
    context = request_context(request)
    assert (context["namespace_hard"], context["binding_quota"]) == (48, "gpu-quota")
    assert [q["quota"] for q in context["namespace_quotas"]] == ["gpu-quota", "team-cap"]
    page.force_login(approver)
    detail = page.get(reverse("portal:quota_request_detail", kwargs={"pk": request.pk})).content.decode()
    assert "<code>gpu-quota</code> binds" in detail

    # Every quota object written, before and after, audited.
    events = {e.before["quota"]: e for e in AuditEvent.objects.filter(verb="quota_object.applied")}
    assert events["gpu-quota"].before["hard"] == {GPU: "40"}
    assert events["gpu-quota"].after["hard"] == {GPU: "48"}
    assert events["gpu-quota"].after["forced"] is True
    assert events["team-cap"].after["hard"] == {GPU: "58", "requests.cpu": "1000"}
    assert AuditEvent.objects.filter(verb="quota_object.failed").count() == 1

    # Re-applying changes nothing (baselines are kept, never re-read from the raised values).
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    assert _hard(sim) == hard


def test_three_quotas_scoped_and_unrelated_each_rise_and_no_other_key_is_touched(compose, lead, approver) -> None:
    sim, cluster, h100 = compose([
        {"name": "gpu-quota", "hard": {GPU: "40"}},
        {"name": "high-priority", "fieldManager": "platform-team", "hard": {GPU: "44"}, "scopeSelector": HIGH},
        {"name": "compute", "fieldManager": "platform-team", "hard": {"requests.cpu": "1000", "pods": "500"}},
    ])
    # The tenant's policy covers the namespace.
    QuotaOwnership.objects.create(tenant=Tenant.objects.get(slug="ml-research"), portal_owns_accelerator_keys=True)
    assert _effective(cluster, {"containers": [], "priorityClassName": "high"}) == (40, "gpu-quota")
    _grant(cluster, h100, lead, approver, 10)
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    assert _hard(sim) == {"gpu-quota": {GPU: "50"}, "high-priority": {GPU: "54"},
                          "compute": {"requests.cpu": "1000", "pods": "500"}}
    assert all(e["manager"] == "platform-team"
               for e in sim.store.get("resourcequotas", NS, "compute")["metadata"]["managedFields"])
    sync_once(cluster)
    assert _effective(cluster) == (50, "gpu-quota")
    assert _effective(cluster, {"containers": [], "priorityClassName": "high"}) == (50, "gpu-quota")


def test_no_quota_carries_the_key_then_the_portal_object_holds_it(compose, lead, approver) -> None:
    sim, cluster, h100 = compose([{"name": "compute", "hard": {"requests.cpu": "1000"}}])
    _grant(cluster, h100, lead, approver, 8)
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    assert _hard(sim) == {"compute": {"requests.cpu": "1000"}, QUOTA_NAME: {GPU: "8"}}


def test_a_legacy_second_quota_is_folded_into_the_existing_one(compose, lead, approver) -> None:
    # What the portal used to do: portal-accelerators (8) beside gpu-quota (40) capped the team at 8.
    sim, cluster, h100 = compose([{"name": "gpu-quota", "hard": {GPU: "40"}}])
    legacy = client_for(cluster)
    assert legacy.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA_NAME, "namespace": NS},
                         "spec": {"hard": {GPU: "8"}}}, field_manager=FIELD_MANAGER).applied
    legacy.close()
    sync_once(cluster)
    assert _effective(cluster) == (8, QUOTA_NAME)
    _grant(cluster, h100, lead, approver, 8)
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    assert _hard(sim) == {"gpu-quota": {GPU: "48"}, QUOTA_NAME: {}}
    sync_once(cluster)
    assert _effective(cluster) == (48, "gpu-quota")


def test_the_validators_verdict_is_what_the_simulators_admission_does(compose, lead, approver) -> None:
    sim, cluster, h100 = compose([
        {"name": "gpu-quota", "hard": {GPU: "40"}},
        {"name": "high-priority", "hard": {GPU: "1"}, "scopeSelector": HIGH},
    ])
    # 37 GPUs in use, none by a high-priority pod: a high-priority pod meets the scoped quota (1 left) before
    # gpu-quota (3 left); then an ordinary pod takes the last 2 of gpu-quota.
    cases = [_pod("high-too-big", 2, priorityClassName="high"), _pod("high-fits", 1, priorityClassName="high"),
             _pod("fits", 2), _pod("too-big", 1)]
    for document in cases:
        expected = _verdict(cluster, document)
        admitted, message = _admitted(sim, document)
        assert admitted is expected, (document["metadata"]["name"], message)
        if not admitted:
            assert message.startswith("403")
            assert "exceeded quota" in message
        sync_once(cluster)  # the admitted pod is charged: the next verdict sees it
    # An approved increase raises the effective limit: the refused pod is now admitted, as the validator says.
    _grant(cluster, h100, lead, approver, 8)
    assert quota_apply(cluster_id=cluster.pk, namespace=NS) == "applied"
    sync_once(cluster)
    retry = _pod("too-big-again", 8)
    assert _verdict(cluster, retry) is True
    assert _admitted(sim, retry) == (True, "")


def test_limit_range_is_synced_and_its_defaults_are_what_the_validator_and_admission_count(compose) -> None:
    limit_range = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": NS},
                   "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "2"}, "default": {"cpu": "4"}}]}}
    # 381 cpus requested in ml-research: 3 left.
    sim, cluster, _ = compose([{"name": "gpu-quota", "hard": {GPU: "40", "requests.cpu": "384"}}], [limit_range])
    assert LimitRange.objects.live().filter(cluster=cluster, namespace=NS, name="defaults").exists()
    assert context_for_cluster(cluster).limit_ranges[NS] == [({"cpu": "4"}, {"cpu": "2"})]
    results = []
    for name in ("first", "second"):  # no cpu stated: the LimitRange's 2 cpus each; the second does not fit
        document = _pod(name, 1, requests={})
        expected = _verdict(cluster, document)
        admitted, message = _admitted(sim, document)
        assert admitted is expected, (name, message)
        results.append(admitted)
        sync_once(cluster)
    assert results == [True, False]
    charged = sim.store.get("pods", NS, "first")["spec"]["containers"][0]["resources"]
    assert charged == {"limits": {"nvidia.com/gpu": "1", "cpu": "4"}, "requests": {"nvidia.com/gpu": "1", "cpu": "2"}}


@pytest.mark.parametrize(("key", "accelerator"), [
    ("requests.nvidia.com/gpu", True), ("requests.nvidia.com/mig-1g.10gb", True),
    ("gpu.nvidia.com.deviceclass.resource.k8s.io/devices", True),
    ("requests.deviceclass.resource.kubernetes.io/gpu.nvidia.com", True),
    ("requests.cpu", False), ("cpu", False), ("pods", False), ("limits.nvidia.com/gpu", False),
    ("count/resourceclaims.resource.k8s.io", False), ("nvidia.com/gpu", False), (".deviceclass.resource.k8s.io/devices", False),
])
def test_the_portal_writes_only_accelerator_keys(key: str, accelerator: bool) -> None:
    assert is_accelerator_key(key) is accelerator
