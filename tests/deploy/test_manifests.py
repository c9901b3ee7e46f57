"""The Kubernetes deployment (deploy/kustomize): schema-valid, hardened, wired together, and RBAC that is exactly what
the code does against clusters — recomputed here from the code's own tables (inventory.k8s.types KINDS, WRITE_KINDS,
DRY_RUN_KINDS), the documents the enforcement services apply and the calls the services make."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
from django.conf import settings
from kubernetes import client as k8s

from inventory.k8s.types import DRY_RUN_KINDS, KINDS, PORTAL_SYSTEM_NAMESPACE, WRITE_KINDS, KindRef
from inventory.k8s.visibility import PENDING_WORKLOADS, VISIBILITY_GROUP

from .conftest import (
    NAMESPACE,
    ROOT,
    SYSTEM_NAMESPACE,
    TMP,
    Doc,
    applied_documents,
    command,
    container,
    named,
    of_kind,
    option,
    pod_spec,
    selects,
    template_labels,
    workloads,
)

# Kubernetes 1.34 is the oldest release with DRA resource.k8s.io/v1 (docs/deploy.md); also the newest schema we have.
SCHEMA_VERSIONS = ["1.34.0", kubernetes_validate.utils.latest_version()]
IMAGE = "accelerator-portal"
PREPARE = "accelerator-portal.io/stage"
MIGRATE_SECRET = "accelerator-portal-migrate-secrets"

# Which Deployment consumes which Celery queue, and as whom (docs/deploy.md, "Components").
READER, WRITER, WEB, NO_API = ("accelerator-portal-reader", "accelerator-portal-writer", "accelerator-portal-web",
                               "accelerator-portal-no-api")
QUEUE_IDENTITY = {"watch": READER, "default": WRITER, "webhooks": NO_API}

Perm = tuple[str, str, str, str, str]  # (namespace, or "*" for every namespace/cluster-wide; group; resource; verb; name)


# ------------------------------------------------------------------------------------------------ schema


@pytest.fixture
def cached_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubernetes-validate re-reads its 1.5 MB definitions file for every document; read each file once."""
    monkeypatch.setattr(kubernetes_validate.utils, "schema_contents",
                        functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents))


@pytest.mark.usefixtures("cached_schemas")
@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_rendered_document_validates_against_the_kubernetes_schema(
    version: str, base: list[Doc], overlay: list[Doc], managed_cluster: list[Doc], admission_guards: list[Doc]
) -> None:
    rendered = {"base": base, "overlays/example": overlay, "managed-cluster": managed_cluster,
                "components/admission-guards": admission_guards}
    for where, docs in rendered.items():
        assert docs, where
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the message is the point
                pytest.fail(f"{where}: {doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_the_schema_check_catches_a_misspelt_field(base: list[Doc]) -> None:
    web = named(base, "Deployment", "web")
    broken = {**web, "spec": {**web["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[0], strict=True)


def test_base_renders_the_components_with_their_kinds(base: list[Doc]) -> None:
    assert {d["metadata"]["name"] for d in of_kind(base, "Deployment")} == {
        "web", "worker-sync", "worker", "worker-webhooks", "beat"}
    assert [d["metadata"]["name"] for d in of_kind(base, "Job")] == ["migrate"]
    namespaced = [d for d in base if d["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}]
    assert {d["metadata"].get("namespace") for d in namespaced} == {NAMESPACE, SYSTEM_NAMESPACE}
    assert SYSTEM_NAMESPACE == PORTAL_SYSTEM_NAMESPACE
    # Only RBAC objects live in the enforcement namespace; the portal itself runs elsewhere.
    assert {d["kind"] for d in namespaced if d["metadata"]["namespace"] == SYSTEM_NAMESPACE} == {"Role", "RoleBinding"}


# ------------------------------------------------------------------------------------------------ pods


def _dockerfile_uid() -> int:
    match = re.search(r"^ARG PORTAL_UID=(\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile fixes the runtime uid in ARG PORTAL_UID"
    return int(match[1])


@pytest.mark.parametrize("which", ["base", "overlay"])
def test_every_pod_is_hardened(which: str, request: pytest.FixtureRequest) -> None:
    uid = _dockerfile_uid()
    for workload in workloads(request.getfixturevalue(which)):
        name, spec = workload["metadata"]["name"], pod_spec(workload)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] == pod["runAsGroup"] == pod["fsGroup"] == uid, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        assert spec.get("enableServiceLinks") is False, name
        assert not any("hostPath" in v for v in spec.get("volumes", [])), name
        assert not spec.get("initContainers"), name
        c = container(workload)
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True, name
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        assert not sc.get("privileged"), name
        # A writable /tmp (the only writable path) from an emptyDir with a size limit.
        tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == TMP)
        volume = next(v for v in spec["volumes"] if v["name"] == tmp["name"])
        assert volume["emptyDir"]["sizeLimit"], name
        # Requests for scheduling, limits so one runaway process cannot starve its node.
        resources = c["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}, name
        assert set(resources["limits"]) == {"cpu", "memory"}, name
        assert c["imagePullPolicy"] == "IfNotPresent", name
        assert not c.get("env"), f"{name}: configuration comes from the ConfigMap and the Secret (envFrom)"


def test_every_pod_runs_the_one_image(base: list[Doc], overlay: list[Doc]) -> None:
    assert {container(w)["image"] for w in workloads(base)} == {f"{IMAGE}:dev"}
    images = {container(w)["image"] for w in workloads(overlay)}
    assert len(images) == 1
    name, tag = images.pop().rsplit(":", 1)
    assert name.endswith(f"/{IMAGE}")
    assert tag not in {"latest", "dev"}, "an installation pins a released tag"


def test_every_pod_takes_its_settings_from_the_configmap_and_the_secret(base: list[Doc], overlay: list[Doc]) -> None:
    config = of_kind(base, "ConfigMap")
    assert len(config) == 1
    common = [{"configMapRef": {"name": config[0]["metadata"]["name"]}},
              {"secretRef": {"name": "accelerator-portal-secrets"}}]
    for workload in workloads(base):
        refs = container(workload)["envFrom"]
        # The migration Job alone also reads the owner's Secret, last, so that its DATABASE_URL wins.
        owner = [{"secretRef": {"name": MIGRATE_SECRET}}] if workload["kind"] == "Job" else []
        assert refs == [*common, *owner], workload["metadata"]["name"]
        assert not container(workload).get("env"), "settings come from the ConfigMap and the Secrets only"
    # The base leaves the Secrets to the operator; the overlay generates them and every reference follows the names.
    assert not of_kind(base, "Secret")
    secrets = {d["metadata"]["name"]: d for d in of_kind(overlay, "Secret")}
    configs = {d["metadata"]["name"] for d in of_kind(overlay, "ConfigMap")}
    for workload in workloads(overlay):
        refs = container(workload)["envFrom"]
        assert refs[0]["configMapRef"]["name"] in configs
        assert all(ref["secretRef"]["name"] in secrets for ref in refs[1:])
    assert sorted(name.rsplit("-", 1)[0] for name in secrets) == ["accelerator-portal-migrate-secrets",
                                                                   "accelerator-portal-secrets"]


def test_only_the_migration_job_gets_the_table_owners_credentials(overlay: list[Doc]) -> None:
    """The web and workers connect as PORTAL_DATABASE_APP_ROLE, which owns nothing, so they cannot disable the audit
    log's triggers; the owner's DATABASE_URL (the migrate Secret) reaches the migration Job and nothing else."""
    owner_secret = next(d["metadata"]["name"] for d in of_kind(overlay, "Secret")
                        if d["metadata"]["name"].startswith(MIGRATE_SECRET))
    readers = sorted(w["metadata"]["name"] for w in workloads(overlay)
                     if any(ref.get("secretRef", {}).get("name") == owner_secret for ref in container(w)["envFrom"]))
    assert readers == ["migrate"]
    for doc in overlay:  # nothing else mounts or references it either
        if doc["metadata"]["name"] not in {"migrate", owner_secret}:
            assert owner_secret not in json.dumps(doc), doc["metadata"]["name"]
    secrets = {d["metadata"]["name"].rsplit("-", 1)[0]: d for d in of_kind(overlay, "Secret")}
    app_url = base64.b64decode(secrets["accelerator-portal-secrets"]["data"]["DATABASE_URL"]).decode()
    owner_url = base64.b64decode(secrets[MIGRATE_SECRET]["data"]["DATABASE_URL"]).decode()
    config = of_kind(overlay, "ConfigMap")[0]["data"]
    assert urlsplit(app_url).username == config["PORTAL_DATABASE_APP_ROLE"]
    assert urlsplit(owner_url).username not in {None, config["PORTAL_DATABASE_APP_ROLE"]}
    assert set(secrets[MIGRATE_SECRET]["data"]) == {"DATABASE_URL"}


def test_the_migration_job_and_its_dependencies_form_the_prepare_stage(overlay: list[Doc]) -> None:
    job = named(overlay, "Job", "migrate")
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert command(job) == ["python", "manage.py", "migrate", "--noinput"]
    # `kubectl apply -l accelerator-portal.io/stage=prepare` must bring everything the Job needs, and no workload.
    env = container(job)["envFrom"]
    needed = [("ServiceAccount", pod_spec(job)["serviceAccountName"]), ("ConfigMap", env[0]["configMapRef"]["name"]),
              ("Secret", env[1]["secretRef"]["name"]), ("Secret", env[2]["secretRef"]["name"]), ("Job", "migrate")]
    needed += [("Namespace", NAMESPACE)] + [("NetworkPolicy", d["metadata"]["name"])
                                            for d in of_kind(overlay, "NetworkPolicy")]
    for kind, name in needed:
        assert named(overlay, kind, name)["metadata"]["labels"].get(PREPARE) == "prepare", (kind, name)
    for doc in of_kind(overlay, "Deployment", "Service", "PodDisruptionBudget", "Ingress"):
        assert PREPARE not in doc["metadata"].get("labels", {}), doc["metadata"]["name"]


# ------------------------------------------------------------------------------------------------ processes


def _queue_of(task: str) -> str:
    return settings.CELERY_TASK_ROUTES.get(task, {}).get("queue", settings.CELERY_TASK_DEFAULT_QUEUE)


def test_each_celery_queue_has_exactly_one_worker_deployment_with_the_right_identity(base: list[Doc]) -> None:
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()} | {settings.CELERY_TASK_DEFAULT_QUEUE}
    consumers: dict[str, list[str]] = {}
    for deployment in of_kind(base, "Deployment"):
        argv = command(deployment)
        if argv[:4] == ["celery", "-A", "portal", "worker"]:
            for queue in option(argv, "-Q").split(","):
                consumers.setdefault(queue, []).append(deployment["metadata"]["name"])
            queue = option(argv, "-Q")
            assert option(argv, "-n") == f"{queue}@%h", "node names follow the queue (the probes ping them)"
            assert pod_spec(deployment)["serviceAccountName"] == QUEUE_IDENTITY[queue], queue
    assert set(consumers) == routed == set(QUEUE_IDENTITY)
    assert all(len(names) == 1 for names in consumers.values()), consumers
    # The watchers are I/O-bound threads; the sync itself only ever runs on the watch queue.
    sync = named(base, "Deployment", consumers["watch"][0])
    assert option(command(sync), "-P") == "threads"
    assert _queue_of("inventory.watch_window") == "watch"
    # The tasks that write to clusters run on the default queue (writer); webhook deliveries on their own.
    assert _queue_of("portal.quota_apply") == _queue_of("portal.enforcement_apply") == "default"
    assert _queue_of("integrations.webhook_deliver") == "webhooks"


def test_beat_is_a_single_replica_recreated_never_doubled(base: list[Doc], overlay: list[Doc]) -> None:
    for docs in (base, overlay):
        beat = named(docs, "Deployment", "beat")
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}
        assert command(beat)[:4] == ["celery", "-A", "portal", "beat"]


def test_web_probes_use_the_health_endpoints_on_8000(base: list[Doc]) -> None:
    web = named(base, "Deployment", "web")
    c = container(web)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8000}
    assert "0.0.0.0:8000" in command(web)
    probes = {kind: c[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {kind: (p["path"], ports[p["port"]]) for kind, p in probes.items()} == {
        "startupProbe": ("/healthz", 8000), "livenessProbe": ("/healthz", 8000), "readinessProbe": ("/readyz", 8000)}
    assert all("httpHeaders" not in p for p in probes.values()), "docs/deploy.md: the kubelet's request as it is"
    service = named(base, "Service", "web")
    assert selects({"matchLabels": service["spec"]["selector"]}, template_labels(web))
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def test_web_sums_the_latency_samples_of_every_gunicorn_worker(base: list[Doc]) -> None:
    """prometheus_client's multiprocess mode (docs/observability.md): the gunicorn hooks of portal/gunicorn_conf.py
    and PROMETHEUS_MULTIPROC_DIR on the writable /tmp, given on gunicorn's command line so that only the web (not
    the Celery workers, which share the ConfigMap) runs in that mode."""
    from portal import gunicorn_conf

    argv = command(named(base, "Deployment", "web"))
    assert argv[:2] == ["gunicorn", "portal.wsgi"]
    assert option(argv, "--config", "-c") == "python:portal.gunicorn_conf"
    name, _, directory = option(argv, "--env", "-e").partition("=")
    assert name == "PROMETHEUS_MULTIPROC_DIR"
    assert Path(directory).parent.as_posix() == TMP
    assert callable(gunicorn_conf.on_starting)
    assert callable(gunicorn_conf.child_exit)
    assert "PROMETHEUS_MULTIPROC_DIR" not in of_kind(base, "ConfigMap")[0]["data"]


def test_worker_probes_ping_and_heartbeat_their_own_node(base: list[Doc]) -> None:
    for deployment in of_kind(base, "Deployment"):
        argv = command(deployment)
        if argv[3] != "worker":
            continue
        c = container(deployment)
        node = option(argv, "-n").replace("%h", "$HOSTNAME")
        startup = c["startupProbe"]
        shell = startup["exec"]["command"]
        assert shell[:2] == ["sh", "-c"]
        assert "celery -A portal inspect ping" in shell[2]
        assert f'--destination "{node}"' in shell[2]
        ping_timeout = int(re.search(r"--timeout (\d+)", shell[2])[1])
        assert startup["timeoutSeconds"] > ping_timeout, "the probe outlives the ping's own timeout"
        # Liveness: the worker's own heartbeat task ran recently (connected *and* consuming: portal/heartbeat.py).
        liveness = c["livenessProbe"]
        shell = liveness["exec"]["command"]
        assert shell[:2] == ["sh", "-c"]
        assert f'python -m portal.worker_probe "{node}"' in shell[2]
        max_age = float(re.search(r"--max-age (\d+)", shell[2])[1])
        # A Redis restart must not recycle every worker: liveness gives up only after minutes of silence.
        assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 300
        assert max_age >= 300 > 4 * 30, "several missed heartbeats (every 30 s) before a probe fails"
        assert "readinessProbe" not in c, "workers serve no traffic; the startup probe gates rollouts"


def test_beat_probe_watches_its_schedule_file(base: list[Doc]) -> None:
    beat = named(base, "Deployment", "beat")
    schedule = Path(option(command(beat), "-s"))
    probe = container(beat)["livenessProbe"]["exec"]["command"]
    assert schedule.parent.as_posix() == TMP
    assert f"-name '{schedule.name}*'" in probe[2]
    # celery.beat.Scheduler.sync_every: the file is written back every 3 minutes.
    assert "-mmin -10" in probe[2]


def test_disruption_budgets_select_existing_pods(base: list[Doc]) -> None:
    deployments = of_kind(base, "Deployment")
    covered = set()
    for pdb in of_kind(base, "PodDisruptionBudget"):
        matches = [d["metadata"]["name"] for d in deployments if selects(pdb["spec"]["selector"], template_labels(d))]
        assert len(matches) == 1, (pdb["metadata"]["name"], matches)
        assert pdb["spec"].get("maxUnavailable") == 1
        covered.add(matches[0])
    assert covered == {"web", "worker-sync", "worker", "worker-webhooks"}, "every tier but beat"


def test_network_policies_deny_by_default_and_select_existing_pods(base: list[Doc]) -> None:
    policies = {d["metadata"]["name"]: d for d in of_kind(base, "NetworkPolicy")}
    deny = policies.pop("default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    pods = {w["metadata"]["name"]: template_labels(w) for w in workloads(base)}
    selected: dict[str, set[str]] = {}
    for name, policy in policies.items():
        matches = {pod for pod, labels in pods.items() if selects(policy["spec"]["podSelector"], labels)}
        assert matches, f"NetworkPolicy {name} selects no pod"
        selected[name] = matches
    assert selected["allow-dns-and-datastores"] == set(pods), "every pod reaches DNS, PostgreSQL and Redis"
    assert selected["allow-kubernetes-api"] == {"web", "worker-sync", "worker"}
    assert selected["allow-webhooks-egress"] == {"worker-webhooks"}
    assert selected["allow-web-ingress"] == {"web"}
    # Only the web accepts connections, on 8000 and from named namespaces only.
    ingress = [p for p in policies.values() if "Ingress" in p["spec"]["policyTypes"]]
    assert [p["metadata"]["name"] for p in ingress] == ["allow-web-ingress"]
    for rule in ingress[0]["spec"]["ingress"]:
        assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
        assert all(set(peer) == {"namespaceSelector"} for peer in rule["from"])
    # Webhook egress never reaches private, link-local (cloud metadata) or loopback addresses.
    blocks = [peer["ipBlock"] for rule in policies["allow-webhooks-egress"]["spec"]["egress"] for peer in rule["to"]]
    v4 = next(b for b in blocks if b["cidr"] == "0.0.0.0/0")
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"} <= set(v4["except"])


# ------------------------------------------------------------------------------------------------ service accounts


def _bindings_of(docs: list[Doc], namespace: str, name: str) -> list[Doc]:
    return [b for b in of_kind(docs, "RoleBinding", "ClusterRoleBinding")
            if any(s["kind"] == "ServiceAccount" and s["name"] == name and s["namespace"] == namespace
                   for s in b["subjects"])]


def test_every_pod_has_an_existing_service_account_and_a_token_only_if_it_calls_an_api(base: list[Doc]) -> None:
    accounts = {d["metadata"]["name"]: d for d in of_kind(base, "ServiceAccount")}
    assert set(accounts) == {READER, WRITER, WEB, NO_API}
    used = set()
    for workload in workloads(base):
        spec = pod_spec(workload)
        account = spec["serviceAccountName"]
        assert account in accounts, workload["metadata"]["name"]
        used.add(account)
        has_rights = bool(_bindings_of(base, NAMESPACE, account))
        assert spec["automountServiceAccountToken"] is has_rights, workload["metadata"]["name"]
        assert accounts[account].get("automountServiceAccountToken", True) is has_rights, account
    assert used == set(accounts)
    assert pod_spec(named(base, "Deployment", "web"))["serviceAccountName"] == WEB
    assert {pod_spec(named(base, kind, name))["serviceAccountName"]
            for kind, name in (("Deployment", "worker-webhooks"), ("Deployment", "beat"), ("Job", "migrate"))} == {NO_API}


def test_every_binding_refers_to_an_existing_role_and_service_account(base: list[Doc], managed_cluster: list[Doc]) -> None:
    for docs in (base, managed_cluster):
        roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
                 for d in of_kind(docs, "Role", "ClusterRole")}
        accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in of_kind(docs, "ServiceAccount")}
        for binding in of_kind(docs, "RoleBinding", "ClusterRoleBinding"):
            ref = binding["roleRef"]
            scope = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            assert (ref["kind"], scope, ref["name"]) in roles, binding["metadata"]["name"]
            for subject in binding["subjects"]:
                assert subject["kind"] == "ServiceAccount"
                assert (subject["namespace"], subject["name"]) in accounts, binding["metadata"]["name"]


# ------------------------------------------------------------------------------------------------ RBAC


def effective_permissions(docs: list[Doc], namespace: str, account: str) -> set[Perm]:
    """Every (namespace, group, resource, verb, name) the account may use, through all its bindings."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in of_kind(docs, "Role", "ClusterRole")}
    perms: set[Perm] = set()
    for binding in _bindings_of(docs, namespace, account):
        ref = binding["roleRef"]
        scope_ns = binding["metadata"].get("namespace", "")
        role = roles[(ref["kind"], scope_ns if ref["kind"] == "Role" else "", ref["name"])]
        scope = "*" if binding["kind"] == "ClusterRoleBinding" else scope_ns
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or ["*"]:
                            perms.add((scope, group, resource, verb, name))
    return perms


def minimal(perms: set[Perm]) -> set[Perm]:
    """Drop permissions another one already covers (a wildcard name, or every namespace): effective rights."""

    def covers(wide: Perm, narrow: Perm) -> bool:
        return (wide != narrow and wide[1:4] == narrow[1:4] and wide[0] in ("*", narrow[0])
                and wide[4] in ("*", narrow[4]))

    return {p for p in perms if not any(covers(q, p) for q in perms)}


def _group(prefix_or_api_version: str) -> str:
    """'/api/v1' or 'v1' → '' (core); '/apis/batch/v1' or 'batch/v1' → 'batch'."""
    parts = prefix_or_api_version.strip("/").split("/")
    if parts[0] == "api" or len(parts) == 1:
        return ""
    return parts[1] if parts[0] == "apis" else parts[0]


_API_CLASSES = {"core": k8s.CoreV1Api, "resource": k8s.ResourceV1Api, "admission": k8s.AdmissionregistrationV1Api}


def _list_path(kind: KindRef) -> str:
    """The URL the adapter's list/watch call requests: read from the official client's generated method (custom
    resources, e.g. Kueue's: the generic cluster-wide list, with the kind's group, version and plural)."""
    if kind.api == "custom":
        source = inspect.getsource(k8s.CustomObjectsApi._list_cluster_custom_object_serialize)
        path = re.search(r"resource_path='([^']+)'", source)[1]
        return path.replace("{group}", kind.group).replace("{version}", kind.version).replace("{plural}", kind.key)
    source = inspect.getsource(getattr(_API_CLASSES[kind.api], f"_{kind.list_method}_serialize"))
    return re.search(r"resource_path='([^']+)'", source)[1]


def required_reader() -> set[Perm]:
    """The sync lists and watches (the same client method, `watch=True`) every kind in KINDS, and reads Kueue's
    queue positions (GET of a ClusterQueue's pendingworkloads, inventory/k8s/visibility.py); nothing else."""
    perms: set[Perm] = {("*", VISIBILITY_GROUP, PENDING_WORKLOADS, "get", "*")}
    for kind in KINDS.values():
        path = _list_path(kind)
        group = "" if path.startswith("/api/") else path.split("/")[2]
        assert group == kind.group, kind.key
        if "{namespace}" in path:
            assert kind.namespace, f"{kind.key} is listed per namespace: KindRef.namespace says which"
            scope = kind.namespace
        else:
            assert not kind.namespace, kind.key
            scope = "*"
        for verb in ("list", "watch"):
            perms.add((scope, group, path.rsplit("/", 1)[1], verb, "*"))
    return perms


def _app_sources() -> dict[str, str]:
    files = [p for app in ("portal", "inventory", "catalog", "audit", "apitokens", "integrations")
             for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts]
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in files}


def _callers(pattern: str) -> set[str]:
    return {path for path, text in _app_sources().items() if re.search(pattern, text)}


def test_the_cluster_calls_happen_where_the_identities_expect_them() -> None:
    """If another module starts calling the cluster, its process's RBAC has to be reviewed: this fails first."""
    adapter = "inventory/k8s/client.py"
    assert _callers(r"\.list_page\(|\.watch\(") - {adapter} == {"inventory/services/sync.py"}
    assert _callers(r"\.apply\(\s*\w+,\s*field_manager=") == {"portal/quota/services.py", "portal/quota/kueue.py",
                                                                "portal/enforcement/services.py"}
    assert _callers(r"client\.delete\(") == {"portal/enforcement/services.py"}
    assert _callers(r"client\.get\(") == {"portal/quota/kueue.py"}
    assert _callers(r"\.create_dry_run\(") - {adapter} == {"catalog/services/manifests.py"}


def required_writer(monkeypatch: pytest.MonkeyPatch) -> set[Perm]:
    """Server-side apply = `patch`, and `create` (authorized with the object's name) when the object may not exist
    yet; `delete` for the kinds deleted; plus what the API server demands of whoever writes admission policies with
    parameters. Names and namespaces that vary with the tenant are "*"; the fixed ones are the objects' own."""
    perms: set[Perm] = set()
    plural = {(api_version, kind): spec[1] for (api_version, kind), spec in WRITE_KINDS.items()}
    first, second = (applied_documents(monkeypatch, tenant) for tenant in ("team-a", "team-b"))
    assert [d["kind"] for d in first] == [d["kind"] for d in second]
    applied_kinds = set()
    for one, other in zip(first, second, strict=True):
        key = (one["apiVersion"], one["kind"])
        assert key in WRITE_KINDS, f"the adapter refuses to write {key}"
        applied_kinds.add(key)
        meta, other_meta = one["metadata"], other["metadata"]
        name = meta["name"] if meta["name"] == other_meta["name"] else "*"
        namespaced = WRITE_KINDS[key][2]
        scope = (meta["namespace"] if meta["namespace"] == other_meta["namespace"] else "*") if namespaced else "*"
        group, resource = _group(one["apiVersion"]), plural[key]
        perms.add((scope, group, resource, "patch", name))
        # Tenant namespaces are labelled, never created: applying a missing one must fail, not make it; the same for
        # the quotas of other managers that a grant raises (any name), and for ClusterQueues (applied with the
        # resourceVersion just read, so never a create).
        if not (one["kind"] in ("Namespace", "ResourceQuota", "ClusterQueue") and name == "*"):
            perms.add((scope, group, resource, "create", name))
        spec = one.get("spec") or {}
        if "paramKind" in spec:  # validatingadmissionpolicy/authz.go: get on every object of the paramKind
            param = plural[(spec["paramKind"]["apiVersion"], spec["paramKind"]["kind"])]
            perms.add(("*", _group(spec["paramKind"]["apiVersion"]), param, "get", "*"))
        if "paramRef" in spec:  # validatingadmissionpolicybinding/authz.go: get on the referenced object
            policy = next(d for d in first if d["kind"] == "ValidatingAdmissionPolicy")
            param_kind = policy["spec"]["paramKind"]
            perms.add((spec["paramRef"]["namespace"], _group(param_kind["apiVersion"]),
                       plural[(param_kind["apiVersion"], param_kind["kind"])], "get", spec["paramRef"]["name"]))
    deleted = set()
    for text in _app_sources().values():
        deleted |= set(re.findall(r'client\.delete\(\s*"([\w.\-/]+)",\s*"(\w+)"', text))
    assert deleted, "the enforcement deletes the admin claims that outlive their grant"
    for key in deleted:
        assert key in WRITE_KINDS
        perms.add(("*", _group(key[0]), plural[key], "delete", "*"))
    assert applied_kinds | deleted == set(WRITE_KINDS), "every kind the adapter may write is written by someone"
    read = set()
    for text in _app_sources().values():
        read |= set(re.findall(r'client\.get\(\s*\w+,\s*"(\w+)"', text))
    assert read == {"ClusterQueue"}, "a ClusterQueue is read just before its resourceGroups are applied"
    for key in WRITE_KINDS:
        if key[1] in read:
            perms.add(("*", _group(key[0]), plural[key], "get", "*"))
    return perms


def required_dry_run() -> set[Perm]:
    return {("*", _group(prefix), resource, "create", "*") for prefix, resource in DRY_RUN_KINDS.values()}


def test_the_reader_may_only_list_and_watch_the_synced_kinds(base: list[Doc]) -> None:
    assert effective_permissions(base, NAMESPACE, READER) == required_reader()


def test_the_writer_may_only_make_the_writes_of_the_enforcement(base: list[Doc], monkeypatch: pytest.MonkeyPatch) -> None:
    required = required_writer(monkeypatch)
    assert minimal(effective_permissions(base, NAMESPACE, WRITER)) == minimal(required)
    # Spelled out, for the reader of this test (docs/deploy.md has the same table).
    assert ("*", "", "namespaces", "patch", "*") in required
    assert ("*", "", "namespaces", "create", PORTAL_SYSTEM_NAMESPACE) in required
    assert ("*", "", "resourcequotas", "patch", "portal-accelerators") in required
    assert ("*", "", "resourcequotas", "create", "portal-accelerators") in required
    assert ("*", "", "resourcequotas", "patch", "*") in required
    assert ("*", "", "resourcequotas", "create", "*") not in required
    assert (PORTAL_SYSTEM_NAMESPACE, "", "configmaps", "patch", "privileged-exceptions") in required
    assert ("*", "resource.k8s.io", "resourceclaims", "delete", "*") in required
    assert ("*", "kueue.x-k8s.io", "clusterqueues", "patch", "*") in required
    assert ("*", "kueue.x-k8s.io", "clusterqueues", "get", "*") in required
    assert ("*", "kueue.x-k8s.io", "clusterqueues", "create", "*") not in required


def test_the_writer_keeps_its_rights_without_the_policy_params_role(base: list[Doc],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Operators may drop the cluster-wide ConfigMap `get` once the policy exists (docs/deploy.md): every other
    write, including creating the binding (named `get` on its param), still works."""
    without = [d for d in base if not (d["kind"] == "ClusterRoleBinding"
                                       and d["metadata"]["name"] == "accelerator-portal-writer-policy-params")]
    remaining = effective_permissions(without, NAMESPACE, WRITER)
    missing = {p for p in required_writer(monkeypatch) if minimal(remaining | {p}) != minimal(remaining)}
    assert missing == {("*", "", "configmaps", "get", "*")}


def test_the_web_may_only_create_the_dry_run_kinds(base: list[Doc]) -> None:
    assert effective_permissions(base, NAMESPACE, WEB) == required_dry_run()


def test_processes_without_cluster_access_have_no_rights(base: list[Doc]) -> None:
    assert effective_permissions(base, NAMESPACE, NO_API) == set()


def test_managed_clusters_grant_the_same_rights_to_the_same_identities(
    base: list[Doc], managed_cluster: list[Doc]
) -> None:
    pairs = {READER: READER, WRITER: WRITER, WEB: "accelerator-portal-dry-run"}
    for portal_account, remote_account in pairs.items():
        assert (effective_permissions(managed_cluster, SYSTEM_NAMESPACE, remote_account)
                == effective_permissions(base, NAMESPACE, portal_account)), remote_account
    for account in of_kind(managed_cluster, "ServiceAccount"):
        assert account["automountServiceAccountToken"] is False, "identities for kubeconfigs, never for pods"
    tokens = of_kind(managed_cluster, "Secret")
    assert {t["metadata"]["annotations"]["kubernetes.io/service-account.name"] for t in tokens} == set(pairs.values())
    assert all(t["type"] == "kubernetes.io/service-account-token" and "data" not in t for t in tokens)


@pytest.mark.parametrize("which", ["base", "managed_cluster"])
def test_no_role_has_wildcards_secrets_or_escalation(which: str, request: pytest.FixtureRequest) -> None:
    for role in of_kind(request.getfixturevalue(which), "Role", "ClusterRole"):
        name = role["metadata"]["name"]
        assert "aggregationRule" not in role, name
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, name
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in value for value in rule.get(field, [])), (name, field)
            assert not {"secrets", "serviceaccounts/token"} & set(rule["resources"]), name
            assert not {r for r in rule["resources"] if r.startswith(("roles", "clusterroles", "rolebindings",
                                                                       "clusterrolebindings"))}, name
            assert not {"escalate", "bind", "impersonate", "deletecollection", "update"} & set(rule["verbs"]), name


# ------------------------------------------------------------------------------------------------ overlay


def test_the_example_overlay_sets_image_hosts_ingress_and_the_admission_guards(overlay: list[Doc]) -> None:
    config = of_kind(overlay, "ConfigMap")[0]["data"]
    ingress = named(overlay, "Ingress", "web")
    hosts = [rule["host"] for rule in ingress["spec"]["rules"]]
    assert set(hosts) <= set(config["DJANGO_ALLOWED_HOSTS"].split(","))
    assert {f"https://{h}" for h in hosts} <= set(config["DJANGO_CSRF_TRUSTED_ORIGINS"].split(","))
    assert config["DJANGO_SECURE"] == "true"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "web", "port": {"name": "http"}}
    assert named(overlay, "Deployment", "web")["spec"]["replicas"] >= 2
    assert {d["metadata"]["name"] for d in of_kind(overlay, "ValidatingAdmissionPolicy")} == {
        "accelerator-portal-writer-namespace-labels", "accelerator-portal-web-dry-run-only"}


def test_admission_guards_name_the_identities_that_exist(admission_guards: list[Doc], base: list[Doc],
                                                         managed_cluster: list[Doc]) -> None:
    users = {f"system:serviceaccount:{d['metadata']['namespace']}:{d['metadata']['name']}"
             for d in of_kind(base, "ServiceAccount") + of_kind(managed_cluster, "ServiceAccount")}
    for policy in of_kind(admission_guards, "ValidatingAdmissionPolicy"):
        named_users = set()
        for condition in policy["spec"]["matchConditions"]:
            named_users |= set(re.findall(r"'(system:serviceaccount:[^']+)'", condition["expression"]))
        assert named_users, policy["metadata"]["name"]
        assert named_users <= users, policy["metadata"]["name"]
        bindings = [b for b in of_kind(admission_guards, "ValidatingAdmissionPolicyBinding")
                    if b["spec"]["policyName"] == policy["metadata"]["name"]]
        assert [b["spec"]["validationActions"] for b in bindings] == [["Deny"]]

