"""Kueue's Topology (topology-aware scheduling) is synced where Kueue serves it, at the best version served, with its
ordered levels; a ResourceFlavor keeps the Topology it names; a malformed Topology is stored with its problems."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import redis
import yaml
from django.conf import settings
from django.core.management import call_command

import kubesim
from inventory.extract import extract_row
from inventory.k8s.discovery import ApiDiscovery
from inventory.models import ResourceFlavor, SyncState, Topology
from inventory.services.clusters import cluster_register
from kubesim import Simulator

KUEUE = "kueue.x-k8s.io"
LEVELS = ["topology.example.com/block", "kubernetes.io/hostname"]


def _sync(name: str) -> str:
    out = io.StringIO()
    call_command("sync", "--cluster", name, "--once", stdout=out)
    return out.getvalue()


@pytest.fixture
def kueue_cluster(request):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    name, scenario, api = getattr(request, "param", ("kueue", "kueue", None))
    with Simulator(scenario=scenario, api=api, port=0) as sim:
        yield sim, cluster_register(name=name, kubeconfig=yaml.safe_dump(sim.kubeconfig()))


def test_topology_levels_are_read_in_order_and_malformed_levels_are_problems():
    good = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "Topology", "metadata": {"name": "dc", "uid": "u1"},
            "spec": {"levels": [{"nodeLabel": label} for label in LEVELS]}}
    assert extract_row("topologies", good)["levels"] == LEVELS
    assert extract_row("topologies", good)["issues"] == []
    bad = {**good, "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "example.com/rack"},
                                       {}, {"nodeLabel": "example.com/rack"}, "rack"]}}
    row = extract_row("topologies", bad)
    assert row["levels"] == ["kubernetes.io/hostname", "example.com/rack"]
    assert row["issues"] == [
        "spec.levels[2].nodeLabel: missing or not a label",
        "spec.levels[3].nodeLabel: example.com/rack repeats a level",
        "spec.levels[4].nodeLabel: missing or not a label",
        "spec.levels: kubernetes.io/hostname is not the last level",
    ]
    for spec in (None, {}, {"levels": "rack"}, {"levels": []}):
        row = extract_row("topologies", {**good, "spec": spec})
        assert (row["levels"], row["issues"]) == ([], ["spec.levels: missing or not a list"])


def test_topology_is_read_at_the_best_served_version_v1alpha1_included():
    old = ApiDiscovery(groups={KUEUE: ["v1beta1", "v1alpha1"]},
                       resources={f"{KUEUE}/v1beta1": ["clusterqueues", "resourceflavors"],
                                  f"{KUEUE}/v1alpha1": ["topologies", "cohorts"]})
    assert old.availability("topologies").version == "v1alpha1"
    assert old.availability("cohorts").ref is None  # only Topology is read at v1alpha1
    both = ApiDiscovery(groups={KUEUE: ["v1beta2", "v1beta1"]},
                        resources={f"{KUEUE}/v1beta2": ["topologies"], f"{KUEUE}/v1beta1": ["topologies"]})
    assert both.availability("topologies").version == "v1beta2"


@pytest.mark.django_db(transaction=True)
def test_topology_syncs_from_kueue_and_the_flavor_names_it(kueue_cluster):
    _, cluster = kueue_cluster
    _sync(cluster.name)
    state = SyncState.objects.get(cluster=cluster, kind="topologies")
    assert state.served_version == f"{KUEUE}/v1beta2"
    assert state.phase == SyncState.Phase.WATCHING
    topology = Topology.objects.get(cluster=cluster)
    assert (topology.name, topology.levels, topology.issues, topology.served_raw) == ("gpu-blocks", LEVELS, [], None)
    assert sorted(ResourceFlavor.objects.filter(cluster=cluster).values_list("name", "topology_name")) == [
        ("h100", "gpu-blocks"), ("l40s", "")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kueue_cluster", [("kueue-old", "kueue", "kueue-v1beta1")], indirect=True)
def test_an_older_kueue_serves_topology_at_v1beta1(kueue_cluster):
    _, cluster = kueue_cluster
    _sync(cluster.name)
    assert SyncState.objects.get(cluster=cluster, kind="topologies").served_version == f"{KUEUE}/v1beta1"
    topology = Topology.objects.get(cluster=cluster)
    assert topology.levels == LEVELS
    assert topology.raw["apiVersion"] == f"{KUEUE}/v1beta2"
    assert topology.served_raw["apiVersion"] == f"{KUEUE}/v1beta1"
    assert ResourceFlavor.objects.get(cluster=cluster, name="h100").topology_name == "gpu-blocks"


def _with_malformed_topology() -> dict:
    spec = yaml.safe_load((Path(kubesim.__file__).parent / "scenarios" / "kueue.yaml").read_text())
    spec["objects"].append({"apiVersion": f"{KUEUE}/v1beta2", "kind": "Topology", "metadata": {"name": "broken"},
                            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}, {}]}})
    return spec


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kueue_cluster", [("kueue-broken", _with_malformed_topology(), None)], indirect=True)
def test_a_malformed_topology_is_stored_with_its_problems(kueue_cluster):
    _, cluster = kueue_cluster
    _sync(cluster.name)
    broken = Topology.objects.get(cluster=cluster, name="broken")
    assert broken.levels == ["kubernetes.io/hostname", "rack"]
    assert broken.issues == ["spec.levels[2].nodeLabel: missing or not a label",
                             "spec.levels: kubernetes.io/hostname is not the last level"]
    assert Topology.objects.get(cluster=cluster, name="gpu-blocks").issues == []
