"""Browser: a team whose quota lives in Kueue — its lead asks for more nominal quota on the demo's `research`
ClusterQueue, the approver decides with the queue's limits in view, the portal applies it to the simulator, and
the pretraining Job that waited in the queue is admitted. At desktop and phone widths, nothing spills sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from portal.models import QuotaPolicy, QuotaTarget, Tenant
from portal.quota.kueue import queue_apply
from portal.quota.services import quota_requests_confirm
from portal.tenancy.roles import Role
from tests.browser.conftest import log_in, new_page, settled, shot
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.conftest import sync_once as _sync
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PHONE_WIDTH = 390


def _no_sideways_scroll(page: Page) -> None:
    """The page itself never scrolls sideways (wide tables scroll inside their own box)."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_a_kueue_team_gets_nominal_quota_and_its_waiting_job_is_admitted(browser: Browser, live_server,
                                                                         live_demo) -> None:
    _, cluster = live_demo
    lead = make_user("lea", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    Tenant.objects.filter(slug="ml-research").update(quota_target=QuotaTarget.CLUSTER_QUEUE)
    make_user("ada", Role.APPROVER)
    h100 = OfferingFactory(slug="h100", name="H100 whole card", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"kubesim.io/node-pool": "h100"})
    QuotaPolicy.objects.create(offering=h100, approvals=1, threshold_units=None)

    lead_page = new_page(browser, 1400)
    log_in(lead_page, live_server, "lea", "/inventory/pending-pods/")
    queued = lead_page.locator("text=job-pretrain-70b")
    expect(queued.first).to_be_visible()
    lead_page.goto(f"{live_server.url}/quota/")
    research = lead_page.locator("table.queue-quota tr[data-queue='research'][data-flavor='h100']")
    expect(research.locator("td").nth(3)).to_have_text("8")  # nominal
    lead_page.select_option("#id_target", label="demo / ml-research")
    lead_page.select_option("#id_offering", "h100")
    expect(lead_page.locator("#id_queue")).to_contain_text("research / h100")
    lead_page.fill("#id_units", "32")
    lead_page.fill("#id_justification", "pretraining the 70B model: 4 x 8 GPUs")
    lead_page.click("text=Submit for approval")
    expect(lead_page.locator("h1 .badge")).to_have_attribute("data-state", "submitted")
    expect(lead_page.locator("[data-testid=queue-target]")).to_contain_text("research")
    request_url = lead_page.url
    shot(lead_page, "quota-kueue-submitted")

    approver_page = new_page(browser, 1400)
    log_in(approver_page, live_server, "ada", request_url.removeprefix(live_server.url))
    expect(approver_page.locator("[data-testid=nominal]")).to_have_text("8 (40)")
    expect(approver_page.locator("[data-testid=borrowing-limit]")).to_have_text("0")
    expect(approver_page.locator("table.queue-context")).to_contain_text("ml-research/training")
    # ml-research's ResourceQuota (40, 37 in use) still applies to the pods Kueue admits: the approver is told.
    expect(approver_page.locator("[data-testid=resource-quota-warning]")).to_contain_text(
        "ResourceQuota gpu-quota also limits requests.nvidia.com/gpu in ml-research to 40 (37 in use): pods beyond "
        "3 more are refused at creation")
    shot(approver_page, "quota-kueue-approver")
    approver_page.click("button[value=approve]")
    expect(approver_page.locator("h1 .badge")).to_have_attribute("data-state", "applying")

    # What the Celery worker and the sync do, against the simulator over real HTTP.
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="research") == "applied"
    _sync(cluster)
    assert quota_requests_confirm()["activated"] == 1

    lead_page.goto(request_url)
    expect(lead_page.locator("h1 .badge")).to_have_attribute("data-state", "active")
    lead_page.goto(f"{live_server.url}/quota/")
    expect(research.locator("td").nth(3)).to_have_text("40")
    expect(lead_page.locator("tr[data-queue='research'][data-status='in_sync']")).to_be_visible()
    lead_page.goto(f"{live_server.url}/inventory/pending-pods/")
    settled(lead_page)
    expect(lead_page.locator("text=job-pretrain-70b")).to_have_count(0)  # admitted: no longer queued

    phone = new_page(browser, PHONE_WIDTH)
    log_in(phone, live_server, "lea", "/quota/")
    settled(phone)
    _no_sideways_scroll(phone)
    shot(phone, "quota-kueue-phone")
    phone.goto(request_url)
    settled(phone)
    _no_sideways_scroll(phone)
    shot(phone, "quota-kueue-request-phone")
