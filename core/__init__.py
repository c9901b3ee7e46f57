"""Shared glue every app may import, and which imports no app of ours (.importlinter `core-is-shared-glue`).

- `core.errors`: `PortalError`, the base of every domain error, and `StateConflictError` (409 in the API).
- `core.api`: the DRF pieces every app's API uses (exception handler, schema class, parser, pagination, fields).
- `core.htmx`: the one rule for answering an htmx request with a partial template.

A plain package, not a Django app: it has no models, templates or template tags.
"""
