"""The Celery application. Watchers run on the `watch` queue (thread pool, I/O-bound); the rest on `default`."""

import os

from celery import Celery

from portal.broker import transport_register

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.base")
transport_register()  # Redis outages and FLUSHes must not end a worker (portal/broker.py)

app = Celery("portal", amqp="portal.broker:AMQP")  # quick reconnects (portal/broker.py)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()  # <app>.tasks of every installed app
# The portal's domains keep their tasks in their own packages (portal/<domain>/tasks.py); registered task names are
# explicit (name="portal.…"), so beat schedules and queued messages do not depend on the module path.
app.autodiscover_tasks([f"portal.{domain}" for domain in ("tenancy", "quota", "access", "enforcement", "telemetry", "chargeback")])
app.conf.imports = (*app.conf.imports, "portal.heartbeat")  # the worker's own heartbeat (liveness probe)
