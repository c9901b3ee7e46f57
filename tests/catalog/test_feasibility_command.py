"""`manage.py explain_pod`: files in, scheduler-style explanation out; bad input gives a CommandError."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from catalog.feasibility import snapshot_for_cluster
from inventory.models import Cluster, DeviceClass, Node, Pod, ResourceClaimTemplate, ResourceSlice
from tests.catalog.feasibility_fixtures.builders import (
    device,
    device_class,
    exact,
    gpu_node,
    gpu_pod,
    node,
    pod,
    resource_slice,
    template,
)


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("explain_pod", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def cluster_files(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                 "items": [gpu_node("a", gpus=8), gpu_node("b", gpus=4), node("c")]}))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([gpu_pod("busy", gpus=4, node_name="a")]))
    return nodes, pods


def test_json_output_shape(tmp_path, cluster_files):
    nodes, pods = cluster_files
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(gpu_pod("train", gpus=8)))
    data = json.loads(_run("--pod", str(pod_file), "--nodes", str(nodes), "--pods", str(pods), "--format", "json"))
    assert data["schedulable"] is False
    assert data["message"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert [n["name"] for n in data["nodes"]] == ["a", "b", "c"]
    assert data["nodes"][0]["fits"] is False
    assert data["nodes"][0]["reasons"] == ["Insufficient nvidia.com/gpu"]
    assert isinstance(data["hints"], list)
    assert data["hints"]
    assert "a frees 4 nvidia.com/gpu when default/busy finishes" in data["hints"]


def test_text_output(tmp_path, cluster_files):
    nodes, pods = cluster_files
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(gpu_pod("train", gpus=4)))
    text = _run("--pod", str(pod_file), "--nodes", str(nodes), "--pods", str(pods))
    assert text.splitlines()[0] == "fits on 2 of 3 nodes (a, b)"
    assert "c: Insufficient nvidia.com/gpu  [NodeResourcesFit]" in text


def test_multi_document_manifest_with_a_claim_template_and_dra_objects_in_the_nodes_file(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([
        node("n"), resource_slice("n", [device("gpu-0"), device("gpu-1")]), device_class(),
    ]))
    manifest = tmp_path / "job.yaml"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}], "restartPolicy": "Never",
                                          "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two"}]}}}}
    manifest.write_text(yaml.safe_dump_all([job, template("two", [exact("g", count=2)], namespace="ml")]))
    data = json.loads(_run("--pod", str(manifest), "--nodes", str(cluster), "--format", "json"))
    assert data["schedulable"] is True
    assert data["fitting_nodes"] == ["n"]
    assert "explaining the pod template of Job train" in data["notes"]
    manifest.write_text(yaml.safe_dump_all([job, template("two", [exact("g", count=3)], namespace="ml")]))
    data = json.loads(_run("--pod", str(manifest), "--nodes", str(cluster), "--format", "json"))
    assert data["message"] == "0/1 nodes are available: 1 cannot allocate all claims."
    assert data["nodes"][0]["details"] == ["request g: 3 devices needed, 2 match the selectors, 2 free"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "--pod: .* empty"),
        ("{not json", "--pod: .*neither JSON nor YAML"),
        ("[1, 2", "--pod: .*invalid JSON"),
        ("kind: Node\nmetadata: {name: x}\n", "--pod: expected exactly one Pod"),
        ("- 3\n", "--pod: .*expected an object"),
    ],
)
def test_bad_pod_file(tmp_path, cluster_files, content, expected):
    nodes, _ = cluster_files
    pod_file = tmp_path / "pod.txt"
    pod_file.write_text(content)
    with pytest.raises(CommandError, match=expected):
        _run("--pod", str(pod_file), "--nodes", str(nodes))


def test_missing_files_and_missing_nodes(tmp_path, cluster_files):
    nodes, pods = cluster_files
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(pod()))
    with pytest.raises(CommandError, match=r"--pod: .*cannot read"):
        _run("--pod", str(tmp_path / "nope.json"), "--nodes", str(nodes))
    with pytest.raises(CommandError, match=r"--nodes: .*cannot read"):
        _run("--pod", str(pod_file), "--nodes", str(tmp_path / "nope.json"))
    with pytest.raises(CommandError, match="--nodes: no objects of kind Node"):
        _run("--pod", str(pod_file), "--nodes", str(pods))
    with pytest.raises(CommandError, match="--pods needs --nodes"):
        _run("--pod", str(pod_file), "--pods", str(pods))


def test_command_exits_non_zero_without_traceback(tmp_path):
    from django.core.management import ManagementUtility

    pod_file = tmp_path / "pod.json"
    pod_file.write_text("{")
    err = io.StringIO()
    utility = ManagementUtility(["manage.py", "explain_pod", "--pod", str(pod_file), "--nodes", str(pod_file)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stderr", err)
        with pytest.raises(SystemExit) as exit_info:
            utility.execute()
    assert exit_info.value.code != 0
    assert "CommandError: --pod:" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def _store(model, cluster, obj, **columns):
    meta = obj["metadata"]
    return model.objects.create(cluster=cluster, uid=meta["name"], name=meta["name"],
                                namespace=meta.get("namespace", ""), resource_version="1", raw=obj, **columns)


@pytest.mark.django_db
def test_snapshot_from_the_inventory_and_cluster_option(tmp_path):
    cluster = Cluster.objects.create(name="feas")
    _store(Node, cluster, gpu_node("g1", gpus=8))
    _store(Node, cluster, gpu_node("g2", gpus=8))
    gone = _store(Node, cluster, gpu_node("g3", gpus=8))
    Node.objects.filter(pk=gone.pk).update(deleted_at="2026-01-01T00:00:00Z")
    _store(Pod, cluster, gpu_pod("run", gpus=8, node_name="g1"), node_name="g1", phase="Running")
    _store(Pod, cluster, gpu_pod("done", gpus=8, node_name="g2", phase="Succeeded"), node_name="g2",
           phase="Succeeded")
    _store(Pod, cluster, gpu_pod("queued", gpus=8), phase="Pending")
    _store(ResourceSlice, cluster, resource_slice("g1", [device("gpu-0")]))
    _store(DeviceClass, cluster, device_class())
    _store(ResourceClaimTemplate, cluster, template("t", [exact()]))

    snapshot = snapshot_for_cluster(cluster)
    assert snapshot.node_names == ["g1", "g2"]
    assert [p.name for p in snapshot.nodes["g1"].pods] == ["run"]
    assert snapshot.nodes["g2"].pods == []
    assert len(snapshot.devices) == 1
    assert ("default", "t") in snapshot.claim_templates
    assert snapshot_for_cluster("feas").node_names == ["g1", "g2"]

    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(gpu_pod("train", gpus=8)))
    data = json.loads(_run("--pod", str(pod_file), "--cluster", "feas", "--format", "json"))
    assert data["message"] == "fits on 1 of 2 nodes (g2)"
    data = json.loads(_run("--pod", str(pod_file), "--format", "json"))  # the only cluster
    assert data["fitting_nodes"] == ["g2"]
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        _run("--pod", str(pod_file), "--cluster", "nope")
    Cluster.objects.create(name="second")
    with pytest.raises(CommandError, match="give --nodes FILE or --cluster NAME"):
        _run("--pod", str(pod_file))


def test_gang_option_places_every_pod_of_the_workload_at_once(tmp_path, cluster_files):
    nodes, pods = cluster_files  # a: 8 GPUs (4 busy), b: 4 GPUs, c: none
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp"},
                                   "spec": {"parallelism": 3, "completionMode": "Indexed",
                                            "template": {"spec": gpu_pod("w", gpus=4)["spec"]}}}))
    text = _run("--gang", "--pod", str(job), "--nodes", str(nodes), "--pods", str(pods))
    assert text.splitlines()[0].startswith("only 2 of 3 pods fit at once; ddp-2 finds no node after the 2 before it: "
                                           "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert "ddp-0 -> a" in text
    assert "largest gang placeable now: 2 of 3 pods, on a, b" in text
    one = tmp_path / "one.json"
    one.write_text(json.dumps(gpu_pod("w", gpus=4)))
    data = json.loads(_run("--gang", "--replicas", "2", "--pod", str(one), "--nodes", str(nodes), "--format", "json"))
    assert data["schedulable"] is True
    assert data["nodes_used"] == {"b": 1, "a": 1}  # best fit: b's 4 cards first, a stays whole for the next pod
    with pytest.raises(CommandError, match="--topology"):
        _run("--gang", "--topology", "not a key", "--pod", str(job), "--nodes", str(nodes))
    with pytest.raises(CommandError, match="go with --gang"):
        _run("--replicas", "2", "--pod", str(job), "--nodes", str(nodes))
    with pytest.raises(CommandError, match="--pod: no Pod, Job"):
        _run("--gang", "--pod", str(nodes), "--nodes", str(nodes))


def test_gang_option_takes_kueue_topology_levels_from_the_snapshot_files(tmp_path):
    # a and b have 4 free cards each, c 8, all in rack r1; d (rack r2) 4: two 4-GPU pods fit on one node (c), three
    # only in rack r1
    nodes = tmp_path / "cluster.yaml"
    nodes.write_text(yaml.safe_dump_all([
        gpu_node("a", labels={"example.com/rack": "r1"}), gpu_node("b", labels={"example.com/rack": "r1"}),
        gpu_node("c", labels={"example.com/rack": "r1"}), gpu_node("d", labels={"example.com/rack": "r2"}),
        gpu_pod("busy-a", gpus=4, node_name="a"), gpu_pod("busy-b", gpus=4, node_name="b"),
        gpu_pod("busy-d", gpus=4, node_name="d"),
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "dc"},
         "spec": {"levels": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}},
    ]))

    def job(parallelism: int) -> str:
        path = tmp_path / f"job-{parallelism}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp"}, "spec": {
            "parallelism": parallelism, "completionMode": "Indexed", "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}},
                "spec": gpu_pod("w", gpus=4)["spec"]}}}))
        return str(path)

    two = json.loads(_run("--gang", "--pod", job(2), "--nodes", str(nodes), "--format", "json"))
    assert two["topology"]["levels_tried"] == ["kubernetes.io/hostname"]
    assert two["topology"]["domain"] == "c"
    three = _run("--gang", "--pod", job(3), "--nodes", str(nodes))
    assert three.splitlines()[0].startswith("preferred topology kubernetes.io/hostname: fits in one "
                                            "kubernetes.io/hostname? no; in one example.com/rack=r1: yes — all 3 pods")
    assert "levels from Kueue Topology dc: example.com/rack > kubernetes.io/hostname (widest first)" in three
