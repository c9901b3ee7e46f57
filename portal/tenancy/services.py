"""Tenancy services: tenants, memberships, namespace ownership. Each entry point is one durable transaction that
writes its audit event; the label rule is applied from the mirrored namespaces (inventory) and never overrides an
explicit assignment."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction

from audit.services import audit_record
from core.errors import PortalError
from inventory.k8s.semantics import is_dns_label, is_qualified_name
from inventory.models import Cluster, Namespace
from portal.tenancy.models import NamespaceLabelRule, QuotaTarget, Tenant, TenantMembership, TenantNamespace


class TenancyError(PortalError):
    pass


@transaction.atomic(durable=True)
def tenant_create(*, actor: User | None, slug: str, name: str, cost_center: str = "") -> Tenant:
    if not is_dns_label(slug):
        raise TenancyError("A tenant slug is a DNS label (it is also the namespace label value).")
    if not (name or "").strip() or len(name) > 120:
        raise TenancyError("A name of 1-120 characters is required.")
    if Tenant.objects.filter(slug=slug).exists():
        raise TenancyError(f"Tenant {slug!r} exists already.")
    tenant = Tenant.objects.create(slug=slug, name=name.strip(), cost_center=(cost_center or "")[:64])
    audit_record(actor=actor, verb="tenant.created", target=tenant,
                 after={"slug": slug, "name": tenant.name, "cost_center": tenant.cost_center})
    return tenant


@transaction.atomic(durable=True)
def tenant_quota_target_set(*, actor: User | None, tenant_id: int, quota_target: str) -> Tenant:
    """Where the tenant's future quota grants go: ResourceQuotas or Kueue ClusterQueues (docs/queues.md). Requests
    already made keep their target; idempotent."""
    if quota_target not in QuotaTarget.values:
        raise TenancyError(f"The quota target is one of {', '.join(QuotaTarget.values)}.")
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    if tenant.quota_target == quota_target:
        return tenant
    before = tenant.quota_target
    tenant.quota_target = quota_target
    tenant.save(update_fields=["quota_target"])
    audit_record(actor=actor, verb="tenant.quota_target_set", target=tenant, before={"quota_target": before},
                 after={"quota_target": quota_target})
    return tenant


@transaction.atomic(durable=True)
def membership_set(*, actor: User | None, tenant_id: int, username: str, role: str | None) -> TenantMembership | None:
    """Add a member, change their role, or remove them (role None). Idempotent."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise TenancyError(f"No user {username!r}.")
    if role is not None and role not in TenantMembership.Role.values:
        raise TenancyError("The role is member or lead.")
    current = TenantMembership.objects.filter(tenant=tenant, user=user).first()
    before = {"role": current.role} if current else None
    if role is None:
        if current is None:
            return None
        current.delete()
        audit_record(actor=actor, verb="tenant.member_removed", target=tenant, before={"user": username, **before})
        return None
    if current is not None and current.role == role:
        return current
    membership, _ = TenantMembership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    audit_record(actor=actor, verb="tenant.member_set", target=tenant,
                 before={"user": username, **before} if before else None, after={"user": username, "role": role})
    return membership


@transaction.atomic(durable=True)
def namespace_assign(*, actor: User | None, tenant_id: int | None, cluster_id: int, namespace: str) -> TenantNamespace | None:
    """Assign a namespace to a tenant explicitly (tenant None: remove the assignment). Wins over the label rule."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if not is_dns_label(namespace):
        raise TenancyError("A namespace name is a DNS label.")
    current = TenantNamespace.objects.select_for_update().filter(cluster=cluster, namespace=namespace).first()
    before = {"tenant": current.tenant.slug, "source": current.source} if current else None
    if tenant_id is None:
        if current is None:
            return None
        current.delete()
        audit_record(actor=actor, verb="tenant.namespace_unassigned", target=cluster,
                     before={"namespace": namespace, **before})
        return None
    tenant = Tenant.objects.get(pk=tenant_id)
    row, _ = TenantNamespace.objects.update_or_create(
        cluster=cluster, namespace=namespace,
        defaults={"tenant": tenant, "source": TenantNamespace.Source.EXPLICIT},
    )
    if before != {"tenant": tenant.slug, "source": TenantNamespace.Source.EXPLICIT}:
        audit_record(actor=actor, verb="tenant.namespace_assigned", target=cluster,
                     before={"namespace": namespace, **before} if before else None,
                     after={"namespace": namespace, "tenant": tenant.slug, "source": "explicit"})
    return row


@transaction.atomic(durable=True)
def label_rule_set(*, actor: User | None, label_key: str, cluster_id: int | None = None) -> NamespaceLabelRule:
    if not is_qualified_name(label_key):
        raise TenancyError("Not a label key (prefix/name, e.g. portal.example.com/tenant).")
    cluster = Cluster.objects.get(pk=cluster_id) if cluster_id is not None else None
    current = NamespaceLabelRule.objects.select_for_update().filter(cluster=cluster).first()
    before = {"label_key": current.label_key} if current else None
    rule, _ = NamespaceLabelRule.objects.update_or_create(cluster=cluster, defaults={"label_key": label_key})
    audit_record(actor=actor, verb="tenant.label_rule_set", target=rule, before=before,
                 after={"label_key": label_key, "cluster": cluster.name if cluster else None})
    return rule


def _rule_key(cluster: Cluster, rules: dict[int | None, str]) -> str:
    return rules.get(cluster.pk) or rules.get(None) or ""


@transaction.atomic(durable=True)
def tenant_namespaces_sync(*, actor: User | None = None) -> dict[str, int]:
    """Apply the label rule to every cluster's mirrored namespaces: add, move and remove label-sourced
    assignments; explicit assignments are left alone. Idempotent; every change is audited."""
    rules = dict(NamespaceLabelRule.objects.values_list("cluster_id", "label_key"))
    tenants = {t.slug: t for t in Tenant.objects.all()}
    counts = {"assigned": 0, "moved": 0, "removed": 0}
    for cluster in Cluster.objects.all():
        key = _rule_key(cluster, rules)
        wanted: dict[str, Tenant] = {}
        if key:
            for name, labels in Namespace.objects.live().filter(cluster=cluster).values_list("name", "labels"):
                value = (labels or {}).get(key)
                if value in tenants:
                    wanted[name] = tenants[value]
        existing = {row.namespace: row for row in TenantNamespace.objects.select_for_update()
                    .filter(cluster=cluster).select_related("tenant")}
        for name, tenant in sorted(wanted.items()):
            row = existing.get(name)
            if row is None:
                TenantNamespace.objects.create(tenant=tenant, cluster=cluster, namespace=name,
                                               source=TenantNamespace.Source.LABEL)
                audit_record(actor=actor, verb="tenant.namespace_assigned", target=cluster,
                             after={"namespace": name, "tenant": tenant.slug, "source": "label", "label": key})
                counts["assigned"] += 1
            elif row.source == TenantNamespace.Source.LABEL and row.tenant_id != tenant.pk:
                old = row.tenant.slug
                row.tenant = tenant
                row.save(update_fields=["tenant"])
                audit_record(actor=actor, verb="tenant.namespace_assigned", target=cluster,
                             before={"namespace": name, "tenant": old, "source": "label"},
                             after={"namespace": name, "tenant": tenant.slug, "source": "label", "label": key})
                counts["moved"] += 1
        for name, row in existing.items():
            if row.source == TenantNamespace.Source.LABEL and name not in wanted:
                row.delete()
                audit_record(actor=actor, verb="tenant.namespace_unassigned", target=cluster,
                             before={"namespace": name, "tenant": row.tenant.slug, "source": "label"})
                counts["removed"] += 1
    return counts
