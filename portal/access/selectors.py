"""Access reads for the pages: a request's audit trail."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from audit.models import AuditEvent
from portal.access.models import AccessRequest, Grant


def access_request_trail(access_request: AccessRequest, grant: Grant | None) -> QuerySet[AuditEvent]:
    """Everything recorded about the request, its grant and the violations linked to the grant."""
    condition = Q(target_type="portal.accessrequest", target_id=str(access_request.pk))
    if grant is not None:
        violation_ids = [str(pk) for pk in grant.violations.values_list("pk", flat=True)]
        condition |= Q(target_type="portal.grant", target_id=str(grant.pk))
        condition |= Q(target_type="portal.violation", target_id__in=violation_ids)
    return AuditEvent.objects.filter(condition).order_by("id")
