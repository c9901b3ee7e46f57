"""Browser: the pages a product designer signs off (issue 21 §2) on the demo scenario — the generator opens on valid
YAML, the validator is linked, styled and lists every error coloured by severity, the explainer never sends a
whole-card workload to shared units. Each test leaves an `<item>-after.png` in docs/screenshots/ (the `-before` ones
were taken on the code before the change)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from portal.roles import Role
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def demo(live_demo):
    """The synced demo cluster with the demo's offerings, a member and a lead of ml-research, and the other roles."""
    _sim, cluster = live_demo
    call_command("catalog_seed", verbosity=0)
    call_command("catalog_refresh", verbosity=0)
    give_namespaces(make_user("mia", Role.TENANT_MEMBER), cluster, "ml-research", tenant_slug="ml-research")
    return cluster


def _log_in(browser: Browser, live_server, username: str, path: str) -> Page:
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/login/?next={path}")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    return page


def _after(page: Page, item: str) -> None:
    page.screenshot(path=SCREENSHOTS / f"{item}-after.png", full_page=True)


def test_the_generator_opens_on_a_valid_default_with_yaml(browser: Browser, live_server, demo) -> None:
    page = _log_in(browser, live_server, "mia", "/catalog/generate/?offering=h100-80gb")
    expect(page.locator("[data-testid=generator-errors]")).to_have_count(0)
    expect(page.locator("#id_shape")).to_have_value("pod")
    expect(page.locator("#generated-yaml")).to_contain_text("kind: Pod")
    expect(page.locator("#generated-yaml")).to_contain_text("namespace: ml-research")
    expect(page.locator("#validation")).to_have_attribute("data-ok", "true")
    _after(page, "generator")
    # Someone who owns no namespace still opens on YAML (no cluster chosen), not on an error.
    make_user("nobody", Role.TENANT_MEMBER)
    other = _log_in(browser, live_server, "nobody", "/catalog/generate/")
    expect(other.locator("[data-testid=generator-errors]")).to_have_count(0)
    expect(other.locator("#generated-yaml")).to_contain_text("namespace: default")
    other.context.close()
    page.context.close()


def test_the_explainer_never_sends_a_whole_card_pod_to_shared_units(browser: Browser, live_server, demo) -> None:
    page = _log_in(browser, live_server, "mia", "/catalog/generate/?offering=h100-80gb")
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
