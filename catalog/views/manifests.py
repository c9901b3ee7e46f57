"""The manifest generator page: pick an offering and a shape, get validated YAML live (htmx), copy or download it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views import View

from catalog.feasibility import split_pod_manifest
from catalog.forms import GeneratorForm, ValidateForm
from catalog.generator import DRA_SHAPES, GeneratorError, WorkloadSpec, generate, parse_command
from catalog.services.manifests import manifest_validate, pod_explain
from catalog.services.workloads import generator_facts, namespace_error
from core.htmx import partial_template
from core.types import RequestUser
from inventory.k8s.conversion import dra_to_v1, served_dra_version
from inventory.models import Cluster, Pod
from inventory.selectors import dra_served_version, dra_unavailable_reason, evidence_events


def _spec_from(form: GeneratorForm, user: RequestUser) -> WorkloadSpec:
    data = form.cleaned_data
    offering, cluster = data["offering"], data.get("cluster")
    facts = generator_facts(cluster=cluster, offering=offering, user=user)
    errors: dict[str, list[str]] = {}
    if cluster is not None and data["namespace"] not in facts.namespaces:
        errors["namespace"] = [namespace_error(cluster, data["namespace"], facts.namespaces)]
    try:
        command = parse_command(data.get("command") or "")
    except GeneratorError as exc:
        errors.update(exc.errors)
        command = []
    spec = WorkloadSpec(
        offering=offering, namespace=data["namespace"], name=data["name"], shape=data["shape"], count=data["count"],
        parallelism=data.get("parallelism") or 1, topology=data.get("topology") or "", image=data["image"], command=command, cpu=data["cpu"],
        memory=data["memory"], min_memory_gib=data.get("min_memory_gib"), architecture=data.get("architecture") or "",
        cuda=data.get("cuda") or "", compute_capability=data.get("compute_capability") or "",
        device_driver=facts.driver, extended_resource_name=facts.extended_resource_name,
        dra_version=dra_served_version(cluster) if cluster is not None else "v1",
        queue_name=data.get("queue_name") or "",
    )
    if errors:  # report these together with the generator's own checks
        try:
            generate(spec)
        except GeneratorError as exc:
            for name, messages in exc.errors.items():
                errors.setdefault(name, []).extend(messages)
        raise GeneratorError(errors)
    return spec


def generator_result(form: GeneratorForm, user: RequestUser) -> dict[str, Any]:
    """Run the generator, the validator and the explainer for a bound form."""
    if not form.is_valid():
        return {"form": form}
    try:
        spec = _spec_from(form, user)
        generated = generate(spec)
    except GeneratorError as exc:
        form.add_generator_errors(exc.errors)
        return {"form": form}
    cluster = form.cleaned_data.get("cluster")
    report = manifest_validate(text=generated.yaml, cluster=cluster, user=user,
                               dry_run=form.cleaned_data.get("dry_run", False))
    result = {"form": form, "generated": generated, "spec": spec, "filename": f"{spec.name}.yaml", "report": report}
    reason = dra_unavailable_reason(cluster) if cluster is not None and spec.offering.is_dra else ""
    if reason:  # the template is still shown (for another cluster); this cluster cannot run it
        result["unavailable"] = f"DRA templates are unavailable on this cluster: {reason}"
    elif cluster is not None:
        pod, claims, templates, _ = split_pod_manifest(generated.documents)
        claims = [dra_to_v1(c, served_dra_version(c)) for c in [*claims, *templates]]  # the explainer reads v1
        result.update(explanation_context(pod_explain(pod=pod, cluster=cluster, user=user, claims=claims)))
    return result


class GenerateView(LoginRequiredMixin, View):
    template_name = "catalog/generate.html"

    def _initial(self, request: HttpRequest) -> dict[str, Any]:
        initial: dict[str, Any] = {}
        if request.GET.get("offering"):
            initial["offering"] = request.GET["offering"]
        initial["namespace"] = "default"  # without a cluster any valid name will do: the page opens with YAML
        cluster = Cluster.objects.order_by("name").first()
        if cluster is not None:
            facts = generator_facts(cluster=cluster, offering=None, user=request.user)
            if facts.namespaces:  # a cluster whose namespaces the user cannot use would open on an error
                initial["cluster"] = cluster.pk
                initial["namespace"] = facts.namespaces[0]
        return initial

    def get(self, request: HttpRequest) -> HttpResponse:
        form = GeneratorForm(initial=self._initial(request))
        data = {name: form[name].value() for name in form.fields}
        offering_slug = data.get("offering") or (form.fields["offering"].queryset.values_list("slug", flat=True)
                                                 .first())
        data["offering"] = offering_slug
        bound = GeneratorForm(data={k: v for k, v in data.items() if v is not None})
        if bound.is_bound and offering_slug:
            offering = bound.fields["offering"].queryset.filter(slug=offering_slug).first()
            if offering is not None and offering.is_dra and bound.data.get("shape") not in DRA_SHAPES:
                bound.data = {**bound.data, "shape": "claim-template-job"}
        return render(request, self.template_name, {**generator_result(bound, request.user),
                                                    "shapes_dra": sorted(DRA_SHAPES)})

    def post(self, request: HttpRequest) -> HttpResponse:
        result = generator_result(GeneratorForm(request.POST), request.user)
        if request.POST.get("download") and result.get("generated"):
            response = HttpResponse(result["generated"].yaml, content_type="application/yaml; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{result["filename"]}"'
            return response
        template = partial_template(request, self.template_name, "output")
        return render(request, template, {**result, "shapes_dra": sorted(DRA_SHAPES)})


def explanation_context(explanation: Any, *, limit: int = 40) -> dict[str, Any]:
    """Nodes worth showing: the ones that fit first, then the nearest misses (fewest reasons), capped."""
    nodes = sorted(explanation.nodes, key=lambda n: (not n.fits, len(n.reasons), n.name))[:limit]
    return {"explanation": explanation, "nodes": nodes}


class ValidateView(LoginRequiredMixin, View):
    """Paste a manifest, pick a cluster: every validation layer, optionally a server-side dry run."""

    template_name = "catalog/validate.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        cluster = Cluster.objects.order_by("name").first()
        return render(request, self.template_name, {"form": ValidateForm(initial={"cluster": cluster})})

    def post(self, request: HttpRequest) -> HttpResponse:
        form = ValidateForm(request.POST)
        context: dict[str, Any] = {"form": form}
        if form.is_valid():
            context["report"] = manifest_validate(text=form.cleaned_data["manifest"],
                                                  cluster=form.cleaned_data.get("cluster"), user=request.user,
                                                  dry_run=form.cleaned_data.get("dry_run", False))
        template = partial_template(request, self.template_name, "report")
        return render(request, template, context)


class PodExplainView(LoginRequiredMixin, View):
    """The explainer's answer for a mirrored Pending pod, to show beside the scheduler's own message."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        pod = get_object_or_404(Pod.objects.live().visible_to(request.user).select_related("cluster"), pk=pk)
        # Listed items carry no apiVersion/kind; the status is the scheduler's, not an input.
        manifest = {"apiVersion": "v1", "kind": "Pod", **{k: v for k, v in pod.raw.items() if k != "status"}}
        reason = dra_unavailable_reason(pod.cluster) if pod.claim_names else ""
        if reason:
            return render(request, "catalog/_pod_explanation.html",
                          {"pod": pod, "unavailable": f"Claim explanations are unavailable on this cluster: {reason}"})
        explanation = pod_explain(pod=manifest, cluster=pod.cluster, user=request.user)
        # What the cluster said about this pod (FailedScheduling, Allocate and DRA prepare failures …), with counts.
        said = evidence_events(cluster_ids=[pod.cluster_id], uids=[pod.uid]).get(pod.uid, [])
        return render(request, "catalog/_pod_explanation.html", {"pod": pod, "cluster_said": said,
                                                                 **explanation_context(explanation)})
