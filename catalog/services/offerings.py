"""Writes to the catalog: offerings, prices, lifecycle. Each entry point is one durable transaction with its audit
event. Validation happens before anything is written; a refused change changes nothing."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog import cel
from catalog.errors import CatalogError, OfferingValidationError
from catalog.isolation import declared_sharing, isolation_problem
from catalog.models import DEFAULT_ISOLATION, DRA_KINDS, Isolation, Lifecycle, Offering, OfferingPrice, UnitKind
from catalog.versions import parse_version
from core.types import RequestUser
from inventory.k8s.semantics import is_dns_subdomain, is_extended_resource, qualified_name_problem

EDITABLE_FIELDS = (
    "slug", "name", "description", "unit_kind", "model", "memory_mib", "compute_share", "isolation", "fault_domain",
    "units_per_card", "fail_requests_greater_than_one", "request_sizes", "resource_name", "device_class_name", "node_selector", "tolerations",
    "cel_selector", "driver_min", "driver_max", "cuda_min", "cuda_max", "compute_capability", "architecture",
    "cpu_architectures", "kubernetes_min", "kubernetes_max", "runtime_class", "owner_team", "health_criteria",
    "upgrade_window",
)
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_EFFECTS = {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}


def _add(errors: dict[str, list[str]], name: str, message: str) -> None:
    errors.setdefault(name, []).append(message)


def offering_validate(data: dict[str, Any], *, instance: Offering | None = None) -> dict[str, list[str]]:
    """Field errors of an offering's editable fields (empty: valid). Never writes."""
    errors: dict[str, list[str]] = {}
    kind = data.get("unit_kind")
    if kind not in UnitKind.values:
        _add(errors, "unit_kind", f"Choose one of: {', '.join(UnitKind.values)}.")
    if not str(data.get("name") or "").strip():
        _add(errors, "name", "A name is required.")
    slug = str(data.get("slug") or "")
    if not re.fullmatch(r"[-a-z0-9]{1,80}", slug):
        _add(errors, "slug", "Use 1-80 lowercase letters, digits and hyphens.")
    elif Offering.objects.filter(slug=slug).exclude(pk__in=[instance.pk] if instance is not None else []).exists():
        _add(errors, "slug", f"An offering with slug {slug!r} already exists.")
    resource = str(data.get("resource_name") or "")
    device_class = str(data.get("device_class_name") or "")
    if kind in DRA_KINDS:
        if not device_class:
            _add(errors, "device_class_name", "A DRA offering is requested through a DeviceClass: name it.")
        elif not is_dns_subdomain(device_class):
            _add(errors, "device_class_name", "Not a valid DeviceClass name (a DNS subdomain).")
    elif kind in UnitKind.values:
        if not resource:
            _add(errors, "resource_name", "A device-plugin offering is requested through an extended resource.")
        if str(data.get("cel_selector") or "").strip():
            _add(errors, "cel_selector", "CEL selectors apply to DRA devices; select device-plugin pools with node "
                                         "labels instead.")
    if resource and ("/" not in resource or qualified_name_problem(resource) or not is_extended_resource(resource)):
        _add(errors, "resource_name", "Not an extended resource name (vendor-domain/name, e.g. nvidia.com/gpu).")
    expression = str(data.get("cel_selector") or "")
    if expression.strip() and kind in DRA_KINDS:
        try:
            cel.compile_selector(expression)
        except cel.CelError as exc:
            _add(errors, "cel_selector", str(exc))
    selector = data.get("node_selector")
    if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in
                                                 selector.items()):
        _add(errors, "node_selector", "A mapping of label names to string values.")
    tolerations = data.get("tolerations")
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        _add(errors, "tolerations", "A list of tolerations (key, operator, value, effect).")
    else:
        for t in tolerations:
            if (t.get("operator") or "Equal") not in {"Equal", "Exists"} or (t.get("effect") or "") not in _EFFECTS:
                _add(errors, "tolerations", f"Invalid toleration {t}: operator Equal|Exists, effect "
                                            "NoSchedule|PreferNoSchedule|NoExecute.")
            elif t.get("operator") == "Exists" and t.get("value"):
                _add(errors, "tolerations", "A toleration with operator Exists takes no value.")
    sizes = data.get("request_sizes")
    if not isinstance(sizes, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        _add(errors, "request_sizes", "A list of positive integers, e.g. [1, 2, 4, 8].")
    if isinstance(data.get("cpu_architectures"), list) is False:
        _add(errors, "cpu_architectures", "A list, e.g. ['amd64'].")
    for low, high in (("driver_min", "driver_max"), ("cuda_min", "cuda_max"), ("kubernetes_min", "kubernetes_max")):
        lo, hi = str(data.get(low) or ""), str(data.get(high) or "")
        for name, value in ((low, lo), (high, hi)):
            if value and parse_version(value) is None:
                _add(errors, name, f"{value!r} is not a version like 12.4 or 550.54.15.")
        lower, upper = parse_version(lo), parse_version(hi)
        if lower is not None and upper is not None and lower > upper:
            _add(errors, high, f"The upper bound {hi} is below the lower bound {lo}.")
    cc = str(data.get("compute_capability") or "")
    if cc and not re.fullmatch(r"\d{1,2}\.\d{1,2}", cc):
        _add(errors, "compute_capability", "A compute capability like 8.0 or 9.0.")
    memory = data.get("memory_mib")
    if memory is not None and (not isinstance(memory, int) or memory < 0):
        _add(errors, "memory_mib", "A non-negative number of MiB.")
    per_card = data.get("units_per_card")
    if not isinstance(per_card, int) or per_card < 1:
        _add(errors, "units_per_card", "At least 1.")
    strict = data.get("fail_requests_greater_than_one")
    if not isinstance(strict, bool):
        _add(errors, "fail_requests_greater_than_one", "true or false.")
    elif strict and kind != UnitKind.TIME_SLICING:
        _add(errors, "fail_requests_greater_than_one", "A time-slicing setting of the device plugin; MPS pools always "
                                                      "refuse more than one share per container, other units are not "
                                                      "shared.")
    if data.get("isolation") and data["isolation"] not in Isolation.values:
        _add(errors, "isolation", f"Choose one of: {', '.join(Isolation.values)}.")
    elif kind in DRA_KINDS and device_class:
        # Sharing declared by the DeviceClass's opaque config (time-slicing, MPS, or config the portal cannot read):
        # such a unit is never sold as an exclusive card or an isolated partition.
        problem = isolation_problem(device_class, str(data.get("isolation") or DEFAULT_ISOLATION[UnitKind(kind)]))
        if problem:
            _add(errors, "isolation", problem)
    return errors


def _defaults(data: dict[str, Any]) -> dict[str, Any]:
    out = {name: data.get(name) for name in EDITABLE_FIELDS if name in data}
    empty: dict[str, Any] = {"units_per_card": 1, "request_sizes": [], "tolerations": [], "cpu_architectures": [],
                             "node_selector": {}, "fail_requests_greater_than_one": False}
    for name in list(out):
        if out[name] is None and name != "memory_mib":  # API clients may send null for "not set"
            out[name] = empty.get(name, "")
    for name, value in empty.items():
        out.setdefault(name, value)
    if not out["request_sizes"]:
        out["request_sizes"] = [1, 2, 4, 8] if out.get("unit_kind") == UnitKind.WHOLE else [1]
    if not out.get("isolation") and out.get("unit_kind") in UnitKind.values:
        out["isolation"] = DEFAULT_ISOLATION[UnitKind(str(out["unit_kind"]))]
        if out["unit_kind"] in DRA_KINDS:
            declared = declared_sharing(str(out.get("device_class_name") or ""))
            if declared:
                out["isolation"] = declared[0].isolation
    return out


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: {"from": before.get(k), "to": v} for k, v in after.items() if before.get(k) != v}


@transaction.atomic(durable=True)
def offering_create(*, actor: RequestUser | None, data: dict[str, Any]) -> Offering:
    values = _defaults(data)
    errors = offering_validate(values)
    if errors:
        raise OfferingValidationError(errors)
    offering = Offering.objects.create(**values, lifecycle=Lifecycle.ACTIVE, curated=True)
    audit_record(actor=actor, verb="offering.created", target=offering, data={"fields": values})
    return offering


@transaction.atomic(durable=True)
def offering_update(*, actor: RequestUser | None, offering_id: int, data: dict[str, Any]) -> Offering:
    """Edit an offering. Editing a discovery proposal curates it: discovery never touches it again."""
    offering = Offering.objects.select_for_update().get(pk=offering_id)
    before = {name: getattr(offering, name) for name in EDITABLE_FIELDS}
    values = {**before, **_defaults({**before, **data})}
    errors = offering_validate(values, instance=offering)
    if errors:
        raise OfferingValidationError(errors)
    changes = _diff(before, values)
    for name, value in values.items():
        setattr(offering, name, value)
    offering.curated = True
    offering.save()
    if changes:
        audit_record(actor=actor, verb="offering.updated", target=offering, data={"changes": changes},
                     before={k: v["from"] for k, v in changes.items()}, after={k: v["to"] for k, v in changes.items()})
    return offering


@transaction.atomic(durable=True)
def offering_lifecycle_change(*, actor: RequestUser | None, offering_id: int, lifecycle: str,
                              replacement_id: int | None = None, retire_on: dt.date | None = None) -> Offering:
    """active ↔ deprecated (with a replacement that is not retired) → retired (now or on a future date)."""
    offering = Offering.objects.select_for_update().get(pk=offering_id)
    errors: dict[str, list[str]] = {}
    if lifecycle not in {Lifecycle.ACTIVE, Lifecycle.DEPRECATED, Lifecycle.RETIRED}:
        _add(errors, "lifecycle", "Choose active, deprecated or retired.")
    replacement = None
    if replacement_id is not None:
        replacement = Offering.objects.filter(pk=replacement_id).first()
        if replacement is None:
            _add(errors, "replacement", "No such offering.")
        elif replacement.pk == offering.pk:
            _add(errors, "replacement", "An offering cannot replace itself.")
        elif replacement.lifecycle in {Lifecycle.RETIRED, Lifecycle.DISMISSED, Lifecycle.PROPOSED}:
            _add(errors, "replacement", f"The replacement {replacement.name!r} is {replacement.lifecycle}; "
                                        "choose an active offering.")
        elif replacement.replacement_id == offering.pk:
            _add(errors, "replacement", "The replacement is itself replaced by this offering (a cycle).")
    if lifecycle == Lifecycle.DEPRECATED and replacement is None and not errors.get("replacement"):
        _add(errors, "replacement", "Deprecating an offering needs a replacement for its users.")
    today = timezone.localdate()
    if retire_on is not None and retire_on < today:
        _add(errors, "retire_on", f"The retirement date {retire_on} is in the past.")
    if lifecycle == Lifecycle.ACTIVE and retire_on is not None:
        _add(errors, "retire_on", "An active offering has no retirement date; deprecate it first.")
    if errors:
        raise OfferingValidationError(errors)
    before = {"lifecycle": offering.lifecycle, "replacement": offering.replacement_id,
              "retire_on": offering.retire_on.isoformat() if offering.retire_on else None}
    offering.lifecycle = lifecycle
    offering.replacement = replacement if lifecycle != Lifecycle.ACTIVE else None
    offering.retire_on = today if lifecycle == Lifecycle.RETIRED and retire_on is None else retire_on
    offering.curated = True
    offering.save()
    after = {"lifecycle": offering.lifecycle, "replacement": offering.replacement_id,
             "retire_on": offering.retire_on.isoformat() if offering.retire_on else None}
    audit_record(actor=actor, verb="offering.lifecycle_changed", target=offering, data=_diff(before, after),
                 before=before, after=after)
    return offering


def offerings_retire_due(*, today: dt.date | None = None) -> int:
    """Retire deprecated offerings whose retirement date has come (beat, daily; idempotent)."""
    today = today or timezone.localdate()
    retired = 0
    for pk in Offering.objects.filter(lifecycle=Lifecycle.DEPRECATED, retire_on__lte=today).values_list("pk",
                                                                                                          flat=True):
        with transaction.atomic():
            offering = Offering.objects.select_for_update().get(pk=pk)
            if offering.lifecycle != Lifecycle.DEPRECATED:
                continue
            offering.lifecycle = Lifecycle.RETIRED
            offering.save(update_fields=["lifecycle", "updated_at"])
            audit_record(actor=None, verb="offering.retired", target=offering,
                         data={"retire_on": offering.retire_on.isoformat() if offering.retire_on else None})
            retired += 1
    return retired


# ------------------------------------------------------------------------------------------------ prices


def _decimal(value: Any) -> Decimal | None:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None


@transaction.atomic(durable=True)
def price_set(*, actor: RequestUser | None, offering_id: int, unit_price: Any, currency: str,
              effective_from: dt.datetime | None = None, effective_to: dt.datetime | None = None) -> OfferingPrice:
    """Add a price period. It may not start in the past (that would rewrite charges already made); the period
    in force at its start is closed there; it may not overlap a period that starts later (delete that first)."""
    offering = Offering.objects.select_for_update().get(pk=offering_id)
    now = timezone.now()
    start = effective_from or now
    errors: dict[str, list[str]] = {}
    amount = _decimal(unit_price)
    exponent = amount.as_tuple().exponent if amount is not None else 0
    if amount is None or not isinstance(exponent, int) or amount < 0 or exponent < -4 or abs(amount) >= Decimal(10) ** 8:
        _add(errors, "unit_price", "A non-negative amount with at most 4 decimals.")
    if not _CURRENCY.match(str(currency or "")):
        _add(errors, "currency", "A three-letter ISO 4217 code such as EUR or USD.")
    if start < now - dt.timedelta(seconds=60):
        _add(errors, "effective_from", "A price cannot start in the past: it would rewrite charges already made.")
    if effective_to is not None and effective_to <= start:
        _add(errors, "effective_to", "The end must be after the start.")
    later = offering.prices.filter(effective_from__gte=start).order_by("effective_from").first()
    if "effective_from" not in errors and later is not None and (
        effective_to is None or effective_to > later.effective_from
    ):
        _add(errors, "effective_from", f"Overlaps the price period starting {later.effective_from:%Y-%m-%d %H:%M %Z} "
                                       f"({later.unit_price.normalize():f} {later.currency}); delete or end that one "
                                       "first.")
    if errors or amount is None:
        raise OfferingValidationError(errors)
    current = offering.prices.filter(effective_from__lt=start).order_by("-effective_from").first()
    closed = None
    if current is not None and (current.effective_to is None or current.effective_to > start):
        closed = current.effective_to
        current.effective_to = start
        current.save(update_fields=["effective_to"])
    price = OfferingPrice.objects.create(offering=offering, unit_price=amount, currency=currency,
                                         effective_from=start, effective_to=effective_to)
    audit_record(actor=actor, verb="price.set", target=offering, data={
        "unit_price": str(amount), "currency": currency, "effective_from": start.isoformat(),
        "effective_to": effective_to.isoformat() if effective_to else None,
        "closed_previous": {"id": current.pk, "was_until": closed.isoformat() if closed else None}
        if current is not None and current.effective_to == start else None,
    })
    return price


@transaction.atomic(durable=True)
def price_delete(*, actor: RequestUser | None, price_id: int) -> None:
    """Remove a scheduled (future) price; prices in force or past are history and stay."""
    price = OfferingPrice.objects.select_for_update().select_related("offering").get(pk=price_id)
    if price.effective_from <= timezone.now():
        raise CatalogError("Only a price that has not started yet can be deleted; past charges depend on it.")
    offering = price.offering
    data = {"unit_price": str(price.unit_price), "currency": price.currency,
            "effective_from": price.effective_from.isoformat()}
    # The period it cut short runs on to where the deleted one would have ended (both ends are in the future).
    offering.prices.filter(effective_to=price.effective_from).update(effective_to=price.effective_to)
    price.delete()
    audit_record(actor=actor, verb="price.deleted", target=offering, data=data)
