"""Webhooks against a real local HTTP endpoint: signature, retries with backoff, permanent failures, timeouts,
exactly-once dispatch under concurrency, the API's permissions and delivery log, and a secret that never leaks."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client

from audit.models import AuditEvent
from audit.services import audit_record
from integrations.delivery import SIGNATURE_HEADER, signature_valid
from integrations.models import DispatchCursor, WebhookDelivery, WebhookSubscription
from integrations.services import (
    webhook_delivery_attempt,
    webhook_subscription_create,
    webhooks_dispatch,
)
from inventory.changefeed import feed_head
from inventory.models import ChangeEvent, Cluster
from inventory.services.changes import PendingChange, change_feed_lock, changes_record
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.integrations.conftest import SECRET, Endpoint

API = "/api/v1/webhooks/"


@pytest.fixture
def endpoint(settings: Any) -> Iterator[Endpoint]:
    """The local endpoint is on loopback, which deliveries refuse unless the operator allow-lists it: these tests do
    (and only these; the default is public addresses only, tests/integrations/test_webhook_addresses.py)."""
    settings.PORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server = Endpoint()
    yield server
    server.close()


class Queue:
    """Stands in for the Celery task: records what would be enqueued on the `webhooks` queue."""

    def __init__(self) -> None:
        self.enqueued: list[tuple[int, float | None]] = []

    def delay(self, delivery_id: int) -> None:
        self.enqueued.append((delivery_id, None))

    def apply_async(self, args: tuple[int], countdown: float | None = None) -> None:
        self.enqueued.append((args[0], countdown))


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Queue:
    fake = Queue()
    monkeypatch.setattr("integrations.services.webhook_deliver_task", fake)
    return fake


@pytest.fixture
def attempt(django_capture_on_commit_callbacks: Any) -> Any:
    """One attempt, running its after-commit enqueue like a real commit would (tests run inside a transaction)."""

    def run(delivery_id: int) -> WebhookDelivery | None:
        with django_capture_on_commit_callbacks(execute=True):
            return webhook_delivery_attempt(delivery_id=delivery_id)

    return run


@pytest.fixture
def admin(db: None) -> User:
    return make_user("webhook-admin", Role.PLATFORM_ADMIN)  # a platform admin, not a superuser


def _subscription(endpoint: Endpoint, event_types: list[str] | None = None, name: str = "cmdb") -> WebhookSubscription:
    return webhook_subscription_create(actor=None, name=name, url=endpoint.url, secret=SECRET,
                                       event_types=event_types or ["node."])


def _delivery(subscription: WebhookSubscription, event_type: str = "node.created") -> WebhookDelivery:
    from django.utils import timezone

    return WebhookDelivery.objects.create(
        subscription=subscription, source="changes", event_id=1, event_type=event_type,
        payload={"type": event_type, "source": "inventory", "event": {"object_id": "n1"}},
        next_attempt_at=timezone.now(),
    )


def _due(delivery: WebhookDelivery) -> None:
    from django.utils import timezone

    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())


def test_delivery_is_signed_with_the_secret(db: None, endpoint: Endpoint, queue: Queue, attempt: Any) -> None:
    delivery = _delivery(_subscription(endpoint))

    result = attempt(delivery.pk)

    assert result is not None
    assert result.status == WebhookDelivery.Status.DELIVERED
    assert result.attempts == 1
    assert result.last_response_code == 200
    (request,) = endpoint.requests
    headers = request["headers"]
    assert headers["X-Portal-Event"] == "node.created"
    assert headers["X-Portal-Delivery"] == str(delivery.pk)
    assert headers[SIGNATURE_HEADER].startswith("sha512=")
    assert len(headers[SIGNATURE_HEADER]) == len("sha512=") + 128
    assert signature_valid(SECRET, request["body"], headers[SIGNATURE_HEADER])
    assert not signature_valid("another-secret-of-enough-length", request["body"], headers[SIGNATURE_HEADER])
    body = json.loads(request["body"])
    assert body["delivery"] == delivery.pk
    assert str(body["timestamp"]) == headers["X-Portal-Timestamp"]
    assert body["event"] == {"object_id": "n1"}
    assert attempt(delivery.pk) is None  # delivered: never again
    assert len(endpoint.requests) == 1


def test_503_is_retried_with_backoff_then_delivered(db: None, endpoint: Endpoint, queue: Queue, attempt: Any, settings: Any) -> None:
    settings.PORTAL_WEBHOOK_BACKOFF_SECONDS = 10.0
    endpoint.script = [(503, 0, {}), (503, 0, {"Retry-After": "120"})]
    delivery = _delivery(_subscription(endpoint))

    first = attempt(delivery.pk)
    assert first.status == WebhookDelivery.Status.PENDING
    assert first.last_response_code == 503
    assert attempt(delivery.pk) is None  # not due yet
    (_, countdown), = queue.enqueued
    assert 5.0 <= countdown <= 10.0  # base 10 s with equal jitter
    _due(delivery)
    second = attempt(delivery.pk)
    assert second.status == WebhookDelivery.Status.PENDING
    assert queue.enqueued[-1][1] == pytest.approx(120.0)  # Retry-After asked for longer than the backoff
    _due(delivery)
    third = attempt(delivery.pk)

    assert third.status == WebhookDelivery.Status.DELIVERED
    assert third.attempts == 3
    assert third.delivered_at is not None
    assert len(endpoint.requests) == 3
    assert len({r["headers"]["X-Portal-Delivery"] for r in endpoint.requests}) == 1  # receivers can deduplicate


def test_410_fails_at_once_and_retries_stop_at_the_maximum(db: None, endpoint: Endpoint, queue: Queue, attempt: Any,
                                                          settings: Any) -> None:
    endpoint.script = [(410, 0, {})]
    gone = attempt(_delivery(_subscription(endpoint)).pk)
    assert gone.status == WebhookDelivery.Status.FAILED
    assert gone.attempts == 1
    assert gone.last_response_code == 410
    assert queue.enqueued == []

    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 2
    endpoint.script = [(500, 0, {}), (429, 0, {})]
    delivery = _delivery(_subscription(endpoint, name="other"))
    attempt(delivery.pk)
    _due(delivery)
    last = attempt(delivery.pk)
    assert last.status == WebhookDelivery.Status.FAILED
    assert last.attempts == 2
    assert last.last_response_code == 429


def test_redirects_are_not_followed(db: None, endpoint: Endpoint, queue: Queue, attempt: Any) -> None:
    endpoint.script = [(302, 0, {"Location": "http://127.0.0.1:9/elsewhere"})]
    result = attempt(_delivery(_subscription(endpoint)).pk)
    assert result.status == WebhookDelivery.Status.FAILED
    assert "redirects are not followed" in result.last_error
    assert len(endpoint.requests) == 1


def test_timeouts_and_unreachable_endpoints_are_retried(db: None, endpoint: Endpoint, queue: Queue, attempt: Any,
                                                        settings: Any) -> None:
    settings.PORTAL_WEBHOOK_READ_TIMEOUT = 0.3
    endpoint.script = [(200, 1.5, {})]
    started = time.monotonic()
    slow = attempt(_delivery(_subscription(endpoint)).pk)
    assert time.monotonic() - started < 1.4
    assert slow.status == WebhookDelivery.Status.PENDING
    assert slow.last_response_code is None
    assert "timed out" in slow.last_error.lower()
    assert "token=in-the-url" not in slow.last_error

    subscription = _subscription(endpoint, name="closed")
    WebhookSubscription.objects.filter(pk=subscription.pk).update(url="http://127.0.0.1:9/hook")
    refused = attempt(_delivery(subscription).pk)
    assert refused.status == WebhookDelivery.Status.PENDING
    assert refused.last_error
    assert len(queue.enqueued) == 2


def _change(cluster: Cluster, event: str, object_id: str) -> None:
    object_type, action = event.split(".")
    with transaction.atomic():
        change_feed_lock(cluster_id=cluster.pk)
        changes_record(cluster_id=cluster.pk, object_type=object_type, cluster_name=cluster.name,
                       changes=[PendingChange(action, object_id, "{}" if action != "deleted" else "")])


def _wait_final() -> None:
    # The feed's horizon is the oldest running write transaction of this database (other xdist workers' databases
    # do not count: test_a_write_transaction_of_another_database_does_not_hold_the_feed_back).
    deadline = time.monotonic() + 60
    last = ChangeEvent.objects.order_by("-txid", "-id").values_list("txid", "id").first()
    while last and tuple(feed_head()) < last:
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_dispatcher_creates_each_delivery_once_even_when_run_concurrently(endpoint: Endpoint, queue: Queue) -> None:
    nodes = _subscription(endpoint, ["node.created", "node.deleted"], name="nodes")
    everything = _subscription(endpoint, ["node.", "device.", "grant."], name="everything")
    _subscription(endpoint, ["violation."], name="violations")
    webhooks_dispatch()  # cursors start at "now": earlier events (the subscriptions' own audit rows) are not sent
    assert WebhookDelivery.objects.count() == 0
    cluster = Cluster.objects.create(name="c1")
    _change(cluster, "node.created", "n1")
    _change(cluster, "node.updated", "n1")
    _change(cluster, "device.deleted", "gpu.nvidia.com/p/gpu-0")
    with transaction.atomic():
        audit_record(actor=None, verb="grant.issued", target=cluster)
    _wait_final()

    barrier, results, errors = threading.Barrier(3), [], []

    def run() -> None:
        try:
            barrier.wait(10)
            results.append(webhooks_dispatch())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert not errors, errors
    created = [pk for ids in results for pk in ids]
    assert len(created) == len(set(created)) == WebhookDelivery.objects.count() == 5
    got = sorted(WebhookDelivery.objects.values_list("subscription__name", "event_type"))
    assert got == [("everything", "device.deleted"), ("everything", "grant.issued"), ("everything", "node.created"),
                   ("everything", "node.updated"), ("nodes", "node.created")]
    assert sorted(pk for pk, _ in queue.enqueued) == sorted(created)
    assert endpoint.requests == []  # dispatching (like the sync) never calls out: the webhooks queue does
    assert webhooks_dispatch() == []
    assert set(DispatchCursor.objects.values_list("source", flat=True)) == {"changes", "audit"}
    grant = WebhookDelivery.objects.get(event_type="grant.issued")
    assert grant.payload["source"] == "audit"
    assert grant.payload["event"]["target_repr"] == "c1"
    assert nodes.deliveries.get().payload["event"]["object_id"] == "n1"
    assert everything.deliveries.count() == 4


def test_only_platform_admins_manage_webhooks(admin: User, member: User, finance: User) -> None:
    client = Client()
    assert client.get(API).status_code in (401, 403)
    for user in (member, finance):
        client.force_login(user)
        assert client.get(API).status_code == 403
        response = client.post(API, {"name": "x", "url": "https://example.com/h", "secret": SECRET,
                                     "event_types": ["node."]}, content_type="application/json")
        assert response.status_code == 403
    assert WebhookSubscription.objects.count() == 0
    client.force_login(admin)
    assert client.get(API).status_code == 200


def test_api_crud_audit_and_delivery_log(admin: User, endpoint: Endpoint, queue: Queue, attempt: Any,
                                         caplog: pytest.LogCaptureFixture,
                                         django_capture_on_commit_callbacks: Any) -> None:
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.force_login(admin)

    bad = client.post(API, {"name": "x", "url": "ftp://example.com", "secret": "short", "event_types": ["pods."]},
                      content_type="application/json")
    assert bad.status_code == 400
    assert set(bad.json()) == {"url", "secret", "event_types"}

    created = client.post(API, {"name": "cmdb", "url": endpoint.url, "secret": SECRET,
                                "event_types": ["node.created", "device.", "grant."]},
                          content_type="application/json")
    assert created.status_code == 201, created.content
    hook = created.json()
    assert "secret" not in hook
    assert hook["created_by"] == admin.username
    updated = client.patch(f"{API}{hook['id']}/", {"event_types": ["node."], "secret": SECRET + "-rotated"},
                           content_type="application/json")
    assert updated.status_code == 200
    assert updated.json()["event_types"] == ["node."]

    with django_capture_on_commit_callbacks(execute=True):
        ping = client.post(f"{API}{hook['id']}/ping/")
    assert ping.status_code == 202
    assert queue.enqueued == [(ping.json()["id"], None)]
    attempt(ping.json()["id"])
    assert endpoint.requests[-1]["headers"]["X-Portal-Event"] == "ping"
    assert signature_valid(SECRET + "-rotated", endpoint.requests[-1]["body"],
                           endpoint.requests[-1]["headers"][SIGNATURE_HEADER])

    log = client.get(f"{API}{hook['id']}/deliveries/").json()
    assert log["count"] == 1
    (entry,) = log["results"]
    assert entry["event_type"] == "ping"
    assert entry["status"] == "delivered"
    assert entry["attempts"] == 1
    assert entry["last_response_code"] == 200
    assert client.get(f"{API}{hook['id']}/deliveries/", {"status": "failed"}).json()["count"] == 0

    responses = [created, updated, ping, client.get(API), client.get(f"{API}{hook['id']}/"),
                 client.get(f"{API}{hook['id']}/deliveries/")]
    assert client.delete(f"{API}{hook['id']}/").status_code == 204
    assert not WebhookSubscription.objects.exists()

    verbs = list(AuditEvent.objects.filter(verb__startswith="webhook.").order_by("id").values_list("verb", flat=True))
    assert verbs == ["webhook.created", "webhook.updated", "webhook.pinged", "webhook.deleted"]
    assert AuditEvent.objects.get(verb="webhook.pinged").data == {"delivery": ping.json()["id"]}
    audit_text = json.dumps(list(AuditEvent.objects.values("data", "before", "after")))
    assert AuditEvent.objects.get(verb="webhook.updated").data == {"secret_changed": True}
    for text in [r.content.decode() for r in responses] + [caplog.text, audit_text]:
        assert SECRET not in text
    # A token in the URL is shown to admins in the API, never written to the audit log or the logs.
    assert "in-the-url" not in audit_text
    assert "in-the-url" not in caplog.text
    assert "sha512=" not in caplog.text


def test_deliveries_run_on_their_own_queue_and_beat_dispatches() -> None:
    from portal.celery import app

    app.loader.import_default_modules()
    assert app.amqp.router.route({}, "integrations.webhook_deliver")["queue"].name == "webhooks"
    assert app.amqp.router.route({}, "integrations.webhooks_dispatch")["queue"].name == "default"
    tasks = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {"integrations.webhooks_dispatch", "inventory.change_events_prune"} <= tasks


def test_api_tokens_need_read_and_write_scopes(admin: User) -> None:
    import datetime as dt

    from django.utils import timezone

    from apitokens.services import api_token_create

    def bearer(*scopes: str) -> dict[str, str]:
        created = api_token_create(actor=None, user=admin, name="-".join(scopes), scopes=list(scopes),
                                   expires_at=timezone.now() + dt.timedelta(days=1))
        return {"HTTP_AUTHORIZATION": f"Bearer {created.plaintext}"}

    reader, writer = bearer("inventory:read"), bearer("inventory:read", "admin:write")
    requester = bearer("inventory:read", "requests:write")
    body = {"name": "t", "url": "https://example.com/h", "secret": SECRET, "event_types": ["node."]}
    client = Client()
    assert client.get(API, **reader).status_code == 200
    assert client.get("/api/v1/changes/", **reader).status_code == 200
    assert client.post(API, body, content_type="application/json", **reader).status_code == 403
    assert client.post(API, body, content_type="application/json", **requester).status_code == 403  # admin-only
    assert client.post(API, body, content_type="application/json", **writer).status_code == 201
