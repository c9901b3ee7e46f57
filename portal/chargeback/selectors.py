"""Chargeback reads for the pages: the names people read on a statement (the CSV keeps the slugs)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from catalog.models import Offering
from portal.tenancy.models import Tenant


def statement_names(user: User | AnonymousUser, rows: list[dict[str, Any]]) -> dict[str, Tenant]:
    """Give each aggregated row its tenant, its offering's name and its efficiency (used share of the measured cost,
    in percent); answers the tenants the user may see, by slug."""
    tenants = {t.slug: t for t in Tenant.objects.visible_to(user).order_by("name")}
    offerings = dict(Offering.objects.filter(slug__in={r.get("offering") for r in rows})
                     .values_list("slug", "name"))
    for row in rows:  # names for people; the CSV keeps the slugs
        row["tenant_obj"] = tenants.get(row.get("tenant") or "")
        row["offering_name"] = offerings.get(row.get("offering") or "", row.get("offering") or "")
        measured = row["used_cost"] + row["idle_cost"]
        row["efficiency"] = float(100 * row["used_cost"] / measured) if measured else None
    return tenants
