"""The portal app's models, defined in each domain's models module and imported here so that Django finds them
(app label `portal`: audit rows reference `portal.<model>`)."""

from __future__ import annotations

from portal.access.models import (
    EXCEPTION_KEY_MAX,
    EXCEPTION_KEY_SEPARATOR,
    AccessKind,
    AccessPolicy,
    AccessRequest,
    AccessRequestQuerySet,
    AccessReview,
    Grant,
    GrantQuerySet,
    GrantUse,
    exception_key,
)
from portal.chargeback.models import (
    ChargeMapping,
    ChargeRollup,
    ChargeRollupDay,
    ChargeRollupDirty,
    ChargeRollupState,
)
from portal.enforcement.models import EnforcementSettings, Violation
from portal.notifications.models import Notification
from portal.quota.models import (
    DEFAULT_APPROVALS,
    DEFAULT_APPROVALS_ABOVE,
    DEFAULT_THRESHOLD,
    ClusterQueueQuotaState,
    QuotaDecision,
    QuotaNamespaceState,
    QuotaNamespaceStateQuerySet,
    QuotaOwnership,
    QuotaPolicy,
    QuotaRequest,
    QuotaRequestQuerySet,
)
from portal.telemetry.models import IdlePolicy, TelemetryFinding, TelemetrySource, UtilizationRollup
from portal.tenancy.models import (
    GLOBAL_VIEW_GROUPS,
    NamespaceLabelRule,
    QuotaTarget,
    Tenant,
    TenantMembership,
    TenantNamespace,
    TenantNamespaceQuerySet,
    TenantQuerySet,
    sees_all_tenants,
)

__all__ = [
    "DEFAULT_APPROVALS",
    "DEFAULT_APPROVALS_ABOVE",
    "DEFAULT_THRESHOLD",
    "EXCEPTION_KEY_MAX",
    "EXCEPTION_KEY_SEPARATOR",
    "GLOBAL_VIEW_GROUPS",
    "AccessKind",
    "AccessPolicy",
    "AccessRequest",
    "AccessRequestQuerySet",
    "AccessReview",
    "ChargeMapping",
    "ChargeRollup",
    "ChargeRollupDay",
    "ChargeRollupDirty",
    "ChargeRollupState",
    "ClusterQueueQuotaState",
    "EnforcementSettings",
    "Grant",
    "GrantQuerySet",
    "GrantUse",
    "IdlePolicy",
    "NamespaceLabelRule",
    "Notification",
    "QuotaDecision",
    "QuotaNamespaceState",
    "QuotaNamespaceStateQuerySet",
    "QuotaOwnership",
    "QuotaPolicy",
    "QuotaRequest",
    "QuotaRequestQuerySet",
    "QuotaTarget",
    "TelemetryFinding",
    "TelemetrySource",
    "Tenant",
    "TenantMembership",
    "TenantNamespace",
    "TenantNamespaceQuerySet",
    "TenantQuerySet",
    "UtilizationRollup",
    "Violation",
    "exception_key",
    "sees_all_tenants",
]
