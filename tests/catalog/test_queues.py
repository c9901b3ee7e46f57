"""The catalog's Kueue view: which ResourceFlavors stand for which offerings, the ClusterQueues holding quota for an
offering's resource in them, and the ambiguities stated, from a real sync of the simulator's `kueue` scenario."""

from __future__ import annotations

import io

import orjson
import pytest
import redis
import urllib3
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from catalog.models import UnitKind
from catalog.services.queues import DRA_NOTE, flavor_mappings, offering_queues
from inventory.models import Cluster, Node
from inventory.selectors import queued_workloads
from inventory.services.clusters import cluster_register
from kubesim import Simulator
from tests.catalog.factories import OfferingFactory
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.slow]  # a live Kueue cluster synced for every test (about 2 s each)
FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
POOL = "kubesim.io/node-pool"


def _sync(name: str) -> None:
    call_command("sync", "--cluster", name, "--once", stdout=io.StringIO())


@pytest.fixture
def kueue():
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    with Simulator(scenario="kueue", port=0) as sim:
        cluster = cluster_register(name="kueue", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        yield sim, cluster


def _offerings():
    h100 = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu", node_selector={"kubesim.io/node-pool": "h100"})
    l40s = OfferingFactory(slug="l40s", resource_name="nvidia.com/gpu", node_selector={"kubesim.io/node-pool": "l40s"})
    return h100, l40s


def _create(sim: Simulator, obj: dict) -> None:
    response = urllib3.request("POST", sim.url + FLAVORS, body=orjson.dumps(obj),
                               headers={"Content-Type": "application/json"})
    assert response.status == 201, response.data


def test_an_offering_shows_the_queues_that_hold_quota_for_it(kueue):
    _, cluster = kueue
    _sync(cluster.name)
    h100, l40s = _offerings()
    got = offering_queues(h100)
    assert got.problems == []
    assert [(q.cluster, q.flavor, q.cluster_queue, q.cohort, q.nominal, q.used, q.available, q.borrowing_limit,
             q.lending_limit, q.local_queues) for q in got.quotas] == [
        ("kueue", "h100", "team-a", "research", "16", "12", "4", "0", None, ("team-a/team-a-queue",))]
    other = offering_queues(l40s)
    assert [(q.cluster_queue, q.nominal, q.used, q.lending_limit) for q in other.quotas] == [("team-b", "4", "0", "2")]


def test_flavors_that_cannot_be_mapped_cleanly_are_stated(kueue):
    sim, cluster = kueue
    _create(sim, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "any-gpu"},
                  "spec": {}})
    _create(sim, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "b200"},
                  "spec": {"nodeLabels": {"kubesim.io/node-pool": "b200"}}})
    _create(sim, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "tainted"},
                  "spec": {"nodeLabels": {"kubesim.io/node-pool": "l40s"},
                           "nodeTaints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]}})
    _sync(cluster.name)
    h100, l40s = _offerings()
    mappings = flavor_mappings(Cluster.objects.get(pk=cluster.pk), [h100, l40s])
    assert mappings["h100"].offerings == ["h100"]
    assert mappings["h100"].problems == []
    assert mappings["any-gpu"].offerings == ["h100", "l40s"]
    assert mappings["any-gpu"].problems == [
        "flavor any-gpu holds nodes of 2 offerings serving nvidia.com/gpu (h100, l40s): its quota does not say which "
        "one a job gets"]
    assert mappings["b200"].problems == ["flavor b200 selects no node of cluster kueue"]
    l40s_nodes = sorted(Node.objects.filter(cluster=cluster, labels__contains={POOL: "l40s"})
                        .values_list("name", flat=True))
    assert l40s_nodes
    assert mappings["tainted"].problems == [
        f"flavor tainted declares nodeTaints that nodes {', '.join(l40s_nodes)} do not carry"]


def test_dra_offerings_say_why_no_queue_is_mapped(kueue):
    _, cluster = kueue
    _sync(cluster.name)
    dra = OfferingFactory(slug="dra", unit_kind=UnitKind.DRA_DEVICE, device_class_name="gpu.nvidia.com")
    got = offering_queues(dra)
    assert got.quotas == []
    assert got.notes == [DRA_NOTE]


def test_the_offering_page_shows_its_queues(kueue, client, platform_admin):
    _, cluster = kueue
    _sync(cluster.name)
    h100, _ = _offerings()
    client.force_login(platform_admin)
    page = client.get(reverse("catalog:offering_detail", args=[h100.slug])).content.decode()
    assert 'id="queue-quotas"' in page
    assert "<code>team-a</code>" in page
    assert "<code>team-a/team-a-queue</code>" in page


# ----------------------------------------------------------------------------------------------- the validator
def _kueue_context():
    from fractions import Fraction

    from catalog.validation.queues import KueueContext
    from inventory.k8s.semantics.kueue import FlavorQuota, QueueState

    gpu = "nvidia.com/gpu"
    return KueueContext(
        local_queues={("team-a", "team-a-queue"): "team-a", ("team-b", "team-b-queue"): "team-b",
                      ("team-a", "orphan"): "gone"},
        cluster_queues={
            "team-a": QueueState("team-a", (FlavorQuota("h100", "cpu", Fraction(256)),
                                            FlavorQuota("h100", gpu, Fraction(16))), {("h100", gpu): Fraction(12)}),
            "team-b": QueueState("team-b", (FlavorQuota("l40s", gpu, Fraction(4)),), {}),
        },
    )


def _job(namespace="team-a", queue="team-a-queue", parallelism=1, gpus=2, suspend=True):
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace, "labels": labels},
            "spec": {"suspend": suspend, "parallelism": parallelism, "completions": parallelism, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox",
                                "resources": {"requests": {"cpu": "1"},
                                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def _queue_findings(document):
    from catalog.validation.context import ValidationContext
    from catalog.validation.engine import validate_documents

    report = validate_documents([document], ValidationContext(kueue=_kueue_context()))
    return [(f.severity, f.code, f.message) for f in report.findings if f.code.startswith("queue-")]


@pytest.mark.django_db(transaction=False)
def test_the_validator_says_whether_kueue_admits_the_job_now():
    assert _queue_findings(_job(parallelism=2)) == [
        ("info", "queue-admits", "ClusterQueue team-a can admit 2 pods now (cpu in flavor h100, nvidia.com/gpu in "
                                 "flavor h100)")]
    assert _queue_findings(_job(parallelism=4)) == [
        ("warning", "queue-waits", "queued, not admitted now for 4 pods: ClusterQueue team-a lacks 4 nvidia.com/gpu "
                                   "in flavor h100 (nominal 16, used 12, borrowable 0)")]


@pytest.mark.django_db(transaction=False)
def test_the_validator_refuses_queues_that_never_admit():
    unknown = _queue_findings(_job(queue="nope"))
    assert [(s, c) for s, c, _ in unknown] == [("error", "queue-unknown")]
    assert 'LocalQueue "nope" does not exist in namespace "team-a"' in unknown[0][2]
    assert _queue_findings(_job(queue="orphan"))[0][:2] == ("error", "queue-target-missing")
    uncovered = _queue_findings(_job(namespace="team-b", queue="team-b-queue"))
    assert uncovered == [("error", "queue-resource-not-covered",
                          "resource cpu unavailable in ClusterQueue team-b (no resource group covers it): Kueue "
                          "leaves this Job pending for ever")]


@pytest.mark.django_db(transaction=False)
def test_the_validator_asks_for_suspend_and_for_the_label():
    assert ("info", "queue-not-suspended") in [f[:2] for f in _queue_findings(_job(suspend=False))]
    missing = _queue_findings(_job(queue=""))
    assert [f[:2] for f in missing] == [("info", "queue-label-missing")]
    assert "LocalQueue orphan, team-a-queue)" in missing[0][2]


def test_the_cluster_context_knows_the_queues_only_where_kueue_is_served(kueue):
    from catalog.validation.context import context_for_cluster

    _, cluster = kueue
    _sync(cluster.name)
    context = context_for_cluster(Cluster.objects.get(pk=cluster.pk))
    assert context.kueue is not None
    assert context.kueue.local_queues == {("team-a", "team-a-queue"): "team-a", ("team-b", "team-b-queue"): "team-b"}
    assert context.kueue.cluster_queues["team-a"].used[("h100", "nvidia.com/gpu")] == 12
    other = Cluster.objects.create(name="plain")
    assert context_for_cluster(other).kueue is None


# ------------------------------------------------------------------------------- pending explanations (tenant scoped)
def test_a_queued_workload_is_explained_on_the_pending_page_to_its_tenant_only(kueue, client, platform_admin):
    _, cluster = kueue
    _sync(cluster.name)
    (queued,) = queued_workloads(platform_admin)
    assert queued.workload.name == "job-pretrain-d4e5f"
    assert (queued.cluster_queue, queued.position, queued.waiting) == ("team-a", 1, 1)
    assert queued.summary == ("queued: not admitted — ClusterQueue team-a lacks 4 nvidia.com/gpu in flavor h100 "
                              "(nominal 16, used 12, borrowable 0)")
    assert "insufficient unused quota" in queued.kueue_message
    client.force_login(platform_admin)
    page = client.get(reverse("inventory:pending_pods")).content.decode()
    assert 'id="queued-workloads"' in page
    assert "lacks 4 nvidia.com/gpu in flavor h100" in page
    other = User.objects.create_user("bob")
    give_namespaces(other, cluster, "team-b", tenant_slug="team-b")
    assert queued_workloads(other) == []
    client.force_login(other)
    assert 'id="queued-workloads"' not in client.get(reverse("inventory:pending_pods")).content.decode()
    member = User.objects.create_user("alice")
    give_namespaces(member, cluster, "team-a")
    assert [q.workload.name for q in queued_workloads(member)] == ["job-pretrain-d4e5f"]
