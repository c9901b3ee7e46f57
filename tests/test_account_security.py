"""The Django admin only for platform admins; failed logins throttled per address and per username."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from portal.roles import Role
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


def test_failed_logins_are_throttled_and_success_clears_the_user(settings) -> None:
    settings.PORTAL_LOGIN_MAX_FAILURES = 3
    cache.clear()
    make_user("alice")
    client = Client()
    for _ in range(3):
        assert client.post("/login/", {"username": "alice", "password": "wrong"}).status_code == 200
    blocked = client.post("/login/", {"username": "alice", "password": "pw"})
    assert blocked.status_code == 429  # even the right password, until the window passes
    assert int(blocked["Retry-After"]) > 0
    other = Client(REMOTE_ADDR="10.1.2.3")
    assert other.post("/login/", {"username": "alice", "password": "pw"}).status_code == 429  # per username too
    cache.clear()
    assert client.post("/login/", {"username": "alice", "password": "pw"}).status_code == 302


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
