"""Celery tasks: the dispatcher (beat, every few seconds, `default` queue) and one delivery attempt per task on the
`webhooks` queue (CELERY_TASK_ROUTES), so slow or failing endpoints never occupy the sync's workers."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="integrations.webhooks_dispatch", ignore_result=True)  # type: ignore[untyped-decorator]
def webhooks_dispatch_task() -> int:
    """Create deliveries for new change-feed and audit events; re-enqueue deliveries whose task was lost."""
    from integrations.services import webhook_deliveries_requeue, webhooks_dispatch

    created = webhooks_dispatch()
    webhook_deliveries_requeue()
    return len(created)


@shared_task(name="integrations.webhook_deliver", ignore_result=True, acks_late=True)  # type: ignore[untyped-decorator]
def webhook_deliver_task(delivery_id: int) -> str:
    """One attempt; the service schedules the next one (backoff) itself, so no Celery autoretry here."""
    from integrations.services import webhook_delivery_attempt

    delivery = webhook_delivery_attempt(delivery_id=delivery_id)
    return "not due" if delivery is None else delivery.status


@shared_task(name="integrations.webhook_deliveries_prune", ignore_result=True)  # type: ignore[untyped-decorator]
def webhook_deliveries_prune_task() -> int:
    from integrations.services import webhook_deliveries_prune

    return webhook_deliveries_prune()
