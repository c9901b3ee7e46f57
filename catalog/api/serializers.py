"""Representations of the catalog for the REST API. Explicit fields; input serializers are separate."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import CapacitySample, Isolation, Offering, OfferingCapacity, OfferingPrice, UnitKind
from catalog.services.offerings import EDITABLE_FIELDS
from inventory.api.serializers import ClusterRefSerializer

CAPACITY_FIELDS = [
    "matched_devices", "feasible_nodes", "total_units", "allocatable", "held", "free", "unknown", "blocked", "cards",
    "free_cards", "contested", "largest_placeable", "stranded", "fragmentation", "pending_pods", "granted_quota",
    "quota_capacity", "oversubscription", "selector_errors", "free_by_node", "capacity_changing",
]


class PriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = OfferingPrice
        fields = ["id", "unit_price", "currency", "effective_from", "effective_to"]
        read_only_fields = fields


@extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}})
class FreeByNodeField(serializers.Field):
    """Free units per node name, as stored (integers written by the capacity computation). Read-only and passed
    through as is: a DictField would convert thousands of entries one by one for every offering of a list."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value: Any) -> dict[str, int]:
        return value if isinstance(value, dict) else {}


class CapacitySerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    oversubscription = serializers.FloatField(read_only=True, allow_null=True)
    free_by_node = FreeByNodeField()

    class Meta:
        model = OfferingCapacity
        fields = ["cluster", *CAPACITY_FIELDS, "computed_at"]
        read_only_fields = fields


class CapacitySampleSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    oversubscription = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = CapacitySample
        fields = ["hour", "cluster", *[f for f in CAPACITY_FIELDS if f != "free_by_node"]]
        read_only_fields = fields


class CapacityTotalsSerializer(serializers.Serializer):
    total_units = serializers.IntegerField()
    allocatable = serializers.IntegerField()
    held = serializers.IntegerField()
    free = serializers.IntegerField()
    unknown = serializers.IntegerField()
    blocked = serializers.IntegerField()
    cards = serializers.FloatField()
    free_cards = serializers.IntegerField()
    contested = serializers.IntegerField()
    feasible_nodes = serializers.IntegerField()
    largest_placeable = serializers.IntegerField()
    stranded = serializers.IntegerField()
    fragmentation = serializers.FloatField()
    pending_pods = serializers.IntegerField()
    granted_quota = serializers.IntegerField(allow_null=True)
    capacity_changing = serializers.BooleanField(help_text="Some of the offering's nodes are being repartitioned.")


_TOTALS_FIELDS = tuple(CapacityTotalsSerializer._declared_fields)


class OfferingSerializer(serializers.ModelSerializer):
    replacement = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    current_price = serializers.SerializerMethodField()
    prices = PriceSerializer(many=True, read_only=True)
    capacity = serializers.SerializerMethodField()
    clusters = serializers.SerializerMethodField()

    class Meta:
        model = Offering
        fields = ["id", *EDITABLE_FIELDS, "lifecycle", "replacement", "retire_on", "curated", "discovery_key",
                  "current_price", "prices", "capacity", "clusters", "created_at", "updated_at"]
        read_only_fields = fields

    def _totals(self, obj: Offering) -> Any:
        from catalog.selectors import capacity_totals

        cache = self.context.setdefault("_totals", {})
        if obj.pk not in cache:
            cache[obj.pk] = capacity_totals(list(obj.offeringcapacity_rows.all()))
        return cache[obj.pk]

    @extend_schema_field(PriceSerializer(allow_null=True))
    def get_current_price(self, obj: Offering) -> dict[str, Any] | None:
        price = obj.price_at()
        return PriceSerializer(price).data if price else None

    @extend_schema_field(CapacityTotalsSerializer)
    def get_capacity(self, obj: Offering) -> dict[str, Any]:
        totals = self._totals(obj)
        return {name: getattr(totals, name) for name in _TOTALS_FIELDS}

    @extend_schema_field(CapacitySerializer(many=True))
    def get_clusters(self, obj: Offering) -> list[dict[str, Any]]:
        return CapacitySerializer(self._totals(obj).clusters, many=True).data



class OfferingSavedSerializer(OfferingSerializer):
    """An offering after create/update, with non-blocking warnings (e.g. its selector matches no device)."""

    warnings = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta(OfferingSerializer.Meta):
        fields = [*OfferingSerializer.Meta.fields, "warnings"]
        read_only_fields = fields


class OfferingInputSerializer(serializers.Serializer):
    """Create/update input. Shapes are checked here; domain rules (CEL, versions, uniqueness) by the service."""

    slug = serializers.CharField(max_length=80)
    name = serializers.CharField(max_length=120)
    description = serializers.CharField(required=False, allow_blank=True)
    unit_kind = serializers.ChoiceField(choices=UnitKind.choices)
    model = serializers.CharField(max_length=200, required=False, allow_blank=True)
    memory_mib = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    compute_share = serializers.CharField(max_length=80, required=False, allow_blank=True)
    isolation = serializers.ChoiceField(choices=Isolation.choices, required=False)
    fault_domain = serializers.CharField(max_length=200, required=False, allow_blank=True)
    units_per_card = serializers.IntegerField(min_value=1, max_value=1024, required=False)
    fail_requests_greater_than_one = serializers.BooleanField(
        required=False, help_text="Time-slicing: the pool's device plugin refuses more than one replica per container "
                                  "(failRequestsGreaterThanOne).")
    request_sizes = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=4096),
                                          max_length=16, required=False)
    resource_name = serializers.CharField(max_length=253, required=False, allow_blank=True)
    device_class_name = serializers.CharField(max_length=253, required=False, allow_blank=True)
    node_selector = serializers.DictField(child=serializers.CharField(max_length=63, allow_blank=True),
                                          required=False)
    tolerations = serializers.ListField(child=serializers.DictField(), max_length=32, required=False)
    cel_selector = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    driver_min = serializers.CharField(max_length=32, required=False, allow_blank=True)
    driver_max = serializers.CharField(max_length=32, required=False, allow_blank=True)
    cuda_min = serializers.CharField(max_length=16, required=False, allow_blank=True)
    cuda_max = serializers.CharField(max_length=16, required=False, allow_blank=True)
    compute_capability = serializers.CharField(max_length=8, required=False, allow_blank=True)
    architecture = serializers.CharField(max_length=32, required=False, allow_blank=True)
    cpu_architectures = serializers.ListField(child=serializers.CharField(max_length=16), max_length=8,
                                              required=False)
    kubernetes_min = serializers.CharField(max_length=16, required=False, allow_blank=True)
    kubernetes_max = serializers.CharField(max_length=16, required=False, allow_blank=True)
    runtime_class = serializers.CharField(max_length=63, required=False, allow_blank=True)
    owner_team = serializers.CharField(max_length=100, required=False, allow_blank=True)
    health_criteria = serializers.CharField(required=False, allow_blank=True)
    upgrade_window = serializers.CharField(max_length=200, required=False, allow_blank=True)


class LifecycleInputSerializer(serializers.Serializer):
    lifecycle = serializers.ChoiceField(choices=["active", "deprecated", "retired"])
    replacement = serializers.IntegerField(required=False, allow_null=True, help_text="Offering id.")
    retire_on = serializers.DateField(required=False, allow_null=True)


class PriceInputSerializer(serializers.Serializer):
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0)
    currency = serializers.RegexField(r"^[A-Z]{3}$", help_text="ISO 4217, e.g. EUR")
    effective_from = serializers.DateTimeField(required=False, allow_null=True)
    effective_to = serializers.DateTimeField(required=False, allow_null=True)


class CompatibilityVerdictSerializer(serializers.Serializer):
    offering = serializers.IntegerField(source="offering.pk")
    slug = serializers.CharField(source="offering.slug")
    name = serializers.CharField(source="offering.name")
    qualifies = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField(), help_text="Why it does not qualify.")
    satisfied = serializers.ListField(child=serializers.CharField())


class CompatibilityResultSerializer(serializers.Serializer):
    requirement = serializers.CharField()
    understood_as = serializers.CharField()
    offerings = CompatibilityVerdictSerializer(many=True)


class SelectorCheckInputSerializer(serializers.Serializer):
    unit_kind = serializers.ChoiceField(choices=UnitKind.choices)
    device_class_name = serializers.CharField(max_length=253, required=False, allow_blank=True)
    resource_name = serializers.CharField(max_length=253, required=False, allow_blank=True)
    cel_selector = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    node_selector = serializers.DictField(child=serializers.CharField(max_length=63, allow_blank=True),
                                          required=False)


class SelectorCheckSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True)
    devices = serializers.IntegerField()
    nodes = serializers.IntegerField()
    clusters = serializers.IntegerField()
    selector_errors = serializers.IntegerField()
    error_samples = serializers.ListField(child=serializers.CharField())
    notes = serializers.ListField(child=serializers.CharField())
    warning = serializers.CharField(allow_blank=True)
