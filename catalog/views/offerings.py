"""Catalog pages: the tenant's catalog (filter, compare, detail with capacity plots and request snippets) and the
curator's pages (create/edit with the live selector check, prices, lifecycle, discovery proposals).

Views parse, authorize, call a selector or a service and render; every write is a POST that calls a service in
`catalog.services` and redirects with a message. No ORM writes here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.generic import DetailView, TemplateView
from django_htmx.http import HttpResponseClientRedirect

from catalog.errors import CatalogError, OfferingValidationError
from catalog.forms import CatalogFilterForm, LifecycleForm, OfferingForm, PriceForm, SelectorCheckForm
from catalog.isolation import declared_sharing, isolation_problem
from catalog.models import Lifecycle, Offering, OfferingPrice
from catalog.selectors import OfferingRow, capacity_history, capacity_totals, offering_rows, offerings_for
from catalog.services.capacity import reference_request
from catalog.services.compatibility import RequirementError, Verdict, offerings_check
from catalog.services.discovery import discovery_run, proposal_decide
from catalog.services.gangs import offering_gang_view
from catalog.services.matching import offering_selector_check, offering_warnings
from catalog.services.offerings import (
    offering_create,
    offering_lifecycle_change,
    offering_update,
    price_delete,
    price_set,
)
from catalog.services.queues import offering_queues
from core.htmx import HtmxPartialMixin, partial_template, wants_partial
from core.types import RequestUser
from inventory.models import DeviceClass
from inventory.selectors import dra_unavailable_clusters

logger = logging.getLogger(__name__)

CURATE = "catalog.curate_offering"
COMPARE_MIN, COMPARE_MAX = 2, 4
HISTORY_HOURS = {24: "24 hours", 24 * 7: "7 days", 24 * 14: "14 days"}
DEFAULT_HISTORY_HOURS = 24 * 14
CLAIM_NAME = "accelerator"
IMAGE = "registry.example.com/team/app:tag"


def is_curator(user: RequestUser) -> bool:
    return bool(user.is_authenticated and user.has_perm(CURATE))


class CuratorRequiredMixin(LoginRequiredMixin, PermissionRequiredMixin):
    """Anonymous users go to the login page; signed-in users without the curator permission get 403."""

    permission_required = CURATE


def done(request: HttpRequest, url: str) -> HttpResponse:
    """The answer to a successful write: a redirect, or an HX-Redirect when htmx posted it."""
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url)


# ------------------------------------------------------------------------------------------------ tenant pages


class OfferingListView(LoginRequiredMixin, HtmxPartialMixin, TemplateView):
    """The catalog with filters; a compatibility requirement marks each row as qualifying or says why not."""

    template_name = "catalog/offering_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        curator = is_curator(self.request.user)
        form = CatalogFilterForm(self.request.GET or None, curator=curator)
        filters = form.filters()
        rows, requirement_error = offering_rows(self.request.user, filters)
        context.update(
            form=form,
            rows=rows,
            requirement_error=requirement_error,
            requirement=filters.requirement,
            selected=self.request.GET.getlist("o"),
            curator=curator,
            proposal_count=Offering.objects.proposals().count() if curator else 0,
            dra_unavailable_clusters=dra_unavailable_clusters() if any(row.offering.is_dra for row in rows) else [],
        )
        return context


@dataclass
class CompareColumn:
    offering: Offering
    row: OfferingRow
    verdict: Verdict | None = None


class OfferingCompareView(LoginRequiredMixin, View):
    """2-4 offerings side by side; a bad selection is a 400 page that says what is wrong."""

    template_name = "catalog/offering_compare.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        slugs = list(dict.fromkeys(s.strip() for s in request.GET.getlist("o") if s.strip()))
        requirement = request.GET.get("requirement", "").strip()[:500]
        context: dict[str, Any] = {"columns": [], "problem": "", "requirement": requirement, "slugs": slugs}
        if len(slugs) < COMPARE_MIN:
            context["problem"] = f"Select at least {COMPARE_MIN} offerings to compare (you selected {len(slugs)})."
            return render(request, self.template_name, context, status=400)
        if len(slugs) > COMPARE_MAX:
            context["problem"] = f"Compare at most {COMPARE_MAX} offerings at a time (you selected {len(slugs)})."
            return render(request, self.template_name, context, status=400)
        found = {o.slug: o for o in offerings_for(request.user, include_all=True).filter(slug__in=slugs)}
        unknown = [s for s in slugs if s not in found]
        if unknown:
            context["problem"] = "Unknown offering: " + ", ".join(unknown) + "."
            return render(request, self.template_name, context, status=400)
        now = timezone.now()
        columns = [
            CompareColumn(
                found[s],
                OfferingRow(
                    found[s], capacity_totals(list(found[s].offeringcapacity_rows.all())), found[s].price_at(now)
                ),
            )
            for s in slugs
        ]
        if requirement:
            try:
                understood, verdicts = offerings_check([c.offering for c in columns], requirement)
            except RequirementError as exc:
                context["requirement_error"] = str(exc)
            else:
                by_id = {v.offering.pk: v for v in verdicts}
                for column in columns:
                    column.verdict = by_id[column.offering.pk]
                context["understood_as"] = understood.describe()
        context["columns"] = columns
        return render(request, self.template_name, context)


def request_snippets(offering: Offering) -> dict[str, Any]:
    """Ready-to-copy manifests for both request paths, dumped by PyYAML (never string templates)."""
    scheduling: dict[str, Any] = {}
    if offering.runtime_class:
        scheduling["runtimeClassName"] = offering.runtime_class
    if isinstance(offering.node_selector, dict) and offering.node_selector:
        scheduling["nodeSelector"] = dict(offering.node_selector)
    if isinstance(offering.tolerations, list) and offering.tolerations:
        scheduling["tolerations"] = list(offering.tolerations)

    def pod(container_resources: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {**(extra or {})}
        spec["containers"] = [{"name": "main", "image": IMAGE, "resources": container_resources}]
        spec.update(scheduling)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{offering.slug}-workload"}, "spec": spec}

    def dump(*documents: dict[str, Any]) -> str:
        return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)

    out: dict[str, Any] = {"extended": "", "extended_resource": "", "extended_note": "", "dra": "", "dra_note": ""}
    resource = offering.resource_name if not offering.is_dra else ""
    if offering.is_dra:
        mapped = sorted(
            set(
                DeviceClass.objects.live()
                .filter(name=offering.device_class_name)
                .exclude(extended_resource_name="")
                .values_list("extended_resource_name", flat=True)
            )
        )
        if mapped:
            resource = mapped[0]
            out["extended_note"] = (
                f"DeviceClass {offering.device_class_name} maps the extended resource {resource}: the scheduler turns "
                "this request into a claim on that class."
                + (
                    " The offering's own CEL selector is not applied on this path; any device of the class may be "
                    "allocated. Use the ResourceClaimTemplate to get exactly this offering."
                    if offering.cel_selector
                    else ""
                )
                + (f" Other clusters map: {', '.join(mapped[1:])}." if len(mapped) > 1 else "")
            )
        else:
            out["extended_note"] = (
                f"DeviceClass {offering.device_class_name or '(none)'} has no extendedResourceName, so this unit "
                "cannot be requested as an extended resource: use the ResourceClaimTemplate below."
            )
    if resource:
        out["extended_resource"] = resource
        out["extended"] = dump(pod({"limits": {resource: 1}}))
    if offering.is_dra:
        exactly: dict[str, Any] = {"deviceClassName": offering.device_class_name}
        if offering.cel_selector.strip():
            exactly["selectors"] = [{"cel": {"expression": offering.cel_selector}}]
        exactly["count"] = 1
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": offering.slug},
            "spec": {"spec": {"devices": {"requests": [{"name": CLAIM_NAME, "exactly": exactly}]}}},
        }
        claims = {"resourceClaims": [{"name": CLAIM_NAME, "resourceClaimTemplateName": offering.slug}]}
        out["dra"] = dump(template, pod({"claims": [{"name": CLAIM_NAME}]}, claims))
    else:
        out["dra_note"] = (
            "This unit is served by a device plugin: request it as the extended resource above. DRA "
            "(ResourceClaims) is not how this unit is requested."
        )
    return out


def _int_param(request: HttpRequest, name: str) -> int | None:
    try:
        return int(request.GET.get(name, ""))
    except ValueError:
        return None


class OfferingDetailView(LoginRequiredMixin, HtmxPartialMixin, DetailView):
    """What a unit is, compatibility, prices, lifecycle, live capacity with plots, and request snippets."""

    template_name = "catalog/offering_detail.html"
    partial_name = "history"
    context_object_name = "offering"

    def get_queryset(self) -> QuerySet[Offering]:
        return offerings_for(self.request.user, include_all=True)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        offering: Offering = self.object
        totals = capacity_totals(list(offering.offeringcapacity_rows.all()))
        hours = _int_param(self.request, "hours")
        hours = hours if hours in HISTORY_HOURS else DEFAULT_HISTORY_HOURS
        cluster_ids = {row.cluster_id for row in totals.clusters}
        cluster_id = _int_param(self.request, "cluster")
        cluster_id = cluster_id if cluster_id in cluster_ids else None
        context.update(
            capacity=totals,
            price=offering.price_at(),
            prices=list(offering.prices.all()),
            now=timezone.now(),
            samples=list(capacity_history(offering, cluster_id=cluster_id, hours=hours)),
            history_hours=hours,
            history_choices=HISTORY_HOURS.items(),
            history_cluster=cluster_id,
            curator=is_curator(self.request.user),
            declared_sharing=declared_sharing(offering.device_class_name) if offering.is_dra else [],
            isolation_problem=isolation_problem(offering.device_class_name, offering.isolation)
            if offering.is_dra else "",
            unavailable_clusters=dra_unavailable_clusters() if offering.is_dra else [],
        )
        if not wants_partial(self.request):
            context["snippets"] = request_snippets(offering)
            context["queues"] = offering_queues(offering)
        context["gang_defaults"] = {"pods": 4, "units": reference_request(offering)}
        return context


class OfferingGangView(LoginRequiredMixin, View):
    """The gang view of the offering's capacity on one cluster: can an N x R job start now (an htmx partial)?"""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        offering = get_object_or_404(offerings_for(request.user, include_all=True), slug=slug)
        rows = {row.cluster_id: row.cluster for row in offering.offeringcapacity_rows.select_related("cluster")}
        cluster_id = _int_param(request, "cluster")
        cluster = rows.get(cluster_id) if cluster_id is not None else next(iter(rows.values()), None)
        pods, units = _int_param(request, "pods") or 4, _int_param(request, "units") or reference_request(offering)
        view = offering_gang_view(offering, cluster, pods=pods, units=units, user=request.user) if cluster else None
        return render(request, "catalog/_gang_view.html", {"offering": offering, "gang": view,
                                                           "error": "" if cluster else "No capacity on any cluster."})


# ------------------------------------------------------------------------------------------------ curator pages


def _editable(slug: str) -> Offering:
    return get_object_or_404(Offering.objects.select_related("replacement").prefetch_related("prices"), slug=slug)


def render_edit(
    request: HttpRequest,
    offering: Offering,
    *,
    form: OfferingForm | None = None,
    price_form: PriceForm | None = None,
    lifecycle_form: LifecycleForm | None = None,
    partial: str = "",
    status: int = 200,
) -> HttpResponse:
    """The edit page (or its `partial`, for htmx) with whichever sub-form is bound."""
    current = offering.price_at()
    context = {
        "offering": offering,
        "form": form or OfferingForm(initial=OfferingForm.initial_for(offering)),
        "price_form": price_form or PriceForm(initial={"currency": current.currency if current else "EUR"}),
        "lifecycle_form": lifecycle_form or LifecycleForm(offering=offering),
        "prices": list(offering.prices.all()),
        "now": timezone.now(),
        "creating": False,
    }
    template = "catalog/offering_form.html"
    template = partial_template(request, template, partial) if partial else template
    return render(request, template, context, status=status)


class OfferingCreateView(CuratorRequiredMixin, View):
    template_name = "catalog/offering_form.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"form": OfferingForm(), "creating": True})

    def post(self, request: HttpRequest) -> HttpResponse:
        form = OfferingForm(request.POST)
        if form.is_valid():
            try:
                offering = offering_create(actor=request.user, data=form.service_data())
            except OfferingValidationError as exc:
                form.add_service_errors(exc)
            else:
                messages.success(request, f"Created offering {offering.name}.")
                for warning in offering_warnings(offering):
                    messages.warning(request, warning)
                return done(request, offering.get_absolute_url())
        return render(request, self.template_name, {"form": form, "creating": True})


class OfferingEditView(CuratorRequiredMixin, View):
    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return render_edit(request, _editable(slug))

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        offering = _editable(slug)
        form = OfferingForm(request.POST, initial=OfferingForm.initial_for(offering))
        if form.is_valid():
            try:
                offering = offering_update(actor=request.user, offering_id=offering.pk, data=form.service_data())
            except OfferingValidationError as exc:
                form.add_service_errors(exc)
            else:
                messages.success(request, f"Saved offering {offering.name}.")
                for warning in offering_warnings(offering):
                    messages.warning(request, warning)
                return done(request, offering.get_absolute_url())
        return render_edit(request, offering, form=form)


class OfferingPriceView(CuratorRequiredMixin, View):
    """Add a price period; errors (overlap, start in the past) come back inline in the prices panel."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        offering = _editable(slug)
        form = PriceForm(request.POST)
        if form.is_valid():
            try:
                price_set(actor=request.user, offering_id=offering.pk, **form.cleaned_data)
            except OfferingValidationError as exc:
                form.add_service_errors(exc)
            else:
                messages.success(
                    request,
                    f"Price {form.cleaned_data['unit_price']} {form.cleaned_data['currency']} "
                    f"per unit-hour scheduled for {offering.name}.",
                )
                return done(request, reverse("catalog:offering_edit", kwargs={"slug": offering.slug}))
        return render_edit(request, offering, price_form=form, partial="prices")


class PriceDeleteView(CuratorRequiredMixin, View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        price = get_object_or_404(OfferingPrice.objects.select_related("offering"), pk=pk)
        try:
            price_delete(actor=request.user, price_id=price.pk)
        except CatalogError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(
                request,
                f"Deleted the price {price.unit_price} {price.currency} from "
                f"{timezone.localtime(price.effective_from):%Y-%m-%d %H:%M}.",
            )
        return done(request, reverse("catalog:offering_edit", kwargs={"slug": price.offering.slug}))


class OfferingLifecycleView(CuratorRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        offering = _editable(slug)
        form = LifecycleForm(request.POST, offering=offering)
        if form.is_valid():
            replacement = form.cleaned_data["replacement"]
            try:
                offering = offering_lifecycle_change(
                    actor=request.user,
                    offering_id=offering.pk,
                    lifecycle=form.cleaned_data["lifecycle"],
                    replacement_id=replacement.pk if replacement else None,
                    retire_on=form.cleaned_data["retire_on"],
                )
            except OfferingValidationError as exc:
                form.add_service_errors(exc)
            else:
                messages.success(request, f"{offering.name} is now {offering.get_lifecycle_display().lower()}.")
                return done(request, reverse("catalog:offering_edit", kwargs={"slug": offering.slug}))
        return render_edit(request, offering, lifecycle_form=form, partial="lifecycle")


class SelectorCheckView(CuratorRequiredMixin, View):
    """The live check of the offering form: what the selector matches now, or why it does not compile."""

    template_name = "catalog/_selector_check.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self.check(request, request.GET)

    def post(self, request: HttpRequest) -> HttpResponse:
        return self.check(request, request.POST)

    def check(self, request: HttpRequest, data: Any) -> HttpResponse:
        form = SelectorCheckForm(data)
        result: dict[str, Any] | None = None
        if form.is_valid() and form.cleaned_data["unit_kind"]:
            result = offering_selector_check(
                unit_kind=form.cleaned_data["unit_kind"],
                device_class_name=form.cleaned_data["device_class_name"].strip(),
                resource_name=form.cleaned_data["resource_name"].strip(),
                cel_selector=form.cleaned_data["cel_selector"],
                node_selector=form.cleaned_data["node_selector"],
            )
        return render(request, self.template_name, {"form": form, "result": result})


class ProposalListView(CuratorRequiredMixin, TemplateView):
    """Offerings that discovery proposed, for the curator to accept, edit or dismiss."""

    template_name = "catalog/proposals.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        proposals = offerings_for(self.request.user, include_all=True).filter(lifecycle=Lifecycle.PROPOSED)
        context["proposals"] = [
            (o, capacity_totals(list(o.offeringcapacity_rows.all()))) for o in proposals.order_by("name", "pk")
        ]
        return context


class ProposalDecideView(CuratorRequiredMixin, View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        offering = get_object_or_404(Offering.objects.only("pk", "name"), pk=pk)
        decision = request.POST.get("decision")
        if decision not in {"accept", "dismiss"}:
            messages.error(request, "Choose accept or dismiss.")
            return done(request, reverse("catalog:proposals"))
        try:
            offering = proposal_decide(actor=request.user, offering_id=offering.pk, accept=decision == "accept")
        except CatalogError as exc:
            messages.error(request, str(exc))
        else:
            verb = "Accepted" if decision == "accept" else "Dismissed"
            messages.success(request, f"{verb} {offering.name}.")
        return done(request, reverse("catalog:proposals"))


class DiscoveryRunView(CuratorRequiredMixin, View):
    def post(self, request: HttpRequest) -> HttpResponse:
        try:
            counts = discovery_run(actor=request.user)
        except CatalogError as exc:
            messages.error(request, f"Discovery failed: {exc}")
        else:
            messages.success(
                request,
                "Discovery ran: {created} new, {refreshed} refreshed, {skipped} skipped "
                "(already in the catalog or dismissed).".format(**counts),
            )
        return done(request, reverse("catalog:proposals"))
