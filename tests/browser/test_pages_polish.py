"""Browser: the pages a product designer signs off (issue 21 §2) on the demo scenario — the generator opens on valid
YAML, the validator is linked, styled and lists every error coloured by severity, the explainer never sends a
whole-card workload to shared units. Each test takes an `<item>-after.png`: into docs/screenshots/ when
PORTAL_SCREENSHOTS=1 (to refresh the committed ones; the `-before` ones were taken on the code before the change),
else into a temporary directory, so a test run never changes the checkout."""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from portal.tenancy.roles import Role
from tests.browser.conftest import log_in_as
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOTS = (Path(__file__).resolve().parents[2] / "docs" / "screenshots" if os.environ.get("PORTAL_SCREENSHOTS") == "1"
               else Path(tempfile.gettempdir()) / "portal-screenshots")


@pytest.fixture
def demo(live_demo):
    """The synced demo cluster with the demo's offerings, a member and a lead of ml-research, and the other roles."""
    _sim, cluster = live_demo
    call_command("catalog_seed", verbosity=0)
    call_command("catalog_refresh", verbosity=0)
    give_namespaces(make_user("mia", Role.TENANT_MEMBER), cluster, "ml-research", tenant_slug="ml-research")
    return cluster


@pytest.fixture
def lena(demo):
    """The lead of ml-research (who requests quota); abe approves."""
    make_user("abe", Role.APPROVER)
    lead = make_user("lena", Role.TENANT_MEMBER, Role.TENANT_LEAD)
    give_namespaces(lead, demo, "ml-research", tenant_slug="ml-research", role="lead")
    return lead


def _ask(lead, cluster, units: int, justification: str = "fine-tuning"):
    """lena's quota request for H100s in ml-research."""
    from catalog.models import Offering
    from portal.quota.services import quota_request_create

    return quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="ml-research", units=units,
                                offering_id=Offering.objects.get(slug="h100-80gb").pk, justification=justification)


def _after(page: Page, item: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{item}-after.png", full_page=True)


def test_the_generator_opens_on_a_valid_default_with_yaml(browser: Browser, live_server, demo) -> None:
    page = log_in_as(browser, live_server, "mia", path="/catalog/generate/?offering=h100-80gb")
    expect(page.locator("[data-testid=generator-errors]")).to_have_count(0)
    expect(page.locator("#id_shape")).to_have_value("pod")
    expect(page.locator("#generated-yaml")).to_contain_text("kind: Pod")
    expect(page.locator("#generated-yaml")).to_contain_text("namespace: ml-research")
    expect(page.locator("#validation")).to_have_attribute("data-ok", "true")
    _after(page, "generator")
    # Someone who owns no namespace still opens on YAML (no cluster chosen), not on an error.
    make_user("nobody", Role.TENANT_MEMBER)
    other = log_in_as(browser, live_server, "nobody", path="/catalog/generate/")
    expect(other.locator("[data-testid=generator-errors]")).to_have_count(0)
    expect(other.locator("#generated-yaml")).to_contain_text("namespace: default")
    other.context.close()
    page.context.close()


def test_the_explainer_never_sends_a_whole_card_pod_to_shared_units(browser: Browser, live_server, demo) -> None:
    page = log_in_as(browser, live_server, "mia", path="/catalog/generate/?offering=h100-80gb")
    page.fill("#id_count", "8")  # h100-000 has 3 free, h100-001 none: the T4 and MIG-single nodes have "more"
    output = page.locator("#output")
    expect(output.locator("#generated-yaml")).to_contain_text("nvidia.com/gpu: 8")
    expect(output.locator(".explanation")).to_have_attribute("data-schedulable", "false")
    hints = output.locator(".explanation .hints")
    expect(hints).to_contain_text("not whole cards: keep it")
    expect(hints).not_to_contain_text("would fit")
    fix = output.locator("[data-layer='feasibility'] .fix")
    expect(fix).to_contain_text("the largest nvidia.com/gpu request placeable")
    expect(fix).not_to_contain_text("t4-shared")
    expect(fix).not_to_contain_text("without the required node affinity")
    _after(page, "explainer-fix")
    page.context.close()


BROKEN_POD = """apiVersion: v1
kind: Pod
metadata:
  name: probe
spec:
  containers:
  - name: main
    image: 42
    ports:
    - containerPort: "eighty"
  - name: side
    image: busybox
    tty: "yes"
"""
BAD_BG, OK_BG, NEUTRAL_BG = "rgb(253, 232, 230)", "rgb(227, 244, 234)", "rgb(255, 255, 255)"


def _overlaps(page: Page, selector: str) -> list[str]:
    """Pairs of boxes matching `selector` that overlap, and boxes whose text is clipped."""
    return list(page.evaluate(
        """(sel) => { const els = [...document.querySelectorAll(sel)], out = [];
          const boxes = els.map(e => e.getBoundingClientRect());
          for (let i = 0; i < boxes.length; i++) {
            if (els[i].scrollWidth > els[i].clientWidth + 1) out.push(`clipped: ${els[i].textContent.slice(0, 60)}`);
            for (let j = i + 1; j < boxes.length; j++) {
              const a = boxes[i], b = boxes[j];
              if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
                out.push(`${els[i].textContent.slice(0, 40)} overlaps ${els[j].textContent.slice(0, 40)}`); } }
          return out; }""", selector))


def test_the_validator_is_linked_styled_and_lists_every_error_by_severity(browser: Browser, live_server,
                                                                          demo) -> None:
    page = log_in_as(browser, live_server, "mia", path="/catalog/generate/?offering=h100-80gb")
    # From the generator, the YAML opens in the validator (with the cluster): it passes, the fit shown green.
    page.get_by_role("button", name="Open in the validator").click()
    expect(page).to_have_url(f"{live_server.url}/catalog/validate/")
    expect(page.locator("#id_manifest")).not_to_have_value("")
    expect(page.locator("#validation")).to_have_attribute("data-ok", "true")
    fits = page.locator("li.finding[data-code=fits]")
    expect(fits).to_have_css("background-color", OK_BG)
    expect(page.locator("#site-nav").get_by_role("link", name="Validate")).to_have_attribute("aria-current", "page")

    # The label sits above a full-width monospace textarea.
    label, area = page.locator("label[for=id_manifest]").bounding_box(), page.locator("#id_manifest").bounding_box()
    assert label is not None
    assert area is not None
    assert label["y"] + label["height"] <= area["y"] + 1
    assert area["width"] > 900
    expect(page.locator("#id_manifest")).to_have_css("font-family", re.compile("monospace"))

    page.fill("#id_manifest", BROKEN_POD)
    page.get_by_role("button", name="Validate").click()
    report = page.locator("#validation")
    expect(report).to_have_attribute("data-ok", "false")
    errors = report.locator("li.finding[data-severity=error]")
    expect(errors).to_have_count(3)  # every schema error, each with its path
    paths = errors.locator(".path").all_inner_texts()
    assert paths == ["documents[0].spec.containers[0].image", "documents[0].spec.containers[0].ports[0].containerPort",
                     "documents[0].spec.containers[1].tty"], paths
    expect(errors.first).to_have_css("background-color", BAD_BG)
    expect(report.locator("li.finding[data-severity=info]").first).to_have_css("background-color", NEUTRAL_BG)
    assert _overlaps(page, "#validation li.finding") == []
    assert _overlaps(page, "#validation li.finding .message") == []
    _after(page, "validator")
    page.context.close()


def test_forms_say_their_limits_before_submit(browser: Browser, live_server, lena) -> None:
    from portal.models import AccessRequest, QuotaRequest

    page = log_in_as(browser, live_server, "lena", path="/access/")
    window = page.locator("#id_window_hours")
    expect(page.locator("form.access-request")).to_contain_text("DRA adminAccess: at most 8 h")
    expect(page.locator("form.access-request")).to_contain_text("Privileged exception: at most 7 d")
    page.select_option("#id_kind", "admin-access")
    expect(page.locator("#id_service_account")).to_be_disabled()
    expect(page.locator("#id_workload")).to_be_disabled()
    expect(window).to_have_attribute("max", "8")
    page.select_option("#id_kind", "privileged")
    expect(page.locator("#id_service_account")).to_be_enabled()
    expect(window).to_have_attribute("max", "168")
    page.select_option("#id_kind", "admin-access")
    page.fill("#id_ticket_ref", "OPS-7")
    page.fill("#id_reason", "profile the training job")
    window.fill("10")
    page.get_by_role("button", name="Submit for security review").click()  # the browser refuses: max is 8
    assert "8" in window.evaluate("input => input.validationMessage")
    page.evaluate("document.querySelector('form.access-request').noValidate = true")  # the server refuses too
    page.get_by_role("button", name="Submit for security review").click()
    expect(page.locator("form.access-request .error-text")).to_contain_text("DRA adminAccess is granted for at most 8 h")
    assert not AccessRequest.objects.exists()
    page.locator("#id_window_hours").fill("4")
    page.get_by_role("button", name="Submit for security review").click()
    expect(page.locator("dl")).to_contain_text("4 h")
    expect(page.locator("body")).not_to_contain_text("4:00:00")
    _after(page, "access-form")

    page.goto(f"{live_server.url}/quota/")
    form = page.locator("form.quota-request")
    expect(form.locator("label[for=id_units]")).to_have_text("Increase by (units)")
    page.select_option("#id_offering", "h100-80gb")
    page.fill("#id_units", "2")
    expect(page.locator("#quota-total")).to_have_text(re.compile(r"Granted by the portal now: 0 · after this request: 2 of \d+ "
                                                                 r"physical units"))
    expect(page.locator("#quota-over-capacity")).to_be_hidden()
    page.fill("#id_units", "10000")
    expect(page.locator("#quota-total")).to_contain_text("after this request: 10,000 of")
    expect(page.locator("#quota-over-capacity")).to_be_visible()
    expect(page.locator("#id_over_capacity")).to_have_attribute("required", "")
    page.fill("#id_justification", "a big run")
    _after(page, "quota-form")
    # The browser refuses to submit until it is ticked; the server refuses too (the check is not only in the page).
    page.evaluate("document.querySelector('form.quota-request').noValidate = true")
    page.get_by_role("button", name="Submit for approval").click()
    expect(form.locator(".error-text")).to_contain_text("10,000 units in total exceed the")
    assert not QuotaRequest.objects.exists()
    page.fill("#id_units", "10000")
    page.check("#id_over_capacity")
    page.get_by_role("button", name="Submit for approval").click()
    expect(page).to_have_url(re.compile(r"/quota/requests/\d+/$"))
    assert QuotaRequest.objects.get().units == 10_000
    page.context.close()


def test_deny_needs_a_reason_acted_items_are_read_and_states_refresh_until_final(browser: Browser, live_server,
                                                                                 demo, lena) -> None:
    from portal.models import Notification, QuotaRequest

    qr = _ask(lena, demo, 2)
    page = log_in_as(browser, live_server, "abe", path="/quota/inbox/")
    expect(page.locator("ul.inbox li.unread")).to_have_count(1)
    page.goto(f"{live_server.url}/quota/requests/{qr.pk}/")
    deny = page.locator("form.deny")
    expect(deny.locator("#deny-reason")).to_have_attribute("required", "")
    deny.get_by_role("button", name="Deny").click()  # the browser asks for the reason first
    assert deny.locator("#deny-reason").evaluate("input => input.validationMessage")
    deny.evaluate("form => { form.noValidate = true; }")
    deny.get_by_role("button", name="Deny").click()
    expect(page.locator(".messages")).to_contain_text("Say why you deny it")
    qr.refresh_from_db()
    assert qr.state == "submitted"
    page.fill("#deny-reason", "the team's H100 budget is spent until January")
    page.locator("form.deny").get_by_role("button", name="Deny").click()
    expect(page.locator("#request-state")).to_have_attribute("data-state", "denied")
    expect(page.locator("#request-state")).to_have_attribute("data-live", "false")
    _after(page, "deny")
    assert not Notification.objects.filter(user__username="abe", read_at__isnull=True).exists()  # acted on: read
    page.goto(f"{live_server.url}/quota/inbox/")
    expect(page.locator("ul.inbox li.unread")).to_have_count(0)
    page.context.close()

    lead = log_in_as(browser, live_server, "lena", path="/quota/inbox/")
    expect(lead.locator("ul.inbox li.unread").first).to_contain_text(
        f"Quota request #{qr.pk} was denied: the team's H100 budget is spent until January")
    _after(lead, "inbox")

    # A request being applied refreshes its state by itself, and stops asking once it is final.
    applying = _ask(lena, demo, 1, "eval")
    QuotaRequest.objects.filter(pk=applying.pk).update(state="applying")
    path = f"/quota/requests/{applying.pk}/"
    polls: list[str] = []
    lead.on("request", lambda r: polls.append(r.url) if r.url.endswith(path) and r.headers.get("hx-request")
            else None)
    lead.goto(f"{live_server.url}{path}")
    badge = lead.locator("#request-state")
    expect(badge).to_have_attribute("data-live", "true")
    expect(badge).to_have_text("Applying to the cluster")
    QuotaRequest.objects.filter(pk=applying.pk).update(state="active")
    expect(badge).to_have_text("Active", timeout=10_000)
    expect(badge).to_have_attribute("data-live", "false")
    seen = len(polls)
    assert seen >= 1
    lead.wait_for_timeout(4_000)
    assert len(polls) == seen, "polling must stop once the state is final"
    lead.context.close()


def test_chargeback_reads_like_a_statement(browser: Browser, live_server, demo) -> None:
    from urllib.parse import urljoin

    from django.utils import timezone

    from catalog.models import OfferingPrice
    from portal.models import Tenant

    now = timezone.now()
    OfferingPrice.objects.update(effective_from=now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    Tenant.objects.filter(slug="ml-research").update(name="ML Research", cost_center="CC-4711")
    make_user("fin", Role.FINANCE)
    month = f"{now:%Y-%m}"
    page = log_in_as(browser, live_server, "fin", path=f"/chargeback/?month={month}")
    eur = page.locator("section.totals p.total[data-currency=EUR] b")
    expect(eur).to_have_text(re.compile(r"^\d{1,3}(,\d{3})*\.\d\d EUR$"))
    chart = page.locator("svg.chart")
    expect(chart.locator("title").first).to_contain_text("in EUR")
    expect(chart.locator("text.x-tick").first).to_have_text(f"{now:%b} 1")
    assert chart.locator("text.y-tick").count() == 3
    expect(page.locator("[data-testid=priced-explained]")).to_contain_text("Unpriced")
    row = page.locator("table.chargeback tbody tr[data-tenant=ml-research]").first
    expect(row).to_contain_text("ML Research")
    expect(row.locator("[data-testid=cost-centre-cell]")).to_have_text("CC-4711")
    expect(page.locator("table.chargeback tfoot tr[data-currency=EUR]")).to_contain_text("Total")
    _after(page, "chargeback")

    csv = page.request.get(urljoin(page.url, page.locator("[data-testid=csv]").get_attribute("href") or ""))
    start = now.replace(day=1)
    end = (start.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    assert (csv.headers["content-disposition"]
            == f'attachment; filename="chargeback-tenant-{start:%Y%m%d}-{end:%Y%m%d}.csv"')

    page.select_option("#tenant", "ml-research")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("[data-testid=cost-centre]")).to_contain_text("ML Research — cost centre CC-4711")
    offerings = page.locator("table.chargeback tbody td[data-offering]")
    expect(offerings.first).to_be_visible()
    for cell in offerings.all():
        slug = cell.get_attribute("data-offering")
        if slug:
            expect(cell).not_to_have_text(slug)
    page.context.close()


def test_audit_finds_verbs_by_word_names_objects_and_the_api_docs_lead_back(browser: Browser, live_server,
                                                                            demo, lena) -> None:
    from django.contrib.auth.models import User

    from portal.quota.services import quota_request_decide

    qr = _ask(lena, demo, 8)
    quota_request_decide(actor=User.objects.get(username="abe"), request_id=qr.pk, approve=False, comment="no budget")
    make_user("ada", Role.PLATFORM_ADMIN, superuser=True)
    page = log_in_as(browser, live_server, "ada", path="/audit/")
    options = page.locator("datalist#audit-verbs option")
    assert "quota_request.denied" in options.evaluate_all("os => os.map(o => o.value)")
    expect(page.locator("#id_verb")).to_have_attribute("list", "audit-verbs")
    page.fill("#id_verb", "denied")
    rows = page.locator("table.audit-events tbody tr[data-event]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("quota_request.denied")
    expect(rows.first).to_contain_text(f"Quota request #{qr.pk}: 8 \u00d7 NVIDIA H100 80GB")
    expect(rows.first).to_contain_text("in ml-research")
    _after(page, "audit")

    page.goto(f"{live_server.url}/api/docs/")
    expect(page.locator("#site-nav").get_by_role("link", name="Catalog")).to_be_visible()
    expect(page.locator("h1")).to_have_text("API reference")
    expect(page.locator("#swagger-ui .info")).to_be_visible()  # Swagger UI still loads its schema
    _after(page, "api-docs")
    page.get_by_test_id("back-to-portal").click()
    expect(page).to_have_url(f"{live_server.url}/inventory/accelerators/")
    page.context.close()


def test_the_demo_capacity_chart_shows_two_weeks_of_history(browser: Browser, live_server, demo, settings) -> None:
    from catalog.models import CapacitySample

    settings.PORTAL_DEMO = True
    call_command("demo_history", verbosity=0)
    written = CapacitySample.objects.count()
    call_command("demo_history", verbosity=0)  # idempotent: the same hours are not written twice
    assert CapacitySample.objects.count() == written
    page = log_in_as(browser, live_server, "mia", path="/catalog/o/h100-80gb/")
    held = page.locator(".history-chart polyline.line-held")
    expect(held).to_be_visible()
    points = (held.get_attribute("points") or "").split()
    assert len(points) >= 14 * 24, len(points)
    assert len({p.split(",")[1] for p in points}) > 5, "a curve, not a flat line"
    _after(page, "capacity-history")
    page.context.close()


def _tab_to(page: Page, selector: str, *, limit: int = 80) -> None:
    """Press Tab until the focused element matches `selector` (a keyboard user's way there), failing after `limit`."""
    target = page.locator(selector).first
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError(f"{selector} cannot be reached with Tab within {limit} presses")


def test_keyboard_only_generate_validate_then_request_quota(browser: Browser, live_server, lena) -> None:
    """The newcomer's path without a mouse: generator → validator → quota request, every step by Tab and Enter, and
    the focus is always visible (an outline or a box shadow)."""
    from portal.models import QuotaRequest

    page = log_in_as(browser, live_server, "lena", path="/catalog/")
    _tab_to(page, "nav a[href='/catalog/generate/']")
    page.keyboard.press("Enter")
    page.wait_for_url("**/catalog/generate/**")
    expect(page.locator("#generated-yaml")).to_contain_text("kind:")
    _tab_to(page, "button:has-text('Open in the validator')")
    focus = page.evaluate("() => { const s = getComputedStyle(document.activeElement);"
                          " return s.outlineStyle + ' ' + s.boxShadow; }")
    assert "none none" not in focus, f"the focused button shows no focus ring ({focus})"
    page.keyboard.press("Enter")
    page.wait_for_url("**/catalog/validate/**")
    expect(page.locator("textarea")).not_to_be_empty()
    _tab_to(page, "button[type=submit]:has-text('Validate')")
    page.keyboard.press("Enter")
    page.wait_for_load_state("networkidle")
    expect(page.locator("main")).to_contain_text("Schema")
    _tab_to(page, "nav a[href='/quota/']")
    page.keyboard.press("Enter")
    page.wait_for_url("**/quota/")
    _tab_to(page, "#id_target")
    page.keyboard.press("ArrowDown")  # the first (only) namespace lena leads
    _tab_to(page, "#id_offering")
    page.keyboard.type("NVIDIA H100")  # type-ahead selects the offering by its label
    _tab_to(page, "#id_units")
    page.keyboard.type("2")
    _tab_to(page, "#id_justification")
    page.keyboard.type("keyboard-only fine-tuning run")
    _tab_to(page, "button:has-text('Submit for approval')")
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_contain_text("submitted for approval")
    expect(page.locator("main")).not_to_contain_text("{#")  # no template comment leaks into the page
    created = QuotaRequest.objects.get()
    assert (created.units, created.namespace, created.justification) == (2, "ml-research",
                                                                         "keyboard-only fine-tuning run")
    assert created.offering.name.startswith("NVIDIA H100")
    page.context.close()
