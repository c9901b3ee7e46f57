"""Read-only representation of audit events for the API and the JSON-lines export."""

from __future__ import annotations

from rest_framework import serializers

from audit.models import ActorKind, AuditEvent


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    actor_id = serializers.IntegerField(read_only=True, allow_null=True)
    actor_kind = serializers.ChoiceField(choices=ActorKind.choices, source="effective_actor_kind", read_only=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id", "occurred_at", "actor_id", "actor_name", "actor_kind", "verb", "target_type", "target_id",
            "target_repr", "data", "before", "after", "reason", "request_id", "source_address", "hash_version",
            "prev_hash", "hash",
        ]
        read_only_fields = fields
