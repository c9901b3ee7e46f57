"""Chargeback: which offering an allocated resource is charged as, frozen once resolved (portal/chargeback/services.py)."""

from __future__ import annotations

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
