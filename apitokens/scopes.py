"""What an API token may do. Views declare the scope they need as plain class attributes (no import of this app):

    token_scope = "inventory:read"          # safe methods (GET, HEAD, OPTIONS)
    token_write_scope = "requests:write"    # other methods; this is the default when only token_scope is declared
    token_write_scope = "admin:write"       # platform-admin-only writes (webhooks, tenants, break-glass)

A view that declares no `token_scope` refuses tokens. `ANY_SCOPE` lets any valid token through (the schema).
"""

from __future__ import annotations

INVENTORY_READ = "inventory:read"
INVENTORY_SENSITIVE = "inventory:sensitive"
CHARGEBACK_READ = "chargeback:read"
AUDIT_READ = "audit:read"
REQUESTS_WRITE = "requests:write"
ADMIN_WRITE = "admin:write"

SCOPES: dict[str, str] = {
    INVENTORY_READ: "Read inventory, catalog, manifests (generate/validate/feasibility), tenants, quota and access.",
    INVENTORY_SENSITIVE: "Also see hardware identifiers (serials, UUIDs, PCI bus IDs) where the user may see them.",
    CHARGEBACK_READ: "Read chargeback reports.",
    AUDIT_READ: "Read the audit log (audit readers only).",
    REQUESTS_WRITE: "Create and act on quota and access requests, and other writes the user's role allows (not "
                    "platform-admin-only ones).",
    ADMIN_WRITE: "Platform-admin-only writes: webhooks, tenants and their members and namespaces, break-glass grants.",
}
DEFAULT_WRITE_SCOPE = REQUESTS_WRITE
ANY_SCOPE = "*"


def scopes_parse(text: str | list[str] | tuple[str, ...]) -> list[str]:
    """A sorted, de-duplicated list of known scopes from "a,b" or a list; ValueError names unknown ones."""
    items = text.split(",") if isinstance(text, str) else list(text)
    scopes = sorted({item.strip() for item in items if item.strip()})
    unknown = [scope for scope in scopes if scope not in SCOPES]
    if unknown:
        raise ValueError(f"Unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}.")
    if not scopes:
        raise ValueError(f"Give at least one scope: {', '.join(SCOPES)}.")
    return scopes
