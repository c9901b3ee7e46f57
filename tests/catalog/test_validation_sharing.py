"""More than one shared unit per container, and renamed time-sliced pools, in the validator: the device plugin's rule
(catalog/sharing.py) flags what the generator refuses, with the plugin's own error, the same way from the inventory
and from a snapshot file."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from catalog.errors import OfferingValidationError
from catalog.generator import GeneratorError, WorkloadSpec, generate
from catalog.models import Offering
from catalog.services.manifests import validation_context
from catalog.services.offerings import offering_create
from catalog.sharing import admission_message, plugin_error
from catalog.validation import ValidationContext, context_for_cluster, context_from_objects, validate_manifest
from catalog.validation.context import catalog_single_unit_pools
from tests.catalog.factories import OfferingFactory, container, pod

T4_LABELS = {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": "4",
             "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
L4_LABELS = {"nvidia.com/gpu.product": "NVIDIA-L4-SHARED", "nvidia.com/gpu.count": "2",
             "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps"}
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
T4_POOL = ("nvidia.com/gpu", {"nvidia.com/gpu.product": "Tesla-T4-SHARED"})


def _node(name: str, labels: dict[str, str], resources: dict[str, str]) -> dict[str, Any]:
    capacity = {"cpu": "48", "memory": "192Gi", "pods": "110", **resources}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**labels,
                                                                                       "kubernetes.io/hostname": name}},
            "status": {"capacity": capacity, "allocatable": capacity}}


NODES = [_node("t4-0", T4_LABELS, {"nvidia.com/gpu": "16"}), _node("l4-0", L4_LABELS, {"nvidia.com/gpu": "4"}),
         _node("h100-0", H100_LABELS, {"nvidia.com/gpu": "8"})]


def _context(*pools: tuple[str, dict[str, str]], nodes: list[dict[str, Any]] = NODES) -> ValidationContext:
    return context_from_objects(nodes, single_unit_pools=pools)


def _gpu_pod(amount: int | str = 2, *, selector: dict[str, str] | None = None, resource: str = "nvidia.com/gpu",
             init: bool = False, namespace: str = "team-a") -> str:
    main = container("main", limits={resource: str(amount), "cpu": "1", "memory": "1Gi"},
                     requests={"cpu": "1", "memory": "1Gi"})
    spec: dict[str, Any] = {"containers": [main]}
    if init:
        spec = {"initContainers": [main], "containers": [container("app", limits={"cpu": "1", "memory": "1Gi"},
                                                                   requests={"cpu": "1", "memory": "1Gi"})]}
    if selector:
        spec["nodeSelector"] = selector
    return yaml.safe_dump(pod(namespace=namespace, **spec))


def _shared(report: Any) -> list[Any]:
    return [f for f in report.findings if f.code.startswith("shared-")]


def test_a_time_sliced_pool_that_fails_requests_greater_than_one_is_an_error_with_the_plugins_words() -> None:
    report = validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}), _context(T4_POOL))
    [finding] = _shared(report)
    assert (finding.severity, finding.code, finding.layer) == ("error", "shared-request-refused", "semantics")
    assert plugin_error("nvidia.com/gpu", 2) in finding.message
    assert 'invalid allocation request for "nvidia.com/gpu": invalid request: maximum request size for shared ' \
           "resources is 1; found 2" in finding.message
    assert "UnexpectedAdmissionError" in finding.message
    assert finding.path == "documents[0].spec.containers[0].resources.limits['nvidia.com/gpu']"
    assert not report.ok
    # One replica is fine; so are two containers with one each (the plugin's Allocate is per container).
    assert not _shared(validate_manifest(_gpu_pod(1, selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
                                         _context(T4_POOL)))
    two = pod(nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
              containers=[container(n, limits={"nvidia.com/gpu": "1"}) for n in ("a", "b")])
    assert not _shared(validate_manifest(yaml.safe_dump(two), _context(T4_POOL)))
    # An init container asking for two is refused too.
    [init] = _shared(validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, init=True),
                                       _context(T4_POOL)))
    assert (init.severity, init.path) == ("error", "documents[0].spec.initContainers[0].resources.limits"
                                                   "['nvidia.com/gpu']")


def test_the_setting_never_applies_to_whole_cards() -> None:
    """A time-slicing offering whose selector also matches whole-card nodes (here: none) marks only the nodes that
    GPU feature discovery says are time-sliced."""
    report = validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                               _context(("nvidia.com/gpu", {})))
    assert not _shared(report)


def test_without_the_setting_two_replicas_are_granted_but_not_two_cards() -> None:
    report = validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}), _context())
    [finding] = _shared(report)
    assert (finding.severity, finding.code) == ("warning", "shared-units-not-additive")
    assert report.ok


def test_mps_always_refuses_more_than_one_share() -> None:
    [finding] = _shared(validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.sharing-strategy": "mps"}), _context()))
    assert (finding.severity, finding.code) == ("error", "shared-request-refused")


def test_a_pod_that_may_land_on_a_refusing_pool_is_warned_and_a_pinned_one_is_not() -> None:
    [finding] = _shared(validate_manifest(_gpu_pod(), _context(T4_POOL)))
    assert (finding.severity, finding.code) == ("warning", "shared-request-may-be-refused")
    assert "2 of the 3 nodes" in finding.message
    assert not _shared(validate_manifest(_gpu_pod(selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                                         _context(T4_POOL)))
    # Required node affinity and taints count like the scheduler counts them.
    affinity = yaml.safe_load(_gpu_pod())
    affinity["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.sharing-strategy", "operator": "In",
                                                     "values": ["time-slicing", "mps"]}]}]}}}
    [pinned] = _shared(validate_manifest(yaml.safe_dump(affinity), _context(T4_POOL)))
    assert pinned.severity == "error"
    tainted = copy.deepcopy(NODES)
    tainted[2]["spec"] = {"taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]}
    [only_shared] = _shared(validate_manifest(_gpu_pod(), _context(T4_POOL, nodes=tainted)))
    assert only_shared.severity == "error"  # the whole-card node is out of reach without the toleration


GENERATOR_OFFERINGS = {
    "t4-strict": {"unit_kind": "time-slicing", "resource_name": "nvidia.com/gpu", "units_per_card": 4,
                  "node_selector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
                  "fail_requests_greater_than_one": True},
    "t4-lax": {"unit_kind": "time-slicing", "resource_name": "nvidia.com/gpu", "units_per_card": 4,
               "node_selector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}},
    "l4-mps": {"unit_kind": "mps", "resource_name": "nvidia.com/gpu", "units_per_card": 2,
               "node_selector": {"nvidia.com/gpu.sharing-strategy": "mps"}},
    "h100": {"unit_kind": "whole", "resource_name": "nvidia.com/gpu",
             "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
}


@pytest.mark.django_db
@pytest.mark.parametrize("slug", sorted(GENERATOR_OFFERINGS))
def test_the_generator_and_the_validator_agree(slug: str) -> None:
    """The catalog is the one source: what the generator refuses for count 2, the validator flags in a pasted
    manifest (an error, with the same device-plugin error, where the plugin would refuse it)."""
    offering = OfferingFactory(slug=slug, **GENERATOR_OFFERINGS[slug])
    context = context_from_objects(NODES, single_unit_pools=catalog_single_unit_pools())
    spec = {"offering": offering, "namespace": "ml-research", "name": "train", "shape": "pod"}
    pasted = generate(WorkloadSpec(**spec, count=1)).documents[0]
    pasted["spec"]["containers"][0]["resources"]["limits"][offering.resource_name] = 2
    findings = _shared(validate_manifest(json.dumps(pasted), context))
    try:
        generate(WorkloadSpec(**spec, count=2))
    except GeneratorError as exc:
        [refusal] = exc.errors["count"]
    else:
        refusal = ""
    expected = {"t4-strict": "error", "l4-mps": "error", "t4-lax": "warning", "h100": None}[slug]
    assert [f.severity for f in findings] == ([expected] if expected else [])
    assert bool(refusal) == bool(expected)
    plugin = plugin_error("nvidia.com/gpu", 2)
    assert (plugin in refusal) == (expected == "error") == any(plugin in f.message for f in findings)


@pytest.mark.slow
def test_inventory_and_snapshot_contexts_agree_on_the_sharing_scenario(live_sharing) -> None:
    sim, cluster = live_sharing
    OfferingFactory(slug="t4", unit_kind="time-slicing", resource_name="nvidia.com/gpu.shared",
                    node_selector={"nvidia.com/gpu.product": "Tesla-T4"}, fail_requests_greater_than_one=True)
    objects = [o for kind in ("namespaces", "nodes", "resourcequotas", "deviceclasses", "resourceslices")
               for o in sim.store.objects(kind)]
    from_inventory = context_for_cluster(cluster)
    from_snapshot = context_from_objects(objects, kubernetes_version="1.35", single_unit_pools=catalog_single_unit_pools())
    assert from_inventory.shared_resources == from_snapshot.shared_resources
    for manifest in (_gpu_pod(resource="nvidia.com/gpu.shared"), _gpu_pod(), _gpu_pod(1, resource="nvidia.com/gpu.shared"),
                     _gpu_pod(selector={"kubesim.io/node-pool": "l4-mps"})):
        assert validate_manifest(manifest, from_inventory).as_json() == validate_manifest(manifest,
                                                                                          from_snapshot).as_json()
    refused = _shared(validate_manifest(_gpu_pod(resource="nvidia.com/gpu.shared"), from_inventory))
    assert [(f.severity, f.code) for f in refused] == [("error", "shared-request-refused")]
    # The simulator rejected its own greedy pods with the same error the validator quotes.
    greedy = next(p for p in sim.store.objects("pods") if p["metadata"]["name"].startswith("greedy-notebook"))
    assert greedy["status"]["message"] == "Pod was rejected: " + admission_message("nvidia.com/gpu.shared", 2)


@pytest.mark.slow
def test_renamed_pool_is_requested_as_gpu_shared(live_sharing) -> None:
    """renameByDefault: the T4 pool advertises nvidia.com/gpu.shared. Asking it for nvidia.com/gpu is flagged (no
    node of the pool has it), asking for nvidia.com/gpu.shared validates."""
    _sim, cluster = live_sharing
    context = validation_context(cluster)
    pinned = {"kubesim.io/node-pool": "t4-renamed"}
    wrong = validate_manifest(_gpu_pod(1, selector=pinned), context)
    assert not wrong.ok
    [unschedulable] = [f for f in wrong.findings if f.code == "unschedulable"]
    assert "Insufficient nvidia.com/gpu" in unschedulable.message
    right = validate_manifest(_gpu_pod(1, selector=pinned, resource="nvidia.com/gpu.shared"), context)
    assert right.ok, [(f.code, f.message) for f in right.findings if f.severity == "error"]
    assert next(f.code for f in right.findings if f.layer == "feasibility") == "fits"
    # A cluster whose only GPUs are the renamed pool: nvidia.com/gpu is unknown there, and the fix names .shared.
    renamed_only = context_from_objects([_node("t4-r", {**T4_LABELS, "nvidia.com/gpu.product": "Tesla-T4"},
                                               {"nvidia.com/gpu.shared": "16"})])
    [unknown] = [f for f in validate_manifest(_gpu_pod(1), renamed_only).findings if f.code == "unknown-resource-name"]
    assert "nvidia.com/gpu.shared" in unknown.fix


@pytest.mark.django_db
def test_the_curator_records_the_setting_on_time_sliced_offerings_only(client, member) -> None:
    base = {"slug": "t4", "name": "T4 replica", "unit_kind": "time-slicing", "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, "units_per_card": 4}
    offering = offering_create(actor=None, data={**base, "fail_requests_greater_than_one": True})
    assert offering.one_unit_per_container
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_create(actor=None, data={**base, "slug": "h100", "unit_kind": "whole",
                                          "fail_requests_greater_than_one": True})
    assert "fail_requests_greater_than_one" in exc_info.value.errors
    assert Offering(unit_kind="mps").one_unit_per_container  # MPS always, whatever the field says
    client.force_login(member)
    page = client.get(offering.get_absolute_url()).content.decode()
    assert "at most 1" in re.search(r"<dd data-units-per-container>(.*?)</dd>", page, re.S).group(1)
