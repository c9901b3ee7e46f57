"""HTTP front end speaking the Kubernetes REST protocol, and the Simulator facade."""

from __future__ import annotations

import contextlib
import functools
import http.server
import queue
import socket
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
import yaml

from . import apis
from . import patch as patchmod
from . import resources as res
from .admission import DEFAULT_GROUPS, DEFAULT_USER, Attributes, PolicyAdmission, warning_header
from .churn import Churn
from .dcgm import Telemetry, TelemetryConfig
from .errors import ApiError, not_found
from .faults import Faults
from .kueue import KueueAdmission
from .protobuf import decode_protobuf
from .quota import QuotaAdmission
from .selectors import make_filter
from .store import Admit, Store, Watcher

MAX_WATCH_SECONDS = 1800.0
BOOKMARK_INTERVAL = 1.0
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "unsupported",
}
CONTROL_RESTORE = "/kubesim/restore"  # not a Kubernetes path: the simulator's own control endpoint


class _Route:
    __slots__ = ("name", "namespace", "rt", "subresource")

    def __init__(self, rt, namespace, name, subresource):
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource


def _parse_body(raw: bytes, allow_yaml: bool = False):
    if not raw.strip():
        raise ApiError(400, "BadRequest", "the body of the request was empty")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if allow_yaml:
            try:
                doc = yaml.safe_load(raw.decode())
            except (yaml.YAMLError, UnicodeDecodeError) as ye:
                raise ApiError(400, "BadRequest", f"error decoding YAML: {ye}") from ye
            if isinstance(doc, dict):
                return doc
            raise ApiError(400, "BadRequest", "error decoding YAML: not an object") from e
        raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {e}") from e


def _method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


class _WatchEvents:
    """How one watch encodes its events: selectors applied like a real server, objects in full or as Table rows."""

    def __init__(self, r: _Route, flt, table: bool, include: str, full) -> None:
        self.r = r
        self.flt = flt
        self.table = table
        self.include = include
        self.full = full

    def filtered(self, ev):
        """Apply selectors like a real server: objects moving in/out of the selection become ADDED/DELETED."""
        etype, so, prev = ev
        if self.flt is None:
            return etype, so
        now_in = self.flt(so)
        if etype != "MODIFIED" or prev is None:
            return (etype, so) if now_in else (etype, None)
        was_in = self.flt(prev)
        if now_in and was_in:
            return etype, so
        if now_in:
            return "ADDED", so
        if was_in:
            return "DELETED", so
        return etype, None

    def encode(self, etype: str, so) -> bytes:
        if self.table:
            obj = orjson.dumps(res.table(self.r.rt, [so.obj], self.include, {"resourceVersion": str(so.rv)}))
        else:
            obj = self.full(so)
        return b'{"type":"' + etype.encode() + b'","object":' + obj + b"}\n"

    def encode_all(self, events) -> list[bytes]:
        """The events the selectors keep, encoded."""
        return [self.encode(t, so) for t, so in (self.filtered(ev) for ev in events) if so is not None]

    def bookmark(self, rv_now: int) -> bytes:
        obj = {"kind": self.r.rt.kind, "apiVersion": self.r.rt.api_version,
               "metadata": {"resourceVersion": str(rv_now)}}
        return b'{"type":"BOOKMARK","object":' + orjson.dumps(obj) + b"}\n"


class Handler(http.server.BaseHTTPRequestHandler):
    """One connection; dispatches Kubernetes API requests to the store."""

    protocol_version = "HTTP/1.1"
    server_version = "kubesim/1.35"
    sys_version = ""
    dropped = False
    watcher = None
    warnings: list[str]  # Warning headers of the current response (admission warnings)

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        self.warnings = []
        self.server.sim._track(self, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.sim._track(self, False)

    @property
    def sim(self) -> Simulator:
        return self.server.sim

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # ------------------------------------------------------------------ plumbing
    def _send(self, code: int, body: bytes, content_type: str = "application/json", headers: dict | None = None):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for header in dict.fromkeys(map(warning_header, self.warnings)):
            if header is not None:
                self.send_header("Warning", header)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, code: int, doc, headers: dict | None = None):
        self._send(code, orjson.dumps(doc), headers=headers)

    def _send_error(self, err: ApiError, headers: dict | None = None):
        self._send_json(err.code, err.status(), headers)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _admit(self, r: _Route, operation: str, name: str, dry_run: bool) -> Admit:
        """The store's admission hook for this request: runs ValidatingAdmissionPolicies, keeps their warnings."""
        groups = tuple(self.headers.get_all("Impersonate-Group") or ()) or DEFAULT_GROUPS
        attrs = Attributes(
            operation=operation,
            rt=r.rt,
            namespace=name if r.rt.plural == "namespaces" else r.namespace or "",
            name=name,
            subresource=r.subresource,
            dry_run=dry_run,
            username=self.headers.get("Impersonate-User") or DEFAULT_USER,
            groups=groups,
        )

        def admit(obj: dict, old: dict | None) -> None:
            if r.rt.plural == "pods" and operation == "CREATE":
                self.sim.quota.limit_range_defaults(obj)  # mutating admission (LimitRanger) comes first
            verdict = self.sim.admission.admit(attrs, obj, old)
            self.warnings.extend(verdict.warnings)
            if verdict.denial is not None:
                raise verdict.denial
            # ResourceQuota admission runs after validation, as in the API server's plugin order.
            if r.rt.plural == "pods" and operation == "CREATE":
                self.sim.quota.admit_pod(obj, dry_run=dry_run)
            elif r.rt.plural == "resourcequotas" and not r.subresource:
                self.sim.quota.quota_written(obj)

        return admit

    def _manager(self, q: dict) -> str:
        fm = q.get("fieldManager")
        if fm:
            return fm
        ua = self.headers.get("User-Agent") or "unknown"
        return ua.split("/")[0].split(" ")[0] or "unknown"

    def _route(self, parts: list[str]) -> _Route | None:
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            kinds, rest = self.sim.served[("", "v1")], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and (parts[1], parts[2]) in self.sim.served:
            kinds, rest = self.sim.served[(parts[1], parts[2])], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] != "status":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in kinds or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = kinds[rest[0]]
        if namespace is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else ""
        if sub and not ((sub == "status" and rt.has_status) or (sub == "ephemeralcontainers" and rt.plural == "pods")):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _Route(rt, namespace, name, sub)

    def _dispatch(self, method: str):
        self.warnings = []
        try:
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            parts = [p for p in url.path.split("/") if p]
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
            if url.path == CONTROL_RESTORE:
                if method != "POST":
                    raise ApiError(405, "MethodNotAllowed", "POST to restore")
                count = self.sim.restore(keep=self)
                rv = self.sim.store.resource_version
                self._send_json(200, {"restored": count, "resourceVersion": str(rv)})
                return
            if method == "GET" and self._discovery(url.path.rstrip("/") or "/"):
                return
            if method == "GET" and parts and parts[0] == "dcgm":
                self._dcgm(parts)
                return
            visibility = self._visibility_route(parts)
            route = self._route(parts) if visibility is None else None
            if route is None and visibility is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            delay = self.sim.faults.take_delay()
            if delay:
                time.sleep(delay)
            fail = self.sim.faults.take_failure()
            if fail:
                code, retry_after = fail
                reason = {429: "TooManyRequests", 503: "ServiceUnavailable", 500: "InternalError", 504: "Timeout"}.get(
                    code, "InternalError"
                )
                headers = {"Retry-After": str(int(retry_after or 1))} if code in (429, 503) and retry_after else None
                msg = "Too many requests, please try again later." if code == 429 else "simulated failure"
                details = {"retryAfterSeconds": int(retry_after or 1)} if headers else None
                self._send_error(ApiError(code, reason, msg, details), headers)
                return
            if visibility is not None:
                self._pending_workloads(method, visibility, q)
                return
            self._handle(method, route, q, body)
            if method in ("POST", "PUT", "PATCH", "DELETE"):  # Kueue's controller reacts to the write
                self.sim.kueue.written(route.rt.group, route.subresource, q.get("dryRun") == "All")
        except ApiError as e:
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - never answer with a stack trace
            try:
                self._send_error(ApiError(500, "InternalError", f"Internal error occurred: {e!r}"))
            except OSError:
                self.close_connection = True

    # ------------------------------------------------------------------ visibility.kueue.x-k8s.io (aggregated API)
    def _visibility_route(self, parts: list[str]) -> tuple[str, str, tuple[str, str] | None] | None:
        """(version, ClusterQueue or LocalQueue name, (namespace, LocalQueue) or None) of a pendingworkloads path of
        a served visibility version; None for every other path."""
        api = self.sim.api
        if len(parts) < 3 or parts[:2] != ["apis", apis.VISIBILITY_GROUP]:
            return None
        version, rest = parts[2], parts[3:]
        if version not in api.group_versions().get(apis.VISIBILITY_GROUP, ()):
            return None
        if len(rest) == 3 and rest[0] == "clusterqueues" and rest[2] == "pendingworkloads":
            return version, rest[1], None
        if len(rest) == 5 and rest[0] == "namespaces" and rest[2] == "localqueues" and rest[4] == "pendingworkloads":
            return version, rest[3], (rest[1], rest[3])
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _pending_workloads(self, method: str, target: tuple[str, str, tuple[str, str] | None], q: dict) -> None:
        """GET .../pendingworkloads: a PendingWorkloadsSummary from the admission model's queue order (kubesim/kueue.py);
        `offset` (default 0) and `limit` (default 1000) as Kueue reads them."""
        if method != "GET":
            raise _method_not_allowed()
        version, name, local_queue = target
        try:
            offset, limit = int(q.get("offset") or 0), int(q.get("limit") or 1000)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "offset and limit must be integers") from e
        if offset < 0 or limit < 0:
            raise ApiError(400, "BadRequest", "offset and limit must not be negative")
        malformed = self.sim.faults.take_visibility_body()
        if malformed is not None:
            self._send(200, malformed)
            return
        items = self.sim.kueue.pending_workloads("" if local_queue else name, local_queue=local_queue, offset=offset,
                                                 limit=limit or 1000)
        if items is None:
            what = "localqueue" if local_queue else "clusterqueue"
            raise ApiError(404, "NotFound", f'{what}.{apis.VISIBILITY_GROUP} "{name}" not found',
                           {"name": name, "group": apis.VISIBILITY_GROUP, "kind": what})
        self._send_json(200, {"kind": "PendingWorkloadsSummary", "apiVersion": f"{apis.VISIBILITY_GROUP}/{version}",
                              "metadata": {"creationTimestamp": None}, "items": items})

    def _dcgm(self, parts: list[str]) -> None:
        """`/dcgm/<node>/metrics`: the node's dcgm-exporter; `/dcgm/targets`: file_sd targets of every GPU node."""
        if parts == ["dcgm", "targets"]:
            self._send_json(200, self.sim.dcgm_targets())
            return
        body = self.sim.telemetry.render(parts[1]) if len(parts) == 3 and parts[2] == "metrics" else None
        if body is None:
            self._send(404, b"no such node\n", "text/plain; charset=utf-8")
            return
        self._send(200, body.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _discovery(self, path: str) -> bool:
        api = self.sim.api
        docs = {
            "/version": functools.partial(res.version_doc, api),
            "/api": res.api_versions_doc,
            "/apis": functools.partial(res.api_group_list_doc, api),
            "/api/v1": functools.partial(res.resource_list_doc, "", "v1", api),
            "/healthz": None,
            "/readyz": None,
            "/livez": None,
        }
        if path == "/openapi/v3":
            self._send_json(200, res.openapi_v3_root(api))
            return True
        if path.startswith("/openapi/v3/"):
            doc = res.openapi_v3_doc(path[len("/openapi/v3/") :], api)
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send_json(200, doc)
            return True
        for group, versions in api.group_versions().items():
            docs[f"/apis/{group}"] = functools.partial(res.api_group_doc, group, api)
            for version in versions:
                docs[f"/apis/{group}/{version}"] = functools.partial(res.resource_list_doc, group, version, api)
        if path not in docs:
            return False
        fn = docs[path]
        if fn is None:
            self._send(200, b"ok", "text/plain")
        else:
            self._send_json(200, fn())
        return True

    # ------------------------------------------------------------------ served versions
    @staticmethod
    def _converts(r: _Route) -> bool:
        return apis.converts(r.rt.group, r.rt.version)

    def _served(self, r: _Route, obj: dict) -> dict:
        """A stored object in the shape of the route's group version."""
        return apis.to_served(r.rt.group, r.rt.version, obj) if self._converts(r) else obj

    def _stored(self, r: _Route, obj: dict) -> dict:
        """A written object (route's group version) in the storage shape."""
        return apis.to_storage(r.rt.group, obj) if self._converts(r) else obj

    def _full(self, r: _Route, so) -> bytes:
        return orjson.dumps(self._served(r, so.obj)) if self._converts(r) else so.full

    # ------------------------------------------------------------------ verbs
    def _handle(self, method: str, r: _Route, q: dict, body: bytes):
        dry_run = q.get("dryRun") == "All"
        if method == "GET":
            self._get(r, q)
        elif method == "POST":
            self._create(r, q, body, dry_run)
        elif method == "PUT":
            self._replace(r, q, body, dry_run)
        elif method == "PATCH":
            if r.name is None:
                raise _method_not_allowed()
            self._patch(r, q, body, dry_run)
        elif method == "DELETE":
            self._delete(r, q, dry_run)
        else:
            raise ApiError(405, "MethodNotAllowed", "method not allowed")

    def _get(self, r: _Route, q: dict) -> None:
        """GET: a watch, a list, or one object (as a Table when asked)."""
        if r.name is None:
            if q.get("watch") in ("true", "1", "True"):
                self._watch(r, q)
            else:
                self._list(r, q)
            return
        so = self.sim.store.get_stored(r.rt.plural, r.namespace, r.name)
        if so is None:
            raise not_found(r.rt.plural, r.name)
        if self._wants_table():
            self._send_json(
                200, res.table(r.rt, [so.obj], q.get("includeObject", "Metadata"), {"resourceVersion": str(so.rv)})
            )
        else:
            self._send(200, self._full(r, so))

    def _create(self, r: _Route, q: dict, body: bytes, dry_run: bool) -> None:
        """POST to a collection: JSON, or protobuf for the kinds kubectl sends that way."""
        if r.name is not None:
            raise _method_not_allowed()
        protobuf = "protobuf" in (self.headers.get("Content-Type") or "")
        obj = decode_protobuf(body) if protobuf else _parse_body(body)
        self._fix_namespace(r, obj)
        admit = self._admit(r, "CREATE", str(obj["metadata"].get("name") or ""), dry_run)
        obj = patchmod.record_update(None, self._stored(r, obj), self._manager(q), r.rt.api_version)
        out = self.sim.store.create(r.rt.plural, obj, dry_run=dry_run, admit=admit)
        self._send_json(201, self._served(r, out))

    def _replace(self, r: _Route, q: dict, body: bytes, dry_run: bool) -> None:
        """PUT: replace an object (or its status), keeping its managedFields history."""
        store = self.sim.store
        if r.name is None:
            raise _method_not_allowed()
        if "protobuf" in (self.headers.get("Content-Type") or ""):
            raise ApiError(415, "UnsupportedMediaType", "kubesim only accepts JSON bodies for updates")
        obj = _parse_body(body)
        self._fix_namespace(r, obj)
        if not isinstance(obj.get("metadata"), dict) or obj["metadata"].get("name") != r.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        obj = self._stored(r, obj)
        with store.lock:
            cur = store.get_stored(r.rt.plural, r.namespace, r.name)
            if cur is None:
                raise not_found(r.rt.plural, r.name)
            obj["metadata"]["managedFields"] = cur.obj["metadata"].get("managedFields") or []
            obj = patchmod.record_update(
                cur.obj,
                obj
                if r.subresource != "status"
                else {**cur.obj, "status": obj.get("status"), "metadata": obj["metadata"]},
                self._manager(q),
                r.rt.api_version,
                r.subresource,
            )
            admit = self._admit(r, "UPDATE", r.name, dry_run)
            out = store.update(r.rt.plural, obj, dry_run=dry_run, subresource=r.subresource, admit=admit)
        self._send_json(200, self._served(r, out))

    def _delete(self, r: _Route, q: dict, dry_run: bool) -> None:
        """DELETE one object, or a collection (deletecollection: every object the selectors match)."""
        store = self.sim.store
        if r.name is not None:
            out = store.delete(r.rt.plural, r.namespace, r.name, dry_run=dry_run)
            self._send_json(200, self._served(r, out))
            return
        flt = make_filter(r.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        items, _, _, _ = store.list(r.rt.plural)
        deleted = []
        for so in items:
            if flt is None or flt(so):
                with contextlib.suppress(ApiError):
                    deleted.append(store.delete(r.rt.plural, so.key[0] or None, so.key[1], dry_run=dry_run))
        self._send_json(
            200,
            {
                "kind": r.rt.list_kind,
                "apiVersion": r.rt.api_version,
                "metadata": {"resourceVersion": str(store.resource_version)},
                "items": [self._served(r, o) for o in deleted],
            },
        )

    def _fix_namespace(self, r: _Route, obj) -> None:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if r.rt.namespaced:
            if r.namespace is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if meta.get("namespace") and meta["namespace"] != r.namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = r.namespace
        if obj.get("apiVersion") not in (None, r.rt.api_version) or obj.get("kind") not in (None, r.rt.kind):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API "
                f"version ({r.rt.api_version}) or the kind ({obj.get('kind')}) does not match "
                f"{r.rt.kind}",
            )

    def _patch(self, r: _Route, q: dict, body: bytes, dry_run: bool):
        store = self.sim.store
        ptype = self._patch_type()
        manager = q.get("fieldManager")
        if ptype == "apply" and not manager:
            raise ApiError(
                400,
                "BadRequest",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        manager = manager or self._manager(q)
        doc = _parse_body(body, allow_yaml=ptype == "apply")
        force = q.get("force") in ("true", "1", "True")
        try:
            with store.lock:
                cur = store.get_stored(r.rt.plural, r.namespace, r.name)
                if ptype == "apply":
                    new = self._applied(r, cur, doc, manager, force)
                    if cur is None:  # server-side apply creates
                        admit = self._admit(r, "CREATE", r.name, dry_run)
                        out = store.create(r.rt.plural, self._stored(r, new), dry_run=dry_run, admit=admit)
                        self._send_json(201, self._served(r, out))
                        return
                else:
                    new = self._patched(r, cur, ptype, doc, manager)
                admit = self._admit(r, "UPDATE", r.name, dry_run)
                new = self._stored(r, new) if isinstance(new, dict) else new
                out = store.update(r.rt.plural, new, dry_run=dry_run, subresource=r.subresource, admit=admit)
        except patchmod.ApplyConflictError as e:
            causes = [
                {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": f}
                for m, f in e.conflicts
            ]
            raise ApiError(409, "Conflict", str(e), {"causes": causes}) from e
        except patchmod.PatchError as e:
            raise ApiError(e.code, e.reason, str(e)) from e
        self._send_json(200, self._served(r, out))

    def _patch_type(self) -> str:
        """The patch type of the request's Content-Type: apply, merge, strategic or json."""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        ptype = PATCH_TYPES.get(ctype)
        if ptype is None or ptype == "unsupported":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - "
                f"accepted media types include: {', '.join(list(PATCH_TYPES)[:4])}",
            )
        return ptype

    def _applied(self, r: _Route, cur, doc, manager: str, force: bool) -> dict:
        """Server-side apply of `doc` to the current object (or to nothing: a create; not on a subresource)."""
        if not isinstance(doc, dict):
            raise ApiError(400, "BadRequest", "apply patch must be an object")
        if not doc.get("apiVersion") or not doc.get("kind"):
            raise ApiError(400, "BadRequest", "invalid object type: missing apiVersion or kind")
        self._fix_namespace(r, doc)
        if doc["metadata"].get("name", r.name) != r.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        doc["metadata"]["name"] = r.name
        if cur is None:
            if r.subresource:
                raise not_found(r.rt.plural, r.name)
            return patchmod.server_side_apply(None, doc, manager, force, r.rt.api_version)
        return patchmod.server_side_apply(
            self._served(r, cur.obj), doc, manager, force, r.rt.api_version, r.subresource
        )

    def _patched(self, r: _Route, cur, ptype: str, doc, manager: str) -> dict:
        """A merge, strategic merge or JSON patch applied to the current object, with its managedFields entry."""
        if cur is None:
            raise not_found(r.rt.plural, r.name)
        if ptype == "merge":
            if not isinstance(doc, dict):
                raise ApiError(400, "BadRequest", "merge patch must be an object")
            new = patchmod.merge_patch(self._served(r, cur.obj), doc)
        elif ptype == "strategic":
            if not isinstance(doc, dict):
                raise ApiError(400, "BadRequest", "strategic merge patch must be an object")
            new = patchmod.strategic_merge_patch(self._served(r, cur.obj), doc)
        else:
            new = patchmod.json_patch(self._served(r, cur.obj), doc)
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "patched object is not an object")
        meta = new.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != r.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if meta.get("resourceVersion") == cur.obj["metadata"].get("resourceVersion"):
            meta = new["metadata"] = dict(meta)
            meta["resourceVersion"] = str(cur.rv)
        return patchmod.record_update(cur.obj, new, manager, r.rt.api_version, r.subresource)

    def _wants_table(self) -> bool:
        accept = self.headers.get("Accept") or ""
        return "as=Table" in accept

    def _list(self, r: _Route, q: dict):
        store = self.sim.store
        try:
            limit = int(q.get("limit") or 0)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "invalid limit") from e
        items, list_rv, cont, remaining = store.list(
            r.rt.plural,
            namespace=r.namespace,
            label_selector=q.get("labelSelector"),
            field_selector=q.get("fieldSelector"),
            limit=max(limit, 0),
            continue_token=q.get("continue") or None,
            resource_version=q.get("resourceVersion") or None,
        )
        meta: dict = {"resourceVersion": str(list_rv)}
        if cont:
            meta["continue"] = cont
            meta["remainingItemCount"] = remaining
        if self._wants_table():
            self._send_json(200, res.table(r.rt, [so.obj for so in items], q.get("includeObject", "Metadata"), meta))
            return
        body = b"".join(
            [
                b'{"kind":"',
                r.rt.list_kind.encode(),
                b'","apiVersion":"',
                r.rt.api_version.encode(),
                b'","metadata":',
                orjson.dumps(meta),
                b',"items":[',
                b",".join([self._full(r, so) for so in items] if self._converts(r) else [so.item for so in items]),
                b"]}",
            ]
        )
        self._send(200, body)

    # ------------------------------------------------------------------ watch
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, r: _Route, q: dict):
        flt = make_filter(r.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        rv = q.get("resourceVersion") or None
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1", "True")
        events = _WatchEvents(r, flt, self._wants_table(), q.get("includeObject", "Metadata"),
                              functools.partial(self._full, r))
        try:
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else MAX_WATCH_SECONDS
        except ValueError as e:
            raise ApiError(400, "BadRequest", "invalid timeoutSeconds") from e
        watcher, backlog, expired = self._open_watch(r, rv)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if expired is not None:
            self._chunk(b'{"type":"ERROR","object":' + orjson.dumps(expired.status()) + b"}\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.watcher = watcher
        self.sim._track_watch(self, True)
        try:
            out = events.encode_all(backlog)
            for i in range(0, len(out), 200):
                self._chunk(b"".join(out[i : i + 200]))
            if self._stream_events(watcher, events, timeout, bookmarks):
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.close_connection = True
        except OSError:
            self.close_connection = True
        finally:
            watcher.close()
            self.sim._track_watch(self, False)
            self.watcher = None

    def _open_watch(self, r: _Route, rv: str | None) -> tuple[Watcher | None, list, ApiError | None]:
        """Register the watch: (watcher, the events since `rv`, None), or the 410/504 an ERROR event reports."""
        store = self.sim.store
        if self.sim.faults.take_expire():
            return None, [], ApiError(410, "Expired", f"too old resource version: {rv or 0} ({store.compacted_rv + 1})")
        try:
            watcher, backlog = store.watch(r.rt.plural, rv)
        except ApiError as e:
            if e.code not in (410, 504):  # after the request was accepted: an ERROR event, like the cacher
                raise
            return None, [], e
        return watcher, backlog, None

    def _stream_events(self, watcher: Watcher, events: _WatchEvents, timeout: float, bookmarks: bool) -> bool:
        """Send events (and bookmarks) as they come: True when the timeout ends the watch, False when the watch was
        stopped or the connection dropped."""
        store = self.sim.store
        start = time.monotonic()
        deadline = start + timeout
        last_bm = start
        while True:
            now_m = time.monotonic()
            remaining = deadline - now_m
            if remaining <= 0:
                # A closing bookmark may only claim a resourceVersion this stream has delivered up to: events
                # still queued for it would otherwise be skipped by a client resuming from the bookmark.
                rv_now = store.current_rv_if_drained(watcher) if bookmarks else None
                if rv_now is not None:
                    self._chunk(events.bookmark(rv_now))
                return True
            try:
                item = watcher.queue.get(timeout=min(remaining, BOOKMARK_INTERVAL / 2))
            except queue.Empty:
                item = False
            if item is None or self.dropped:
                return False
            if item and not self._send_batch(watcher, events, item):
                return False
            if bookmarks and time.monotonic() - last_bm >= BOOKMARK_INTERVAL:
                rv_now = store.current_rv_if_drained(watcher)
                if rv_now is not None:
                    self._chunk(events.bookmark(rv_now))
                    last_bm = time.monotonic()

    def _send_batch(self, watcher: Watcher, events: _WatchEvents, item: tuple) -> bool:
        """Send `item` and up to 199 more queued events in one chunk; False when the watch's stop marker came."""
        batch = [item]
        with contextlib.suppress(queue.Empty):
            while len(batch) < 200:
                nxt = watcher.queue.get_nowait()
                if nxt is None:
                    batch.append(None)
                    break
                batch.append(nxt)
        data = b"".join(events.encode_all(x for x in batch if x))
        if data:
            self._chunk(data)
        return batch[-1] is not None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass


class Simulator:
    """A fake Kubernetes API server backed by an in-memory store."""

    def __init__(
        self,
        scenario="demo",
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        history_limit: int = 100_000,
        api: str | None = None,
    ):
        """`api`: the API profile (kubesim.apis.PROFILES); by default the scenario's `apiServer`, else `current`."""
        self.api = apis.profile(api or self._scenario_api(scenario))
        self.served = res.served_types(self.api)
        self.host = host
        self.port = port
        self.seed = seed
        self.scenario = scenario
        self.store = Store(history_limit=history_limit)
        self.admission = PolicyAdmission(self.store)
        self.quota = QuotaAdmission(self.store)
        self.kueue = KueueAdmission(self.store)
        self.faults = Faults(self)
        self.churn = Churn(self)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._conn_lock = threading.Lock()
        self._conns: set[Handler] = set()
        self._watches: set[Handler] = set()
        objects = self._load_objects(scenario, seed)
        # The store takes ownership of (and rewrites) what it loads: keep an inline scenario's objects for restore().
        self._inline = orjson.dumps(objects) if not isinstance(scenario, str | None) else None
        self.store.load([o for o in objects if res.storage_group_served(self.api, o)])
        self.quota.scoped_usage()
        self.telemetry = Telemetry(self.store, seed, TelemetryConfig.parse(self._telemetry_spec(scenario)))

    @staticmethod
    def _telemetry_spec(scenario) -> dict | None:
        """The scenario's `telemetry:` section (dcgm-exporter values), if it is a scenario spec."""
        if isinstance(scenario, dict) and "kind" not in scenario:
            return scenario.get("telemetry")
        if isinstance(scenario, str | Path) and scenario != "empty":
            from .scenario.spec import _read

            return _read(scenario).get("telemetry")
        return None

    def dcgm_targets(self, host: str | None = None) -> list[dict]:
        """Prometheus file_sd entries: one target per GPU node, its metrics path in `__metrics_path__`."""
        address = f"{host or self.host}:{self.port}"
        return [{"targets": [address], "labels": {"__metrics_path__": f"/dcgm/{node}/metrics", "node": node}}
                for node in self.telemetry.gpu_nodes()]

    def serve_api(self, name: str) -> None:
        """Switch the API profile while serving (a control-plane upgrade or downgrade): the stored objects stay, the
        served versions, discovery and /version change; objects of a group no longer served are simply not reachable."""
        self.api = apis.profile(name)
        self.served = res.served_types(self.api)

    @staticmethod
    def _scenario_api(scenario) -> str | None:
        if (isinstance(scenario, str | Path) and scenario != "empty") or isinstance(scenario, dict):
            from .scenario import scenario_api_profile

            return scenario_api_profile(scenario)
        return None

    @staticmethod
    def _load_objects(scenario, seed: int) -> list[dict]:
        if scenario is None or scenario == "empty":
            return []
        if isinstance(scenario, list):
            return scenario
        if isinstance(scenario, dict) and str(scenario.get("kind", "")).endswith("List") and "items" in scenario:
            return list(scenario["items"])
        from .scenario import load_scenario

        return load_scenario(scenario, seed=seed)

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Simulator:
        self._httpd = _Server((self.host, self.port), Handler)
        self._httpd.sim = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"kubesim-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.churn.stop()
        self._shutdown()

    def _shutdown(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        self.store.stop_watchers()
        with self._conn_lock:
            conns = list(self._conns)
        for h in conns:
            h.dropped = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self, compact: bool = True) -> Simulator:
        """Stop serving (closing all connections), optionally compact, serve again on the same port."""
        self._shutdown()
        if compact:
            self.store.compact()
        for _ in range(50):
            try:
                return self.start()
            except OSError:
                time.sleep(0.1)
        return self.start()

    def restore(self, scenario=None, *, keep: Handler | None = None) -> int:
        """A simulated etcd restore (or a cluster rebuilt behind the same endpoint): every connection but `keep` is
        dropped, and the store starts over from the scenario with its resourceVersion counter reset and new uids, so
        resourceVersions a client saved are now ahead of the server. Returns how many objects were loaded."""
        if scenario is None and self._inline is not None:
            objects = orjson.loads(self._inline)
        else:
            objects = self._load_objects(self.scenario if scenario is None else scenario, self.seed)
        for obj in objects:
            meta = obj.get("metadata")
            if isinstance(meta, dict):
                for stamp in ("uid", "resourceVersion", "creationTimestamp"):
                    meta.pop(stamp, None)
        with self.store.lock:
            self.store.reset()
            self.churn.forget()
            count = self.store.load([o for o in objects if res.storage_group_served(self.api, o)])
            self.quota.scoped_usage()
        with self._conn_lock:
            conns = [h for h in self._conns if h is not keep]
        for h in conns:
            h.dropped = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
        return count

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _track(self, h: Handler, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._conns.add(h)
            else:
                self._conns.discard(h)

    def _track_watch(self, h: Handler, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._watches.add(h)
            else:
                self._watches.discard(h)

    def _active_watch_handlers(self) -> list[Handler]:
        with self._conn_lock:
            return list(self._watches)

    # ------------------------------------------------------------------ kubeconfig
    def kubeconfig(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubesim", "cluster": {"server": self.url}}],
            "users": [{"name": "kubesim", "user": {"token": "kubesim-token"}}],
            "contexts": [
                {"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim", "namespace": "default"}}
            ],
            "current-context": "kubesim",
            "preferences": {},
        }

    def write_kubeconfig(self, path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        return p
