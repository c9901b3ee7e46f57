"""The one rule for answering htmx with a fragment (NetBox's `htmx_partial`): an htmx request that is not a boosted
navigation gets the named partial of the page's template (django-template-partials, `template.html#name`); a full
page load, or a boosted one, gets the whole page. Pages choose their partial here, nowhere else."""

from __future__ import annotations

from typing import cast

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (settings.MIDDLEWARE), which sets `htmx`."""

    htmx: HtmxDetails


def wants_partial(request: HttpRequest) -> bool:
    """Whether to answer with a fragment: an htmx request that is not boosted."""
    htmx = cast(HtmxHttpRequest, request).htmx
    return bool(htmx) and not htmx.boosted


def partial_template(request: HttpRequest, template_name: str, partial: str) -> str:
    """`template_name#partial` when the request wants a fragment, else the whole page's template."""
    return f"{template_name}#{partial}" if wants_partial(request) else template_name


class HtmxPartialMixin:
    """Class-based pages: answer htmx (non-boosted) requests with the template's `partial_name` partial only."""

    request: HttpRequest
    template_name: str
    partial_name = "results"

    def get_template_names(self) -> list[str]:
        return [partial_template(self.request, self.template_name, self.partial_name)]
