"""Webhook writes: subscriptions (audited), the dispatcher that turns events into deliveries exactly once, and
delivery attempts with retries and backoff.

Nothing here runs in the sync's transactions: the dispatcher reads committed change-feed and audit rows afterwards,
and HTTP happens in the `webhooks` queue between two short transactions. A failing endpoint only ever delays its
own deliveries.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import audit_record
from core.types import RequestUser
from integrations.addresses import url_check
from integrations.delivery import Outcome, backoff_seconds, body_and_headers, post, url_for_log
from integrations.errors import WebhookValidationError
from integrations.event_types import event_types_validate, matches
from integrations.models import DispatchCursor, WebhookDelivery, WebhookSubscription
from integrations.tasks import webhook_deliver_task
from inventory.changefeed import change_event_json, change_events_page, cursor_decode, cursor_encode, feed_head
from inventory.errors import ChangeFeedGoneError

logger = logging.getLogger(__name__)

Source = WebhookDelivery.Source
Status = WebhookDelivery.Status
SECRET_MIN, SECRET_MAX = 16, 200
DISPATCH_BATCH = 500
DISPATCH_BATCHES_PER_RUN = 20
REQUEUE_AFTER = timedelta(seconds=60)


# ---------------------------------------------------------------------------------------------- subscriptions


def _state(subscription: WebhookSubscription) -> dict[str, Any]:
    """What the audit log records: never the secret, and the URL without credentials or query."""
    return {"name": subscription.name, "url": url_for_log(subscription.url),
            "event_types": list(subscription.event_types), "active": subscription.active}


def _check(*, url: str | None = None, secret: str | None = None) -> None:
    if url is not None and not url.lower().startswith(("http://", "https://")):
        raise WebhookValidationError("the URL must be http:// or https://")

    if secret is not None and not SECRET_MIN <= len(secret) <= SECRET_MAX:
        raise WebhookValidationError(f"the secret must be {SECRET_MIN} to {SECRET_MAX} characters")


def webhook_subscription_create(
    *, actor: RequestUser | None, name: str, url: str, secret: str, event_types: list[str], active: bool = True,
) -> WebhookSubscription:
    """Create a subscription; it receives events dispatched from now on. Audited (without the secret). The URL's
    host must not be, or resolve to, a loopback, private, link-local or metadata address (unless allow-listed);
    the name is resolved before the transaction opens."""
    _check(url=url, secret=secret)
    url_check(url)
    return _subscription_create(actor=actor, name=name, url=url, secret=secret, event_types=event_types,
                                active=active)


@transaction.atomic(durable=True)
def _subscription_create(
    *, actor: RequestUser | None, name: str, url: str, secret: str, event_types: list[str], active: bool,
) -> WebhookSubscription:
    subscription = WebhookSubscription.objects.create(
        name=name, url=url, secret=secret, event_types=event_types_validate(event_types), active=active,
        created_by=actor if isinstance(actor, User) and actor.is_authenticated else None,
    )
    audit_record(actor=actor, verb="webhook.created", target=subscription, after=_state(subscription))
    return subscription


def webhook_subscription_update(*, actor: RequestUser | None, subscription_id: int, **changes: Any) -> WebhookSubscription:
    """Change name, url, secret, event_types or active. Audited; the audit says whether the secret changed. A new
    URL is checked like a new subscription's (resolved before the transaction opens)."""
    allowed = {"name", "url", "secret", "event_types", "active"}
    if set(changes) - allowed:
        raise WebhookValidationError(f"cannot change {', '.join(sorted(set(changes) - allowed))}")
    if changes.get("url") is not None:
        _check(url=changes["url"])
        url_check(changes["url"])
    return _subscription_update(actor=actor, subscription_id=subscription_id, changes=changes)


@transaction.atomic(durable=True)
def _subscription_update(*, actor: RequestUser | None, subscription_id: int, changes: dict[str, Any]) -> WebhookSubscription:
    subscription = WebhookSubscription.objects.select_for_update().get(pk=subscription_id)
    before = _state(subscription)
    _check(url=changes.get("url"), secret=changes.get("secret"))
    if "event_types" in changes:
        changes["event_types"] = event_types_validate(changes["event_types"])
    secret_changed = "secret" in changes and changes["secret"] != subscription.secret
    for name, value in changes.items():
        setattr(subscription, name, value)
    subscription.save(update_fields=[*changes, "updated_at"])
    audit_record(actor=actor, verb="webhook.updated", target=subscription, before=before, after=_state(subscription),
                 data={"secret_changed": secret_changed})
    return subscription


@transaction.atomic(durable=True)
def webhook_subscription_delete(*, actor: RequestUser | None, subscription_id: int) -> None:
    """Delete a subscription and its delivery log. Audited."""
    subscription = WebhookSubscription.objects.select_for_update().get(pk=subscription_id)
    audit_record(actor=actor, verb="webhook.deleted", target=subscription, before=_state(subscription))
    subscription.delete()


@transaction.atomic(durable=True)
def webhook_ping(*, actor: RequestUser | None, subscription_id: int) -> WebhookDelivery:
    """Queue a `ping` delivery (same headers and signature as real events) to test an endpoint. Audited: a person
    makes the portal send a request to the subscription's URL."""
    subscription = WebhookSubscription.objects.get(pk=subscription_id)
    delivery = WebhookDelivery.objects.create(
        subscription=subscription, source=Source.PING, event_id=None, event_type="ping",
        payload={"type": "ping", "source": "portal",
                 "event": {"subscription": subscription.name,
                           "requested_by": actor.get_username() if actor is not None and actor.is_authenticated else ""}},
        next_attempt_at=timezone.now(),
    )
    audit_record(actor=actor, verb="webhook.pinged", target=subscription, data={"delivery": delivery.pk})
    transaction.on_commit(lambda: webhook_deliver_task.delay(delivery.pk))
    return delivery


# ------------------------------------------------------------------------------------------------ dispatcher


def _audit_json(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id, "occurred_at": event.occurred_at.isoformat().replace("+00:00", "Z"), "verb": event.verb,
        "actor": event.actor_name, "actor_kind": event.effective_actor_kind, "target_type": event.target_type,
        "target_id": event.target_id, "target_repr": event.target_repr, "data": event.data, "before": event.before,
        "after": event.after, "reason": event.reason,
    }


def _locked_cursor(source: str) -> DispatchCursor:
    """The source's cursor under a row lock (created at the source's head: subscriptions get events from now on)."""
    if not DispatchCursor.objects.filter(source=source).exists():
        if source == Source.CHANGES:
            initial = cursor_encode(feed_head())
        else:
            initial = str(AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0)
        DispatchCursor.objects.get_or_create(source=source, defaults={"position": initial})
    return DispatchCursor.objects.select_for_update().get(source=source)


def _deliveries(subscriptions: list[WebhookSubscription], source: str, events: list[tuple[int, str, dict[str, Any]]],
                now: Any) -> list[WebhookDelivery]:
    return [
        WebhookDelivery(subscription=subscription, source=source, event_id=event_id, event_type=event_type,
                        payload=payload, next_attempt_at=now)
        for event_id, event_type, payload in events
        for subscription in subscriptions
        if matches(subscription.event_types, event_type)
    ]


def _dispatch_changes(subscriptions: list[WebhookSubscription], now: Any) -> list[WebhookDelivery]:
    cursor = _locked_cursor(Source.CHANGES)
    created: list[WebhookDelivery] = []
    for _batch in range(DISPATCH_BATCHES_PER_RUN):
        try:
            page = change_events_page(since=cursor_decode(cursor.position), limit=DISPATCH_BATCH)
        except ChangeFeedGoneError:
            logger.error("webhooks: the change feed was pruned past the dispatcher's cursor; continuing from now "
                         "(events in between are not delivered)")
            cursor.position = cursor_encode(feed_head())
            break
        events = [(e.id, e.event_type, {"type": e.event_type, "source": "inventory", "event": change_event_json(e)})
                  for e in page.events]
        created += WebhookDelivery.objects.bulk_create(_deliveries(subscriptions, Source.CHANGES, events, now),
                                                       batch_size=1000)
        if page.next is not None:
            cursor.position = cursor_encode(page.next)
        if not page.has_more:
            break
    cursor.save(update_fields=["position", "updated_at"])
    return created


def _dispatch_audit(subscriptions: list[WebhookSubscription], now: Any) -> list[WebhookDelivery]:
    # Gap-free by id: audit_record draws ids under the chain's advisory lock, held until commit, so ids become
    # visible in order.
    cursor = _locked_cursor(Source.AUDIT)
    created: list[WebhookDelivery] = []
    last = int(cursor.position or 0)
    for _batch in range(DISPATCH_BATCHES_PER_RUN):
        rows = list(AuditEvent.objects.filter(id__gt=last).order_by("id")[:DISPATCH_BATCH])
        if not rows:
            break
        events = [(e.id, e.verb, {"type": e.verb, "source": "audit", "event": _audit_json(e)}) for e in rows]
        created += WebhookDelivery.objects.bulk_create(_deliveries(subscriptions, Source.AUDIT, events, now),
                                                       batch_size=1000)
        last = rows[-1].id
        if len(rows) < DISPATCH_BATCH:
            break
    cursor.position = str(last)
    cursor.save(update_fields=["position", "updated_at"])
    return created


@transaction.atomic(durable=True)
def webhooks_dispatch() -> list[int]:
    """Create the deliveries for every change-feed and audit event after the persisted cursors, and move the cursors,
    in one transaction under the cursors' row locks: concurrent runs serialize, and each (subscription, event)
    delivery is created exactly once. Deliveries are enqueued on the `webhooks` queue after the commit."""
    now = timezone.now()
    subscriptions = list(WebhookSubscription.objects.filter(active=True).only("pk", "event_types"))
    created = _dispatch_changes(subscriptions, now) + _dispatch_audit(subscriptions, now)
    ids = [d.pk for d in created]
    if ids:
        transaction.on_commit(lambda: [webhook_deliver_task.delay(pk) for pk in ids])
    return ids


# -------------------------------------------------------------------------------------------------- delivering


def _claim(delivery_id: int) -> bool:
    """Atomically mark a due, pending, unclaimed delivery as in flight (UPDATE … WHERE, checked by row count)."""
    now = timezone.now()
    hold = timedelta(seconds=settings.PORTAL_WEBHOOK_CONNECT_TIMEOUT + settings.PORTAL_WEBHOOK_READ_TIMEOUT + 30)
    return bool(
        WebhookDelivery.objects.filter(pk=delivery_id, status=Status.PENDING,
                                       next_attempt_at__lte=now + timedelta(seconds=1))
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + hold)
    )


@transaction.atomic(durable=True)
def _record(delivery_id: int, outcome: Outcome) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.select_for_update().get(pk=delivery_id)
    now = timezone.now()
    delivery.attempts += 1
    delivery.last_response_code = outcome.code
    delivery.last_error = outcome.error[:500]
    delivery.claimed_until = None
    if outcome.delivered:
        delivery.status, delivery.delivered_at, delivery.next_attempt_at = Status.DELIVERED, now, None
    elif outcome.retry and delivery.attempts < settings.PORTAL_WEBHOOK_MAX_ATTEMPTS:
        delay = backoff_seconds(delivery.attempts, retry_after=outcome.retry_after)
        delivery.next_attempt_at = now + timedelta(seconds=delay)
        transaction.on_commit(lambda: webhook_deliver_task.apply_async((delivery_id,), countdown=delay))
    else:
        delivery.status, delivery.next_attempt_at = Status.FAILED, None
    delivery.save(update_fields=["attempts", "last_response_code", "last_error", "claimed_until", "status",
                                 "delivered_at", "next_attempt_at", "updated_at"])
    return delivery


def webhook_delivery_attempt(*, delivery_id: int) -> WebhookDelivery | None:
    """One attempt of a due delivery; None if it is not due, already in flight elsewhere, or finished.

    Claim (short transaction) → POST (no transaction) → record the outcome and schedule the retry (short
    transaction). Delivery is at least once: a worker that dies after the POST leaves the claim to expire and the
    delivery is attempted again; receivers deduplicate by `X-Portal-Delivery`."""
    if not _claim(delivery_id):
        return None
    delivery = WebhookDelivery.objects.select_related("subscription").get(pk=delivery_id)
    subscription = delivery.subscription
    if not subscription.active:
        outcome = Outcome(delivered=False, retry=False, error="the subscription is inactive")
    else:
        body, headers = body_and_headers(delivery_id=delivery.pk, event_type=delivery.event_type,
                                         payload=delivery.payload, secret=subscription.secret)
        outcome = post(url=subscription.url, body=body, headers=headers)
    recorded = _record(delivery_id, outcome)
    logger.info("webhook delivery %s (%s) to subscription %s: %s after %d attempt(s)%s", recorded.pk,
                recorded.event_type, subscription.pk, recorded.status, recorded.attempts,
                f" ({outcome.error[:200]})" if outcome.error else "")
    return recorded


def webhook_deliveries_requeue() -> int:
    """Re-enqueue pending deliveries whose task was lost (broker restart): overdue by a minute and not in flight."""
    now = timezone.now()
    overdue = (WebhookDelivery.objects.filter(status=Status.PENDING, next_attempt_at__lt=now - REQUEUE_AFTER)
               .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)))
    ids = list(overdue.order_by("next_attempt_at").values_list("pk", flat=True)[:1000])
    if ids:
        overdue.filter(pk__in=ids).update(next_attempt_at=now)  # the next sweep waits another minute
        for pk in ids:
            webhook_deliver_task.delay(pk)
    return len(ids)


def webhook_deliveries_prune(*, older_than_days: int | None = None) -> int:
    """Delete finished deliveries older than PORTAL_WEBHOOK_DELIVERY_RETENTION_DAYS."""
    days = settings.PORTAL_WEBHOOK_DELIVERY_RETENTION_DAYS if older_than_days is None else older_than_days
    deleted, _ = (WebhookDelivery.objects.exclude(status=Status.PENDING)
                  .filter(created_at__lt=timezone.now() - timedelta(days=days)).delete())
    return deleted
