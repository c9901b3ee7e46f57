"""Notifications: an in-app inbox row per recipient, written in the caller's transaction, and an e-mail through
Django's mail backend after commit (a mail failure is logged, never undoes the change)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from portal.notifications.models import Notification

logger = logging.getLogger(__name__)


def notify(*, users: Iterable[User | None], subject: str, body: str = "", url: str = "") -> int:
    recipients = {u.pk: u for u in users if u is not None and getattr(u, "is_active", True)}
    Notification.objects.bulk_create([Notification(user_id=pk, subject=subject[:200], body=body[:4000],
                                                   url=url[:300]) for pk in recipients])
    emails = sorted({u.email for u in recipients.values() if u.email})

    def mail() -> None:
        if not emails:
            return
        try:
            send_mail(subject[:200], f"{body}\n\n{url}".strip(), None, emails)
        except Exception:  # the change is committed; the inbox has it
            logger.warning("notification e-mail failed for %d recipients", len(emails), exc_info=True)

    transaction.on_commit(mail)
    return len(recipients)


def notifications_read(user: User, url: str) -> int:
    """The user acted on what these notifications point at: they are no longer news."""
    return Notification.objects.filter(user=user, url=url, read_at__isnull=True).update(read_at=timezone.now())
