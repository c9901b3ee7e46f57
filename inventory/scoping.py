"""Tenant scoping of namespaced inventory rows (pods, claims, events, quotas) without inventory knowing about tenants.

The tenancy layer registers itself at start-up (`register_tenancy`, called from the portal's AppConfig.ready — an
explicit import the import linter sees, not a dotted path in settings). It answers two questions:

- `scope_for(user)`: which namespaces' rows the user may *see* — everything (platform roles, finance) or a set of
  (cluster id, namespace) pairs (their tenants'); anonymous users see nothing;
- `targets_for(user, cluster)`: which namespaces of a cluster the user may *target* with a manifest (their tenants'
  namespaces; every tenant namespace for platform roles).

Fail closed: until a tenancy is registered every user sees and targets nothing, and the system check
`inventory.E010` stops the process from serving in that state. Every tenant-visible queryset goes through one entry
point, the querysets' `visible_to(user)` (inventory.models), which calls `scope_for`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.core import checks
from django.db.models import Q

from core.types import RequestUser


@dataclass(frozen=True)
class NamespaceScope:
    """What one user may see of namespaced rows: every namespace, or exactly these (cluster id, namespace) pairs."""

    everything: bool = False
    pairs: frozenset[tuple[int, str]] = field(default_factory=frozenset)

    def allows(self, cluster_id: int, namespace: str) -> bool:
        return self.everything or (cluster_id, namespace) in self.pairs

    def namespaces(self, cluster_id: int) -> set[str] | None:
        """The visible namespaces of one cluster; None: all of them."""
        if self.everything:
            return None
        return {namespace for cid, namespace in self.pairs if cid == cluster_id}

    def q(self, *, cluster_field: str = "cluster_id", namespace_field: str = "namespace") -> Q:
        """A filter for rows with a cluster and a namespace column (no rows when nothing is visible)."""
        if self.everything:
            return Q()
        by_cluster: dict[int, list[str]] = defaultdict(list)
        for cluster_id, namespace in sorted(self.pairs):
            by_cluster[cluster_id].append(namespace)
        condition = Q(pk__in=[])
        for cluster_id, names in by_cluster.items():
            condition |= Q(**{cluster_field: cluster_id, f"{namespace_field}__in": names})
        return condition


NOTHING = NamespaceScope()
EVERYTHING = NamespaceScope(everything=True)

ScopeProvider = Callable[[Any], NamespaceScope]
TargetsProvider = Callable[[Any, Any], Iterable[str]]


@dataclass
class _Tenancy:
    scope: ScopeProvider | None = None
    targets: TargetsProvider | None = None


_tenancy = _Tenancy()


def register_tenancy(*, scope: ScopeProvider, targets: TargetsProvider) -> None:
    """Install the tenancy's answers (the portal does this once, in its AppConfig.ready)."""
    _tenancy.scope, _tenancy.targets = scope, targets


def tenancy_registered() -> bool:
    return _tenancy.scope is not None and _tenancy.targets is not None


def scope_for(user: RequestUser | None) -> NamespaceScope:
    """The namespaces whose rows `user` may see; NOTHING for anonymous users and when no tenancy is registered."""
    if not getattr(user, "is_authenticated", False) or _tenancy.scope is None:
        return NOTHING
    return _tenancy.scope(user)


def targets_for(user: RequestUser | None, cluster: Any) -> list[str]:
    """The namespaces of `cluster` the user may target (generate, validate against quota, dry-run); [] when no
    tenancy is registered or the user is anonymous."""
    if not getattr(user, "is_authenticated", False) or _tenancy.targets is None:
        return []
    return sorted(_tenancy.targets(user, cluster))


@contextmanager
def tenancy_override(*, scope: ScopeProvider, targets: TargetsProvider) -> Iterator[None]:
    """Tests of the inventory on its own: install another tenancy for the duration."""
    saved = (_tenancy.scope, _tenancy.targets)
    register_tenancy(scope=scope, targets=targets)
    try:
        yield
    finally:
        _tenancy.scope, _tenancy.targets = saved


@checks.register(checks.Tags.security)
def check_tenancy_registered(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Scoping fails closed: without a registered tenancy nobody would see any namespaced row; refuse to run so."""
    if tenancy_registered():
        return []
    return [checks.Error(
        "No tenancy is registered for inventory scoping: every user would see no pod, claim or event.",
        hint="Install the `portal` app (its AppConfig.ready calls inventory.scoping.register_tenancy).",
        id="inventory.E010",
    )]
