"""REST API for tenants: everyone sees their own tenants (platform roles see all); platform admins create tenants,
set members and assign namespaces. Writes go through portal.tenancy.services (audited)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from core.api.exceptions import PortalExceptionHandlerMixin
from core.api.fields import SlugRelatedField
from inventory.models import Cluster
from portal.tenancy.models import QuotaTarget, Tenant, TenantMembership, TenantNamespace
from portal.tenancy.roles import Role, user_has_role
from portal.tenancy.services import membership_set, namespace_assign, tenant_create, tenant_quota_target_set


class PlatformAdminWrites(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or user_has_role(request.user, Role.PLATFORM_ADMIN)


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = TenantMembership
        fields = ["username", "role"]
        read_only_fields = fields


class TenantNamespaceSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = TenantNamespace
        fields = ["cluster", "namespace", "source"]
        read_only_fields = fields


class TenantSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)
    namespaces = TenantNamespaceSerializer(many=True, read_only=True)

    class Meta:
        model = Tenant
        fields = ["id", "slug", "name", "cost_center", "quota_target", "members", "namespaces", "created_at"]
        read_only_fields = ["id", "quota_target", "members", "namespaces", "created_at"]


class MemberInputSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=TenantMembership.Role.choices, allow_null=True,
                                   help_text="null removes the member.")


class QuotaTargetInputSerializer(serializers.Serializer):
    quota_target = serializers.ChoiceField(choices=QuotaTarget.choices)


class NamespaceInputSerializer(serializers.Serializer):
    cluster = SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = serializers.CharField(max_length=63)
    assign = serializers.BooleanField(default=True, help_text="false removes the explicit assignment.")


class TenantViewSet(PortalExceptionHandlerMixin, viewsets.ModelViewSet):
    """Tenants with members and namespaces. Another tenant's object answers 404."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "admin:write"  # noqa: S105 - platform-admin-only writes (docs/tokens.md)
    serializer_class = TenantSerializer
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, PlatformAdminWrites]
    lookup_field = "slug"
    lookup_value_regex = r"[-\w]+"  # a SlugField: other paths (NUL, dots) match no route and answer 404
    http_method_names = ["get", "post", "head", "options"]

    def get_queryset(self) -> QuerySet[Tenant]:
        return Tenant.objects.visible_to(self.request.user).prefetch_related(
            "memberships__user", "namespaces__cluster").order_by("slug")

    def perform_create(self, serializer: Any) -> None:
        data = serializer.validated_data
        serializer.instance = tenant_create(actor=self.request.user, slug=data["slug"], name=data["name"],
                                            cost_center=data.get("cost_center", ""))

    @extend_schema(request=MemberInputSerializer, responses=TenantSerializer)
    @action(detail=True, methods=["post"])
    def members(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        data = MemberInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership_set(actor=request.user, tenant_id=tenant.pk, **data.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=tenant.pk)).data)

    @extend_schema(request=QuotaTargetInputSerializer, responses=TenantSerializer)
    @action(detail=True, methods=["post"], url_path="quota-target")
    def quota_target(self, request: Request, slug: str) -> Response:
        """Where the tenant's future quota grants go: `resourcequota` or `clusterqueue` (Kueue)."""
        tenant = self.get_object()
        data = QuotaTargetInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant_quota_target_set(actor=request.user, tenant_id=tenant.pk, **data.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=tenant.pk)).data)

    @extend_schema(request=NamespaceInputSerializer, responses=TenantSerializer)
    @action(detail=True, methods=["post"])
    def namespaces(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        data = NamespaceInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        namespace_assign(actor=request.user, tenant_id=tenant.pk if data.validated_data["assign"] else None,
                         cluster_id=data.validated_data["cluster"].pk, namespace=data.validated_data["namespace"])
        return Response(self.get_serializer(self.get_queryset().get(pk=tenant.pk)).data,
                        status=status.HTTP_200_OK)
