"""OpenAPI: TokenAuthentication as an HTTP bearer scheme (imported by ApiTokensConfig.ready)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # drf-spectacular's registry
    target_class = "apitokens.authentication.TokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        scheme = build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Bearer", bearer_format="ap_<prefix>_<secret>",  # noqa: S106
        )
        scheme["description"] = ("An API token (docs/tokens.md). Each endpoint needs a scope: inventory:read, "
                                 "inventory:sensitive, chargeback:read, audit:read or requests:write.")
        return scheme
