"""Patch flavours (JSON merge, strategic merge, JSON patch) and server-side apply with managedFields."""

from __future__ import annotations

import copy
import datetime as dt

import orjson

# Lists merged by key in strategic merge patch and treated as "map lists" by server-side apply.
LIST_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "name",
    "ports": "containerPort",
    "conditions": "type",
    "taints": "key",
    "tolerations": "key",
    "devices": "name",
    "requests": "name",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "ownerReferences": "uid",
    "finalizers": None,
}
# Identity/system fields never owned by managers.
UNOWNED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
}


class PatchError(Exception):
    """Raised for malformed or failing patches (maps to 422/400)."""

    def __init__(self, message: str, code: int = 422, reason: str = "Invalid"):
        super().__init__(message)
        self.code = code
        self.reason = reason


class ApplyConflictError(Exception):
    """Server-side apply ownership conflicts."""

    def __init__(self, conflicts: list[tuple[str, str]]):
        self.conflicts = conflicts  # (manager, field path)
        n = len(conflicts)
        parts = [f'conflict with "{m}": {f}' for m, f in conflicts]
        if n == 1:
            msg = f"Apply failed with 1 conflict: {parts[0]}"
        else:
            msg = f"Apply failed with {n} conflicts: " + "\n".join(parts)
        super().__init__(msg)


# ---------------------------------------------------------------------------------------------- merge patch
def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target, patch, field_name: str | None = None):
    """Strategic merge patch for the list keys we know; other lists replace."""
    if isinstance(patch, list):
        key = LIST_KEYS.get(field_name or "")
        if key and isinstance(target, list) and all(isinstance(x, dict) for x in patch):
            return _merge_keyed_list(target, patch, key)
        return copy.deepcopy([x for x in patch if not (isinstance(x, dict) and "$patch" in x)])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if k.startswith("$setElementOrder/"):
            continue
        if v is None:
            result.pop(k, None)
        else:
            merged = strategic_merge_patch(result.get(k), v, k)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
    return result


def _merge_keyed_list(target: list, patch: list, key: str) -> list:
    out = [copy.deepcopy(x) for x in target]
    for item in patch:
        if key not in item:
            out.append(copy.deepcopy(item))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge_patch({}, item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


# ---------------------------------------------------------------------------------------------- JSON patch
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}", 400, "BadRequest")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, parts: list[str]):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"path /{'/'.join(parts)} does not exist")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError) as e:
                raise PatchError(f"path /{'/'.join(parts)} does not exist") from e
        else:
            raise PatchError(f"path /{'/'.join(parts)} does not exist")
    return cur


def _add(doc, parts, value, replace=False):
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: /{'/'.join(parts)}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                i = int(last)
            except ValueError as e:
                raise PatchError(f"invalid index {last!r}") from e
            if i < 0 or i > len(parent) or (replace and i >= len(parent)):
                raise PatchError(f"index {i} out of range")
            if replace:
                parent[i] = value
            else:
                parent.insert(i, value)
    else:
        raise PatchError(f"path /{'/'.join(parts)} does not exist")
    return doc


def _remove(doc, parts):
    if not parts:
        raise PatchError("cannot remove the document root")
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}")
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError) as e:
            raise PatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}") from e
    raise PatchError(f"path /{'/'.join(parts)} does not exist")


def json_patch(doc, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations", 400, "BadRequest")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("invalid JSON patch operation", 400, "BadRequest")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "replace":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "test":
            if _resolve(doc, parts) != op.get("value"):
                raise PatchError(f"testing value /{'/'.join(parts)} failed")
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_resolve(doc, src))
            if kind == "move":
                _remove(doc, src)
            doc = _add(doc, parts, value)
        else:
            raise PatchError(f"unexpected kind: {kind}", 400, "BadRequest")
    return doc


# ---------------------------------------------------------------------------------------------- field sets
# A path is a tuple of elements: ("f", name) for map fields, ("k", json-key) for keyed list items.
def leaf_paths(obj, prefix=(), skip_status=False) -> set[tuple]:
    """Leaf field paths of an object, in managedFields terms (identity metadata excluded)."""
    out: set[tuple] = set()
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if not prefix and (k in ("apiVersion", "kind") or (skip_status and k == "status")):
            continue
        if not prefix and k == "metadata" and isinstance(v, dict):
            for mk, mv in v.items():
                if mk not in UNOWNED_META:
                    _collect(mv, (("f", "metadata"), ("f", mk)), mk, out)
            continue
        _collect(v, (*prefix, ("f", k)), k, out)
    return out


def _collect(v, path, name, out):
    if isinstance(v, dict):
        for k, sub in v.items():
            _collect(sub, (*path, ("f", k)), k, out)
        return
    key = LIST_KEYS.get(name)
    if key and isinstance(v, list) and v and all(isinstance(x, dict) and key in x for x in v):
        for item in v:
            ipath = (*path, ("k", orjson.dumps({key: item[key]}, option=orjson.OPT_SORT_KEYS).decode()))
            out.add((*ipath, (".", "")))
            for k, sub in item.items():
                _collect(sub, (*ipath, ("f", k)), k, out)
        return
    out.add(path)


def get_path(obj, path):
    """Value at a managed-field path, or a sentinel _MISSING."""
    cur = obj
    for kind, key in path:
        if kind == ".":
            return cur
        if kind == "f":
            if not isinstance(cur, dict) or key not in cur:
                return _MISSING
            cur = cur[key]
        else:
            if not isinstance(cur, list):
                return _MISSING
            kv = orjson.loads(key)
            ((kname, kval),) = kv.items()
            cur = next((x for x in cur if isinstance(x, dict) and x.get(kname) == kval), _MISSING)
            if cur is _MISSING:
                return cur
    return cur


_MISSING = object()


def remove_path(obj, path) -> None:
    """Remove the field at path (and empty parents are kept)."""
    if path and path[-1][0] == ".":
        path = path[:-1]
    if not path:
        return
    parent = get_path(obj, path[:-1])
    kind, key = path[-1]
    if kind == "f" and isinstance(parent, dict):
        if isinstance(parent.get(key), dict) and parent[key]:
            return
        parent.pop(key, None)
    elif kind == "k" and isinstance(parent, list):
        ((kname, kval),) = orjson.loads(key).items()
        parent[:] = [x for x in parent if not (isinstance(x, dict) and x.get(kname) == kval)]


def path_str(path) -> str:
    parts = []
    for kind, key in path:
        if kind == "f":
            parts.append("." + key)
        elif kind == "k":
            kv = orjson.loads(key)
            parts.append("[" + ",".join(f"{k}={orjson.dumps(v).decode()}" for k, v in kv.items()) + "]")
    return "".join(parts)


def to_fields_v1(paths: set[tuple]) -> dict:
    root: dict = {}
    for p in sorted(paths):
        cur = root
        for kind, key in p:
            name = "." if kind == "." else f"{kind}:{key}"
            cur = cur.setdefault(name, {})
    return root


def from_fields_v1(doc: dict, prefix=()) -> set[tuple]:
    out: set[tuple] = set()
    for name, sub in (doc or {}).items():
        if name == ".":
            out.add((*prefix, (".", "")))
            continue
        kind, _, key = name.partition(":")
        path = (*prefix, (kind, key))
        if sub:
            out |= from_fields_v1(sub, path)
        else:
            out.add(path)
    return out


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _managers(obj: dict) -> list[dict]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _entry_paths(entry: dict) -> set[tuple]:
    return from_fields_v1(entry.get("fieldsV1") or {})


def _write_managers(obj: dict, entries: list[tuple[dict, set]]) -> None:
    out = []
    for entry, paths in entries:
        if not paths:
            continue
        e = {k: v for k, v in entry.items() if k not in ("fieldsV1",)}
        e["fieldsType"] = "FieldsV1"
        e["fieldsV1"] = to_fields_v1(paths)
        out.append(e)
    obj.setdefault("metadata", {})
    if out:
        obj["metadata"]["managedFields"] = out
    else:
        obj["metadata"].pop("managedFields", None)


def _subresource_of(entry: dict) -> str:
    return entry.get("subresource", "")


def record_update(old: dict | None, new: dict, manager: str, api_version: str, subresource: str = "") -> dict:
    """Record an Update operation by `manager`: it takes ownership of every changed leaf field."""
    new = dict(new)
    new["metadata"] = dict(new.get("metadata") or {})
    skip_status = subresource == ""
    new_leaves = leaf_paths(new, skip_status=False)
    if subresource == "status":
        changed = {p for p in new_leaves if p[0] == ("f", "status") and get_path(new, p) != get_path(old or {}, p)}
    else:
        changed = {
            p
            for p in new_leaves
            if (not skip_status or p[0] != ("f", "status")) and get_path(new, p) != get_path(old or {}, p)
        }
    entries = [(e, _entry_paths(e)) for e in _managers(old or new)]
    result = []
    mine = None
    for e, paths in entries:
        paths = {p for p in paths if p in new_leaves or (p[-1][0] == "." and get_path(new, p) is not _MISSING)}
        if e.get("manager") == manager and e.get("operation") == "Update" and _subresource_of(e) == subresource:
            mine = (e, paths)
            continue
        result.append((e, paths - changed))
    if mine is None:
        mine = ({"manager": manager, "operation": "Update"}, set())
    entry = dict(mine[0])
    entry.update({"apiVersion": api_version, "time": _now()})
    if subresource:
        entry["subresource"] = subresource
    paths = mine[1] | changed
    if old is None:
        paths = {p for p in new_leaves if (not skip_status or p[0] != ("f", "status"))}
    result.append((entry, paths))
    _write_managers(new, result)
    return new


def structured_merge(target, applied, field_name: str | None = None):
    """Merge an applied configuration into the live object (maps recurse, keyed lists merge, others replace)."""
    if isinstance(applied, dict):
        result = dict(target) if isinstance(target, dict) else {}
        for k, v in applied.items():
            result[k] = structured_merge(result.get(k), v, k)
        return result
    key = LIST_KEYS.get(field_name or "")
    if (
        key
        and isinstance(applied, list)
        and isinstance(target, list)
        and all(isinstance(x, dict) and key in x for x in applied)
    ):
        out = [copy.deepcopy(x) for x in target]
        for item in applied:
            idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
            if idx is None:
                out.append(copy.deepcopy(item))
            else:
                out[idx] = structured_merge(out[idx], item)
        return out
    return copy.deepcopy(applied)


def server_side_apply(
    current: dict | None, applied: dict, manager: str, force: bool, api_version: str, subresource: str = ""
) -> dict:
    """Apply `applied` as `manager`; raises ApplyConflictError; returns the new object (managedFields updated)."""
    skip_status = subresource == ""
    applied = copy.deepcopy(applied)
    if skip_status:
        applied.pop("status", None)
    new_paths = leaf_paths(applied, skip_status=skip_status)
    base = copy.deepcopy(current) if current else {}
    entries = [(e, _entry_paths(e)) for e in _managers(base)]
    conflicts = []
    for e, paths in entries:
        if e.get("manager") == manager and e.get("operation") == "Apply":
            continue
        for p in sorted(new_paths & paths):
            if p[-1][0] == ".":
                continue
            if get_path(base, p) != get_path(applied, p):
                conflicts.append((e.get("manager", ""), p))
    if conflicts and not force:
        raise ApplyConflictError([(m, path_str(p)) for m, p in conflicts])
    conflict_paths = {p for _, p in conflicts}
    # Fields this manager owned previously but no longer applies: remove unless someone else owns them.
    previous = set()
    for e, paths in entries:
        if e.get("manager") == manager and e.get("operation") == "Apply" and _subresource_of(e) == subresource:
            previous = paths
    others: set = set()
    for e, paths in entries:
        if not (e.get("manager") == manager and e.get("operation") == "Apply" and _subresource_of(e) == subresource):
            others |= paths
    merged = structured_merge(base, applied)
    for p in sorted(previous - new_paths - others, key=len, reverse=True):
        remove_path(merged, p)
    result = []
    for e, paths in entries:
        if e.get("manager") == manager and e.get("operation") == "Apply" and _subresource_of(e) == subresource:
            continue
        result.append((e, paths - conflict_paths))
    entry = {"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": _now()}
    if subresource:
        entry["subresource"] = subresource
    result.append((entry, new_paths))
    merged.setdefault("metadata", {})
    _write_managers(merged, result)
    return merged
