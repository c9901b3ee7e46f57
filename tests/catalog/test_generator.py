"""The manifest generator: the offering's rules, schema-valid output, hostile input refused, and the page."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from django.contrib.auth.models import User
from django.urls import reverse

from catalog.generator import GeneratorError, WorkloadSpec, generate, parse_command
from catalog.models import Offering
from inventory.models import DeviceClass, Namespace
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import ClusterFactory
from tests.portal.factories import give_namespaces

H200 = {"slug": "h200", "name": "H200 training", "unit_kind": "whole", "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H200"}, "lifecycle": "active",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]}
T4 = {"slug": "t4", "name": "T4 replica", "unit_kind": "time-slicing", "resource_name": "nvidia.com/gpu",
          "node_selector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, "lifecycle": "active"}
L40S = {"slug": "l40s", "name": "L40S", "unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com", "lifecycle": "active",
            "cel_selector": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"'}


def _spec(offering: dict, **kwargs) -> WorkloadSpec:
    return WorkloadSpec(offering=Offering(**offering), **{"namespace": "ml-research", "name": "train", **kwargs})


def _schema_valid(documents: list[dict]) -> None:
    for document in documents:
        kubernetes_validate.validate(document, "1.35.0", strict=True)


def test_dedicated_pool_gets_limits_toleration_and_required_affinity() -> None:
    generated = generate(_spec(H200, shape="job", count=8))
    (job,) = generated.documents
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert "nvidia.com/gpu" not in container["resources"]["requests"]  # limits only
    assert pod["tolerations"] == H200["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}]}]
    assert "a toleration only permits" in generated.yaml
    assert "# extended resources: limits only" in generated.yaml
    _schema_valid(generated.documents)
    # What is written is what is dumped: the YAML parses back to the documents, without aliases.
    assert list(yaml.safe_load_all(generated.yaml)) == generated.documents
    assert "&id" not in generated.yaml


def test_requirements_become_gfd_label_affinity_for_labelled_pools() -> None:
    generated = generate(_spec(H200, shape="pod", count=1, min_memory_gib=80, compute_capability="8.6",
                               architecture="hopper"))
    terms = generated.documents[0]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # compute capability ≥ 8.6 is (major > 8) OR (major == 8 AND minor > 5): two ORed terms.
    assert len(terms) == 2
    for term in terms:
        keys = {e["key"]: e for e in term["matchExpressions"]}
        assert keys["nvidia.com/gpu.memory"] == {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["81919"]}
        assert keys["nvidia.com/gpu.family"]["values"] == ["hopper"]
    assert {e["operator"] for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.compute.major"} \
        == {"Gt", "In"}
    _schema_valid(generated.documents)


def test_time_slice_replica_is_never_requested_twice() -> None:
    # A pool whose device plugin fails such requests: the plugin's own error (catalog/sharing.py).
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec({**T4, "fail_requests_greater_than_one": True}, shape="pod", count=2))
    assert ('invalid allocation request for "nvidia.com/gpu": invalid request: maximum request size for shared '
            "resources is 1; found 2") in exc_info.value.errors["count"][0]
    # A pool that grants them (the plugin's default): still refused, two replicas are not two cards.
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec(T4, shape="pod", count=2))
    assert "2 time-slice replicas are not 2 cards" in exc_info.value.errors["count"][0]
    assert generate(_spec(T4, shape="pod", count=1)).documents[0]["spec"]["containers"][0]["resources"]["limits"] \
        == {"nvidia.com/gpu": 1}


@pytest.mark.parametrize("shape", ["claim-template-pod", "claim-template-job", "claim-pod"])
def test_dra_shapes_emit_claims_with_selectors(shape) -> None:
    generated = generate(_spec(L40S, shape=shape, count=2, min_memory_gib=40, cuda="12.4", parallelism=2))
    kinds = [d["kind"] for d in generated.documents]
    assert kinds[0] == ("ResourceClaim" if shape == "claim-pod" else "ResourceClaimTemplate")
    assert kinds[1] == ("Job" if shape.endswith("job") else "Pod")
    claim_spec = generated.documents[0]["spec"] if shape == "claim-pod" else generated.documents[0]["spec"]["spec"]
    exactly = claim_spec["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com"
    assert exactly["count"] == 2
    expressions = [s["cel"]["expression"] for s in exactly["selectors"]]
    assert expressions[0] == L40S["cel_selector"]
    assert 'memory.compareTo(quantity("40Gi")) >= 0' in expressions[1]
    assert 'cudaDriverVersion.compareTo(semver("12.4.0")) >= 0' in expressions[2]
    pod = generated.documents[1]["spec"]
    pod = pod["template"]["spec"] if shape.endswith("job") else pod
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "accelerators"}]
    assert "limits" not in pod["containers"][0]["resources"]
    _schema_valid(generated.documents)


def test_generated_selectors_compile() -> None:
    from catalog.cel import compile_selector

    generated = generate(_spec(L40S, shape="claim-template-pod", count=1, min_memory_gib=40, cuda="12.4",
                               compute_capability="8.9", architecture="ada-lovelace"))
    for selector in generated.documents[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]:
        compile_selector(selector["cel"]["expression"])


def test_wrong_path_for_the_offering_is_refused() -> None:
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec(H200, shape="claim-template-pod"))
    assert "device plugin" in exc_info.value.errors["shape"][0]
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec(L40S, shape="job"))
    assert "extendedResourceName" in exc_info.value.errors["shape"][0]
    # With an extendedResourceName on the class, a plain Job asks for that resource.
    generated = generate(_spec(L40S, shape="job", extended_resource_name="nvidia.com/gpu"))
    limits = generated.documents[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 1}


@pytest.mark.parametrize(("field", "value"), [
    ("name", "train\n  privileged: true"),
    ("name", "Train"),
    ("name", "a" * 64),
    ("namespace", "ml research"),
    ("image", "nginx; rm -rf /"),
    ("image", "nginx latest"),
    ("image", "x" * 300),
    ("count", 10**9),
    ("count", 0),
    ("cpu", "lots"),
    ("memory", "-1Gi"),
    ("cuda", "twelve"),
    ("compute_capability", "sm_80"),
    ("architecture", "Hopper; drop"),
    ("parallelism", 1000),
])
def test_hostile_input_is_refused_field_by_field(field, value) -> None:
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec(H200, shape="job", **{field: value}))
    assert field in exc_info.value.errors


def test_commands_are_lists_never_shell_text() -> None:
    argv = parse_command("python -c 'import os; print(1)' --flag \"a b\"")
    assert argv == ["python", "-c", "import os; print(1)", "--flag", "a b"]
    generated = generate(_spec(H200, shape="pod", command=["sh", "-c", "echo hi\nprivileged: true"]))
    container = generated.documents[0]["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c", "echo hi\nprivileged: true"]
    assert "securityContext" not in container
    assert list(yaml.safe_load_all(generated.yaml)) == generated.documents
    with pytest.raises(GeneratorError):
        parse_command("echo 'unterminated")


def test_retired_offering_cannot_be_generated() -> None:
    with pytest.raises(GeneratorError) as exc_info:
        generate(_spec({**H200, "lifecycle": "retired"}, shape="job"))
    assert "offering" in exc_info.value.errors


# ------------------------------------------------------------------------------------------------ page


@pytest.fixture
def world(db):
    cluster = ClusterFactory(name="lab")
    for name in ("ml-research", "kube-system"):
        Namespace.objects.create(cluster=cluster, uid=name, name=name, resource_version="1", raw={})
    DeviceClass.objects.create(cluster=cluster, uid="dc", name="gpu.nvidia.com", resource_version="1",
                               raw={"spec": {"selectors": []}})
    return {"cluster": cluster, "h200": OfferingFactory(**H200), "l40s": OfferingFactory(**L40S)}


def _post(client, world, **overrides):
    data = {"offering": "h200", "cluster": world["cluster"].pk, "namespace": "ml-research", "name": "train",
            "shape": "job", "count": 8, "parallelism": 1, "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "command": "python train.py", "cpu": "8", "memory": "64Gi", **overrides}
    return client.post(reverse("catalog:generate"), data, headers={"HX-Request": "true"})


def test_page_renders_the_yaml_live(client, member, world) -> None:
    give_namespaces(member, world["cluster"], "ml-research")
    client.force_login(member)
    page = client.get(reverse("catalog:generate") + "?offering=l40s")
    assert page.status_code == 200
    assert b"ResourceClaimTemplate" in page.content  # a DRA offering starts on a claim shape
    partial = _post(client, world)
    assert partial.status_code == 200
    assert b"<html" not in partial.content
    assert b"nvidia.com/gpu: 8" in partial.content
    assert b"Download train.yaml" in partial.content


def test_page_shows_errors_and_no_yaml(client, member, world) -> None:
    give_namespaces(member, world["cluster"], "ml-research")
    client.force_login(member)
    response = _post(client, world, namespace="team-x", image="bad image")
    body = response.content.decode()
    assert "not one of your namespaces in lab" in body
    assert "image" in body
    assert "apiVersion" not in body
    hostile = _post(client, world, name="<script>alert(1)</script>")
    assert b"<script>alert(1)" not in hostile.content


def test_only_the_users_tenant_namespaces_can_be_targeted(client, member, world) -> None:
    client.force_login(member)
    body = _post(client, world).content.decode()
    assert "You own no namespace in lab" in body  # no tenant yet
    assert "apiVersion" not in body
    Namespace.objects.create(cluster=world["cluster"], uid="other", name="other-team", resource_version="1", raw={})
    give_namespaces(member, world["cluster"], "ml-research")
    give_namespaces(User.objects.create_user("someone"), world["cluster"], "other-team", tenant_slug="team-b")
    assert b"not one of your namespaces" in _post(client, world, namespace="other-team").content
    assert b"apiVersion" in _post(client, world, namespace="ml-research").content


def test_page_needs_login(client, world) -> None:
    assert client.get(reverse("catalog:generate")).status_code == 302


def test_topology_options_become_a_pcie_root_constraint_and_an_nvlink_domain_gang() -> None:
    pcie = generate(_spec(L40S, shape="claim-template-job", count=4, topology="pcie-root"))
    template, job = pcie.documents
    assert template["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["accelerators"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    assert "one PCIe root" in pcie.yaml
    _schema_valid(pcie.documents)
    nvlink = generate(_spec(H200, shape="job", count=8, parallelism=4, topology="nvlink-domain"))
    (job,) = nvlink.documents
    assert job["spec"]["completionMode"] == "Indexed"
    pod_template = job["spec"]["template"]
    assert pod_template["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"}
    affinity = pod_template["spec"]["affinity"]
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "train"}}, "topologyKey": "nvidia.com/gpu.clique"}]
    assert "nodeAffinity" in affinity  # the pool's affinity stays
    _schema_valid(nvlink.documents)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"offering": H200, "shape": "job", "count": 4, "topology": "pcie-root"}, "DRA constraint"),
    ({"offering": L40S, "shape": "claim-template-pod", "count": 1, "topology": "pcie-root"}, "at least 2"),
    ({"offering": H200, "shape": "pod", "count": 8, "topology": "nvlink-domain"}, "Job shape"),
    ({"offering": H200, "shape": "job", "count": 8, "parallelism": 1, "topology": "nvlink-domain"}, "at least 2"),
    ({"offering": H200, "shape": "job", "count": 8, "topology": "rack"}, "Choose one of"),
])
def test_topology_options_that_cannot_apply_are_refused(overrides, message) -> None:
    offering = overrides.pop("offering")
    with pytest.raises(GeneratorError) as caught:
        generate(_spec(offering, **overrides))
    assert message in " ".join(caught.value.errors["topology"])


def test_a_queued_job_names_its_local_queue_and_is_created_suspended() -> None:
    generated = generate(_spec(H200, shape="job", count=8, parallelism=4, queue_name="team-a-queue"))
    (job,) = generated.documents
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert job["spec"]["suspend"] is True
    assert "Queued through Kueue's LocalQueue team-a-queue" in generated.yaml
    _schema_valid(generated.documents)
    plain = generate(_spec(H200, shape="job", count=8)).documents[0]
    assert "suspend" not in plain["spec"]
    assert "kueue.x-k8s.io/queue-name" not in plain["metadata"]["labels"]


def test_a_queued_dra_job_labels_only_the_job() -> None:
    template, job = generate(_spec(L40S, shape="claim-template-job", queue_name="team-a-queue")).documents
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert "kueue.x-k8s.io/queue-name" not in template["metadata"]["labels"]


def test_a_queue_name_must_be_a_name() -> None:
    with pytest.raises(GeneratorError) as caught:
        generate(_spec(H200, shape="job", queue_name="Team A"))
    assert list(caught.value.errors) == ["queue_name"]
