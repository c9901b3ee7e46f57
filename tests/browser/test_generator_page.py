"""Browser: a tenant generates a Job for a MIG offering on the demo cluster, sees it validate, raises the count
until it no longer fits, and reads the explanation."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from portal.tenancy.roles import Role
from tests.browser.conftest import log_in, shot
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_generate_validate_and_explain_a_mig_job(page: Page, live_server, demo_cluster) -> None:
    from catalog.services.manifests import snapshot_forget

    snapshot_forget()
    OfferingFactory(slug="mig-1g", name="A100 MIG 1g.10gb", unit_kind="mig", resource_name="nvidia.com/mig-1g.10gb")
    give_namespaces(make_user("tenant", Role.TENANT_MEMBER), demo_cluster, "batch-jobs", "ml-inference")
    log_in(page, live_server, "tenant", "/catalog/generate/?offering=mig-1g")

    page.select_option("#id_cluster", label="demo")
    page.fill("#id_namespace", "batch-jobs")  # ml-inference has a 1g quota of 4 (3 used): the quota layer would object
    page.fill("#id_name", "embed-batch")
    page.select_option("#id_shape", "job")
    page.fill("#id_count", "2")
    output = page.locator("#output")
    expect(output.locator("#generated-yaml")).to_contain_text("nvidia.com/mig-1g.10gb: 2")
    expect(output.locator("#validation")).to_have_attribute("data-ok", "true")
    expect(output.locator(".explanation")).to_have_attribute("data-schedulable", "true")
    shot(page, "generate-fits")

    # 13 slices are free on the only MIG node: 14 cannot be placed anywhere.
    page.fill("#id_count", "14")
    expect(output.locator("#generated-yaml")).to_contain_text("nvidia.com/mig-1g.10gb: 14")
    expect(output.locator("#validation")).to_have_attribute("data-ok", "false")
    explanation = output.locator(".explanation")
    expect(explanation).to_have_attribute("data-schedulable", "false")
    expect(explanation.locator(".message")).to_contain_text("0/18 nodes are available:")
    expect(explanation.locator(".message")).to_contain_text("Insufficient nvidia.com/mig-1g.10gb")
    expect(explanation.locator(".hints")).to_contain_text("13")  # the largest count placeable today
    expect(output.locator("[data-layer='feasibility']")).to_contain_text("0/18 nodes are available")
    shot(page, "generate-does-not-fit")
