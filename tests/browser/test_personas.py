"""Browser: one walk per persona through the pages the quota and access-exception flows do not cover — a tenant
member, a tenant lead, an approver, a security approver, a platform admin and finance — all on the demo scenario
synced from the simulator, with the demo's curated offerings. Full-page screenshots go to artifacts/; a viewport-sized
copy of each goes to artifacts/viewport/ (the ones in docs/screenshots/ come from there)."""

from __future__ import annotations

import re
from decimal import Decimal
from urllib.parse import urljoin

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from catalog.models import OfferingPrice
from portal.enforcement.violations import scan_cluster
from portal.tenancy.roles import Role
from tests.browser.conftest import ARTIFACTS, BROWSER_TIMEOUT_MS, log_in, shot
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def shots(page: Page, name: str) -> None:
    """The full-page artefact, plus a 1400x900 viewport copy for the docs."""
    shot(page, name)
    (ARTIFACTS / "viewport").mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "viewport" / f"{name}.png", full_page=False)


def _page(browser: Browser, live_server, username: str, path: str) -> Page:
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(BROWSER_TIMEOUT_MS)
    log_in(page, live_server, username, path)
    return page


@pytest.fixture
def demo(live_demo):
    """The synced demo cluster plus the demo's curated offerings (with prices)."""
    call_command("catalog_seed")
    call_command("catalog_refresh")  # capacity, incl. granted quota (the Celery task's job)
    return live_demo


def test_tenant_member_catalog_generator_pending_chargeback_tokens(browser: Browser, live_server, demo) -> None:
    _, cluster = demo
    member = make_user("mia", Role.TENANT_MEMBER)
    give_namespaces(member, cluster, "ml-inference", "batch-jobs", "vision-team", tenant_slug="ml-inference")

    page = _page(browser, live_server, "mia", "/catalog/")
    expect(page.locator("h1")).to_contain_text("atalog")
    offering = page.locator("a[href='/catalog/o/a100-mig-1g-10gb/']").first
    expect(offering).to_be_visible()
    shots(page, "tenant-catalog")
    offering.click()
    expect(page).to_have_url(re.compile(r"/catalog/o/a100-mig-1g-10gb/$"))
    expect(page.locator("body")).to_contain_text("nvidia.com/mig-1g.10gb")
    shots(page, "tenant-offering")

    # The generator: an unknown namespace is refused, a good one validates.
    page.goto(f"{live_server.url}/catalog/generate/?offering=a100-mig-1g-10gb")
    expect(page.locator("h1")).to_have_text("Generate a manifest")
    page.select_option("#id_cluster", label="demo")
    page.fill("#id_namespace", "batch-jobs")
    page.fill("#id_name", "embed-batch")
    page.select_option("#id_shape", "job")
    page.fill("#id_count", "1")
    output = page.locator("#output")
    expect(output.locator("#generated-yaml")).to_contain_text("nvidia.com/mig-1g.10gb: 1")
    expect(output.locator("#validation")).to_have_attribute("data-ok", "true")
    page.fill("#id_name", "Not_A_DNS_Name")
    expect(output.locator("[data-testid=generator-errors]")).to_contain_text("name: A DNS label")
    shots(page, "tenant-generate-invalid")
    page.fill("#id_name", "embed-batch")
    expect(output.locator("#validation")).to_have_attribute("data-ok", "true")
    shots(page, "tenant-generate")

    # Their pending pods: the demo's detector-train in vision-team does not schedule.
    page.goto(f"{live_server.url}/inventory/pending-pods/")
    expect(page.locator("h1")).to_have_text("Accelerator pods that do not run")
    expect(page.locator("table.pending tr[data-pod^='vision-team/detector-train']").first).to_be_visible()
    shots(page, "tenant-pending-pods")

    # Their chargeback statement for this month (their tenant only).
    month = timezone.now().strftime("%Y-%m")
    page.goto(f"{live_server.url}/chargeback/?month={month}")
    expect(page.locator("h1")).to_have_text(re.compile(r"^Statement, \w+ \d{4}$"))  # their own, no tenant picker
    expect(page.locator("#tenant")).to_have_count(0)
    rows = page.locator("table.chargeback tbody tr[data-tenant]")
    expect(rows.first).to_be_visible()
    for tenant in rows.evaluate_all("rows => rows.map(r => r.dataset.tenant)"):
        assert tenant == "ml-inference"
    shots(page, "tenant-chargeback")

    # API tokens: create one, it is shown once.
    page.goto(f"{live_server.url}/account/tokens/")
    expect(page.locator("h1")).to_have_text("API tokens")
    expect(page.locator("table.tokens")).to_contain_text("No API tokens yet.")
    page.fill("#id_name", "ci-pipeline")
    page.fill("#id_expires_in_days", "30")
    page.click("text=Create token")
    expect(page.locator("h1")).to_have_text("API token created")
    token = page.locator("#new-token").inner_text()
    assert re.fullmatch(r"ap_\w+_\S+", token), token
    expect(page.locator("[role=status].message")).to_contain_text("shown again")
    shots(page, "tenant-token-created")
    page.click("text=Back to your tokens")
    row = page.locator("table.tokens tr[data-token]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("ci-pipeline")
    expect(page.locator("body")).not_to_contain_text(token)  # never again
    shots(page, "tenant-tokens")


def test_tenant_lead_sees_quota_of_their_namespaces(browser: Browser, live_server, demo) -> None:
    _, cluster = demo
    lead = make_user("lea", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    give_namespaces(lead, cluster, "ml-inference", tenant_slug="ml-inference", role="lead")

    page = _page(browser, live_server, "lea", "/quota/")
    expect(page.locator("h1")).to_have_text("GPU quota")
    rows = page.locator("table.quota tbody tr[data-namespace]")
    expect(rows.first).to_be_visible()
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.namespace)")) == {"ml-inference"}
    mig = page.locator("tr[data-namespace='ml-inference'][data-key='requests.nvidia.com/mig-1g.10gb']")
    expect(mig.locator("td").nth(3)).to_have_text("a100-mig-1g-10gb")
    expect(mig.locator("td").nth(4)).to_have_text("4")  # hard, from the demo's gpu-quota
    expect(mig.locator("td").nth(5)).to_have_text("3")  # used
    expect(mig.locator("td").nth(6)).to_have_text("1")  # headroom
    expect(page.locator("#id_target option", has_text="demo / ml-inference")).to_have_count(1)
    expect(page.locator("text=Approval queue")).to_have_count(0)  # leads do not approve
    shots(page, "lead-quota")


def test_approver_queue_and_oversubscription(browser: Browser, live_server, demo) -> None:
    make_user("ada", Role.APPROVER)

    page = _page(browser, live_server, "ada", "/quota/queue/")
    expect(page.locator("h1")).to_have_text("Quota requests waiting")
    expect(page.locator("table.queue")).to_be_visible()
    shots(page, "approver-queue")
    page.goto(f"{live_server.url}/quota/")
    page.click("text=Oversubscription")
    expect(page).to_have_url(f"{live_server.url}/quota/oversubscription/")
    expect(page.locator("h1")).to_have_text("Granted quota against physical capacity")
    mig = page.locator("table.table tbody tr", has_text="A100 80GB MIG 1g.10gb slice")
    expect(mig.locator("td")).to_have_text(["demo", "A100 80GB MIG 1g.10gb slice", "4", "16", "0.25\N{MULTIPLICATION SIGN}"])
    shots(page, "approver-oversubscription")


def test_security_approver_access_queue_and_violations(browser: Browser, live_server, demo) -> None:
    _, cluster = demo
    counts = scan_cluster(cluster.pk)
    make_user("sam", Role.SECURITY_APPROVER)

    page = _page(browser, live_server, "sam", "/access/queue/")
    expect(page.locator("h1")).to_have_text("Exception requests waiting for review")
    expect(page.locator("table.access-queue")).to_be_visible()
    shots(page, "security-queue")

    page.goto(f"{live_server.url}/access/violations/")
    expect(page.locator("h1")).to_have_text("Security violations")
    rows = page.locator("table.violations tbody tr[data-kind]")
    expect(rows.first).to_be_visible()
    assert rows.count() >= 2, counts
    # The demo's gpu-admin namespace: a hand-set admin-access label and a health-probe claim without a grant.
    expect(rows.filter(has_text="gpu-admin/gpu-health-probe")).to_contain_text("without a grant")
    expect(rows.filter(has_text="set by an unknown manager")).to_contain_text("demo / gpu-admin")
    expect(page.locator("text=Admission policy for demo (YAML)")).to_have_count(0)  # platform admins only
    shots(page, "security-violations")


def test_platform_admin_clusters_findings_curation_break_glass_policy_admin(browser: Browser, live_server,
                                                                           demo) -> None:
    _, cluster = demo
    scan_cluster(cluster.pk)
    admin = make_user("pat", Role.PLATFORM_ADMIN)
    admin.is_staff = True  # as demo_users makes the platform admin
    admin.save(update_fields=["is_staff"])
    # portal/migrations/0002 grants this to the group; transactional tests flush migration data.
    Group.objects.get(name=Role.PLATFORM_ADMIN.value).permissions.add(
        Permission.objects.get(content_type__app_label="catalog", codename="curate_offering"))

    page = _page(browser, live_server, "pat", "/inventory/clusters/")
    expect(page.locator("h1")).to_have_text("Clusters")
    expect(page.locator("#results")).to_contain_text("demo")
    shots(page, "admin-clusters")

    page.goto(f"{live_server.url}/inventory/findings/")
    expect(page.locator("h1")).to_have_text("Findings")
    findings = page.locator("table.findings tbody tr[data-finding]")
    expect(findings.first).to_be_visible()
    shots(page, "admin-findings")

    page.goto(f"{live_server.url}/catalog/new/")
    expect(page.locator("h1")).to_contain_text("offering")
    expect(page.locator("#id_slug")).to_be_visible()
    page.click("#offering-form button[type=submit]")  # empty: the form says what is missing, nothing is saved
    expect(page.locator("[data-form-errors]")).to_contain_text("Nothing was saved")
    expect(page.locator("[data-field=slug].has-error")).to_be_visible()
    shots(page, "admin-offering-new")

    page.goto(f"{live_server.url}/access/break-glass/")
    expect(page.locator("h1")).to_have_text("Break glass")
    expect(page.locator("button.danger")).to_have_text("Grant now")
    shots(page, "admin-break-glass")

    page.goto(f"{live_server.url}/access/violations/")
    link = page.locator("a", has_text="Admission policy for demo (YAML)")
    expect(link).to_be_visible()
    response = page.request.get(urljoin(page.url, link.get_attribute("href")))
    assert response.status == 200
    assert response.headers["content-type"].startswith("application/yaml")
    assert "apiVersion" in response.text()
    shots(page, "admin-violations")

    page.goto(f"{live_server.url}/admin/")
    expect(page).to_have_url(f"{live_server.url}/admin/")
    expect(page.locator("#site-name, h1").first).to_be_visible()
    expect(page.locator("body")).to_contain_text("Site administration")
    shots(page, "admin-django-admin")


def test_finance_all_tenant_chargeback_csv_and_audit(browser: Browser, live_server, demo) -> None:
    _, cluster = demo
    give_namespaces(make_user("mia", Role.TENANT_MEMBER), cluster, "ml-inference", "batch-jobs",
                    tenant_slug="ml-inference")
    give_namespaces(make_user("vic", Role.TENANT_MEMBER), cluster, "vision-team", tenant_slug="vision")
    make_user("fin", Role.FINANCE)
    now = timezone.now()
    month = now.strftime("%Y-%m")
    # catalog_seed prices start now (the service refuses a past start); date them back to the month's start so the
    # demo's running pods are charged for the month so far.
    OfferingPrice.objects.update(effective_from=now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))

    page = _page(browser, live_server, "fin", f"/chargeback/?month={month}")
    expect(page.locator("h1")).to_contain_text("Chargeback — all tenants")
    eur = page.locator("section.totals p.total[data-currency=EUR] b")
    expect(eur).to_have_text(re.compile(r"^\d{1,3}(,\d{3})*\.\d\d EUR$"))  # grouped thousands
    assert Decimal(eur.inner_text().split()[0].replace(",", "")) > 0
    tenants = page.locator("table.chargeback tbody tr[data-tenant]")
    expect(tenants.first).to_be_visible()
    assert {"ml-inference"} <= set(tenants.evaluate_all("rows => rows.map(r => r.dataset.tenant)"))
    assert page.locator("svg.chart rect").count() >= 28
    shots(page, "finance-chargeback")

    csv = page.request.get(urljoin(page.url, page.locator("[data-testid=csv]").get_attribute("href")))
    assert csv.status == 200
    assert csv.headers["content-type"].startswith("text/csv")
    header, *lines = csv.text().strip().splitlines()
    assert "tenant" in header.lower()
    assert any("ml-inference" in line for line in lines), lines

    page.select_option("#tenant", "ml-inference")
    page.click("text=Show")
    expect(page.locator("h1")).to_contain_text("Statement of ml-inference")

    page.goto(f"{live_server.url}/audit/")
    expect(page.locator("h1")).to_have_text("Audit log")
    expect(page.locator("table.audit-events tbody tr[data-event]").first).to_be_visible()
    shots(page, "finance-audit")
