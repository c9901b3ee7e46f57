"""Exceptions a cluster cannot enforce are refused with the reason: adminAccess needs DRA (resource.k8s.io), a
privileged exception needs ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 (Kubernetes 1.30+)."""

from __future__ import annotations

import datetime as dt

import pytest

from portal.access.services import AccessError, access_request_create, access_request_review, break_glass_grant
from portal.models import AccessRequest, Grant
from portal.tenancy.roles import Role
from tests.conftest import live_cluster, make_user, sync_once
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db(transaction=True)
HOUR = dt.timedelta(hours=1)


def _ask(member, cluster, kind: str, **scope) -> AccessRequest:
    return access_request_create(actor=member, kind=kind, cluster_id=cluster.pk, namespace="ml-research",
                                 reason="DCGM diagnostics", ticket_ref="CHG-1", window=HOUR, **scope)


def test_admin_access_refused_without_dra_privileged_allowed(member, platform_admin):
    with live_cluster("legacy-no-dra", name="old") as (_, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        with pytest.raises(AccessError, match=r"DRA adminAccess is unavailable on this cluster: DRA not available on "
                                              r"this cluster \(Kubernetes 1\.31\)"):
            _ask(member, cluster, "admin-access")
        with pytest.raises(AccessError, match="unavailable on this cluster: DRA not available"):
            break_glass_grant(actor=platform_admin, kind="admin-access", cluster_id=cluster.pk,
                              namespace="ml-research", reason="incident", ticket_ref="INC-1", window=HOUR)
        assert not AccessRequest.objects.exists()
        assert _ask(member, cluster, "privileged", service_account="debug").pk


def test_privileged_refused_without_admission_policies(member):
    with live_cluster("legacy-no-dra", name="old", api="no-admission-policies") as (_, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        with pytest.raises(AccessError, match=r"Privileged exception is unavailable on this cluster: "
                                              r"ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 not served "
                                              r"on this cluster \(Kubernetes 1\.29\); it needs Kubernetes 1\.30"):
            _ask(member, cluster, "privileged", service_account="debug")
        assert not AccessRequest.objects.exists()


@pytest.mark.slow  # one live legacy cluster per API profile (about 3 s each)
@pytest.mark.parametrize("scenario", ["legacy-dra-v1beta1", "legacy-dra-v1beta2"])
def test_admin_access_works_on_beta_dra_and_is_refused_after_a_downgrade(scenario, member):
    with live_cluster(scenario, name="beta") as (sim, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        request = _ask(member, cluster, "admin-access")
        # the control plane goes back to a release without DRA before the reviewers approve
        sim.serve_api("no-dra")
        sync_once(cluster)
        reviewer = make_user("sec", Role.SECURITY_APPROVER)
        with pytest.raises(AccessError, match="DRA not available on this cluster"):
            access_request_review(actor=reviewer, request_id=request.pk, approve=True, comment="ok")
        assert not Grant.objects.exists()
