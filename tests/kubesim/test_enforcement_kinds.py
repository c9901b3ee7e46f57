"""The kinds behind time-bound security exceptions: ConfigMaps, ValidatingAdmissionPolicies and their bindings
(discovery, tables, list/watch with the official client, kubectl), Namespace labels and the scenario keys."""

from __future__ import annotations

import json
import time

import kubernetes
import pytest
import yaml

from kubesim import Simulator
from kubesim.scenario import ScenarioError, load_scenario
from tests.kubesim.conftest import kubectl_runner
from tests.tools import require_tool

from .conftest import request, watch_lines

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
needs_kubectl = pytest.mark.usefixtures("kubectl_installed")


@pytest.fixture
def kubectl_installed() -> str:
    return require_tool("kubectl")


def _cm(name: str, namespace: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def _vap(name: str) -> dict:
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": rules},
            "validations": [{"expression": "true"}, {"expression": "1 == 1"}],
        },
    }


def _vapb(name: str, policy: str, param_ref: dict | None = None) -> dict:
    spec: dict = {"policyName": policy, "validationActions": ["Audit"]}
    if param_ref:
        spec["paramRef"] = param_ref
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": spec,
    }


# ------------------------------------------------------------------------------------------------ discovery
def test_discovery_advertises_the_new_kinds(sim):
    groups = request(sim, "GET", "/apis").json()["groups"]
    assert [g["name"] for g in groups] == ["resource.k8s.io", "admissionregistration.k8s.io", "events.k8s.io"]
    group = request(sim, "GET", "/apis/admissionregistration.k8s.io").json()
    assert group["preferredVersion"] == {"groupVersion": "admissionregistration.k8s.io/v1", "version": "v1"}
    core = {r["name"]: r for r in request(sim, "GET", "/api/v1").json()["resources"]}
    assert core["configmaps"]["shortNames"] == ["cm"]
    assert core["configmaps"]["namespaced"] is True
    assert "configmaps/status" not in core
    admission = {r["name"]: r for r in request(sim, "GET", f"{ADMISSION}").json()["resources"]}
    assert set(admission) == {
        "validatingadmissionpolicies",
        "validatingadmissionpolicies/status",
        "validatingadmissionpolicybindings",
    }
    for name in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        assert admission[name]["namespaced"] is False
        assert "shortNames" not in admission[name]
        assert admission[name]["categories"] == ["api-extensions"]
    openapi = request(sim, "GET", "/openapi/v3").json()["paths"]
    assert "apis/admissionregistration.k8s.io/v1" in openapi
    assert request(sim, "GET", "/openapi/v3/apis/admissionregistration.k8s.io/v1").status == 200


def test_tables(sim):
    assert (
        request(sim, "POST", "/api/v1/namespaces/team-a/configmaps", _cm("tbl", "team-a", a="1", b="2")).status == 201
    )
    assert request(sim, "POST", f"{ADMISSION}/validatingadmissionpolicies", _vap("tbl")).status == 201
    ref = {"name": "tbl", "namespace": "team-a"}
    assert (
        request(sim, "POST", f"{ADMISSION}/validatingadmissionpolicybindings", _vapb("tbl", "tbl", ref)).status == 201
    )
    sel = _vapb("tbl-sel", "tbl", {"selector": {"matchLabels": {"a": "b"}}})
    assert request(sim, "POST", f"{ADMISSION}/validatingadmissionpolicybindings", sel).status == 201
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}

    def rows(path: str) -> tuple[list[str], list[list]]:
        doc = request(sim, "GET", path, headers=accept).json()
        return [c["name"] for c in doc["columnDefinitions"]], [r["cells"][:-1] for r in doc["rows"]]

    assert rows("/api/v1/namespaces/team-a/configmaps") == (["Name", "Data", "Age"], [["tbl", 2]])
    assert rows(f"{ADMISSION}/validatingadmissionpolicies") == (
        ["Name", "Validations", "ParamKind", "Age"],
        [["tbl", 2, "v1/ConfigMap"]],
    )
    assert rows(f"{ADMISSION}/validatingadmissionpolicybindings") == (
        ["Name", "PolicyName", "ParamRef", "Age"],
        [
            ["tbl", "tbl", "team-a/tbl"],
            [
                "tbl-sel",
                "tbl",
                "&LabelSelector{MatchLabels:map[string]string{a: b,},MatchExpressions:[]LabelSelectorRequirement{},}",
            ],
        ],
    )
    for path in (
        "/api/v1/namespaces/team-a/configmaps/tbl",
        f"{ADMISSION}/validatingadmissionpolicybindings/tbl",
        f"{ADMISSION}/validatingadmissionpolicybindings/tbl-sel",
        f"{ADMISSION}/validatingadmissionpolicies/tbl",
    ):
        assert request(sim, "DELETE", path).status == 200


# ------------------------------------------------------------------------------------------------ config maps
def test_configmaps_list_and_watch_in_one_namespace(sim, api_client):
    core = kubernetes.client.CoreV1Api(api_client)
    rv = core.list_namespaced_config_map("team-a").metadata.resource_version
    core.create_namespaced_config_map("team-a", _cm("watched", "team-a", k="v1"))
    core.create_namespaced_config_map("team-b", _cm("elsewhere", "team-b", k="v1"))
    core.patch_namespaced_config_map("watched", "team-a", {"data": {"k": "v2"}})
    core.delete_namespaced_config_map("watched", "team-a")
    listed = core.list_namespaced_config_map("team-b")
    assert [c.metadata.name for c in listed.items] == ["elsewhere"]
    assert listed.items[0].data == {"k": "v1"}
    assert listed.items[0].metadata.generation is None  # ConfigMaps have no spec, hence no generation
    w = kubernetes.watch.Watch()
    events = [
        (e["type"], e["object"].metadata.name, (e["object"].data or {}).get("k"))
        for e in w.stream(
            core.list_namespaced_config_map,
            "team-a",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        if e["type"] != "BOOKMARK"
    ]
    assert events == [("ADDED", "watched", "v1"), ("MODIFIED", "watched", "v2"), ("DELETED", "watched", "v2")]
    core.delete_namespaced_config_map("elsewhere", "team-b")


def test_configmap_validation(sim):
    bad_key = request(sim, "POST", "/api/v1/namespaces/team-a/configmaps", _cm("bad", "team-a", **{"a b": "x"}))
    assert bad_key.status == 422
    assert bad_key.json()["message"].startswith('ConfigMap "bad" is invalid: data[a b]: Invalid value: "a b": ')
    frozen = {**_cm("frozen", "team-a", k="v"), "immutable": True}
    assert request(sim, "POST", "/api/v1/namespaces/team-a/configmaps", frozen).status == 201
    changed = request(
        sim,
        "PATCH",
        "/api/v1/namespaces/team-a/configmaps/frozen",
        {"data": {"k": "w"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert changed.status == 422
    assert (
        changed.json()["message"]
        == 'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    relabel = request(
        sim,
        "PATCH",
        "/api/v1/namespaces/team-a/configmaps/frozen",
        {"metadata": {"labels": {"x": "y"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert relabel.status == 200
    assert request(sim, "DELETE", "/api/v1/namespaces/team-a/configmaps/frozen").status == 200


def test_namespace_deletion_removes_its_configmaps(sim, api_client):
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": "short-lived"}})
    core.create_namespaced_config_map("short-lived", _cm("cfg", "short-lived"))
    core.delete_namespace("short-lived")
    assert sim.store.get("configmaps", "short-lived", "cfg") is None
    missing = request(sim, "POST", "/api/v1/namespaces/short-lived/configmaps", _cm("cfg", "short-lived"))
    assert missing.status == 404


def test_namespaces_carry_their_name_label(sim, api_client):
    core = kubernetes.client.CoreV1Api(api_client)
    assert core.read_namespace("team-a").metadata.labels == {"team": "team-a", "kubernetes.io/metadata.name": "team-a"}
    created = core.create_namespace({"metadata": {"name": "labelled", "labels": {"kubernetes.io/metadata.name": "x"}}})
    assert created.metadata.labels == {"kubernetes.io/metadata.name": "labelled"}
    patched = core.patch_namespace("labelled", {"metadata": {"labels": {"kubernetes.io/metadata.name": None}}})
    assert patched.metadata.labels == {"kubernetes.io/metadata.name": "labelled"}
    core.delete_namespace("labelled")


# ------------------------------------------------------------------------------------------------ policies
@pytest.mark.slow  # watch windows (about 2.5 s)
def test_policies_list_watch_and_status(sim, api_client):
    api = kubernetes.client.AdmissionregistrationV1Api(api_client)
    rv = api.list_validating_admission_policy().metadata.resource_version
    brv = api.list_validating_admission_policy_binding().metadata.resource_version
    created = api.create_validating_admission_policy(_vap("watched"))
    assert created.status.observed_generation == 1
    assert created.status.type_checking is not None
    api.patch_validating_admission_policy("watched", {"spec": {"validations": [{"expression": "false"}]}})
    status = api.patch_validating_admission_policy_status(
        "watched",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "R",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
    )
    assert status.status.observed_generation == 2
    assert status.status.conditions[0].type == "Ready"
    api.create_validating_admission_policy_binding(_vapb("watched", "watched", {"name": "p", "namespace": "team-a"}))
    events = [
        (e["type"], e["object"].metadata.generation)
        for e in kubernetes.watch.Watch().stream(
            api.list_validating_admission_policy, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1
        )
        if e["type"] != "BOOKMARK"
    ]
    assert events == [("ADDED", 1), ("MODIFIED", 2), ("MODIFIED", 2)]
    bindings = [
        (e["type"], e["object"].spec.param_ref.namespace)
        for e in kubernetes.watch.Watch().stream(
            api.list_validating_admission_policy_binding,
            resource_version=brv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        if e["type"] != "BOOKMARK"
    ]
    assert bindings == [("ADDED", "team-a")]
    assert [b.metadata.name for b in api.list_validating_admission_policy_binding().items] == ["watched"]
    api.delete_validating_admission_policy_binding("watched")
    api.delete_validating_admission_policy("watched")


def test_policy_watch_bookmarks(sim):
    rv = sim.store.resource_version
    start = time.monotonic()
    events = watch_lines(
        sim,
        f"{ADMISSION}/validatingadmissionpolicies?watch=true&allowWatchBookmarks=true&timeoutSeconds=2"
        f"&resourceVersion={rv}",
    )
    assert time.monotonic() - start >= 1.8
    assert events[-1] == {
        "type": "BOOKMARK",
        "object": {
            "kind": "ValidatingAdmissionPolicy",
            "apiVersion": "admissionregistration.k8s.io/v1",
            "metadata": {"resourceVersion": str(sim.store.resource_version)},
        },
    }


# ------------------------------------------------------------------------------------------------ kubectl
@pytest.fixture(scope="module")
def kubectl(sim, tmp_path_factory):
    return kubectl_runner(str(sim.write_kubeconfig(tmp_path_factory.mktemp("kc") / "config")))


POLICY_YAML = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-latest}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], resources: ["pods"], operations: ["CREATE", "UPDATE"]}
  validations:
  - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
    message: "images must be pinned"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-latest}
spec:
  policyName: no-latest
  validationActions: [ACTION]
  matchResources:
    namespaceSelector: {matchLabels: {team: team-b}}
"""
LATEST_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: latest, namespace: team-b}
spec:
  containers: [{name: c, image: "busybox:latest"}]
"""


@needs_kubectl
def test_kubectl_configmaps(kubectl, sim):
    out = kubectl("create", "configmap", "from-cli", "-n", "team-a", "--from-literal=a.key=1", "--from-literal=b=2")
    assert "configmap/from-cli created" in out.stdout
    assert sim.store.get("configmaps", "team-a", "from-cli")["data"] == {"a.key": "1", "b": "2"}
    lines = kubectl("get", "cm", "-n", "team-a").stdout.splitlines()
    assert lines[0].split() == ["NAME", "DATA", "AGE"]
    assert lines[1].split()[:2] == ["from-cli", "2"]
    kubectl("delete", "cm", "from-cli", "-n", "team-a")


@needs_kubectl
def test_kubectl_apply_policy_and_warnings(kubectl, sim):
    out = kubectl("apply", "--server-side", "-f", "-", stdin=POLICY_YAML.replace("ACTION", "Warn"))
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/no-latest serverside-applied" in out.stdout
    lines = kubectl("get", "validatingadmissionpolicies").stdout.splitlines()
    assert lines[0].split() == ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]
    assert lines[1].split()[:3] == ["no-latest", "1", "<unset>"]
    warned = kubectl("apply", "--server-side", "-f", "-", stdin=LATEST_POD)
    assert (
        "Warning: Validation failed for ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest': "
        "images must be pinned" in warned.stderr
    )
    kubectl("delete", "pod", "latest", "-n", "team-b")
    deny = POLICY_YAML.replace("ACTION", "Deny")
    kubectl("apply", "--server-side", "-f", "-", stdin=deny)
    denied = kubectl("apply", "--server-side", "-f", "-", stdin=LATEST_POD, check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == (
        "The pods \"latest\" is invalid: : ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest' denied "
        "request: images must be pinned"
    )
    doc = json.loads(kubectl("get", "validatingadmissionpolicybinding", "no-latest", "-o", "json").stdout)
    assert doc["spec"]["validationActions"] == ["Deny"]
    kubectl("delete", "-f", "-", stdin=deny)
    assert sim.store.objects("validatingadmissionpolicies") == []


# ------------------------------------------------------------------------------------------------ scenarios
PRIVILEGED_SCENARIO = {
    "namespaces": [{"name": "ml"}, {"name": "accelerator-portal-system"}],
    "configmaps": [
        {"name": "privileged-exceptions", "namespace": "accelerator-portal-system", "data": {"ml.debug": 2026}},
    ],
    "nodePools": [{"name": "cpu", "count": 1, "cpu": 8, "memory": "32Gi", "mode": "cpu"}],
    "workloads": [
        {
            "name": "dbg",
            "namespace": "ml",
            "controller": "None",
            "pool": "cpu",
            "cpu": 1,
            "memory": "1Gi",
            "privileged": True,
            "hostDevice": "/dev/infiniband",
            "serviceAccount": "debug",
        },
    ],
    "objects": [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "deny-all"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}
                    ]
                },
                "validations": [{"expression": "false"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "deny-all"},
            "spec": {"policyName": "deny-all", "validationActions": ["Deny"]},
        },
    ],
}


def test_scenario_configmaps_and_privileged_pods():
    objs = load_scenario(PRIVILEGED_SCENARIO)
    kinds = [o["kind"] for o in objs]
    assert kinds.index("ConfigMap") == kinds.index("Namespace") + 6  # right after the (4 system + 2) namespaces
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert cm["data"] == {"ml.debug": "2026"}
    assert cm["metadata"]["namespace"] == "accelerator-portal-system"
    assert "spec" not in cm
    pod = next(o for o in objs if o["kind"] == "Pod")
    container = pod["spec"]["containers"][0]
    assert container["securityContext"] == {"privileged": True}
    assert container["volumeMounts"] == [{"name": "host-device", "mountPath": "/dev/infiniband"}]
    assert pod["spec"]["volumes"] == [{"name": "host-device", "hostPath": {"path": "/dev/infiniband", "type": ""}}]
    assert pod["spec"]["serviceAccountName"] == "debug"


def test_scenario_objects_bypass_admission():
    with Simulator(scenario=PRIVILEGED_SCENARIO) as s:
        assert s.store.get("pods", "ml", "dbg") is not None
        assert s.store.get("configmaps", "accelerator-portal-system", "privileged-exceptions") is not None
        policy = s.store.get("validatingadmissionpolicies", None, "deny-all")
        assert policy["status"] == {"typeChecking": {}, "observedGeneration": 1}
        body = {"metadata": {"name": "new"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        assert request(s, "POST", "/api/v1/namespaces/ml/pods", body).status == 422


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"privileged": "yes"}, "workloads[0].privileged: expected true or false"),
        ({"hostDevice": "dev/x"}, "workloads[0].hostDevice: expected an absolute host path"),
        ({"serviceAccountName": "a"}, "workloads[0]: give serviceAccount or serviceAccountName, not both"),
        ({"serviceAccount": "Not_Valid"}, "workloads[0].serviceAccount: 'Not_Valid' is not a valid DNS subdomain"),
    ],
)
def test_scenario_pod_security_errors(change, error):
    spec = yaml.safe_load(yaml.safe_dump(PRIVILEGED_SCENARIO))
    spec["workloads"][0].update(change)
    with pytest.raises(ScenarioError, match=error.replace("[", r"\[").replace("]", r"\]")):
        load_scenario(spec)


@pytest.mark.parametrize(
    ("configmap", "error"),
    [
        ({"name": "x", "namespace": "nowhere"}, "configmaps[0].namespace: namespace 'nowhere' is not declared"),
        ({"name": "x", "namespace": "ml", "data": {"a b": "1"}}, "configmaps[0].data: 'a b' is not a valid config key"),
        ({"name": "x", "namespace": "ml", "labels": {}}, "configmaps[0]: unknown key(s) labels"),
    ],
)
def test_scenario_configmap_errors(configmap, error):
    spec = {"namespaces": [{"name": "ml"}], "configmaps": [configmap]}
    with pytest.raises(ScenarioError) as excinfo:
        load_scenario(spec)
    assert str(excinfo.value).startswith(error)


def test_demo_has_one_privileged_pod_without_accelerators():
    pods = [o for o in load_scenario("demo") if o["kind"] == "Pod"]
    privileged = [
        p for p in pods if any((c.get("securityContext") or {}).get("privileged") for c in p["spec"]["containers"])
    ]
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in privileged] == [("ml-research", "nccl-debug")]
    debug = privileged[0]
    assert debug["spec"]["serviceAccountName"] == "debug"
    assert debug["status"]["phase"] == "Running"
    assert debug["spec"]["nodeName"].startswith("cpu-")
    assert "resourceClaims" not in debug["spec"]
    assert set(debug["spec"]["containers"][0]["resources"]["requests"]) == {"cpu", "memory"}
