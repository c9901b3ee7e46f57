"""Submitting Django admin forms the way a browser does: read the form's fields from the rendered page, change some,
post them back. Keeps the admin walk independent of how each ModelAdmin builds its form."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

FormData = dict[str, Any]


class _AdminFormParser(HTMLParser):
    """The successful controls of the page's model form (`<form id="<model>_form">`): inputs, selects, textareas."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.data: FormData = {}
        self._in_form = False
        self._select: tuple[str, bool] | None = None  # (name, multiple)
        self._option: str | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def _add(self, name: str, value: str, *, multiple: bool = False) -> None:
        if multiple:
            self.data.setdefault(name, []).append(value)
        else:
            self.data[name] = value

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {key: value if value is not None else "" for key, value in attrs}
        if tag == "form":
            self._in_form = attr.get("id", "").endswith("_form")
            return
        if not self._in_form or "disabled" in attr:
            return
        name = attr.get("name", "")
        if tag == "input" and name:
            kind = attr.get("type", "text").lower()
            if kind in {"submit", "button", "reset", "file", "image"}:
                return
            if kind in {"checkbox", "radio"}:
                if "checked" in attr:
                    self._add(name, attr.get("value", "on"), multiple=kind == "checkbox" and name in self.data)
                return
            self._add(name, attr.get("value", ""))
        elif tag == "select" and name:
            self._select = (name, "multiple" in attr)
            if not self._select[1]:
                self.data.setdefault(name, "")
            else:
                self.data.setdefault(name, [])
        elif tag == "option" and self._select is not None and "selected" in attr:
            self._option = attr.get("value")
            name, multiple = self._select
            if self._option is not None:
                self._add(name, self._option, multiple=multiple)
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            # Browsers drop the one newline that follows <textarea>; Django renders one.
            self.data[self._textarea] = "".join(self._text).removeprefix("\n")
            self._textarea = None


def admin_form_data(html: str) -> FormData:
    parser = _AdminFormParser()
    parser.feed(html)
    return parser.data


def submit(client: Any, url: str, changes: FormData | None = None, **extra: Any) -> Any:
    """GET the admin page at `url`, apply `changes` to its form (a value of None drops the field, as an unchecked
    checkbox does) and POST it back with "Save"."""
    page = client.get(url)
    assert page.status_code == 200, f"GET {url}: {page.status_code}"
    data = admin_form_data(page.content.decode())
    for name, value in (changes or {}).items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    data.setdefault("_save", "Save")
    return client.post(url, data, **extra)
