"""The Kubernetes protobuf envelope, decoded by hand for the two kinds kubectl sends as protobuf (create namespace,
create configmap): the wire format (varints, length-delimited fields, map entries), ObjectMeta and a ConfigMap.
Every other kind is JSON only."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from .errors import ApiError

PROTOBUF_KINDS = ("Namespace", "ConfigMap")


def _pb_fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """Yield (field number, wire type, value) from a protobuf message: an int for a varint, bytes otherwise."""
    i, n = 0, len(buf)
    val: int | bytes
    while i < n:
        key, i = _pb_varint(buf, i)
        fno, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _pb_varint(buf, i)
        elif wt == 2:
            ln, i = _pb_varint(buf, i)
            val, i = buf[i : i + ln], i + ln
        elif wt == 1:
            val, i = buf[i : i + 8], i + 8
        elif wt == 5:
            val, i = buf[i : i + 4], i + 4
        else:
            raise ValueError("unsupported wire type")
        yield fno, wt, val


def _pb_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _pb_map_entry(buf: bytes) -> tuple[str, bytes]:
    entry = {f: v for f, _, v in _pb_fields(buf)}
    return entry.get(1, b"").decode(), entry.get(2, b"")


def _decode_object_meta(buf: bytes) -> dict[str, Any]:
    """The ObjectMeta fields a create request carries: names, labels and annotations."""
    meta: dict[str, Any] = {}
    for f, _, v in _pb_fields(buf):
        if f in (1, 2, 3) and v:
            meta[{1: "name", 2: "generateName", 3: "namespace"}[f]] = v.decode()
        elif f in (11, 12):
            key, value = _pb_map_entry(v)
            meta.setdefault("labels" if f == 11 else "annotations", {})[key] = value.decode()
    return meta


def _decode_configmap_field(obj: dict[str, Any], f: int, v: bytes | int) -> None:
    """ConfigMap: data = 2 (map<string,string>), binaryData = 3 (map<string,bytes>), immutable = 4 (bool)."""
    if f == 4 and isinstance(v, int):
        obj["immutable"] = bool(v)
    elif f in (2, 3) and isinstance(v, bytes):
        key, value = _pb_map_entry(v)
        if f == 2:
            obj.setdefault("data", {})[key] = value.decode()
        else:
            obj.setdefault("binaryData", {})[key] = base64.b64encode(value).decode()


def decode_protobuf(raw: bytes) -> dict[str, Any]:
    """Decode a Kubernetes protobuf envelope (kubectl create namespace / configmap): a Namespace's metadata, a
    ConfigMap's metadata, data, binaryData and immutable."""
    if not raw.startswith(b"k8s\x00"):
        raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
    try:
        env = {f: v for f, _, v in _pb_fields(raw[4:])}
        type_meta = {f: v.decode() for f, _, v in _pb_fields(env.get(1, b""))}
        api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        if api_version != "v1" or kind not in PROTOBUF_KINDS:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"kubesim only accepts JSON bodies for {kind or 'this kind'}"
                " (protobuf is supported for Namespace and ConfigMap only)",
            )
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {}}
        for f, _, v in _pb_fields(env.get(2, b"")):
            if f == 1:
                obj["metadata"] = _decode_object_meta(v)
            elif kind == "ConfigMap":
                _decode_configmap_field(obj, f, v)
        return obj
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {e}") from e
