"""Kueue objects (ClusterQueue, LocalQueue, ResourceFlavor, Workload, Cohort) are synced where the cluster serves
kueue.x-k8s.io, at the version it serves (v1beta1 converted to the v1beta2 shape), and read by one set of rules
(inventory/k8s/semantics/kueue.py); a cluster without Kueue says so as a state, and a malformed object is stored with
its problems, never dropped."""

from __future__ import annotations

import io
from fractions import Fraction

import pytest
import redis
import yaml
from django.conf import settings
from django.core.management import call_command

from inventory.extract import extract_row
from inventory.k8s.conversion import kueue_to_v1beta2
from inventory.k8s.discovery import KUEUE_KINDS, ApiDiscovery
from inventory.k8s.semantics.kueue import (
    FlavorQuota,
    QueueState,
    cluster_queue_quotas,
    queue_fit,
    workload_requests,
    workload_state,
)
from inventory.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, SyncState, Workload
from inventory.services.clusters import cluster_register
from kubesim import Simulator

KUEUE = "kueue.x-k8s.io"


def _sync(name: str) -> str:
    out = io.StringIO()
    call_command("sync", "--cluster", name, "--once", stdout=out)
    return out.getvalue()


@pytest.fixture
def kueue_cluster(request):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    scenario, api = getattr(request, "param", ("kueue", None))
    with Simulator(scenario=scenario, api=api, port=0) as sim:
        yield sim, cluster_register(name=scenario.replace("_", "-"), kubeconfig=yaml.safe_dump(sim.kubeconfig()))


# ----------------------------------------------------------------------------------------------- the rules
def test_quota_table_reads_nominal_and_limits_and_flags_what_kueue_would_refuse():
    problems: list[str] = []
    spec = {"resourceGroups": [{
        "coveredResources": ["cpu", "nvidia.com/gpu"],
        "flavors": [
            {"name": "h100", "resources": [{"name": "cpu", "nominalQuota": "64"},
                                           {"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "4",
                                            "lendingLimit": "8"}]},
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "lots"}]},
        ],
    }]}
    quotas = cluster_queue_quotas(spec, problems)
    assert [(q.flavor, q.resource, q.nominal, q.borrowing_limit, q.lending_limit) for q in quotas] == [
        ("h100", "cpu", Fraction(64), None, None),
        ("h100", "nvidia.com/gpu", Fraction(16), Fraction(4), Fraction(8)),
    ]
    assert problems == [
        "spec.resourceGroups[0].flavors[1].resources[0].nominalQuota: not a quantity: 'lots'",
        "spec.resourceGroups[0].flavors[1] (a100): no quota for covered cpu, nvidia.com/gpu",
    ]


@pytest.mark.parametrize(("conditions", "state"), [
    ([], "pending"),
    ([{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}], "pending"),
    ([{"type": "QuotaReserved", "status": "True"}], "quota_reserved"),
    ([{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}], "admitted"),
    ([{"type": "Admitted", "status": "True"}, {"type": "Evicted", "status": "True", "reason": "Preempted"}], "evicted"),
    ([{"type": "Admitted", "status": "True"}, {"type": "Finished", "status": "True"}], "finished"),
])
def test_workload_state_comes_from_its_conditions(conditions, state):
    assert workload_state({"conditions": conditions}).state == state


def test_a_pending_workload_keeps_kueues_reason():
    got = workload_state({"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": "insufficient unused quota for nvidia.com/gpu in flavor h100"}]})
    assert (got.reason, got.message) == ("Pending", "insufficient unused quota for nvidia.com/gpu in flavor h100")


def test_workload_requests_are_count_times_the_pods_effective_requests():
    problems: list[str] = []
    container = {"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "4"},
                                            "limits": {"nvidia.com/gpu": "4"}}}
    init = {"name": "i", "resources": {"requests": {"cpu": "8"}}}  # init peak above the containers' sum
    spec = {"podSets": [
        {"name": "main", "count": 3, "template": {"spec": {"containers": [container], "initContainers": [init]}}},
        {"name": "driver", "count": 1, "template": {"spec": {"containers": [container]}}},
        {"name": "bad", "count": "three", "template": {"spec": {"containers": [container]}}},
    ]}
    pods, requests = workload_requests(spec, problems)
    assert pods == 4
    assert requests == {"cpu": Fraction(3 * 8 + 2), "nvidia.com/gpu": Fraction(16)}
    assert problems == ["spec.podSets[2].count: not a count: 'three'"]


def test_v1beta1_objects_are_read_in_the_v1beta2_shape():
    cq = kueue_to_v1beta2({"apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "spec": {"cohort": "research"}},
                          "v1beta1")
    assert cq == {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "spec": {"cohortName": "research"}}
    lq = kueue_to_v1beta2({"kind": "LocalQueue", "status": {"flavorUsage": [{"name": "h100"}]}}, "v1beta1")
    assert lq["status"] == {"flavorsUsage": [{"name": "h100"}]}
    wl = kueue_to_v1beta2({"kind": "Workload", "spec": {"priorityClassName": "high",
                                                        "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}},
                          "v1beta1")
    assert wl["spec"] == {"priorityClassRef": {"group": KUEUE, "kind": "WorkloadPriorityClass", "name": "high"}}
    same = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "spec": {"cohortName": "x"}}
    assert kueue_to_v1beta2(same, "v1beta2") is same


def test_a_malformed_cluster_queue_is_stored_with_its_problems():
    obj = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "broken", "uid": "u-1"},
           "spec": {"resourceGroups": "not a list", "cohortName": 7},
           "status": {"pendingWorkloads": "many", "flavorsUsage": [{"name": "h100", "resources": [
               {"name": "nvidia.com/gpu", "total": "-3"}]}]}}
    row = extract_row("clusterqueues", obj)
    assert row["uid"] == "u-1"
    assert row["quotas"] == []
    assert row["usage"] == []
    assert row["cohort"] == "7"
    assert row["pending_workloads"] is None
    assert "status.pendingWorkloads: not an integer: 'many'" in row["issues"]
    assert "status.flavorsUsage[0].resources[0].total: not a quantity: '-3'" in row["issues"]


GPU = "nvidia.com/gpu"


def _queue(name, cells, used=None, cohort=""):
    return QueueState(name, tuple(cells), {k: Fraction(v) for k, v in (used or {}).items()}, cohort)


def test_queue_fit_takes_the_first_flavor_of_a_group_that_holds_the_demand():
    queue = _queue("team-a", [FlavorQuota("h100", GPU, Fraction(16)), FlavorQuota("a100", GPU, Fraction(8))],
                   {("h100", GPU): 12})
    assert queue_fit(queue, {GPU: Fraction(4)}).flavors == {GPU: "h100"}
    assert queue_fit(queue, {GPU: Fraction(8)}).flavors == {GPU: "a100"}
    too_big = queue_fit(queue, {GPU: Fraction(12)})
    assert not too_big.fits
    assert too_big.reasons("team-a") == [
        "ClusterQueue team-a lacks 8 nvidia.com/gpu in flavor h100 (nominal 16, used 12, borrowable 0)",
        "ClusterQueue team-a lacks 4 nvidia.com/gpu in flavor a100 (nominal 8, used 0, borrowable 0)",
    ]


def test_queue_fit_borrows_what_the_cohort_lends_within_the_borrowing_limit():
    lender = _queue("team-b", [FlavorQuota("h100", GPU, Fraction(8), lending_limit=Fraction(6))], {("h100", GPU): 2},
                    cohort="research")
    capped = _queue("team-a", [FlavorQuota("h100", GPU, Fraction(16), borrowing_limit=Fraction(3))],
                    {("h100", GPU): 16}, cohort="research")
    free = _queue("team-a", [FlavorQuota("h100", GPU, Fraction(16))], {("h100", GPU): 16}, cohort="research")
    assert queue_fit(free, {GPU: Fraction(4)}, [lender, free]).fits  # lends min(8, 6) - 2 = 4
    assert not queue_fit(free, {GPU: Fraction(5)}, [lender, free]).fits
    assert queue_fit(capped, {GPU: Fraction(4)}, [lender, capped]).reasons("team-a") == [
        "ClusterQueue team-a lacks 1 nvidia.com/gpu in flavor h100 (nominal 16, used 16, borrowable 3)"]
    alone = _queue("team-a", [FlavorQuota("h100", GPU, Fraction(16))], {("h100", GPU): 16})
    assert not queue_fit(alone, {GPU: Fraction(1)}, [lender, alone]).fits  # no cohort: nothing to borrow


def test_a_resource_no_group_covers_is_unavailable_in_the_queue():
    queue = _queue("team-b", [FlavorQuota("l40s", GPU, Fraction(4))])
    fit = queue_fit(queue, {GPU: Fraction(1), "cpu": Fraction(4)})
    assert not fit.fits
    assert fit.reasons("team-b") == ["resource cpu unavailable in ClusterQueue team-b (no resource group covers it)"]


# ----------------------------------------------------------------------------------------------- discovery
def test_kueue_kinds_are_read_at_the_best_served_version_or_stated_absent():
    without = ApiDiscovery(git_version="v1.35.0", groups={}, resources={"v1": ["pods"]})
    assert {without.availability(k).reason for k in KUEUE_KINDS} == {
        "Kueue is not installed on this cluster (no kueue.x-k8s.io API)"}
    old = ApiDiscovery(git_version="v1.33.2", groups={KUEUE: ["v1beta1"]},
                       resources={f"{KUEUE}/v1beta1": ["clusterqueues", "localqueues", "workloads",
                                                       "resourceflavors"]})
    assert old.availability("clusterqueues").version == "v1beta1"
    assert old.availability("cohorts").reason == "Cohort not served by this cluster's Kueue (v1beta1)"
    both = ApiDiscovery(groups={KUEUE: ["v1beta2", "v1beta1"]},
                        resources={f"{KUEUE}/v1beta2": list(KUEUE_KINDS), f"{KUEUE}/v1beta1": list(KUEUE_KINDS)})
    assert {both.availability(k).version for k in KUEUE_KINDS} == {"v1beta2"}


# ----------------------------------------------------------------------------------------------- end to end
@pytest.mark.django_db(transaction=True)
def test_kueue_objects_sync_from_a_cluster_that_serves_them(kueue_cluster):
    _, cluster = kueue_cluster
    _sync(cluster.name)
    states = {s.kind: s for s in SyncState.objects.filter(cluster=cluster, kind__in=KUEUE_KINDS)}
    assert {k: s.served_version for k, s in states.items()} == dict.fromkeys(KUEUE_KINDS, f"{KUEUE}/v1beta2")
    assert {s.phase for s in states.values()} == {SyncState.Phase.WATCHING}
    assert all(s.last_error == "" for s in states.values())
    assert sorted(ResourceFlavor.objects.filter(cluster=cluster).values_list("name", "node_labels")) == [
        ("h100", {"kubesim.io/node-pool": "h100"}), ("l40s", {"kubesim.io/node-pool": "l40s"})]
    assert list(Cohort.objects.filter(cluster=cluster).values_list("name", flat=True)) == ["research"]
    team_a = ClusterQueue.objects.get(cluster=cluster, name="team-a")
    assert team_a.cohort == "research"
    assert team_a.pending_workloads == 1
    assert team_a.admitted_workloads == 1
    gpu = next(q for q in team_a.quotas if q["resource"] == "nvidia.com/gpu")
    assert gpu == {"group": 0, "flavor": "h100", "resource": "nvidia.com/gpu", "nominal": "16", "borrowingLimit": "0",
                   "lendingLimit": None}
    assert {"flavor": "h100", "resource": "nvidia.com/gpu", "total": "12", "borrowed": "0"} in team_a.usage
    team_b = ClusterQueue.objects.get(cluster=cluster, name="team-b")
    assert team_b.quotas == [{"group": 0, "flavor": "l40s", "resource": "nvidia.com/gpu", "nominal": "4", "borrowingLimit": None,
                              "lendingLimit": "2"}]
    assert sorted(LocalQueue.objects.filter(cluster=cluster).values_list("namespace", "name", "cluster_queue")) == [
        ("team-a", "team-a-queue", "team-a"), ("team-b", "team-b-queue", "team-b")]
    workloads = {w.name: w for w in Workload.objects.filter(cluster=cluster)}
    admitted, pending = workloads["job-finetune-a1b2c"], workloads["job-pretrain-d4e5f"]
    assert (admitted.state, admitted.cluster_queue, admitted.pod_count) == ("admitted", "team-a", 3)
    assert admitted.requests["nvidia.com/gpu"] == "12"
    assert (pending.state, pending.cluster_queue, pending.queue_name) == ("pending", "", "team-a-queue")
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100" in pending.state_message
    assert all(not w.issues for w in workloads.values())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kueue_cluster", [("kueue", "kueue-v1beta1")], indirect=True)
def test_an_older_kueue_is_synced_at_v1beta1_and_stored_in_the_v1beta2_shape(kueue_cluster):
    _, cluster = kueue_cluster
    _sync(cluster.name)
    state = SyncState.objects.get(cluster=cluster, kind="clusterqueues")
    assert state.served_version == f"{KUEUE}/v1beta1"
    team_a = ClusterQueue.objects.get(cluster=cluster, name="team-a")
    assert team_a.cohort == "research"
    assert team_a.raw["spec"]["cohortName"] == "research"
    assert "cohort" not in team_a.raw["spec"]
    assert team_a.served_raw["apiVersion"] == f"{KUEUE}/v1beta1"
    assert team_a.served_raw["spec"]["cohort"] == "research"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kueue_cluster", [("sharing", None)], indirect=True)
def test_a_cluster_without_kueue_states_it_and_syncs_the_rest(kueue_cluster):
    _, cluster = kueue_cluster
    output = _sync(cluster.name)
    assert f"{'clusterqueues':<24} skipped: Kueue is not installed on this cluster (no kueue.x-k8s.io API)" in output
    for kind in KUEUE_KINDS:
        state = SyncState.objects.get(cluster=cluster, kind=kind)
        assert state.phase == SyncState.Phase.UNSERVED
        assert state.last_error == ""
    assert not ClusterQueue.objects.filter(cluster=cluster).exists()
    assert SyncState.objects.get(cluster=cluster, kind="nodes").phase != SyncState.Phase.UNSERVED

