"""Forms of the catalog pages. They parse and shape input; the domain rules (CEL, versions, overlaps, uniqueness)
stay in `catalog.services`, whose `OfferingValidationError` messages are put back onto these fields."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import forms
from django.urls import reverse

from catalog.errors import OfferingValidationError
from catalog.models import Isolation, Lifecycle, Offering, UnitKind
from catalog.selectors import CatalogFilters
from catalog.services.offerings import EDITABLE_FIELDS
from inventory.untrusted_text import UntrustedTextError, load_documents, where

STRUCTURED_MAX_CHARS = 20_000
# The fields whose change re-runs the live selector check (their names are what catalog:selector_check reads).
SELECTOR_FIELDS = ("unit_kind", "device_class_name", "resource_name", "cel_selector", "node_selector")


def _blank_choice(choices: list[tuple[str, str]], label: str = "Any") -> list[tuple[str, str]]:
    return [("", label), *choices]


class StructuredField(forms.CharField):
    """A JSON-or-YAML textarea holding a mapping or a list (`kind`). Empty means empty.

    Read by the hardened reader (inventory.untrusted_text): aliases, deep nesting and duplicate keys are refused, so
    a few lines of anchors cannot expand into a huge document downstream.
    """

    widget = forms.Textarea

    def __init__(self, *, kind: type, **kwargs: Any) -> None:
        self.kind = kind
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", STRUCTURED_MAX_CHARS)
        kwargs.setdefault("strip", False)
        super().__init__(**kwargs)
        self.widget.attrs.update({"rows": 2, "spellcheck": "false", "class": "code"})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict | list):
            if not value:
                return ""
            text = json.dumps(value, ensure_ascii=False)
            return text if len(text) <= 80 else json.dumps(value, ensure_ascii=False, indent=2)
        return value

    def to_python(self, value: Any) -> Any:
        if isinstance(value, dict | list):
            return value
        text = super().to_python(value)
        if not text.strip():
            return self.kind()
        try:
            documents = load_documents(text, max_documents=1)
        except UntrustedTextError as exc:
            if exc.code in ("yaml-alias", "yaml-anchor", "yaml-merge-key"):
                raise forms.ValidationError("YAML anchors and aliases are not supported here.", code="alias") from None
            if exc.code in ("yaml-syntax", "json-syntax"):
                problem = exc.message.removeprefix("invalid YAML: ").removeprefix("invalid JSON: ")
                raise forms.ValidationError(f"Not valid JSON or YAML{where(exc.mark)}: {problem}.",
                                            code="syntax") from None
            if exc.code == "too-many-documents":
                raise forms.ValidationError("Give one document, not several.", code="documents") from None
            raise forms.ValidationError(f"Not accepted: {exc}.", code=exc.code) from None
        parsed = documents[0] if documents else None
        if parsed is None:
            return self.kind()
        if not isinstance(parsed, self.kind):
            expected = "a mapping (key: value)" if self.kind is dict else "a list"
            raise forms.ValidationError(f"Expected {expected}, got {type(parsed).__name__}.", code="type")
        return parsed


class CatalogFilterForm(forms.Form):
    """The tenant's filters on the catalog list (GET)."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "name or model"}),
    )
    unit_kind = forms.ChoiceField(label="Unit kind", required=False, choices=_blank_choice(UnitKind.choices))
    memory_gib_min = forms.IntegerField(
        label="Memory ≥ GiB",
        required=False,
        min_value=0,
        max_value=100_000,
        widget=forms.NumberInput(attrs={"placeholder": "e.g. 40"}),
    )
    isolation = forms.ChoiceField(label="Isolation", required=False, choices=_blank_choice(Isolation.choices))
    price_max = forms.DecimalField(
        label="Max price / unit-hour",
        required=False,
        min_value=0,
        max_digits=12,
        decimal_places=4,
        widget=forms.NumberInput(attrs={"step": "0.01"}),
    )
    requirement = forms.CharField(
        label="Workload needs",
        required=False,
        max_length=500,
        widget=forms.TextInput(attrs={"placeholder": "e.g. cuda 12.4, sm_80+", "size": 26}),
        help_text="CUDA, compute capability, driver, architecture, memory, Kubernetes, runtime class.",
    )
    available = forms.BooleanField(label="Available now", required=False)

    def __init__(self, *args: Any, curator: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if curator:
            self.fields["lifecycle"] = forms.ChoiceField(
                label="Lifecycle",
                required=False,
                choices=_blank_choice(Lifecycle.choices, "Active and deprecated"),
            )

    def filters(self) -> CatalogFilters:
        """The selector's filters; invalid fields are left out (their errors are shown next to them)."""
        data: dict[str, Any] = {}
        if self.is_bound:
            self.is_valid()  # Django drops invalid fields from cleaned_data
            data = self.cleaned_data
        return CatalogFilters(
            q=(data.get("q") or "").strip(),
            unit_kind=data.get("unit_kind") or "",
            memory_gib_min=data.get("memory_gib_min"),
            isolation=data.get("isolation") or "",
            price_max=data.get("price_max") if isinstance(data.get("price_max"), Decimal) else None,
            available=bool(data.get("available")),
            requirement=(data.get("requirement") or "").strip(),
            lifecycle=data.get("lifecycle") or "",
        )


class ServiceErrorsMixin:
    """Put a service's per-field messages back onto the form (unknown keys become non-field errors)."""

    fields: dict[str, forms.Field]

    def add_service_errors(self, exc: OfferingValidationError) -> None:
        for name, messages in exc.errors.items():
            for message in messages:
                self.add_error(name if name in self.fields else None, message)  # type: ignore[attr-defined]


def _live_check_attrs(trigger: str) -> dict[str, str]:
    return {
        "hx-post": reverse("catalog:selector_check"),
        "hx-trigger": trigger,
        "hx-target": "#selector-check",
        "hx-swap": "innerHTML",
        "hx-include": ", ".join(f"#id_{name}" for name in SELECTOR_FIELDS),
        "hx-sync": "closest form:replace",
    }


class OfferingForm(ServiceErrorsMixin, forms.Form):
    """Create or edit an offering; the JSON fields take JSON or YAML."""

    FIELDSETS = (
        ("Offering", ("name", "slug", "description", "unit_kind")),
        (
            "What one unit guarantees",
            ("model", "memory_mib", "compute_share", "isolation", "fault_domain", "units_per_card",
             "fail_requests_greater_than_one", "request_sizes"),
        ),
        ("How it is requested", ("resource_name", "device_class_name", "cel_selector", "node_selector", "tolerations")),
        (
            "Compatibility",
            (
                "driver_min",
                "driver_max",
                "cuda_min",
                "cuda_max",
                "compute_capability",
                "architecture",
                "cpu_architectures",
                "kubernetes_min",
                "kubernetes_max",
                "runtime_class",
            ),
        ),
        ("Operations", ("owner_team", "health_criteria", "upgrade_window")),
    )

    name = forms.CharField(max_length=120)
    slug = forms.CharField(max_length=80, help_text="Lowercase letters, digits and hyphens; used in URLs.")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    unit_kind = forms.ChoiceField(choices=_blank_choice(UnitKind.choices, "— choose —"))
    model = forms.CharField(required=False, max_length=200, help_text="GPU product, e.g. NVIDIA-H100-80GB-HBM3.")
    memory_mib = forms.IntegerField(label="Memory per unit (MiB)", required=False, min_value=0)
    compute_share = forms.CharField(required=False, max_length=80, help_text="e.g. '1 card', '1/7 of the SMs'.")
    isolation = forms.ChoiceField(required=False, choices=_blank_choice(Isolation.choices, "Default for the unit kind"))
    fault_domain = forms.CharField(required=False, max_length=200)
    units_per_card = forms.IntegerField(
        initial=1, min_value=1, max_value=1024, help_text="Replicas, shares or slices per card."
    )
    fail_requests_greater_than_one = forms.BooleanField(
        label="Fails requests for more than one unit", required=False,
        help_text="Time-slicing: the pool's device plugin config sets failRequestsGreaterThanOne (nothing on the node "
                  "says so). MPS pools always refuse more than one share per container.",
    )
    request_sizes = StructuredField(kind=list, help_text="Common request sizes in units, e.g. [1, 2, 4, 8].")
    resource_name = forms.CharField(required=False, max_length=253, help_text="Extended resource, e.g. nvidia.com/gpu.")
    device_class_name = forms.CharField(
        label="DeviceClass", required=False, max_length=253, help_text="DRA offerings: the DeviceClass name."
    )
    cel_selector = forms.CharField(
        label="CEL selector",
        required=False,
        strip=False,
        max_length=STRUCTURED_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "code"}),
        help_text='DRA only, e.g. device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S".',
    )
    node_selector = StructuredField(kind=dict, help_text='Node labels, e.g. {"nvidia.com/gpu.product": "NVIDIA-H100"}.')
    tolerations = StructuredField(
        kind=list, help_text="Tolerations for the pool's taints (key, operator, value, effect)."
    )
    driver_min = forms.CharField(required=False, max_length=32)
    driver_max = forms.CharField(required=False, max_length=32)
    cuda_min = forms.CharField(label="CUDA min", required=False, max_length=16)
    cuda_max = forms.CharField(
        label="CUDA max", required=False, max_length=16, help_text="Highest CUDA version the driver supports."
    )
    compute_capability = forms.CharField(required=False, max_length=8, help_text="e.g. 9.0")
    architecture = forms.CharField(required=False, max_length=32, help_text="e.g. hopper, ampere")
    cpu_architectures = StructuredField(kind=list, label="CPU architectures", help_text='e.g. ["amd64"]')
    kubernetes_min = forms.CharField(required=False, max_length=16)
    kubernetes_max = forms.CharField(required=False, max_length=16)
    runtime_class = forms.CharField(required=False, max_length=63)
    owner_team = forms.CharField(required=False, max_length=100)
    health_criteria = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    upgrade_window = forms.CharField(required=False, max_length=200)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in SELECTOR_FIELDS:
            trigger = "change" if name == "unit_kind" else "input changed delay:400ms"
            self.fields[name].widget.attrs.update(_live_check_attrs(trigger))

    @classmethod
    def initial_for(cls, offering: Offering) -> dict[str, Any]:
        return {name: getattr(offering, name) for name in EDITABLE_FIELDS}

    def fieldsets(self) -> list[tuple[str, list[forms.BoundField]]]:
        return [(title, [self[name] for name in names]) for title, names in self.FIELDSETS]

    def service_data(self) -> dict[str, Any]:
        data = {name: self.cleaned_data[name] for name in EDITABLE_FIELDS}
        for name, value in data.items():
            if isinstance(value, str) and name not in {"cel_selector", "description", "health_criteria"}:
                data[name] = value.strip()
        return data


class SelectorCheckForm(forms.Form):
    """The live check's input: the selector-relevant fields of the offering form, under the same names."""

    unit_kind = forms.ChoiceField(required=False, choices=_blank_choice(UnitKind.choices))
    device_class_name = forms.CharField(required=False, max_length=253)
    resource_name = forms.CharField(required=False, max_length=253)
    cel_selector = forms.CharField(required=False, strip=False, max_length=STRUCTURED_MAX_CHARS)
    node_selector = StructuredField(kind=dict)


class PriceForm(ServiceErrorsMixin, forms.Form):
    unit_price = forms.DecimalField(
        label="Unit price / unit-hour",
        min_value=0,
        max_digits=12,
        decimal_places=4,
        widget=forms.NumberInput(attrs={"step": "0.0001"}),
    )
    currency = forms.CharField(
        max_length=3,
        min_length=3,
        initial="EUR",
        widget=forms.TextInput(attrs={"size": 4, "autocapitalize": "characters"}),
    )
    effective_from = forms.DateTimeField(
        label="Effective from",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty: now.",
    )
    effective_to = forms.DateTimeField(
        label="Until",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty: open-ended.",
    )

    def clean_currency(self) -> str:
        return str(self.cleaned_data["currency"]).strip().upper()


LIFECYCLE_CHOICES = [
    (v, label) for v, label in Lifecycle.choices if v in {Lifecycle.ACTIVE, Lifecycle.DEPRECATED, Lifecycle.RETIRED}
]


class LifecycleForm(ServiceErrorsMixin, forms.Form):
    lifecycle = forms.ChoiceField(choices=LIFECYCLE_CHOICES)
    replacement = forms.ModelChoiceField(
        queryset=Offering.objects.none(), required=False, empty_label="— none —", to_field_name="pk"
    )
    retire_on = forms.DateField(
        label="Retire on", required=False, widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
    )

    def __init__(self, *args: Any, offering: Offering, **kwargs: Any) -> None:
        kwargs.setdefault(
            "initial",
            {
                "lifecycle": offering.lifecycle if offering.lifecycle in dict(LIFECYCLE_CHOICES) else Lifecycle.ACTIVE,
                "replacement": offering.replacement_id,
                "retire_on": offering.retire_on,
            },
        )
        super().__init__(*args, **kwargs)
        self.fields["replacement"].queryset = (  # type: ignore[attr-defined]
            Offering.objects.browsable().exclude(pk=offering.pk).only("pk", "name", "slug").order_by("name")
        )


class GeneratorForm(forms.Form):
    """The manifest generator's input; shapes only — `catalog.generator` owns the rules."""

    offering = forms.ModelChoiceField(queryset=Offering.objects.browsable().order_by("name"), to_field_name="slug",
                                      empty_label=None)
    cluster = forms.ModelChoiceField(queryset=None, required=False, empty_label="(no cluster: no namespace list)")
    namespace = forms.CharField(max_length=63)
    name = forms.CharField(max_length=63, initial="gpu-workload")
    shape = forms.ChoiceField(choices=[], initial="pod")
    count = forms.IntegerField(min_value=1, max_value=64, initial=1)
    parallelism = forms.IntegerField(min_value=1, max_value=64, initial=1, required=False,
                                     help_text="Pods of a Job running at once.")
    topology = forms.ChoiceField(choices=[], required=False,
                                 help_text="Keep a pod's GPUs on one PCIe root, or a Job's pods in one NVLink domain.")
    image = forms.CharField(max_length=255, initial="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
    command = forms.CharField(max_length=4000, required=False, initial="nvidia-smi",
                              help_text="Split like a shell would; emitted as a list, never run by a shell.")
    cpu = forms.CharField(max_length=20, initial="4")
    memory = forms.CharField(max_length=20, initial="16Gi")
    min_memory_gib = forms.IntegerField(min_value=1, max_value=4096, required=False, label="GPU memory ≥ GiB")
    architecture = forms.CharField(max_length=32, required=False, help_text="e.g. hopper, ampere")
    cuda = forms.CharField(max_length=16, required=False, label="CUDA ≥", help_text="e.g. 12.4")
    compute_capability = forms.CharField(max_length=8, required=False, label="Compute capability ≥",
                                         help_text="e.g. 8.0")
    queue_name = forms.CharField(max_length=63, required=False, label="Kueue LocalQueue",
                                 help_text="Where the cluster admits work through Kueue: the LocalQueue of the "
                                           "namespace. A Job is then created suspended until Kueue admits it.")
    dry_run = forms.BooleanField(required=False, label="Dry run against the cluster",
                                 help_text="The API server validates and admits the objects without storing them.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from catalog.generator import SHAPES, TOPOLOGIES
        from inventory.models import Cluster

        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = Cluster.objects.order_by("name").defer("kubeconfig")
        self.fields["shape"].choices = list(SHAPES.items())
        self.fields["topology"].choices = list(TOPOLOGIES.items())

    def add_generator_errors(self, errors: dict[str, list[str]]) -> None:
        for name, messages in errors.items():
            for message in messages:
                self.add_error(name if name in self.fields else None, message)


class ValidateForm(forms.Form):
    manifest = forms.CharField(widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "code"}),
                               max_length=1 << 20,
                               strip=False, help_text="Pod, Job, ResourceClaim or ResourceClaimTemplate; several "
                                                      "documents separated by ---.")
    cluster = forms.ModelChoiceField(queryset=None, required=False, empty_label="(none: schema and policy only)")
    dry_run = forms.BooleanField(required=False, label="Dry run against the cluster")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from inventory.models import Cluster

        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = Cluster.objects.order_by("name").defer("kubeconfig")
