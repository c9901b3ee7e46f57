"""Playwright (sync API) against pytest-django's live_server, driving Debian's Chromium."""

from __future__ import annotations

import os

# Playwright's sync API runs an event loop in this thread; Django would then refuse ORM calls from it.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from tests.tools import require_tool

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).parent / "artifacts"  # screenshots (`shot`)


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    playwright = sync_playwright().start()
    yield playwright
    playwright.stop()


@pytest.fixture(scope="session")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    chromium = require_tool("chromium")
    browser = playwright_instance.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


# How long an action or navigation may take. The pages' speed is measured in bench/ (bench/load.py), not here: these
# tests check content, layout and accessibility, on a 2-CPU machine with four test workers beside them (a page took
# ~11 s there on a slow day, when the chargeback statement's first view still built the rollups itself).
BROWSER_TIMEOUT_MS = 30_000
# The same bound for `expect(...)` assertions, whose own default (5 s) a page that swaps its results by htmx can miss
# on such a day although nothing is wrong with it.
expect.set_options(timeout=BROWSER_TIMEOUT_MS)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


# --- Waiting for a page to settle (speed: Playwright's "networkidle" always idles 500 ms more; this returns as soon as
# the document has loaded and no fetch/XHR, htmx's included, is in flight and no htmx swap is settling).
_COUNT_REQUESTS = """(() => {
  let inFlight = 0;
  window.__portalRequestsInFlight = () => inFlight;
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    inFlight += 1;
    this.addEventListener("loadend", () => { inFlight -= 1; }, {once: true});
    return send.apply(this, args);
  };
  const fetch = window.fetch;
  window.fetch = function (...args) {
    inFlight += 1;
    return fetch.apply(this, args).finally(() => { inFlight -= 1; });
  };
})();"""
_SETTLED = ("() => document.readyState === 'complete' && window.__portalRequestsInFlight() === 0"
            " && !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')")


def new_page(browser: Browser, width: int = 1366) -> Page:
    """A page in a fresh context at `width` px whose fetch/XHR requests `settled` can wait for."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_init_script(_COUNT_REQUESTS)
    return context.new_page()


def settled(page: Page) -> None:
    """Wait until the page (made by `new_page`) has loaded and has no request in flight and no htmx swap pending."""
    page.wait_for_load_state("load")
    page.wait_for_function(_SETTLED)
# --- end of the settle section


def log_in_as(browser: Browser, live_server, username: str, width: int = 1366, path: str = "") -> Page:
    """A fresh browser context at `width` px, logged in as `username` (password "pw"), on `path` or their landing
    page. The caller closes `page.context`."""
    page = new_page(browser, width)
    page.set_default_timeout(BROWSER_TIMEOUT_MS)
    page.goto(f"{live_server.url}/login/" + (f"?next={path}" if path else ""))
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    with page.expect_navigation():
        page.click("button[type=submit]")
    settled(page)
    return page


def shot(page: Page, name: str) -> None:
    """A full-page screenshot to tests/browser/artifacts/<name>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def log_in(page: Page, live_server, username: str, next_path: str) -> None:
    """Open `next_path`, get sent to the login form, log in as `username` and land back on `next_path`."""
    page.goto(f"{live_server.url}{next_path}")
    expect(page).to_have_url(re.compile(r"/login/\?next="))
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server.url}{next_path}")
    # The URL changes when the response starts; htmx binds its triggers only once its deferred script has run. A test
    # typing into a filter before that would type into a form that never asks the server (CI saw it once).
    page.wait_for_load_state("load")
