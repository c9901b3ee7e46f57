"""Roles are Django groups from day one; later issues attach tenants and workflows to them."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the roles stay importable before Django is set up
    from django.contrib.auth.models import AnonymousUser, User


class Role(StrEnum):
    TENANT_MEMBER = "tenant-member"
    TENANT_LEAD = "tenant-lead"
    APPROVER = "approver"
    SECURITY_APPROVER = "security-approver"
    PLATFORM_ADMIN = "platform-admin"
    FINANCE = "finance"


ROLE_DESCRIPTIONS: dict[Role, str] = {
    Role.TENANT_MEMBER: "Browses the catalog and inventory of their tenant, generates manifests.",
    Role.TENANT_LEAD: "A tenant member who also requests quota for the tenant's namespaces.",
    Role.APPROVER: "Reviews quota requests.",
    Role.SECURITY_APPROVER: "Reviews adminAccess and privileged-exception tickets.",
    Role.PLATFORM_ADMIN: "Registers clusters, curates the catalog, sees violations and drift.",
    Role.FINANCE: "Reads chargeback and audit data (finance / auditor).",
}


def user_has_role(user: User | AnonymousUser, role: Role) -> bool:
    from core.identity import in_any_group  # here: the roles stay importable before Django is set up

    return in_any_group(user, (role.value,))
