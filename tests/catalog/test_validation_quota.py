"""Manifest validator, quota layer: device-plugin and DRA keys, worst-case counting, Job parallelism."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.validation import ValidationContext, ValidationFinding, ValidationReport, validate_documents
from inventory.k8s.semantics import limit_range_defaults
from tests.catalog.conftest import codes, only
from tests.catalog.factories import (
    NS,
    claim,
    claim_container,
    cluster_context,
    container,
    exactly,
    job,
    pod,
    template,
    with_template,
)

GPU_CLASS = "gpu.nvidia.com"


def quota(hard: dict[str, Any], used: dict[str, Any] | None = None, name: str = "team-quota",
          **extra: Any) -> dict[str, Any]:
    return {"name": name, "hard": hard, "used": used or {}, **extra}


def check(*documents: dict[str, Any], quotas: list[dict[str, Any]] | None, **context: Any) -> ValidationReport:
    return validate_documents(list(documents), cluster_context(quotas=None if quotas is None else {NS: quotas},
                                                               **context))


def quota_findings(report: ValidationReport, code: str) -> list[ValidationFinding]:
    return [f for f in report.findings if f.layer == "quota" and f.code == code]


def exceeded(report: ValidationReport) -> dict[str, str]:
    """Quota key → message of each quota-exceeded error."""
    out = {}
    for finding in quota_findings(report, "quota-exceeded"):
        key = finding.message.split(": ", 1)[1].split(" needs ", 1)[0]
        out[key] = finding.message
    return out


def needs(report: ValidationReport) -> dict[str, str]:
    """Quota key → "needs N, L of H left" for every compared key (fits or not)."""
    out = {}
    for finding in report.findings:
        if finding.layer == "quota" and finding.code in ("quota-exceeded", "quota-fits"):
            key, rest = finding.message.split(": ", 1)[1].split(" needs ", 1)
            out[key] = "needs " + rest.split(" (", 1)[0]
    return out


def gpu_pod(gpus: int = 8, name: str = "trainer") -> dict[str, Any]:
    return pod(name, containers=[container(limits={"nvidia.com/gpu": gpus})])


# Device plugin.


def test_device_plugin_request_over_quota_is_an_error_with_numbers() -> None:
    report = check(gpu_pod(8), quotas=[quota({"requests.nvidia.com/gpu": "16"}, {"requests.nvidia.com/gpu": "12"})])
    finding = only(report, "quota-exceeded")
    assert finding.severity == "error"
    assert finding.layer == "quota"
    assert "requests.nvidia.com/gpu needs 8, 4 of 16 left" in finding.message
    assert "team-quota" in finding.message
    assert finding.path == "documents[0]"
    assert not report.ok


def test_device_plugin_request_within_quota_is_info() -> None:
    report = check(gpu_pod(4), quotas=[quota({"requests.nvidia.com/gpu": "16"}, {"requests.nvidia.com/gpu": "12"})])
    assert report.ok
    assert needs(report) == {"requests.nvidia.com/gpu": "needs 4, 4 of 16 left"}


def test_job_parallelism_multiplies_the_pod_and_says_so() -> None:
    doc = job(parallelism=4, containers=[container(limits={"nvidia.com/gpu": 2})])
    report = check(doc, quotas=[quota({"requests.nvidia.com/gpu": "16", "pods": "10", "count/jobs.batch": "1"},
                                      {"requests.nvidia.com/gpu": "10"})])
    message = exceeded(report)["requests.nvidia.com/gpu"]
    assert "needs 8, 6 of 16 left" in message
    assert "parallelism 4" in message
    assert needs(report)["pods"] == "needs 4, 10 of 10 left"
    assert needs(report)["count/jobs.batch"] == "needs 1, 1 of 1 left"


def test_job_without_parallelism_counts_one_pod_and_completions_cap_it() -> None:
    hard = {"requests.nvidia.com/gpu": "100"}
    assert needs(check(job(containers=[container(limits={"nvidia.com/gpu": 2})]), quotas=[quota(hard)])) == {
        "requests.nvidia.com/gpu": "needs 2, 100 of 100 left"}
    capped = job(parallelism=8, completions=3, containers=[container(limits={"nvidia.com/gpu": 2})])
    assert needs(check(capped, quotas=[quota(hard)]))["requests.nvidia.com/gpu"] == "needs 6, 100 of 100 left"


def test_pods_in_one_namespace_add_up() -> None:
    report = check(gpu_pod(4, "a"), gpu_pod(4, "b"), quotas=[quota({"requests.nvidia.com/gpu": "6"})])
    assert "needs 8, 6 of 6 left" in exceeded(report)["requests.nvidia.com/gpu"]


def test_cpu_memory_pods_and_aliases() -> None:
    doc = job(parallelism=2, containers=[container(requests={"cpu": "4", "memory": "32Gi"},
                                                   limits={"memory": "64Gi", "nvidia.com/gpu": 1})])
    report = check(doc, quotas=[quota(
        {"cpu": "20", "requests.memory": "100Gi", "limits.memory": "100Gi", "pods": "1", "count/pods": "5"},
        {"cpu": "10", "pods": "0"},
    )])
    assert needs(report) == {
        "count/pods": "needs 2, 5 of 5 left",
        "cpu": "needs 8, 10 of 20 left",
        "limits.memory": "needs 128Gi, 100Gi of 100Gi left",
        "pods": "needs 2, 1 of 1 left",
        "requests.memory": "needs 64Gi, 100Gi of 100Gi left",
    }
    assert set(exceeded(report)) == {"limits.memory", "pods"}


def test_millicores_are_formatted() -> None:
    doc = pod(containers=[container(requests={"cpu": "1500m"}, limits={"nvidia.com/gpu": 1})])
    report = check(doc, quotas=[quota({"requests.cpu": "1"})])
    assert needs(report) == {"requests.cpu": "needs 1500m, 1 of 1 left"}


# DRA.


@pytest.mark.parametrize("key", [
    f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices",
    f"requests.deviceclass.resource.kubernetes.io/{GPU_CLASS}",
    "requests.nvidia.com/gpu",  # the class's extendedResourceName
])
def test_each_dra_key_counts_a_standalone_claim(key: str) -> None:
    doc = claim("shared", {"name": "gpus", "exactly": exactly(count=3)})
    report = check(doc, quotas=[quota({key: "4"}, {key: "2"})])
    assert f"{key} needs 3, 2 of 4 left" in only(report, "quota-exceeded").message


def test_extended_resource_key_needs_the_class_extended_name() -> None:
    doc = claim("shared", {"name": "gpus", "exactly": exactly("mig.nvidia.com", count=3)})
    report = check(doc, quotas=[quota({"requests.nvidia.com/gpu": "1",
                                       "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "2"})])
    assert set(exceeded(report)) == {"mig.nvidia.com.deviceclass.resource.k8s.io/devices"}


def test_allocation_mode_all_counts_the_worst_case_32() -> None:
    doc = claim("all", {"name": "gpus", "exactly": exactly(count=None, allocationMode="All")})
    key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    report = check(doc, quotas=[quota({key: "16"})])
    assert f"{key} needs 32, 16 of 16 left" in only(report, "quota-exceeded").message
    assert "count/resourceclaims.resource.k8s.io" not in exceeded(report)


def test_first_available_counts_the_largest_subrequest_per_class() -> None:
    doc = claim("pick", {"name": "gpus", "firstAvailable": [
        {"name": "big", "deviceClassName": GPU_CLASS, "count": 4},
        {"name": "slices", "deviceClassName": "mig.nvidia.com", "count": 2},
        {"name": "small", "deviceClassName": GPU_CLASS, "count": 1},
    ]}, {"name": "one-more", "exactly": exactly(count=1)})
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    mig_key = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"
    report = check(doc, quotas=[quota({gpu_key: "100", mig_key: "100"})])
    assert needs(report) == {gpu_key: "needs 5, 100 of 100 left", mig_key: "needs 2, 100 of 100 left"}
    all_sub = claim("pick", {"name": "gpus", "firstAvailable": [
        {"name": "every", "deviceClassName": GPU_CLASS, "allocationMode": "All"},
        {"name": "one", "deviceClassName": GPU_CLASS, "count": 1},
    ]})
    assert needs(check(all_sub, quotas=[quota({gpu_key: "100"})])) == {gpu_key: "needs 32, 100 of 100 left"}


def test_template_counts_once_per_pod_times_parallelism() -> None:
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    hard = {gpu_key: "8", "count/resourceclaims.resource.k8s.io": "10",
            "count/resourceclaimtemplates.resource.k8s.io": "5"}
    documents = [
        template("train-gpus", {"name": "gpus", "exactly": exactly(count=2)}),
        with_template(job(parallelism=3)),
        with_template(pod("debug")),
    ]
    report = check(*documents, quotas=[quota(hard, {gpu_key: "0"})])
    assert needs(report) == {
        gpu_key: "needs 8, 8 of 8 left",
        "count/resourceclaims.resource.k8s.io": "needs 4, 10 of 10 left",
        "count/resourceclaimtemplates.resource.k8s.io": "needs 1, 5 of 5 left",
    }
    report = check(*documents, quotas=[quota(hard, {gpu_key: "1"})])
    message = exceeded(report)[gpu_key]
    assert "needs 8, 7 of 8 left" in message
    assert "parallelism 3" in message


def test_unused_template_counts_no_devices() -> None:
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    report = check(template("spare", {"name": "gpus", "exactly": exactly(count=8)}), quotas=[quota({gpu_key: "1"})])
    assert report.ok
    assert codes(report, "quota") == ["no-quota"]


def test_shared_claim_counts_once_however_many_pods_use_it() -> None:
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    shared = claim("shared", {"name": "gpus", "exactly": exactly(count=2)})

    def user(name: str) -> dict[str, Any]:
        return pod(name, containers=[claim_container()], resourceClaims=[{"name": "gpus",
                                                                          "resourceClaimName": "shared"}])

    report = check(shared, user("a"), user("b"), quotas=[quota({gpu_key: "2",
                                                               "count/resourceclaims.resource.k8s.io": "1"})])
    assert needs(report) == {gpu_key: "needs 2, 2 of 2 left",
                             "count/resourceclaims.resource.k8s.io": "needs 1, 1 of 1 left"}
    assert report.ok


def test_template_outside_the_manifest_is_reported_as_not_counted() -> None:
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    report = check(with_template(pod(), "in-the-cluster"), quotas=[quota({gpu_key: "1"})])
    assert codes(report, "quota") == ["no-quota", "template-not-counted"]


def test_huge_count_is_counted_and_refused() -> None:
    gpu_key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    report = check(claim("c", {"name": "gpus", "exactly": exactly(count=10**9)}), quotas=[quota({gpu_key: "64"})])
    assert "count-too-large" in codes(report, "semantics")
    assert "needs 1000000000, 64 of 64 left" in exceeded(report)[gpu_key]


# What applies.


def test_no_quota_is_info_and_unknown_quotas_skip_the_layer() -> None:
    report = check(gpu_pod(), quotas=[])
    assert codes(report, "quota") == ["no-quota"]
    assert report.findings[0].severity == "info"
    report = check(gpu_pod(), quotas=[quota({"requests.storage": "1Ti"})])
    assert codes(report, "quota") == ["no-quota"]
    assert codes(check(gpu_pod(), quotas=None), "quota") == []
    other = validate_documents([gpu_pod()], cluster_context(quotas={"elsewhere": [quota({"pods": "0"})]}))
    assert codes(other, "quota") == ["no-quota"]


def test_every_quota_of_the_namespace_is_checked() -> None:
    quotas = [quota({"requests.nvidia.com/gpu": "100"}, name="big"),
              quota({"requests.nvidia.com/gpu": "2"}, name="small")]
    report = check(gpu_pod(8), quotas=quotas)
    assert len(quota_findings(report, "quota-exceeded")) == 1
    assert "small" in quota_findings(report, "quota-exceeded")[0].message


def test_exhausted_and_overused_quota() -> None:
    report = check(gpu_pod(1), quotas=[quota({"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "6"})])
    assert "needs 1, 0 of 4 left" in only(report, "quota-exceeded").message


def test_several_quotas_name_the_one_that_binds_and_the_effective_limit() -> None:
    quotas = [quota({"requests.nvidia.com/gpu": "40"}, {"requests.nvidia.com/gpu": "36"}, name="gpu-quota"),
              quota({"requests.nvidia.com/gpu": "48"}, {"requests.nvidia.com/gpu": "36"}, name="platform")]
    report = check(gpu_pod(8), quotas=quotas)
    assert "gpu-quota" in only(report, "quota-exceeded").message
    effective = only(report, "quota-effective").message
    assert "ResourceQuota gpu-quota with 4 of 40 left" in effective
    assert "platform 12 of 48" in effective


def test_a_quota_scoped_to_another_priority_class_does_not_apply() -> None:
    scoped = quota({"requests.nvidia.com/gpu": "1"}, name="low",
                   spec={"scopeSelector": {"matchExpressions": [
                       {"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}]}})
    report = check(gpu_pod(8), quotas=[scoped])
    assert codes(report, "quota") == ["no-quota"]
    low = pod("low", containers=[container(limits={"nvidia.com/gpu": 8})], priorityClassName="low")
    assert "ResourceQuota low (scope PriorityClass In [low])" in only(check(low, quotas=[scoped]),
                                                                    "quota-exceeded").message


@pytest.mark.parametrize(("scope", "applies"), [("BestEffort", False), ("NotBestEffort", True),
                                                ("NotTerminating", True), ("Terminating", False)])
def test_qos_and_deadline_scopes_decide_per_pod(scope: str, applies: bool) -> None:
    # The pod requests cpu and memory (NotBestEffort) and has no activeDeadlineSeconds (NotTerminating).
    report = check(gpu_pod(8), quotas=[quota({"pods": "0"}, name="scoped", spec={"scopes": [scope]})])
    assert codes(report, "quota") == (["quota-exceeded"] if applies else ["no-quota"])
    gpus_only = pod(containers=[{"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                    activeDeadlineSeconds=600)  # QoS counts cpu and memory only: BestEffort, and Terminating
    report = check(gpus_only, quotas=[quota({"pods": "0"}, name="scoped", spec={"scopes": [scope]})])
    assert codes(report, "quota") == (["no-quota"] if applies else ["quota-exceeded"])


def test_a_scoped_quota_never_counts_a_claim_and_a_bad_scope_is_reported() -> None:
    key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    doc = claim("c", {"name": "gpus", "exactly": exactly(count=4)})
    assert codes(check(doc, quotas=[quota({key: "1"}, spec={"scopes": ["NotBestEffort"]})]), "quota") == ["no-quota"]
    bad = quota({key: "1"}, spec={"scopes": ["Sometimes"]})
    report = check(doc, quotas=[bad])
    assert "unknown quota scope 'Sometimes'" in only(report, "quota-unreadable").message


def test_unreadable_quota_values_are_skipped_with_a_warning() -> None:
    report = check(gpu_pod(1), quotas=[quota({"requests.nvidia.com/gpu": "lots"}),
                                       quota({"pods": ["x"]}, {"pods": {"a": 1}}, name=None)])
    assert codes(report, "quota") == ["quota-unreadable", "quota-unreadable"]


def test_quota_on_cpu_requires_every_container_to_set_it() -> None:
    bare = {"name": "sidecar", "image": "busybox:1.36"}
    doc = pod(containers=[container(limits={"nvidia.com/gpu": 1}), bare])
    report = check(doc, quotas=[quota({"requests.cpu": "100", "limits.memory": "1Ti"})])
    found = quota_findings(report, "quota-requires-resource")
    assert sorted(f.message.split(" tracks ")[1].split(":")[0] for f in found) == ["limits.memory", "requests.cpu"]
    by_key = {f.message.split(" tracks ")[1].split(":")[0]: f.path for f in found}
    assert by_key == {"requests.cpu": "documents[0].spec.containers[1]",
                      "limits.memory": "documents[0].spec.containers[0]"}
    assert all(f.severity == "warning" for f in found)


def test_documents_failing_the_schema_are_not_counted() -> None:
    bad = gpu_pod(8)
    bad["spec"]["hostPID"] = "yes"
    report = check(bad, quotas=[quota({"requests.nvidia.com/gpu": "1"})])
    assert codes(report, "quota") == []


def test_context_without_quotas_for_cluster_unaware_runs() -> None:
    report = validate_documents([gpu_pod()], ValidationContext())
    assert report.findings == []


def test_limit_range_defaults_are_what_the_quota_counts() -> None:
    bare = {"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    limit_ranges = {NS: limit_range_defaults([{"limits": [
        {"type": "Container", "defaultRequest": {"cpu": "2", "memory": "8Gi"}, "default": {"cpu": "4"}},
        {"type": "Pod", "max": {"cpu": "64"}}]}])}
    hard = {"requests.cpu": "3", "limits.cpu": "100"}
    without = check(pod(containers=[bare]), quotas=[quota(hard)])
    assert {f.code for f in without.findings if f.layer == "quota"} >= {"quota-requires-resource"}
    report = check(pod(containers=[bare]), quotas=[quota(hard)], limit_ranges=limit_ranges)
    assert needs(report) == {"limits.cpu": "needs 4, 100 of 100 left", "requests.cpu": "needs 2, 3 of 3 left"}
    assert "quota-requires-resource" not in codes(report, "quota")
    # A container's own limit is its request first; the LimitRange fills only what is left out.
    own = {**bare, "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "1"}}}
    assert needs(check(pod(containers=[own]), quotas=[quota(hard)], limit_ranges=limit_ranges))[
        "requests.cpu"] == "needs 1, 3 of 3 left"
