"""ValidatingAdmissionPolicy admission over real HTTP: the portal's privileged-exception policy, matching, params,
validation actions, failure policies, dry run, and the status the API server answers with."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from kubesim import Simulator
from kubesim.admission import CompiledPolicy
from portal.enforcement.services import binding_document, policy_document
from tests.podsecurity_cases import CASE_IDS, CASES, Case

from .conftest import request

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICY_NAME = "accelerator-portal-privileged"
EXCEPTIONS = "/api/v1/namespaces/accelerator-portal-system/configmaps"
EXEMPT = ["accelerator-portal-system", "batch", "kube-system"]  # "batch" plays a system namespace here
DENIED_PREFIX = f"ValidatingAdmissionPolicy '{POLICY_NAME}' with binding '{POLICY_NAME}' denied request: "
NEEDS_EXCEPTION = (
    "the pod violates the baseline Pod Security Standard ({controls}) and needs an active exception for service "
    "account {sa} in {ns} (request one in the Accelerator Portal)"
)


def needs_exception(sa: str, ns: str = "ml-research", controls: str = "privileged") -> str:
    return NEEDS_EXCEPTION.format(sa=sa, ns=ns, controls=controls)
PARAM_MISSING = "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"


@pytest.fixture(scope="module")
def vsim():
    namespaces = ["default", "ml-research", "vision", "batch", "accelerator-portal-system"]
    objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]
    s = Simulator(scenario=objs, port=0).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(vsim):
    c = kubernetes.config.new_client_from_config_dict(vsim.kubeconfig())
    yield c
    c.close()


@pytest.fixture
def core(client):
    return kubernetes.client.CoreV1Api(client)


# ------------------------------------------------------------------------------------------------ helpers
def _path(doc: dict) -> str:
    kind, meta = doc["kind"], doc["metadata"]
    if kind == "ConfigMap":
        return f"/api/v1/namespaces/{meta['namespace']}/configmaps"
    plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies"}.get(kind, "validatingadmissionpolicybindings")
    return f"{ADMISSION}/{plural}"


@contextlib.contextmanager
def installed(sim: Simulator, *docs: dict) -> Iterator[None]:
    """Create the objects (policies, bindings, config maps) for the duration of a test."""
    made = []
    try:
        for doc in docs:
            r = request(sim, "POST", _path(doc), doc)
            assert r.status == 201, r.body
            made.append(doc)
        yield
    finally:
        for doc in reversed(made):
            request(sim, "DELETE", f"{_path(doc)}/{doc['metadata']['name']}")


def portal_policy() -> list[dict]:
    """The portal's own policy and binding, as portal.enforcement generates them (never a hand-written copy)."""
    return [policy_document(), binding_document(EXEMPT)]


def exceptions(**data: str) -> dict:
    meta = {"name": "privileged-exceptions", "namespace": "accelerator-portal-system"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def pod(
    name: str,
    *,
    privileged: bool = False,
    sa: str | None = None,
    labels: dict | None = None,
    host_path: str | None = None,
) -> dict:
    """A pod body without a namespace (it comes from the URL); no labels/securityContext/volumes unless asked."""
    container: dict = {"name": "main", "image": "busybox"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    body: dict = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}
    if sa:
        body["spec"]["serviceAccountName"] = sa
    if labels:
        body["metadata"]["labels"] = labels
    if host_path:
        body["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": host_path}}]
    return body


def policy(name: str, validations: list[dict], **spec) -> dict:
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE", "UPDATE"]}]
    body = {"matchConstraints": {"resourceRules": rules}, "validations": validations, **spec}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def binding(name: str, policy_name: str, actions: list[str], **spec) -> dict:
    body = {"policyName": policy_name, "validationActions": actions, **spec}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": body,
    }


def create_pod(core, namespace: str, body: dict, **kwargs):
    return core.create_namespaced_pod(namespace, body, **kwargs)


def denial(excinfo) -> tuple[int, str, dict]:
    exc: ApiException = excinfo.value
    return exc.status, exc.reason, json.loads(exc.body)


# ------------------------------------------------------------------------------------------------ the portal policy
def test_privileged_pod_denied_without_exception(vsim, core):
    other_key = exceptions(vision_default="2026-02-01T00:00:00Z")
    with installed(vsim, *portal_policy(), other_key), pytest.raises(ApiException) as excinfo:
        create_pod(core, "ml-research", pod("dbg", privileged=True, sa="debug"))
    code, phrase, status = denial(excinfo)
    message = DENIED_PREFIX + needs_exception("debug")
    assert (code, phrase) == (403, "Forbidden")
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "dbg" is forbidden: {message}',
        "reason": "Forbidden",
        "details": {"name": "dbg", "kind": "pods", "causes": [{"message": message}]},
        "code": 403,
    }
    assert vsim.store.get("pods", "ml-research", "dbg") is None


def test_exception_key_admits_the_service_account(vsim, core):
    with installed(vsim, *portal_policy(), exceptions(**{"ml-research_debug": "2026-02-01T00:00:00Z"})):
        created = create_pod(core, "ml-research", pod("dbg-ok", privileged=True, sa="debug"))
        assert created.metadata.namespace == "ml-research"
        with pytest.raises(ApiException) as excinfo:  # another service account has no exception
            create_pod(core, "ml-research", pod("dbg-other", privileged=True))
        assert json.loads(excinfo.value.body)["message"].endswith(needs_exception("default"))
    core.delete_namespaced_pod("dbg-ok", "ml-research")


def test_baseline_pods_are_always_admitted(vsim, core):
    with installed(vsim, *portal_policy(), exceptions()):
        assert create_pod(core, "ml-research", pod("plain")).metadata.name == "plain"
        assert create_pod(core, "default", pod("plain")).metadata.name == "plain"  # a namespace of no tenant
    core.delete_namespaced_pod("plain", "ml-research")
    core.delete_namespaced_pod("plain", "default")


@pytest.mark.parametrize("path", ["/dev/infiniband", "/data", "//", "/./dev", "/proc/1/root"])
def test_any_host_path_needs_an_exception(vsim, core, path):
    with installed(vsim, *portal_policy(), exceptions()), pytest.raises(ApiException) as excinfo:
        create_pod(core, "vision", pod("rdma", host_path=path, sa="rdma"))
    code, _, status = denial(excinfo)
    assert code == 403
    message = needs_exception("rdma", "vision", "hostPath volumes")
    assert status["message"] == f'pods "rdma" is forbidden: {DENIED_PREFIX}{message}'


def test_policy_does_not_apply_in_unbound_namespaces(vsim, core):
    with installed(vsim, *portal_policy()):
        assert create_pod(core, "batch", pod("root", privileged=True)).metadata.name == "root"
    core.delete_namespaced_pod("root", "batch")


def test_workload_key_admits_one_workload(vsim, core):
    key = {"ml-research_default_nccl-tests": "2026-02-01T00:00:00Z"}
    labelled = pod("nccl", privileged=True, labels={"app.kubernetes.io/name": "nccl-tests"})
    with installed(vsim, *portal_policy(), exceptions(**key)):
        assert create_pod(core, "ml-research", labelled).metadata.name == "nccl"
        with pytest.raises(ApiException):
            create_pod(core, "ml-research", pod("other", privileged=True, labels={"app.kubernetes.io/name": "x"}))
    core.delete_namespaced_pod("nccl", "ml-research")


def test_missing_param_with_deny_denies_everything_matched(vsim, core):
    with installed(vsim, *portal_policy()), pytest.raises(ApiException) as excinfo:
        create_pod(core, "ml-research", pod("anything"))
    code, phrase, status = denial(excinfo)
    assert (code, phrase) == (422, "Unprocessable Entity")
    assert status["reason"] == "Invalid"
    assert status["message"] == f'pods "anything" is forbidden: {DENIED_PREFIX}{PARAM_MISSING}'
    assert status["details"]["causes"] == [{"message": DENIED_PREFIX + PARAM_MISSING}]


def test_missing_param_with_allow_skips_the_binding(vsim, core):
    docs = portal_policy()
    docs[1]["spec"]["paramRef"]["parameterNotFoundAction"] = "Allow"
    with installed(vsim, *docs):
        assert create_pod(core, "ml-research", pod("allowed", privileged=True)).metadata.name == "allowed"
    core.delete_namespaced_pod("allowed", "ml-research")


def test_exception_keys_do_not_collide(vsim, core):
    """service account "runner" with workload "diag" and service account "runner.diag" are different scopes (the old
    `<ns>.<sa>.<workload>` key made both "ml-research.runner.diag")."""
    diag = {"app.kubernetes.io/name": "diag"}
    with installed(vsim, *portal_policy(), exceptions(**{"ml-research_runner_diag": "grant=1"})):
        assert create_pod(core, "ml-research", pod("runner-diag", privileged=True, sa="runner", labels=diag))
        with pytest.raises(ApiException):
            create_pod(core, "ml-research", pod("dotted", privileged=True, sa="runner.diag"))
    with installed(vsim, *portal_policy(), exceptions(**{"ml-research_runner.diag": "grant=2"})):
        assert create_pod(core, "ml-research", pod("dotted", privileged=True, sa="runner.diag"))
        with pytest.raises(ApiException):
            create_pod(core, "ml-research", pod("runner-diag-2", privileged=True, sa="runner", labels=diag))
    for name in ("runner-diag", "dotted"):
        core.delete_namespaced_pod(name, "ml-research")


def add_ephemeral(vsim, namespace: str, name: str, container: dict):
    """`kubectl debug`'s request: a strategic merge patch of the pods/ephemeralcontainers subresource."""
    return request(vsim, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers",
                   {"spec": {"ephemeralContainers": [container]}},
                   headers={"Content-Type": "application/strategic-merge-patch+json"})


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_shared_cases_through_the_generated_policy(vsim, core, case: Case):
    """The shared case list through the policy portal.enforcement generates, over real HTTP: a pod that violates the
    baseline is refused without an exception and admitted with one; an ephemeral container is checked when it is
    added through the pods/ephemeralcontainers subresource."""
    name = f"case-{CASE_IDS.index(case.id)}"
    body = case.pod(name, with_ephemeral=False)
    with installed(vsim, *portal_policy(), exceptions()):
        if case.ephemeral is None:
            r = request(vsim, "POST", "/api/v1/namespaces/ml-research/pods", body)
            assert r.status == (403 if case.needs_exception else 201), r.body
        else:
            assert request(vsim, "POST", "/api/v1/namespaces/ml-research/pods", body).status == 201
            r = add_ephemeral(vsim, "ml-research", name, case.ephemeral_container())
            assert r.status == (403 if case.needs_exception else 200), r.body
            stored = vsim.store.get("pods", "ml-research", name)["spec"].get("ephemeralContainers")
            assert bool(stored) is not case.needs_exception
        if case.needs_exception:
            assert "the pod violates the baseline Pod Security Standard" in r.json()["message"]
    if case.needs_exception:  # the same pod with an exception for its service account
        key = {"ml-research_default": "grant=1"}
        with installed(vsim, *portal_policy(), exceptions(**key)):
            if case.ephemeral is None:
                assert request(vsim, "POST", "/api/v1/namespaces/ml-research/pods", body).status == 201
            else:
                assert add_ephemeral(vsim, "ml-research", name, case.ephemeral_container()).status == 200
    request(vsim, "DELETE", f"/api/v1/namespaces/ml-research/pods/{name}")


def test_ephemeral_container_subresource_keeps_the_rest_of_the_pod(vsim):
    body = pod("eph")
    assert request(vsim, "POST", "/api/v1/namespaces/vision/pods", body).status == 201
    sneaky = {"name": "dbg", "image": "busybox", "targetContainerName": "main"}
    r = request(vsim, "PATCH", "/api/v1/namespaces/vision/pods/eph/ephemeralcontainers",
                {"spec": {"ephemeralContainers": [sneaky], "containers": [{"name": "main", "image": "other"}]}},
                headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert r.status == 200, r.body
    stored = vsim.store.get("pods", "vision", "eph")
    assert stored["spec"]["ephemeralContainers"] == [sneaky]
    assert stored["spec"]["containers"][0]["image"] == "busybox"  # only ephemeral containers change
    changed = {**sneaky, "image": "other"}
    r = add_ephemeral(vsim, "vision", "eph", changed)
    assert r.status == 422
    assert "may not be removed or changed" in r.json()["message"]
    assert request(vsim, "GET", "/api/v1/namespaces/vision/pods/eph/ephemeralcontainers").json()["spec"][
        "ephemeralContainers"] == [sneaky]
    request(vsim, "DELETE", "/api/v1/namespaces/vision/pods/eph")


def test_update_patch_and_apply_are_admitted(vsim, core):
    """Every write flavour goes through admission (the portal's policy, here also bound to pod UPDATEs)."""
    create_pod(core, "ml-research", pod("upd", sa="debug"))
    privileged = {"spec": {"containers": [{"name": "main", "securityContext": {"privileged": True}}]}}
    docs = portal_policy()
    docs[0]["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = ["CREATE", "UPDATE"]
    with installed(vsim, *docs, exceptions()):
        with pytest.raises(ApiException) as excinfo:
            core.patch_namespaced_pod("upd", "ml-research", privileged)
        assert excinfo.value.status == 403
        current = core.read_namespaced_pod("upd", "ml-research").to_dict()
        assert not (current["spec"]["containers"][0].get("security_context") or {}).get("privileged")
        replaced = request(vsim, "GET", "/api/v1/namespaces/ml-research/pods/upd").json()
        replaced["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        put = request(vsim, "PUT", "/api/v1/namespaces/ml-research/pods/upd", replaced)
        assert put.status == 403
        apply = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "upd"}, **privileged}
        r = request(
            vsim,
            "PATCH",
            "/api/v1/namespaces/ml-research/pods/upd?fieldManager=test&force=true",
            apply,
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert r.status == 403
        assert r.json()["message"].endswith(needs_exception("debug"))
        new = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "applied"}, **privileged}
        r = request(
            vsim,
            "PATCH",
            "/api/v1/namespaces/ml-research/pods/applied?fieldManager=test",
            new,
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert r.status == 403  # server-side apply that creates is a CREATE
        status_patch = request(
            vsim,
            "PATCH",
            "/api/v1/namespaces/ml-research/pods/upd/status",
            {"status": {"phase": "Running"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert status_patch.status == 200  # the rule names pods, not pods/status
    core.delete_namespaced_pod("upd", "ml-research")


def test_dry_run_is_admitted_the_same_way(vsim, core):
    with installed(vsim, *portal_policy(), exceptions()):
        with pytest.raises(ApiException) as excinfo:
            create_pod(core, "ml-research", pod("dry", privileged=True), dry_run="All")
        assert excinfo.value.status == 403
        assert create_pod(core, "ml-research", pod("dry"), dry_run="All").metadata.name == "dry"
    assert vsim.store.get("pods", "ml-research", "dry") is None


# ------------------------------------------------------------------------------------------------ actions
def test_warn_action_sends_a_warning_header(vsim, core):
    docs = portal_policy()
    docs[1]["spec"]["validationActions"] = ["Warn"]
    with installed(vsim, *docs, exceptions()):
        _, code, headers = core.create_namespaced_pod_with_http_info("ml-research", pod("warned", privileged=True))
    assert code == 201
    text = (
        f"Validation failed for ValidatingAdmissionPolicy '{POLICY_NAME}' with binding '{POLICY_NAME}': "
        + needs_exception("default")
    )
    assert headers.get_all("Warning") == [f'299 - "{text}"']
    core.delete_namespaced_pod("warned", "ml-research")


def test_audit_action_changes_nothing(vsim, core):
    docs = portal_policy()
    docs[1]["spec"]["validationActions"] = ["Audit"]
    with installed(vsim, *docs, exceptions()):
        _, code, headers = core.create_namespaced_pod_with_http_info("ml-research", pod("audited", privileged=True))
    assert code == 201
    assert headers.get("Warning") is None
    core.delete_namespaced_pod("audited", "ml-research")


def test_warn_and_deny_together(vsim):
    docs = portal_policy()
    docs[1]["spec"]["validationActions"] = ["Deny", "Warn"]
    with installed(vsim, *docs, exceptions()):
        r = request(vsim, "POST", "/api/v1/namespaces/ml-research/pods", pod("both", privileged=True))
    assert r.status == 403
    assert len(r.headers.get_all("Warning")) == 1


# ------------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize(
    ("failure_policy", "expression", "expected"),
    [
        ("Ignore", "object.spec.containers.exists(c, ", None),
        ("Ignore", "object.spec.nope == 1", None),
        ("Fail", "object.spec.containers.exists(c, ", "compilation error: compilation failed: ERROR: <input>:1:"),
        ("Fail", "object.spec.nope == 1", "expression 'object.spec.nope == 1' resulted in error: no such key: nope"),
        ("Fail", "'not a bool'", "compilation error: must evaluate to bool"),
        ("Fail", "authorizer.group('').check()", "compilation error: compilation failed: ERROR: <input>:1:"),
    ],
)
def test_failure_policy(vsim, failure_policy, expression, expected):
    docs = [
        policy("broken", [{"expression": expression}], failurePolicy=failure_policy),
        binding("broken", "broken", ["Deny"]),
    ]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("fp"))
    if expected is None:
        assert r.status == 201
        request(vsim, "DELETE", "/api/v1/namespaces/batch/pods/fp")
        return
    assert r.status == 422
    assert r.json()["reason"] == "Invalid"
    prefix = "pods \"fp\" is forbidden: ValidatingAdmissionPolicy 'broken' with binding 'broken' denied request: "
    assert r.json()["message"].startswith(prefix + expected)


def test_malformed_policy_never_breaks_the_server(vsim):
    docs = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "junk"},
            "spec": {"validations": "nope", "variables": [17], "matchConstraints": []},
        },
        binding("junk", "junk", ["Deny"], matchResources={"namespaceSelector": {"matchExpressions": [{}]}}),
    ]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("survivor"))
    assert r.status == 422
    assert "policy contained no match constraints, a required field" in r.json()["message"]
    ignore = dict(docs[0], spec={**docs[0]["spec"], "failurePolicy": "Ignore"})
    with installed(vsim, ignore, docs[1]):
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("survivor")).status == 201


def test_bad_selector_is_a_configuration_error(vsim):
    bad = {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Sometimes"}]}}
    with installed(vsim, policy("sel", [{"expression": "true"}]), binding("sel", "sel", ["Deny"], matchResources=bad)):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("sel"))
    assert r.status == 422
    assert r.json()["message"].endswith(
        "with binding 'sel' denied request: failed to configure binding: Internal error occurred: "
        '"Sometimes" is not a valid label selector operator'
    )


def test_policies_compile_once_per_resource_version(vsim, monkeypatch):
    compiled = []
    original = CompiledPolicy.compile.__func__

    def counting(cls, obj):
        compiled.append(obj["metadata"]["resourceVersion"])
        return original(cls, obj)

    monkeypatch.setattr(CompiledPolicy, "compile", classmethod(counting))
    docs = [policy("once", [{"expression": "true"}]), binding("once", "once", ["Deny"])]
    with installed(vsim, *docs):
        for i in range(3):
            assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod(f"once-{i}")).status == 201
        change = {"spec": {"validations": [{"expression": "object.metadata.name != 'once-9'"}]}}
        r = request(
            vsim,
            "PATCH",
            f"{ADMISSION}/validatingadmissionpolicies/once",
            change,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status == 200
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("once-9")).status == 422
    assert len(compiled) == 2
    for i in range(3):
        request(vsim, "DELETE", f"/api/v1/namespaces/batch/pods/once-{i}")


# ------------------------------------------------------------------------------------------------ semantics
def test_cel_environment_variables(vsim):
    checks = " && ".join(
        [
            "request.operation == 'CREATE'",
            "request.namespace == 'batch'",
            "request.name == 'env'",
            "request.kind.kind == 'Pod'",
            "request.resource.resource == 'pods'",
            "request.userInfo.username == 'alice'",
            "request.dryRun == false",
            "oldObject == null",
            "params == null",
            "namespaceObject.metadata.name == 'batch'",
            "namespaceObject.metadata.labels['kubernetes.io/metadata.name'] == 'batch'",
            "object.metadata.namespace == 'batch'",
            "variables.upper == 'ENV'",
            "variables.twice == 'ENVENV'",
            "[1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]",
            "[1, 2].all(x, x > 0) && [1, 2].exists_one(x, x == 2)",
            "'a,b'.split(',').size() == 2",
            "{'k': 1}.exists(k, k == 'k') && 'k' in {'k': 1}",
        ]
    )
    variables = [
        {"name": "upper", "expression": "object.metadata.name.upperAscii()"},
        {"name": "twice", "expression": "variables.upper + variables.upper"},
        {"name": "broken", "expression": "object.metadata.nope"},  # never read: never fails
    ]
    docs = [policy("env", [{"expression": checks}], variables=variables), binding("env", "env", ["Deny"])]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("env"), headers={"Impersonate-User": "alice"})
        assert r.status == 201, r.body
        update = {"metadata": {"labels": {"x": "y"}}}
        checks_update = "request.operation == 'UPDATE' && oldObject.metadata.name == 'env'"
        r = request(
            vsim,
            "PATCH",
            f"{ADMISSION}/validatingadmissionpolicies/env",
            {"spec": {"validations": [{"expression": checks_update}]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status == 200
        r = request(
            vsim,
            "PATCH",
            "/api/v1/namespaces/batch/pods/env",
            update,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status == 200, r.body
    request(vsim, "DELETE", "/api/v1/namespaces/batch/pods/env")


def test_variable_errors_and_messages(vsim):
    variables = [{"name": "bad", "expression": "object.metadata.nope"}]
    validations = [
        {"expression": "variables.bad == 'x'"},
        {"expression": "false", "messageExpression": "object.metadata.nope", "message": " static message "},
        {"expression": " false "},
    ]
    docs = [policy("msgs", validations, variables=variables), binding("msgs", "msgs", ["Warn"])]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("msgs"))
    assert r.status == 201
    prefix = "299 - \"Validation failed for ValidatingAdmissionPolicy 'msgs' with binding 'msgs': "
    assert r.headers.get_all("Warning") == [
        prefix
        + "expression 'variables.bad == 'x'' resulted in error: "
        + 'composited variable \\"bad\\" fails to evaluate: no such key: nope"',
        prefix + 'static message"',
        prefix + 'failed expression: false"',
    ]
    request(vsim, "DELETE", "/api/v1/namespaces/batch/pods/msgs")


def test_undeclared_variable_is_a_compile_error(vsim):
    docs = [policy("undeclared", [{"expression": "variables.missing"}]), binding("undeclared", "undeclared", ["Deny"])]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("undeclared"))
    assert r.status == 422
    assert (
        "compilation error: compilation failed: ERROR: <input>:1:11: undefined field 'missing'" in r.json()["message"]
    )


def test_match_conditions_object_selector_and_exclusions(vsim):
    validations = [{"expression": "false", "message": "no"}]
    docs = [
        policy(
            "scoped", validations, matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels)"}]
        ),
        binding("scoped", "scoped", ["Deny"], matchResources={"objectSelector": {"matchLabels": {"team": "red"}}}),
    ]
    with installed(vsim, *docs):
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("unlabelled")).status == 201
        assert (
            request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("blue", labels={"team": "blue"})).status == 201
        )
        red = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("red", labels={"team": "red"}))
        assert red.status == 422
        assert red.json()["message"].endswith("denied request: no")
    exclude = [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "resources": ["pods"],
            "operations": ["*"],
            "resourceNames": ["spared"],
        }
    ]
    docs = [
        policy(
            "excl",
            validations,
            matchConstraints={
                "resourceRules": [
                    {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["CREATE"]}
                ],
                "excludeResourceRules": exclude,
            },
        ),
        binding("excl", "excl", ["Deny"]),
    ]
    with installed(vsim, *docs):
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("spared")).status == 201
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("caught")).status == 422
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "caught"}, "data": {}}
        assert request(vsim, "POST", "/api/v1/namespaces/batch/configmaps", cm).status == 422
    for name in ("unlabelled", "blue", "spared"):
        request(vsim, "DELETE", f"/api/v1/namespaces/batch/pods/{name}")


def test_cluster_scoped_and_group_resources(vsim):
    """A namespaceSelector never exempts cluster-scoped objects; group resources are qualified in the message."""
    rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["deviceclasses", "resourceclaims"],
            "operations": ["CREATE"],
        }
    ]
    validations = [{"expression": "object.metadata.name.startsWith('gpu')", "message": "GPU names only"}]
    docs = [
        policy("gpu-names", validations, matchConstraints={"resourceRules": rules}),
        binding("gpu-names", "gpu-names", ["Deny"], matchResources={"namespaceSelector": {"matchLabels": {"x": "y"}}}),
    ]
    dc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "fpga"}, "spec": {}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "fpga"},
        "spec": {"devices": {"requests": []}},
    }
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/apis/resource.k8s.io/v1/deviceclasses", dc)
        assert r.status == 422
        message = "ValidatingAdmissionPolicy 'gpu-names' with binding 'gpu-names' denied request: GPU names only"
        assert r.json()["message"] == f'deviceclasses.resource.k8s.io "fpga" is forbidden: {message}'
        assert r.json()["details"] == {
            "name": "fpga",
            "group": "resource.k8s.io",
            "kind": "deviceclasses",
            "causes": [{"message": message}],
        }
        # the namespace "batch" lacks x=y: the namespaced claim is out of the binding's scope
        assert request(vsim, "POST", "/apis/resource.k8s.io/v1/namespaces/batch/resourceclaims", claim).status == 201
    request(vsim, "DELETE", "/apis/resource.k8s.io/v1/namespaces/batch/resourceclaims/fpga")


def test_admission_kinds_are_exempt(vsim):
    """Policies and bindings themselves are never subject to policies (the API server exempts them)."""
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]
    docs = [
        policy("everything", [{"expression": "false"}], matchConstraints={"resourceRules": rules}),
        binding("everything", "everything", ["Deny"]),
    ]
    with installed(vsim, *docs):
        assert request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("blocked")).status == 422
        with installed(vsim, policy("another", [{"expression": "true"}]), binding("another", "another", ["Deny"])):
            r = request(
                vsim,
                "PUT",
                f"{ADMISSION}/validatingadmissionpolicies/another",
                policy("another", [{"expression": "false"}]),
            )
            assert r.status == 200


def test_multi_line_warnings_are_dropped(vsim):
    """The API server refuses to put control characters in a Warning header, so such a warning is not sent."""
    docs = [policy("multi", [{"expression": "object.spec.containers.exists(c, "}]), binding("multi", "multi", ["Warn"])]
    with installed(vsim, *docs):
        r = request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod("multi"))
    assert r.status == 201
    assert r.headers.get_all("Warning") is None
    request(vsim, "DELETE", "/api/v1/namespaces/batch/pods/multi")


def test_param_selector_evaluates_every_matching_param(vsim):
    def limits(name: str, forbidden: str, role: str = "limits") -> dict:
        doc = exceptions(forbidden=forbidden)
        doc["metadata"] = {"name": name, "namespace": "accelerator-portal-system", "labels": {"role": role}}
        return doc

    param_kind = {"apiVersion": "v1", "kind": "ConfigMap"}
    validations = [
        {"expression": "object.metadata.name != params.data.forbidden", "messageExpression": "params.metadata.name"}
    ]
    ref = {"namespace": "accelerator-portal-system", "selector": {"matchLabels": {"role": "limits"}}}
    docs = [
        policy("sel-params", validations, paramKind=param_kind),
        binding("sel-params", "sel-params", ["Deny"], paramRef=ref),
        limits("limit-a", "a"),
        limits("limit-b", "b"),
        limits("unrelated", "c", role="other"),
    ]
    with installed(vsim, *docs):
        denied = {n: request(vsim, "POST", "/api/v1/namespaces/batch/pods", pod(n)) for n in ("a", "b", "c")}
    assert {n: r.status for n, r in denied.items()} == {"a": 422, "b": 422, "c": 201}
    assert denied["b"].json()["message"].endswith("denied request: limit-b")
    request(vsim, "DELETE", "/api/v1/namespaces/batch/pods/c")
