"""Audit pages: readers only, filters with an htmx partial, detail with the chain links, verify button, escaping."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse

from audit.models import AuditEvent
from audit.permissions import SESSION_FLAG, nav_visible
from audit.services import audit_record
from tests.audit.conftest import record, tampering
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _pages() -> list[tuple[str, str]]:
    event = record(1)[0]
    return [("get", reverse("audit:event_list")), ("get", event.get_absolute_url()),
            ("post", reverse("audit:verify"))]


def test_anonymous_users_are_sent_to_login(client: Client) -> None:
    for method, url in _pages():
        response = getattr(client, method)(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("fixture", ["member", "lead", "approver", "security_approver"])
def test_other_roles_are_refused(client: Client, request: pytest.FixtureRequest, fixture: str) -> None:
    client.force_login(request.getfixturevalue(fixture))
    for method, url in _pages():
        assert getattr(client, method)(url).status_code == 403, url


@pytest.mark.parametrize("fixture", ["finance", "platform_admin", "plain_platform_admin"])
def test_audit_readers_see_the_pages(client: Client, request: pytest.FixtureRequest, fixture: str) -> None:
    client.force_login(request.getfixturevalue(fixture))
    for method, url in _pages():
        assert getattr(client, method)(url).status_code == 200, url


def test_superusers_are_always_readers(client: Client) -> None:
    client.force_login(make_user("root", superuser=True))
    assert client.get(reverse("audit:event_list")).status_code == 200


def test_reader_groups_come_from_settings(client: Client, settings, approver, finance) -> None:
    settings.PORTAL_AUDIT_READER_GROUPS = ["approver"]
    client.force_login(approver)
    assert client.get(reverse("audit:event_list")).status_code == 200
    client.force_login(finance)
    assert client.get(reverse("audit:event_list")).status_code == 403


def test_the_nav_link_shows_for_readers_only(client: Client, member, finance) -> None:
    page = reverse("catalog:offering_list")
    link = f'href="{reverse("audit:event_list")}"'
    client.force_login(member)
    assert link not in client.get(page).content.decode()
    client.force_login(finance)
    assert link in client.get(page).content.decode()


def test_the_nav_link_costs_no_query_once_the_session_knows(django_assert_num_queries, member) -> None:
    request = RequestFactory().get("/")
    request.user = member
    request.session = {}
    assert nav_visible(request) is False  # first time: one query, then remembered
    assert request.session[SESSION_FLAG] is False
    with django_assert_num_queries(0):
        assert nav_visible(request) is False


def test_the_list_filters_and_answers_htmx_with_the_results_partial(client: Client, finance) -> None:
    client.force_login(finance)
    one, two = Group.objects.create(name="alpha"), Group.objects.create(name="beta")
    with transaction.atomic():
        audit_record(actor=finance, verb="offering.created", target=one)
        audit_record(actor=None, verb="price.set", target=two)
    url = reverse("audit:event_list")
    full = client.get(url, {"verb": "price.set"})
    assert "<h1>Audit log</h1>" in full.content.decode()
    assert [e.verb for e in full.context["page_obj"]] == ["price.set"]
    partial = client.get(url, {"q": "alph"}, HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="results">')
    assert "<h1>" not in body
    assert [e.target_repr for e in partial.context["page_obj"]] == ["alpha"]
    assert [e.verb for e in client.get(url, {"actor_kind": "system"}).context["page_obj"]] == ["price.set"]
    assert [e.verb for e in client.get(url, {"actor": "fin"}).context["page_obj"]] == ["offering.created"]
    assert [e.verb for e in client.get(url, {"verb": "offering.*"}).context["page_obj"]] == ["offering.created"]
    assert [e.verb for e in client.get(url, {"target_type": "auth.group", "target_id": str(two.pk)})
            .context["page_obj"]] == ["price.set"]
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert list(client.get(url, {"occurred_from": later}).context["page_obj"]) == []
    assert len(client.get(url, {"occurred_to": later}).context["page_obj"]) == 2


def test_the_list_paginates(client: Client, finance) -> None:
    client.force_login(finance)
    record(55)
    response = client.get(reverse("audit:event_list"))
    assert len(response.context["page_obj"]) == 50
    assert "Page 1 of 2" in response.content.decode()
    assert len(client.get(reverse("audit:event_list"), {"page": 2}).context["page_obj"]) == 5


def test_hostile_values_are_rendered_escaped(client: Client, finance) -> None:
    client.force_login(finance)
    group = Group.objects.create(name=HOSTILE[:150])
    with transaction.atomic():
        event = audit_record(actor=finance, verb="x.changed", target=group, data={"note": HOSTILE},
                             before={HOSTILE: HOSTILE}, after={"v": HOSTILE}, reason=HOSTILE)
    for url in (reverse("audit:event_list"), event.get_absolute_url()):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body
        assert "<img src=x" not in body
        assert "&lt;script&gt;alert(" in body


def test_the_detail_page_shows_state_and_chain_links(client: Client, finance) -> None:
    client.force_login(finance)
    first, second, third = record(3, reason="rotation")
    body = client.get(second.get_absolute_url()).content.decode()
    assert second.hash in body
    assert first.get_absolute_url() in body
    assert third.get_absolute_url() in body
    assert "content matches" in body
    assert "rotation" in body
    assert client.get(reverse("audit:event_detail", kwargs={"pk": 999999})).status_code == 404


def test_the_detail_page_flags_an_edited_row(client: Client, finance) -> None:
    client.force_login(finance)
    event = record(1)[0]
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET verb = 'forged' WHERE id = %s", [event.id])
    assert "content does not match its hash" in client.get(event.get_absolute_url()).content.decode()


def test_verify_button_reports_the_result(client: Client, finance, checkpoint_key) -> None:
    client.force_login(finance)
    events = record(3)
    url = reverse("audit:verify")
    assert client.get(url).status_code == 405
    response = client.post(url, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="verify-result" class="check-ok"')
    assert "Intact" in body
    assert "3 events checked" in body
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [events[1].id])
    body = client.post(url).content.decode()
    assert "<h1>Audit chain verification</h1>" in body
    assert "Broken" in body
    assert f"row {events[2].id}</a>: deleted" in body


def test_the_list_query_count_does_not_grow_with_rows(client: Client, finance, django_assert_max_num_queries) -> None:
    client.force_login(finance)
    record(5)
    with django_assert_max_num_queries(7) as captured:
        client.get(reverse("audit:event_list"))
    count = len(captured)
    record(40)
    with django_assert_max_num_queries(count):
        client.get(reverse("audit:event_list"))
    assert AuditEvent.objects.count() == 45


def test_verify_button_reports_a_failed_checkpoint(client: Client, finance, checkpoint_key) -> None:
    from audit.checkpoints import checkpoint_create

    client.force_login(finance)
    events = record(3)
    checkpoint = checkpoint_create()
    with tampering() as cursor:  # remove the newest row: the rest of the chain still links up
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [events[-1].id])
    body = client.post(reverse("audit:verify"), HTTP_HX_REQUEST="true").content.decode()
    assert "Broken" in body
    assert f"checkpoint {checkpoint.pk} (head #{events[-1].id}): row {events[-1].id}, the head at this checkpoint, " \
           "no longer exists" in body


def test_the_detail_page_flags_a_broken_link(client: Client, finance) -> None:
    client.force_login(finance)
    first, second, third = record(3)
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [second.id])
    assert "does not link to this event" in client.get(first.get_absolute_url()).content.decode()
    assert "missing: no event has the previous hash" in client.get(third.get_absolute_url()).content.decode()
