"""Every state change a person can make in the Django admin writes an audit row.

The walk visits every ModelAdmin registered on `admin.site`, as a superuser through the real admin views: add (if
the admin offers it), each change of its recipe, delete, and the bulk "delete selected" action. Whenever a row's
stored state changed, an audit event for that row must exist, written by that user, naming the changed fields.
An admin that lets a superuser write but has no recipe here fails the walk, so a new admin cannot slip by; an admin
that lets nobody write must refuse an add. Secrets used along the way (kubeconfig tokens, passwords, their hashes)
must appear in no audit row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.db import models
from django.test import Client, RequestFactory
from django.urls import reverse

from audit.models import AuditEvent
from inventory.models import Cluster, SyncIssue
from portal.models import (
    AccessKind,
    AccessPolicy,
    EnforcementSettings,
    IdlePolicy,
    QuotaOwnership,
    QuotaPolicy,
    TelemetrySource,
)
from tests.audit.admin_forms import FormData, submit
from tests.audit.conftest import PASSWORD, TOKEN_A, TOKEN_B, kubeconfig
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import ClusterFactory

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
SECRETS = (TOKEN_A, TOKEN_B, PASSWORD)
_numbers = itertools.count()


_KUBECONFIG_DIR: dict[str, Path] = {}


@pytest.fixture(autouse=True)
def _kubeconfig_dir(settings: Any, tmp_path: Path) -> None:
    """Kubeconfig files are read only under the operator's directory (docs/deploy.md): give the walk one."""
    directory = tmp_path / "kubeconfigs"
    directory.mkdir()
    for name in ("walk.kubeconfig", "k.yaml"):
        (directory / name).write_text(kubeconfig("walk-file-token"))
    settings.PORTAL_KUBECONFIG_DIR = str(directory)
    _KUBECONFIG_DIR["path"] = directory


def _in_dir(name: str) -> str:
    return str(_KUBECONFIG_DIR["path"] / name)


def _unique(prefix: str) -> str:
    return f"{prefix}-{next(_numbers)}"


def _free_access_kind() -> str:
    return next(kind for kind in AccessKind.values if not AccessPolicy.objects.filter(kind=kind).exists())


@dataclass
class Recipe:
    """How to exercise one admin: `make` an existing row; the form `add` changes (None: the admin offers no add);
    `changes`, each submitted on the change page in turn."""

    make: Callable[[], models.Model]
    add: Callable[[], FormData] | None = None
    changes: list[Callable[[], FormData]] = field(default_factory=list)


RECIPES: dict[str, Recipe] = {
    "auth.group": Recipe(
        make=lambda: Group.objects.create(name=_unique("walk-group")),
        add=lambda: {"name": "walk-added", "permissions": [str(Permission.objects.order_by("pk").first().pk)]},
        changes=[lambda: {"name": "walk-renamed", "permissions": []}],
    ),
    "auth.user": Recipe(
        make=lambda: User.objects.create_user(_unique("walk-user"), password=PASSWORD),
        add=lambda: {"username": "walk-added", "password1": PASSWORD, "password2": PASSWORD,
                     "usable_password": "true"},
        changes=[
            # Roles are groups: granting security-approver and superuser in the admin.
            lambda: {"groups": [str(Group.objects.get_or_create(name="security-approver")[0].pk)],
                     "is_staff": "on", "is_superuser": "on"},
            lambda: {"groups": [], "is_active": None},
        ],
    ),
    "portal.quotapolicy": Recipe(
        make=lambda: QuotaPolicy.objects.create(offering=OfferingFactory(resource_name=GPU)),
        add=lambda: {"offering": str(OfferingFactory(resource_name=GPU).pk), "approvals": "2", "threshold_units": "4",
                     "approvals_above": "3"},
        changes=[lambda: {"approvals": "3"}],
    ),
    "portal.quotaownership": Recipe(
        make=lambda: QuotaOwnership.objects.create(cluster=ClusterFactory(), namespace="ml-research"),
        add=lambda: {"cluster": str(ClusterFactory().pk), "namespace": "vision", "note": "platform owns GPU keys",
                     "portal_owns_accelerator_keys": "on"},
        changes=[lambda: {"portal_owns_accelerator_keys": None}],
    ),
    "portal.accesspolicy": Recipe(
        make=lambda: AccessPolicy.objects.create(kind=_free_access_kind(), max_window="8:00:00",
                                                 review_timeout="1:00:00"),
        add=lambda: {"kind": _free_access_kind(), "max_window": "4:00:00", "approvals": "2",
                     "review_timeout": "2:00:00"},
        changes=[lambda: {"approvals": "3", "delete_claims_at_end": "on"}],
    ),
    "portal.enforcementsettings": Recipe(
        make=lambda: EnforcementSettings.objects.create(cluster=ClusterFactory()),
        add=lambda: {"cluster": str(ClusterFactory().pk), "manage_admission_policy": "on"},
        changes=[lambda: {"manage_admission_policy": None}],
    ),
    "portal.telemetrysource": Recipe(
        make=lambda: TelemetrySource.objects.create(cluster=ClusterFactory()),
        add=lambda: {"cluster": str(ClusterFactory().pk), "prometheus_url": "http://prometheus.example:9090",
                     "cluster_label": "cluster"},
        changes=[lambda: {"prometheus_url": "http://thanos.example:10902", "cluster_label": ""}],
    ),
    "portal.idlepolicy": Recipe(
        make=lambda: IdlePolicy.objects.create(offering=OfferingFactory(resource_name=GPU), threshold=0.05),
        add=lambda: {"offering": str(OfferingFactory(resource_name=GPU).pk), "threshold": "0.1", "hours": "2"},
        changes=[lambda: {"threshold": "0.02"}],
    ),
    "inventory.cluster": Recipe(
        make=lambda: ClusterFactory(kubeconfig=kubeconfig(TOKEN_A)),
        add=lambda: {"name": "walk-added", "connection": "kubeconfig", "kubeconfig": kubeconfig(TOKEN_A),
                     "sync_enabled": "on"},
        changes=[
            lambda: {"kubeconfig": kubeconfig(TOKEN_B)},  # kubeconfig replaced
            lambda: {"connection": "kubeconfig_path", "kubeconfig_path": _in_dir("walk.kubeconfig"),
                     "sync_enabled": None},  # connection changed, sync disabled
        ],
    ),
    "inventory.syncissue": Recipe(
        make=lambda: SyncIssue.objects.create(cluster=ClusterFactory(), kind="Pod", name="p", error="no uid"),
        changes=[dict],  # every field is read-only: a save changes nothing
    ),
}

REGISTERED = sorted(admin.site._registry, key=lambda model: model._meta.label_lower)


def _url(model: type[models.Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def _state(model: type[models.Model], pk: Any) -> dict[str, Any]:
    """What the database holds for the row: concrete fields (auto_now bookkeeping aside) and m2m members."""
    obj = model._base_manager.get(pk=pk)
    state = {f.name: f.value_from_object(obj) for f in model._meta.concrete_fields if not getattr(f, "auto_now", False)}
    for m2m in model._meta.many_to_many:
        state[m2m.name] = sorted(getattr(obj, m2m.name).values_list("pk", flat=True))
    return state


def _events(model: type[models.Model], pk: Any, since: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(id__gt=since, target_type=model._meta.label_lower, target_id=str(pk)))


def _head() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def _assert_audited(label: str, step: str, events: list[AuditEvent], actor: User,
                    changed: set[str] = frozenset()) -> None:
    assert events, f"{label}: {step} through the admin changed the row but wrote no audit event"
    assert all(e.actor_id == actor.pk for e in events), f"{label}: {step}: audit event without the acting user"
    recorded = {name for e in events for name in (e.after or {})}
    assert changed <= recorded, f"{label}: {step}: changed fields {sorted(changed - recorded)} not in the audit event"


def _superuser_request(user: User) -> Any:
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


@pytest.mark.parametrize("model", REGISTERED, ids=lambda model: model._meta.label_lower)
def test_every_admin_change_is_audited(model: type[models.Model], client: Client, platform_admin: User) -> None:
    label, model_admin = model._meta.label_lower, admin.site._registry[model]
    request = _superuser_request(platform_admin)
    client.force_login(platform_admin)
    writable = (model_admin.has_add_permission(request) or model_admin.has_change_permission(request)
                or model_admin.has_delete_permission(request))
    if not writable:
        assert label not in RECIPES, f"{label}: read-only admin, drop its recipe"
        assert client.post(_url(model, "add"), {}).status_code == 403, f"{label}: read-only admin accepted an add"
        return
    assert label in RECIPES, f"{label}: this admin lets a superuser write; add a recipe to the walk"
    # Custom admin actions change state outside the views walked here: each needs its own audit and test.
    assert set(model_admin.get_actions(request)) <= {"delete_selected"}, f"{label}: walk its actions too"
    recipe = RECIPES[label]

    # Add.
    if recipe.add is None:
        assert client.post(_url(model, "add"), {}).status_code == 403, f"{label}: expected no add in this admin"
        obj = recipe.make()
    else:
        existing = set(model._base_manager.values_list("pk", flat=True))
        head = _head()
        response = submit(client, _url(model, "add"), recipe.add())
        assert response.status_code == 302, f"{label}: add refused: {response.content.decode()[:3000]}"
        obj = model._base_manager.exclude(pk__in=existing).get()
        _assert_audited(label, "adding", _events(model, obj.pk, head), platform_admin)

    # Change, each step of the recipe.
    for number, change in enumerate(recipe.changes, 1):
        before, head = _state(model, obj.pk), _head()
        response = submit(client, _url(model, "change", obj.pk), change())
        assert response.status_code == 302, f"{label}: change {number} refused: {response.content.decode()[:3000]}"
        after = _state(model, obj.pk)
        changed = {name for name in after if after[name] != before[name]}
        if changed:
            _assert_audited(label, f"change {number}", _events(model, obj.pk, head), platform_admin, changed)

    # Delete one, then the bulk action on another.
    head = _head()
    response = client.post(_url(model, "delete", obj.pk), {"post": "yes"})
    assert response.status_code == 302, f"{label}: delete refused ({response.status_code})"
    assert not model._base_manager.filter(pk=obj.pk).exists()
    _assert_audited(label, "deleting", _events(model, obj.pk, head), platform_admin)
    other, head = recipe.make(), _head()
    response = client.post(_url(model, "changelist"),
                           {"action": "delete_selected", "_selected_action": [str(other.pk)], "post": "yes"})
    assert response.status_code == 302, f"{label}: bulk delete refused ({response.status_code})"
    assert not model._base_manager.filter(pk=other.pk).exists()
    _assert_audited(label, "bulk deleting", _events(model, other.pk, head), platform_admin)

    # No secret reached the log: neither the values typed in nor the password hashes stored.
    secrets = [*SECRETS, *User.objects.exclude(password="").values_list("password", flat=True)]
    for event in AuditEvent.objects.all():
        text = orjson.dumps([event.data, event.before, event.after, event.target_repr, event.reason]).decode()
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{label}: event {event.verb} records a secret"


def test_every_writable_admin_has_a_recipe_and_no_recipe_is_stale() -> None:
    labels = {model._meta.label_lower for model in REGISTERED}
    assert set(RECIPES) <= labels, f"recipes for admins that are not registered: {sorted(set(RECIPES) - labels)}"


def test_cluster_admin_records_what_changed_without_the_kubeconfig(client: Client, platform_admin: User) -> None:
    """Connection changed, kubeconfig replaced, sync disabled: each audited with before/after; the kubeconfig only
    as set/replaced."""
    cluster = ClusterFactory(name="walk-cluster", kubeconfig=kubeconfig(TOKEN_A))
    client.force_login(platform_admin)
    url = _url(Cluster, "change", cluster.pk)
    assert submit(client, url, {"kubeconfig": kubeconfig(TOKEN_B)}).status_code == 302
    assert submit(client, url, {"connection": "kubeconfig_path", "kubeconfig_path": _in_dir("k.yaml"),
                                "sync_enabled": None}).status_code == 302
    assert submit(client, url, {"clear_kubeconfig": "on"}).status_code == 302
    replaced, moved, cleared = AuditEvent.objects.filter(target_type="inventory.cluster").order_by("id")
    assert (replaced.verb, replaced.before, replaced.after) == (
        "cluster.updated", {"kubeconfig": "[set]"}, {"kubeconfig": "[replaced]"})
    assert replaced.data["changed"] == ["kubeconfig"]
    assert moved.before == {"connection": "kubeconfig", "kubeconfig_path": "", "sync_enabled": True}
    assert moved.after == {"connection": "kubeconfig_path", "kubeconfig_path": _in_dir("k.yaml"),
                           "sync_enabled": False}
    assert (cleared.before, cleared.after) == ({"kubeconfig": "[set]"}, {"kubeconfig": "[empty]"})
    assert {e.actor_name for e in (replaced, moved, cleared)} == {platform_admin.username}
