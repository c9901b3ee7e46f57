"""CMDB API: configuration items with stable identities — clusters, nodes, physical cards and MIG slices/partitions —
and their relations (slice → card → node → cluster), in the conventions NetBox users expect: `?q=` search, filters,
cursor pagination, `?brief=1`, and `ETag`/`If-None-Match` (ConditionalGetMiddleware).

Identity (`source_native_key`, what reconciliation engines match on):

| item | native key |
| --- | --- |
| cluster | `k8s-cluster/<cluster>` |
| node | `k8s-node/<cluster>/<node>` |
| card (DRA, publishes a uuid) | `gpu-uuid/<uuid>` |
| card (DRA, publishes a pciBusID) | `gpu-pci/<cluster>/<node>/<pciBusID>` |
| card (otherwise) | `gpu-slot/<cluster>/<node>/<resource or driver/pool/device>/<index>` |
| DRA partition with a parent uuid | `gpu-partition/<parent uuid>/<device>` (parent: `gpu-uuid/<parent uuid>`) |
| DRA partition otherwise / device-plugin MIG slice | `gpu-partition/<cluster>/<driver>/<pool>/<device>` / `mig-slot/<cluster>/<node>/<resource>/<index>` |

A device plugin reports counts, not cards: its cards are numbered 0…n-1 per node and resource (stable while the
node's count is), and its MIG slices cannot be tied to a card (parent: none, relation to the node only). `id` is a
short hash of the native key: stable, opaque, and shown to everyone; native keys that contain a uuid or PCI bus id
are hardware identifiers and shown only to viewers who may see them (inventory/redaction.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.models import Cluster, Device, Mode, Node, Path
from inventory.redaction import REDACTED, can_see_sensitive

MAX_LIMIT, DEFAULT_LIMIT = 1000, 100
SLICE_MODES = (Mode.MIG, Mode.DRA_PARTITION)


def ci_id(native_key: str) -> str:
    return hashlib.sha256(native_key.encode()).hexdigest()[:24]


def _attribute(attributes: dict[str, Any], name: str, driver: str) -> str:
    """A string DRA attribute, written as `name`, `<driver>/name` or `resource.kubernetes.io/name`."""
    for key in (name, f"{driver}/{name}", f"resource.kubernetes.io/{name}"):
        value = attributes.get(key)
        if isinstance(value, dict) and isinstance(value.get("string"), str):
            return value["string"]
    return ""


@dataclass
class Item:
    type: str
    native_key: str
    name: str
    cluster: str
    node: str = ""
    parent_key: str = ""
    sensitive: bool = False
    details: dict[str, Any] | None = None

    def document(self, *, brief: bool, sensitive_ok: bool) -> dict[str, Any]:
        hidden = self.sensitive and not sensitive_ok
        doc: dict[str, Any] = {"id": ci_id(self.native_key), "type": self.type, "name": self.name,
                               "source_native_key": REDACTED if hidden else self.native_key}
        if brief:
            return doc
        doc["cluster"] = {"id": ci_id(f"k8s-cluster/{self.cluster}"), "name": self.cluster}
        doc["node"] = ({"id": ci_id(f"k8s-node/{self.cluster}/{self.node}"), "name": self.node}
                       if self.node else None)
        doc["parent"] = {"id": ci_id(self.parent_key)} if self.parent_key else None
        doc["attributes"] = self.details or {}
        return doc


# ------------------------------------------------------------------------------------------------ items per row


def _device_details(device: Device) -> dict[str, Any]:
    return {"model": device.model, "mode": device.mode, "memory_mib": device.memory_mib,
            "architecture": device.architecture, "driver_version": device.driver_version,
            "mig_profile": device.mig_profile, "health": device.health, "path": device.path}


def device_items(device: Device, cluster: str) -> Iterator[Item]:
    """The cards or slices of one inventory row (one DRA device, or a node's count of one extended resource)."""
    details = _device_details(device)
    attributes = device.attributes if isinstance(device.attributes, dict) else {}
    if device.path == Path.DRA:
        uuid = _attribute(attributes, "uuid", device.driver)
        pci = _attribute(attributes, "pciBusID", device.driver)
        if device.mode == Mode.DRA_PARTITION:
            parent = device.parent or _attribute(attributes, "parentUUID", device.driver)
            key = (f"gpu-partition/{parent}/{device.device_name}" if parent
                   else f"gpu-partition/{cluster}/{device.driver}/{device.pool}/{device.device_name}")
            yield Item("slice", key, device.device_name, cluster, device.node_name,
                       parent_key=f"gpu-uuid/{parent}" if parent else "", sensitive=bool(parent), details=details)
            return
        if uuid:
            key, sensitive = f"gpu-uuid/{uuid}", True
        elif pci:
            key, sensitive = f"gpu-pci/{cluster}/{device.node_name}/{pci}", True
        else:
            key, sensitive = f"gpu-slot/{cluster}/{device.node_name}/{device.key}/0", False
        yield Item("card", key, device.device_name, cluster, device.node_name, sensitive=sensitive, details=details)
        return
    if device.mode == Mode.MIG:
        for index in range(max(device.capacity, 0)):
            yield Item("slice", f"mig-slot/{cluster}/{device.node_name}/{device.resource_name}/{index}",
                       f"{device.node_name} {device.resource_name} #{index}", cluster, device.node_name,
                       details=details)
        return
    for index in range(round(device.cards)):
        yield Item("card", f"gpu-slot/{cluster}/{device.node_name}/{device.resource_name}/{index}",
                   f"{device.node_name} {device.resource_name} #{index}", cluster, device.node_name,
                   details={**details, "units_per_card": device.units_per_card})


# ------------------------------------------------------------------------------------------------ cursor


def encode_cursor(pk: int, index: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([pk, index]).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[int, int]:
    try:
        pk, index = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not isinstance(pk, int) or not isinstance(index, int) or pk < 0 or index < 0:
            raise ValueError
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationError({"cursor": "Invalid cursor: use the `next` link of the previous page."}) from None
    return pk, index


class CmdbItemSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="Stable opaque id (hash of the native key).")
    type = serializers.ChoiceField(choices=["cluster", "node", "card", "slice"])
    name = serializers.CharField()
    source_native_key = serializers.CharField()
    cluster = serializers.DictField(required=False, allow_null=True)
    node = serializers.DictField(required=False, allow_null=True)
    parent = serializers.DictField(required=False, allow_null=True)
    attributes = serializers.DictField(required=False)


class CmdbPageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    results = CmdbItemSerializer(many=True)


PARAMETERS = [
    OpenApiParameter("q", OpenApiTypes.STR, description="Search names, nodes, models and keys (case-insensitive)."),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="Cluster name."),
    OpenApiParameter("node", OpenApiTypes.STR, description="Node name."),
    OpenApiParameter("brief", OpenApiTypes.BOOL, description="Only id, type, name and native key."),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="From the `next` link of the previous page."),
    OpenApiParameter("limit", OpenApiTypes.INT, description=f"Page size (default {DEFAULT_LIMIT}, max {MAX_LIMIT})."),
]


class _CmdbView(APIView):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # The parameters are read raw below; PostgreSQL text cannot hold NUL (a DataError, a 500, otherwise).
        refused = {name: "Null characters are not allowed." for name, values in request.query_params.lists()
                   if any("\x00" in value for value in values)}
        if refused:
            raise ValidationError(refused)

    def _limit(self, request: Request) -> int:
        try:
            limit = int(request.query_params.get("limit", DEFAULT_LIMIT))
        except ValueError:
            raise ValidationError({"limit": "An integer."}) from None
        return max(1, min(limit, MAX_LIMIT))

    def _page(self, request: Request, rows: QuerySet[Any], expand: Any) -> Response:
        """Walk rows by primary key from the cursor, expanding each into items, until the page is full."""
        limit = self._limit(request)
        start_pk, start_index = decode_cursor(request.query_params["cursor"]) if request.query_params.get(
            "cursor") else (0, 0)
        brief = request.query_params.get("brief") in ("1", "true", "True")
        sensitive_ok = can_see_sensitive(request.user)
        results: list[dict[str, Any]] = []
        next_cursor = None
        for row in self._rows_from(rows, start_pk, batch=limit + 1):
            for index, item in enumerate(expand(row)):
                if row.pk == start_pk and index < start_index:
                    continue
                if len(results) == limit:
                    next_cursor = encode_cursor(row.pk, index)
                    break
                results.append(item.document(brief=brief, sensitive_ok=sensitive_ok))
            if next_cursor:
                break
        next_url = None
        if next_cursor:
            query = request.query_params.copy()
            query["cursor"] = next_cursor
            next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        return Response({"next": next_url, "results": results})

    @staticmethod
    def _rows_from(rows: QuerySet[Any], start_pk: int, *, batch: int) -> Iterator[Any]:
        """Rows with pk ≥ start_pk in pk order, read in keyset batches of about a page. Not `.iterator()`: outside a
        transaction its server-side cursor is WITH HOLD, which makes PostgreSQL materialise every remaining row
        (all 30,500 devices of `large`) to serve one page."""
        after = start_pk - 1
        while True:
            chunk = list(rows.filter(pk__gt=after).order_by("pk")[:batch])
            yield from chunk
            if len(chunk) < batch:
                return
            after = chunk[-1].pk

    @staticmethod
    def _search(rows: QuerySet[Any], request: Request, fields: tuple[str, ...]) -> QuerySet[Any]:
        q = (request.query_params.get("q") or "").strip()
        if q:
            condition = Q()
            for field in fields:
                condition |= Q(**{f"{field}__icontains": q})
            rows = rows.filter(condition)
        if request.query_params.get("cluster"):
            rows = rows.filter(**{"name" if rows.model is Cluster else "cluster__name":
                                  request.query_params["cluster"]})
        return rows


class CmdbClusterView(_CmdbView):
    """Clusters as configuration items."""

    @extend_schema(parameters=PARAMETERS, responses=CmdbPageSerializer)
    def get(self, request: Request) -> Response:
        rows = self._search(Cluster.objects.all(), request, ("name", "description"))

        def expand(cluster: Cluster) -> Iterator[Item]:
            yield Item("cluster", f"k8s-cluster/{cluster.name}", cluster.name, cluster.name,
                       details={"description": cluster.description, "sync_enabled": cluster.sync_enabled})

        return self._page(request, rows, expand)


class CmdbNodeView(_CmdbView):
    """Nodes (live) as configuration items, related to their cluster."""

    @extend_schema(parameters=PARAMETERS, responses=CmdbPageSerializer)
    def get(self, request: Request) -> Response:
        rows = self._search(Node.objects.live().select_related("cluster"), request, ("name",))
        if request.query_params.get("node"):
            rows = rows.filter(name=request.query_params["node"])

        def expand(node: Node) -> Iterator[Item]:
            info = ((node.raw or {}).get("status") or {}).get("nodeInfo") or {}
            yield Item("node", f"k8s-node/{node.cluster.name}/{node.name}", node.name, node.cluster.name,
                       details={"kubelet_version": node.kubelet_version, "ready": node.ready,
                                "architecture": info.get("architecture", ""),
                                "gpu_product": (node.labels or {}).get("nvidia.com/gpu.product", ""),
                                "extended_resources": {k: node.capacity.get(k) for k in node.extended_resources}})

        return self._page(request, rows, expand)


class _DeviceItemsView(_CmdbView):
    item_type = ""

    def _rows(self, request: Request) -> QuerySet[Device]:
        rows = Device.objects.select_related("cluster").only(
            "pk", "cluster__name", "key", "path", "mode", "node_name", "resource_name", "driver", "pool",
            "device_name", "model", "memory_mib", "architecture", "driver_version", "mig_profile", "health",
            "units_per_card", "parent", "cards", "capacity", "attributes")
        rows = rows.filter(mode__in=SLICE_MODES) if self.item_type == "slice" else rows.exclude(mode__in=SLICE_MODES)
        if request.query_params.get("node"):
            rows = rows.filter(node_name=request.query_params["node"])
        return self._search(rows, request, ("key", "node_name", "model", "device_name", "resource_name"))

    @extend_schema(parameters=PARAMETERS, responses=CmdbPageSerializer)
    def get(self, request: Request) -> Response:
        def expand(device: Device) -> Iterator[Item]:
            return (item for item in device_items(device, device.cluster.name) if item.type == self.item_type)

        return self._page(request, self._rows(request), expand)


class CmdbCardView(_DeviceItemsView):
    """Physical cards (whole GPUs), related to their node and cluster."""

    item_type = "card"


class CmdbSliceView(_DeviceItemsView):
    """MIG slices and DRA partitions, related to their parent card where it is known."""

    item_type = "slice"
