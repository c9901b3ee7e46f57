"""Thread-safe object store with a global resource version, watch history and list snapshots.

Selectors live in kubesim.selectors, per-kind write rules in kubesim.validation, errors in kubesim.errors."""

from __future__ import annotations

import base64
import bisect
import datetime as dt
import queue
import random
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

import orjson

from .errors import ApiError, expired, not_found, too_large
from .resources import RESOURCES, ResourceType
from .selectors import make_filter
from .validation import (
    check_admin_access,
    check_configmap_update,
    label_namespace,
    policy_status,
    validate_configmap,
    with_ephemeral_containers,
)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SNAPSHOT_LIMIT = 256
SNAPSHOT_TTL = 300.0

Admit = Callable[[dict, dict | None], None]
"""Admission hook: called with (new object, old object or None) right before a write is committed."""




def parse_rv(value: str) -> int:
    try:
        rv = int(value)
    except ValueError as e:
        raise ApiError(400, "BadRequest", f"invalid resource version: {value}") from e
    if rv < 0:
        raise ApiError(400, "BadRequest", f"invalid resource version: {value}")
    return rv


def now_ts() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StoredObject:
    """An immutable stored object plus its cached JSON encodings."""

    __slots__ = ("_full", "item", "key", "obj", "rv")

    def __init__(self, obj: dict, rv: int):
        self.obj = obj
        self.rv = rv
        meta = obj["metadata"]
        self.key = (meta.get("namespace", ""), meta["name"])
        self.item = orjson.dumps({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
        self._full: bytes | None = None

    @property
    def full(self) -> bytes:
        if self._full is None:
            prefix = orjson.dumps({"apiVersion": self.obj.get("apiVersion"), "kind": self.obj.get("kind")})
            rest = self.item[1:]
            self._full = prefix[:-1] + (b"," + rest if rest != b"}" else b"}")
        return self._full

    def copy(self) -> dict:
        return orjson.loads(self.full)


# ---------------------------------------------------------------------------------------------- watchers
class Watcher:
    """A registered watch: events arrive in `queue` as (type, object, previous object); None means 'stop'."""

    def __init__(self, store: Store, plural: str):
        self.store = store
        self.plural = plural
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False

    def close(self) -> None:
        self.store._unregister(self)

    def stop(self) -> None:
        self.closed = True
        self.queue.put(None)


def _check_update_preconditions(rt: ResourceType, plural: str, meta: dict, cur: StoredObject, check_rv: bool) -> None:
    """Optimistic concurrency on metadata.resourceVersion (when given) and the uid precondition."""
    want = meta.get("resourceVersion")
    if check_rv and want and str(want) != str(cur.rv):
        group = f".{rt.group}" if rt.group else ""
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {plural}{group} "{meta["name"]}": the object has '
            "been modified; please apply your changes to the latest version and try again",
            {"name": meta["name"], "kind": plural, **({"group": rt.group} if rt.group else {})},
        )
    old = cur.obj
    if meta.get("uid") and meta["uid"] != old["metadata"].get("uid"):
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {meta['uid']}, UID in "
            f"object meta: {old['metadata'].get('uid')}",
        )


def _updated_for_subresource(rt: ResourceType, plural: str, obj: dict, old: dict, subresource: str) -> dict:
    """What a write through the main resource or a subresource may change: the status subresource changes only the
    status, ephemeralcontainers only those, and the main resource keeps the stored status."""
    meta = obj["metadata"]
    if subresource == "status":
        new = dict(old)
        new["status"] = obj.get("status")
        if new["status"] is None:
            new.pop("status")
        new["metadata"] = dict(old["metadata"])
        if "managedFields" in meta:
            new["metadata"]["managedFields"] = meta["managedFields"]
        return new
    if subresource == "ephemeralcontainers":
        return with_ephemeral_containers(old, obj)
    if rt.has_status and plural != "namespaces":
        if "status" in old:
            obj["status"] = old["status"]
        else:
            obj.pop("status", None)
    elif plural == "namespaces":
        obj["status"] = old.get("status", {"phase": "Active"})
    return obj


def _apply_update_rules(rt: ResourceType, plural: str, obj: dict, old: dict, subresource: str) -> dict:
    """The server's rules for an update: immutable system fields, subresources, per-kind rules, generation."""
    meta = obj["metadata"]
    for f in ("uid", "creationTimestamp"):  # immutable system fields
        if f in old["metadata"]:
            meta[f] = old["metadata"][f]
    obj = _updated_for_subresource(rt, plural, obj, old, subresource)
    meta = obj["metadata"]
    if plural == "namespaces":
        label_namespace(meta)
    elif plural == "configmaps":
        check_configmap_update(obj, old)
    gen = old["metadata"].get("generation")
    if gen is not None:
        meta["generation"] = gen + 1 if obj.get("spec") != old.get("spec") else gen
    if plural == "validatingadmissionpolicies" and subresource != "status":
        obj["status"] = policy_status(obj.get("status"), meta.get("generation", 1))
    return obj


class Store:
    """All objects of all kinds, one lock, one global resource version."""

    def __init__(self, history_limit: int = 100_000):
        self.lock = threading.RLock()
        self.history_limit = history_limit
        self._rv = 0
        self._compacted = 0  # events with rv <= this are gone
        self._data: dict[str, dict[tuple[str, str], StoredObject]] = {p: {} for p in RESOURCES}
        self._sorted: dict[str, list[StoredObject] | None] = dict.fromkeys(RESOURCES)
        self._history: list[tuple[int, str, str, StoredObject, StoredObject | None]] = []
        self._history_rvs: list[int] = []
        self._watchers: dict[str, set[Watcher]] = {p: set() for p in RESOURCES}
        self._snapshots: OrderedDict[str, tuple[int, float, list[StoredObject]]] = OrderedDict()

    # ------------------------------------------------------------------ basics
    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_rv(self) -> int:
        return self._compacted

    def reset(self) -> None:
        """Forget everything, the resourceVersion counter included (an etcd restore / rebuilt cluster); open watches
        are stopped."""
        with self.lock:
            self.stop_watchers()
            self._rv = 0
            self._compacted = 0
            self._data = {p: {} for p in RESOURCES}
            self._sorted = dict.fromkeys(RESOURCES)
            self._history.clear()
            self._history_rvs.clear()
            self._snapshots.clear()

    def check_reached(self, resource_version: str | None) -> None:
        """A list or watch "not older than" `resource_version`: refuse one this store has not reached yet."""
        if not resource_version or resource_version == "0":
            return
        rv = parse_rv(resource_version)
        if rv > self._rv:
            raise too_large(rv, self._rv)

    @staticmethod
    def _rt(plural: str) -> ResourceType:
        rt = RESOURCES.get(plural)
        if rt is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        return rt

    def objects(self, plural: str) -> list[dict]:
        """Current objects of a kind (deep copies, sorted by namespace/name)."""
        return [so.copy() for so in self.sorted_objects(plural)]

    def sorted_objects(self, plural: str) -> list[StoredObject]:
        with self.lock:
            cached = self._sorted[plural]
            if cached is None:
                data = self._data[self._rt(plural).plural]
                cached = [data[k] for k in sorted(data)]
                self._sorted[plural] = cached
            return cached

    def sample(self, plural: str, rng: random.Random, k: int = 1) -> list[StoredObject]:
        """Up to k random stored objects of a kind, without sorting the kind (cheap at 20,000 objects)."""
        with self.lock:
            data = self._data[self._rt(plural).plural]
            if not data:
                return []
            keys = list(data)
            return [data[keys[rng.randrange(len(keys))]] for _ in range(k)]

    def get_stored(self, plural: str, namespace: str | None, name: str) -> StoredObject | None:
        rt = self._rt(plural)
        return self._data[plural].get((namespace or "" if rt.namespaced else "", name))

    def get(self, plural: str, namespace: str | None, name: str) -> dict | None:
        so = self.get_stored(plural, namespace, name)
        return so.copy() if so else None

    def count(self, plural: str) -> int:
        return len(self._data[plural])

    # ------------------------------------------------------------------ validation
    def _validate(self, rt: ResourceType, obj: dict, namespace_check: bool = True) -> None:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        if obj.get("apiVersion") not in (None, rt.api_version) or obj.get("kind") not in (None, rt.kind):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API "
                f"version ({rt.api_version}) or kind ({obj.get('kind')}) does not match {rt.kind}",
            )
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(
                422,
                "Invalid",
                f"{rt.kind} is invalid: metadata.name: Required value: name or generateName is required",
                {
                    "kind": rt.kind,
                    "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"}],
                },
            )
        name = meta.get("name")
        if not name or not isinstance(name, str):
            raise ApiError(
                422,
                "Invalid",
                f"{rt.kind} is invalid: metadata.name: Required value: name or generateName is required",
                {
                    "kind": rt.kind,
                    "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"}],
                },
            )
        if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            msg = (
                f'{rt.kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and "
                "end with an alphanumeric character"
            )
            raise ApiError(
                422,
                "Invalid",
                msg,
                {
                    "name": name,
                    "kind": rt.kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": "metadata.name"}],
                },
            )
        for k in ("labels", "annotations"):
            v = meta.get(k)
            if v is not None and (not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values())):
                raise ApiError(400, "BadRequest", f"metadata.{k} must be a map of strings")
        if rt.namespaced:
            ns = meta.get("namespace")
            if not ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            if namespace_check and ("", ns) not in self._data["namespaces"]:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            if namespace_check and rt.plural in ("resourceclaims", "resourceclaimtemplates"):
                check_admin_access(rt, obj, self._data["namespaces"][("", ns)].obj)
        elif "namespace" in meta:
            meta.pop("namespace")
        if rt.plural == "configmaps":
            validate_configmap(obj)

    # ------------------------------------------------------------------ writes
    def create(
        self, plural: str, obj: dict, *, dry_run: bool = False, load: bool = False, admit: Admit | None = None
    ) -> dict:
        """Create an object; assigns uid, resourceVersion, creationTimestamp, generation.

        `admit` (validating admission) sees the object after defaulting, before it is stored (also on dry run)."""
        rt = self._rt(plural)
        obj = orjson.loads(orjson.dumps(obj)) if not load else obj
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        # normalise key order: apiVersion, kind, metadata, ...
        obj = {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), **obj}
        meta = obj.setdefault("metadata", {})
        with self.lock:
            if isinstance(meta, dict) and not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            self._validate(rt, obj, namespace_check=not load)
            key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            if key in self._data[plural]:
                group = f".{rt.group}" if rt.group else ""
                details = {"name": meta["name"], "kind": plural}
                if rt.group:
                    details["group"] = rt.group
                raise ApiError(409, "AlreadyExists", f'{plural}{group} "{meta["name"]}" already exists', details)
            if not load or "uid" not in meta:
                meta["uid"] = meta.get("uid") if load else str(uuid.uuid4())
                if not meta["uid"]:
                    meta["uid"] = str(uuid.uuid4())
            if not load or not meta.get("creationTimestamp"):
                meta["creationTimestamp"] = now_ts()
            meta.pop("resourceVersion", None)
            meta.pop("deletionTimestamp", None)
            if rt.has_generation and ("spec" in obj or not load):
                meta["generation"] = 1 if not load else meta.get("generation", 1)
            if plural == "namespaces":
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj["status"] = {"phase": "Active"}
                label_namespace(meta)
            elif plural == "pods" and not load:
                obj.setdefault("status", {})
                obj["status"].setdefault("phase", "Pending")
                obj["status"].setdefault("qosClass", "BestEffort")
            elif plural == "validatingadmissionpolicies" and (not load or "status" not in obj):
                obj["status"] = policy_status({}, meta.get("generation", 1))
            if admit is not None:
                admit(obj, None)
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return obj
            return self._commit(plural, key, obj, "ADDED").copy()

    def update(
        self,
        plural: str,
        obj: dict,
        *,
        dry_run: bool = False,
        subresource: str = "",
        check_rv: bool = True,
        admit: Admit | None = None,
    ) -> dict:
        """Replace an object (optimistic concurrency on metadata.resourceVersion when set); `admit` as for create."""
        rt = self._rt(plural)
        obj = orjson.loads(orjson.dumps(obj))
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        obj = {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), **obj}
        with self.lock:
            self._validate(rt, obj, namespace_check=False)
            meta = obj["metadata"]
            key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            cur = self._data[plural].get(key)
            if cur is None:
                raise not_found(plural, meta["name"])
            _check_update_preconditions(rt, plural, meta, cur, check_rv)
            old = cur.obj
            obj = _apply_update_rules(rt, plural, obj, old, subresource)
            meta = obj["metadata"]
            meta.pop("resourceVersion", None)
            if admit is not None:
                admit(obj, old)
            if dry_run:
                meta["resourceVersion"] = str(cur.rv)
                return obj
            if orjson.dumps(obj) == orjson.dumps(
                {**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}}
            ):
                return cur.copy()  # no-op update: no new RV, no event (like real servers)
            return self._commit(plural, key, obj, "MODIFIED").copy()

    def delete(self, plural: str, namespace: str | None, name: str, *, dry_run: bool = False) -> dict:
        """Delete an object; returns its last state."""
        rt = self._rt(plural)
        with self.lock:
            key = (namespace or "" if rt.namespaced else "", name)
            cur = self._data[plural].get(key)
            if cur is None:
                raise not_found(plural, name)
            if dry_run:
                return cur.copy()
            if plural == "namespaces":
                for p, t in RESOURCES.items():
                    if t.namespaced:
                        for k in [k for k in self._data[p] if k[0] == name]:
                            self._remove(p, k)
            return self._remove(plural, key).copy()

    def _remove(self, plural: str, key) -> StoredObject:
        old = self._data[plural].pop(key)
        self._sorted[plural] = None
        self._rv += 1
        obj = dict(old.obj)
        obj["metadata"] = {**old.obj["metadata"], "resourceVersion": str(self._rv)}
        if plural == "pods" and "deletionTimestamp" not in obj["metadata"]:
            # Pods are deleted gracefully: the API server sets deletionTimestamp before the kubelet's final delete, so
            # the DELETED event carries it. The simulator's pods terminate at once (a grace period of 0).
            obj["metadata"].update(deletionTimestamp=now_ts(), deletionGracePeriodSeconds=0)
        so = StoredObject(obj, self._rv)
        self._record(plural, "DELETED", so)
        return so

    def _commit(self, plural: str, key, obj: dict, etype: str) -> StoredObject:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        so = StoredObject(obj, self._rv)
        data = self._data[plural]
        prev = data.get(key)
        is_new = prev is None
        data[key] = so
        srt = self._sorted[plural]
        if srt is not None:
            if is_new:
                self._sorted[plural] = None
            else:
                i = bisect.bisect_left(srt, key, key=lambda s: s.key)
                new_list = list(srt)
                new_list[i] = so
                self._sorted[plural] = new_list
        self._record(plural, etype, so, prev)
        return so

    def _record(self, plural: str, etype: str, so: StoredObject, prev: StoredObject | None = None) -> None:
        self._history.append((so.rv, plural, etype, so, prev))
        self._history_rvs.append(so.rv)
        if len(self._history) > self.history_limit * 1.1:
            drop = len(self._history) - self.history_limit
            self._compacted = self._history[drop - 1][0]
            del self._history[:drop]
            del self._history_rvs[:drop]
            self._expire_snapshots()
        for w in self._watchers[plural]:
            w.queue.put((etype, so, prev))

    def load(self, objects: list[dict]) -> int:
        """Bulk-load objects (no watch history is kept for them); takes ownership of the dicts. Returns count."""
        from .resources import KIND_ORDER, for_object

        n = 0
        ordered = sorted(objects, key=lambda o: KIND_ORDER.index(rt.plural) if (rt := for_object(o)) else 99)
        with self.lock:
            for o in ordered:
                rt = for_object(o)
                if rt is None:
                    continue
                self.create(rt.plural, o, load=True)
                n += 1
            self.compact()
        return n

    # ------------------------------------------------------------------ compaction / snapshots
    def compact(self) -> None:
        """Drop all watch history up to now; invalidates list snapshots."""
        with self.lock:
            self._compacted = self._rv
            self._history.clear()
            self._history_rvs.clear()
            self._snapshots.clear()

    def _expire_snapshots(self) -> None:
        now = time.monotonic()
        for sid in [s for s, (rv, ts, _) in self._snapshots.items() if rv < self._compacted or now - ts > SNAPSHOT_TTL]:
            del self._snapshots[sid]

    def list(
        self,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> tuple[list[StoredObject], int, str | None, int | None]:
        """Return (items, list_rv, continue, remainingItemCount). A `resource_version` (without a continue token) is
        "not older than": one ahead of the store is refused like the API server does."""
        self._rt(plural)
        if not continue_token:
            self.check_reached(resource_version)
        if continue_token:
            try:
                tok = orjson.loads(base64.urlsafe_b64decode(continue_token.encode() + b"=="))
                sid, start, rv = tok["s"], int(tok["o"]), int(tok["rv"])
            except (ValueError, KeyError, TypeError) as e:
                raise ApiError(400, "BadRequest", "continue key is not valid: invalid continue token") from e
            with self.lock:
                self._expire_snapshots()
                snap = self._snapshots.get(sid)
                if snap is None or rv < self._compacted:
                    raise expired(
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter."
                    )
                self._snapshots.move_to_end(sid)
            items = snap[2]
            list_rv = snap[0]
        else:
            flt = make_filter(namespace, label_selector, field_selector)
            with self.lock:
                base = self.sorted_objects(plural)
                list_rv = self._rv
            items = base if flt is None else [so for so in base if flt(so)]
            start = 0
            sid = None
        if not limit or start + limit >= len(items):
            return items[start:], list_rv, None, None
        if sid is None:
            sid = uuid.uuid4().hex
            with self.lock:
                self._snapshots[sid] = (list_rv, time.monotonic(), items)
                while len(self._snapshots) > SNAPSHOT_LIMIT:
                    self._snapshots.popitem(last=False)
        end = start + limit
        token = base64.urlsafe_b64encode(orjson.dumps({"rv": list_rv, "s": sid, "o": end})).rstrip(b"=").decode()
        return items[start:end], list_rv, token, len(items) - end

    # ------------------------------------------------------------------ watch
    def watch(self, plural: str, resource_version: str | None) -> tuple[Watcher, list[tuple[str, StoredObject]]]:
        """Register a watcher; returns it and the backlog of events to send first."""
        self._rt(plural)
        with self.lock:
            w = Watcher(self, plural)
            if not resource_version or resource_version == "0":
                backlog = [("ADDED", so, None) for so in self.sorted_objects(plural)]
            else:
                rv = parse_rv(resource_version)
                self.check_reached(resource_version)
                if rv < self._compacted:
                    raise expired(f"too old resource version: {rv} ({self._compacted + 1})")
                i = bisect.bisect_right(self._history_rvs, rv)
                backlog = [(t, so, prev) for (_, p, t, so, prev) in self._history[i:] if p == plural]
            self._watchers[plural].add(w)
            return w, backlog

    def _unregister(self, w: Watcher) -> None:
        with self.lock:
            self._watchers[w.plural].discard(w)

    def stop_watchers(self) -> None:
        with self.lock:
            for ws in self._watchers.values():
                for w in ws:
                    w.stop()

    def current_rv_if_drained(self, w: Watcher) -> int | None:
        """The global RV if the watcher has consumed every event so far (safe bookmark RV)."""
        with self.lock:
            return self._rv if w.queue.empty() else None
