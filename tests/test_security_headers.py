"""Security of the pages: a Content-Security-Policy without inline script on every response, no inline script or
handler in any template or in the API docs page, assets served by the app (no CDN), and CSRF enforced on forms and
htmx requests alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from portal.middleware import CONTENT_SECURITY_POLICY

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)


def test_policy_forbids_inline_script() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["script-src"] == "'self'"
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert directives["frame-ancestors"] == "'none'"


def test_no_template_has_inline_script_handlers_or_styles() -> None:
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        if INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text) or " style=" in text:
            offenders.append(str(template.relative_to(TEMPLATES)))
    assert offenders == []


@pytest.mark.django_db
def test_pages_carry_the_policy_and_serve_their_assets(admin_client) -> None:
    page = admin_client.get("/catalog/")
    assert page["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    docs = admin_client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert not INLINE_SCRIPT.search(html)  # the split view loads its initialisation from a URL
    sources = re.findall(r'<script[^>]*src="([^"]+)"', html)
    assert sources
    assert all(src.startswith("/") and not src.startswith("//") for src in sources)  # no CDN
    for src in sources:
        assert admin_client.get(src).status_code == 200, src
    assert admin_client.get("/static/portal.css").status_code == 200  # WhiteNoise, also with DEBUG off


@pytest.mark.django_db
def test_csrf_on_forms_and_htmx(django_user_model) -> None:
    user = django_user_model.objects.create_user("csrf-user", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/access/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token is not None
    assert 'hx-headers=\'{"X-CSRFToken": "' in page.content.decode()  # htmx requests send it too
    assert client.post("/account/tokens/", {"name": "x"}).status_code == 403
    assert client.post("/account/tokens/", {"name": "x"}, HTTP_HX_REQUEST="true").status_code == 403
