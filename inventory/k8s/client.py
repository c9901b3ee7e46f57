"""The cluster adapter: the ONLY module that imports `kubernetes`.

One `ApiClient` per cluster (never the process-global configuration), explicit timeouts on every request, raw JSON
(`_preload_content=False`, parsed with orjson) instead of the client's model classes: the sync engine stores the
objects as the server sent them, and deserialising 20,000 pods into Python models would dominate a full sync.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol, cast
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from inventory.errors import (
    ClusterConfigError,
    ClusterRequestError,
    ClusterUnreachableError,
    HistoryRewoundError,
    ResourceExpiredError,
)
from inventory.k8s.discovery import DISCOVERED_GROUPS, SUBRESOURCE_GROUPS, ApiDiscovery
from inventory.k8s.kubeconfig import kubeconfig_validate
from inventory.k8s.types import (
    DRY_RUN_KINDS,
    ApplyResult,
    DryRunResult,
    KindRef,
    ListPage,
    WatchEvent,
    object_path,
)
from inventory.k8s.visibility import (
    PAGE_LIMIT,
    VISIBILITY_GROUP,
    PendingQueue,
    PendingWorkload,
    VisibilityAnswerError,
    pending_workloads_parse,
)

logger = logging.getLogger(__name__)

__all__ = ["ClusterClient", "KubernetesClusterClient", "WatchStream"]


class ClusterClient(Protocol):
    """What the portal needs of a cluster: reads for the sync engine, dry runs for the validator, and the writes
    of the quota and enforcement appliers (server-side apply under our field manager, delete by name and uid)."""

    def server_version(self) -> str: ...

    def discover(self) -> ApiDiscovery: ...

    def list_page(self, kind: KindRef, *, limit: int, continue_token: str | None) -> ListPage: ...

    def watch(self, kind: KindRef, *, resource_version: str, timeout_seconds: int) -> WatchStream: ...

    def create_dry_run(self, document: dict[str, Any]) -> DryRunResult: ...

    def get(self, api_version: str, kind: str, *, namespace: str, name: str) -> dict[str, Any] | None: ...

    def apply(self, document: dict[str, Any], *, field_manager: str, force: bool = False) -> ApplyResult: ...

    def delete(self, api_version: str, kind: str, *, namespace: str, name: str, uid: str = "") -> bool: ...

    def pending_workloads(self, cluster_queue: str, *, version: str) -> PendingQueue: ...

    def close(self) -> None: ...


def _retry_after(headers: Any) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _status_message(body: Any) -> str:
    if isinstance(body, bytes | str):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return str(body)[:300]
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])[:500]
        return str(body)[:300]
    return ""


def _json_object(body: Any) -> dict[str, Any]:
    data: Any = {}
    with contextlib.suppress(orjson.JSONDecodeError, TypeError):
        data = orjson.loads(body or b"{}")
    return data if isinstance(data, dict) else {}


def _resource_names(doc: dict[str, Any], *, subresources: bool = False) -> list[str]:
    """Resource names of an APIResourceList: top-level ones only (subresources like `pods/status` left out) unless
    `subresources`."""
    return sorted({str(r["name"]) for r in doc.get("resources") or []
                   if isinstance(r, dict) and isinstance(r.get("name"), str) and (subresources or "/" not in r["name"])})
TOO_LARGE_CAUSE = "Too large resource version"


def _too_large_resource_version(status: dict[str, Any]) -> bool:
    """client-go's isTooLargeResourceVersionError: the ResourceVersionTooLarge cause, or (API servers 1.17-1.18.5) a
    Timeout whose cause or message says so."""
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    causes = [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []
    if any(c.get("reason") == "ResourceVersionTooLarge" for c in causes):
        return True
    if status.get("reason") != "Timeout" and status.get("code") != 504:
        return False
    return any(c.get("message") == TOO_LARGE_CAUSE for c in causes) or TOO_LARGE_CAUSE in str(status.get("message"))


def _translate(exc: ApiException, what: str) -> Exception:
    status = exc.status or 0
    message = f"{what}: HTTP {status} {exc.reason or ''} {_status_message(exc.body)}".strip()
    if status == 504 and _too_large_resource_version(_json_object(exc.body)):
        return HistoryRewoundError(message)
    if status == 410:
        return ResourceExpiredError(message)
    if status == 429 or status >= 500 or status == 0:
        return ClusterUnreachableError(message, retry_after=_retry_after(exc.headers), status=status)
    return ClusterRequestError(message, status=status)


class _StreamEnd:
    """The reader thread's last item: the stream ended normally (or `close()` was called)."""


_StreamItem = WatchEvent | Exception | _StreamEnd


class WatchStream:
    """Iterates the events of one watch request; `close()` from any thread ends it.

    A reader thread parses lines into a queue so the consumer can batch with a time bound (`next_batch`).
    Raises ResourceExpiredError for a 410 ERROR event and ClusterUnreachableError when the connection drops before
    the server ended the stream normally.
    """

    _END = _StreamEnd()

    def __init__(self, response: Any, what: str) -> None:
        self._response = response
        self._what = what
        self._queue: queue.Queue[_StreamItem] = queue.Queue(maxsize=10_000)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"watch-{what}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._put(self._parse(line))
            if buffer.strip():
                self._put(self._parse(buffer))
            self._put(self._END)
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the stream as "unreachable"
            if self._closed.is_set():
                self._put(self._END)
            else:
                self._put(ClusterUnreachableError(f"{self._what}: watch connection lost: {type(exc).__name__}"))

    def _put(self, item: _StreamItem) -> None:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def _parse(self, line: bytes) -> WatchEvent | Exception:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            return ClusterUnreachableError(f"{self._what}: malformed watch line ({len(line)} bytes)")
        if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
            return ClusterUnreachableError(f"{self._what}: malformed watch event")
        event_type = str(data.get("type", ""))
        obj = data["object"]
        if event_type == "ERROR":
            code = obj.get("code")
            message = f"{self._what}: watch error {code}: {obj.get('message', '')}"
            if _too_large_resource_version(obj):
                return HistoryRewoundError(message)
            if code == 410:
                return ResourceExpiredError(message)
            if isinstance(code, int) and (code == 429 or code >= 500):
                return ClusterUnreachableError(message, status=code)
            return ClusterRequestError(message, status=code if isinstance(code, int) else None)
        return WatchEvent(type=event_type, object=obj)

    def next_batch(self, *, max_items: int, max_wait: float, deadline: float) -> tuple[list[WatchEvent], bool]:
        """Up to `max_items` events, waiting at most `max_wait` after the first one (or until `deadline`); events
        already queued when that wait is over come along without waiting (so `max_wait=0` batches what arrived while
        the previous batch was being applied).

        Returns (events, ended). Raises the stream's error once all events before it were returned.
        """
        events: list[WatchEvent] = []
        first_at: float | None = None
        while len(events) < max_items:
            now = time.monotonic()
            limit = deadline if first_at is None else min(deadline, first_at + max_wait)
            try:
                if now < limit:
                    item = self._queue.get(timeout=min(limit - now, 0.5))
                elif events:
                    item = self._queue.get_nowait()
                else:
                    return events, False
            except queue.Empty:
                if now >= limit:
                    return events, False
                continue
            if isinstance(item, _StreamEnd):
                return events, True
            if isinstance(item, Exception):
                if events:  # deliver what came before the error first
                    self._pending_error(item)
                    return events, False
                raise item
            events.append(item)
            if first_at is None:
                first_at = time.monotonic()
        return events, False

    def _pending_error(self, error: Exception) -> None:
        # Put the error back at the front: a fresh queue with the error first, then the rest.
        rest: list[_StreamItem] = []
        while True:
            try:
                rest.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for item in (error, *rest):
            self._queue.put(item)

    def close(self) -> None:
        self._closed.set()
        try:
            if hasattr(self._response, "shutdown"):
                self._response.shutdown()
            self._response.close()
            self._response.release_conn()
        except Exception:  # noqa: BLE001, S110 - closing a dead connection may fail; nothing to do
            pass

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KubernetesClusterClient:
    """A cluster reached through the official client, configured from validated kubeconfig data or in-cluster."""

    def __init__(
        self,
        api_client: Any,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
    ) -> None:
        self._api_client = api_client
        self._core = k8s.CoreV1Api(api_client=api_client)
        self._resource = {
            "v1": k8s.ResourceV1Api(api_client=api_client),
            "v1beta2": k8s.ResourceV1beta2Api(api_client=api_client),
            "v1beta1": k8s.ResourceV1beta1Api(api_client=api_client),
        }
        self._admission = k8s.AdmissionregistrationV1Api(api_client=api_client)
        self._custom = k8s.CustomObjectsApi(api_client=api_client)
        self._version = k8s.VersionApi(api_client=api_client)
        self._timeout = (connect_timeout, read_timeout)
        self._connect_timeout = connect_timeout

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: dict[str, Any], *, context: str | None = None, allowed_proxies: Collection[str] = (),
        **timeouts: float,
    ) -> KubernetesClusterClient:
        """A client from kubeconfig *data*. It is validated here, where it reaches the official loader, so no caller
        can hand it a kubeconfig that runs a command or reads a file (inventory/k8s/kubeconfig.py). There is no
        file-path constructor on purpose: the loader resolves relative paths against a file's directory; callers
        read and validate the file themselves."""
        kubeconfig_validate(kubeconfig, context=context or "", allowed_proxies=allowed_proxies)
        configuration = k8s.Configuration()
        try:
            load: Any = k8s_config.load_kube_config_from_dict  # untyped in the client
            load(kubeconfig, context=context or None, client_configuration=configuration, persist_config=False)
        except (ConfigException, KeyError, TypeError, ValueError, AttributeError) as exc:
            # The message of ConfigException never contains credentials; still keep it short.
            raise ClusterConfigError(f"invalid kubeconfig: {str(exc)[:200]}") from None
        return cls(cls._new_api_client(configuration), **timeouts)

    @classmethod
    def in_cluster(cls, **timeouts: float) -> KubernetesClusterClient:
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise ClusterConfigError(f"not running in a cluster: {exc}") from None
        return cls(cls._new_api_client(configuration), **timeouts)

    @staticmethod
    def _new_api_client(configuration: Any) -> Any:
        # We retry ourselves (allow-listed, honouring Retry-After); urllib3's silent retries (it sleeps on 429/503
        # by default) would hide storms and block a watcher past its lease. Must be set before the pool exists.
        configuration.retries = False
        api_client = k8s.ApiClient(configuration)
        api_client.user_agent = "accelerator-portal/0.1"
        return api_client

    def _api(self, kind: KindRef) -> Any:
        if kind.api == "resource":
            return self._resource[kind.version]
        return {"core": self._core, "admission": self._admission}[kind.api]

    def _list_call(self, kind: KindRef) -> Callable[..., Any]:
        """The client call that lists (and, with watch=True, watches) a kind. Custom resources (Kueue) have no typed
        API: the generic call lists a namespaced kind across all namespaces, like the typed `*_for_all_namespaces`."""
        if kind.api == "custom":
            return functools.partial(self._custom.list_cluster_custom_object, kind.group, kind.version, kind.key)
        return cast(Callable[..., Any], getattr(self._api(kind), kind.list_method))

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(_preload_content=False, **kwargs)
        except ApiException as exc:
            raise _translate(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnreachableError(f"{what}: {type(exc).__name__}: {str(exc)[:200]}") from None

    def server_version(self) -> str:
        response = self._call("version", self._version.get_code, _request_timeout=self._timeout)
        data = orjson.loads(response.data)
        return str(data.get("gitVersion", ""))

    def _get_json(self, path: str, what: str) -> dict[str, Any] | None:
        """GET a discovery document; None when the server does not serve it (404, or 503 of an aggregated API)."""
        status, body = self._send("GET", path, what, query=[], body=None, content_type="application/json",
                                  passthrough=(503,))
        if status in (404, 503):
            return None
        if not 200 <= status < 300:
            raise ClusterRequestError(f"{what}: HTTP {status} {_status_message(body)}", status=status)
        data = _json_object(body)
        return data or None

    def discover(self) -> ApiDiscovery:
        """The discovery documents the portal needs: /version, /api/v1, /apis and the resource lists of the groups
        it reads, every served version of each (inventory/k8s/discovery.py decides what to sync from them)."""
        version_doc = self._get_json("/version", "discovery /version") or {}
        resources: dict[str, list[str]] = {}
        groups: dict[str, list[str]] = {}
        core = self._get_json("/api/v1", "discovery /api/v1") or {}
        resources["v1"] = _resource_names(core)
        group_list = self._get_json("/apis", "discovery /apis") or {}
        for group in group_list.get("groups") or []:
            if not isinstance(group, dict) or not isinstance(group.get("name"), str):
                continue
            versions = [str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict)]
            preferred = (group.get("preferredVersion") or {}).get("version")
            if preferred in versions:  # preferred first, the rest in the server's order
                versions.remove(preferred)
                versions.insert(0, preferred)
            groups[group["name"]] = versions
        for group in DISCOVERED_GROUPS:
            for version in groups.get(group, []):
                doc = self._get_json(f"/apis/{quote(group)}/{quote(version)}", f"discovery {group}/{version}")
                if doc is not None:
                    resources[f"{group}/{version}"] = _resource_names(doc, subresources=group in SUBRESOURCE_GROUPS)
        return ApiDiscovery(git_version=str(version_doc.get("gitVersion") or ""), groups=groups, resources=resources)

    def list_page(self, kind: KindRef, *, limit: int, continue_token: str | None) -> ListPage:
        method = self._list_call(kind)
        kwargs: dict[str, Any] = {"limit": limit, "_request_timeout": self._timeout}
        if kind.namespace:
            kwargs["namespace"] = kind.namespace
        if continue_token:
            kwargs["_continue"] = continue_token
        response = self._call(f"list {kind.key}", method, **kwargs)
        try:
            data = orjson.loads(response.data)
        except orjson.JSONDecodeError:
            raise ClusterUnreachableError(f"list {kind.key}: response is not JSON") from None
        if not isinstance(data, dict):
            raise ClusterUnreachableError(f"list {kind.key}: response is not an object")
        metadata = data.get("metadata") or {}
        items = data.get("items") or []
        if not isinstance(items, list):
            raise ClusterUnreachableError(f"list {kind.key}: items is not a list")
        remaining = metadata.get("remainingItemCount")
        return ListPage(
            items=items,
            resource_version=str(metadata.get("resourceVersion") or ""),
            continue_token=metadata.get("continue") or None,
            remaining=remaining if isinstance(remaining, int) else None,
        )

    def watch(self, kind: KindRef, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        method = self._list_call(kind)
        response = self._call(
            f"watch {kind.key}",
            method,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            # The read timeout guards a silent, half-open connection; the server ends the watch itself.
            _request_timeout=(self._connect_timeout, timeout_seconds + 30),
            **({"namespace": kind.namespace} if kind.namespace else {}),
        )
        return WatchStream(response, f"watch {kind.key}")

    def create_dry_run(self, document: dict[str, Any]) -> DryRunResult:
        """POST the object with `dryRun=All` and strict field validation: admission and validation run, nothing is
        stored. A refusal (4xx) is a result, not an exception; transport errors and 5xx raise ClusterUnreachable."""
        key = (str(document.get("apiVersion") or ""), str(document.get("kind") or ""))
        if key not in DRY_RUN_KINDS:
            raise ClusterRequestError(f"dry run of {key[1] or 'unknown kind'} is not supported")
        prefix, plural = DRY_RUN_KINDS[key]
        namespace = str((document.get("metadata") or {}).get("namespace") or "default")
        path = f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural}"
        try:
            request = self._api_client.param_serialize(
                method="POST", resource_path=path, query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
                header_params={"Content-Type": "application/json", "Accept": "application/json"}, body=document,
                auth_settings=["BearerToken"],
            )
            response = self._api_client.call_api(*request, _request_timeout=self._timeout)
            response.read()
        except ApiException as exc:  # raised by the REST layer for some failures
            status, body, reason = exc.status or 0, exc.body, exc.reason or ""
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnreachableError(f"dry run {key[1]}: {type(exc).__name__}: {str(exc)[:200]}") from None
        else:
            status, body, reason = int(response.status), response.data, str(getattr(response, "reason", "") or "")
            if 200 <= status < 300:
                warning = response.getheader("Warning")
                return DryRunResult(True, status, warnings=(str(warning)[:500],) if warning else ())
        if status == 429 or status >= 500 or status == 0:
            raise ClusterUnreachableError(f"dry run {key[1]}: HTTP {status} {_status_message(body)}", status=status)
        data: Any = {}
        with contextlib.suppress(orjson.JSONDecodeError, TypeError):
            data = orjson.loads(body or b"{}")
        data = data if isinstance(data, dict) else {}
        causes = tuple(
            f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")[:500]
            for c in ((data.get("details") or {}).get("causes") or []) if isinstance(c, dict)
        )
        return DryRunResult(False, status, str(data.get("reason") or reason)[:100],
                            str(data.get("message") or _status_message(body))[:2000], causes)

    def apply(self, document: dict[str, Any], *, field_manager: str, force: bool = False) -> ApplyResult:
        """Server-side apply under our own field manager (the kinds of WRITE_KINDS). A 409 (another manager owns a
        field we set) or another refusal is a result; transport errors, 429 and 5xx raise ClusterUnreachableError
        (retryable). Fields we applied before and leave out now are removed by the server (we owned them)."""
        meta = document.get("metadata") or {}
        kind = str(document.get("kind") or "")
        try:
            path = object_path(str(document.get("apiVersion") or ""), kind, str(meta.get("namespace") or ""),
                               str(meta.get("name") or ""))
        except ValueError as exc:
            raise ClusterRequestError(str(exc)) from None
        query = [("fieldManager", field_manager), ("fieldValidation", "Strict")] + ([("force", "true")] if force else [])
        status, body = self._send("PATCH", path, f"apply {kind.lower()}", query=query, body=document,
                                  content_type="application/apply-patch+yaml")
        data = _json_object(body)
        if 200 <= status < 300:
            return ApplyResult(True, status, object=data)
        return ApplyResult(False, status, conflict=status == 409,
                           message=str(data.get("message") or _status_message(body))[:2000])

    def get(self, api_version: str, kind: str, *, namespace: str, name: str) -> dict[str, Any] | None:
        """One object of a kind the portal writes, as the server has it now (None: not found). Read just before a
        write whose document must carry the whole of an atomic list (a ClusterQueue's resourceGroups), so that the
        write is made against the live object and guarded by its resourceVersion."""
        try:
            path = object_path(api_version, kind, namespace, name)
        except ValueError as exc:
            raise ClusterRequestError(str(exc)) from None
        status, raw = self._send("GET", path, f"get {kind.lower()}", query=[], body=None,
                                 content_type="application/json")
        if status == 404:
            return None
        data = _json_object(raw)
        if not 200 <= status < 300 or data.get("kind") != kind:
            raise ClusterRequestError(f"get {kind.lower()} {name}: HTTP {status} {_status_message(raw)}", status=status)
        return data

    def delete(self, api_version: str, kind: str, *, namespace: str, name: str, uid: str = "") -> bool:
        """Delete one object; with `uid`, only that incarnation (a precondition: a recreated object of the same name
        is left alone). Returns False when it is already gone (or the uid no longer matches)."""
        try:
            path = object_path(api_version, kind, namespace, name)
        except ValueError as exc:
            raise ClusterRequestError(str(exc)) from None
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **({"preconditions": {"uid": uid}} if uid else {})}
        status, raw = self._send("DELETE", path, f"delete {kind.lower()}", query=[], body=body,
                                 content_type="application/json")
        if 200 <= status < 300:
            return True
        if status in (404, 409):
            return False
        raise ClusterRequestError(f"delete {kind.lower()} {namespace}/{name}: HTTP {status} {_status_message(raw)}",
                                  status=status)

    def pending_workloads(self, cluster_queue: str, *, version: str, max_pages: int = 20) -> PendingQueue:
        """Every Workload pending in a ClusterQueue, in Kueue's order, from the visibility API at `version` (pages of
        PAGE_LIMIT, at most `max_pages`: the queue's head is what matters). Raises ClusterUnreachableError (transport,
        429, 5xx: an aggregated API whose backend is down answers 503), ClusterRequestError (another refusal: 404 for
        a ClusterQueue Kueue does not know, 403 without RBAC on the group) or VisibilityAnswerError (the answer is
        not a consistent PendingWorkloadsSummary: nothing of it is returned)."""
        path = (f"/apis/{VISIBILITY_GROUP}/{quote(version, safe='')}/clusterqueues/"
                f"{quote(cluster_queue, safe='')}/pendingworkloads")
        what = f"pending workloads of ClusterQueue {cluster_queue}"
        out: dict[tuple[str, str], PendingWorkload] = {}
        for page in range(max_pages):
            offset = page * PAGE_LIMIT
            status, body = self._send("GET", path, what, query=[("offset", str(offset)), ("limit", str(PAGE_LIMIT))],
                                      body=None, content_type="application/json")
            if not 200 <= status < 300:
                raise ClusterRequestError(f"{what}: HTTP {status} {_status_message(body)}", status=status)
            try:
                doc = orjson.loads(body or b"")
            except (orjson.JSONDecodeError, TypeError):
                raise VisibilityAnswerError(f"{what}: the answer is not JSON") from None
            try:
                items = pending_workloads_parse(doc, offset=offset)
            except VisibilityAnswerError as exc:
                raise VisibilityAnswerError(f"{what}: {exc}") from None
            for item in items:  # the queue may move between pages: a Workload seen on an earlier page stays there
                out.setdefault((item.namespace, item.name), item)
            if len(items) < PAGE_LIMIT:
                return PendingQueue(tuple(out.values()))
        return PendingQueue(tuple(out.values()), complete=False)

    def _send(self, method: str, path: str, what: str, *, query: list[tuple[str, str]], body: Any,
              content_type: str, passthrough: tuple[int, ...] = ()) -> tuple[int, Any]:
        """One request; returns (status, body) for any HTTP answer below 500 except 429 (and the `passthrough`
        codes), raises ClusterUnreachableError otherwise."""
        try:
            request = self._api_client.param_serialize(
                method=method, resource_path=path, query_params=query, body=body,
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._api_client.call_api(*request, _request_timeout=self._timeout)
            response.read()
        except ApiException as exc:
            status, data = exc.status or 0, exc.body
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnreachableError(f"{what}: {type(exc).__name__}: {str(exc)[:200]}") from None
        else:
            status, data = int(response.status), response.data
        if (status == 429 or status >= 500 or status == 0) and status not in passthrough:
            raise ClusterUnreachableError(f"{what}: HTTP {status} {_status_message(data)}", status=status)
        return status, data

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort on shutdown
            self._api_client.close()
