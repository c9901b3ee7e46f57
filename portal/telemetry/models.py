"""Telemetry: where a cluster's DCGM metrics are read and how the last read went, the hourly rollups joined to who
held each unit, the findings, and the idle policy per offering (portal/telemetry/services.py)."""

from __future__ import annotations

from django.db import models

from inventory.models import Cluster
from portal.tenancy.models import Tenant


class TelemetrySource(models.Model):
    """Where a cluster's dcgm-exporter metrics are read (a Prometheus-compatible HTTP API) and how the last read
    went: a slow or down Prometheus is this visible state, never a stuck worker or a guessed number."""

    class State(models.TextChoices):
        UNCONFIGURED = "unconfigured", "No Prometheus configured"
        OK = "ok", "OK"
        PARTIAL = "partial", "Partial data"
        SLOW = "slow", "Prometheus too slow (timeout)"
        DOWN = "down", "Prometheus unreachable"
        ERROR = "error", "Prometheus answered with an error"

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="telemetry_source")
    prometheus_url = models.URLField(blank=True, help_text="Empty: PORTAL_PROMETHEUS_URL.")
    cluster_label = models.CharField(
        max_length=100, blank=True, default="cluster",
        help_text="Label whose value is the cluster's name in a shared Prometheus; empty: one Prometheus per cluster.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNCONFIGURED)
    message = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    rolled_up_to = models.DateTimeField(null=True, blank=True, help_text="Every hour before this is rolled up.")

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.state}"


class UtilizationRollup(models.Model):
    """One hour of one DCGM entity (card, or MIG instance) for one holder: what it did, joined to who held it.

    Keyed like the exporter's series (UUID, GPU_I_ID, namespace/pod): a pod that moved between devices within the
    hour has one row per device, each with the samples it had there."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    device = models.ForeignKey("inventory.Device", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    device_key = models.CharField(max_length=800, blank=True, help_text="The inventory unit row's key (frozen).")
    unit_kind = models.CharField(max_length=20, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    gpu_uuid = models.CharField(max_length=128)
    gpu_index = models.CharField(max_length=8, blank=True)
    gpu_instance = models.CharField(max_length=8, blank=True, help_text="GPU_I_ID of a MIG instance.")
    gpu_profile = models.CharField(max_length=32, blank=True, help_text="GPU_I_PROFILE of a MIG instance.")
    model = models.CharField(max_length=200, blank=True)
    pod_namespace = models.CharField(max_length=253, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    interval = models.ForeignKey("inventory.AllocationInterval", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    holder_kind = models.CharField(max_length=10, blank=True)
    holder_uid = models.CharField(max_length=128, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    holder_name = models.CharField(max_length=253, blank=True)
    resource = models.CharField(max_length=300, blank=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    samples = models.IntegerField(default=0)
    coverage = models.FloatField(default=0, help_text="Samples / samples expected at the scrape interval (0..1).")
    util_mean = models.FloatField(null=True, blank=True, help_text="Mean graphics-engine activity (0..1).")
    util_p95 = models.FloatField(null=True, blank=True)
    mem_used_mib = models.FloatField(null=True, blank=True, help_text="Largest framebuffer use in the hour.")
    energy_j = models.FloatField(null=True, blank=True)
    temp_max = models.FloatField(null=True, blank=True)
    xid_codes = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-hour", "node_name", "gpu_uuid", "gpu_instance"]
        constraints = [models.UniqueConstraint(
            fields=["cluster", "hour", "gpu_uuid", "gpu_instance", "pod_namespace", "pod_name"],
            name="portal_rollup_unique_series")]
        indexes = [
            models.Index(fields=["cluster", "hour"], name="portal_rollup_hour"),
            models.Index(fields=["holder_kind", "holder_uid", "hour"], name="portal_rollup_holder"),
            models.Index(fields=["device", "hour"], name="portal_rollup_device"),
            models.Index(fields=["offering", "hour"], name="portal_rollup_offering"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.gpu_uuid}/{self.gpu_instance or '-'} {self.holder_name}"


class TelemetryFinding(models.Model):
    """A telemetry problem, present while the condition holds (deleted when it clears)."""

    class Kind(models.TextChoices):
        IDLE = "allocated-idle", "Allocated but idle"
        XID = "xid", "XID error"
        MISSING = "telemetry-missing", "Telemetry missing for a device that should have it"
        PLUGIN_DCGM = "plugin-healthy-dcgm-failing", "Device plugin says healthy, DCGM says failing"
        THERMAL = "thermal", "Running at its thermal limit"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=40, choices=Kind.choices)
    severity = models.CharField(max_length=10, default="warning")
    subject = models.CharField(max_length=600)
    node_name = models.CharField(max_length=253, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    message = models.TextField()
    action = models.TextField(blank=True)
    evidence = models.JSONField(default=dict)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "kind", "subject"]
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "subject"],
                                               name="portal_telemetryfinding_unique")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}"


class IdlePolicy(models.Model):
    """When an allocated unit of an offering counts as idle (defaults: PORTAL_IDLE_THRESHOLD, PORTAL_IDLE_HOURS)."""

    offering = models.OneToOneField("catalog.Offering", on_delete=models.CASCADE, related_name="idle_policy")
    threshold = models.FloatField(help_text="Mean graphics-engine activity below which an hour is idle (0..1).")
    hours = models.PositiveIntegerField(default=1, help_text="Consecutive idle hours before the finding.")

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(threshold__gte=0) & models.Q(threshold__lte=1),
                                              name="portal_idlepolicy_threshold_fraction")]

    def __str__(self) -> str:
        return f"{self.offering_id}: < {self.threshold:.0%} for {self.hours} h"
