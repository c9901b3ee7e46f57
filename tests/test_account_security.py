"""The Django admin only for platform admins; failed logins throttled per (real client, username) and per client on every
password path; the API takes no passwords."""

from __future__ import annotations

import base64

import pytest
from django.core.cache import cache
from django.test import Client

from portal.tenancy.roles import Role
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_admin_needs_the_platform_admin_role_not_just_staff() -> None:
    staff = make_user("staff-only")
    staff.is_staff = True
    staff.save()
    client = Client()
    client.force_login(staff)
    assert client.get("/admin/").status_code == 302  # back to the admin login
    admin = make_user("plat", Role.PLATFORM_ADMIN)
    admin.is_staff = True
    admin.save()
    client.force_login(admin)
    assert client.get("/admin/").status_code == 200


INGRESS = "10.0.0.5"  # the ingress controller, a trusted proxy in these tests


def _login(path: str, username: str, password: str, *, forwarded_for: str = "", remote: str = INGRESS) -> int:
    extra = {"HTTP_X_FORWARDED_FOR": forwarded_for} if forwarded_for else {}
    return Client(REMOTE_ADDR=remote).post(path, {"username": username, "password": password}, **extra).status_code


@pytest.fixture
def behind_ingress(settings):
    settings.PORTAL_TRUSTED_PROXIES = ["10.0.0.0/8"]
    cache.clear()
    yield settings
    cache.clear()


def test_ten_failures_lock_that_username_from_that_client_only(behind_ingress) -> None:
    make_user("alice")
    make_user("bob")
    for _ in range(10):  # the default PORTAL_LOGIN_MAX_FAILURES
        assert _login("/login/", "alice", "wrong", forwarded_for="203.0.113.7") == 200
    blocked = Client(REMOTE_ADDR=INGRESS).post("/login/", {"username": "alice", "password": "pw"},
                                               HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert blocked.status_code == 429  # even the right password, until the window passes
    assert int(blocked["Retry-After"]) > 0
    assert _login("/login/", "ALICE ", "pw", forwarded_for="203.0.113.7") == 429  # the same username, spelled otherwise
    # Behind the same ingress: another client is not locked out, neither for alice nor for bob, and the locked
    # client may still sign in as somebody else.
    assert _login("/login/", "alice", "pw", forwarded_for="198.51.100.9") == 302
    assert _login("/login/", "bob", "pw", forwarded_for="198.51.100.9") == 302
    assert _login("/login/", "bob", "pw", forwarded_for="203.0.113.7") == 302


def test_a_success_clears_the_pairs_count(behind_ingress) -> None:
    behind_ingress.PORTAL_LOGIN_MAX_FAILURES = 3
    make_user("alice")
    for _ in range(2):
        assert _login("/login/", "alice", "wrong", forwarded_for="203.0.113.7") == 200
    assert _login("/login/", "alice", "pw", forwarded_for="203.0.113.7") == 302
    for _ in range(2):
        assert _login("/login/", "alice", "wrong", forwarded_for="203.0.113.7") == 200
    assert _login("/login/", "alice", "pw", forwarded_for="203.0.113.7") == 302


def test_a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(behind_ingress) -> None:
    behind_ingress.PORTAL_LOGIN_MAX_FAILURES = 3
    make_user("alice")
    for attempt in range(3):  # a fresh address per attempt in a header nobody trusted it to send
        assert _login("/login/", "alice", "wrong", remote="192.0.2.44", forwarded_for=f"198.51.100.{attempt}") == 200
    assert _login("/login/", "alice", "pw", remote="192.0.2.44", forwarded_for="198.51.100.200") == 429
    assert _login("/login/", "alice", "pw", remote="192.0.2.45") == 302  # another peer: its own bucket


def test_one_client_spraying_many_usernames_is_locked(behind_ingress) -> None:
    behind_ingress.PORTAL_LOGIN_MAX_FAILURES_PER_CLIENT = 5
    make_user("victim")
    for index in range(5):
        assert _login("/login/", f"user{index}", "Summer2026!", forwarded_for="203.0.113.7") == 200
    assert _login("/login/", "victim", "pw", forwarded_for="203.0.113.7") == 429
    assert _login("/login/", "victim", "pw", forwarded_for="198.51.100.9") == 302


def test_the_admin_login_is_throttled_too(behind_ingress) -> None:
    behind_ingress.PORTAL_LOGIN_MAX_FAILURES = 3
    admin = make_user("root", Role.PLATFORM_ADMIN, superuser=True)
    admin.is_staff = True
    admin.save()
    for _ in range(3):
        assert _login("/admin/login/", "root", "wrong", forwarded_for="203.0.113.7") == 200
    assert _login("/admin/login/", "root", "pw", forwarded_for="203.0.113.7") == 429
    assert _login("/login/", "root", "pw", forwarded_for="203.0.113.7") == 429  # one count for every password path
    assert _login("/admin/login/", "root", "pw", forwarded_for="198.51.100.9") == 302


def test_every_password_check_is_refused_while_throttled(behind_ingress, rf) -> None:
    """The authentication backend refuses, whatever view asks: a password path added later is covered."""
    from django.contrib.auth import authenticate

    behind_ingress.PORTAL_LOGIN_MAX_FAILURES = 2
    make_user("alice")
    request = rf.post("/anywhere/", REMOTE_ADDR="192.0.2.44")
    assert authenticate(request, username="alice", password="wrong") is None
    assert authenticate(request, username="alice", password="wrong") is None
    assert authenticate(request, username="alice", password="pw") is None  # right, but throttled
    assert authenticate(rf.post("/", REMOTE_ADDR="192.0.2.45"), username="alice", password="pw") is not None


def test_the_api_takes_no_passwords(db) -> None:
    from rest_framework.test import APIClient

    make_user("finance-bot", Role.FINANCE)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"finance-bot:pw").decode())
    response = api.get("/api/v1/audit-events/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_kubeconfigs_are_encrypted_at_rest(settings) -> None:
    from cryptography.fernet import Fernet
    from django.db import connection

    from inventory.models import Cluster
    from inventory.services.clusters import cluster_register

    secret = "token-abcdef-0123456789"
    kubeconfig = ("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
                  f"users: [{{name: u, user: {{token: {secret}}}}}]\n"
                  "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
    cluster = cluster_register(name="secure", kubeconfig=kubeconfig)
    with connection.cursor() as cursor:
        cursor.execute("SELECT kubeconfig FROM inventory_cluster WHERE id = %s", [cluster.pk])
        stored = cursor.fetchone()[0]
    assert stored.startswith("enc:v1:")
    assert secret not in stored
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == kubeconfig  # code sees plaintext

    # Key rotation: a new first key encrypts; the old one still decrypts until the rows are re-saved.
    old_key = Fernet.generate_key().decode()
    settings.PORTAL_FIELD_ENCRYPTION_KEYS = [old_key]
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=kubeconfig)
    settings.PORTAL_FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode(), old_key]
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == kubeconfig


def test_rendering_pages_and_lists_never_decrypts_a_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a Cluster row (a filter's choices, a node's select_related cluster, the API) decrypts nothing; only
    code that reads `cluster.kubeconfig` (building a client) pays for, and sees, the secret."""
    import inventory.fields
    from inventory.models import Cluster
    from inventory.services.clients import client_for
    from tests.inventory.factories import ClusterFactory, NodeFactory, PodFactory

    real = inventory.fields._fernet
    decryptions: list[int] = []

    class Counting:
        def __init__(self) -> None:
            self._inner = real()

        def decrypt(self, token: bytes) -> bytes:
            decryptions.append(1)
            return self._inner.decrypt(token)

        def encrypt(self, data: bytes) -> bytes:
            return self._inner.encrypt(data)

    monkeypatch.setattr(inventory.fields, "_fernet", Counting)
    clusters = [ClusterFactory(name=f"c{i}") for i in range(3)]
    for cluster in clusters:
        PodFactory(cluster=cluster, node_name=NodeFactory(cluster=cluster).name)
    admin = make_user("ada", Role.PLATFORM_ADMIN, superuser=True)
    client = Client()
    client.force_login(admin)
    decryptions.clear()
    for url in ("/inventory/nodes/", "/inventory/pending-pods/", "/inventory/clusters/", f"/inventory/clusters/{clusters[0].pk}/",
                "/inventory/accelerators/", "/inventory/capacity/", "/catalog/", "/api/v1/nodes/", "/api/v1/pods/",
                "/api/v1/clusters/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert not decryptions, f"{url} decrypted {len(decryptions)} kubeconfig(s)"
    assert [c.name for c in Cluster.objects.select_related()]
    assert not decryptions

    client_for(Cluster.objects.get(pk=clusters[0].pk))
    assert len(decryptions) == 1  # the one place that needs the secret still gets it


def test_sessions_are_read_from_the_cache_and_end_at_logout(db) -> None:
    """cached_db sessions: a page view reads its session from the cache (no django_session query), and logging out
    ends the session in the cache too, so the old cookie is refused."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(make_user("carol", Role.TENANT_MEMBER))
    assert client.get("/catalog/", secure=True).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/catalog/", secure=True).status_code == 200
    assert not [q["sql"] for q in queries.captured_queries if "django_session" in q["sql"]]
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert client.post("/logout/", secure=True).status_code == 302
    stale = Client()
    stale.cookies[settings.SESSION_COOKIE_NAME] = cookie
    assert stale.get("/catalog/", secure=True).status_code == 302  # to the login page
