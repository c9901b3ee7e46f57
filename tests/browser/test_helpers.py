"""The browser tests' own helpers keep the promises the tests rely on."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from portal.tenancy.roles import Role
from tests.browser.conftest import log_in
from tests.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_log_in_returns_only_once_htmx_has_bound_the_page(page: Page, live_server) -> None:
    """A test types into an htmx filter right after `log_in`. On a slow network (or a loaded machine) the URL changes
    well before htmx's deferred script has run, and a keystroke then reaches a form nobody listens to."""
    make_user("alice", Role.TENANT_MEMBER)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 1500, "downloadThroughput": -1, "uploadThroughput": -1})
    log_in(page, live_server, "alice", "/catalog/")
    assert page.evaluate("document.readyState") == "complete"
    assert page.evaluate("typeof window.htmx") == "object"
