"""Catalog errors. Validation errors carry per-field messages so forms and the API can show them in place."""

from __future__ import annotations

from core.errors import PortalError


class CatalogError(PortalError):
    """A catalog operation was refused; nothing was changed."""


class OfferingValidationError(CatalogError):
    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items()))
