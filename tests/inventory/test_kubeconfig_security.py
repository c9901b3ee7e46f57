"""Kubeconfigs are data, never programs (issue 16 §1): no exec plugin, auth-provider command, file path or unlisted
proxy is accepted at registration (service, admin, cluster_add) or acted on at load (client_for, the watch task,
`sync --once`, dry runs), and registering by path is confined to PORTAL_KUBECONFIG_DIR.

The malicious kubeconfigs' commands create a marker file (the exec plugin also prints a valid credential, so the
official client would happily use it). The marker must never exist."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import html
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from inventory.errors import ClusterConfigError
from inventory.models import Cluster, SyncState
from inventory.services.clients import client_for, parse_kubeconfig
from inventory.services.clusters import cluster_register
from inventory.tasks import watch_window_task
from kubesim import Simulator

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-TOKEN-9f8e7d6c5b4a"
PROXY = "http://proxy.corp.example:3128"


def _kubeconfig(*, user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None,
                server: str = "https://127.0.0.1:6443", **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "prod", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "ci", "user": {"token": SECRET} if user is None else user}],
        "contexts": [{"name": "c", "context": {"cluster": "prod", "user": "ci", "namespace": "default"}}],
        "preferences": {}, **top,
    }


def _text(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def _exec_user(marker: Path) -> dict[str, Any]:
    """An exec plugin that would work: it creates `marker` and prints an ExecCredential with a token."""
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                             "status": {"token": SECRET}})
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                     "args": ["-c", f"touch '{marker}'; echo '{credential}'"]}}


def _cmd_path_user(marker: Path) -> dict[str, Any]:
    """The gcp auth-provider's cmd-path: the client runs it to fetch a token (no access-token yet)."""
    return {"auth-provider": {"name": "gcp", "config": {"cmd-path": shutil.which("touch"), "cmd-args": str(marker)}}}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "a command named by a kubeconfig ran"


@pytest.fixture(params=["exec", "auth-provider"])
def hostile(request: pytest.FixtureRequest, marker: Path) -> tuple[str, dict[str, Any]]:
    user = _exec_user(marker) if request.param == "exec" else _cmd_path_user(marker)
    return request.param, _kubeconfig(user=user)


def _assert_refused(message: str, *fields: str) -> None:
    for field in fields:
        assert f'field "{field}" is not allowed' in message, message
    assert SECRET not in message
    assert 'users[0] "ci"' in message or 'clusters[0] "prod"' in message, message


def _self_signed() -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portal")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return (base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode(),
            base64.b64encode(key_pem).decode())


# Registration ------------------------------------------------------------------------------------------------------


def test_registration_refuses_a_command_and_never_runs_it(hostile: tuple[str, dict[str, Any]]) -> None:
    field, data = hostile
    with pytest.raises(ClusterConfigError) as info:
        cluster_register(name="evil", kubeconfig=_text(data))
    _assert_refused(str(info.value), field)
    assert not Cluster.objects.filter(name="evil").exists()


def test_admin_refuses_a_command_and_never_runs_it(hostile: tuple[str, dict[str, Any]], admin_client: Client) -> None:
    field, data = hostile
    response = admin_client.post(reverse("admin:inventory_cluster_add"), {
        "name": "evil", "description": "", "connection": "kubeconfig", "kubeconfig": _text(data),
        "kubeconfig_path": "", "context": "", "sync_enabled": "on",
    })
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    _assert_refused(page, field)  # and the submitted kubeconfig is not sent back either
    assert SECRET not in page
    assert not Cluster.objects.filter(name="evil").exists()


def test_cluster_add_refuses_a_command_and_never_runs_it(hostile: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    field, data = hostile
    path = tmp_path / "evil.yaml"
    path.write_text(_text(data))
    with pytest.raises(CommandError) as info:
        call_command("cluster_add", "evil", "--kubeconfig", str(path))
    _assert_refused(str(info.value), field)
    assert not Cluster.objects.filter(name="evil").exists()


@pytest.mark.parametrize(("section", "field", "value"), [
    ("user", "tokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"),
    ("user", "client-certificate", "/etc/ssl/certs/ca-certificates.crt"),
    ("user", "client-key", "/etc/ssl/private/key.pem"),
    ("user", "as", "system:admin"),
    ("user", "as-groups", ["system:masters"]),
    ("user", "as-uid", "1001"),
    ("user", "as-user-extra", {"scopes": ["all"]}),
    ("user", "favourite-colour", "blue"),
    ("cluster", "certificate-authority", "/etc/ssl/certs/ca-certificates.crt"),
    ("cluster", "proxy-url", PROXY),
    ("cluster", "certificate-authority-file", "ca.crt"),
])
def test_file_paths_impersonation_unknown_fields_and_unlisted_proxies_are_refused(
    section: str, field: str, value: Any
) -> None:
    data = _kubeconfig(user={"token": SECRET, field: value}) if section == "user" else _kubeconfig(cluster={field: value})
    with pytest.raises(ClusterConfigError) as info:
        cluster_register(name="bad", kubeconfig=_text(data))
    message = str(info.value)
    _assert_refused(message, field)
    assert str(value) not in message
    assert "users[0]" in message if section == "user" else "clusters[0]" in message


def test_every_refused_field_is_named_at_once_without_echoing_a_value(marker: Path) -> None:
    data = _kubeconfig(user={**_exec_user(marker), "tokenFile": f"/tmp/{SECRET}", "token": SECRET},  # noqa: S108
                       cluster={"certificate-authority": f"/{SECRET}", "proxy-url": f"http://{SECRET}@proxy"})
    data["users"].append({"name": "other", "user": {**_cmd_path_user(marker), SECRET: "x"}})
    with pytest.raises(ClusterConfigError) as info:
        parse_kubeconfig(_text(data))
    message = str(info.value)
    for where, field in [('users[0] "ci"', "exec"), ('users[0] "ci"', "tokenFile"),
                         ('clusters[0] "prod"', "certificate-authority"), ('clusters[0] "prod"', "proxy-url"),
                         ('users[1] "other"', "auth-provider")]:
        assert f'{where}: field "{field}" is not allowed' in message, (where, field, message)
    assert 'users[1] "other": a field (name not shown) is not allowed' in message  # a key is data too
    assert SECRET not in message


def test_proxy_url_only_when_the_operator_allow_lists_it(settings) -> None:
    data = _kubeconfig(cluster={"proxy-url": PROXY})
    with pytest.raises(ClusterConfigError, match='field "proxy-url" is not allowed'):
        cluster_register(name="proxied", kubeconfig=_text(data))
    settings.PORTAL_KUBECONFIG_ALLOWED_PROXIES = ["http://other.example:3128", PROXY]
    cluster = cluster_register(name="proxied", kubeconfig=_text(data))
    assert client_for(cluster)._api_client.configuration.proxy == PROXY
    with pytest.raises(ClusterConfigError, match='field "proxy-url" is not allowed'):
        cluster_register(name="proxied", kubeconfig=_text(_kubeconfig(cluster={"proxy-url": PROXY + "/x"})))


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d.pop("contexts"), "there are no contexts"),
    (lambda d: d.pop("current-context"), "there is no current-context"),
    (lambda d: d.update({"current-context": "nope"}), '"current-context" names a context that is not in'),
    (lambda d: d["contexts"][0]["context"].update(user="ghost"), 'contexts[0] "c": field "user" names a user'),
    (lambda d: d["contexts"][0]["context"].update(cluster="ghost"), 'contexts[0] "c": field "cluster" names a'),
    (lambda d: d["clusters"].append(copy.deepcopy(d["clusters"][0])), 'clusters[1] "prod": the name is used twice'),
    (lambda d: d["clusters"][0]["cluster"].update(server="file:///etc/passwd"), 'field "server" must be an http'),
    (lambda d: d["clusters"][0]["cluster"].update(server=f"https://u:{SECRET}@h"), 'field "server" must be an http'),
    (lambda d: d["clusters"][0]["cluster"].update({"certificate-authority-data": "not base64!"}),
     'field "certificate-authority-data" must be non-empty base64'),
    (lambda d: d["users"][0].update(user={"client-certificate-data": "QUJD"}), '"client-key-data" go together'),
    (lambda d: d["users"][0].update(user={"username": "admin"}), '"username" and "password" go together'),
    (lambda d: d["users"][0].update(user=None), 'users[0] "ci": field "user" must be a mapping'),
    (lambda d: d["contexts"][0].update(namespace="x"), 'contexts[0] "c": field "namespace" is not allowed'),
])
def test_the_structure_is_checked(mutate: Any, expected: str) -> None:
    data = _kubeconfig()
    mutate(data)
    with pytest.raises(ClusterConfigError) as info:
        parse_kubeconfig(_text(data))
    assert expected in str(info.value)
    assert SECRET not in str(info.value)


def test_the_registered_context_must_exist() -> None:
    with pytest.raises(ClusterConfigError, match='context "elsewhere" is not in the kubeconfig'):
        cluster_register(name="ctx", kubeconfig=_text(_kubeconfig()), context="elsewhere")
    assert cluster_register(name="ctx", kubeconfig=_text(_kubeconfig()), context="c").context == "c"


# What keeps working ------------------------------------------------------------------------------------------------


def test_the_simulator_kubeconfig_registers_and_syncs() -> None:
    with Simulator(scenario="demo", port=0) as sim:
        cluster = cluster_register(name="sim", kubeconfig=_text(sim.kubeconfig()))
        client = client_for(cluster)
        try:
            assert client.server_version().startswith("v1.")
        finally:
            client.close()


def test_an_inline_client_certificate_kubeconfig_works() -> None:
    cert, key = _self_signed()
    data = _kubeconfig(user={"client-certificate-data": cert, "client-key-data": key},
                       cluster={"certificate-authority-data": cert, "tls-server-name": "kubernetes",
                                "insecure-skip-tls-verify": False, "disable-compression": True,
                                "extensions": [{"name": "x", "extension": {"anything": 1}}]},
                       extensions=[])
    cluster = cluster_register(name="certs", kubeconfig=_text(data))
    configuration = client_for(cluster)._api_client.configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert Path(configuration.cert_file).read_bytes() == base64.b64decode(cert)
    assert Path(configuration.key_file).read_bytes() == base64.b64decode(key)


def test_in_cluster_stays_supported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config

    (tmp_path / "token").write_text("in-cluster-token")
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(_self_signed()[0]))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cluster = cluster_register(name="home", in_cluster=True)
    assert cluster.connection == Cluster.ConnectionKind.IN_CLUSTER
    assert client_for(cluster)._api_client.configuration.host == "https://10.0.0.1:443"


# Load: rows written before the rules existed -----------------------------------------------------------------------


def _stored(data: dict[str, Any], name: str = "legacy") -> Cluster:
    """A row as an older version (or a direct database write) left it: never validated."""
    return Cluster.objects.create(name=name, connection=Cluster.ConnectionKind.KUBECONFIG, kubeconfig=_text(data))


def test_a_stored_hostile_kubeconfig_is_refused_on_load(hostile: tuple[str, dict[str, Any]]) -> None:
    field, data = hostile
    with pytest.raises(ClusterConfigError) as info:
        client_for(_stored(data))
    _assert_refused(str(info.value), field)


def test_a_stored_file_path_kubeconfig_is_refused_on_load(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET)
    with pytest.raises(ClusterConfigError) as info:
        client_for(_stored(_kubeconfig(user={"tokenFile": str(token_file)})))
    _assert_refused(str(info.value), "tokenFile")


def test_the_watch_task_records_the_refusal_where_sync_errors_show(
    hostile: tuple[str, dict[str, Any]], client: Client, member: Any
) -> None:
    field, data = hostile
    cluster = _stored(data)
    outcome = watch_window_task(cluster.pk, "nodes")
    assert outcome.startswith("config error: kubeconfig refused")
    error = SyncState.objects.get(cluster=cluster, kind="nodes").last_error
    _assert_refused(error, field)
    client.force_login(member)
    page = html.unescape(client.get(cluster.get_absolute_url()).content.decode())
    assert f'field "{field}" is not allowed' in page


def test_sync_once_reports_the_refusal(hostile: tuple[str, dict[str, Any]]) -> None:
    field, data = hostile
    _stored(data)
    with pytest.raises(CommandError) as info:
        call_command("sync", "--cluster", "legacy", "--once")
    _assert_refused(str(info.value), field)


def test_a_dry_run_on_the_web_never_runs_the_command(hostile: tuple[str, dict[str, Any]]) -> None:
    from catalog.services.manifests import manifest_validate

    field, data = hostile
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    report = manifest_validate(text=yaml.safe_dump(pod), cluster=_stored(data), user=None, dry_run=True)
    unavailable = [f.message for f in report.findings if f.code == "dry-run-unavailable"]
    assert unavailable, report.findings
    _assert_refused(unavailable[0], field)


def test_the_admin_refuses_to_keep_a_stored_hostile_kubeconfig(marker: Path, admin_client: Client) -> None:
    cluster = _stored(_kubeconfig(user=_exec_user(marker)))
    url = reverse("admin:inventory_cluster_change", args=[cluster.pk])
    data = {"name": "legacy", "description": "edited", "connection": "kubeconfig", "kubeconfig": "",
            "kubeconfig_path": "", "context": "", "sync_enabled": "on"}
    response = admin_client.post(url, data)
    assert response.status_code == 200
    assert "The stored kubeconfig is refused; paste a new one." in html.unescape(response.content.decode())
    assert admin_client.post(url, {**data, "kubeconfig": _text(_kubeconfig())}).status_code == 302
    cluster.refresh_from_db()
    assert cluster.description == "edited"
    client_for(cluster)


# Kubeconfig paths --------------------------------------------------------------------------------------------------


@pytest.fixture
def kube_dir(tmp_path: Path, settings) -> Path:
    root = tmp_path / "kubeconfigs"
    root.mkdir()
    settings.PORTAL_KUBECONFIG_DIR = str(root)
    return root


def test_paths_are_refused_without_a_configured_directory(settings, tmp_path: Path, admin_client: Client) -> None:
    settings.PORTAL_KUBECONFIG_DIR = ""
    path = tmp_path / "kc.yaml"
    path.write_text(_text(_kubeconfig()))
    with pytest.raises(ClusterConfigError, match="PORTAL_KUBECONFIG_DIR is not set"):
        cluster_register(name="bypath", kubeconfig_path=str(path))
    with pytest.raises(CommandError, match="PORTAL_KUBECONFIG_DIR is not set"):
        call_command("cluster_add", "bypath", "--kubeconfig", str(path), "--reference")
    assert not Cluster.objects.exists()
    form = admin_client.get(reverse("admin:inventory_cluster_add")).content.decode()
    assert 'value="kubeconfig_path"' not in form  # the admin does not offer a kind that cannot work
    response = admin_client.post(reverse("admin:inventory_cluster_add"), {
        "name": "bypath", "description": "", "connection": "kubeconfig_path", "kubeconfig": "",
        "kubeconfig_path": str(path), "context": "", "sync_enabled": "on"})
    assert response.status_code == 200
    assert not Cluster.objects.exists()
    # A row registered by path before the directory was unset is refused on load.
    stored = Cluster.objects.create(name="old", connection=Cluster.ConnectionKind.KUBECONFIG_PATH,
                                    kubeconfig_path=str(path))
    with pytest.raises(ClusterConfigError, match="PORTAL_KUBECONFIG_DIR is not set"):
        client_for(stored)


def test_paths_outside_the_directory_are_refused(kube_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(_text(_kubeconfig()))
    (kube_dir / "link.yaml").symlink_to(outside)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "kc.yaml").write_text(_text(_kubeconfig()))
    (kube_dir / "sub").symlink_to(tmp_path / "elsewhere")
    for path in (outside, kube_dir / ".." / "outside.yaml", kube_dir / "link.yaml", kube_dir / "sub" / "kc.yaml"):
        with pytest.raises(ClusterConfigError, match="is outside PORTAL_KUBECONFIG_DIR"):
            cluster_register(name="escape", kubeconfig_path=str(path))
        stored = Cluster.objects.create(name="escape", connection=Cluster.ConnectionKind.KUBECONFIG_PATH,
                                        kubeconfig_path=str(path))
        with pytest.raises(ClusterConfigError, match="is outside PORTAL_KUBECONFIG_DIR"):
            client_for(stored)
        stored.delete()
    with pytest.raises(ClusterConfigError, match="is not absolute"):
        cluster_register(name="escape", kubeconfig_path="kubeconfigs/kc.yaml")
    with pytest.raises(ClusterConfigError, match="is outside PORTAL_KUBECONFIG_DIR"):
        cluster_register(name="escape", kubeconfig_path=str(kube_dir))


def test_a_hostile_file_inside_the_directory_is_refused_at_registration_and_load(
    kube_dir: Path, hostile: tuple[str, dict[str, Any]], admin_client: Client
) -> None:
    field, data = hostile
    path = kube_dir / "evil.yaml"
    path.write_text(_text(data))
    with pytest.raises(ClusterConfigError) as info:
        cluster_register(name="evil", kubeconfig_path=str(path))
    _assert_refused(str(info.value), field)
    with pytest.raises(CommandError):
        call_command("cluster_add", "evil", "--kubeconfig", str(path), "--reference")
    response = admin_client.post(reverse("admin:inventory_cluster_add"), {
        "name": "evil", "description": "", "connection": "kubeconfig_path", "kubeconfig": "",
        "kubeconfig_path": str(path), "context": "", "sync_enabled": "on"})
    assert response.status_code == 200
    assert f'field "{field}" is not allowed' in html.unescape(response.content.decode())
    assert not Cluster.objects.exists()
    stored = Cluster.objects.create(name="evil", connection=Cluster.ConnectionKind.KUBECONFIG_PATH,
                                    kubeconfig_path=str(path))
    with pytest.raises(ClusterConfigError) as info:
        client_for(stored)
    _assert_refused(str(info.value), field)


def test_relative_file_paths_in_a_mounted_kubeconfig_are_refused(kube_dir: Path) -> None:
    # load_kube_config(config_file=...) would read these relative to the kubeconfig's directory.
    (kube_dir / "token").write_text(SECRET)
    path = kube_dir / "rel.yaml"
    path.write_text(_text(_kubeconfig(user={"tokenFile": "token"})))
    stored = Cluster.objects.create(name="rel", connection=Cluster.ConnectionKind.KUBECONFIG_PATH,
                                    kubeconfig_path=str(path))
    with pytest.raises(ClusterConfigError) as info:
        client_for(stored)
    _assert_refused(str(info.value), "tokenFile")


def test_a_mounted_secret_is_registered_by_its_stable_path_and_survives_rotation(
    kube_dir: Path, admin_client: Client
) -> None:
    """The kubelet's layout: NAME -> ..data/NAME, ..data -> ..<timestamp>/, swapped atomically on every update."""
    with Simulator(scenario="demo", port=0) as sim:
        first = kube_dir / "..2025_01_01_00_00_00.1"
        first.mkdir()
        sim.write_kubeconfig(first / "sim.yaml")
        (kube_dir / "..data").symlink_to(first.name)
        (kube_dir / "sim.yaml").symlink_to("..data/sim.yaml")

        call_command("cluster_add", "sim", "--kubeconfig", str(kube_dir / "sim.yaml"), "--reference")
        cluster = Cluster.objects.get(name="sim")
        assert cluster.connection == Cluster.ConnectionKind.KUBECONFIG_PATH
        assert cluster.kubeconfig_path == str(kube_dir / "sim.yaml")  # not the timestamped target

        second = kube_dir / "..2025_02_01_00_00_00.2"
        second.mkdir()
        sim.write_kubeconfig(second / "sim.yaml")
        (kube_dir / "..data_tmp").symlink_to(second.name)
        os.replace(kube_dir / "..data_tmp", kube_dir / "..data")
        shutil.rmtree(first)

        client = client_for(cluster)
        try:
            assert client.server_version().startswith("v1.")
        finally:
            client.close()
    assert 'value="kubeconfig_path"' in admin_client.get(reverse("admin:inventory_cluster_add")).content.decode()


def test_the_configured_directory_may_itself_be_a_symlink(kube_dir: Path, tmp_path: Path, settings) -> None:
    (tmp_path / "alias").symlink_to(kube_dir)
    settings.PORTAL_KUBECONFIG_DIR = str(tmp_path / "alias")
    (kube_dir / "kc.yaml").write_text(_text(_kubeconfig()))
    cluster = cluster_register(name="aliased", kubeconfig_path=str(tmp_path / "alias" / "kc.yaml"))
    assert client_for(cluster)._api_client.configuration.host == "https://127.0.0.1:6443"
