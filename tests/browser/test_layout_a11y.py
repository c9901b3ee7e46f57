"""Browser: every persona's pages at a laptop (1,366 px) and a phone (390 px) width — no page scrolls sideways, the
menu collapses behind a button on the phone and "Log out" stays on screen on the laptop, long unbroken text wraps —
axe-core (from the npm registry, pinned in tests/browser/a11y) finds no serious or critical violation, each role
lands where its work is, and errors are the portal's own pages with navigation (never Django's debug page)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from catalog.models import Offering
from portal.access.services import access_request_create
from portal.models import AccessKind
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from tests.browser.conftest import log_in_as, settled
from tests.conftest import make_user
from tests.portal.factories import give_namespaces
from tests.tools import require_tool

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AXE = Path(__file__).parent / "a11y" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
WIDTHS = (1366, 390)

COMMON = ["/catalog/", "/catalog/o/h100-80gb/", "/catalog/generate/?offering=h100-80gb", "/catalog/validate/",
          "/catalog/compare/?o=h100-80gb&o=a100-40gb", "/inventory/accelerators/", "/inventory/capacity/",
          "/inventory/pending-pods/", "/inventory/findings/", "/inventory/nodes/", "/inventory/clusters/",
          "/tenants/", "/quota/inbox/", "/account/tokens/", "/chargeback/", "/utilization/",
          "/utilization/offerings/h100-80gb/"]
PAGES = {
    "mia": [*COMMON, "/quota/", "/access/"],
    "lena": ["/quota/", "/access/", "/catalog/"],
    "abe": ["/quota/queue/", "/quota/oversubscription/"],
    "sol": ["/access/queue/", "/access/violations/"],
    "fin": ["/chargeback/", "/audit/"],
    "ada": ["/inventory/accelerators/", "/catalog/proposals/", "/catalog/new/", "/audit/", "/access/violations/",
            "/quota/oversubscription/", "/inventory/nodes/"],
}
LANDING = {"mia": "/catalog/", "lena": "/catalog/", "abe": "/quota/queue/", "sol": "/access/queue/",
           "fin": "/chargeback/", "ada": "/inventory/accelerators/"}


@pytest.fixture
def portal(live_demo):
    """The demo synced, its offerings, one user per persona, and requests with long unbroken text."""
    _sim, cluster = live_demo
    call_command("catalog_seed", "--prices-from", "2025-01-01", verbosity=0)
    call_command("catalog_refresh", verbosity=0)
    mia = make_user("mia", Role.TENANT_MEMBER)
    give_namespaces(mia, cluster, "ml-research", tenant_slug="ml-research")
    lena = make_user("lena", Role.TENANT_MEMBER, Role.TENANT_LEAD)
    give_namespaces(lena, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    make_user("abe", Role.APPROVER)
    make_user("sol", Role.SECURITY_APPROVER)
    make_user("fin", Role.FINANCE)
    make_user("ada", Role.PLATFORM_ADMIN, superuser=True)
    long_word = "x" * 300
    quota = quota_request_create(actor=lena, cluster_id=cluster.pk, namespace="ml-research",
                                 offering_id=Offering.objects.get(slug="h100-80gb").pk, units=2,
                                 justification=("y" * 4000))
    access = access_request_create(actor=mia, kind=AccessKind.ADMIN_ACCESS, cluster_id=cluster.pk,
                                   namespace="ml-research", reason=f"probe {long_word}", ticket_ref="OPS-1",
                                   window=dt.timedelta(hours=2))
    long_pages = {"lena": [f"/quota/requests/{quota.pk}/"], "abe": ["/quota/queue/", f"/quota/requests/{quota.pk}/",
                                                                       "/quota/inbox/"],
                  "mia": [access.get_absolute_url()], "sol": ["/access/queue/", access.get_absolute_url()]}
    return {"cluster": cluster, "long_pages": long_pages}


def _axe(page: Page) -> list[str]:
    """Serious and critical violations on the page, one line each."""
    page.evaluate(AXE.read_text(encoding="utf-8"))  # evaluated through the DevTools protocol: the CSP does not apply
    found = page.evaluate(
        "async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags}})).violations"
        ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
        ".map(v => `${v.id} (${v.impact}): ${v.nodes.length}x, e.g. ${v.nodes[0].target.join(' ')}`)", AXE_TAGS)
    return list(found)


def _overflow(page: Page) -> int:
    """How far the page scrolls sideways (0: it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def _widest(page: Page) -> str:
    """The innermost element reaching furthest past the right edge, so a failure names what to fix."""
    return str(page.evaluate(
        "() => { let best = null, right = window.innerWidth;"
        " for (const el of document.querySelectorAll('body *')) {"
        "   const r = el.getBoundingClientRect().right;"
        "   if (r > right) { right = r; best = el; } }"
        " if (!best) return '?';"
        " return `<${best.tagName.toLowerCase()} class=\"${best.className}\">`"
        "   + ` ending at ${Math.round(right)} px: ${(best.textContent || '').trim().slice(0, 60)}`; }"))


def test_every_page_of_every_persona_fits_and_has_no_serious_accessibility_violation(
        browser: Browser, live_server, portal) -> None:
    require_tool("npm")
    assert AXE.exists(), "axe-core is missing: scripts/test-prereqs installs it (npm ci in tests/browser/a11y)"
    problems: list[str] = []
    for username, paths in PAGES.items():
        for width in WIDTHS:
            page = log_in_as(browser, live_server, username, width)
            errors: list[str] = []
            page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
            for path in [*paths, *portal["long_pages"].get(username, [])]:
                errors.clear()
                response = page.goto(f"{live_server.url}{path}")
                settled(page)
                where = f"{username} {path} @{width}px"
                if response is None or response.status != 200:
                    problems.append(f"{where}: HTTP {response.status if response else '?'}")
                    continue
                if overflow := _overflow(page):
                    problems.append(f"{where}: the page scrolls {overflow} px sideways; widest: {_widest(page)}")
                problems.extend(f"{where}: console error: {e[:160]}" for e in errors)  # CSP refusals included
                if width == WIDTHS[0]:
                    problems.extend(f"{where}: {v}" for v in _axe(page))
            page.context.close()
    assert not problems, "\n".join(problems)


def test_the_menu_collapses_on_a_phone_and_log_out_stays_on_screen(browser: Browser, live_server, portal) -> None:
    phone = log_in_as(browser, live_server, "ada", 390)
    nav, toggle = phone.locator("#site-nav"), phone.locator(".nav-toggle")
    expect(toggle).to_be_visible()
    expect(nav).to_be_hidden()
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(nav.get_by_role("link", name="Chargeback")).to_be_visible()
    expect(phone.get_by_role("button", name="Log out")).to_be_visible()
    phone.keyboard.press("Escape")
    expect(nav).to_be_hidden()
    expect(toggle).to_be_focused()
    phone.context.close()

    laptop = log_in_as(browser, live_server, "ada", 1366)
    expect(laptop.locator(".nav-toggle")).to_be_hidden()
    log_out = laptop.get_by_role("button", name="Log out")
    expect(log_out).to_be_visible()
    box = log_out.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= 1366
    assert _overflow(laptop) == 0
    laptop.context.close()


def test_each_role_lands_where_its_work_is(browser: Browser, live_server, portal) -> None:
    for username, path in LANDING.items():
        page = log_in_as(browser, live_server, username, 1366)
        expect(page).to_have_url(f"{live_server.url}{path}")
        page.goto(f"{live_server.url}/")
        expect(page).to_have_url(f"{live_server.url}{path}")
        page.context.close()


def test_errors_are_the_portals_own_pages_with_navigation(browser: Browser, live_server, portal) -> None:
    from portal.models import Tenant

    other = Tenant.objects.create(slug="vision", name="Vision")
    page = log_in_as(browser, live_server, "mia", 1366)
    for path, status, heading in ((f"/tenants/{other.slug}/", 404, "Not found"), ("/no-such-page/", 404, "Not found"),
                                  ("/audit/", 403, "Not allowed")):
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None
        assert response.status == status
        expect(page.locator("h1")).to_have_text(heading)
        expect(page.locator("#site-nav").get_by_role("link", name="Catalog")).to_be_visible()
        expect(page.locator("body")).not_to_contain_text("URLconf")
        expect(page.locator("body")).not_to_contain_text("Traceback")
        assert _axe(page) == []
    response = page.goto(f"{live_server.url}/favicon.ico")
    assert response is not None
    assert response.status == 200
    assert "svg" in response.headers["content-type"]
    page.context.close()
