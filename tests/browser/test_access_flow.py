"""Browser: an adminAccess exception across three users — a tenant member requests it, two security approvers
approve it, the portal labels the namespace in the simulator and the sync confirms it (active), then a security
approver revokes it and the label is removed."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from portal.enforcement.services import ADMIN_LABEL, enforcement_apply, grants_confirm
from portal.models import Grant
from portal.tenancy.roles import Role
from tests.browser.conftest import BROWSER_TIMEOUT_MS, log_in, shot
from tests.conftest import make_user
from tests.conftest import sync_once as _sync
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _page(browser: Browser, live_server, username: str, path: str):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(BROWSER_TIMEOUT_MS)
    log_in(page, live_server, username, path)
    return page


def test_request_two_security_approvals_active_then_revoked(browser: Browser, live_server,
                                                            live_demo) -> None:
    sim, cluster = live_demo
    member = make_user("mia", Role.TENANT_MEMBER)
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    make_user("sam", Role.SECURITY_APPROVER)
    make_user("sol", Role.SECURITY_APPROVER)

    tenant = _page(browser, live_server, "mia", "/access/")
    tenant.select_option("#id_kind", "admin-access")
    tenant.select_option("#id_target", label="demo / ml-research")
    tenant.fill("#id_window_hours", "4")
    tenant.fill("#id_ticket_ref", "CHG-2211")
    tenant.fill("#id_reason", "DCGM diagnostics on GPUs that training jobs hold")
    tenant.click("text=Submit for security review")
    expect(tenant.locator("[data-testid=request-state]")).to_have_attribute("data-state", "submitted")
    expect(tenant.locator("button[value=approve]")).to_have_count(0)  # never one's own request
    request_url = tenant.url
    shot(tenant, "access-submitted")

    for username, state in (("sam", "submitted"), ("sol", "approved")):
        reviewer = _page(browser, live_server, username, "/access/queue/")
        reviewer.click("table.access-queue a")
        reviewer.fill("#comment", f"{username}: window and ticket look right")
        reviewer.click("button[value=approve]")
        expect(reviewer.locator("[data-testid=request-state]")).to_have_attribute("data-state", state)
        expect(reviewer.locator(f"li[data-reviewer={username}]")).to_contain_text("Approve")
        shot(reviewer, f"access-approved-by-{username}")
    expect(reviewer.locator("[data-testid=grant-state]")).to_have_attribute("data-state", "pending")

    # What the Celery worker, the sync and beat do, against the simulator over real HTTP.
    assert enforcement_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"
    assert sim.store.get_stored("namespaces", None, "ml-research").obj["metadata"]["labels"][ADMIN_LABEL] == "true"
    _sync(cluster)
    assert grants_confirm()["activated"] == 1

    tenant.goto(request_url)
    expect(tenant.locator("[data-testid=grant-state]")).to_have_attribute("data-state", "active")
    expect(tenant.locator("button[value=revoke]")).to_have_count(0)  # tenants do not revoke
    expect(tenant.locator("table.trail")).to_contain_text("grant.active")
    shot(tenant, "access-active")

    reviewer.goto(request_url)
    reviewer.fill("#revoke-reason", "maintenance finished early")
    reviewer.click("button[value=revoke]")
    expect(reviewer.locator("[data-testid=grant-state]")).to_have_attribute("data-state", "revoked")
    enforcement_apply(cluster_id=cluster.pk, namespace="ml-research")
    assert ADMIN_LABEL not in (sim.store.get_stored("namespaces", None, "ml-research").obj["metadata"]
                               .get("labels") or {})
    _sync(cluster)
    assert grants_confirm()["cleaned"] == 1
    reviewer.reload()
    expect(reviewer.locator("dl.facts").last).to_contain_text("removed from the cluster")
    shot(reviewer, "access-revoked")
    assert Grant.objects.get().ended_by.username == "sol"
