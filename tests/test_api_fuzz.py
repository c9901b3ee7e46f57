"""Schema-driven fuzzing of the whole API (docs/api-fuzzing.md).

Schemathesis reads `/api/schema/` from the Django app in-process and, for every operation (reads and writes), sends
generated requests: as a platform admin, its coverage phase (boundary and invalid values of every parameter and
property: wrong types, out-of-range numbers, bad formats, missing fields) and random ones, valid and invalid; as a
tenant lead, random ones (the scoped querysets, the requester's side); and a fixed list of hostile values (NUL,
2**70, "²", a UTC offset PostgreSQL refuses) in every parameter and property. The world is the demo scenario synced
from the simulator, the curated catalog, tenants, quota requests, exception tickets, a grant and a webhook. Every
answer must be: no 5xx, a documented status code, content type and headers, and a body that matches the documented
schema. Each request runs in a savepoint that is rolled back, so every example sees the same world, and the examples
are derandomized, so a failure in CI reproduces locally.

Run alone: `DATABASE_URL=… REDIS_URL=… .venv/bin/pytest tests/test_api_fuzz.py` (FUZZ_MAX_EXAMPLES=200 for a longer
run).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import schemathesis
import yaml
from django.conf import settings
from django.core.cache import caches
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apitokens.scopes import SCOPES
from apitokens.services import api_token_create
from catalog.models import Offering
from catalog.services.manifests import snapshot_forget
from inventory.leases import lease_backend
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.sync import cluster_sync_once
from kubesim import Simulator
from portal.access.services import access_request_create, break_glass_grant
from portal.management.commands.demo_tenants import LABEL, TENANTS
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from portal.tenancy.services import label_rule_set, membership_set, tenant_create, tenant_namespaces_sync
from tests.conftest import make_user

# django_db: each test runs in a transaction rolled back at its end (the seed is committed once per module).
pytestmark = [pytest.mark.slow, pytest.mark.django_db]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
# The API takes no passwords: each fuzzing user calls it with an API token holding every scope (so scopes never
# narrow what the user's role allows) and a rate limit the run cannot reach. Filled by the fixture.
TOKENS: dict[str, str] = {}


def _bearer(username: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[username]}"}


def _token_for(user: Any) -> None:
    created = api_token_create(actor=None, user=user, name="fuzzing", scopes=list(SCOPES),
                               expires_at=timezone.now() + dt.timedelta(days=1), rate_limit_per_minute=10**9)
    TOKENS[user.get_username()] = created.plaintext


@pytest.fixture(scope="module")
def fuzz_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """The demo scenario synced from the simulator (kept serving for dry runs), the curated catalog, the demo
    tenants, a platform admin, a tenant lead and member, quota requests, exception tickets, a grant and a webhook.
    Written once for the module with autocommit, and flushed at the end like a transactional test."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    snapshot_forget()
    with django_db_blocker.unblock(), Simulator(scenario="demo", port=0, seed=1) as sim:
        try:
            world = _seed(sim)
            # The requests reach the real WSGI handler, whose request signals would close the connection (and with
            # it the test's transaction); django.test.Client disconnects them the same way around each request.
            request_started.disconnect(close_old_connections)
            request_finished.disconnect(close_old_connections)
            yield world
        finally:
            request_started.connect(close_old_connections)
            request_finished.connect(close_old_connections)
            # As a transactional test flushes: ids are not reset. The flush command's default would restart every
            # sequence, and the next module's first API token would get this module's token ids back while the
            # rate-limit counters of the same minute (the cache, keyed by token id) still held this module's
            # thousands of requests: a first request answered 429.
            call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
            caches["default"].clear()
            redis.Redis.from_url(settings.REDIS_URL).flushdb()
            snapshot_forget()


def _seed(sim: Simulator) -> dict[str, Any]:
    cluster = cluster_register(name="demo", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
    client = client_for(cluster)
    backend = lease_backend()
    try:
        cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda s: backend.acquire(s, 30))
    finally:
        client.close()
    call_command("catalog_seed", verbosity=0)
    admin = make_user("fuzz-admin", Role.PLATFORM_ADMIN, superuser=True)
    lead = make_user("fuzz-lead", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    member = make_user("fuzz-member", Role.TENANT_MEMBER)
    for slug, (name, cost_center) in TENANTS.items():
        tenant = tenant_create(actor=admin, slug=slug, name=name, cost_center=cost_center)
        if slug == "ml-research":  # the admin too, so that its quota and exception requests reach the services
            for user, role in ((admin, "lead"), (lead, "lead"), (member, "member")):
                membership_set(actor=admin, tenant_id=tenant.pk, username=user.username, role=role)
    label_rule_set(actor=admin, label_key=LABEL)
    tenant_namespaces_sync(actor=admin)
    offering = Offering.objects.filter(lifecycle="active").order_by("pk").first()
    assert offering is not None, "catalog_seed made no active offering"
    for units, submit in ((1, True), (4, True), (2, False)):
        quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="ml-research", offering_id=offering.pk,
                             units=units, justification="fuzzing seed", submit=submit)
    access_request_create(actor=member, kind="admin-access", cluster_id=cluster.pk, namespace="ml-research",
                          reason="check GPU health", ticket_ref="CHG-1", window=dt.timedelta(hours=2))
    access_request_create(actor=lead, kind="privileged", cluster_id=cluster.pk, namespace="ml-research",
                          reason="debug a device", ticket_ref="CHG-2", window=dt.timedelta(hours=2),
                          service_account="debug")
    break_glass_grant(actor=admin, kind="admin-access", cluster_id=cluster.pk, namespace="ml-research",
                      reason="incident", ticket_ref="INC-1", window=dt.timedelta(hours=1))
    for user in (admin, lead, member):
        _token_for(user)
    api = Client(headers=_bearer(admin.username))
    webhook = {"name": "cmdb", "url": "https://cmdb.example.com/hook", "secret": "s" * 32, "event_types": ["node."]}
    created = api.post("/api/v1/webhooks/", webhook, content_type="application/json")
    assert created.status_code == 201, created.content
    _learn_objects(api)
    VALID_REFS.update(cluster=cluster.name, namespace="ml-research", offering=offering.slug)
    return {"sim": sim, "cluster": cluster, "admin": admin, "lead": lead, "member": member}


# What the requests act on: generated path parameters are half the time replaced by an object that exists (the
# `id`s or `slug`s of its collection), and a body's `cluster`, `namespace` and `offering` half the time by valid ones,
# so that writes reach the services rather than stop at "not found". Filled by the fixture.
KNOWN_OBJECTS: dict[str, list[Any]] = {}
VALID_REFS: dict[str, str] = {}


def _learn_objects(api: Client) -> None:
    for path in schema.raw_schema["paths"]:
        collection, brace, rest = path.partition("{")
        if not brace or collection in KNOWN_OBJECTS:
            continue
        field = rest.partition("}")[0]
        response = api.get(collection, {"limit": 5})
        assert response.status_code == 200, (collection, response.content)
        body = response.json()
        KNOWN_OBJECTS[collection] = [item[field] for item in (body["results"] if isinstance(body, dict) else body)]


# Loaded at collection: generating the schema needs no database. A fixed seed with derandomized Hypothesis: the same
# requests on every run.
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(),
                                        config=schemathesis.Config.from_dict({"seed": 1}))
# The tenant lead's run checks scoping, not input parsing (the admin's coverage phase does): random examples only.
lead_schema = schemathesis.openapi.from_dict(
    schema.raw_schema, config=schemathesis.Config.from_dict({"seed": 1, "phases": {"coverage": {"enabled": False}}}))
lead_schema.app = schema.app


def flatmap_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any]) -> Any:
    known = KNOWN_OBJECTS.get(context.operation.path.partition("{")[0]) if context.operation else None
    if not known or not path_parameters or len(path_parameters) != 1:
        return st.just(path_parameters)
    (name,) = path_parameters
    return st.one_of(st.just(path_parameters), st.sampled_from(known).map(lambda value: {name: value}))


def flatmap_body(context: schemathesis.HookContext, body: Any) -> Any:
    if not isinstance(body, dict) or not VALID_REFS.keys() & body.keys():
        return st.just(body)
    return st.one_of(st.just(body), st.just({**body, **{k: v for k, v in VALID_REFS.items() if k in body}}))


for _schema in (schema, lead_schema):
    _schema.hook(flatmap_path_parameters)
    _schema.hook(flatmap_body)

FUZZ_SETTINGS = hypothesis_settings(
    max_examples=int(os.environ.get("FUZZ_MAX_EXAMPLES", "25")),  # per operation; raise it locally
    deadline=None,
    derandomize=True,  # the same examples on every run: CI failures reproduce locally
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failing example is reported as generated
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)


def _call(case: schemathesis.Case, username: str) -> None:
    """One request in a savepoint that is rolled back: every example sees the seeded world, nothing accumulates.
    Marked like Django's TestCase atomics so the durable services inside may still open their blocks."""
    atomic = transaction.atomic()
    atomic._from_testcase = True  # what django.test.TestCase does for its own atomics
    with atomic:
        case.call_and_validate(headers=_bearer(username), checks=CHECKS)
        transaction.set_rollback(True)


@schema.parametrize()
@FUZZ_SETTINGS
def test_api_as_platform_admin(case: schemathesis.Case, fuzz_world: dict[str, Any]) -> None:
    _call(case, "fuzz-admin")


@lead_schema.parametrize()
@FUZZ_SETTINGS
def test_api_as_tenant_lead(case: schemathesis.Case, fuzz_world: dict[str, Any]) -> None:
    """A tenant member who may also request quota: the tenant-scoped querysets and the requester's side."""
    _call(case, "fuzz-lead")


# Values random generation rarely hits, each sent alone in every query and path parameter, and in every property of
# a body: PostgreSQL text holds no NUL, 2**70 fits no integer column, "²" passes str.isdigit() but not int(), and
# Python accepts UTC offsets beyond PostgreSQL's ±15:59.
HOSTILE = {"nul": "a\x00b", "huge": 2**70, "superscript-digit": "²", "far-offset": "9999-12-31T23:59:59-23:59"}
# Valid values for the other parameters, so that the hostile one is the value the view reads.
VALID = {"id": "1", "slug": "ml-research", "window": "2026-01-01,2026-02-01", "requirement": "cuda 12"}


def _hostile_cases(path: str, method: str) -> Iterator[tuple[str, schemathesis.Case]]:
    operation = schema[path][method]
    spec = schema.raw_schema["paths"][path][method]
    parameters = [p for p in spec.get("parameters", []) if p["in"] in ("query", "path")]
    path_values = {p["name"]: VALID[p["name"]] for p in parameters if p["in"] == "path"}
    required = {p["name"]: VALID[p["name"]] for p in parameters if p["in"] == "query" and p.get("required")}
    for name, value in HOSTILE.items():
        for parameter in parameters:
            if parameter["in"] == "path":
                case = operation.Case(path_parameters={**path_values, parameter["name"]: value}, query=required)
            else:
                case = operation.Case(path_parameters=path_values, query={**required, parameter["name"]: value})
            yield f"{parameter['in']} {parameter['name']}={name}", case
        body = spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if body:
            properties = _resolve(body).get("properties", {})
            yield f"body {name}", operation.Case(path_parameters=path_values, query=required,
                                                 media_type="application/json", body=dict.fromkeys(properties, value))


def _resolve(schema_object: dict[str, Any]) -> dict[str, Any]:
    ref = schema_object.get("$ref", "")
    return schema.raw_schema["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema_object


# Known failures in code another change owns, each reported: the case must still fail (a fix makes this test fail
# until the entry is removed).
KNOWN_FAILURES: set[tuple[str, str]] = set()  # every operation answers hostile values with a 4xx


@pytest.mark.parametrize(("path", "method"), [
    pytest.param(path, method, id=f"{method.upper()} {path}")
    for path, item in schema.raw_schema["paths"].items() for method in item
    if method in ("get", "post", "put", "patch", "delete")
])
def test_hostile_values_get_a_documented_4xx(path: str, method: str, fuzz_world: dict[str, Any],
                                             subtests: pytest.Subtests) -> None:
    for label, case in _hostile_cases(path, method):
        with subtests.test(msg=label):
            if (f"{method.upper()} {path}", label) in KNOWN_FAILURES:
                with pytest.raises(FailureGroup):
                    _call(case, "fuzz-admin")
            else:
                _call(case, "fuzz-admin")
