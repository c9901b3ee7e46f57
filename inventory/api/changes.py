"""`GET /api/v1/changes/`: the CMDB change feed — creations, updates and deletions of clusters, nodes and devices in
commit order per object, resumable from an opaque cursor, without gaps (inventory/changefeed.py,
docs/changes-webhooks.md)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.exceptions import PortalExceptionHandlerMixin
from inventory.api.fast import ORJSONRenderer
from inventory.changefeed import (
    HEAD,
    change_event_json,
    change_events_page,
    cursor_decode,
    cursor_encode,
    feed_head,
)
from inventory.errors import ChangeFeedCursorError, ChangeFeedGoneError
from inventory.models import ChangeEvent
from inventory.redaction import can_see_sensitive

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


class ChangeEventSerializer(serializers.Serializer[Any]):
    cursor = serializers.CharField(help_text="Resume right after this event.")
    id = serializers.IntegerField()
    event = serializers.CharField(help_text="`<object_type>.<action>`, e.g. `node.updated`.")
    action = serializers.ChoiceField(choices=ChangeEvent.Action.choices)
    object_type = serializers.ChoiceField(choices=ChangeEvent.ObjectType.choices)
    object_id = serializers.CharField(help_text="Stable within the cluster: cluster name, node name or device key.")
    cluster = serializers.CharField(help_text="Cluster name.")
    cluster_id = serializers.IntegerField()
    occurred_at = serializers.DateTimeField()
    snapshot = serializers.JSONField(
        allow_null=True,
        help_text="The object's CMDB fields after the change; null for deletions. Hardware identifiers are "
                  "`redacted` for viewers who may not see them.",
    )


class ChangeFeedPageSerializer(serializers.Serializer[Any]):
    results = ChangeEventSerializer(many=True)
    next = serializers.CharField(allow_blank=True,
                                 help_text="Cursor to pass as `since` next time (also when `results` is empty).")
    has_more = serializers.BooleanField(help_text="More events are available right now: ask again at once.")


def _limit(text: str | None) -> int:
    if not text:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        raise ChangeFeedCursorError("limit must be an integer") from None
    if not 1 <= value <= MAX_LIMIT:
        raise ChangeFeedCursorError(f"limit must be between 1 and {MAX_LIMIT}")
    return value


def _types(text: str | None) -> list[str]:
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    unknown = sorted(set(names) - set(ChangeEvent.ObjectType.values))
    if unknown:
        raise ChangeFeedCursorError(
            f"unknown type {', '.join(unknown)}; known: {', '.join(ChangeEvent.ObjectType.values)}"
        )
    return names


class ChangeFeedView(PortalExceptionHandlerMixin, APIView):
    """Changes of clusters, nodes and devices, oldest first; follow `next` forever.

    Events of one object are in commit order and the feed has no gaps: an event that commits late is never behind a
    cursor already handed out. An empty `since` starts at the beginning of the retained history, which always ends
    in the current state (retention keeps every object's latest event). `since=head` answers no events and the cursor
    of "now" (take it, then a full list, then follow it). A cursor older than the retained history answers 410 Gone:
    resync from a full list.
    """

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    renderer_classes = [ORJSONRenderer, BrowsableAPIRenderer]

    @extend_schema(
        operation_id="changes_list",
        parameters=[
            OpenApiParameter("since", OpenApiTypes.STR,
                             description="Cursor from an earlier answer's `next` (or an event's `cursor`); empty: "
                                         "from the beginning; `head`: no events, only the current cursor."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"Events per page, 1 to {MAX_LIMIT} "
                                                                    f"(default {DEFAULT_LIMIT})."),
            OpenApiParameter("type", OpenApiTypes.STR,
                             description="Comma-separated object types: cluster, node, device (default: all)."),
            OpenApiParameter("cluster", OpenApiTypes.STR, description="Only this cluster (name)."),
        ],
        responses={
            200: ChangeFeedPageSerializer,
            400: OpenApiResponse(description="Invalid cursor, limit or type."),
            410: OpenApiResponse(description="The cursor is older than the retained history: resync from a full "
                                             "list."),
        },
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        if "\x00" in (params.get("cluster") or ""):
            raise ValidationError({"cluster": "Not a cluster name."})
        since_text = params.get("since", "")
        if since_text.strip() == HEAD:
            return Response({"results": [], "next": cursor_encode(feed_head()), "has_more": False})
        since = cursor_decode(since_text)
        limit, types = _limit(params.get("limit")), _types(params.get("type"))
        try:
            page = change_events_page(since=since, limit=limit, object_types=types,
                                      cluster=params.get("cluster") or None)
        except ChangeFeedGoneError as exc:
            return Response({"detail": str(exc), "code": "ChangeFeedGoneError"}, status=status.HTTP_410_GONE)
        redact = not can_see_sensitive(request.user)
        return Response({
            "results": [change_event_json(event, redact=redact) for event in page.events],
            "next": cursor_encode(page.next) if page.next is not None else "",
            "has_more": page.has_more,
        })
