"""Chargeback: which offering an allocated resource is charged as, frozen once resolved (portal/chargeback/services.py)."""

from __future__ import annotations

from typing import Any

from django.db import models

from inventory.models import Cluster


class ChargeMapping(models.Model):
    """Which offering an allocated resource is charged as, resolved once and then frozen, so a later catalog or
    inventory change never rewrites past charges. `resource` is the interval's resource: an extended resource
    (with the node it ran on, whose labels pick the offering) or a DRA device `<driver>/<pool>/<device>`."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=300)
    node_name = models.CharField(max_length=253, blank=True)
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+", help_text="Empty: no offering matched (reported unpriced).")
    resolved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "resource", "node_name"],
                                               name="portal_chargemapping_unique")]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.resource}@{self.node_name or '-'} → {self.offering_id}"


def _amount(help_text: str = "") -> Any:
    return models.DecimalField(max_digits=24, decimal_places=6, default=0, help_text=help_text)


class _ChargeSums(models.Model):
    """One cell (cluster, namespace, offering, currency) of a period: the sums of the engine's hourly atoms."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=253)
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+", help_text="Empty: unpriced (no offering matched).")
    currency = models.CharField(max_length=3, blank=True)
    pieces = models.IntegerField(default=0, help_text="Atoms summed (intervals holding in the period).")
    unit_hours = _amount()
    cost = _amount()
    admin_unit_hours = _amount()
    unpriced_unit_hours = _amount()
    measured_unit_hours = _amount()
    used_cost = _amount()
    idle_cost = _amount()

    class Meta:
        abstract = True


class ChargeRollup(_ChargeSums):
    """One UTC hour of one namespace's charges for one offering and currency (portal/chargeback/rollups.py). Derived
    from the priced allocation intervals, which stay the source of truth; kept current by the refresh (beat, and
    before every read) and rebuilt from them whenever they change."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hour", "cluster", "namespace", "offering", "currency"],
                                               name="portal_chargerollup_unique", nulls_distinct=False)]
        indexes = [models.Index(fields=["cluster", "namespace", "hour"], name="portal_chargerollup_ns")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%dT%H} {self.cluster_id}/{self.namespace} {self.offering_id}: {self.cost} {self.currency}"


class ChargeRollupDay(_ChargeSums):
    """The hourly rollups summed per UTC day (a month's page reads 31 rows per cell instead of 744)."""

    day = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "cluster", "namespace", "offering", "currency"],
                                               name="portal_chargerollupday_unique", nulls_distinct=False)]
        indexes = [models.Index(fields=["cluster", "namespace", "day"], name="portal_chargerollupday_ns")]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} {self.cluster_id}/{self.namespace} {self.offering_id}: {self.cost} {self.currency}"


class ChargeRollupDirty(models.Model):
    """A range whose rollups must be rebuilt, written by database triggers on the intervals, prices, telemetry and
    charge mappings (every writer, whatever its path). Empty cluster / namespace: every one. Empty start: from the
    beginning; empty end: open (up to what is materialized). No foreign key: a cluster being deleted writes some."""

    cluster_id = models.IntegerField(null=True, blank=True)
    namespace = models.CharField(max_length=253, null=True, blank=True)  # noqa: DJ001 - NULL: every namespace
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.cluster_id or '*'}/{self.namespace or '*'} [{self.start}, {self.end})"


class ChargeRollupState(models.Model):
    """The single row saying up to which hour the rollups are materialized (every hour before it, exclusive)."""

    materialized_until = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True, help_text="The current hour is rolled up as of this.")

    def __str__(self) -> str:
        return f"rolled up until {self.materialized_until}, as of {self.refreshed_at}"
