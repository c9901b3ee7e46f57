"""Factories for tenancy rows (created directly; the services are tested in tests/portal/test_tenancy.py)."""

from __future__ import annotations

import factory

from portal.models import Tenant, TenantMembership, TenantNamespace


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())
    cost_center = "CC-1"


def give_namespaces(user, cluster, *namespaces: str, tenant_slug: str = "team-a", role: str = "member") -> Tenant:
    """Make `user` a member of a tenant that owns `namespaces` in `cluster`."""
    tenant = TenantFactory(slug=tenant_slug)
    TenantMembership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": role})
    for namespace in namespaces:
        TenantNamespace.objects.get_or_create(cluster=cluster, namespace=namespace,
                                              defaults={"tenant": tenant, "source": "explicit"})
    return tenant
