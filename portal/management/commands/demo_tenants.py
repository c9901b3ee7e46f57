"""Demo tenancy: one tenant per `portal.example.com/tenant` label value of the demo scenario, that label as the
mapping rule, and the demo member and lead in ml-research. Idempotent; demo settings only."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.models import NamespaceLabelRule, Tenant
from portal.tenancy.services import label_rule_set, membership_set, tenant_create, tenant_namespaces_sync

LABEL = "portal.example.com/tenant"
TENANTS = {
    "ml-research": ("ML Research", "CC-4100"),
    "ml-inference": ("ML Inference", "CC-4200"),
    "vision": ("Vision", "CC-4300"),
    "data-platform": ("Data Platform", "CC-5100"),
    "platform": ("GPU Platform", "CC-1000"),
}


class Command(BaseCommand):
    help = "Create the demo tenants and map the demo namespaces by label. Demo settings only."

    def handle(self, *args: Any, **options: Any) -> None:
        if not getattr(settings, "PORTAL_DEMO", False):
            raise CommandError("demo tenants exist only under portal.settings.demo")
        for slug, (name, cost_center) in TENANTS.items():
            if not Tenant.objects.filter(slug=slug).exists():
                tenant_create(actor=None, slug=slug, name=name, cost_center=cost_center)
        research = Tenant.objects.get(slug="ml-research")
        membership_set(actor=None, tenant_id=research.pk, username="member", role="member")
        membership_set(actor=None, tenant_id=research.pk, username="lead", role="lead")
        if not NamespaceLabelRule.objects.filter(cluster__isnull=True, label_key=LABEL).exists():
            label_rule_set(actor=None, label_key=LABEL)
        counts = tenant_namespaces_sync()
        self.stdout.write(f"demo tenants ready; namespaces mapped by {LABEL}: {counts}")
