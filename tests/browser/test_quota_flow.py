"""Browser: the whole quota flow across two users — a lead requests, an approver approves, the portal applies the
ResourceQuota to the simulator under its field manager, the sync confirms it, and the lead sees it active."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from portal.quota.services import FIELD_MANAGER, QUOTA_NAME, quota_apply, quota_requests_confirm
from portal.tenancy.roles import Role
from tests.browser.conftest import log_in, shot
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.conftest import sync_once as _sync
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_lead_requests_approver_approves_quota_becomes_active(browser: Browser, live_server,
                                                              live_demo) -> None:
    sim, cluster = live_demo
    lead = make_user("lea", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    make_user("ada", Role.APPROVER)
    OfferingFactory(slug="h100", name="H100 whole card", unit_kind="whole", resource_name="nvidia.com/gpu")

    lead_page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    log_in(lead_page, live_server, "lea", "/quota/")
    lead_page.select_option("#id_target", label="demo / ml-research")
    lead_page.select_option("#id_offering", "h100")
    lead_page.fill("#id_units", "8")
    lead_page.fill("#id_justification", "fine-tuning the 70B model")
    lead_page.click("text=Submit for approval")
    expect(lead_page.locator("h1 .badge")).to_have_attribute("data-state", "submitted")
    request_url = lead_page.url
    expect(lead_page.locator("button[value=approve]")).to_have_count(0)  # never one's own request
    shot(lead_page, "quota-submitted")

    approver_page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    log_in(approver_page, live_server, "ada", "/quota/queue/")
    expect(approver_page.locator("[data-testid=inbox-unread]")).to_have_text("1")
    approver_page.click("table.queue a")
    expect(approver_page.locator("table.context")).to_contain_text("requests.nvidia.com/gpu")
    approver_page.fill("#comment", "approved for Q4")
    approver_page.click("button[value=approve]")
    expect(approver_page.locator("h1 .badge")).to_have_attribute("data-state", "applying")
    shot(approver_page, "quota-approved")

    # What the Celery worker and the sync do, against the simulator over real HTTP.
    # The namespace's existing gpu-quota (40) carries the key: the grant raises it to 48, no second quota.
    assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"
    applied = sim.store.get_stored("resourcequotas", "ml-research", "gpu-quota").obj
    assert applied["spec"]["hard"]["requests.nvidia.com/gpu"] == "48"
    assert applied["metadata"]["managedFields"][-1]["manager"] == FIELD_MANAGER
    assert sim.store.get_stored("resourcequotas", "ml-research", QUOTA_NAME) is None
    _sync(cluster)
    assert quota_requests_confirm()["activated"] == 1

    lead_page.goto(request_url)
    expect(lead_page.locator("h1 .badge")).to_have_attribute("data-state", "active")
    lead_page.goto(f"{live_server.url}/quota/")
    ours = lead_page.locator("tr[data-namespace='ml-research'][data-quota='gpu-quota']"
                             "[data-key='requests.nvidia.com/gpu']")
    expect(ours.locator("td").nth(4)).to_have_text("48")  # hard
    expect(ours.locator("td").nth(7)).to_contain_text("48")  # the effective limit
    shot(lead_page, "quota-active")
