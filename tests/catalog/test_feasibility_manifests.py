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


# ------------------------------------------------------------------------------------ hostile input (API and CLI)

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9)
) + "kind: Pod\nspec: {containers: *j}\n"
DEEP_YAML = "kind: Pod\nspec: " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_JSON = '{"kind": "Pod", "spec": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize(("text", "message"), [
    (BILLION_LAUGHS, "anchors"),
    ("kind: Pod\nspec: *nowhere\n", "aliases"),
    (DEEP_YAML, "nested deeper"),
    (DEEP_JSON, "nested deeper"),
    ("kind: Pod\nkind: Job\n", "duplicate key"),
    ("kind: Pod\n" + "---\nkind: Pod\n" * 60, "more than 50 documents"),
])
def test_load_objects_refuses_hostile_text(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_objects(text)


def test_a_file_may_be_larger_but_not_hostile(tmp_path) -> None:
    many = tmp_path / "snapshot.yaml"
    many.write_text("---\n".join(f"kind: Node\nmetadata: {{name: n{i}}}\n" for i in range(200)))
    assert len(load_objects(many)) == 200  # an operator's snapshot: more documents than a request may send
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS)
    with pytest.raises(ManifestError, match="anchors"):
        load_objects(bomb)


@pytest.fixture
def feasibility_client(db):
    from rest_framework.test import APIClient

    from tests.conftest import make_user
    from tests.inventory.factories import ClusterFactory

    client = APIClient()
    client.force_authenticate(make_user("feas-member"))
    return client, ClusterFactory(name="feas").name


@pytest.mark.parametrize(("manifest", "message"), [
    (BILLION_LAUGHS, "anchors"),
    (DEEP_YAML, "nested deeper"),
    (DEEP_JSON[:900_000], "nested deeper"),
])
def test_feasibility_api_answers_400_to_hostile_manifests(feasibility_client, manifest: str, message: str) -> None:
    client, cluster = feasibility_client
    response = client.post("/api/v1/feasibility/", {"cluster": cluster, "manifest": manifest}, format="json")
    assert response.status_code == 400, response.content[:300]
    assert message in response.json()["manifest"][0]


def test_feasibility_api_answers_400_to_an_oversized_or_deep_body(feasibility_client) -> None:
    client, cluster = feasibility_client
    big = client.post("/api/v1/feasibility/", {"cluster": cluster, "manifest": "a: " + "x" * (2 << 20)},
                      format="json")
    assert big.status_code == 400
    assert "manifest" in big.json()  # over the field's 1 MiB
    huge = client.post("/api/v1/feasibility/", {"cluster": cluster, "manifest": "a: " + "x" * (3 << 20)},
                       format="json")
    assert huge.status_code == 400  # over DATA_UPLOAD_MAX_MEMORY_SIZE: not even parsed
    nested = {"kind": "Pod", "spec": {}}
    for _ in range(200):
        nested = {"a": nested}
    pod = client.post("/api/v1/feasibility/", {"cluster": cluster, "pod": nested}, format="json")
    assert pod.status_code == 400
    assert "nested deeper" in str(pod.json()["pod"])
    body = '{"cluster": "feas", "pod": ' + "[" * 100_000 + "]" * 100_000 + "}"
    deep = client.generic("POST", "/api/v1/feasibility/", body, content_type="application/json")
    assert deep.status_code == 400, deep.content[:300]
