"""Reading manifests for explain_pod: JSON, YAML (multi-document, flow style), lists and workloads."""

from __future__ import annotations

import json

import pytest

from catalog.feasibility import ManifestError, load_objects, split_pod_manifest


def test_json_yaml_list_and_flow_style():
    assert load_objects('{"kind": "Pod", "spec": {}}') == [{"kind": "Pod", "spec": {}}]
    assert load_objects("{kind: Pod, spec: {}}") == [{"kind": "Pod", "spec": {}}]  # YAML flow mapping
    listed = json.dumps({"kind": "NodeList", "items": [{"kind": "Node"}, {"kind": "Node"}]})
    assert len(load_objects(listed)) == 2
    assert len(load_objects("kind: Pod\n---\nkind: ResourceClaim\n---\n")) == 2


def test_workload_pod_template_and_claims():
    deployment = {"kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
                  "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}
    claim = {"kind": "ResourceClaim", "metadata": {"name": "c"}}
    pod, claims, templates, notes = split_pod_manifest([deployment, claim, {"kind": "Service"}])
    assert pod["metadata"] == {"labels": {"a": "b"}, "name": "web", "namespace": "ns"}
    assert claims[0]["metadata"]["namespace"] == "ns"  # defaults to the pod's namespace
    assert templates == []
    assert notes == ["explaining the pod template of Deployment web", "ignored objects of kind Service"]
    cron = {"kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}
    assert split_pod_manifest([cron])[0]["metadata"]["name"] == "nightly"


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([], "found 0"),
        ([{"kind": "Pod", "spec": {}}, {"kind": "Pod", "spec": {}}], "found 2"),
        ([{"kind": "Pod"}], "no spec"),
        ([{"kind": "Job", "spec": {}}], "without spec.template.spec"),
    ],
)
def test_bad_manifests(objects, message):
    with pytest.raises(ManifestError, match=message):
        split_pod_manifest(objects)


def test_bad_text():
    with pytest.raises(ManifestError, match="empty"):
        load_objects("  \n")
    with pytest.raises(ManifestError, match="neither JSON nor YAML"):
        load_objects("a: [")
    with pytest.raises(ManifestError, match="expected an object"):
        load_objects("- 1\n- 2\n")
