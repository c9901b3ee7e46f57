"""The device-class catalog: offerings (sellable units), their prices over time, and their live capacity.

An offering is one unit of one kind — a whole card, a MIG slice, a time-slice replica, an MPS share, a DRA device
of a DeviceClass or a DRA partition — and two offerings are never summed as if they were the same thing. Which
devices belong to an offering is decided by `catalog.services.matching` from the inventory's `Device` rows: the
unit kind must match the device's mode, and then the extended resource plus node labels (device plugin) or the
DeviceClass selectors plus the offering's own CEL selector (DRA).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Self

from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from catalog.sharing import refuses_more_than_one
from inventory.models import Cluster, Mode


class UnitKind(models.TextChoices):
    """What one unit of an offering is; the values are the inventory's device modes."""

    WHOLE = Mode.WHOLE.value, "Whole card"
    MIG = Mode.MIG.value, "MIG slice"
    TIME_SLICING = Mode.TIME_SLICING.value, "Time-slice replica"
    MPS = Mode.MPS.value, "MPS share"
    DRA_DEVICE = Mode.DRA_DEVICE.value, "DRA device"
    DRA_PARTITION = Mode.DRA_PARTITION.value, "DRA partition"


DRA_KINDS = frozenset({UnitKind.DRA_DEVICE, UnitKind.DRA_PARTITION})


class Isolation(models.TextChoices):
    EXCLUSIVE = "exclusive", "Exclusive card"
    HARDWARE = "hardware", "Hardware partition (own memory and fault domain)"
    LIMITED = "limited", "Limited (shared execution, MPS)"
    NONE = "none", "None (time-shared; memory and faults shared)"
    UNKNOWN = "unknown", "Unknown (driver config the portal does not understand)"


DEFAULT_ISOLATION = {
    UnitKind.WHOLE: Isolation.EXCLUSIVE, UnitKind.DRA_DEVICE: Isolation.EXCLUSIVE,
    UnitKind.MIG: Isolation.HARDWARE, UnitKind.DRA_PARTITION: Isolation.HARDWARE,
    UnitKind.MPS: Isolation.LIMITED, UnitKind.TIME_SLICING: Isolation.NONE,
}


class Lifecycle(models.TextChoices):
    PROPOSED = "proposed", "Proposed by discovery"
    ACTIVE = "active", "Active"
    DEPRECATED = "deprecated", "Deprecated"
    RETIRED = "retired", "Retired"
    DISMISSED = "dismissed", "Dismissed proposal"


class OfferingQuerySet(models.QuerySet["Offering"]):
    def browsable(self) -> Self:
        """What tenants see: curated entries that are not dismissed proposals or retired."""
        return self.filter(lifecycle__in=[Lifecycle.ACTIVE, Lifecycle.DEPRECATED])

    def proposals(self) -> Self:
        return self.filter(lifecycle=Lifecycle.PROPOSED)


class Offering(models.Model):
    """One sellable accelerator unit with what it guarantees, how it is requested, compatibility and lifecycle."""

    slug = models.SlugField(max_length=80)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    unit_kind = models.CharField(max_length=20, choices=UnitKind.choices)
    # What one unit guarantees.
    model = models.CharField(max_length=200, blank=True, help_text="GPU product, e.g. NVIDIA-H100-80GB-HBM3.")
    memory_mib = models.BigIntegerField(null=True, blank=True, help_text="Memory one unit guarantees (MiB).")
    compute_share = models.CharField(max_length=80, blank=True, help_text="e.g. '1 card', '1/7 of the SMs'.")
    isolation = models.CharField(max_length=12, choices=Isolation.choices)
    fault_domain = models.CharField(max_length=200, blank=True)
    units_per_card = models.PositiveIntegerField(default=1, help_text="Replicas, shares or slices per card.")
    fail_requests_greater_than_one = models.BooleanField(
        default=False, help_text="Time-slicing: the pool's device plugin config sets failRequestsGreaterThanOne, so "
        "a container asking for more than one replica is rejected at admission (MPS pools always reject it; "
        "catalog/sharing.py).",
    )
    request_sizes = models.JSONField(
        default=list, blank=True, help_text="Common request sizes in units, e.g. [1, 2, 4, 8]; the largest one is "
        "the reference for stranded units and fragmentation (docs/catalog.md).",
    )
    # How it is requested.
    resource_name = models.CharField(max_length=253, blank=True, help_text="Extended resource, e.g. nvidia.com/gpu.")
    device_class_name = models.CharField(max_length=253, blank=True, help_text="DRA DeviceClass name.")
    node_selector = models.JSONField(default=dict, blank=True, help_text="Node labels the pool needs.")
    tolerations = models.JSONField(default=list, blank=True, help_text="Tolerations for the pool's taints.")
    # How matching devices are selected beyond the DeviceClass (DRA): the offering's own CEL selector.
    cel_selector = models.TextField(blank=True)
    # Compatibility matrix (empty = no constraint).
    driver_min = models.CharField(max_length=32, blank=True)
    driver_max = models.CharField(max_length=32, blank=True)
    cuda_min = models.CharField(max_length=16, blank=True, help_text="Lowest CUDA version the driver supports.")
    cuda_max = models.CharField(max_length=16, blank=True)
    compute_capability = models.CharField(max_length=8, blank=True, help_text="e.g. 9.0")
    architecture = models.CharField(max_length=32, blank=True, help_text="e.g. hopper, ampere")
    cpu_architectures = models.JSONField(default=list, blank=True, help_text="Node arch, e.g. ['amd64'].")
    kubernetes_min = models.CharField(max_length=16, blank=True)
    kubernetes_max = models.CharField(max_length=16, blank=True)
    runtime_class = models.CharField(max_length=63, blank=True)
    # Operations.
    owner_team = models.CharField(max_length=100, blank=True)
    health_criteria = models.TextField(blank=True)
    upgrade_window = models.CharField(max_length=200, blank=True)
    lifecycle = models.CharField(max_length=12, choices=Lifecycle.choices, default=Lifecycle.ACTIVE)
    replacement = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    retire_on = models.DateField(null=True, blank=True)
    # Discovery: what proposed it; curated entries are never overwritten by discovery.
    discovery_key = models.CharField(max_length=400, blank=True)
    curated = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = OfferingQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["slug"], name="catalog_offering_unique_slug"),
            models.UniqueConstraint(
                fields=["discovery_key"], condition=~Q(discovery_key=""), name="catalog_offering_unique_discovery"
            ),
            models.CheckConstraint(
                condition=~Q(resource_name="", device_class_name=""), name="catalog_offering_requestable"
            ),
        ]
        permissions = [("curate_offering", "Curate the catalog (offerings, prices, lifecycle, discovery)")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("catalog:offering_detail", kwargs={"slug": self.slug})

    @property
    def is_dra(self) -> bool:
        return self.unit_kind in DRA_KINDS

    @property
    def one_unit_per_container(self) -> bool:
        """Whether the pool's device plugin refuses more than one unit per container (catalog/sharing.py)."""
        return refuses_more_than_one(self.unit_kind, self.fail_requests_greater_than_one)

    def price_at(self, moment: datetime | None = None) -> OfferingPrice | None:
        moment = moment or timezone.now()
        for price in self.prices.all():  # prefetched in lists
            if price.effective_from <= moment and (price.effective_to is None or moment < price.effective_to):
                return price
        return None


class OfferingPrice(models.Model):
    """A price per unit-hour over [effective_from, effective_to). Periods of one offering never overlap.

    Periods that have started are never changed, except that the open period gets its end when a later price is
    set: a price change therefore never rewrites past charges.
    """

    offering = models.ForeignKey(Offering, on_delete=models.CASCADE, related_name="prices")
    unit_price = models.DecimalField(max_digits=12, decimal_places=4, help_text="Per unit-hour.")
    currency = models.CharField(max_length=3, help_text="ISO 4217, e.g. EUR.")
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["offering", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["offering", "effective_from"], name="catalog_price_unique_start"),
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=models.F("effective_from")),
                name="catalog_price_positive_period",
            ),
            models.CheckConstraint(condition=Q(unit_price__gte=Decimal(0)), name="catalog_price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_price} {self.currency}/unit-hour from {self.effective_from:%Y-%m-%d %H:%M}"


class CapacityFigures(models.Model):
    """Capacity of one offering in one cluster (abstract: current figures and hourly history share the fields)."""

    offering = models.ForeignKey(Offering, on_delete=models.CASCADE, related_name="%(class)s_rows")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    matched_devices = models.IntegerField(default=0, help_text="Inventory rows (DRA devices, node resources).")
    feasible_nodes = models.IntegerField(default=0, help_text="Schedulable nodes with at least one allocatable unit.")
    total_units = models.IntegerField(default=0)
    allocatable = models.IntegerField(default=0)
    held = models.IntegerField(default=0)
    free = models.IntegerField(default=0)
    unknown = models.IntegerField(
        default=0, help_text="Allocatable units of incomplete DRA pools that no claim holds: neither free nor held."
    )
    blocked = models.IntegerField(
        default=0, help_text="Held units that no claim holds directly: DRA partitions (or whole cards) whose shared "
        "counters other allocations on the same card consumed. Part of held.",
    )
    cards = models.FloatField(default=0, help_text="Physical cards behind the units.")
    free_cards = models.IntegerField(default=0, help_text="DRA: physical cards with at least one free unit.")
    contested = models.IntegerField(
        default=0, help_text="Free units on cards whose free capacity another offering also offers (either/or)."
    )
    largest_placeable = models.IntegerField(default=0)
    stranded = models.IntegerField(default=0)
    fragmentation = models.FloatField(default=0)
    pending_pods = models.IntegerField(default=0)
    granted_quota = models.IntegerField(null=True, blank=True, help_text="Sum of ResourceQuota hard for its key.")
    quota_capacity = models.IntegerField(default=0, help_text="Allocatable units of every offering sharing that key.")
    selector_errors = models.IntegerField(default=0)
    free_by_node = models.JSONField(default=dict, blank=True)
    capacity_changing = models.BooleanField(
        default=False, help_text="Some of the offering's nodes are being repartitioned (nvidia.com/mig.config.state "
        "is not success): the figures are about to change.",
    )

    class Meta:
        abstract = True

    @property
    def oversubscription(self) -> float | None:
        if self.granted_quota is None or not self.quota_capacity:
            return None
        return self.granted_quota / self.quota_capacity


class OfferingCapacity(CapacityFigures):
    """Current capacity, recomputed after every sync batch that touches devices."""

    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["offering", "cluster"]
        constraints = [
            models.UniqueConstraint(fields=["offering", "cluster"], name="catalog_capacity_unique_offering_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.offering_id}@{self.cluster_id}: {self.free} free"


class CapacitySample(CapacityFigures):
    """Hourly history: the last figures of each hour (the row of the current hour is overwritten)."""

    hour = models.DateTimeField()

    class Meta:
        ordering = ["offering", "cluster", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["offering", "cluster", "hour"], name="catalog_sample_unique_hour")
        ]

    def __str__(self) -> str:
        return f"{self.offering_id}@{self.cluster_id} {self.hour:%Y-%m-%d %H}:00"
