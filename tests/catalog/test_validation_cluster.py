"""Manifest validator against the inventory (context_for_cluster) and the validate_manifest command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from catalog.validation import context_for_cluster, validate_manifest
from inventory.models import Device, DeviceClass, Namespace, Node, ResourceQuota
from tests.catalog.factories import NS, claim, container, exactly, job, pod, template, with_template
from tests.inventory.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def _namespace(cluster: Any, name: str, labels: dict[str, str] | None = None, **extra: Any) -> Namespace:
    return Namespace.objects.create(cluster=cluster, uid=f"ns-{cluster.pk}-{name}", name=name, resource_version="1",
                                    labels=labels or {}, raw={"metadata": {"name": name, "labels": labels or {}}},
                                    **extra)


def _cpu_node(cluster: Any, name: str, **extra: Any) -> Node:
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    return NodeFactory(cluster=cluster, name=name, labels={"kubernetes.io/hostname": name}, capacity=capacity,
                       allocatable=capacity, **extra)


@pytest.fixture
def cluster() -> Any:
    """2 H100 nodes (one in a tainted dedicated pool), 1 MIG node, 1 DRA node, 2 CPU nodes, a node whose plugin
    reports 0 GPUs, plus rows that must be ignored (deleted rows, another cluster)."""
    cluster = ClusterFactory(name="prod-gpu", server_version="v1.34.3-eks-1234")
    NodeFactory(cluster=cluster, name="gpu-a")
    NodeFactory(cluster=cluster, name="gpu-b", labels={"pool": "h100", "kubernetes.io/hostname": "gpu-b"},
                taints=[{"key": "dedicated", "value": "h100", "effect": "NoSchedule"},
                        {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}])
    NodeFactory(cluster=cluster, name="mig-a", capacity={"cpu": "64", "nvidia.com/mig-1g.10gb": "7"})
    _cpu_node(cluster, "cpu-a")
    _cpu_node(cluster, "cpu-b")
    _cpu_node(cluster, "dra-a")
    NodeFactory(cluster=cluster, name="plugin-lost", capacity={"cpu": "64", "nvidia.com/gpu": "0"})
    NodeFactory(cluster=cluster, name="gone", capacity={"example.com/fpga": "1"}, deleted_at=timezone.now())
    Device.objects.create(cluster=cluster, key="gpu.nvidia.com/dra-a/gpu-0", path="dra", mode="dra-device",
                          unit="gpu.nvidia.com gpu", node_name="dra-a", driver="gpu.nvidia.com", pool="dra-a",
                          device_name="gpu-0", capacity=1, allocatable=1, free=1)
    _namespace(cluster, NS)
    _namespace(cluster, "monitoring", {"resource.kubernetes.io/admin-access": "true"})
    _namespace(cluster, "almost", {"resource.kubernetes.io/admin-access": "True"})
    _namespace(cluster, "deleted", deleted_at=timezone.now())
    DeviceClass.objects.create(cluster=cluster, uid="dc-1", name="gpu.nvidia.com", resource_version="1",
                               extended_resource_name="nvidia.com/gpu",
                               raw={"metadata": {"name": "gpu.nvidia.com"},
                                    "spec": {"extendedResourceName": "nvidia.com/gpu"}})
    ResourceQuota.objects.create(cluster=cluster, uid="q-1", name="gpus", namespace=NS, resource_version="1",
                                 hard={"requests.nvidia.com/gpu": "16"}, used={"requests.nvidia.com/gpu": "12"},
                                 raw={"spec": {"hard": {"requests.nvidia.com/gpu": "16"}}})
    ResourceQuota.objects.create(cluster=cluster, uid="q-2", name="best-effort", namespace=NS, resource_version="1",
                                 hard={"pods": "0"}, used={}, raw={"spec": {"hard": {"pods": "0"},
                                                                            "scopes": ["BestEffort"]}})
    other = ClusterFactory(name="other")
    NodeFactory(cluster=other, name="other-gpu", capacity={"amd.com/gpu": "8"})
    _namespace(other, "other-ns")
    return cluster


def test_context_for_cluster_reads_the_inventory(cluster: Any) -> None:
    context = context_for_cluster(cluster)
    assert context.kubernetes_version == "1.34.0"
    assert set(context.namespaces or {}) == {NS, "monitoring", "almost"}
    assert context.namespaces["monitoring"] == {"resource.kubernetes.io/admin-access": "true"}
    assert context.admin_access_namespaces == frozenset({"monitoring"})
    assert context.node_resources == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1}
    assert context.gpu_node_count == 4  # gpu-a, gpu-b, mig-a and the DRA node
    assert context.cpu_only_node_count == 3  # cpu-a, cpu-b and plugin-lost
    assert set(context.device_classes or {}) == {"gpu.nvidia.com"}
    assert context.device_classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert context.node_taints == {"dedicated": {"h100"}}
    assert context.node_taint_labels == {"dedicated": {"pool": "h100", "kubernetes.io/hostname": "gpu-b"}}
    quotas = {q["name"]: q for q in (context.quotas or {})[NS]}
    assert quotas["gpus"] == {"name": "gpus", "hard": {"requests.nvidia.com/gpu": "16"},
                              "used": {"requests.nvidia.com/gpu": "12"}, "spec": {}}
    assert quotas["best-effort"]["spec"] == {"scopes": ["BestEffort"]}
    assert context.feasibility is None
    assert context.dry_run is None


def test_context_for_an_empty_cluster() -> None:
    cluster = ClusterFactory(name="empty", server_version="")
    context = context_for_cluster(cluster)
    assert context.kubernetes_version == "1.35.0"
    assert context.namespaces == {}
    assert context.node_resources == {}
    assert context.quotas == {}
    assert context.gpu_node_count == 0
    assert context.cpu_only_node_count == 0
    assert context.admin_access_namespaces == frozenset()


def test_missing_gpu_case_against_the_inventory(cluster: Any) -> None:
    text = yaml.safe_dump(pod(containers=[container(limits={"nvidia.com/gpus": 1})]))
    report = validate_manifest(text, context_for_cluster(cluster))
    finding = next(f for f in report.findings if f.code == "unknown-resource-name")
    assert "nvidia.com/gpu" in finding.fix
    assert "4 accelerator node(s) and 3 CPU-only node(s)" in finding.message
    assert "adding CPU nodes will not help" in finding.message


def test_inventory_drives_every_cluster_aware_layer(cluster: Any) -> None:
    documents = [
        pod("big", containers=[container(limits={"nvidia.com/gpu": 8})],
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]),
        claim("watch", {"name": "all", "exactly": exactly(count=None, allocationMode="All", adminAccess=True)},
              namespace="almost"),
        claim("c", {"name": "r", "exactly": exactly("gpu.example.com")}, namespace="nowhere"),
    ]
    report = validate_manifest("---\n".join(yaml.safe_dump(d) for d in documents), context_for_cluster(cluster))
    found = {f.code for f in report.findings}
    assert {"quota-exceeded", "toleration-without-affinity", "admin-access-forbidden",
            "unknown-namespace", "unknown-device-class"} <= found
    quota = next(f for f in report.findings if f.code == "quota-exceeded")
    assert "requests.nvidia.com/gpu needs 8, 4 of 16 left" in quota.message


def test_validation_writes_nothing(cluster: Any, django_assert_max_num_queries: Any) -> None:
    counts = [model.objects.count() for model in (Namespace, Node, ResourceQuota, DeviceClass, Device)]
    with django_assert_max_num_queries(10) as captured:
        context = context_for_cluster(cluster)
        validate_manifest(yaml.safe_dump(pod()), context)
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in captured.captured_queries)
    assert counts == [model.objects.count() for model in (Namespace, Node, ResourceQuota, DeviceClass, Device)]


# The command.


def _write(tmp_path: Path, documents: list[dict[str, Any]] | str, name: str = "manifest.yaml") -> str:
    path = tmp_path / name
    text = documents if isinstance(documents, str) else "---\n".join(yaml.safe_dump(d) for d in documents)
    path.write_text(text, encoding="utf-8")
    return str(path)


def _call(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("validate_manifest", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_command_ok_manifest_exits_zero(tmp_path: Path) -> None:
    code, out = _call(_write(tmp_path, [template(), with_template(job())]))
    assert code == 0
    assert out.strip().endswith("OK: 2 document(s), 0 error(s), 0 warning(s), 0 info")


def test_command_errors_exit_one_with_text_findings(tmp_path: Path) -> None:
    bad = pod(containers=[container(limits={"nvidia.com/gpu": "0.5"}, securityContext={"privileged": True})])
    code, out = _call(_write(tmp_path, [bad]))
    assert code == 1
    assert "[extended-resource-not-integer]" in out
    assert "[privileged]" in out
    assert "documents[0].spec.containers[0].resources.limits['nvidia.com/gpu']" in out
    assert "FAILED: 1 document(s), 2 error(s)" in out


def test_command_json_output_is_the_report(tmp_path: Path) -> None:
    code, out = _call(_write(tmp_path, [pod(hostNetwork=True)]), "--format", "json")
    data = json.loads(out)
    assert code == 1
    assert data["ok"] is False
    assert [f["code"] for f in data["findings"]] == ["host-namespace"]
    assert data["documents"][0]["kind"] == "Pod"


def test_command_with_cluster_uses_the_inventory(cluster: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, [pod(containers=[container(limits={"nvidia.com/gpus": 1})])])
    assert _call(path)[0] == 0  # cluster-unaware: the name is well formed
    code, out = _call(path, "--cluster", "prod-gpu", "--format", "json")
    assert code == 1
    finding = next(f for f in json.loads(out)["findings"] if f["code"] == "unknown-resource-name")
    assert "nvidia.com/gpu" in finding["fix"]


def test_command_kubernetes_version_overrides_the_cluster(cluster: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, [claim()])
    assert _call(path, "--cluster", "prod-gpu")[0] == 0
    code, out = _call(path, "--cluster", "prod-gpu", "--kubernetes-version", "1.33")
    assert code == 1
    assert "[schema-not-found]" in out


@pytest.mark.parametrize("args", [
    ("/nonexistent/manifest.yaml",),
    (".",),
    ("{file}", "--cluster", "no-such-cluster"),
    ("{file}", "--kubernetes-version", "latest"),
    ("{file}", "--kubernetes-version", "1.35; rm -rf /"),
])
def test_command_usage_errors_exit_two(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = _write(tmp_path, [pod()])
    with pytest.raises(CommandError) as caught:
        call_command("validate_manifest", *[a.replace("{file}", path) for a in args], stdout=StringIO())
    assert caught.value.returncode == 2
    assert str(caught.value)


def test_command_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    text = yaml.safe_dump(pod(hostPID=True))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, out = _call("-")
    assert code == 1
    assert "[host-namespace]" in out


def test_command_refuses_non_utf8_and_oversized_files(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff\xfe}\n")
    code, out = _call(str(binary))
    assert code == 1
    assert "[not-utf8]" in out
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * (2 * 1024 * 1024))
    code, out = _call(str(big))
    assert code == 1
    assert "[manifest-too-large]" in out


def test_command_hostile_yaml_exits_one(tmp_path: Path) -> None:
    laughs = "a: &a [x, x]\nb: [*a, *a]\n"
    code, out = _call(_write(tmp_path, laughs))
    assert code == 1
    assert "[yaml-anchor]" in out


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test"}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), "validate_manifest", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow  # the command in subprocesses
def test_command_line_exit_codes_without_traceback(tmp_path: Path) -> None:
    missing = _manage(str(tmp_path / "missing.yaml"))
    assert missing.returncode == 2
    assert "is not a readable file" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = _manage(_write(tmp_path, [pod(hostIPC=True)]))
    assert bad.returncode == 1
    assert "[host-namespace]" in bad.stdout
    assert "Traceback" not in bad.stderr
    good = _manage(_write(tmp_path, [pod()], "good.yaml"))
    assert good.returncode == 0, good.stdout + good.stderr
