"""REST API of the tenant's main job: generate a manifest, validate any manifest, explain a pod's feasibility.

Nothing here creates anything in a cluster; the optional dry run asks the API server with `dryRun=All`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.feasibility import ManifestError, load_objects, split_pod_manifest
from catalog.feasibility.gang import MAX_GANG_PODS, gang_pods
from catalog.generator import SHAPES, TOPOLOGIES, GeneratorError, WorkloadSpec, generate
from catalog.models import Offering
from catalog.services.manifests import gang_explain, manifest_validate, pod_explain
from catalog.services.workloads import generator_facts, namespace_error
from core.api.exceptions import PortalExceptionHandlerMixin
from core.api.fields import SlugRelatedField
from core.types import RequestUser
from inventory.k8s.semantics import is_qualified_name
from inventory.models import Cluster
from inventory.scoping import scope_for, targets_for
from inventory.untrusted_text import UntrustedTextError, normalize

MAX_MANIFEST = 1 << 20


@extend_schema_field(OpenApiTypes.STR)
class ClusterField(serializers.Field):
    """A cluster by id or by name."""

    default_error_messages = {"unknown": "No cluster {value!r}."}

    def to_internal_value(self, data: Any) -> Cluster:
        query = Cluster.objects.defer("kubeconfig")
        cluster = None
        if isinstance(data, int) and not isinstance(data, bool):
            cluster = query.filter(pk=data).first()
        elif isinstance(data, str) and data and "\x00" not in data:  # PostgreSQL text holds no NUL
            # str.isdigit() also holds for "²", which int() refuses: an id is ASCII digits.
            by_pk = data.isascii() and data.isdecimal()
            cluster = query.filter(pk=int(data)).first() if by_pk else query.filter(name=data).first()
        if cluster is None:
            self.fail("unknown", value=str(data)[:80])
        return cluster

    def to_representation(self, value: Cluster) -> str:
        return value.name


class ValidateInputSerializer(serializers.Serializer):
    manifest = serializers.CharField(max_length=MAX_MANIFEST, trim_whitespace=False,
                                     help_text="YAML or JSON; several documents separated by ---, or a kind: List.")
    cluster = ClusterField(required=False, help_text="Cluster id or name; without it only the cluster-independent "
                                                     "layers run.")
    dry_run = serializers.BooleanField(default=False, help_text="Also POST each document with dryRun=All.")


class ManifestFindingSerializer(serializers.Serializer):
    layer = serializers.CharField()
    severity = serializers.ChoiceField(choices=["error", "warning", "info"])
    path = serializers.CharField()
    message = serializers.CharField()
    fix = serializers.CharField()
    code = serializers.CharField()


class ReportSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    counts = serializers.DictField(child=serializers.IntegerField())
    documents = serializers.ListField(child=serializers.DictField())
    findings = ManifestFindingSerializer(many=True)


class ManifestValidateView(PortalExceptionHandlerMixin, APIView):
    """Validate a manifest layer by layer: parse, schema, semantics, policy, quota, feasibility, dry run."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "inventory:read"  # noqa: S105 - POST, but it only computes

    @extend_schema(request=ValidateInputSerializer, responses=ReportSerializer)
    def post(self, request: Request) -> Response:
        data = ValidateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        report = manifest_validate(text=data.validated_data["manifest"], cluster=data.validated_data.get("cluster"),
                                   user=request.user, dry_run=data.validated_data["dry_run"])
        return Response(report.as_json())


class GenerateInputSerializer(serializers.Serializer):
    offering = SlugRelatedField(slug_field="slug", queryset=Offering.objects.browsable())
    cluster = ClusterField(required=False)
    namespace = serializers.CharField(max_length=63)
    name = serializers.CharField(max_length=63)
    shape = serializers.ChoiceField(choices=list(SHAPES))
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    parallelism = serializers.IntegerField(min_value=1, max_value=64, default=1)
    topology = serializers.ChoiceField(choices=list(TOPOLOGIES), default="", help_text=", ".join(
        f"{key}: {text}" for key, text in TOPOLOGIES.items() if key))
    image = serializers.CharField(max_length=255)
    command = serializers.ListField(child=serializers.CharField(max_length=1000, allow_blank=True), max_length=64,
                                    default=list)
    cpu = serializers.CharField(max_length=20, default="4")
    memory = serializers.CharField(max_length=20, default="16Gi")
    min_memory_gib = serializers.IntegerField(min_value=1, max_value=4096, required=False, allow_null=True)
    architecture = serializers.CharField(max_length=32, required=False, allow_blank=True, default="")
    cuda = serializers.CharField(max_length=16, required=False, allow_blank=True, default="")
    compute_capability = serializers.CharField(max_length=8, required=False, allow_blank=True, default="")
    queue_name = serializers.CharField(max_length=63, required=False, allow_blank=True, default="",
                                       help_text="Kueue LocalQueue of the namespace: the workload is labelled "
                                                 "kueue.x-k8s.io/queue-name and a Job created suspended.")
    dry_run = serializers.BooleanField(default=False)


class GenerateResultSerializer(serializers.Serializer):
    yaml = serializers.CharField()
    documents = serializers.ListField(child=serializers.DictField())
    notes = serializers.ListField(child=serializers.CharField())
    validation = ReportSerializer()


class ManifestGenerateView(PortalExceptionHandlerMixin, APIView):
    """Generate a commented, validated manifest for an offering (the page's generator, as an API)."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "inventory:read"  # noqa: S105 - POST, but it only computes

    @extend_schema(request=GenerateInputSerializer, responses=GenerateResultSerializer)
    def post(self, request: Request) -> Response:
        data = GenerateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        cluster, dry_run = values.pop("cluster", None), values.pop("dry_run")
        facts = generator_facts(cluster=cluster, offering=values["offering"], user=request.user)
        if cluster is not None and values["namespace"] not in facts.namespaces:
            return Response({"namespace": [namespace_error(cluster, values["namespace"], facts.namespaces)]},
                            status=status.HTTP_400_BAD_REQUEST)
        spec = WorkloadSpec(**values, device_driver=facts.driver, extended_resource_name=facts.extended_resource_name)
        try:
            generated = generate(spec)
        except GeneratorError as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        report = manifest_validate(text=generated.yaml, cluster=cluster, user=request.user, dry_run=dry_run)
        return Response({"yaml": generated.yaml, "documents": generated.documents, "notes": generated.notes,
                         "validation": report.as_json()})


class FeasibilityInputSerializer(serializers.Serializer):
    cluster = ClusterField()
    pod = serializers.DictField(required=False, help_text="A Pod manifest (or give `manifest`).")
    manifest = serializers.CharField(max_length=MAX_MANIFEST, required=False, trim_whitespace=False,
                                     help_text="YAML/JSON with one Pod or Job plus its ResourceClaim(Template)s.")

    def validate_pod(self, value: dict[str, Any]) -> dict[str, Any]:
        try:  # the limits of the manifest reader (depth, non-finite numbers) for a pod sent as JSON
            return normalize(value)
        except UntrustedTextError as exc:
            raise serializers.ValidationError(exc.message) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("pod" in attrs) == ("manifest" in attrs):
            raise serializers.ValidationError("Give exactly one of `pod` and `manifest`.")
        return attrs


def _submitted_objects(validated: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of `manifest`, or the `pod` sent as JSON (raises ManifestError)."""
    if "manifest" in validated:
        return load_objects(validated["manifest"])
    return [{"apiVersion": "v1", "kind": "Pod", **validated["pod"]}]


def _outside_namespaces(user: RequestUser, cluster: Cluster, namespaces: set[str]) -> Response | None:
    """A 400 naming the first namespace that is not the reader's (platform roles may explain anywhere), or None."""
    if scope_for(user).everything:
        return None
    outside = sorted(namespaces - set(targets_for(user, cluster)))
    if not outside:
        return None
    return Response({"namespace": [f"{outside[0]!r} is not one of your namespaces in {cluster.name}: "
                                   "feasibility is explained only for your own namespaces."]},
                    status=status.HTTP_400_BAD_REQUEST)


class _ExplainView(PortalExceptionHandlerMixin, APIView):
    """POST a manifest (or a pod) and a cluster, get an explanation; a manifest that cannot be read is a 400."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "inventory:read"  # noqa: S105 - POST, but it only computes
    input_serializer: type[serializers.Serializer] = FeasibilityInputSerializer

    def post(self, request: Request) -> Response:
        data = self.input_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            return self.explain(request, data.validated_data["cluster"], data.validated_data,
                                _submitted_objects(data.validated_data))
        except ManifestError as exc:
            return Response({"manifest": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)

    def explain(self, request: Request, cluster: Cluster, validated: dict[str, Any],
                objects: list[dict[str, Any]]) -> Response:
        raise NotImplementedError


@extend_schema_view(post=extend_schema(request=FeasibilityInputSerializer, responses=OpenApiTypes.OBJECT))
class FeasibilityView(_ExplainView):
    """Will this pod schedule on the cluster now, and if not, why — in the scheduler's words, per node, with hints."""

    def explain(self, request: Request, cluster: Cluster, validated: dict[str, Any],
                objects: list[dict[str, Any]]) -> Response:
        pod, claims, templates, notes = split_pod_manifest(objects)
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) and meta["namespace"] else "default"
        refused = _outside_namespaces(request.user, cluster, {namespace})
        if refused is not None:
            return refused
        body = pod_explain(pod=pod, cluster=cluster, user=request.user, claims=[*claims, *templates]).as_json()
        body["notes"] = [*notes, *body.get("notes", [])]
        return Response(body)


class GangFeasibilityInputSerializer(FeasibilityInputSerializer):
    manifest = serializers.CharField(
        max_length=MAX_MANIFEST, required=False, trim_whitespace=False,
        help_text="YAML/JSON: a Job (parallelism, completions, Indexed), a JobSet, a training job with "
                  "spec.*ReplicaSpecs (PyTorchJob…), a Deployment/StatefulSet, or several Pods — plus their "
                  "ResourceClaim(Template)s.")
    replicas = serializers.IntegerField(required=False, min_value=1, max_value=MAX_GANG_PODS,
                                        help_text="With a single Pod: the gang is this many identical pods.")
    topology = serializers.CharField(
        required=False, max_length=317,
        help_text="A node label (topology.kubernetes.io/zone, a rack label, nvidia.com/gpu.clique): all pods on nodes "
                  "sharing one value of it. Default: the pods' kueue.x-k8s.io/podset-required-topology annotation.")

    def validate_topology(self, value: str) -> str:
        if not is_qualified_name(value):
            raise serializers.ValidationError("Not a label key (a qualified name like topology.kubernetes.io/zone).")
        return value


@extend_schema_view(post=extend_schema(request=GangFeasibilityInputSerializer, responses=OpenApiTypes.OBJECT))
class GangFeasibilityView(_ExplainView):
    """Can all pods of a multi-pod workload be placed at the same time? Placed in order on a copy of the cluster's
    snapshot: the first pod that fails and why (the scheduler's words), and the largest gang placeable now."""

    input_serializer = GangFeasibilityInputSerializer

    def explain(self, request: Request, cluster: Cluster, validated: dict[str, Any],
                objects: list[dict[str, Any]]) -> Response:
        pods, claims, templates, notes = gang_pods(objects, replicas=validated.get("replicas"))
        refused = _outside_namespaces(request.user, cluster, {p.pod["metadata"]["namespace"] for p in pods})
        if refused is not None:
            return refused
        body = gang_explain(pods=pods, cluster=cluster, user=request.user, claims=[*claims, *templates],
                            topology=validated.get("topology", "")).as_json()
        body["notes"] = [*notes, *body["notes"]]
        return Response(body)
