"""Chargeback pages: a tenant's monthly statement (their own tenants only) and finance's all-tenant view, both
with the cost per day as a chart (server-rendered SVG, no script) and CSV downloads through the API."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.mixins import LoginRequiredMixin
from django.urls import reverse
from django.utils import timezone
from django.views.generic import TemplateView

from portal.chargeback import rollups
from portal.chargeback import services as cb
from portal.chargeback.selectors import statement_names
from portal.formatting import money_text
from portal.tenancy.models import sees_all_tenants

CHART_WIDTH, CHART_HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 712, 12, 172  # plot area inside the SVG: room for the value axis and the dates


def _month(text: str) -> dt.datetime:
    try:
        year, month = (int(p) for p in (text or "").split("-", 1))
        return dt.datetime(year, month, 1, tzinfo=dt.UTC)
    except ValueError:
        now = timezone.now()
        return dt.datetime(now.year, now.month, 1, tzinfo=dt.UTC)


def chart(days: list[tuple[dt.datetime, Decimal]], currency: str = "") -> dict[str, Any]:
    """Bars of the cost per day on axes: the value axis in the currency (0, half, the highest day), a date under the
    first day and every fifth."""
    top = max((cost for _, cost in days), default=Decimal(0))
    width = (RIGHT - LEFT) / max(len(days), 1)
    plot = BOTTOM - TOP
    bars = []
    for index, (day, cost) in enumerate(days):
        height = float(cost / top) * plot if top else 0.0
        bars.append({"x": round(LEFT + index * width + 1, 1), "y": round(BOTTOM - height, 1),
                     "width": round(max(width - 2, 1), 1), "height": round(height, 1),
                     "label": f"{day:%Y-%m-%d}: {money_text(cost, currency)}"})
    y_ticks = [(round(BOTTOM - plot * share, 1), money_text(top * Decimal(share), ""))
               for share in (0, 0.5, 1)] if top else [(BOTTOM, "0")]
    x_ticks = [(round(LEFT + (index + 0.5) * width, 1), f"{day:%b} {day.day}")
               for index, (day, _) in enumerate(days) if index % 5 == 0]
    return {"bars": bars, "width": CHART_WIDTH, "height": CHART_HEIGHT, "top": top, "currency": currency,
            "left": LEFT, "right": RIGHT, "bottom": BOTTOM, "label_x": LEFT - 6, "label_y": BOTTOM + 16,
            "y_ticks": y_ticks, "x_ticks": x_ticks}


class ChargebackView(LoginRequiredMixin, TemplateView):
    template_name = "portal/chargeback.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        start = _month(self.request.GET.get("month", ""))
        end = _next_month(start)
        finance = sees_all_tenants(user)
        tenant = (self.request.GET.get("tenant") or "").replace("\x00", "") or None
        dimensions = ("tenant",) if finance and not tenant else ("tenant", "namespace", "offering")
        # From the hourly rollups (portal/chargeback/rollups.py): the same figures as pricing every interval.
        state = rollups.for_reading()
        scope = cb.Scope.for_user(user)
        statement = rollups.statement(start, end, dimensions=dimensions, scope=scope, tenant=tenant, state=state)
        per_day: dict[dt.datetime, Decimal] = defaultdict(Decimal)
        for row in statement.per_day:
            per_day[row["period_start"]] += row["cost"]
        days = [(day, per_day.get(day, Decimal(0))) for day, _ in cb.buckets(start, end, "day")]
        monthly, totals = statement.rows, statement.totals
        currencies = sorted({row["currency"] for row in totals if row["currency"]})
        tenants = statement_names(user, monthly)
        query = {"window": f"{start:%Y-%m-%d},{end:%Y-%m-%d}", "aggregate": ",".join(dimensions), "step": "month",
                 **({"tenant": tenant} if tenant else {})}
        api = reverse("portal-api:chargeback")
        context.update({
            "finance": finance, "month": f"{start:%Y-%m}", "start": start, "end": end, "rows": monthly,
            "dimensions": dimensions, "totals": totals, "tenant": tenant, "as_of": state.as_of,
            # one currency per chart: days mixing currencies cannot be summed (the totals say each one)
            "chart": chart(days, currencies[0] if len(currencies) == 1 else ""), "currencies": currencies,
            "tenants": tenants.values(), "tenant_obj": tenants.get(tenant or ""),
            "csv_url": f"{api}?{urlencode({**query, 'format': 'csv'})}",
            "detail_url": f"{api}?{urlencode({**query, 'format': 'csv', 'detail': 'intervals'})}",
            "focus_url": f"{reverse('portal-api:chargeback-focus')}?{urlencode({k: v for k, v in query.items() if k in ('window', 'tenant')})}",
            "previous": f"{_previous_month(start):%Y-%m}", "next": f"{end:%Y-%m}",
        })
        return context


def _next_month(moment: dt.datetime) -> dt.datetime:
    return (moment.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def _previous_month(moment: dt.datetime) -> dt.datetime:
    return (moment - dt.timedelta(days=1)).replace(day=1)
