"""The CMDB change feed: one row per creation, update or deletion of a cluster, node or device.

Rows are written in the same transaction as the change they describe (inventory.services.changes). Their position
in the feed is (txid, id): `txid` is the PostgreSQL transaction id of the writer (`pg_current_xact_id()`, a database
default), `id` a bigserial. Readers only return rows of transactions older than every transaction still running
(`pg_snapshot_xmin`), so a row that commits late with a smaller position is never skipped (docs/changes-webhooks.md).
SQLite (the embedded demo) has a single writer: `txid` is 0 there and the order is the id.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from inventory.fields import BulkTextField


class CurrentTransactionId(models.Func):
    """The writing transaction's id as a bigint on PostgreSQL (xid8 → text → bigint); 0 on other databases."""

    output_field = models.BigIntegerField()

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, list[Any]]:
        return "0", []

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, list[Any]]:
        return "(pg_current_xact_id()::text::bigint)", []


class ChangeEvent(models.Model):
    """A change of one CMDB object, with a compact snapshot of its fields after the change (none for deletions)."""

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        UPDATED = "updated", "Updated"
        DELETED = "deleted", "Deleted"

    class ObjectType(models.TextChoices):
        CLUSTER = "cluster", "Cluster"
        NODE = "node", "Node"
        DEVICE = "device", "Device"

    id = models.BigAutoField(primary_key=True)
    txid = models.BigIntegerField(db_default=CurrentTransactionId(), editable=False,
                                  help_text="Transaction id of the writer (0 on SQLite).")
    occurred_at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=8, choices=Action.choices)
    object_type = models.CharField(max_length=8, choices=ObjectType.choices)
    object_id = models.CharField(max_length=800, help_text="Cluster name, node name or device key.")
    # No foreign key: events outlive the cluster (its deletion is an event too).
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=63)
    snapshot = BulkTextField(blank=True, help_text="JSON of the object's CMDB fields after the change; '' if deleted.")

    class Meta:
        ordering = ["txid", "id"]
        indexes = [models.Index(fields=["txid", "id"], name="inv_change_position")]

    def __str__(self) -> str:
        return f"{self.object_type}.{self.action} {self.cluster_name}/{self.object_id}"

    @property
    def event_type(self) -> str:
        return f"{self.object_type}.{self.action}"


class ChangeFeedPrune(models.Model):
    """One retention run. `horizon_*` is the newest position whose removal a reader could notice (the last event of
    a deleted object); cursors before the newest horizon get 410 Gone."""

    ran_at = models.DateTimeField(default=timezone.now)
    cutoff = models.DateTimeField()
    deleted = models.IntegerField(default=0)
    horizon_txid = models.BigIntegerField(null=True, blank=True)
    horizon_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-ran_at"]

    def __str__(self) -> str:
        return f"prune at {self.ran_at:%Y-%m-%d %H:%M}: {self.deleted} events before {self.cutoff:%Y-%m-%d}"
