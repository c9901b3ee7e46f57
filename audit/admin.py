"""Changes made in the Django admin are audited like the services' writes (docs/audit.md, "The admin").

`AuditedModelAdmin` records one event per add, change and delete, and per row of the bulk "delete selected" action,
inside the transaction that makes the change: the admin's add/change/delete views already run in one; the bulk
action does not, so `delete_queryset` opens it. Changes record the changed fields only, before and after, many-to-many
fields included (group memberships, permissions): they are compared after `save_related`, once Django has saved them.
Secret fields (`audit_secret_fields`, and any model field with `audit_secret = True` such as the encrypted kubeconfig)
are compared but never recorded: they appear as "[set]", "[empty]" or "[replaced]".

Every ModelAdmin that lets anyone write uses this class; tests/audit/test_admin_walk.py walks every registered admin
and fails for one whose changes leave no event.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models, router, transaction
from django.db.models import QuerySet
from django.forms import BaseForm
from django.http import HttpRequest

from audit.services import audit_record

SECRET_SET, SECRET_EMPTY, SECRET_REPLACED = "[set]", "[empty]", "[replaced]"
_BEFORE = "_audit_before"  # attribute of the admin form carrying the state read in save_model to save_related


class AuditedModelAdmin(admin.ModelAdmin):
    """A ModelAdmin whose adds, changes and deletes (single and bulk) each write an audit event.

    Verbs are `<audit_entity>.<audit_verbs[action]>`, by default `<model name>.created|updated|deleted`.
    """

    audit_entity = ""  # the verb's prefix; empty: the model name
    audit_verbs = {"add": "created", "change": "updated", "delete": "deleted"}
    audit_secret_fields: tuple[str, ...] = ()

    # ------------------------------------------------------------------------------------------------- state

    def audit_verb(self, action: str) -> str:
        return f"{self.audit_entity or self.model._meta.model_name}.{self.audit_verbs[action]}"

    def audit_fields(self) -> list[Any]:
        """The model's concrete fields (not the primary key, not auto_now timestamps) and its many-to-many fields."""
        opts = self.model._meta
        concrete = [f for f in opts.concrete_fields if not f.primary_key and not getattr(f, "auto_now", False)]
        return [*concrete, *opts.many_to_many]

    def audit_is_secret(self, field: Any) -> bool:
        return field.name in self.audit_secret_fields or bool(getattr(field, "audit_secret", False))

    def audit_secret_marker(self, field: Any, value: Any) -> str:
        """What the log shows instead of a secret value."""
        return SECRET_SET if value else SECRET_EMPTY

    def audit_state(self, obj: models.Model) -> dict[str, Any]:
        """The row's values as the database holds them, secrets included (compared, never recorded). Foreign keys
        are primary keys; many-to-many fields the sorted names of the related rows."""
        state: dict[str, Any] = {}
        for field in self.audit_fields():
            if field.many_to_many:
                related = getattr(obj, field.name).all() if obj.pk is not None else []
                state[field.name] = sorted(str(item) for item in related)
            else:
                state[field.name] = field.value_from_object(obj)
        return state

    def _shown(self, name: str, value: Any, *, replaced: bool = False) -> Any:
        field = next((f for f in self.audit_fields() if f.name == name), None)
        if field is None or not self.audit_is_secret(field):
            return value
        marker = self.audit_secret_marker(field, value)
        return SECRET_REPLACED if replaced and marker == SECRET_SET else marker

    def _stored(self, obj: models.Model) -> models.Model:
        return type(obj)._base_manager.select_for_update().get(pk=obj.pk)

    # ---------------------------------------------------------------------------------------------- recording

    def audit_changed(self, request: HttpRequest, obj: models.Model, before: dict[str, Any], after: dict[str, Any],
                      *, data: dict[str, Any] | None = None) -> None:
        """Record a change of `obj` from state `before` to `after` (one event; nothing when nothing changed)."""
        changed = [name for name in after if after[name] != before.get(name)]
        if not changed and not data:
            return
        was = {n: self._shown(n, before.get(n)) for n in changed}
        now = {n: self._shown(n, after[n], replaced=bool(before.get(n))) for n in changed}
        audit_record(actor=request.user, verb=self.audit_verb("change"), target=obj, before=was, after=now,
                     data={"via": "admin", "changed": changed, **(data or {})})

    def _audit_deleted(self, request: HttpRequest, obj: models.Model, *, bulk: bool = False) -> None:
        state = self.audit_state(obj)
        audit_record(actor=request.user, verb=self.audit_verb("delete"), target=obj,
                     before={n: self._shown(n, v) for n, v in state.items()},
                     data={"via": "admin", **({"bulk": True} if bulk else {})})

    # ----------------------------------------------------------------------------------------- admin hooks

    def save_model(self, request: HttpRequest, obj: Any, form: BaseForm, change: bool) -> None:
        # The stored state before this save, read under a row lock; many-to-many fields are saved later.
        setattr(form, _BEFORE, self.audit_state(self._stored(obj)) if change and obj.pk is not None else None)
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if not hasattr(form, _BEFORE):
            raise RuntimeError(f"{type(self).__name__}.save_model must call super().save_model (the audit needs it)")
        obj, before = form.instance, getattr(form, _BEFORE)
        after = self.audit_state(obj)
        inlines = _inline_changes(formsets)
        if before is None:
            audit_record(actor=request.user, verb=self.audit_verb("add"), target=obj,
                         after={n: self._shown(n, v) for n, v in after.items()},
                         data={"via": "admin", **({"inlines": inlines} if inlines else {})})
        else:
            self.audit_changed(request, obj, before, after, data={"inlines": inlines} if inlines else None)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._audit_deleted(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        # The "delete selected" action runs outside a transaction: the events and the deletion commit together.
        with transaction.atomic(using=router.db_for_write(self.model)):
            for obj in queryset:
                self._audit_deleted(request, obj, bulk=True)
            super().delete_queryset(request, queryset)


def _inline_changes(formsets: Any) -> list[dict[str, Any]]:
    """What the inline formsets added, changed and deleted (saved by save_related), by row."""
    changes = []
    for formset in formsets or []:
        entry = {
            "model": formset.model._meta.label_lower,
            "added": [str(o) for o in getattr(formset, "new_objects", [])],
            "changed": {str(o): list(fields) for o, fields in getattr(formset, "changed_objects", [])},
            "deleted": [str(o) for o in getattr(formset, "deleted_objects", [])],
        }
        if entry["added"] or entry["changed"] or entry["deleted"]:
            changes.append(entry)
    return changes
