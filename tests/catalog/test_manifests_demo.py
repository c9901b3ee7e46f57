"""End to end on the demo scenario: generate → validate (all layers, incl. feasibility and a dry run against the
simulator over real HTTP) → explain, through the API and the pages."""

from __future__ import annotations

import re

import pytest
import yaml
from django.urls import reverse
from rest_framework.test import APIClient

from inventory.models import Pod
from tests.catalog.factories import OfferingFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _generate(user, cluster, **overrides) -> dict:
    give_namespaces(user, cluster, "ml-inference", "batch-jobs")
    payload = {"offering": "mig-1g", "cluster": cluster.name, "namespace": "ml-inference", "name": "embed",
               "shape": "job", "count": 1, "image": "nvcr.io/nvidia/tritonserver:25.01-py3",
               "command": ["tritonserver", "--model-repository=/models"], "cpu": "4", "memory": "16Gi", **overrides}
    response = _api(user).post("/api/v1/manifests/generate/", payload, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_generated_mig_job_validates_and_an_oversized_one_is_explained(live_demo, member) -> None:
    _, cluster = live_demo
    OfferingFactory(slug="mig-1g", name="A100 MIG 1g.10gb", unit_kind="mig", resource_name="nvidia.com/mig-1g.10gb")
    fits = _generate(member, cluster, dry_run=True)
    report = fits["validation"]
    assert report["ok"], report["findings"]
    layers = {f["layer"] for f in report["findings"]}
    assert "feasibility" in layers
    assert any(f["code"] == "fits" for f in report["findings"])
    assert any(f["layer"] == "dry-run" for f in report["findings"])  # the simulator answered
    # 13 slices are free on the one MIG node (16 minus embed-mig's 3): 14 do not fit anywhere.
    too_big = _generate(member, cluster, count=14)["validation"]
    assert not too_big["ok"]
    unschedulable = next(f for f in too_big["findings"] if f["code"] == "unschedulable")
    assert unschedulable["message"].startswith("0/18 nodes are available:")
    assert "Insufficient nvidia.com/mig-1g.10gb" in unschedulable["message"]


def test_validate_api_reports_each_layer_and_the_dry_run_refusal(live_demo, member) -> None:
    _, cluster = live_demo
    give_namespaces(member, cluster, "ml-research")
    manifest = yaml.safe_dump_all([
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "probe", "namespace": "ml-research"},
         "spec": {"spec": {"devices": {"requests": [{"name": "all", "exactly": {
             "deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True}}]}}}},
    ])
    body = _api(member).post("/api/v1/manifests/validate/", {"manifest": manifest, "cluster": cluster.pk,
                                                             "dry_run": True}, format="json").json()
    assert not body["ok"]
    by_layer = {}
    for finding in body["findings"]:
        by_layer.setdefault(finding["layer"], []).append(finding)
    assert any("admin-access" in f["message"] for f in by_layer["semantics"])
    assert by_layer["dry-run"][0]["code"] == "dry-run-refused"
    assert "admin-access" in by_layer["dry-run"][0]["message"]
    garbage = _api(member).post("/api/v1/manifests/validate/", {"manifest": "a: [1", "cluster": "nope"},
                                format="json")
    assert garbage.status_code == 400


def test_feasibility_api_matches_the_schedulers_message_for_a_pending_pod(live_demo, member) -> None:
    _, cluster = live_demo
    pod = Pod.objects.filter(cluster=cluster, name__startswith="llm-eval-xl").first()
    give_namespaces(member, cluster, pod.namespace)
    manifest = {k: v for k, v in pod.raw.items() if k != "status"}
    response = _api(member).post("/api/v1/feasibility/", {"cluster": cluster.name, "pod": manifest}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedulable"] is False
    # The demo scenario writes the older keyed taint wording ({dedicated: training}); the explainer writes the
    # current generic one. Everything else must be identical.
    expected = re.sub(r"had untolerated taint \{[^}]*\}", "had untolerated taint(s)", pod.scheduling_message)
    assert body["message"].split(" no new claims")[0].split(" preemption:")[0] == (
        expected.split(" no new claims")[0].split(" preemption:")[0])
    assert body["hints"]
    bad = _api(member).post("/api/v1/feasibility/", {"cluster": cluster.name}, format="json")
    assert bad.status_code == 400


def test_pending_pod_page_shows_the_explainer(live_demo, client, member) -> None:
    _, cluster = live_demo
    give_namespaces(member, cluster, "vision-team", tenant_slug="vision")
    client.force_login(member)
    pod = Pod.objects.get(cluster=cluster, name__startswith="detector-train")
    page = client.get(reverse("inventory:pending_pods"))
    assert reverse("catalog:pod_explain", args=[pod.pk]).encode() in page.content
    partial = client.get(reverse("catalog:pod_explain", args=[pod.pk]), headers={"HX-Request": "true"})
    assert partial.status_code == 200
    assert b"Would not schedule" in partial.content
    assert b"nodes are available" in partial.content


def test_validate_page(live_demo, client, member) -> None:
    _, cluster = live_demo
    give_namespaces(member, cluster, "batch-jobs")
    client.force_login(member)
    manifest = yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "batch-jobs"},
                               "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                                        "resources": {"limits": {"nvidia.com/gpus": 1}}}]}})
    response = client.post(reverse("catalog:validate"), {"manifest": manifest, "cluster": cluster.pk},
                           headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-ok="false"' in body
    assert "nvidia.com/gpu" in body


def _gang_job(parallelism: int) -> str:
    return yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp", "namespace": "ml-research"},
        "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                 "template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"kubesim.io/node-pool": "h100"},
                                       "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    })


def test_gang_api_and_validator_say_whether_all_workers_start_at_once(live_demo, member) -> None:
    # h100-000 has 3 free cards, h100-001 none: three 1-GPU workers start, a fourth does not.
    _, cluster = live_demo
    api = _api(member)
    refused = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": _gang_job(3)},
                       format="json")
    assert refused.status_code == 400
    assert "not one of your namespaces" in refused.json()["namespace"][0]
    give_namespaces(member, cluster, "ml-research")
    fits = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": _gang_job(3)},
                    format="json").json()
    assert fits["schedulable"] is True
    assert fits["message"] == "all 3 pods fit at once on 1 node"
    assert fits["nodes_used"] == {"h100-000": 3}
    body = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": _gang_job(4)},
                    format="json").json()
    assert body["schedulable"] is False
    assert body["largest_gang"] == 3
    assert body["first_failure"]["pod"] == "ddp-3"
    assert body["first_failure"]["explanation"]["message"] == (
        "0/18 nodes are available: 1 node(s) had untolerated taint(s), 15 node(s) didn't match Pod's node "
        "affinity/selector, 2 Insufficient nvidia.com/gpu.")
    assert body["hints"][0] == "largest gang placeable now: 3 of 4 pods, on h100-000 x3"
    replicas = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "replicas": 4, "pod": {
        "metadata": {"name": "w", "namespace": "ml-research"},
        "spec": {"nodeSelector": {"kubesim.io/node-pool": "h100"}, "containers": [
            {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}, format="json")
    assert replicas.json()["largest_gang"] == 3
    zoned = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": _gang_job(3),
                                                   "topology": "topology.kubernetes.io/zone"}, format="json").json()
    assert zoned["schedulable"] is True
    assert zoned["topology"]["domain"] == "us-east-1a"
    assert api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": _gang_job(3),
                                                  "topology": "not a label"}, format="json").status_code == 400
    jobset = yaml.safe_dump({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "metadata": {"name": "llm", "namespace": "ml-research"},
                             "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                                 "spec": yaml.safe_load(_gang_job(2))["spec"]}}]}})
    notes = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": jobset},
                     format="json").json()["notes"]
    assert f"cluster {cluster.name} does not serve jobset.x-k8s.io (JobSet is not installed)" in " ".join(notes)
    bad = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": "kind: ConfigMap\n"},
                   format="json")
    assert bad.status_code == 400
    assert "no Pod, Job" in bad.json()["manifest"][0]

    # the validator (the validate and generate pages) reports the gang beside the single-pod verdict
    report = api.post("/api/v1/manifests/validate/", {"manifest": _gang_job(4), "cluster": cluster.pk},
                      format="json").json()
    codes = {f["code"]: f for f in report["findings"] if f["layer"] == "feasibility"}
    assert "fits" in codes  # one pod alone fits
    assert codes["gang-unschedulable"]["message"].startswith("only 3 of 4 pods fit at once")
    assert codes["gang-unschedulable"]["fix"] == "largest gang placeable now: 3 of 4 pods, on h100-000 x3"
    assert not report["ok"]
    three = api.post("/api/v1/manifests/validate/", {"manifest": _gang_job(3), "cluster": cluster.pk},
                     format="json").json()
    assert any(f["code"] == "gang-fits" for f in three["findings"])


def _kueue_gang_job(parallelism: int, level: str) -> str:
    job = yaml.safe_load(_gang_job(parallelism))
    job["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": level}}
    return yaml.safe_dump(job)


def test_gang_api_follows_kueues_preferred_topology_up_the_synced_levels(live_demo, member) -> None:
    # the demo's Topology gpu-blocks: topology.example.com/block, then kubernetes.io/hostname; both H100s in block-1
    _, cluster = live_demo
    give_namespaces(member, cluster, "ml-research")
    api = _api(member)
    host = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name,
                                                  "manifest": _kueue_gang_job(3, "kubernetes.io/hostname")},
                    format="json").json()
    assert host["schedulable"] is True
    assert host["message"].startswith("preferred topology kubernetes.io/hostname: fits in one "
                                      "kubernetes.io/hostname=h100-000: yes — all 3 pods fit at once on 1 node")
    assert host["topology"]["levels_tried"] == ["kubernetes.io/hostname"]
    assert ("levels from Kueue Topology gpu-blocks: topology.example.com/block > kubernetes.io/hostname "
            "(widest first)") in host["notes"]
    # four do not fit on one node, nor in block-1 (h100-001 has no free card), nor anywhere the selector allows
    wider = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name,
                                                   "manifest": _kueue_gang_job(4, "kubernetes.io/hostname")},
                     format="json").json()
    assert wider["schedulable"] is False
    assert wider["topology"]["levels_tried"] == ["kubernetes.io/hostname", "topology.example.com/block", ""]
    assert wider["message"].startswith("preferred topology kubernetes.io/hostname: fits in one kubernetes.io/hostname? "
                                       "no; in one topology.example.com/block? no; without a common domain: no — only "
                                       "3 of 4 pods fit at once")
    # a required level that no Topology has: Kueue would not admit it (said as a note; the check is unchanged)
    job = yaml.safe_load(_gang_job(3))
    job["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"}}
    required = api.post("/api/v1/feasibility/gang/", {"cluster": cluster.name, "manifest": yaml.safe_dump(job)},
                        format="json").json()
    assert required["schedulable"] is False
    assert ("kueue.x-k8s.io/podset-required-topology: example.com/rack is not a level of any Kueue Topology of this "
            "cluster (gpu-blocks (topology.example.com/block > kubernetes.io/hostname)): Kueue would not admit this "
            "workload") in required["notes"]
    # the validator's gang check (validate and generate pages) uses the same levels
    report = api.post("/api/v1/manifests/validate/", {"manifest": _kueue_gang_job(4, "kubernetes.io/hostname"),
                                                      "cluster": cluster.pk}, format="json").json()
    gang = next(f for f in report["findings"] if f["code"] == "gang-unschedulable")
    assert gang["message"].startswith("preferred topology kubernetes.io/hostname: fits in one kubernetes.io/hostname? "
                                      "no; in one topology.example.com/block? no; without a common domain: no")
