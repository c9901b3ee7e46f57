"""Quota pages: permission matrix, the two-user flow through the pages, notifications, other tenants' 404s."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail

from portal.models import Notification, QuotaRequest
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import ClusterFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(lead, approver, member):
    cluster = ClusterFactory(name="lab")
    give_namespaces(lead, cluster, "train", tenant_slug="mine", role="lead")
    give_namespaces(member, cluster, "train", tenant_slug="mine")
    approver.email = "approver@example.invalid"
    approver.save()
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    return cluster, offering


def _submit(client, cluster, units=4):
    return client.post("/quota/", {"target": f"{cluster.pk}/train", "offering": "h100", "units": units,
                                   "justification": "fine-tune llama"})


def test_two_users_through_the_pages(client, setup, lead, approver, django_capture_on_commit_callbacks) -> None:
    cluster, _ = setup
    client.force_login(lead)
    with django_capture_on_commit_callbacks(execute=True):
        response = _submit(client, cluster)
    request = QuotaRequest.objects.get()
    assert response.status_code == 302
    assert response.url == f"/quota/requests/{request.pk}/"
    assert request.state == "submitted"
    assert Notification.objects.filter(user=approver).count() == 1
    assert mail.outbox[0].to == ["approver@example.invalid"]
    # The requester cannot decide; the page offers no buttons and a forged POST is refused.
    page = client.get(f"/quota/requests/{request.pk}/").content.decode()
    assert 'value="approve"' not in page
    client.post(f"/quota/requests/{request.pk}/", {"action": "approve"})
    request.refresh_from_db()
    assert request.state == "submitted"
    client.force_login(approver)
    queue = client.get("/quota/queue/").content.decode()
    assert f'data-request="{request.pk}"' in queue
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/quota/requests/{request.pk}/", {"action": "approve", "comment": "ok"})
    request.refresh_from_db()
    assert request.state == "applying"
    assert Notification.objects.filter(user=lead, subject__contains="approved").exists()
    client.force_login(lead)
    assert "approved" in client.get("/quota/inbox/").content.decode()


MATRIX = [
    # (fixture, /quota/, /quota/queue/, /quota/oversubscription/, own request, other tenant's request)
    ("anonymous", 302, 302, 302, 302, 302),
    ("member", 200, 403, 403, 200, 404),
    ("lead", 200, 403, 403, 200, 404),
    ("approver", 200, 200, 200, 200, 200),
    ("platform_admin", 200, 200, 200, 200, 200),
    ("finance", 200, 403, 403, 200, 200),
]


@pytest.mark.parametrize(("who", "quota", "queue", "over", "own", "other"), MATRIX)
def test_page_permission_matrix(client, request, setup, lead, who, quota, queue, over, own, other) -> None:
    from portal.quota.services import quota_request_create

    cluster, offering = setup
    mine = quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="train", offering_id=offering.pk,
                                units=1, justification="x")
    bob = User.objects.create_user("bob")
    give_namespaces(bob, cluster, "serve", tenant_slug="theirs", role="lead")
    theirs = quota_request_create(actor=bob, cluster_id=cluster.pk, namespace="serve", offering_id=offering.pk,
                                  units=1, justification="x")
    if who != "anonymous":
        client.force_login(request.getfixturevalue(who))
    got = [client.get(url).status_code for url in ("/quota/", "/quota/queue/", "/quota/oversubscription/",
                                                     f"/quota/requests/{mine.pk}/", f"/quota/requests/{theirs.pk}/")]
    expected = [quota, queue, over, own if who != "finance" else 200, other]
    assert got == expected


def test_quota_request_api_flow_and_errors(setup, lead, approver, member) -> None:
    from rest_framework.test import APIClient

    assert setup
    as_lead, as_approver, as_member = APIClient(), APIClient(), APIClient()
    as_lead.force_authenticate(lead)
    as_approver.force_authenticate(approver)
    as_member.force_authenticate(member)
    created = as_lead.post("/api/v1/quota-requests/", {"cluster": "lab", "namespace": "train", "offering": "h100",
                                                        "units": 2, "justification": "eval"}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert as_member.post("/api/v1/quota-requests/", {"cluster": "lab", "namespace": "train", "offering": "h100",
                                                      "units": 2, "justification": "x"}, format="json").status_code == 400
    assert as_lead.post(f"/api/v1/quota-requests/{pk}/approve/", {}, format="json").status_code == 400  # own
    approved = as_approver.post(f"/api/v1/quota-requests/{pk}/approve/", {"comment": "ok"}, format="json")
    assert approved.json()["state"] == "applying"
    assert as_lead.post(f"/api/v1/quota-requests/{pk}/withdraw/", format="json").status_code == 409
    bob = User.objects.create_user("bob2")
    outsider = APIClient()
    outsider.force_authenticate(bob)
    assert outsider.get(f"/api/v1/quota-requests/{pk}/").status_code == 404
    assert outsider.get("/api/v1/quota-requests/").json()["results"] == []
    assert as_lead.get("/api/v1/quotas/").status_code == 200


def test_a_draft_created_through_the_api_is_submitted_through_the_api(setup, lead, approver) -> None:
    from rest_framework.test import APIClient

    from audit.models import AuditEvent

    assert setup
    as_lead, as_approver = APIClient(), APIClient()
    as_lead.force_authenticate(lead)
    as_approver.force_authenticate(approver)
    draft = as_lead.post("/api/v1/quota-requests/", {"cluster": "lab", "namespace": "train", "offering": "h100",
                                                      "units": 2, "justification": "eval", "submit": False},
                         format="json")
    assert draft.json()["state"] == "draft"
    pk = draft.json()["id"]
    assert as_approver.post(f"/api/v1/quota-requests/{pk}/approve/", {"comment": "ok"}, format="json").status_code \
        == 409  # a draft is not in the approvers' queue yet
    assert as_approver.post(f"/api/v1/quota-requests/{pk}/submit/", format="json").status_code == 409  # not theirs
    submitted = as_lead.post(f"/api/v1/quota-requests/{pk}/submit/", format="json")
    assert submitted.status_code == 200, submitted.content
    assert submitted.json()["state"] == "submitted"
    assert AuditEvent.objects.filter(verb="quota_request.submitted", target_id=str(pk)).count() == 1
    approved = as_approver.post(f"/api/v1/quota-requests/{pk}/approve/", {"comment": "ok"}, format="json")
    assert approved.json()["state"] == "applying"


def test_cluster_registration_is_audited_without_the_secret(db) -> None:
    from audit.models import AuditEvent
    from inventory.services.clusters import cluster_register

    kubeconfig = ("apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
                  "users: [{name: u, user: {token: s3cr3t-token}}]\ncontexts: [{name: x, context: {cluster: c, "
                  "user: u}}]\ncurrent-context: x\n")
    cluster_register(name="prod", kubeconfig=kubeconfig)
    cluster_register(name="prod", kubeconfig=kubeconfig, description="EU")
    events = list(AuditEvent.objects.filter(target_type="inventory.cluster").order_by("id"))
    assert [e.verb for e in events] == ["cluster.registered", "cluster.updated"]
    assert all("s3cr3t" not in str(e.before) + str(e.after) + str(e.data) for e in events)


def test_lead_reduces_an_active_grant_from_the_page(client, setup, lead, member,
                                                    django_capture_on_commit_callbacks) -> None:
    from portal.quota.services import quota_request_create

    cluster, offering = setup
    grant = quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="train", offering_id=offering.pk,
                                 units=8, justification="x")
    QuotaRequest.objects.filter(pk=grant.pk).update(state="active")
    client.force_login(member)
    assert 'value="reduce"' not in client.get(f"/quota/requests/{grant.pk}/").content.decode()  # leads only
    client.force_login(lead)
    assert 'value="reduce"' in client.get(f"/quota/requests/{grant.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/quota/requests/{grant.pk}/", {"action": "reduce", "units": "3", "comment": "done early"})
    grant.refresh_from_db()
    assert (grant.state, grant.units) == ("applying", 3)
    client.post(f"/quota/requests/{grant.pk}/", {"action": "reduce", "units": "lots"})
    grant.refresh_from_db()
    assert grant.units == 3


def test_quota_policy_changes_in_the_admin_are_audited(client, platform_admin, setup) -> None:
    from audit.models import AuditEvent
    from portal.models import QuotaPolicy
    from portal.quota.services import approvals_required

    _, offering = setup
    client.force_login(platform_admin)
    response = client.post("/admin/portal/quotapolicy/add/", {"offering": offering.pk, "approvals": 2,
                                                              "threshold_units": 4, "approvals_above": 3})
    assert response.status_code == 302
    assert QuotaPolicy.objects.get().approvals == 2
    assert (approvals_required(offering, 4), approvals_required(offering, 5)) == (2, 3)
    assert AuditEvent.objects.filter(verb="quota_policy.saved").count() == 1
