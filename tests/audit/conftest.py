"""Audit test helpers: a target object, a way to append events, SQL tampering with the triggers disabled, the
secrets the admin tests type in, and `audit_verify` runs."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from rest_framework.test import APIClient

from audit.models import AuditEvent
from audit.services import audit_record
from portal.tenancy.roles import Role
from tests.conftest import make_user

KEY = "k" * 16 + "test-checkpoint-key-not-secret"
# Secrets the admin tests type in; none may ever show up in an audit event (tests/audit/test_admin_walk.py).
TOKEN_A, TOKEN_B = "walk-kubeconfig-token-AAAA", "walk-kubeconfig-token-BBBB"
PASSWORD = "walk-Secret-passphrase-41"


@pytest.fixture
def target(db: None) -> Group:
    return Group.objects.create(name="audited-thing")


def record(n: int, *, actor: Any = None, target: Any = None, **kwargs: Any) -> list[AuditEvent]:
    """Append n events in one transaction (the target defaults to a fresh group)."""
    target = target or Group.objects.get_or_create(name="audited-thing")[0]
    with transaction.atomic():
        return [audit_record(actor=actor, verb=f"test.{i}", target=target, data={"n": i}, **kwargs)
                for i in range(n)]


@contextmanager
def tampering(table: str = "audit_auditevent") -> Iterator[Any]:
    """A cursor that may UPDATE/DELETE the append-only table: what a database owner or superuser could do."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        try:
            yield cursor
        finally:
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


@pytest.fixture
def checkpoint_key(settings: Any) -> str:
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = KEY
    return KEY


@pytest.fixture
def plain_platform_admin(db: None) -> User:
    """A platform admin who is not a superuser (the shared fixture is both)."""
    return make_user("pa", Role.PLATFORM_ADMIN)


@pytest.fixture
def api() -> APIClient:
    return APIClient()



def kubeconfig(token: str) -> str:
    """A kubeconfig whose user authenticates with `token`."""
    return ("apiVersion: v1\nclusters: [{name: walk, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
            f"users: [{{name: walk, user: {{token: {token}}}}}]\n"
            "contexts: [{name: walk, context: {cluster: walk, user: walk}}]\ncurrent-context: walk\n")


def run_verify(*args: str) -> tuple[int, str]:
    """`manage.py audit_verify *args`: its exit code and output."""
    out = io.StringIO()
    try:
        call_command("audit_verify", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def json_verify(*args: str) -> tuple[int, dict]:
    code, out = run_verify("--format", "json", *args)
    return code, orjson.loads(out)
