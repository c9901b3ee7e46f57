"""Who may see hardware identifiers, and how they are hidden from everybody else. The ONE place for this rule.

Sensitive: any attribute/key whose name contains ``uuid``, ``serial``, ``pciBusID`` or ``pcieRoot`` (case-insensitive,
so ``resource.kubernetes.io/pciBusID`` and ``parentUUID`` match), the ``parent`` card of a DRA partition, and any
key named ``parent``. Platform roles (platform-admin, approver, security-approver, superusers) see them; tenant roles
(tenant-member, tenant-lead) and finance see ``REDACTED``; so does an API token without the ``inventory:sensitive``
scope, whoever its user is. Pages and API both call these functions.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings

from core.identity import in_any_group
from core.types import RequestUser

REDACTED = "redacted"
_SENSITIVE_NAME = re.compile(r"uuid|serial|pcibusid|pcieroot", re.IGNORECASE)
_CACHE_ATTR = "_portal_can_see_sensitive"
# API token requests: the authentication sets this frozenset of scopes on the user (apitokens, not imported here).
_SCOPES_ATTR = "api_token_scopes"
SENSITIVE_SCOPE = "inventory:sensitive"


def can_see_sensitive(user: RequestUser | None) -> bool:
    """True for superusers and members of a platform role; cached on the user object (one query per request).

    A request authenticated with an API token also needs the token's `inventory:sensitive` scope, whatever the
    user's roles. That check comes before the cache and costs nothing, so the cached role answer stays valid.
    """
    if user is None or not user.is_authenticated:
        return False
    token_scopes = getattr(user, _SCOPES_ATTR, None)
    if token_scopes is not None and SENSITIVE_SCOPE not in token_scopes:
        return False
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is None:
        groups = settings.PORTAL_SENSITIVE_DATA_GROUPS  # inventory knows group names, not the portal's roles
        cached = in_any_group(user, groups)
        setattr(user, _CACHE_ATTR, cached)
    return cached


def is_sensitive_name(name: object) -> bool:
    """``uuid``/``serial``/``pciBusID``/``pcieRoot`` anywhere in the name, or a last path segment ``parent``."""
    text = str(name)
    return bool(_SENSITIVE_NAME.search(text)) or text.rsplit("/", 1)[-1].lower() == "parent"


def redact_tree(value: Any, user: RequestUser) -> Any:
    """A copy of a JSON value with the values of sensitive keys (at any depth) replaced by REDACTED."""
    if can_see_sensitive(user):
        return value
    return redact_json(value)


def redact_json(value: Any) -> Any:
    """A copy of a JSON value with the values of sensitive keys (at any depth) replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_sensitive_name(k) else redact_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value



def redact_attributes(attrs: Any, user: RequestUser) -> dict[str, Any]:
    """DRA attributes/capacities (``{"uuid": {"string": "GPU-…"}}``) with sensitive values hidden from non-platform users."""
    if not isinstance(attrs, dict):
        return {}
    redacted: dict[str, Any] = redact_tree(attrs, user)
    return redacted


def redact_value(name: str, value: Any, user: RequestUser) -> Any:
    """One named value (e.g. ``Device.parent``): REDACTED when the name is sensitive and the user may not see it."""
    if value in ("", None) or can_see_sensitive(user) or not is_sensitive_name(name):
        return value
    return REDACTED


# ------------------------------------------------------------------------------------------------ node names
# With PORTAL_REDACT_NODE_NAMES, API answers to anybody who may not see sensitive data (tenant roles, finance, tokens
# without `inventory:sensitive`) carry a pseudonym instead of every node name, wherever it appears: as a value, a
# dict key (free units per node), or inside a string (device keys `node/<node>/<resource>`, messages). It is applied
# to the response data of every REST API view, before rendering (JSON, CSV, JSON lines alike), so no serializer can
# forget it. The pseudonym is stable (an HMAC of the name under the SECRET_KEY), so relations between answers hold.

# A DNS-1123 subdomain as it appears in text: node names are made of these characters.
_NAME_TOKEN = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")
_names_cache: tuple[tuple[int, int], frozenset[str]] | None = None


def node_pseudonym(name: str) -> str:
    """`node-` and 12 hex digits of HMAC-SHA256(name): stable across requests and processes, not reversible."""
    key = hashlib.sha256(f"portal-node-pseudonym:{settings.SECRET_KEY}".encode()).digest()
    return "node-" + hmac.new(key, name.encode(), hashlib.sha256).hexdigest()[:12]


def known_node_names() -> frozenset[str]:
    """Every node name the inventory has seen (tombstones included: history still names them). Cached per process
    until a node row is added or removed (node names are immutable in Kubernetes)."""
    from django.db.models import Count, Max

    from inventory.models import Node

    global _names_cache
    stamp = Node.objects.aggregate(n=Count("id"), last=Max("id"))
    key = (stamp["n"] or 0, stamp["last"] or 0)
    if _names_cache is None or _names_cache[0] != key:
        _names_cache = (key, frozenset(Node.objects.values_list("name", flat=True).distinct()))
    return _names_cache[1]


def redacts_node_names(user: RequestUser | None) -> bool:
    """Whether API answers to `user` carry node pseudonyms instead of node names."""
    return bool(settings.PORTAL_REDACT_NODE_NAMES) and not can_see_sensitive(user)


class NodeNameRedactor:
    """Replaces known node names with their pseudonyms in a JSON value (keys, values and inside strings)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self._pseudonyms: dict[str, str] = {}

    def pseudonym(self, name: str) -> str:
        found = self._pseudonyms.get(name)
        if found is None:
            found = self._pseudonyms[name] = node_pseudonym(name)
        return found

    def text(self, value: str) -> str:
        if value in self.names:
            return self.pseudonym(value)
        return _NAME_TOKEN.sub(lambda m: self.pseudonym(m[0]) if m[0] in self.names else m[0], value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {(self.text(k) if isinstance(k, str) else k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(item) for item in value]
        return value


class NodeNameRedactionMiddleware:
    """Applies the node-name pseudonyms to REST API responses (DRF's Response is a template response: its data is
    still unrendered here) for users who may not see sensitive data, when PORTAL_REDACT_NODE_NAMES is on."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        return self.get_response(request)

    def process_template_response(self, request: Any, response: Any) -> Any:
        from rest_framework.response import Response

        if not (isinstance(response, Response) and response.data is not None
                and redacts_node_names(getattr(request, "user", None))):
            return response
        view_class = getattr(getattr(getattr(request, "resolver_match", None), "func", None), "cls", None)
        if getattr(view_class, "node_names_redacted", True):
            names = known_node_names()
            if names:
                response.data = NodeNameRedactor(names)(response.data)
        return response


# ------------------------------------------------------------------------------------- other tenants' holders

# The holder claim's identity and its driver config details (`sharing_detail`); that the device is held, by how
# many claims and how it is shared (`sharing`, `holders`, `consumed_capacity`) stays visible.
HOLDER_FIELDS = ("claim_uid", "claim_namespace", "claim_name", "request_name", "share_id", "sharing_detail")


def holder_rule(user: RequestUser) -> Callable[[int, str], bool]:
    """May `user` see who holds a device, or which pod runs on a node, in a namespace? In the namespaces the user may
    see (their tenants'; every namespace for the roles that see every tenant, as the pods and claims lists do) and,
    with `inventory:sensitive` on a token, everywhere for platform roles. Everybody else learns that a unit is in
    use, never by whom ("in use (another tenant)"). Computed once (one query) and applied to many rows."""
    from inventory.scoping import scope_for  # scoping imports the models; this module is imported by them

    if can_see_sensitive(user):
        return lambda cluster_id, namespace: True
    scope = scope_for(user)
    return lambda cluster_id, namespace: not namespace or scope.allows(cluster_id, namespace)


def holder_visible(user: RequestUser, cluster_id: int, namespace: str) -> bool:
    """`holder_rule` for one row."""
    return holder_rule(user)(cluster_id, namespace)


def redact_holder(document: dict[str, Any]) -> dict[str, Any]:
    """A device representation with its holder claim and the pods reserving it hidden (counts kept)."""
    hidden = dict(document)
    for name in HOLDER_FIELDS:
        if hidden.get(name):
            hidden[name] = REDACTED
    hidden["reserved_for"] = [{key: (value if key == "resource" else REDACTED) for key, value in entry.items()}
                              if isinstance(entry, dict) else REDACTED for entry in document.get("reserved_for") or []]
    return hidden
